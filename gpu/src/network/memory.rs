//! [`GpuHeap`]: a GPU PE's symmetric heap as its NIC agent performs peers' requests on it —
//! copies on a stream of its own (never waiting for the PE's kernels, which may be waiting
//! for the very request), atomics by the `fsh_k_amo` kernel, atomic with the PE's own.
//! [`LocalCopies`]: the initiator side's reads of a WQE's source and writes of what came back.
//! Both copy through [`Staged`]: pinned host memory between the callers' bytes and the GPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};
use ferroshmem_runtime::{Error, Result};

use crate::driver::{self, Pinned};
use crate::module::GpuModule;
use crate::nic::{AmoOp, HeapMemory, LocalMemory, Width};

/// A PE's GPU heap (its whole allocation, header included) for its NIC agent.
pub(crate) struct GpuHeap {
    copies: Staged,
    kernels: GpuModule,
    base: u64,
    size: usize,
    /// Where `fsh_k_amo` leaves the old value (one atomic at a time).
    old: Mutex<Pinned>,
}

impl GpuHeap {
    /// The heap at `base`, `size` bytes, of the PE whose context is `ctx` and whose internal
    /// kernels are `kernels`.
    pub fn new(ctx: &Arc<CudaContext>, kernels: GpuModule, base: u64, size: usize) -> Result<Self> {
        let heap = GpuHeap {
            copies: Staged::new(ctx, "the NIC agent's")?,
            kernels,
            base,
            size,
            old: Mutex::new(Pinned::new(ctx, 8)?),
        };
        // The atomic kernel runs once now, while none of the PE's kernels does, so that
        // whatever a first launch costs (the module's code is loaded with it, see
        // `driver::Module::load`) is paid before a kernel of the PE can be waiting for this
        // very atomic. A fetch of the heap's first word changes nothing.
        heap.atomic(base, Width::W8, AmoOp::Fetch)?;
        Ok(heap)
    }
}

impl HeapMemory for GpuHeap {
    fn base(&self) -> u64 {
        self.base
    }

    fn size(&self) -> usize {
        self.size
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.copies.to_host(addr, out)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        tracing::trace!(addr, len = data.len(), "NIC agent copy");
        self.copies.to_device(addr, data)
    }

    fn atomic(&self, addr: u64, width: Width, op: AmoOp) -> Result<u64> {
        let old = self.old.lock().unwrap_or_else(PoisonError::into_inner);
        // fsh_k_amo takes the operation as the agent's wire code and operands.
        let (kind, operands) = op.encode();
        self.kernels.launch_amo(
            &self.copies.stream,
            (addr, width.bytes() as i32),
            i32::from(kind),
            operands,
            &old,
        )?;
        tracing::trace!(addr, "NIC agent atomic kernel launched");
        driver::stream_synchronize(self.copies.stream.cu_stream())?;
        Ok(old.load_u64(0) & width.mask())
    }
}

/// The initiator side of the network path: a WQE's local buffer, read before the request
/// leaves and written when its reply lands, through copies on a stream of the handler's own;
/// a fetched value bound for a result slot of the queues (pinned host memory) is stored
/// there directly.
pub(crate) struct LocalCopies {
    copies: Staged,
    result_slots: Arc<Pinned>,
}

impl LocalCopies {
    /// Copies on a new stream of `ctx`; `result_slots`: the queues' result slots.
    pub fn new(ctx: &Arc<CudaContext>, result_slots: Arc<Pinned>) -> Result<Self> {
        Ok(LocalCopies {
            copies: Staged::new(ctx, "the NIC handler's")?,
            result_slots,
        })
    }

    /// The result slot at `addr`, when `len` bytes there are one (at most a word, at a
    /// slot's start).
    fn result_slot(&self, addr: u64, len: usize) -> Option<&AtomicU64> {
        let offset = addr.checked_sub(self.result_slots.addr())?;
        if offset % 8 != 0 || len > 8 {
            return None;
        }
        self.result_slots
            .words()
            .get(usize::try_from(offset / 8).ok()?)
    }
}

impl LocalMemory for LocalCopies {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.copies.to_host(addr, &mut out)?;
        Ok(out)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        if let Some(slot) = self.result_slot(addr, data.len()) {
            // The slot is its WQE's alone: the bytes past a narrower value are its zeros. The
            // CQE, written after this store, is what the kernel reads first.
            let mut word = [0u8; 8];
            word[..data.len()].copy_from_slice(data);
            slot.store(u64::from_le_bytes(word), Ordering::Release);
            return Ok(());
        }
        self.copies.to_device(addr, data)
    }
}

/// The bytes of pinned memory copies go through: pageable memory would make the driver
/// stage them itself, at a fraction of the copy engines' speed (on the H200 machine, 512 KiB
/// device to pageable host took about 3 times as long as to pinned host memory).
const STAGING_BYTES: usize = 1 << 20;

/// Copies between host bytes and GPU memory on a stream of their own, through pinned
/// staging memory, a piece of [`STAGING_BYTES`] at a time; one caller at a time.
struct Staged {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    staging: Mutex<Pinned>,
}

impl Staged {
    /// Copies on a new stream of `ctx`, for `whom` (named in errors).
    fn new(ctx: &Arc<CudaContext>, whom: &str) -> Result<Self> {
        driver::bind(ctx)?;
        let stream = ctx
            .new_stream()
            .map_err(|e| Error::cuda(format!("creating {whom} stream: {e}")))?;
        Ok(Staged {
            ctx: ctx.clone(),
            stream,
            staging: Mutex::new(Pinned::new(ctx, STAGING_BYTES)?),
        })
    }

    /// Copies the GPU bytes at `addr` into `out`, done when this returns.
    fn to_host(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, piece) in out.chunks_mut(STAGING_BYTES).enumerate() {
            let stage = &mut staging.bytes_mut()[..piece.len()];
            let from = addr + (i * STAGING_BYTES) as u64;
            driver::copy_to_host_on(stage, from, self.stream.cu_stream())?;
            piece.copy_from_slice(stage);
        }
        Ok(())
    }

    /// Copies `data` to the GPU bytes at `addr`, done when this returns.
    fn to_device(&self, addr: u64, data: &[u8]) -> Result<()> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, piece) in data.chunks(STAGING_BYTES).enumerate() {
            let stage = &mut staging.bytes_mut()[..piece.len()];
            stage.copy_from_slice(piece);
            let to = addr + (i * STAGING_BYTES) as u64;
            driver::copy_from_host_on(to, stage, self.stream.cu_stream())?;
        }
        Ok(())
    }
}
