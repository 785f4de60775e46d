//! The low-latency kernels' launches: dispatch's send, receive and gather, combine's
//! send-back and reduce, with their arguments as device addresses.

// Kernel launches: each says why its arguments match the kernel and stay valid.
#![allow(unsafe_code)]

use ferroshmem_gpu::cudarc::driver::CudaStream;
use ferroshmem_gpu::{KernelArg, LaunchDims};
use ferroshmem_runtime::Result;

use super::{Kernels, Places, EXCHANGE_THREADS, THREADS};

/// Blocks a low-latency send takes per multiprocessor of its share: four of 512 threads
/// (twice what fits at once at the send's 59 registers), measured best on an H200 with 8 PEs.
const LOW_LATENCY_SEND_PER_SM: u32 = 4;
/// The same for the combine's kernels (which never wait but in one block): twice that,
/// measured best there too.
const LOW_LATENCY_COMBINE_PER_SM: u32 = 8;

/// A low-latency dispatch's send half, as device addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LowLatencySendArgs {
    pub x: u64,
    pub topk_idx: u64,
    pub tokens: i32,
    pub rejected: bool,
    pub hidden: i32,
    pub top_k: i32,
    pub experts: i32,
    pub max_tokens: i32,
    pub places: u64,
    pub packed: u64,
    pub packed_pe: u64,
    pub packed_slot: u64,
    /// Whether to cast rows to FP8 (into `packed_fp8`, with `packed_scales`).
    pub fp8: bool,
    pub packed_fp8: u64,
    pub packed_scales: u64,
    /// Per-expert send counters, the first bad token (scratch), the status (pinned).
    pub counts: u64,
    pub bad: u64,
    pub status: u64,
    pub signals: u64,
    /// The call numbers (device: dispatches, then combines, received so far).
    pub calls: u64,
    /// Reduced signals, where the send must first wait until every PE of this node has read
    /// the rows this PE's combines left in place (this PE's region): a captured round's send
    /// of BF16 rows where the buffer pulls, which writes the area its last replay's combine
    /// read. Else 0.
    pub reduced: u64,
    /// Each pair's place among its expert's rows (scratch, `max_tokens × top_k`).
    pub sent_places: u64,
}

/// A low-latency dispatch's receive half (the hook, or the send's last block).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LowLatencyReceiveArgs {
    pub local_experts: i32,
    pub signals: u64,
    /// As [`LowLatencySendArgs::calls`].
    pub calls: u64,
    pub places: u64,
    /// Rows per local expert (scratch), and the same with the rows per source (pinned).
    pub recv_count: u64,
    pub counts_out: u64,
    /// Where the rows landed from other nodes go: the packed rows (as the send's), their
    /// shape, and whether the dispatch cast them to FP8.
    pub packed: u64,
    pub packed_fp8: u64,
    pub packed_scales: u64,
    pub packed_pe: u64,
    pub packed_slot: u64,
    pub hidden: i32,
    pub max_tokens: i32,
    pub fp8: bool,
}

/// A low-latency combine: the send-back half, the wait and the weighted sums.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LowLatencyCombineArgs {
    pub local_experts: u32,
    pub y: u64,
    /// The packed rows' region (where rows for other nodes are staged).
    pub packed: u64,
    pub packed_pe: u64,
    pub packed_slot: u64,
    pub recv_count: u64,
    pub rejected: bool,
    pub hidden: i32,
    pub max_tokens: i32,
    pub back: u64,
    pub signals: u64,
    /// As [`LowLatencySendArgs::calls`].
    pub calls: u64,
    /// Whether a PE refused its input (scratch, written by the wait).
    pub refused: u64,
    pub topk_idx: u64,
    pub topk_weights: u64,
    pub tokens: i32,
    pub top_k: i32,
    pub out: u64,
    /// As [`LowLatencySendArgs::sent_places`].
    pub sent_places: u64,
    /// As [`LowLatencySendArgs::reduced`].
    pub reduced: u64,
}

impl Kernels {
    /// Queues a low-latency dispatch's send half.
    pub fn low_latency_send(
        &self,
        stream: &CudaStream,
        a: &LowLatencySendArgs,
        places: &Places,
        receive: Option<&LowLatencyReceiveArgs>,
    ) -> Result<()> {
        if a.reduced != 0 {
            self.low_latency_wait_reduced(stream, a, places)?;
        }
        let r = receive.copied().unwrap_or_default();
        let args: [KernelArg; 31] = [
            a.x.into(),
            a.topk_idx.into(),
            a.tokens.into(),
            (a.hidden / 8).into(),
            a.top_k.into(),
            a.experts.into(),
            a.max_tokens.into(),
            a.places.into(),
            a.packed.into(),
            a.packed_pe.into(),
            a.packed_slot.into(),
            i32::from(a.fp8).into(),
            a.packed_fp8.into(),
            a.packed_scales.into(),
            a.counts.into(),
            a.bad.into(),
            a.status.into(),
            places.blocks_done.into(),
            a.signals.into(),
            i32::from(a.rejected).into(),
            a.calls.into(),
            places.staging.pairs.into(),
            places.staging.landing.into(),
            places.staging.landing_slot.into(),
            i32::from(receive.is_some()).into(),
            r.recv_count.into(),
            r.counts_out.into(),
            places.abort.into(),
            places.outcome.into(),
            places.staging.landed.into(),
            a.sent_places.into(),
        ];
        let pairs = (a.tokens.max(0) as u64) * (a.top_k.max(0) as u64);
        let blocks = self.low_latency_blocks(pairs, LOW_LATENCY_SEND_PER_SM);
        let dims = LaunchDims::linear(blocks, THREADS);
        // SAFETY: ep_ll_send takes (const v4*, const long long*, int, int, int, int, int,
        // u64*, v4*, int*, int*, int, u8*, float*, int*, int*, int*, unsigned*, u64*, int,
        // u64*, u8*, u8*, int*, int, int*, int*, const u64*, u64*, int*, int*) as passed (the
        // buffer's two call words, then a BF16 row per pair, the landing records and their
        // slots, all 0 on one node; then, read only with `receive`, the receive's words as for
        // ep_ll_receive; then a place word per pair). x and topk_idx hold `tokens` rows
        // (checked by the caller, or 0 tokens; for FP8 the caller checked hidden is a multiple
        // of 128). A row's place is below n × max_tokens among its expert's rows, and below
        // max_tokens among its landing part's: each source sends an expert at most one row per
        // token (the kernel refuses a repeated expert). Counters, scratch and pinned words
        // belong to the caller's buffer, which keeps them until its stream is done. Behind
        // ep_ll_wait_reduced it waits for that kernel (ep_wait_prior_grid) before it reads or
        // writes any of them.
        unsafe {
            match a.reduced {
                0 => self.module.launch("ep_ll_send", dims, stream, &args)?,
                _ => self
                    .module
                    .launch_dependent("ep_ll_send", dims, stream, &args)?,
            }
        };
        match (receive, places.staging.landing) {
            (Some(r), landing) if landing != 0 => self.low_latency_gather(stream, r, places),
            _ => Ok(()),
        }
    }

    /// Queues what a low-latency send does first (one block): wait until every PE of this node
    /// has said it has read the rows this PE's combines left in place.
    fn low_latency_wait_reduced(
        &self,
        stream: &CudaStream,
        a: &LowLatencySendArgs,
        places: &Places,
    ) -> Result<()> {
        let args: [KernelArg; 4] = [
            a.reduced.into(),
            a.calls.into(),
            places.abort.into(),
            places.outcome.into(),
        ];
        // SAFETY: ep_ll_wait_reduced takes (const u64*, const u64*, const u64*, u64*) as
        // passed: this PE's n reduced signals, the two call words, the pinned abort and outcome
        // words, all the caller's buffer's.
        unsafe {
            self.module.launch(
                "ep_ll_wait_reduced",
                LaunchDims::linear(1, EXCHANGE_THREADS),
                stream,
                &args,
            )
        }
    }

    /// Queues a low-latency dispatch's receive half.
    pub fn low_latency_receive(
        &self,
        stream: &CudaStream,
        a: &LowLatencyReceiveArgs,
        places: &Places,
    ) -> Result<()> {
        let args: [KernelArg; 9] = [
            a.local_experts.into(),
            a.signals.into(),
            a.calls.into(),
            a.places.into(),
            a.recv_count.into(),
            a.counts_out.into(),
            places.abort.into(),
            places.outcome.into(),
            places.staging.landed.into(),
        ];
        // SAFETY: ep_ll_receive takes (int, const u64*, u64*, u64*, int*, int*, const u64*,
        // u64*, int*) as passed: L × n signals and L place counters of this PE's region, the
        // two call words and L words of scratch, L + L × n pinned words, then L × n pairs of
        // words of the region (0 on one node), all the caller's buffer's.
        unsafe {
            self.module.launch(
                "ep_ll_receive",
                LaunchDims::linear(1, EXCHANGE_THREADS),
                stream,
                &args,
            )?
        };
        match places.staging.landing {
            0 => Ok(()),
            _ => self.low_latency_gather(stream, a, places),
        }
    }

    /// Queues the move of the rows landed from other nodes among the packed rows.
    fn low_latency_gather(
        &self,
        stream: &CudaStream,
        a: &LowLatencyReceiveArgs,
        places: &Places,
    ) -> Result<()> {
        let args: [KernelArg; 12] = [
            a.local_experts.into(),
            places.staging.landed.into(),
            places.staging.landing.into(),
            places.staging.landing_slot.into(),
            (a.hidden / 8).into(),
            a.max_tokens.into(),
            i32::from(a.fp8).into(),
            a.packed.into(),
            a.packed_fp8.into(),
            a.packed_scales.into(),
            a.packed_pe.into(),
            a.packed_slot.into(),
        ];
        // SAFETY: ep_ll_gather takes (int, const int*, const u8*, const int*, int, int, int,
        // v4*, u8*, float*, int*, int*) as passed: the (place, rows) pairs the receive hook
        // queued before it wrote, each below n × max_tokens in all per expert (the rows the
        // expert's sources signalled), L × n × max_tokens landing records of a BF16 row's size
        // and their slots, the packed parts the send lays out, all of the caller's buffer.
        unsafe {
            self.module.launch(
                "ep_ll_gather",
                LaunchDims::linear(self.blocks, THREADS),
                stream,
                &args,
            )
        }
    }

    /// Queues a low-latency combine: rows back to their sources and the wait (one kernel), then
    /// the weighted sums.
    pub fn low_latency_combine(
        &self,
        stream: &CudaStream,
        a: &LowLatencyCombineArgs,
        places: &Places,
    ) -> Result<()> {
        self.launch_send_back(stream, a, places)?;
        self.launch_weighted_sums(stream, a)
    }

    /// Queues the combine's first kernel: every received row back to its source, then the
    /// wait for the rows this PE sent.
    fn launch_send_back(
        &self,
        stream: &CudaStream,
        a: &LowLatencyCombineArgs,
        places: &Places,
    ) -> Result<()> {
        let back: [KernelArg; 16] = [
            a.y.into(),
            a.packed_pe.into(),
            a.packed_slot.into(),
            a.recv_count.into(),
            a.hidden.into(),
            a.max_tokens.into(),
            a.back.into(),
            places.blocks_done.into(),
            a.signals.into(),
            i32::from(a.rejected).into(),
            a.calls.into(),
            a.packed.into(),
            a.refused.into(),
            places.abort.into(),
            places.outcome.into(),
            i32::from(a.reduced != 0).into(),
        ];
        let blocks = match self.share {
            Some(share) => share.blocks(LOW_LATENCY_COMBINE_PER_SM),
            None => self.blocks,
        };
        let per_expert = (blocks / a.local_experts).max(1);
        let dims = LaunchDims {
            grid: (per_expert, a.local_experts, 1),
            ..LaunchDims::linear(1, THREADS)
        };
        // SAFETY: ep_ll_send_back takes (const v4*, const int*, const int*, const int*, int,
        // int, v4*, unsigned*, u64*, int, u64*, v4*, int*, const u64*, u64*, int) as passed: y holds
        // the packed rows (the caller checked its length, or it is the packed region, the
        // 12th argument), the packed sources and counts are those of the latest receive, and
        // each row goes to its source's `back` row of (token, slot), within T × top_k rows;
        // then this PE's n combine signals, the two call words, a scratch word, the pinned
        // words and whether the buffer pulls.
        unsafe { self.module.launch("ep_ll_send_back", dims, stream, &back) }
    }

    /// Queues the combine's second kernel, dependent on the first: each token's weighted sum
    /// of its rows come back (pulled from the PEs of this node that combined in place, where
    /// the buffer pulls).
    fn launch_weighted_sums(&self, stream: &CudaStream, a: &LowLatencyCombineArgs) -> Result<()> {
        let pieces = (a.hidden.max(0) as u64 / 8).div_ceil(32);
        let work = (a.tokens.max(0) as u64) * pieces;
        let blocks = self.low_latency_blocks(work, LOW_LATENCY_COMBINE_PER_SM);
        let dims = LaunchDims::linear(blocks, THREADS);
        let args: [KernelArg; 14] = [
            a.back.into(),
            a.topk_idx.into(),
            a.topk_weights.into(),
            a.tokens.into(),
            a.hidden.into(),
            a.top_k.into(),
            a.refused.into(),
            a.out.into(),
            a.packed.into(),
            a.sent_places.into(),
            a.signals.into(),
            a.local_experts.into(),
            a.max_tokens.into(),
            a.reduced.into(),
        ];
        if a.reduced == 0 {
            let sums = &args[..8];
            // SAFETY: ep_ll_reduce takes (const v4*, const long long*, const float*, int, int,
            // int, const int*, v4*), the first eight as passed: `tokens` rows of top-k and
            // weights and of `out` (checked by the caller), this PE's back rows, the scratch
            // word the wait wrote. It waits for the send-back (ep_wait_prior_grid) before it
            // reads any of these, and the send-back lets it start only once its wait is over
            // and every other block has counted itself done.
            return unsafe {
                self.module
                    .launch_dependent("ep_ll_reduce", dims, stream, sums)
            };
        }
        // SAFETY: ep_ll_reduce_pull takes ep_ll_reduce's arguments, then (const v4*, const
        // int*, const u64*, int, int, u64*) as passed: the packed rows (read on the PEs of this
        // node that combined in place, at places the dispatch noted, held below n ×
        // max_tokens: no PE of the node writes there before every block of this kernel has
        // counted itself read), the places, the combine signals, this PE's n reduced signals
        // (symmetric: each block adds to its own word on every PE of this node). Launched and
        // waiting as ep_ll_reduce.
        unsafe {
            self.module
                .launch_dependent("ep_ll_reduce_pull", dims, stream, &args)
        }
    }
}
