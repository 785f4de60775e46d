//! The low-latency kernels' arguments as this buffer lays them out, the host's checks of a
//! send's input, and what the receive's statuses say: shared by the calls and by the
//! captured rounds of [`super::graph`].

use ferroshmem_gpu::{DeviceBuffer, HostBuffer, LocalMem};
use ferroshmem_runtime::{Error, Result};

use super::{LowLatencyInput, LowLatencyState};
use crate::bf16::Bf16;
use crate::buffer::{check_statuses, Buffer};
use crate::config::LowLatencyRegions;
use crate::kernels::{LowLatencyCombineArgs, LowLatencyReceiveArgs, LowLatencySendArgs};

/// Rows per local expert, and rows per (local expert, source), that a receive reported.
pub(super) type Received = (Vec<usize>, Vec<usize>);

impl Buffer {
    /// The low-latency state and regions (the caller checked the buffer serves the mode).
    fn low_latency_parts(&self) -> (&LowLatencyState, LowLatencyRegions) {
        let state = self.low_latency.as_ref();
        let regions = self.regions.low_latency;
        state
            .zip(regions)
            .expect("state and regions of a low-latency buffer")
    }

    /// The host's checks of a send's input: `Err` says why it is refused.
    pub(super) fn check_send(&self, input: &LowLatencyInput<'_>) -> Result<()> {
        self.check_tokens(
            input.tokens,
            &[
                (input.x.len(), self.config.hidden, "x"),
                (input.topk_idx.len(), self.config.top_k, "topk_idx"),
            ],
        )?;
        match input.fp8 && self.config.hidden % 128 != 0 {
            true => Err(Error::InvalidArgument(format!(
                "FP8 rows need hidden to be a multiple of 128, not {}",
                self.config.hidden
            ))),
            false => Ok(()),
        }
    }

    /// The send kernel's arguments for `input`, into packed area `area`; `rejected`: the host
    /// refused it (no tokens); `rewrites`: the area is the one the last combine read where it
    /// pulled (a captured round's, at every replay), so that a send of BF16 rows first waits
    /// until every PE of the node has read them.
    pub(super) fn low_latency_send_args(
        &self,
        input: &LowLatencyInput<'_>,
        rejected: bool,
        (area, rewrites): (usize, bool),
    ) -> LowLatencySendArgs {
        let (state, regions) = self.low_latency_parts();
        let at = |offset: usize| self.base + offset as u64;
        let experts = self.config.num_experts;
        LowLatencySendArgs {
            x: input.x.device_ptr(),
            topk_idx: input.topk_idx.device_ptr(),
            tokens: if rejected { 0 } else { input.tokens as i32 },
            rejected,
            hidden: self.config.hidden as i32,
            top_k: self.config.top_k as i32,
            experts: experts as i32,
            max_tokens: self.config.max_tokens as i32,
            places: at(regions.places),
            packed: at(regions.packed[area]),
            packed_pe: at(regions.packed_pe),
            packed_slot: at(regions.packed_slot),
            fp8: input.fp8,
            packed_fp8: at(regions.packed_fp8),
            packed_scales: at(regions.packed_scales),
            counts: state.scratch.device_ptr(),
            bad: state.scratch.device_ptr() + 4 * experts as u64,
            status: state.status.addr(),
            signals: at(regions.signals),
            calls: state.calls.device_ptr(),
            reduced: match rewrites && !input.fp8 {
                true => self.reduced_addr(),
                false => 0,
            },
            sent_places: state.sent_places.device_ptr(),
        }
    }

    /// The receive hook's arguments, for a dispatch into packed area `area` that cast its rows
    /// to FP8 or not.
    pub(super) fn low_latency_receive_args(&self, fp8: bool, area: usize) -> LowLatencyReceiveArgs {
        let (state, regions) = self.low_latency_parts();
        let at = |offset: usize| self.base + offset as u64;
        LowLatencyReceiveArgs {
            local_experts: self.config.local_experts(self.gpu.n_pes()) as i32,
            signals: at(regions.signals),
            calls: state.calls.device_ptr(),
            places: at(regions.places),
            recv_count: self.recv_count_addr(),
            counts_out: state.counts_out.addr(),
            packed: at(regions.packed[area]),
            packed_fp8: at(regions.packed_fp8),
            packed_scales: at(regions.packed_scales),
            packed_pe: at(regions.packed_pe),
            packed_slot: at(regions.packed_slot),
            hidden: self.config.hidden as i32,
            max_tokens: self.config.max_tokens as i32,
            fp8,
        }
    }

    /// Device address of this PE's reduced signals where the buffer pulls, else 0 (the
    /// kernels then neither count nor wait).
    fn reduced_addr(&self) -> u64 {
        match self.config.pulls() {
            true => self.base + self.low_latency_parts().1.reduced as u64,
            false => 0,
        }
    }

    /// Device address of the rows per local expert the receive hook writes.
    pub(super) fn recv_count_addr(&self) -> u64 {
        let (state, _) = self.low_latency_parts();
        state.scratch.device_ptr() + 4 * (self.config.num_experts as u64 + 1)
    }

    /// The combine kernels' arguments: `y` (`None`: the packed rows of area `area`, the
    /// dispatch's), the dispatch's top-k and weights, `out`, for `tokens` tokens; `rejected`:
    /// the host refused them.
    pub(super) fn low_latency_combine_args(
        &self,
        (y, area): (Option<&DeviceBuffer<Bf16>>, usize),
        (topk_idx, topk_weights): (&DeviceBuffer<i64>, &DeviceBuffer<f32>),
        (out, tokens): (u64, usize),
        rejected: bool,
    ) -> LowLatencyCombineArgs {
        let (state, regions) = self.low_latency_parts();
        let at = |offset: usize| self.base + offset as u64;
        let local = self.config.local_experts(self.gpu.n_pes());
        LowLatencyCombineArgs {
            local_experts: local as u32,
            y: y.map_or(at(regions.packed[area]), |y| y.device_ptr()),
            packed: at(regions.packed[area]),
            packed_pe: at(regions.packed_pe),
            packed_slot: at(regions.packed_slot),
            recv_count: self.recv_count_addr(),
            rejected,
            hidden: self.config.hidden as i32,
            max_tokens: self.config.max_tokens as i32,
            back: at(regions.back),
            signals: at(regions.combine_signals),
            calls: state.calls.device_ptr(),
            refused: state.scratch.device_ptr() + 4 * (self.config.num_experts + 1 + local) as u64,
            topk_idx: topk_idx.device_ptr(),
            topk_weights: topk_weights.device_ptr(),
            tokens: if rejected { 0 } else { tokens as i32 },
            top_k: self.config.top_k as i32,
            out,
            sent_places: state.sent_places.device_ptr(),
            reduced: self.reduced_addr(),
        }
    }

    /// What the finished receive reported: the rows per local expert and per (expert,
    /// source), or the refusal of this PE's input (`refused_here`, found by the host) or
    /// another's (from the statuses).
    pub(super) fn received(&self, refused_here: Option<Error>) -> Result<Received> {
        let (state, _) = self.low_latency_parts();
        let n = self.gpu.n_pes();
        let local = self.config.local_experts(n);
        let counts = state.counts_out.as_slice();
        let status = state.status.as_slice();
        let refusing = counts[local..].iter().position(|&c| c < 0).map(|i| i % n);
        let mine = self.gpu.my_pe();
        let table: Vec<i32> = (0..n)
            .flat_map(|pe| match (pe == mine, refusing == Some(pe)) {
                (true, _) => status.to_vec(),
                (false, true) => vec![2, 0, 0],
                (false, false) => vec![0, 0, 0],
            })
            .collect();
        check_statuses(&table, 3, mine, self.config.num_experts, refused_here)?;
        Ok((
            counts[..local].iter().map(|&c| c as usize).collect(),
            counts[local..].iter().map(|&c| c.max(0) as usize).collect(),
        ))
    }

    /// Logs what a low-latency call that gave up was waiting for: the call numbers the
    /// kernels reached and the signal words as they stand (call and count of each (local
    /// expert, source); each source's combine signal, its call with bit 63 for a refusal),
    /// so that a stall says which PE never signalled.
    pub(super) async fn log_waits(&self, operation: &str) {
        let (state, regions) = self.low_latency_parts();
        let n = self.gpu.n_pes();
        let local = self.config.local_experts(n);
        let calls = match HostBuffer::<u64>::new(self.gpu.context(), 2) {
            Ok(mut host) => self
                .gpu
                .copy_local(&mut host, &state.calls)
                .await
                .map(|()| host.as_slice().to_vec()),
            Err(e) => Err(e),
        };
        let signals = self
            .copy_region_out::<u64>(regions.signals, local * n)
            .await;
        let combine = self
            .copy_region_out::<u64>(regions.combine_signals, n)
            .await;
        let reduced = self.copy_region_out::<u64>(regions.reduced, n).await;
        let words = |w: Result<Vec<u64>>| match w {
            Ok(words) => words
                .iter()
                .map(|v| format!("{}:{}", v >> 32, v & 0xffff_ffff))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => format!("unread ({e})"),
        };
        tracing::error!(
            pe = self.gpu.my_pe(),
            calls = ?calls,
            dispatch_signals = words(signals),
            combine_signals = ?combine,
            reduced = ?reduced,
            "ep low-latency {operation} gave up; dispatch signals as call:count per (local expert, source)"
        );
    }
}
