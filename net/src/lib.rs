//! ferroshmem's fabric transport: the route to PEs on other hosts.
//!
//! # What it owns
//! A [`Fabric`] is one PE's endpoint on a fabric library loaded at run time (libfabric: the
//! `tcp;ofi_rxm` provider over TCP, `verbs;ofi_rxm`, `efa` or `cxi` on clusters), its
//! registered symmetric-heap segment, and the progress thread that completes its operations
//! and delivers the data peers' writes carry. Remote operations — writes, reads, atomics,
//! writes with data — are futures resolved by that thread.
//!
//! # Loading
//! Nothing is linked at build time: [`Fabric::open`] loads `libfabric.so.1` and fails with
//! [`Error::Config`](ferroshmem_runtime::Error::Config), saying what to install, where it is
//! missing. The provider is asked for reliable datagrams, RMA, 64-bit atomics and thread
//! safety, with progress driven by the endpoint's own thread: it sleeps in the completion
//! queue's wait (on the provider's sockets, for `tcp;ofi_rxm`) and serves peers' operations
//! as they arrive, so that a PE's memory is served while it sleeps, with no core spinning.
//! A task waiting for what the fabric brings reads the queue itself instead, woken by the
//! queue's wait object on its own event loop, while the thread stands aside: the arrival
//! then wakes the thread that wants it and no other (the `progress` module). An operation the
//! provider has no room for yet waits, in order per peer, for the next read of the queue
//! to post it (the `room` module), for at most [`ROOM_DEADLINE`].
//! (The provider's automatic progress adds a thread of its own, and a thread wake-up, to
//! every message: in one alternating run on a loaded 2-vCPU machine, a world barrier of 2 PEs
//! on two hosts took about 1.6 times as long with it.)
//!
//! # The runtime's remote route
//! [`FabricRemote`] is the runtime's `Remote` transport over a [`Fabric`]: the data plane's
//! operations on PEs of other hosts become fabric operations, and [`wake_on_notice`], called
//! with the data of peers' writes, wakes this PE's waiters sleeping on the bytes they wrote.
//!
//! # Not here
//! Which PEs go through the fabric and the bootstrap exchange of names and keys belong to the
//! layers that use this crate.

mod ffi;
mod lane;
mod progress;
mod remote;
mod room;
mod transport;
mod unsettled;

pub use ffi::{Library, Operation, LIBRARY_VAR};
pub use progress::Driver;
pub use remote::{notice, wake_on_notice, FabricRemote, Target};
pub use room::ROOM_DEADLINE;
pub use transport::{Ended, Fabric, FabricOptions, Hooks, Peer, Registered};

/// The atomic operations of [`Operation::Atomic`] and [`Operation::FetchAtomic`].
pub mod atomic {
    pub use crate::ffi::types::{
        FI_ATOMIC_READ as READ, FI_ATOMIC_WRITE as WRITE, FI_BAND as AND, FI_BOR as OR,
        FI_BXOR as XOR, FI_SUM as SUM,
    };
}
