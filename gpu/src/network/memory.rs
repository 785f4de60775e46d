//! [`GpuHeap`]: a GPU PE's symmetric heap as its NIC agent performs peers' requests on it —
//! copies on a stream of its own (never waiting for the PE's kernels, which may be waiting
//! for the very request), atomics by the `fsh_k_amo` kernel, atomic with the PE's own.
//! [`LocalCopies`]: the initiator side's reads of a WQE's source and writes of what came back.
//! Both copy through [`Staged`] pinned memory, batching what they can.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::CudaContext;
use ferroshmem_runtime::Result;

use super::staged::Staged;
use crate::driver::{self, HostRegistration, Pinned};
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
    /// The agent's rings in this process's memory, registered with the driver: write
    /// payloads are copied to the GPU straight from there.
    ring: Option<RingSource>,
}

/// The agent's rings as a source of copies: their host address and registration.
struct RingSource {
    host: u64,
    registration: HostRegistration,
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
            ring: None,
        };
        // The atomic kernel runs once now, while none of the PE's kernels does, so that
        // whatever a first launch costs (the module's code is loaded with it, see
        // `driver::Module::load`) is paid before a kernel of the PE can be waiting for this
        // very atomic. A fetch of the heap's first word changes nothing.
        heap.atomic(base, Width::W8, AmoOp::Fetch)?;
        Ok(heap)
    }
}

impl GpuHeap {
    /// Has write payloads copied to the GPU straight from the agent's rings, `bytes` at
    /// `host` in this process (the host symmetric buffer the agent runs on, which outlives
    /// this heap's use by the agent), registered with the driver in `ctx`. Where the driver
    /// refuses, payloads go through the staging memory as before (logged).
    pub fn copy_from_ring(&mut self, ctx: &Arc<CudaContext>, host: u64, bytes: usize) {
        // The driver registers whole pages.
        let page = ferroshmem_runtime::shared_memory::page_size() as u64;
        let start = host - host % page;
        let end = (host + bytes as u64).next_multiple_of(page);
        match HostRegistration::new(ctx, start, (end - start) as usize) {
            Ok(registration) => self.ring = Some(RingSource { host, registration }),
            Err(error) => tracing::debug!(
                %error,
                "the NIC agent's rings could not be registered: write payloads go through the staging memory"
            ),
        }
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

    fn write_deferred(&self, addr: u64, data: &[u8]) -> Result<()> {
        tracing::trace!(addr, len = data.len(), "NIC agent copy deferred");
        self.copies.to_device_deferred(addr, data)
    }

    fn write_deferred_from(
        &self,
        addr: u64,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        tracing::trace!(addr, len, "NIC agent copy deferred, filled in place");
        self.copies.to_device_deferred_from(addr, len, fill)
    }

    fn write_deferred_from_ring(&self, addr: u64, offset: usize, len: usize) -> Option<Result<()>> {
        let ring = self.ring.as_ref()?;
        let host = ring.host.checked_add(offset as u64)?;
        if !ring.registration.holds(host, len) {
            return None;
        }
        tracing::trace!(addr, len, "NIC agent copy deferred, from the ring");
        Some(self.copies.to_device_deferred_from_host(addr, host, len))
    }

    fn write_ordered(&self, addr: u64, data: &[u8]) -> Result<()> {
        tracing::trace!(addr, len = data.len(), "NIC agent copy after the others");
        self.copies.to_device_after(addr, data)
    }

    fn flush(&self) -> Result<()> {
        self.copies.drain()
    }

    fn atomic(&self, addr: u64, width: Width, op: AmoOp) -> Result<u64> {
        // The deferred writes before it land first (they may be to the same word).
        self.copies.drain()?;
        let old = self.old.lock().unwrap_or_else(PoisonError::into_inner);
        // fsh_k_amo takes the operation as the agent's wire code and operands.
        let (kind, operands) = op.encode();
        self.kernels.launch_amo(
            self.copies.stream(),
            (addr, width.bytes() as i32),
            i32::from(kind),
            operands,
            &old,
        )?;
        tracing::trace!(addr, "NIC agent atomic kernel launched");
        driver::stream_synchronize(self.copies.stream().cu_stream())?;
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

    fn read_many(&self, spans: &[(u64, usize)]) -> Vec<Result<Vec<u8>>> {
        self.copies.to_host_many(spans)
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

    fn write_deferred(&self, addr: u64, data: &[u8]) -> Result<()> {
        match self.result_slot(addr, data.len()) {
            Some(_) => self.write(addr, data),
            None => self.copies.to_device_deferred(addr, data),
        }
    }

    fn flush(&self) -> Result<()> {
        self.copies.drain()
    }
}
