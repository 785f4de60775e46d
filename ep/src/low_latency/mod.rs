//! Low-latency mode (DeepEP's `low_latency_dispatch` / `low_latency_combine`): no layout
//! step and no exchange of counts, each (token, expert) pair put straight into its expert's
//! staging rows with a signal per expert and source; a receive ([`LowLatencySend::receive`])
//! by the send's own kernel or, with [`LowLatencyInput::hook`], by a hook of its own queued
//! later, so that compute overlaps the transfer; and a combine that weighs each expert's row
//! by the token's top-k weight on the token's own PE.
//!
//! Received rows come packed per local expert (`L × n·T` rows, DeepEP's `packed_recv_x`),
//! written in place by the senders (no copy on the receiver): each row's place is taken from
//! the receiver's per-expert counter, so the order of an expert's rows is the order senders
//! took places, and each row carries its source PE and (token × top_k + slot).
//! [`LowLatencyDispatch::rows_from`] says how many rows each source sent each expert.
//! Where combines pull ([`crate::LowLatencyCombine`]), the BF16 rows go into one of two
//! areas, each dispatch the other: its rows may land while the PEs of the node still read the
//! previous round's results where they lie, so that no dispatch waits for those reads (a
//! captured round, which writes the same area at every replay, does; so does DeepEP's
//! double buffer). [`LowLatencyDispatch::recv_x_ptr`] says where this dispatch's rows lie.
//!
//! Cast to FP8 ([`LowLatencyInput::fp8`]), each (token, expert) pair's warp casts the row on
//! the way into the expert's packed rows (a kernel ahead to cast each token once, tried,
//! cost more in its kernel boundary than the casts it saved).

use std::marker::PhantomData;

use bytemuck::Pod;
use ferroshmem_gpu::cudarc::driver::CudaStream;
use ferroshmem_gpu::{DeviceBuffer, GpuPe, HostBuffer, LocalMem};
use ferroshmem_runtime::{Error, Result};

use crate::bf16::Bf16;
use crate::buffer::Buffer;
use crate::config::{Config, LowLatencyRegions};

mod args;
mod graph;

pub use graph::{CapturedReceive, LowLatencyGraph, LowLatencyReplay, LowLatencyRound};

/// The low-latency mode's state on one PE.
#[derive(Debug)]
pub(crate) struct LowLatencyState {
    /// Per expert: rows sent this call; then the first bad token; then rows received per
    /// local expert; then whether a PE refused its combine input.
    scratch: DeviceBuffer<i32>,
    /// Rows per local expert, then rows per (local expert, source), -1 for a refusing source.
    counts_out: HostBuffer<i32>,
    /// This PE's send status: status, first bad token, its value.
    status: HostBuffer<i32>,
    /// The call numbers the kernels read and advance: dispatches, then combines, received.
    calls: DeviceBuffer<u64>,
    /// Each (token, slot) pair's place among its expert's rows, noted by the send for the
    /// reduce of a combine that reads the rows where they lie.
    sent_places: DeviceBuffer<i32>,
    dispatches: u64,
    combines: u64,
    /// The packed rows' area the latest dispatch wrote (0 or 1: see
    /// [`LowLatencyRegions::packed`]).
    area: usize,
    /// The dispatch whose combine is due, if any.
    awaiting_combine: Option<u64>,
}

impl LowLatencyState {
    /// Sets the state up for `config` on `gpu` (not collective).
    pub async fn new(gpu: &GpuPe, config: &Config) -> Result<Self> {
        let (n, experts) = (gpu.n_pes(), config.num_experts);
        let local = experts / n;
        let mut initial = vec![0i32; experts + 1 + local + 1];
        initial[experts] = i32::MAX;
        let mut scratch = DeviceBuffer::new(gpu.context(), initial.len())?;
        gpu.copy_local(
            &mut scratch,
            &HostBuffer::from_slice(gpu.context(), &initial)?,
        )
        .await?;
        let mut calls = DeviceBuffer::new(gpu.context(), 2)?;
        gpu.copy_local(&mut calls, &HostBuffer::<u64>::new(gpu.context(), 2)?)
            .await?;
        let pairs = config.max_tokens * config.top_k;
        let mut sent_places = DeviceBuffer::new(gpu.context(), pairs)?;
        gpu.copy_local(
            &mut sent_places,
            &HostBuffer::<i32>::new(gpu.context(), pairs)?,
        )
        .await?;
        Ok(LowLatencyState {
            scratch,
            calls,
            sent_places,
            counts_out: HostBuffer::new(gpu.context(), local + local * n)?,
            status: HostBuffer::new(gpu.context(), 3)?,
            dispatches: 0,
            combines: 0,
            area: 0,
            awaiting_combine: None,
        })
    }
}

/// One PE's input to a low-latency dispatch, on its GPU.
#[derive(Debug, Clone, Copy)]
pub struct LowLatencyInput<'a> {
    /// Token rows: `tokens × hidden`.
    pub x: &'a DeviceBuffer<Bf16>,
    /// Each token's experts: `tokens × top_k`, distinct; -1 is an empty slot.
    pub topk_idx: &'a DeviceBuffer<i64>,
    /// Tokens to dispatch (at most `max_tokens`).
    pub tokens: usize,
    /// Whether to cast the rows to FP8 on the way (e4m3, one scale per 128 elements, as
    /// [`crate::fp8::quantize`]; DeepEP's `use_fp8`; `hidden` a multiple of 128).
    pub fp8: bool,
    /// Whether a receive hook of its own waits for the rows (DeepEP's `return_recv_hook`):
    /// `true`, the send ends once this PE's rows are out and
    /// [`LowLatencySend::queue_receive`] queues the wait, so that work queued between them
    /// overlaps the transfer; `false`, the send's last block waits for the rows itself (one
    /// kernel boundary fewer, the lower latency) and `queue_receive` has nothing to queue.
    pub hook: bool,
}

/// A low-latency dispatch whose rows are on their way: [`receive`](LowLatencySend::receive)
/// waits for them (DeepEP's receive hook). Holds the buffer.
#[derive(Debug)]
pub struct LowLatencySend<'a> {
    /// Taken by [`LowLatencySend::receive`]; still here when the send is dropped unreceived.
    buffer: Option<&'a mut Buffer>,
    /// The inputs the queued kernels read stay borrowed.
    _input: PhantomData<LowLatencyInput<'a>>,
    receive_queued: bool,
    refused: Option<Error>,
    tokens: usize,
    fp8: bool,
    /// The packed rows' area the rows go to.
    area: usize,
}

/// What this PE's experts received from a low-latency dispatch.
#[derive(Debug)]
pub struct LowLatencyDispatch<'a> {
    buffer: &'a Buffer,
    /// The packed rows' area the rows lie in.
    area: usize,
    fp8: bool,
    recv_count: Vec<usize>,
    rows_from: Vec<usize>,
    handle: LowLatencyHandle,
}

/// What a low-latency combine needs of its dispatch.
#[derive(Debug, Clone, Copy)]
pub struct LowLatencyHandle {
    tokens: usize,
    dispatch: u64,
    /// The buffer that made it.
    buffer: u64,
}

impl LowLatencyHandle {
    /// Tokens this PE dispatched.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
}

impl Buffer {
    fn low_latency_regions(&self) -> Result<LowLatencyRegions> {
        self.regions.low_latency.ok_or_else(|| {
            Error::InvalidArgument(
                "this ep buffer does not serve the low-latency mode (create it with Config::low_latency)".into(),
            )
        })
    }

    /// Starts a low-latency dispatch: queues the puts of every (token, expert) pair and
    /// returns at once; [`LowLatencySend::receive`] waits for what this PE's experts get.
    /// Collective. Every low-latency dispatch must be followed by its
    /// [`low_latency_combine`](Buffer::low_latency_combine) before the next.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the buffer does not serve the mode or a dispatch
    /// still awaits its combine (nothing queued: a program error, the same on every PE);
    /// a refused input (too many tokens, short inputs; out-of-range or repeated experts
    /// found on the GPU) fails [`LowLatencySend::receive`] on every PE, moving nothing.
    pub fn low_latency_dispatch<'a>(
        &'a mut self,
        input: LowLatencyInput<'a>,
    ) -> Result<LowLatencySend<'a>> {
        self.usable()?;
        self.low_latency_regions()?;
        let state = self
            .low_latency
            .as_mut()
            .expect("state of a low-latency buffer");
        if let Some(d) = state.awaiting_combine {
            return Err(Error::InvalidArgument(format!(
                "low-latency dispatch {d} has not been combined yet"
            )));
        }
        state.dispatches += 1;
        state.area ^= 1;
        let area = state.area;
        let refused = self.check_send(&input).err();
        let tokens = if refused.is_some() { 0 } else { input.tokens };
        let args = self.low_latency_send_args(&input, refused.is_some(), (area, false));
        let receive = (!input.hook).then(|| self.low_latency_receive_args(input.fp8, area));
        self.start();
        if let Err(e) =
            self.kernels
                .low_latency_send(&self.stream, &args, &self.places(), receive.as_ref())
        {
            return Err(self.broke(e));
        }
        Ok(LowLatencySend {
            _input: PhantomData,
            receive_queued: receive.is_some(),
            buffer: Some(self),
            refused,
            tokens,
            fp8: input.fp8,
            area,
        })
    }

    /// Sends back `y` (the packed rows' results, `L × n·T` rows as
    /// [`LowLatencyDispatch::recv_x_ptr`] lays them out; `None`: written there in place)
    /// and writes into `out` each of this PE's tokens: the sum over its top-k slots of
    /// weight × its expert's row, in `f32` in slot order, rounded once to bf16. `topk_idx`
    /// and `topk_weights` are the dispatch's. Collective.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a handle that is not of the dispatch awaiting its
    /// combine, short inputs, or another PE's refused input (nothing summed);
    /// [`Error::PeerLost`] or [`Error::Timeout`] as for dispatch.
    pub async fn low_latency_combine(
        &mut self,
        handle: &LowLatencyHandle,
        y: Option<&DeviceBuffer<Bf16>>,
        topk: (&DeviceBuffer<i64>, &DeviceBuffer<f32>),
        out: &mut DeviceBuffer<Bf16>,
    ) -> Result<()> {
        self.queue_low_latency_combine(handle, y, topk, out)?
            .finish()
            .await
    }

    /// Queues [`Buffer::low_latency_combine`] on the buffer's stream and returns at once
    /// (the on-stream form: kernels queued after it on the stream see `out`).
    ///
    /// # Errors
    /// As [`Buffer::low_latency_combine`], the refusals at
    /// [`finish`](LowLatencyCombining::finish).
    pub fn queue_low_latency_combine<'a>(
        &'a mut self,
        handle: &LowLatencyHandle,
        y: Option<&'a DeviceBuffer<Bf16>>,
        topk: (&'a DeviceBuffer<i64>, &'a DeviceBuffer<f32>),
        out: &'a mut DeviceBuffer<Bf16>,
    ) -> Result<LowLatencyCombining<'a>> {
        self.usable()?;
        self.low_latency_regions()?;
        let refused = self.check_low_latency_combine(handle, y, topk, out).err();
        let state = self
            .low_latency
            .as_mut()
            .expect("state of a low-latency buffer");
        state.combines += 1;
        state.awaiting_combine = None;
        let area = state.area;
        let args = self.low_latency_combine_args(
            (y, area),
            topk,
            (out.device_ptr(), handle.tokens),
            refused.is_some(),
        );
        self.start();
        if let Err(e) = self
            .kernels
            .low_latency_combine(&self.stream, &args, &self.places())
        {
            return Err(self.broke(e));
        }
        Ok(LowLatencyCombining {
            buffer: Some(self),
            refused,
            _uses: PhantomData,
        })
    }

    fn check_low_latency_combine(
        &self,
        handle: &LowLatencyHandle,
        y: Option<&DeviceBuffer<Bf16>>,
        (topk_idx, topk_weights): (&DeviceBuffer<i64>, &DeviceBuffer<f32>),
        out: &DeviceBuffer<Bf16>,
    ) -> Result<()> {
        let state = self
            .low_latency
            .as_ref()
            .expect("state of a low-latency buffer");
        if handle.buffer != self.id {
            return Err(Error::InvalidArgument(
                "the handle is of a low-latency dispatch of another ep buffer".into(),
            ));
        }
        if state.awaiting_combine != Some(handle.dispatch) {
            return Err(Error::InvalidArgument(format!(
                "the handle is of low-latency dispatch {}, the one awaiting its combine is {:?}",
                handle.dispatch, state.awaiting_combine
            )));
        }
        let rows =
            self.config.local_experts(self.gpu.n_pes()) * self.gpu.n_pes() * self.config.max_tokens;
        if let Some(y) = y.filter(|y| y.len() < rows * self.config.hidden) {
            return Err(Error::InvalidArgument(format!(
                "y holds {} elements, the packed layout needs {}",
                y.len(),
                rows * self.config.hidden
            )));
        }
        let k = self.config.top_k;
        self.check_tokens(
            handle.tokens,
            &[
                (topk_idx.len(), k, "topk_idx"),
                (topk_weights.len(), k, "topk_weights"),
                (out.len(), self.config.hidden, "out"),
            ],
        )
    }
}

impl Drop for LowLatencySend<'_> {
    /// A send dropped before its receive leaves this PE's place counters and signals out of
    /// step with the other PEs': the buffer is unusable from then on (after its stream has
    /// stopped reading the inputs).
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            buffer.give_up("a low-latency send was dropped before its receive");
        }
    }
}

/// A low-latency combine queued on the buffer's stream
/// ([`Buffer::queue_low_latency_combine`]): work queued on [`LowLatencyCombining::stream`]
/// after it sees the combined tokens; [`finish`](LowLatencyCombining::finish) waits for it and
/// reports refusals. Dropping it unfinished waits for the stream and leaves the buffer
/// unusable.
#[derive(Debug)]
pub struct LowLatencyCombining<'a> {
    buffer: Option<&'a mut Buffer>,
    refused: Option<Error>,
    /// The inputs and output the queued kernels use stay borrowed.
    _uses: PhantomData<(&'a DeviceBuffer<Bf16>, &'a mut DeviceBuffer<Bf16>)>,
}

impl LowLatencyCombining<'_> {
    /// The buffer's stream, where the combine is queued.
    pub fn stream(&self) -> &std::sync::Arc<CudaStream> {
        self.buffer.as_ref().expect("a pending combine").stream()
    }

    /// Waits for the combine (as [`Buffer::low_latency_combine`]).
    ///
    /// # Errors
    /// As [`Buffer::low_latency_combine`].
    pub async fn finish(mut self) -> Result<()> {
        let buffer = self.buffer.take().expect("a combine is finished once");
        if let Err(e) = buffer.finish("ep low-latency combine").await {
            buffer.log_waits("combine").await;
            return Err(e);
        }
        match (self.refused.take(), buffer.some_input_refused()) {
            (Some(e), _) => Err(e),
            (None, true) => Err(Error::InvalidArgument(
                "another PE refused its input for this low-latency combine".into(),
            )),
            (None, false) => Ok(()),
        }
    }
}

impl Drop for LowLatencyCombining<'_> {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            buffer.give_up("a low-latency combine was dropped before it finished");
        }
    }
}

impl<'a> LowLatencySend<'a> {
    /// Queues the receive hook on the buffer's stream without waiting (the on-stream form):
    /// work queued after it on [`LowLatencySend::stream`] sees the packed rows, and the rows
    /// per local expert at [`LowLatencySend::recv_count_ptr`]. [`LowLatencySend::receive`]
    /// then only waits. Queues once; later calls do nothing.
    ///
    /// # Errors
    /// A driver error queuing the kernel (the buffer is unusable after).
    pub fn queue_receive(&mut self) -> Result<()> {
        let buffer = self.buffer.as_mut().expect("a send not yet received");
        if self.receive_queued {
            return Ok(());
        }
        self.receive_queued = true;
        let args = buffer.low_latency_receive_args(self.fp8, self.area);
        buffer
            .kernels
            .low_latency_receive(&buffer.stream, &args, &buffer.places())
            .map_err(|e| buffer.broke(e))
    }

    /// The buffer's stream, where the send (and the queued receive) run.
    pub fn stream(&self) -> &std::sync::Arc<CudaStream> {
        self.buffer
            .as_ref()
            .expect("a send not yet received")
            .stream()
    }

    /// Device address of the rows per local expert (`i32`), valid for work queued on the
    /// stream after [`LowLatencySend::queue_receive`] (DeepEP's `packed_recv_count`).
    pub fn recv_count_ptr(&self) -> u64 {
        self.buffer
            .as_ref()
            .expect("a send not yet received")
            .recv_count_addr()
    }

    /// Waits until every PE's rows for this PE's experts have arrived and packs them (the
    /// receive hook).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when this PE's input or another's was refused (naming
    /// it; nothing moved, the buffer stays usable); [`Error::PeerLost`] or
    /// [`Error::Timeout`] as for [`Buffer::dispatch`].
    pub async fn receive(mut self) -> Result<LowLatencyDispatch<'a>> {
        self.queue_receive()?;
        let buffer = self.buffer.take().expect("a send is received once");
        if let Err(e) = buffer.finish("ep low-latency dispatch").await {
            buffer.log_waits("dispatch").await;
            return Err(e);
        }
        let (recv_count, rows_from) = buffer.received(self.refused.take())?;
        let state = buffer
            .low_latency
            .as_mut()
            .expect("state of a low-latency buffer");
        state.awaiting_combine = Some(state.dispatches);
        let handle = LowLatencyHandle {
            tokens: self.tokens,
            dispatch: state.dispatches,
            buffer: buffer.id,
        };
        Ok(LowLatencyDispatch {
            area: self.area,
            fp8: self.fp8,
            recv_count,
            rows_from,
            handle,
            buffer,
        })
    }
}

impl LowLatencyDispatch<'_> {
    /// Rows received per local expert (DeepEP's `packed_recv_count`).
    pub fn recv_count(&self) -> &[usize] {
        &self.recv_count
    }

    /// Rows local expert `expert` received from PE `source` (they lie among its packed rows
    /// in the order senders took places; [`LowLatencyDispatch::recv_src`] names each row's).
    /// `None` for an expert or PE out of range.
    pub fn rows_from(&self, expert: usize, source: usize) -> Option<usize> {
        let n = self.buffer.gpu.n_pes();
        (source < n)
            .then(|| self.rows_from.get(expert * n + source).copied())
            .flatten()
    }

    /// Rows local expert `expert` received, or an error naming the experts there are.
    fn rows_of(&self, expert: usize) -> Result<usize> {
        self.recv_count.get(expert).copied().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "local expert {expert}, but this PE has {}",
                self.recv_count.len()
            ))
        })
    }

    /// Device address of the packed rows: `L × (n·T)` rows of `hidden` [`Bf16`], local
    /// expert `e`'s first `recv_count()[e]` rows in use. Writable: the in-place combine
    /// input. Where combines pull, consecutive dispatches use two areas in turn: take it
    /// from each dispatch.
    pub fn recv_x_ptr(&self) -> u64 {
        self.buffer.base + self.regions().packed[self.area] as u64
    }

    /// Rows each local expert's area holds (`n·T`): its stride in rows.
    pub fn rows_per_expert(&self) -> usize {
        self.buffer.gpu.n_pes() * self.buffer.config.max_tokens
    }

    /// Local expert `expert`'s rows, copied to the host.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the dispatch cast them to FP8, or for an expert out
    /// of range.
    pub async fn recv_x(&self, expert: usize) -> Result<Vec<Bf16>> {
        if self.fp8 {
            return Err(Error::InvalidArgument(
                "this dispatch moved FP8 rows".into(),
            ));
        }
        let hidden = self.buffer.config.hidden;
        let rows = self.rows_of(expert)?;
        let first = expert * self.rows_per_expert() * hidden * 2;
        self.copy_out(self.regions().packed[self.area] + first, rows * hidden)
            .await
    }

    /// Whether the rows were cast to FP8 ([`LowLatencyDispatch::recv_x_fp8`]).
    pub fn is_fp8(&self) -> bool {
        self.fp8
    }

    /// Device address of the FP8 rows of an FP8 dispatch: `L × (n·T)` rows of `hidden` bytes
    /// (e4m3), laid out as [`LowLatencyDispatch::recv_x_ptr`]'s.
    pub fn recv_x_fp8_ptr(&self) -> u64 {
        self.buffer.base + self.regions().packed_fp8 as u64
    }

    /// Device address of their scales: `hidden / 128` `f32` a row.
    pub fn recv_scales_ptr(&self) -> u64 {
        self.buffer.base + self.regions().packed_scales as u64
    }

    /// Local expert `expert`'s FP8 rows and their scales, copied to the host.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the dispatch moved BF16 rows, or for an expert out of
    /// range.
    pub async fn recv_x_fp8(&self, expert: usize) -> Result<(Vec<u8>, Vec<f32>)> {
        if !self.fp8 {
            return Err(Error::InvalidArgument(
                "this dispatch moved BF16 rows".into(),
            ));
        }
        let (hidden, rows) = (self.buffer.config.hidden, self.rows_of(expert)?);
        let first = expert * self.rows_per_expert();
        Ok((
            self.copy_out(self.regions().packed_fp8 + first * hidden, rows * hidden)
                .await?,
            self.copy_out(
                self.regions().packed_scales + first * (hidden / 128) * 4,
                rows * (hidden / 128),
            )
            .await?,
        ))
    }

    /// Local expert `expert`'s rows' source PEs and (token × top_k + slot)s, copied to the
    /// host.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an expert out of range.
    pub async fn recv_src(&self, expert: usize) -> Result<(Vec<i32>, Vec<i32>)> {
        let count = self.rows_of(expert)?;
        let first = expert * self.rows_per_expert() * 4;
        Ok((
            self.copy_out(self.regions().packed_pe + first, count)
                .await?,
            self.copy_out(self.regions().packed_slot + first, count)
                .await?,
        ))
    }

    /// The buffer's stream: queue the experts' kernels here.
    pub fn stream(&self) -> &std::sync::Arc<CudaStream> {
        self.buffer.stream()
    }

    /// The handle the combine needs.
    pub fn handle(&self) -> LowLatencyHandle {
        self.handle
    }

    fn regions(&self) -> LowLatencyRegions {
        self.buffer
            .regions
            .low_latency
            .expect("a low-latency buffer")
    }

    async fn copy_out<T: Pod>(&self, offset: usize, len: usize) -> Result<Vec<T>> {
        self.buffer.copy_region_out(offset, len).await
    }
}
