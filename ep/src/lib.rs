//! Expert parallelism on ferroshmem: a mixture-of-experts layer's token dispatch and combine
//! across the GPU PEs of a job, DeepEP's model in Rust, built on ferroshmem's device library.
//!
//! # The model
//!
//! Experts are spread evenly over the PEs: with `E` experts and `n` PEs, PE `p` owns experts
//! `p·E/n .. (p+1)·E/n`. Each PE routes its tokens to their top-k experts; a
//! [dispatch](Buffer::dispatch) sends every token once to each PE that owns one of its
//! experts; the PE runs its experts on what it [received](Dispatch) and gives one row back per
//! row received; a [combine](Buffer::combine) returns to each token's PE the sum of those rows.
//!
//! # Normal mode
//!
//! The throughput mode (thousands of tokens per PE). A dispatch works out where its tokens go
//! ([`Buffer::layout`] is that step alone), tells every PE how many rows to expect from it and
//! for which experts, then moves the rows: each PE's rows land in every receiver's region in
//! PE order, each PE's in token order. The [`reference`](mod@reference) module computes the same results on
//! the host.
//!
//! # Failures
//!
//! Bad shapes and expert indices are typed errors ([`Error::InvalidArgument`]), and they are
//! collective: when one PE's input is refused, nothing moves on any PE, every PE's call fails
//! naming it, and the buffer stays usable. Waits end: a lost peer fails the call with
//! [`Error::PeerLost`], a PE that never comes with [`Error::Timeout`] after
//! [`Config::timeout`]; the kernels then give up their waits and the buffer is unusable.
//!
//! # Low-latency mode
//!
//! For decoding (up to a few hundred tokens per PE): no layout step and no exchange of
//! counts. [`Buffer::low_latency_dispatch`] puts every (token, expert) pair straight into its
//! place among the expert's packed rows on the expert's PE (taken from a counter there) and
//! signals each expert's count; [`LowLatencySend::receive`] (the receive hook, callable later
//! so that compute overlaps the transfer) waits for the signals; [`Buffer::low_latency_combine`]
//! sends each row back and sums every token's rows weighted by its top-k weights on the
//! token's own PE. A combine in place (the experts' results left in the received rows) may
//! instead let each token's PE read its rows where they lie on the PEs of its node
//! ([`LowLatencyCombine::Pull`], by default above hidden [`PULL_ABOVE_HIDDEN`]): a third of
//! the traffic, for a wait at the next dispatch until every PE of the node has read.
//! [`Buffer::clock_kernels`] times the low-latency kernels on the GPU's own clock
//! ([`KernelClocks`]), as a profiler's kernel times do.
//!
//! # CUDA graphs
//!
//! A whole low-latency round — dispatch, receive hook, the caller's expert kernels, combine
//! — can be captured once ([`Buffer::capture_low_latency`]) and replayed with one launch
//! ([`LowLatencyGraph::replay`]): the kernels keep their call numbers in device memory and
//! advance them themselves. The normal mode cannot be captured (its receivers learn their
//! row counts on the host, as DeepEP's).
//!
//! # Across nodes
//!
//! A job that spans nodes takes the device library's network path for PEs on other nodes
//! (no mapping: `fsh_ptr` is null for them). What goes there is staged in the sender's part
//! of the symmetric region and put (rows, top-k, weights, scales, low-latency rows per pair);
//! the normal combine fetches those PEs' rows into per-warp staging slots. A low-latency
//! dispatch puts a row for another node into the receiver's landing records of (expert,
//! source), numbered by the sender itself, and the receiver moves them in behind its own
//! node's rows once every signal is in: nothing crosses nodes but writes (signals included),
//! since under the `cpu` NIC handler a remote atomic runs as a kernel on the target's GPU,
//! which that PE's own waiting kernels can hold back. PEs of the same node still copy through
//! their mappings. [`Buffer::bytes_needed`] says how much more such a buffer takes.
//!
//! # FP8
//!
//! Normal-mode dispatch moves FP8 rows with their scales as given ([`Rows::Fp8`], DeepEP's
//! `(x_fp8, x_scales)`); the low-latency dispatch casts BF16 rows to FP8 on the way
//! ([`LowLatencyInput::fp8`]; [`fp8`] is the host's reference of the cast).
//!
//! [`Error::InvalidArgument`]: ferroshmem_runtime::Error::InvalidArgument
//! [`Error::PeerLost`]: ferroshmem_runtime::Error::PeerLost
//! [`Error::Timeout`]: ferroshmem_runtime::Error::Timeout

mod bf16;
mod buffer;
mod clocks;
mod combine;
mod config;
mod dispatch;
pub mod fp8;
mod kernels;
mod layout;
mod low_latency;
pub mod reference;
mod rows;

pub use bf16::Bf16;
pub use buffer::Buffer;
pub use clocks::KernelClocks;
pub use config::{
    Config, LowLatencyCombine, MAX_BLOCKS, MAX_EXPERTS, MAX_HIDDEN, MAX_PES, MAX_TOP_K,
    PULL_ABOVE_HIDDEN,
};
pub use dispatch::{Dispatch, DispatchInput, Handle, Rows};
pub use layout::Layout;
pub use low_latency::{
    CapturedReceive, LowLatencyCombining, LowLatencyDispatch, LowLatencyGraph, LowLatencyHandle,
    LowLatencyInput, LowLatencyReplay, LowLatencyRound, LowLatencySend,
};
