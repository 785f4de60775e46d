//! [`Buffer`]: the symmetric memory, kernels and stream of one PE's expert parallelism,
//! created collectively by every PE of the job; the waits of its calls, which end in their
//! results, the job's failure, or the configured timeout; and [`Buffer::layout`].

use std::sync::Arc;

use bytemuck::Pod;
use std::time::Duration;

use ferroshmem_gpu::cudarc::driver::CudaStream;
use ferroshmem_gpu::{DeviceBuffer, GpuBuffer, GpuPe, GpuSharing, HostBuffer, HostWords, LocalMem};
use ferroshmem_runtime::{Error, Result};

use crate::config::{Config, Regions, ROW_HEAD};
use crate::kernels::{GpuShare, Kernels, Places, Staging};
use crate::layout::{bad_expert, Layout};
use crate::low_latency::LowLatencyState;
use crate::rows::RowsPool;

/// Index of the abort word in [`Buffer::words`]: the host sets it to make waiting kernels
/// give up.
const ABORT: usize = 0;
/// Index of the outcome word: a kernel that gave up sets it.
const OUTCOME: usize = 1;
/// How long a call that gave up waits for its kernels to notice.
const DRAIN: Duration = Duration::from_secs(10);

/// One PE's part of expert parallelism (DeepEP's `Buffer`): its symmetric receive region, its
/// kernels and the stream they run on. Every PE of the job creates one with the same
/// [`Config`] and calls [`dispatch`](Buffer::dispatch) and [`combine`](Buffer::combine)
/// together, in the same order.
///
/// Kernels that read what a dispatch received, or write what a combine sends back, should be
/// queued on [`Buffer::stream`] (or be complete before the next call).
#[derive(Debug)]
pub struct Buffer {
    /// This buffer's number in this process, which its handles carry: a handle given to
    /// another buffer is refused.
    pub(crate) id: u64,
    pub(crate) gpu: GpuPe,
    pub(crate) config: Config,
    pub(crate) regions: Regions,
    pub(crate) kernels: Kernels,
    pub(crate) stream: Arc<CudaStream>,
    region: Option<GpuBuffer<u8>>,
    pub(crate) base: u64,
    /// This PE's row of the dispatch table, then each token's place per PE.
    pub(crate) scratch: DeviceBuffer<i32>,
    /// The grid's finished-block count of the row kernels.
    blocks_done: DeviceBuffer<u32>,
    /// The dispatch or combine table as the last call's exchange left it.
    pub(crate) snapshot: HostBuffer<i32>,
    /// This PE's row of the combine table.
    pub(crate) combine_head: HostBuffer<i32>,
    pub(crate) words: HostWords,
    pub(crate) dispatches: u64,
    pub(crate) combines: u64,
    /// The tables of dispatches' handles, reused.
    pub(crate) rows_pool: RowsPool,
    /// The low-latency mode's state, if the buffer serves it.
    pub(crate) low_latency: Option<LowLatencyState>,
    broken: Option<Error>,
}

impl Buffer {
    /// Creates the buffer on every PE of `gpu`'s job (collective: every PE calls it with the
    /// same configuration). Needs [`Buffer::bytes_needed`] of the symmetric GPU heap.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a configuration [`Config::check`] refuses, the heap's
    /// errors when the region does not fit, a driver or compile error otherwise.
    pub async fn new(gpu: &GpuPe, config: Config) -> Result<Buffer> {
        let n = gpu.n_pes();
        config.check(n)?;
        let regions = Regions::new(&config, n, gpu.spans_nodes())?;
        let blocks = config.blocks.unwrap_or_else(|| default_blocks(gpu));
        let share = config.blocks.is_none().then(|| gpu_share(gpu));
        let compiling = gpu.clone();
        let kernels = tokio::task::spawn_blocking(move || Kernels::load(&compiling, blocks, share))
            .await
            .map_err(|e| Error::InvalidArgument(format!("compiling the ep kernels: {e}")))??;
        let ctx = gpu.context();
        let scratch = DeviceBuffer::new(ctx, regions.dispatch_width + config.max_tokens * n)?;
        let mut blocks_done = DeviceBuffer::new(ctx, 1)?;
        gpu.copy_local(&mut blocks_done, &HostBuffer::<u32>::new(ctx, 1)?)
            .await?;
        let region = gpu.align::<u8>(256, regions.bytes).await?;
        let base = gpu.local_ptr(&region)?;
        let counters = regions.counters..regions.counters + regions.counter_bytes;
        let zeros = HostBuffer::<u8>::new(ctx, regions.counter_bytes)?;
        gpu.put(region.slice(counters), &zeros, gpu.my_pe()).await?;
        let low_latency = match config.low_latency {
            true => Some(LowLatencyState::new(gpu, &config).await?),
            false => None,
        };
        let rows_pool = RowsPool::new(config.max_tokens * n);
        // No PE adds to another's counters before every PE has zeroed its own.
        gpu.barrier_all().await?;
        Ok(Buffer {
            id: next_buffer_id(),
            gpu: gpu.clone(),
            stream: gpu.new_stream()?,
            kernels,
            region: Some(region),
            base,
            scratch,
            blocks_done,
            snapshot: HostBuffer::new(ctx, n * regions.dispatch_width)?,
            combine_head: HostBuffer::new(ctx, ROW_HEAD)?,
            words: HostWords::new(ctx, 2)?,
            regions,
            config,
            dispatches: 0,
            combines: 0,
            rows_pool,
            low_latency,
            broken: None,
        })
    }

    /// Bytes of the symmetric GPU heap a buffer of `config` needs on a team of `n_pes`, on
    /// one node or (`spans_nodes`) across nodes, where transfers to other nodes are staged
    /// in the heap too ([`GpuPe::spans_nodes`] says which).
    ///
    /// # Errors
    /// As [`Config::check`].
    pub fn bytes_needed(config: &Config, n_pes: usize, spans_nodes: bool) -> Result<usize> {
        config.check(n_pes)?;
        Ok(Regions::new(config, n_pes, spans_nodes)?.bytes + 256)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The stream the buffer's kernels run on: queue work on what a dispatch received here.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The PE's GPU.
    pub fn gpu(&self) -> &GpuPe {
        &self.gpu
    }

    /// Experts this PE owns (`my_pe * local .. (my_pe + 1) * local`).
    pub fn local_experts(&self) -> usize {
        self.config.local_experts(self.gpu.n_pes())
    }

    /// Where `tokens` tokens routed by `topk_idx` (`tokens × top_k`, on this PE's GPU) go,
    /// worked out on the GPU (DeepEP's `get_dispatch_layout`). Not collective.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for more tokens than the buffer holds, a short `topk_idx`,
    /// or an index outside the experts (naming the first such token).
    pub async fn layout(&mut self, topk_idx: &DeviceBuffer<i64>, tokens: usize) -> Result<Layout> {
        self.usable()?;
        self.check_tokens(tokens, &[(topk_idx.len(), self.config.top_k, "topk_idx")])?;
        let n = self.gpu.n_pes();
        let shape = (
            topk_idx.device_ptr(),
            tokens as i32,
            self.config.top_k as i32,
            self.config.num_experts as i32,
        );
        self.kernels
            .layout(&self.stream, n as u32, shape, false, &self.places())?;
        self.finish("ep layout").await?;
        let width = self.regions.dispatch_width;
        let mut host = HostBuffer::<i32>::new(self.gpu.context(), width + tokens * n)?;
        self.gpu.copy_local(&mut host, &self.scratch).await?;
        let got = host.as_slice();
        if got[0] != 0 {
            return Err(bad_expert(
                got[1] as usize,
                got[2].into(),
                self.config.num_experts,
            ));
        }
        let count = |v: &i32| *v as usize;
        Ok(Layout {
            n_pes: n,
            tokens,
            tokens_per_pe: got[ROW_HEAD..ROW_HEAD + n].iter().map(count).collect(),
            tokens_per_expert: got[ROW_HEAD + n..width].iter().map(count).collect(),
            is_token_in_pe: got[width..].iter().map(|&p| p >= 0).collect(),
        })
    }

    /// Frees the buffer's symmetric region on every PE (collective).
    ///
    /// # Errors
    /// The heap's errors.
    pub async fn destroy(mut self) -> Result<()> {
        match self.region.take() {
            Some(region) => self.gpu.free(region).await.map_err(|(e, _)| e),
            None => Ok(()),
        }
    }

    /// The symmetric region (until [`Buffer::destroy`]).
    pub(crate) fn region(&self) -> Option<&GpuBuffer<u8>> {
        self.region.as_ref()
    }

    /// `len` elements of `T` at byte `offset` of this PE's region, copied to the host.
    pub(crate) async fn copy_region_out<T: Pod>(
        &self,
        offset: usize,
        len: usize,
    ) -> Result<Vec<T>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = len * std::mem::size_of::<T>();
        let region = self.region().ok_or(Error::Shutdown)?;
        let mut host = HostBuffer::<u8>::new(self.gpu.context(), bytes)?;
        self.gpu
            .get(
                &mut host,
                region.slice(offset..offset + bytes),
                self.gpu.my_pe(),
            )
            .await?;
        Ok(bytemuck::cast_slice(host.as_slice()).to_vec())
    }

    /// `Ok` unless an earlier call failed in a way that leaves the PEs out of step.
    pub(crate) fn usable(&self) -> Result<()> {
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Checks `tokens` against the buffer, and each `(len, width, name)` input holds
    /// `tokens × width` elements.
    pub(crate) fn check_tokens(
        &self,
        tokens: usize,
        inputs: &[(usize, usize, &str)],
    ) -> Result<()> {
        if tokens > self.config.max_tokens {
            return Err(Error::InvalidArgument(format!(
                "{tokens} tokens, but the ep buffer holds at most {} per PE",
                self.config.max_tokens
            )));
        }
        for &(len, width, name) in inputs {
            if len < tokens * width {
                return Err(Error::InvalidArgument(format!(
                    "{name} holds {len} elements, {tokens} tokens need {}",
                    tokens * width
                )));
            }
        }
        Ok(())
    }

    /// The scratch and pinned addresses the kernels use.
    pub(crate) fn places(&self) -> Places {
        Places {
            row: self.scratch.device_ptr(),
            send_pos: self.scratch.device_ptr() + 4 * self.regions.dispatch_width as u64,
            blocks_done: self.blocks_done.device_ptr(),
            abort: self.words.addr(ABORT),
            outcome: self.words.addr(OUTCOME),
            staging: self.staging(),
        }
    }

    /// The network path's staging addresses (all 0 on one node).
    fn staging(&self) -> Staging {
        let Some(net) = self.regions.network else {
            return Staging::default();
        };
        let at = |offset: usize| self.base + offset as u64;
        Staging {
            exchange_row: at(net.exchange_row),
            rows: at(net.rows),
            meta: at(net.meta),
            fetched: at(net.fetched),
            fetch_rows: self.config.top_k.min(self.gpu.n_pes()) as i32,
            pairs: net.low_latency.map_or(0, |l| at(l.pairs)),
            landing: net.low_latency.map_or(0, |l| at(l.landing)),
            landing_slot: net.low_latency.map_or(0, |l| at(l.landing_slot)),
            landed: net.low_latency.map_or(0, |l| at(l.landed)),
        }
    }

    /// The address of this PE's counter `which` (of `config::counter`: a word per source PE,
    /// which that PE sets to its call number) and the call number of this call, `calls`.
    pub(crate) fn counter(&self, which: usize, calls: u64) -> (u64, u64) {
        let words = which * self.gpu.n_pes();
        (
            self.base + (self.regions.counters + 8 * words) as u64,
            calls,
        )
    }

    /// Clears the outcome word before a call's kernels are queued.
    pub(crate) fn start(&self) {
        self.words.store(OUTCOME, 0);
    }

    /// Waits for the queued call to finish on the GPU, or for the job's failure, or for the
    /// timeout; in the last two cases the kernels are told to give up and the buffer is
    /// unusable from then on.
    ///
    /// # Cancel safety
    /// Dropping the future tells the kernels to give up, waits (blocking) until they have,
    /// and leaves the buffer unusable ([`Error::Desynchronized`]): its PEs no longer agree.
    pub(crate) async fn finish(&mut self, operation: &'static str) -> Result<()> {
        let guard = Abandon {
            stream: &self.stream,
            words: &self.words,
            armed: true,
        };
        let health = self.gpu.host().health().clone();
        let timeout = self.config.timeout;
        let waited = tokio::select! {
            done = self.gpu.wait_stream(&self.stream) => done,
            lost = health.failed() => Err(lost),
            () = tokio::time::sleep(timeout) => Err(Error::Timeout { operation, after: timeout }),
        };
        // A kernel that gave up (outcome 1) did so because the host told it to: only a
        // timeout or failure elsewhere does that. Outcome 2 (a refused input) is the
        // caller's to read.
        let waited = waited.and_then(|()| match self.words.load(OUTCOME) {
            1 => Err(Error::Timeout {
                operation,
                after: timeout,
            }),
            _ => Ok(()),
        });
        match waited {
            Ok(()) => {
                guard.disarm();
                self.device_reports()
            }
            Err(e) => {
                let pe = self.gpu.my_pe();
                tracing::debug!(pe, error = %e, "{operation} gave up; telling its kernels to stop");
                self.words.store(ABORT, 1);
                guard.disarm();
                match tokio::time::timeout(DRAIN, self.gpu.wait_stream(&self.stream)).await {
                    Ok(drained) => {
                        tracing::debug!(pe, ?drained, "{operation}: its kernels stopped")
                    }
                    Err(_) => tracing::error!(
                        pe,
                        "{operation}: its kernels still run {DRAIN:?} after being told to stop"
                    ),
                }
                self.broken = Some(e.clone());
                Err(e)
            }
        }
    }

    /// What the device library reported during the call, where it can report: a transfer
    /// to another node that completed in error (a job that spans nodes), a failed debug
    /// check (`FERROSHMEM_DEVICE_DEBUG`). Such a call's results cannot be trusted, and the
    /// buffer is unusable after it.
    fn device_reports(&mut self) -> Result<()> {
        if !self.gpu.spans_nodes() && !self.gpu.device_debug() {
            return Ok(());
        }
        self.kernels
            .check()
            .inspect_err(|e| self.broken = Some(e.clone()))
    }

    /// Whether the last call's kernels found a PE's input refused (outcome 2).
    pub(crate) fn some_input_refused(&self) -> bool {
        self.words.load(OUTCOME) == 2
    }

    /// Gives a call up that was dropped midway: the kernels are told to stop waiting, the
    /// stream is waited for (blocking: the kernels may still use the call's memory), and
    /// the buffer is unusable from then on.
    pub(crate) fn give_up(&mut self, why: &'static str) {
        tracing::warn!(pe = self.gpu.my_pe(), "ep buffer given up: {why}");
        self.words.store(ABORT, 1);
        let _ = self.stream.synchronize();
        self.broken = Some(Error::Desynchronized {
            what: "this ep buffer",
        });
    }

    /// Marks the buffer unusable after a call failed midway (its kernels partly queued).
    pub(crate) fn broke(&mut self, e: Error) -> Error {
        self.words.store(ABORT, 1);
        self.broken = Some(e.clone());
        e
    }
}

/// A number no other buffer of this process has had.
fn next_buffer_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Drop for Buffer {
    /// Makes the buffer's kernels stop waiting and waits for its stream, so that nothing
    /// still runs on the scratch and pinned memory freed next. The symmetric region is freed
    /// only by the collective [`Buffer::destroy`]; without it, it stays allocated for the
    /// life of the PE.
    fn drop(&mut self) {
        self.words.store(ABORT, 1);
        let _ = self.stream.synchronize();
    }
}

/// Gives a call up when its future is dropped before it finished: the kernels are told to
/// stop waiting, and the drop waits for the stream.
struct Abandon<'a> {
    stream: &'a CudaStream,
    words: &'a HostWords,
    armed: bool,
}

impl Abandon<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.words.store(ABORT, 1);
            let _ = self.stream.synchronize();
        }
    }
}

/// Blocks of the row kernels by default: two per multiprocessor of the GPU, shared among the
/// PEs that use it (at least 1); two measured faster than one with 8 PEs on an H200.
fn default_blocks(gpu: &GpuPe) -> u32 {
    gpu_share(gpu).blocks(2)
}

/// The GPU's multiprocessors and the PEs that use it.
fn gpu_share(gpu: &GpuPe) -> GpuShare {
    let pes = match gpu.sharing() {
        GpuSharing::Alone => 1,
        GpuSharing::InProcess { with, .. } | GpuSharing::Processes { with, .. } => with.len() + 1,
    };
    GpuShare {
        multiprocessors: gpu.device().multiprocessors(),
        pes: pes as u32,
    }
}

/// The dispatch or combine table's rows that refused their input: `Err` naming the first
/// (this PE's own rejection is `own`).
pub(crate) fn check_statuses(
    table: &[i32],
    width: usize,
    me: usize,
    num_experts: usize,
    own: Option<Error>,
) -> Result<()> {
    if let Some(e) = own {
        return Err(e);
    }
    for (pe, row) in table.chunks(width).enumerate() {
        match row[0] {
            0 => {}
            1 if pe == me => return Err(bad_expert(row[1] as usize, row[2].into(), num_experts)),
            1 => {
                return Err(Error::InvalidArgument(format!(
                    "PE {pe}'s input was refused: {}",
                    bad_expert(row[1] as usize, row[2].into(), num_experts)
                )))
            }
            3 if pe == me => {
                return Err(Error::InvalidArgument(format!(
                    "token {} names expert {} twice",
                    row[1], row[2]
                )))
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "PE {pe} refused its own input for this call"
                )))
            }
        }
    }
    Ok(())
}
