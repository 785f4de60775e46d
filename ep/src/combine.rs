//! Normal-mode combine ([`Buffer::combine`], [`Buffer::combine_in_place`]): the rows each PE
//! gives back for what it received, summed on the PE each token came from.

use ferroshmem_gpu::{DeviceBuffer, LocalMem};
use ferroshmem_runtime::{Error, Result};

use crate::bf16::Bf16;
use crate::buffer::{check_statuses, Buffer};
use crate::config::{counter, ROW_HEAD};
use crate::dispatch::Handle;
use crate::kernels::CombineArgs;

impl Buffer {
    /// Sends back `y` (one row per row this PE received in the dispatch of `handle`, in the
    /// same order) and writes into `out` each of this PE's dispatched tokens: the sum, in
    /// `f32` rounded once to bf16, of the rows the PEs that received it gave back (DeepEP's
    /// normal-mode `combine`: weigh rows by `recv_topk_weights` before, if the sum should be
    /// weighted). Collective, like [`Buffer::dispatch`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a handle of an earlier dispatch, a short `y` or `out`,
    /// or another PE's refused input (then nothing is summed and the buffer stays usable);
    /// [`Error::PeerLost`] or [`Error::Timeout`] as for dispatch.
    ///
    /// # Cancel safety
    /// As [`Buffer::dispatch`].
    pub async fn combine(
        &mut self,
        handle: &Handle,
        y: &DeviceBuffer<Bf16>,
        out: &mut DeviceBuffer<Bf16>,
    ) -> Result<()> {
        let hidden = self.config.hidden;
        let short = (y.len() < handle.received * hidden).then(|| {
            Error::InvalidArgument(format!(
                "y holds {} elements, {} received rows need {}",
                y.len(),
                handle.received,
                handle.received * hidden
            ))
        });
        let copy_in = (handle.received as i64, y.device_ptr());
        self.combine_with(handle, Some(copy_in), out, short).await
    }

    /// As [`Buffer::combine`], sending back the rows written in place of the received ones
    /// (at [`Dispatch::recv_x_ptr`](crate::Dispatch::recv_x_ptr), by kernels queued on
    /// [`Buffer::stream`] or complete): no copy.
    ///
    /// # Errors
    /// As [`Buffer::combine`].
    pub async fn combine_in_place(
        &mut self,
        handle: &Handle,
        out: &mut DeviceBuffer<Bf16>,
    ) -> Result<()> {
        self.combine_with(handle, None, out, None).await
    }

    async fn combine_with(
        &mut self,
        handle: &Handle,
        copy_in: Option<(i64, u64)>,
        out: &mut DeviceBuffer<Bf16>,
        refused: Option<Error>,
    ) -> Result<()> {
        self.usable()?;
        let refused = refused.or_else(|| self.check_combine(handle, out).err());
        self.combines += 1;
        let status = i32::from(refused.is_some()) * 2;
        self.combine_head
            .as_mut_slice()
            .copy_from_slice(&[status, 0, 0]);
        let args = self.combine_args(handle, copy_in, out, refused.is_some());
        self.start();
        if let Err(e) = self.kernels.combine(&self.stream, &args, &self.places()) {
            return Err(self.broke(e));
        }
        self.finish("ep combine").await?;
        let n = self.gpu.n_pes();
        let table = self.snapshot.as_slice()[..n * ROW_HEAD].to_vec();
        check_statuses(
            &table,
            ROW_HEAD,
            self.gpu.my_pe(),
            self.config.num_experts,
            refused,
        )
    }

    fn check_combine(&self, handle: &Handle, out: &DeviceBuffer<Bf16>) -> Result<()> {
        if handle.buffer != self.id {
            return Err(Error::InvalidArgument(
                "the handle is of a dispatch of another ep buffer".into(),
            ));
        }
        if handle.dispatch != self.dispatches {
            return Err(Error::InvalidArgument(format!(
                "the handle is of dispatch {} of this buffer, the latest is {}",
                handle.dispatch, self.dispatches
            )));
        }
        self.check_tokens(handle.tokens, &[(out.len(), self.config.hidden, "out")])
    }

    fn combine_args(
        &self,
        handle: &Handle,
        copy_in: Option<(i64, u64)>,
        out: &DeviceBuffer<Bf16>,
        refused: bool,
    ) -> CombineArgs {
        let r = &self.regions;
        CombineArgs {
            copy_in: copy_in.filter(|_| !refused),
            recv_x: self.base + r.recv_x as u64,
            rows: handle.rows.device_ptr(),
            tokens: if refused { 0 } else { handle.tokens as i32 },
            hidden: self.config.hidden as i32,
            head: self.combine_head.addr(),
            table: self.base + r.combine_table as u64,
            snapshot: self.snapshot_addr(),
            out: out.device_ptr(),
            ready: self.counter(counter::COMBINE_READY, self.combines),
            combined: self.counter(counter::COMBINED, self.combines),
        }
    }
}
