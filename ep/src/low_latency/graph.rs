//! [`LowLatencyGraph`]: a whole low-latency round — dispatch, the receive hook, the caller's
//! expert kernels and the combine — captured into one CUDA graph on the buffer's stream and
//! replayed with one launch (DeepEP's CUDA-graph use of its low-latency kernels).
//!
//! # Replays
//!
//! The call numbers the kernels wait for live in device memory and are advanced by the
//! kernels themselves, so each replay is the next call, the same on every PE. Every PE of the
//! job captures the same round and replays it together, as it would call. Once the graph is
//! dropped, ordinary calls go on where the replays left off.
//!
//! # What capture fixes
//!
//! The token count, the FP8 choice and the buffers of the inputs and outputs, which the
//! graph holds: write each replay's inputs into them with [`LowLatencyGraph::write_inputs`]
//! (or with kernels queued on [`LowLatencyGraph::stream`] before the replay), read the
//! combined tokens from [`LowLatencyGraph::out`]. The host's checks (lengths, token count)
//! run once, at capture: a PE whose capture fails must not let the others replay (they would
//! wait for it until [`Config::timeout`](crate::Config::timeout)). Expert indices are checked
//! on the GPU at every replay, collectively, as for calls. The packed rows' area too, where
//! combines pull: every replay writes the rows its predecessor's combine read, so a replay's
//! dispatch of BF16 rows first waits (one block) until every PE of the node has read them,
//! where calls alternate between two areas and never wait.
//!
//! The normal mode cannot be captured: its receivers learn their row counts on the host
//! (as DeepEP's normal mode).

use std::sync::Arc;

use bytemuck::Pod;
use ferroshmem_gpu::cudarc::driver::CudaStream;
use ferroshmem_gpu::{DeviceBuffer, GpuPe, Graph, HostBuffer, LocalMem};
use ferroshmem_runtime::{Error, Result};

use super::args::Received;
use super::LowLatencyInput;
use crate::bf16::Bf16;
use crate::buffer::Buffer;
use crate::clocks::KernelClocks;
use crate::config::LowLatencyRegions;

/// The inputs and output of a captured low-latency round, on this PE's GPU; the graph holds
/// them while it lives.
#[derive(Debug)]
pub struct LowLatencyRound<'a> {
    /// Token rows: `tokens × hidden`.
    pub x: &'a mut DeviceBuffer<Bf16>,
    /// Each token's experts: `tokens × top_k`, distinct; -1 is an empty slot.
    pub topk_idx: &'a mut DeviceBuffer<i64>,
    /// Each token's top-k weights: `tokens × top_k`.
    pub topk_weights: &'a mut DeviceBuffer<f32>,
    /// Tokens of every replay (at most `max_tokens`).
    pub tokens: usize,
    /// Whether the dispatch casts the rows to FP8 ([`LowLatencyInput::fp8`]).
    pub fp8: bool,
    /// The experts' results in the packed layout; `None`: written over the received BF16
    /// rows in place.
    pub y: Option<&'a DeviceBuffer<Bf16>>,
    /// The combined tokens: `tokens × hidden`.
    pub out: &'a mut DeviceBuffer<Bf16>,
}

/// Where a captured round's received rows lie, for the expert kernels the capture's closure
/// queues on [`CapturedReceive::stream`]: the addresses are the same at every replay, the
/// counts are the replay's (read them on the GPU, at [`CapturedReceive::recv_count_ptr`]).
#[derive(Debug)]
pub struct CapturedReceive<'s> {
    stream: &'s Arc<CudaStream>,
    buffer: &'s Buffer,
    /// The packed rows' area the round writes.
    area: usize,
}

impl CapturedReceive<'_> {
    /// The stream being captured: queue the experts' kernels here.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }

    /// Device address of the rows per local expert (`i32`) of the replay.
    pub fn recv_count_ptr(&self) -> u64 {
        self.buffer.recv_count_addr()
    }

    /// Device address of the packed BF16 rows (as [`super::LowLatencyDispatch::recv_x_ptr`]).
    pub fn recv_x_ptr(&self) -> u64 {
        self.part(|r| r.packed[self.area])
    }

    /// Device address of the packed FP8 rows of an FP8 round (`hidden` bytes a row).
    pub fn recv_x_fp8_ptr(&self) -> u64 {
        self.part(|r| r.packed_fp8)
    }

    /// Device address of the FP8 rows' scales (`hidden / 128` `f32` a row).
    pub fn recv_scales_ptr(&self) -> u64 {
        self.part(|r| r.packed_scales)
    }

    /// Rows each local expert's area holds (`n·T`): its stride in rows.
    pub fn rows_per_expert(&self) -> usize {
        self.buffer.gpu.n_pes() * self.buffer.config.max_tokens
    }

    /// The device address of a part of the low-latency region.
    fn part(&self, which: impl Fn(&LowLatencyRegions) -> usize) -> u64 {
        let regions = self
            .buffer
            .regions
            .low_latency
            .expect("a low-latency buffer");
        self.buffer.base + which(&regions) as u64
    }
}

/// A captured low-latency round ([`Buffer::capture_low_latency`]); holds the buffer.
#[derive(Debug)]
pub struct LowLatencyGraph<'a> {
    buffer: &'a mut Buffer,
    graph: Graph,
    /// The packed rows' area every replay writes.
    area: usize,
    received: Received,
    /// The round's inputs and output, which the graph reads and writes at every replay.
    round: LowLatencyRound<'a>,
}

impl Buffer {
    /// Captures a low-latency round into a CUDA graph: the dispatch of `round.x`, the
    /// receive hook, the kernels `experts` queues (on [`CapturedReceive::stream`], reading
    /// the received rows and writing their results in place or into `round.y`), and the
    /// combine into `round.out`. Nothing runs until [`LowLatencyGraph::replay`]. Not
    /// collective itself; every PE captures the same round.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the buffer does not serve the low-latency mode, a
    /// dispatch awaits its combine, or the round's inputs are refused (short, too many
    /// tokens, FP8 without `y`); the closure's error; a driver error (nothing captured in
    /// each case).
    pub fn capture_low_latency<'a>(
        &'a mut self,
        round: LowLatencyRound<'a>,
        experts: impl FnOnce(&CapturedReceive<'_>) -> Result<()>,
    ) -> Result<LowLatencyGraph<'a>> {
        self.usable()?;
        self.low_latency_regions()?;
        let state = self.low_latency.as_ref().expect("a low-latency buffer");
        if let Some(d) = state.awaiting_combine {
            return Err(Error::InvalidArgument(format!(
                "low-latency dispatch {d} has not been combined yet"
            )));
        }
        let input = LowLatencyInput {
            x: round.x,
            topk_idx: round.topk_idx,
            tokens: round.tokens,
            fp8: round.fp8,
            hook: false,
        };
        self.check_round(&input, &round)?;
        // The area the next call would write; each replay after the first rewrites it.
        let area = state.area ^ 1;
        let send = self.low_latency_send_args(&input, false, (area, true));
        let receive = self.low_latency_receive_args(round.fp8, area);
        let weights = (&*round.topk_idx, &*round.topk_weights);
        let out = (round.out.device_ptr(), round.tokens);
        let combine = self.low_latency_combine_args((round.y, area), weights, out, false);
        let places = self.places();
        let graph = self.gpu.capture(&self.stream, |stream| {
            self.kernels
                .low_latency_send(stream, &send, &places, Some(&receive))?;
            experts(&CapturedReceive {
                stream,
                buffer: self,
                area,
            })?;
            self.kernels.low_latency_combine(stream, &combine, &places)
        })?;
        Ok(LowLatencyGraph {
            buffer: self,
            graph,
            area,
            received: (Vec::new(), Vec::new()),
            round,
        })
    }

    /// The host's checks of a round to capture.
    fn check_round(&self, input: &LowLatencyInput<'_>, round: &LowLatencyRound<'_>) -> Result<()> {
        self.check_send(input)?;
        let (k, hidden) = (self.config.top_k, self.config.hidden);
        self.check_tokens(
            round.tokens,
            &[
                (round.topk_weights.len(), k, "topk_weights"),
                (round.out.len(), hidden, "out"),
            ],
        )?;
        let rows =
            self.config.local_experts(self.gpu.n_pes()) * self.gpu.n_pes() * self.config.max_tokens;
        match round.y {
            None if round.fp8 => Err(Error::InvalidArgument(
                "an FP8 round needs y: its experts cannot write BF16 results over FP8 rows".into(),
            )),
            Some(y) if y.len() < rows * hidden => Err(Error::InvalidArgument(format!(
                "y holds {} elements, the packed layout needs {}",
                y.len(),
                rows * hidden
            ))),
            _ => Ok(()),
        }
    }
}

impl<'a> LowLatencyGraph<'a> {
    /// Replays the round and waits for it: the combined tokens are in `round.out` when it
    /// returns. Collective: every PE replays its graph.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the PE and token when a PE's expert indices were
    /// refused on the GPU (nothing received anywhere; `out` then holds no result, and the
    /// buffer stays usable); [`Error::PeerLost`] or [`Error::Timeout`] as for
    /// [`Buffer::dispatch`].
    ///
    /// # Cancel safety
    /// Dropping the future midway leaves the buffer unusable, as for a call.
    pub async fn replay(&mut self) -> Result<()> {
        self.queue_replay()?.finish().await
    }

    /// Queues a replay on [`LowLatencyGraph::stream`] without waiting (the on-stream form of
    /// [`LowLatencyGraph::replay`]): work queued after it on the stream sees the combined
    /// tokens in `round.out`. [`LowLatencyReplay::finish`] then waits for it.
    ///
    /// # Errors
    /// An unusable buffer's error; a driver error (the buffer is then unusable).
    pub fn queue_replay(&mut self) -> Result<LowLatencyReplay<'_, 'a>> {
        let buffer = &mut *self.buffer;
        buffer.usable()?;
        let state = buffer.low_latency.as_mut().expect("a low-latency buffer");
        state.dispatches += 1;
        state.combines += 1;
        state.area = self.area;
        buffer.start();
        if let Err(e) = self.graph.launch(&buffer.stream) {
            return Err(buffer.broke(e));
        }
        Ok(LowLatencyReplay { graph: Some(self) })
    }

    /// Writes the next replay's inputs (`tokens` rows of each, as captured) into the round's
    /// buffers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a slice's length is not the round's (nothing
    /// written); a driver error.
    pub async fn write_inputs(
        &mut self,
        x: &[Bf16],
        topk_idx: &[i64],
        topk_weights: &[f32],
    ) -> Result<()> {
        let (tokens, config) = (self.round.tokens, &self.buffer.config);
        let widths = [
            (x.len(), config.hidden, "x"),
            (topk_idx.len(), config.top_k, "topk_idx"),
            (topk_weights.len(), config.top_k, "topk_weights"),
        ];
        if let Some((len, width, name)) = widths.into_iter().find(|&(len, w, _)| len != tokens * w)
        {
            return Err(Error::InvalidArgument(format!(
                "{name} holds {len} elements, the captured round's {tokens} tokens need {}",
                tokens * width
            )));
        }
        let gpu = &self.buffer.gpu;
        write(gpu, &mut *self.round.x, x).await?;
        write(gpu, &mut *self.round.topk_idx, topk_idx).await?;
        write(gpu, &mut *self.round.topk_weights, topk_weights).await
    }

    /// The combined tokens of the last replay (`tokens × hidden`).
    pub fn out(&self) -> &DeviceBuffer<Bf16> {
        self.round.out
    }

    /// Rows each local expert received in the last successful replay.
    pub fn recv_count(&self) -> &[usize] {
        &self.received.0
    }

    /// The buffer's stream, where replays run.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.buffer.stream
    }

    /// The buffer's kernel clocks since the last reading ([`Buffer::take_kernel_clocks`]):
    /// the replays' kernels', if the clocks were on.
    ///
    /// # Errors
    /// A driver error.
    pub fn take_kernel_clocks(&mut self) -> Result<KernelClocks> {
        self.buffer.take_kernel_clocks()
    }
}

/// A replay queued by [`LowLatencyGraph::queue_replay`], not yet waited for.
///
/// # Cancel safety
/// Dropping it unfinished (or dropping [`LowLatencyReplay::finish`]'s future midway) makes
/// the kernels give up and leaves the buffer unusable, as for a dropped call.
#[derive(Debug)]
pub struct LowLatencyReplay<'g, 'a> {
    graph: Option<&'g mut LowLatencyGraph<'a>>,
}

impl LowLatencyReplay<'_, '_> {
    /// The buffer's stream, where the replay is queued.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.graph
            .as_ref()
            .expect("a replay not yet finished")
            .stream()
    }

    /// Waits for the replay (as [`LowLatencyGraph::replay`]).
    ///
    /// # Errors
    /// As [`LowLatencyGraph::replay`].
    pub async fn finish(mut self) -> Result<()> {
        let graph = self.graph.take().expect("a replay is finished once");
        let buffer = &mut *graph.buffer;
        if let Err(e) = buffer.finish("ep low-latency graph").await {
            buffer.log_waits("graph replay").await;
            return Err(e);
        }
        graph.received = buffer.received(None)?;
        Ok(())
    }
}

impl Drop for LowLatencyReplay<'_, '_> {
    fn drop(&mut self) {
        if let Some(graph) = self.graph.take() {
            graph
                .buffer
                .give_up("a low-latency graph replay was dropped before it finished");
        }
    }
}

/// Copies `data` to the start of `dest` (on its GPU), the rest of `dest` unchanged.
async fn write<T: Pod>(gpu: &GpuPe, dest: &mut DeviceBuffer<T>, data: &[T]) -> Result<()> {
    let mut staged = HostBuffer::new(gpu.context(), dest.len())?;
    gpu.copy_local(&mut staged, &*dest).await?;
    staged.as_mut_slice()[..data.len()].copy_from_slice(data);
    gpu.copy_local(dest, &staged).await
}
