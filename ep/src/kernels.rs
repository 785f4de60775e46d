//! The kernels of `kernels.cu`, compiled once per process for each kind of GPU and loaded
//! into each PE, and their launches: the one place of this crate that vouches for kernel
//! arguments.

// Kernel launches: each says why its arguments match the kernel and stay valid.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use ferroshmem_gpu::cudarc::driver::CudaStream;
use ferroshmem_gpu::{CompileOptions, GpuModule, GpuPe, KernelArg, LaunchDims};
use ferroshmem_runtime::Result;

use crate::config::NETWORK_COMBINE_WARPS;

mod low_latency;

pub(crate) use low_latency::{LowLatencyCombineArgs, LowLatencyReceiveArgs, LowLatencySendArgs};

const SOURCE: &str = concat!(include_str!("kernels.cu"), include_str!("low_latency.cu"));

/// Threads of a block of the row-moving kernels (16 warps; `EP_ROW_THREADS` in kernels.cu).
const THREADS: u32 = 512;
/// Threads of the layout kernel's blocks (one block per PE).
const LAYOUT_THREADS: u32 = 1024;
/// Threads of the exchange kernel's one block.
const EXCHANGE_THREADS: u32 = 256;

/// PTX already compiled in this process, by compute capability, network path and debug.
type PtxCache = Mutex<HashMap<((i32, i32), bool, bool), String>>;

fn ptx_cache() -> &'static PtxCache {
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The ep kernels, loaded into one PE.
#[derive(Debug)]
pub(crate) struct Kernels {
    module: GpuModule,
    /// Blocks of the row-moving kernels.
    pub blocks: u32,
    /// This PE's share of the GPU, when the configuration left the block count to us: the
    /// low-latency kernels then size their grids by their work (`None`: every kernel takes
    /// `blocks`).
    pub share: Option<GpuShare>,
}

/// The GPU's multiprocessors and the PEs that share them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuShare {
    pub multiprocessors: u32,
    pub pes: u32,
}

impl GpuShare {
    /// `per_sm` blocks per multiprocessor of this PE's share (at least 1).
    pub fn blocks(self, per_sm: u32) -> u32 {
        (per_sm * self.multiprocessors / self.pes.max(1)).max(1)
    }
}

/// Warps of a block of the row-moving kernels.
const WARPS: u32 = THREADS / 32;

/// Addresses a dispatch's kernels use beyond their inputs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Places {
    /// This PE's row of the dispatch table, then each token's place per PE (scratch).
    pub row: u64,
    pub send_pos: u64,
    /// The grid's finished-block count (scratch, zero between kernels).
    pub blocks_done: u64,
    /// The host's abort word and the call's outcome word (pinned).
    pub abort: u64,
    pub outcome: u64,
    /// The network path's staging, where the job spans nodes.
    pub staging: Staging,
}

/// Device addresses of the network path's staging parts (config's `NetworkRegions`), all 0
/// where the job is on one node.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Staging {
    pub exchange_row: u64,
    pub rows: u64,
    pub meta: u64,
    pub fetched: u64,
    /// Rows of each warp's slot in `fetched`.
    pub fetch_rows: i32,
    /// The low-latency mode's parts (config's `NetworkLowLatency`).
    pub pairs: u64,
    pub landing: u64,
    pub landing_slot: u64,
    pub landed: u64,
}

/// A dispatch's inputs and outputs, as device addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DispatchArgs {
    pub x: u64,
    /// FP8 rows' scales (0 for BF16 rows), `scale_count` a row.
    pub scales: u64,
    pub scale_count: i32,
    /// 16-byte pieces of a row.
    pub pieces: i32,
    pub recv_scales: u64,
    pub topk_idx: u64,
    pub topk_weights: u64,
    pub tokens: i32,
    pub rejected: bool,
    pub top_k: i32,
    pub experts: i32,
    pub width: i32,
    pub table: u64,
    pub snapshot: u64,
    pub recv_x: u64,
    pub recv_src: u64,
    pub recv_topk_idx: u64,
    pub recv_topk_weights: u64,
    pub rows: u64,
    pub notified: (u64, u64),
    pub dispatched: (u64, u64),
}

/// A combine's inputs and outputs, as device addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CombineArgs {
    /// The caller's rows to copy into the receive region first (rows, address), if any.
    pub copy_in: Option<(i64, u64)>,
    pub recv_x: u64,
    pub rows: u64,
    pub tokens: i32,
    pub hidden: i32,
    pub head: u64,
    pub table: u64,
    pub snapshot: u64,
    pub out: u64,
    pub ready: (u64, u64),
    pub combined: (u64, u64),
}

impl Kernels {
    /// Compiles the kernels for `gpu`'s kind of GPU (once per process) and loads them.
    pub fn load(gpu: &GpuPe, blocks: u32, share: Option<GpuShare>) -> Result<Kernels> {
        let options = CompileOptions::default();
        let key = (
            gpu.device().compute_capability(),
            gpu.spans_nodes(),
            gpu.device_debug(),
        );
        let cached = ptx_cache()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let ptx = match cached {
            Some(ptx) => ptx,
            None => {
                let ptx = gpu.compile_ptx(SOURCE, &options)?;
                ptx_cache()
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, ptx.clone());
                ptx
            }
        };
        Ok(Kernels {
            module: gpu.load_ptx(&ptx)?,
            blocks,
            share,
        })
    }

    /// Blocks of a low-latency kernel with `warps` units of work (a warp each), taking at
    /// most `per_sm` blocks per multiprocessor of this PE's share of the GPU.
    fn low_latency_blocks(&self, warps: u64, per_sm: u32) -> u32 {
        match self.share {
            Some(share) => {
                let wanted = warps.div_ceil(u64::from(WARPS)).max(1);
                wanted.min(u64::from(share.blocks(per_sm))) as u32
            }
            None => self.blocks,
        }
    }

    /// Turns the low-latency kernels' clocks (`ep_clocks` in low_latency.cu) on or off on
    /// `stream`, after the work queued there, and resets them.
    pub fn set_clocks(&self, stream: &CudaStream, on: bool) -> Result<()> {
        self.module
            .write_global_words("ep_clocks_on", &[u64::from(on)], stream)?;
        self.reset_clocks(stream)
    }

    /// The low-latency kernels' clock words since the last reset, once `stream` has run what
    /// was queued on it (this waits for it); then resets them.
    pub fn take_clocks(&self, stream: &CudaStream) -> Result<Vec<u64>> {
        let words = self.module.read_global_words("ep_clocks", stream)?;
        self.reset_clocks(stream)?;
        Ok(words)
    }

    /// Each clock's start to all ones and its end to 0, on `stream`.
    fn reset_clocks(&self, stream: &CudaStream) -> Result<()> {
        let reset: [u64; 2 * crate::clocks::KERNELS] =
            std::array::from_fn(|w| if w % 2 == 0 { u64::MAX } else { 0 });
        self.module.write_global_words("ep_clocks", &reset, stream)
    }

    /// Takes the device library's report, if any of this PE's kernels wrote one: a
    /// transfer to another node completed in error, or a debug check failed.
    pub fn check(&self) -> Result<()> {
        self.module.check()
    }

    /// Queues `ep_layout` of `tokens` tokens (`topk_idx`, `top_k` wide) over `n` PEs.
    pub fn layout(
        &self,
        stream: &CudaStream,
        n: u32,
        (topk_idx, tokens, top_k, experts): (u64, i32, i32, i32),
        rejected: bool,
        places: &Places,
    ) -> Result<()> {
        let args: [KernelArg; 7] = [
            topk_idx.into(),
            tokens.into(),
            top_k.into(),
            experts.into(),
            i32::from(rejected).into(),
            places.row.into(),
            places.send_pos.into(),
        ];
        // SAFETY: ep_layout takes (const long long*, int, int, int, int, int*, int*) as
        // passed; topk_idx holds tokens × top_k indices (checked by the caller), row holds the
        // table's width and send_pos tokens × n words (scratch sized for max tokens), both
        // owned by the caller's buffer, which waits for its stream before freeing them.
        unsafe {
            self.module.launch(
                "ep_layout",
                LaunchDims::linear(n, LAYOUT_THREADS),
                stream,
                &args,
            )
        }
    }

    /// Queues `ep_exchange`: `row` (`width` words) into every PE's `table`, then the wait
    /// for every word of `counter` to reach call `target`, then the table's snapshot.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange(
        &self,
        stream: &CudaStream,
        (row, width): (u64, i32),
        table: u64,
        (counter, target): (u64, u64),
        snapshot: u64,
        places: &Places,
    ) -> Result<()> {
        let args: [KernelArg; 9] = [
            row.into(),
            width.into(),
            places.staging.exchange_row.into(),
            table.into(),
            counter.into(),
            target.into(),
            snapshot.into(),
            places.abort.into(),
            places.outcome.into(),
        ];
        // SAFETY: ep_exchange takes (const int*, int, int*, int*, u64*, u64, int*, const
        // u64*, u64*) as passed; row holds `width` words, the staged row (0 on one node)
        // `dispatch_width` words at least, table and counter are symmetric
        // addresses of this PE's region (n × width words, a counter of n words), snapshot is pinned
        // memory of n × width words; all belong to the caller's buffer, which waits for its
        // stream before freeing them.
        unsafe {
            self.module.launch(
                "ep_exchange",
                LaunchDims::linear(1, EXCHANGE_THREADS),
                stream,
                &args,
            )
        }
    }

    /// Queues `ep_wait` for every word of this PE's `counter` to reach call `target`.
    pub fn wait(
        &self,
        stream: &CudaStream,
        (counter, target): (u64, u64),
        places: &Places,
    ) -> Result<()> {
        let args: [KernelArg; 4] = [
            counter.into(),
            target.into(),
            places.abort.into(),
            places.outcome.into(),
        ];
        // SAFETY: ep_wait takes (const u64*, u64, const u64*, u64*) as passed: a symmetric
        // counter of n words of the caller's region and its pinned words, alive until its stream is done.
        unsafe {
            self.module
                .launch("ep_wait", LaunchDims::linear(1, 1), stream, &args)
        }
    }

    /// Queues a whole dispatch: layout, exchange, rows, wait.
    pub fn dispatch(
        &self,
        stream: &CudaStream,
        n: u32,
        a: &DispatchArgs,
        places: &Places,
    ) -> Result<()> {
        let shape = (a.topk_idx, a.tokens, a.top_k, a.experts);
        self.layout(stream, n, shape, a.rejected, places)?;
        self.exchange(
            stream,
            (places.row, a.width),
            a.table,
            a.notified,
            a.snapshot,
            places,
        )?;
        let args: [KernelArg; 23] = [
            a.x.into(),
            a.scales.into(),
            a.topk_idx.into(),
            a.topk_weights.into(),
            a.tokens.into(),
            a.pieces.into(),
            a.scale_count.into(),
            a.top_k.into(),
            a.experts.into(),
            places.send_pos.into(),
            a.table.into(),
            a.width.into(),
            a.recv_x.into(),
            a.recv_scales.into(),
            a.recv_src.into(),
            a.recv_topk_idx.into(),
            a.recv_topk_weights.into(),
            a.rows.into(),
            places.blocks_done.into(),
            a.dispatched.0.into(),
            a.dispatched.1.into(),
            places.staging.rows.into(),
            places.staging.meta.into(),
        ];
        // SAFETY: ep_dispatch takes (const v4*, const float*, const long long*, const float*,
        // int, int, int, int, int, const int*, const int*, int, v4*, float*, int*, long long*,
        // float*, int*, unsigned*, u64*, u64, u8*, u8*) as passed. The caller checked that x (and its scales),
        // topk_idx and topk_weights hold `tokens` rows (or passed 0 tokens), that a row's
        // pieces fit the receive region's bf16 row, that `rows` holds tokens × n words, and
        // sized the receive parts of the symmetric region (addresses of this PE's copy) for
        // n × max_tokens rows; every PE's rows land within them by the exchanged counts.
        // The staging parts (0 on one node) hold a record per token and top_k per token.
        // Everything is kept alive by the caller until its stream is done.
        unsafe {
            self.module.launch(
                "ep_dispatch",
                LaunchDims::linear(self.blocks, THREADS),
                stream,
                &args,
            )?
        };
        self.wait(stream, a.dispatched, places)
    }

    /// Queues a whole combine: the copy in (if any), exchange, sums, wait.
    pub fn combine(&self, stream: &CudaStream, a: &CombineArgs, places: &Places) -> Result<()> {
        if let Some((rows, from)) = a.copy_in {
            let args: [KernelArg; 4] = [
                a.recv_x.into(),
                from.into(),
                rows.into(),
                (a.hidden / 8).into(),
            ];
            // SAFETY: ep_copy takes (v4*, const v4*, long long, int) as passed: `rows` rows of
            // `hidden` bf16 from the caller's device buffer (checked long enough) into the
            // receive region (sized for n × max_tokens rows, at least `rows`).
            unsafe {
                self.module.launch(
                    "ep_copy",
                    LaunchDims::linear(self.blocks, THREADS),
                    stream,
                    &args,
                )?
            };
        }
        self.exchange(stream, (a.head, 3), a.table, a.ready, a.snapshot, places)?;
        let args: [KernelArg; 11] = [
            a.recv_x.into(),
            a.rows.into(),
            a.tokens.into(),
            a.hidden.into(),
            a.table.into(),
            a.out.into(),
            places.blocks_done.into(),
            a.combined.0.into(),
            a.combined.1.into(),
            places.staging.fetched.into(),
            places.staging.fetch_rows.into(),
        ];
        // Across nodes each warp of the grid has its own staging slot.
        let blocks = match places.staging.fetched {
            0 => self.blocks,
            _ => (NETWORK_COMBINE_WARPS as u32 / (THREADS / 32)).min(self.blocks),
        };
        // SAFETY: ep_combine takes (const v4*, const int*, int, int, const int*, v4*,
        // unsigned*, u64*, u64, v4*, int) as passed: the receive region (symmetric, read on the
        // PEs the handle's rows name, each row within that PE's received rows), the handle's
        // tokens × n rows, the combine table, `out` (checked to hold `tokens` rows), and the
        // staging slots (0 on one node) of fetch_rows rows for each of the grid's warps.
        unsafe {
            self.module.launch(
                "ep_combine",
                LaunchDims::linear(blocks, THREADS),
                stream,
                &args,
            )?
        };
        self.wait(stream, a.combined, places)
    }
}

#[cfg(test)]
mod tests;
