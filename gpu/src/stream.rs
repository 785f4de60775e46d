//! On-stream operations (`nvshmemx_*_on_stream`): queued on a caller's CUDA stream, ordered
//! with its kernels, and capturable into a CUDA graph. Copies run on the copy engines; signal
//! sets and waits are stream memory operations (`cuStreamWriteValue64` /
//! `cuStreamWaitValue64`; a GPU without them is refused when it is opened); the rest (`p`,
//! signal adds, other comparisons, barriers) are one-thread kernels of the device library.
//!
//! Local operands are symmetric memory of this PE (alive until the collective `free`, which
//! waits for the GPU), so no Rust borrow can end while a stream still uses it.
//!
//! Each data operation is counted in the PE's traffic (transport `cuda`) once it is queued:
//! the host never sees it complete, so it has no latency sample and is not in flight.

use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::sys::CUstreamWaitValue_flags as WaitFlags;
use cudarc::driver::{CudaEvent, CudaStream};
use ferroshmem_observability::traffic::Op;
use ferroshmem_runtime::{Cmp, Error, Result, SignalOp, SymSlice};

use crate::driver::{self, Graph, LaunchDims, Owner};
use crate::module::KernelArg;
use crate::pe::GpuPe;

fn one_thread() -> LaunchDims {
    LaunchDims::linear(1, 1)
}

/// The device library's comparison code (`FSH_CMP_*`, NVSHMEM's values).
pub(crate) fn cmp_code(cmp: Cmp) -> i32 {
    match cmp {
        Cmp::Eq => 0,
        Cmp::Ne => 1,
        Cmp::Gt => 2,
        Cmp::Le => 3,
        Cmp::Lt => 4,
        Cmp::Ge => 5,
    }
}

impl GpuPe {
    #[allow(unsafe_code)] // launches a kernel of the device library
    fn internal_launch(&self, name: &str, stream: &CudaStream, args: &[KernelArg]) -> Result<()> {
        let kernels = self.internal()?;
        // SAFETY: the internal kernels take exactly these arguments (device/internal.cu) and
        // touch only symmetric GPU memory, which outlives the stream's use of it.
        unsafe { kernels.module.launch(name, one_thread(), stream, args) }
    }

    /// Counts an on-stream operation `op` of `bytes` bytes towards PE `pe` that `queued`
    /// says was (or was not) queued.
    fn counted_on_stream(&self, op: Op, pe: usize, bytes: usize, queued: Result<()>) -> Result<()> {
        self.inner.traffic.count_outcome(op, pe, bytes, queued)
    }

    /// Queues a copy of `bytes` bytes from `from` to `to` on `stream`, on a copy engine.
    fn copy_on_stream(&self, to: u64, from: u64, bytes: usize, stream: &CudaStream) -> Result<()> {
        driver::copy_device_async(to, from, bytes, stream.cu_stream())
    }

    /// Queues a copy of this PE's symmetric `src` into `dest` on PE `pe` on `stream`
    /// (`nvshmemx_putmem_on_stream`).
    pub fn put_on_stream<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let src = src.into();
        let bytes = src.len().saturating_mul(std::mem::size_of::<T>());
        let queued = self.queue_put(dest.into(), src, pe, stream);
        self.counted_on_stream(Op::Put, pe, bytes, queued)
    }

    fn queue_put<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let from = self.locate(src, src.len(), "put_on_stream source", self.my_pe())?;
        let at = self.locate(dest, src.len(), "put_on_stream destination", pe)?;
        self.bind()?;
        self.copy_on_stream(
            at,
            from,
            src.len().saturating_mul(std::mem::size_of::<T>()),
            stream,
        )
    }

    /// Queues a copy from any device address of this GPU (or pinned host memory) into
    /// `dest` on PE `pe`: `bytes` bytes from `src`.
    ///
    /// # Safety
    /// `src..src + bytes` must stay valid until `stream` has executed the copy.
    #[allow(unsafe_code)] // a raw source address only the caller can vouch for
    pub unsafe fn put_raw_on_stream<'a, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: u64,
        bytes: usize,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let elems = bytes.div_ceil(std::mem::size_of::<T>().max(1));
        let queued = (|| {
            let at = self.locate(dest.into(), elems, "put_on_stream destination", pe)?;
            self.bind()?;
            driver::copy_async(at, src, bytes, stream.cu_stream())
        })();
        self.counted_on_stream(Op::Put, pe, bytes, queued)
    }

    /// Queues a copy of `src` on PE `pe` into this PE's symmetric `dest` on `stream`
    /// (`nvshmemx_getmem_on_stream`); `dest.len()` elements.
    pub fn get_on_stream<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let dest = dest.into();
        let bytes = dest.len().saturating_mul(std::mem::size_of::<T>());
        let queued = (|| {
            let to = self.locate(dest, dest.len(), "get_on_stream destination", self.my_pe())?;
            let at = self.locate(src.into(), dest.len(), "get_on_stream source", pe)?;
            self.bind()?;
            self.copy_on_stream(to, at, bytes, stream)
        })();
        self.counted_on_stream(Op::Get, pe, bytes, queued)
    }

    /// Queues a write of `value` (at most 16 bytes) into `dest[0]` on PE `pe`
    /// (`nvshmemx_p_on_stream`); the value travels as a kernel parameter, so the stream may
    /// be captured into a graph.
    pub fn p_on_stream<'a, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        if size > 16 {
            return Err(self.inner.traffic.failed(Error::InvalidArgument(format!(
                "p_on_stream takes values of at most 16 bytes, not {size}"
            ))));
        }
        let mut words = [0u8; 16];
        words[..size].copy_from_slice(bytemuck::bytes_of(&value));
        let lo = u64::from_le_bytes(words[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(words[8..].try_into().expect("8 bytes"));
        let queued = self
            .locate(dest.into(), 1, "p_on_stream destination", pe)
            .and_then(|at| {
                self.internal_launch(
                    "fsh_k_p",
                    stream,
                    &[at.into(), (size as u64).into(), lo.into(), hi.into()],
                )
            });
        self.counted_on_stream(Op::Put, pe, size, queued)
    }

    /// Queues a copy of this PE's symmetric `src` into `dest` on PE `pe`, then an update of
    /// the signal `sig[0]` there (`nvshmemx_putmem_signal_on_stream`). A `Set` is a stream
    /// memory write (ordered after the copy, with a memory barrier); an `Add` is an atomic
    /// of a one-thread kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_on_stream<'d, 's, 'g, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        sig: impl Into<SymSlice<'g, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let src = src.into();
        let bytes = src
            .len()
            .saturating_mul(std::mem::size_of::<T>())
            .saturating_add(8);
        let queued = self.locate_signal(sig.into(), pe).and_then(|sig_at| {
            self.queue_put(dest.into(), src, pe, stream)?;
            self.signal_op_on_stream_at(sig_at, value, op, stream)
        });
        self.counted_on_stream(Op::PutSignal, pe, bytes, queued)
    }

    fn signal_op_on_stream_at(
        &self,
        sig_at: u64,
        value: u64,
        op: SignalOp,
        stream: &CudaStream,
    ) -> Result<()> {
        match op {
            SignalOp::Set => {
                self.bind()?;
                driver::write_value64(stream.cu_stream(), sig_at, value)
            }
            SignalOp::Add => {
                self.internal_launch("fsh_k_signal_add", stream, &[sig_at.into(), value.into()])
            }
        }
    }

    /// Queues an update of the signal `sig[0]` on PE `pe` (`nvshmemx_signal_op_on_stream`).
    pub fn signal_op_on_stream<'g>(
        &self,
        sig: impl Into<SymSlice<'g, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let queued = self
            .locate_signal(sig.into(), pe)
            .and_then(|sig_at| self.signal_op_on_stream_at(sig_at, value, op, stream));
        self.counted_on_stream(Op::Signal, pe, 8, queued)
    }

    /// Holds `stream` until this PE's signal `sig[0]` satisfies `cmp value`
    /// (`nvshmemx_signal_wait_until_on_stream`). `Ge` (as a wrapping, signed difference, which
    /// suits counters) and `Eq` are stream memory waits; other comparisons a one-thread kernel.
    pub fn signal_wait_until_on_stream<'g>(
        &self,
        sig: impl Into<SymSlice<'g, u64>>,
        cmp: Cmp,
        value: u64,
        stream: &CudaStream,
    ) -> Result<()> {
        let at = self.locate_signal(sig.into(), self.my_pe())?;
        let flags = match cmp {
            Cmp::Ge => Some(WaitFlags::CU_STREAM_WAIT_VALUE_GEQ),
            Cmp::Eq => Some(WaitFlags::CU_STREAM_WAIT_VALUE_EQ),
            _ => None,
        };
        match flags {
            Some(f) => {
                self.bind()?;
                driver::wait_value64(stream.cu_stream(), at, value, f as u32)
            }
            None => self.internal_launch(
                "fsh_k_wait",
                stream,
                &[at.into(), cmp_code(cmp).into(), value.into()],
            ),
        }
    }

    /// Makes `stream` wait for this PE's host-initiated `_nbi` operations issued so far
    /// (`nvshmemx_quiet_on_stream`); operations queued on `stream` itself complete in order.
    pub fn quiet_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        let event = driver::Event::new()?;
        event.record(self.copy_stream_raw())?;
        event.make_wait(stream.cu_stream())
    }

    /// Queues a barrier of every PE on `stream`: work queued before it on every PE's stream
    /// is complete and visible when work after it starts (`nvshmemx_barrier_all_on_stream`).
    ///
    /// A one-thread kernel of the device library, the same barrier as `fsh_barrier_all` in a
    /// kernel (one epoch on the GPU): on-stream barriers, captured or not, and kernels' barriers
    /// of the PEs meet each other, and every replay of a captured graph is a new barrier. With
    /// one PE there is nothing to wait for and nothing is queued.
    pub fn barrier_all_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.stream_barrier(stream, "fsh_k_barrier_all")
    }

    /// Queues a synchronization of every PE on `stream` (`nvshmemx_sync_all_on_stream`).
    pub fn sync_all_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.stream_barrier(stream, "fsh_k_sync_all")
    }

    fn stream_barrier(&self, stream: &CudaStream, kernel: &str) -> Result<()> {
        if self.n_pes() == 1 {
            return Ok(());
        }
        self.internal_launch(kernel, stream, &[])
    }

    /// Queues an all-to-all exchange (`nvshmemx_alltoallmem_on_stream`): block `j` (of
    /// `nelems` elements) of this PE's `src` goes to block `my_pe` of `dest` on PE `j`, then a
    /// barrier, after which every PE's `dest` holds every PE's contribution. Collective.
    pub fn alltoall_on_stream<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        nelems: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let (dest, src) = (dest.into(), src.into());
        let n = self.n_pes();
        // Everything is checked before the first copy is queued: a refused call queues
        // nothing, so the peers' barrier never waits for this PE.
        let checked = nelems
            .checked_mul(n)
            .ok_or_else(|| Error::InvalidArgument("alltoall size overflows".into()))
            .and_then(|total| {
                let from = self.locate(src, total, "alltoall source", self.my_pe())?;
                let to = (0..n)
                    .map(|j| self.locate(dest, total, "alltoall destination", j))
                    .collect::<Result<Vec<u64>>>()?;
                self.bind()?;
                Ok((from, to))
            });
        let (from, to) = checked.map_err(|e| self.inner.traffic.failed(e))?;
        let bytes = nelems * std::mem::size_of::<T>();
        let block = bytes as u64;
        for (j, at) in to.into_iter().enumerate() {
            let queued = driver::copy_async(
                at + self.my_pe() as u64 * block,
                from + j as u64 * block,
                bytes,
                stream.cu_stream(),
            );
            self.counted_on_stream(Op::Put, j, bytes, queued)?;
        }
        self.barrier_all_on_stream(stream)
    }

    /// Resolves when the work queued on `stream` so far has completed: an event polled by
    /// the completion queue, so no async worker blocks in the driver.
    pub async fn wait_stream(&self, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        self.track(stream.cu_stream())?.await
    }

    /// Records `event` on `stream`, also while `stream` is being captured ([`GpuPe::capture`]):
    /// there the record becomes a node of the graph, replayed with it, so an event recorded
    /// inside a capture and one outside time a part of a replay (`CudaEvent::elapsed_ms`).
    /// Outside a capture it is a plain record.
    ///
    /// # Errors
    /// A driver error.
    pub fn record_event(&self, event: &CudaEvent, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        driver::record_external(event.cu_event(), stream.cu_stream())
    }

    /// Captures what `record` queues on `stream` into a CUDA graph, to replay with
    /// [`Graph::launch`]. On-stream operations and kernels of the device library may be
    /// captured; run each operation once before capturing, so that the kernels behind it are
    /// loaded.
    pub fn capture(
        &self,
        stream: &Arc<CudaStream>,
        record: impl FnOnce(&Arc<CudaStream>) -> Result<()>,
    ) -> Result<Graph> {
        self.internal()?;
        self.bind()?;
        driver::begin_capture(stream.cu_stream())?;
        let recorded = record(stream);
        let graph = driver::end_capture(self.context(), stream.cu_stream());
        recorded?;
        Ok(graph?.owned_by(Owner::new(self.inner.clone())))
    }
}
