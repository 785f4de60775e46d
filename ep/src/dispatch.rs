//! Normal-mode dispatch ([`Buffer::dispatch`]): each PE's tokens sent to the PEs that own
//! their experts, and what a PE receives ([`Dispatch`]): rows, sources, experts, weights and
//! counts, with the [`Handle`] that combine needs to send results back.

use bytemuck::Pod;
use ferroshmem_gpu::cudarc::driver::CudaStream;
use ferroshmem_gpu::{DeviceBuffer, LocalMem};
use ferroshmem_runtime::{Error, Result};

use crate::bf16::Bf16;
use crate::buffer::{check_statuses, Buffer};
use crate::config::{counter, ROW_HEAD};
use crate::kernels::DispatchArgs;
use crate::rows::RowsTable;

/// Token rows to dispatch, on the PE's GPU.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// `tokens × hidden` BF16.
    Bf16(&'a DeviceBuffer<Bf16>),
    /// `tokens × hidden` FP8 (e4m3, as bytes) with `tokens × hidden/128` `f32` scales, one per
    /// 128 elements (DeepEP's `(x_fp8, x_scales)`; `hidden` a multiple of 128). Sent as they
    /// are: the receiver gets the same bytes and scales.
    Fp8 {
        /// The FP8 rows.
        x: &'a DeviceBuffer<u8>,
        /// Their scales.
        scales: &'a DeviceBuffer<f32>,
    },
}

impl Rows<'_> {
    /// Bytes of one row.
    fn row_bytes(&self, hidden: usize) -> usize {
        match self {
            Rows::Bf16(_) => hidden * 2,
            Rows::Fp8 { .. } => hidden,
        }
    }

    /// Scales of one row.
    fn scale_count(&self, hidden: usize) -> usize {
        match self {
            Rows::Bf16(_) => 0,
            Rows::Fp8 { .. } => hidden / 128,
        }
    }

    /// Checks the rows hold `tokens` rows.
    fn check(&self, tokens: usize, hidden: usize) -> Result<()> {
        let short = |name: &str, len: usize, need: usize| {
            Err(Error::InvalidArgument(format!(
                "{name} holds {len} elements, {tokens} tokens need {need}"
            )))
        };
        match self {
            Rows::Bf16(x) if x.len() < tokens * hidden => short("x", x.len(), tokens * hidden),
            Rows::Fp8 { .. } if hidden % 128 != 0 => Err(Error::InvalidArgument(format!(
                "FP8 rows need hidden to be a multiple of 128, not {hidden}"
            ))),
            Rows::Fp8 { x, .. } if x.len() < tokens * hidden => {
                short("x", x.len(), tokens * hidden)
            }
            Rows::Fp8 { scales, .. } if scales.len() < tokens * (hidden / 128) => {
                short("x scales", scales.len(), tokens * (hidden / 128))
            }
            _ => Ok(()),
        }
    }

    fn addresses(&self) -> (u64, u64) {
        match self {
            Rows::Bf16(x) => (x.device_ptr(), 0),
            Rows::Fp8 { x, scales } => (x.device_ptr(), scales.device_ptr()),
        }
    }
}

/// One PE's input to a dispatch, on its GPU.
#[derive(Debug, Clone, Copy)]
pub struct DispatchInput<'a> {
    /// Token rows.
    pub x: Rows<'a>,
    /// Each token's experts: `tokens × top_k`; -1 is an empty slot.
    pub topk_idx: &'a DeviceBuffer<i64>,
    /// Each token's expert weights: `tokens × top_k`.
    pub topk_weights: &'a DeviceBuffer<f32>,
    /// Tokens to dispatch (at most the buffer's `max_tokens`; PEs may differ).
    pub tokens: usize,
}

/// What combine needs of a dispatch: where each of this PE's tokens went. Valid for the
/// buffer's latest dispatch.
#[derive(Debug)]
pub struct Handle {
    /// `tokens × n_pes`: the row of token `t` on PE `p`, or -1.
    pub(crate) rows: RowsTable,
    pub(crate) tokens: usize,
    pub(crate) received: usize,
    pub(crate) dispatch: u64,
    /// The buffer that made it ([`Buffer::id`]).
    pub(crate) buffer: u64,
}

impl Handle {
    /// Tokens this PE dispatched (and gets back from combine).
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Rows this PE received (and gives back to combine).
    pub fn received(&self) -> usize {
        self.received
    }
}

/// What this PE received from a dispatch: rows in the buffer's receive region, PE 0's first,
/// each PE's in token order. Holds the buffer until dropped or turned into its [`Handle`].
#[derive(Debug)]
pub struct Dispatch<'a> {
    buffer: &'a Buffer,
    fp8: bool,
    rows_from: Vec<usize>,
    tokens_per_expert: Vec<usize>,
    handle: Handle,
}

impl Buffer {
    /// Sends each of this PE's tokens to every PE that owns one of its experts, and returns
    /// what this PE received (DeepEP's normal-mode `dispatch`). Collective: every PE of the
    /// job calls it, each with its own tokens.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](ferroshmem_runtime::Error::InvalidArgument) when this PE's input is refused (more tokens than the
    /// buffer holds, short inputs, an expert index outside the experts) or another PE's was
    /// (naming it): then nothing moves and the buffer stays usable.
    /// [`Error::PeerLost`](ferroshmem_runtime::Error::PeerLost) or
    /// [`Error::Timeout`](ferroshmem_runtime::Error::Timeout) when the other PEs do not all come: the
    /// buffer is unusable afterwards.
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped call leaves the buffer unusable (see the module of
    /// [`Buffer`]).
    pub async fn dispatch(&mut self, input: DispatchInput<'_>) -> Result<Dispatch<'_>> {
        self.usable()?;
        let k = self.config.top_k;
        let refused = self
            .check_tokens(
                input.tokens,
                &[
                    (input.topk_idx.len(), k, "topk_idx"),
                    (input.topk_weights.len(), k, "topk_weights"),
                ],
            )
            .and_then(|()| input.x.check(input.tokens, self.config.hidden))
            .err();
        let tokens = if refused.is_some() { 0 } else { input.tokens };
        let n = self.gpu.n_pes();
        let rows = self.rows_pool.take(self.gpu.context())?;
        self.dispatches += 1;
        let args = self.dispatch_args(&input, tokens, refused.is_some(), &rows);
        self.start();
        let queued = self
            .kernels
            .dispatch(&self.stream, n as u32, &args, &self.places());
        if let Err(e) = queued {
            return Err(self.broke(e));
        }
        self.finish("ep dispatch").await?;
        let width = self.regions.dispatch_width;
        let table = self.snapshot.as_slice()[..n * width].to_vec();
        let me = self.gpu.my_pe();
        check_statuses(&table, width, me, self.config.num_experts, refused)?;
        let local = self.local_experts();
        let rows_from: Vec<usize> = (0..n)
            .map(|s| table[s * width + ROW_HEAD + me] as usize)
            .collect();
        let first = ROW_HEAD + n + me * local;
        let tokens_per_expert = (0..local)
            .map(|e| (0..n).map(|s| table[s * width + first + e] as usize).sum())
            .collect();
        Ok(Dispatch {
            handle: Handle {
                rows,
                tokens,
                received: rows_from.iter().sum(),
                dispatch: self.dispatches,
                buffer: self.id,
            },
            buffer: self,
            fp8: matches!(input.x, Rows::Fp8 { .. }),
            rows_from,
            tokens_per_expert,
        })
    }

    fn dispatch_args(
        &self,
        input: &DispatchInput<'_>,
        tokens: usize,
        refused: bool,
        rows: &RowsTable,
    ) -> DispatchArgs {
        let r = &self.regions;
        let at = |offset: usize| self.base + offset as u64;
        let hidden = self.config.hidden;
        let (x, scales) = input.x.addresses();
        DispatchArgs {
            x,
            scales,
            scale_count: input.x.scale_count(hidden) as i32,
            pieces: (input.x.row_bytes(hidden) / 16) as i32,
            recv_scales: at(r.recv_scales),
            topk_idx: input.topk_idx.device_ptr(),
            topk_weights: input.topk_weights.device_ptr(),
            tokens: tokens as i32,
            rejected: refused,
            top_k: self.config.top_k as i32,
            experts: self.config.num_experts as i32,
            width: r.dispatch_width as i32,
            table: at(r.dispatch_table),
            snapshot: self.snapshot_addr(),
            recv_x: at(r.recv_x),
            recv_src: at(r.recv_src),
            recv_topk_idx: at(r.recv_topk_idx),
            recv_topk_weights: at(r.recv_topk_weights),
            rows: rows.device_ptr(),
            notified: self.counter(counter::NOTIFIED, self.dispatches),
            dispatched: self.counter(counter::DISPATCHED, self.dispatches),
        }
    }

    pub(crate) fn snapshot_addr(&self) -> u64 {
        self.snapshot.addr()
    }
}

impl Dispatch<'_> {
    /// Rows received.
    pub fn received(&self) -> usize {
        self.handle.received
    }

    /// Per source PE: rows received from it (PE `s`'s rows follow those of PEs before it).
    pub fn rows_from(&self) -> &[usize] {
        &self.rows_from
    }

    /// Per local expert: the (token, slot) pairs received for it.
    pub fn tokens_per_expert(&self) -> &[usize] {
        &self.tokens_per_expert
    }

    /// Device address of the received rows (`received × hidden` [`Bf16`]). Writable: rows
    /// written here in place are what [`Buffer::combine_in_place`] sends back.
    pub fn recv_x_ptr(&self) -> u64 {
        self.buffer.base + self.buffer.regions.recv_x as u64
    }

    /// Device address of each row's token index on its source PE (`received` `i32`).
    pub fn recv_src_ptr(&self) -> u64 {
        self.buffer.base + self.buffer.regions.recv_src as u64
    }

    /// Device address of each row's experts local to this PE, -1 for others
    /// (`received × top_k` `i64`).
    pub fn recv_topk_idx_ptr(&self) -> u64 {
        self.buffer.base + self.buffer.regions.recv_topk_idx as u64
    }

    /// Device address of each row's expert weights, 0 where the index is -1
    /// (`received × top_k` `f32`).
    pub fn recv_topk_weights_ptr(&self) -> u64 {
        self.buffer.base + self.buffer.regions.recv_topk_weights as u64
    }

    /// Device address of the received FP8 rows' scales (`received × hidden/128` `f32`).
    pub fn recv_scales_ptr(&self) -> u64 {
        self.buffer.base + self.buffer.regions.recv_scales as u64
    }

    /// Whether the rows are FP8 (`recv_x_ptr` then holds `received × hidden` bytes).
    pub fn is_fp8(&self) -> bool {
        self.fp8
    }

    /// The received BF16 rows, copied to the host.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the dispatch moved FP8 rows.
    pub async fn recv_x(&self) -> Result<Vec<Bf16>> {
        self.rows_of(false)?;
        let hidden = self.buffer.config.hidden;
        self.copy_out(self.buffer.regions.recv_x, self.received() * hidden)
            .await
    }

    /// The received FP8 rows and their scales, copied to the host.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the dispatch moved BF16 rows.
    pub async fn recv_x_fp8(&self) -> Result<(Vec<u8>, Vec<f32>)> {
        self.rows_of(true)?;
        let hidden = self.buffer.config.hidden;
        let regions = &self.buffer.regions;
        Ok((
            self.copy_out(regions.recv_x, self.received() * hidden)
                .await?,
            self.copy_out(regions.recv_scales, self.received() * (hidden / 128))
                .await?,
        ))
    }

    fn rows_of(&self, fp8: bool) -> Result<()> {
        match self.fp8 == fp8 {
            true => Ok(()),
            false => Err(Error::InvalidArgument(format!(
                "this dispatch moved {} rows",
                if self.fp8 { "FP8" } else { "BF16" }
            ))),
        }
    }

    /// Each row's token index on its source PE, copied to the host.
    pub async fn recv_src(&self) -> Result<Vec<i32>> {
        self.copy_out(self.buffer.regions.recv_src, self.received())
            .await
    }

    /// Each row's local experts (-1: elsewhere), copied to the host.
    pub async fn recv_topk_idx(&self) -> Result<Vec<i64>> {
        let k = self.buffer.config.top_k;
        self.copy_out(self.buffer.regions.recv_topk_idx, self.received() * k)
            .await
    }

    /// Each row's expert weights, copied to the host.
    pub async fn recv_topk_weights(&self) -> Result<Vec<f32>> {
        let k = self.buffer.config.top_k;
        self.copy_out(self.buffer.regions.recv_topk_weights, self.received() * k)
            .await
    }

    /// The buffer's stream: queue kernels that work on the received rows here.
    pub fn stream(&self) -> &std::sync::Arc<CudaStream> {
        self.buffer.stream()
    }

    /// The handle combine needs.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Ends the borrow of the buffer, keeping the handle.
    pub fn into_handle(self) -> Handle {
        self.handle
    }

    async fn copy_out<T: Pod>(&self, offset: usize, len: usize) -> Result<Vec<T>> {
        self.buffer.copy_region_out(offset, len).await
    }
}
