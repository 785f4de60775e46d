//! [`GpuPe`]: a PE's GPU. Set up collectively (every PE of the job at once): each PE opens
//! the GPU of its node-local rank, creates its VMM allocation, exchanges the handles with the
//! other PEs of the node, and maps every PE's allocation into its view of the heap. Then it
//! serves collective allocation of symmetric GPU memory, like the host heap's.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytemuck::Pod;
use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaContext, CudaStream};
use ferroshmem_observability::{HeapMemory, Traffic};
use ferroshmem_runtime::config::{node_key, spin_from_env, symmetric_size_from_env};
use ferroshmem_runtime::heap::HeapAllocator;
use ferroshmem_runtime::{
    DataPlane, Error, Exchange, GpuError, HeapId, Result, SymBuffer, SymSlice,
};

use crate::collective::GPU_GROUP;
use crate::context::{detect, device_for_local_rank, ordinal_of, GpuDevice};
use crate::cq::{Completion, Cq};
use crate::driver::{self, Physical};
use crate::fd_share::fetch;
use crate::heap::{gpu_heap_id, HeapView, GPU_HEADER};
use crate::module::{DeviceState, InternalKernels, REPORT_OFFSET};
use crate::network::{Network, NetworkParts};
use crate::sharing::GpuSharing;
use setup::{
    check_all_mapped, mapped_status, node_ranks, put_bytes, read_peers, PeerGpu, Prepared,
};

/// A PE's GPU: its context, its view of the symmetric GPU heap, its copy stream and
/// completion queue. Cheap to clone, `Send + Sync`.
#[derive(Clone, Debug)]
pub struct GpuPe {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    // Field order is drop order: the completion thread and kernels go before the streams,
    // the streams before the heap mappings, and the context (inside `device`) last.
    pub cq: Cq,
    pub internal: OnceLock<InternalKernels>,
    pub copy_stream: Arc<CudaStream>,
    pub staging: crate::rma::Staging,
    pub view: HeapView,
    pub device: GpuDevice,
    pub my_pe: usize,
    pub n_pes: usize,
    pub heap: HeapId,
    pub stride: usize,
    pub allocator: Arc<tokio::sync::Mutex<HeapAllocator>>,
    pub exchange: Arc<dyn Exchange>,
    pub host: Arc<DataPlane>,
    pub debug: bool,
    /// The PE's host-initiated and on-stream operations, transport [`TRANSPORT`].
    pub traffic: Traffic,
    /// Who else uses this PE's GPU.
    pub sharing: GpuSharing,
    /// Per PE: whether it lives on another node (its GPU heap is not mapped here).
    pub remote: Vec<bool>,
    /// The network path to those PEs (set once at init, when the job spans nodes).
    pub network: OnceLock<Network>,
}

/// The `transport` label of GPU PEs' traffic: copy engines and stream memory operations
/// between GPU heaps (over NVLink between GPUs).
pub const TRANSPORT: &str = "cuda";

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuPe")
            .field("my_pe", &self.my_pe)
            .field("n_pes", &self.n_pes)
            .field("device", &self.device.ordinal())
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Nothing of ours may still run when the mappings go away.
        if self.device.bind().is_ok() {
            let _ = self.device.context().synchronize();
        }
    }
}

/// `FERROSHMEM_DEVICE_DEBUG=1` turns the device library's checks on for every module.
fn debug_from_env() -> bool {
    std::env::var("FERROSHMEM_DEVICE_DEBUG").is_ok_and(|v| v == "1" || v == "true")
}

const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

impl GpuPe {
    /// Sets up PE `my_pe` of `n_pes` on its GPU. Collective: every PE of the job calls it,
    /// once. `host` is the PE's host data plane (for `barrier_all`), `exchange` its control
    /// plane. The heap size is `FERROSHMEM_SYMMETRIC_SIZE` (or `NVSHMEM_SYMMETRIC_SIZE`),
    /// rounded up to the GPU's granularity.
    ///
    /// # Errors
    /// [`GpuError::NoGpu`](ferroshmem_runtime::GpuError::NoGpu) without a usable GPU (on any PE: the others fail with it too, since
    /// the set-up exchange carries it), [`GpuError::Unreachable`](ferroshmem_runtime::GpuError::Unreachable) when two GPUs cannot reach each other
    /// (no peer-to-peer path: the proxy transport is not built yet) or a driver call fails.
    ///
    /// A job whose PEs span nodes needs `rings` ([`GpuPe::network_ring_words`] words of the
    /// host symmetric heap, the same buffer on every PE): the network path to the PEs of
    /// other nodes runs over them. Without them such peers are unreachable from kernels.
    pub async fn init(
        host: Arc<DataPlane>,
        exchange: Arc<dyn Exchange>,
        rings: Option<SymBuffer<u64>>,
    ) -> Result<GpuPe> {
        let (my_pe, n_pes) = (host.my_pe(), host.n_pes());
        let heap_size = symmetric_size_from_env()?;
        // Round 1: who shares the node (node-local rank → device). A PE without a GPU says
        // so, so that every PE fails alike instead of waiting for it.
        let key = node_key();
        let opened = async {
            let (local_rank, in_process) = {
                let mut msg = Vec::new();
                put_bytes(&mut msg, key.as_bytes());
                put_bytes(&mut msg, &std::process::id().to_le_bytes());
                let all = exchange.exchange(GPU_GROUP, my_pe, n_pes, msg).await?;
                node_ranks(&all, my_pe, key.as_bytes())?
            };
            let started = std::time::Instant::now();
            let opened = tokio::task::spawn_blocking(move || {
                let ordinal = device_for_local_rank(local_rank)?;
                // PEs of this process on one GPU get a context each: a synchronizing call
                // of one (a free, a module load) then never waits for another's kernels,
                // which may be waiting for it.
                let devices = detect()?.devices;
                let shared = in_process.iter().any(|r| r % devices == ordinal);
                match shared {
                    true => GpuDevice::open_own_context(ordinal),
                    false => GpuDevice::open(ordinal),
                }
            })
            .await
            .map_err(|e| Error::cuda(format!("opening the GPU panicked: {e}")))?;
            tracing::debug!(pe = my_pe, elapsed = ?started.elapsed(), "GPU context open");
            Ok::<_, Error>(opened)
        }
        .await?;
        let pe = Self::setup(host, exchange, opened, heap_size).await?;
        if let Some(rings) = rings {
            pe.start_network(rings).await?;
        }
        Ok(pe)
    }

    /// The words of host symmetric memory [`GpuPe::init`] needs for the network path of a
    /// job of `n_pes` PEs spanning nodes.
    ///
    /// # Errors
    /// [`Error::Config`] for a `FERROSHMEM_NIC_RING` or `FERROSHMEM_NIC_CHUNK` that does not
    /// parse or does not fit (see the README's network path).
    pub fn network_ring_words(n_pes: usize) -> Result<usize> {
        crate::network::ring_words(n_pes)
    }

    /// Starts the network path to the PEs of other nodes (collective).
    async fn start_network(&self, rings: SymBuffer<u64>) -> Result<()> {
        // The services' own context (see `driver::service_context`) and the agent's kernels
        // in it: `fsh_k_amo`, all it runs, uses no device state.
        let pe = self.clone();
        let (service, kernels) = tokio::task::spawn_blocking(move || {
            let service = crate::network::service_context_or_own(&pe);
            let kernels = InternalKernels::load_into(&pe, &service)?;
            Ok::<_, Error>((service, kernels))
        })
        .await
        .map_err(|e| Error::cuda(format!("starting the NIC agent's context panicked: {e}")))??;
        let network = Network::start(NetworkParts {
            ctx: self.context().clone(),
            service,
            kernels: kernels.module,
            heap_base: self.inner.view.pe_base(self.my_pe()),
            heap_size: self.inner.stride,
            remote: self.inner.remote.clone(),
            host: self.inner.host.clone(),
            exchange: self.inner.exchange.clone(),
            rings,
        })
        .await?;
        let _ = self.inner.network.set(network);
        tracing::debug!(pe = self.my_pe(), "network path ready");
        Ok(())
    }

    async fn setup(
        host: Arc<DataPlane>,
        exchange: Arc<dyn Exchange>,
        opened: Result<GpuDevice>,
        heap_size: usize,
    ) -> Result<GpuPe> {
        let (my_pe, n_pes) = (host.my_pe(), host.n_pes());
        // Round 2: each PE's device, allocation size and handle token, or its failure.
        let prepared = opened.and_then(|device| Prepared::new(device, my_pe, heap_size));
        let announced = Prepared::announcement(&prepared);
        let all = exchange
            .exchange(GPU_GROUP, my_pe, n_pes, announced)
            .await?;
        let Prepared {
            device,
            granularity: gran,
            stride,
            physical,
            server,
            ..
        } = prepared?;
        let (peers, same_gpu) = read_peers(&all, host.nodes(), my_pe, device.uuid(), stride)?;
        // Map every PE's allocation and start the completion queue; round 3 tells everyone
        // whether every PE managed, so that a PE that failed here fails the others too
        // instead of leaving them waiting.
        let started = std::time::Instant::now();
        let traffic = host.metrics().traffic(TRANSPORT, n_pes);
        let sharing = GpuSharing::from_peers(&same_gpu, device.mps_enabled());
        sharing.report(my_pe, device.ordinal());
        let mapped = Self::map_all(&device, &peers, my_pe, n_pes, stride, gran, physical)
            .await
            .and_then(|(view, copy_stream)| {
                let (cq, staging) = Self::start_queues(&device, my_pe, &copy_stream, &traffic)?;
                Ok((view, copy_stream, cq, staging))
            });
        let status = mapped_status(&mapped);
        let all = exchange.exchange(GPU_GROUP, my_pe, n_pes, status).await?;
        drop(server);
        let (view, copy_stream, cq, staging) = mapped?;
        check_all_mapped(&all)?;
        tracing::debug!(pe = my_pe, elapsed = ?started.elapsed(), "GPU heap mapped");
        let remote: Vec<bool> = (0..n_pes)
            .map(|pe| host.nodes()[pe] != host.nodes()[my_pe])
            .collect();
        let inner = Inner {
            cq,
            internal: OnceLock::new(),
            copy_stream,
            staging,
            view,
            device,
            my_pe,
            n_pes,
            heap: gpu_heap_id(host.heap_id()),
            stride,
            // The heap starts GPU_HEADER bytes into an allocation aligned to the device's
            // granularity (a larger power of two).
            allocator: Arc::new(tokio::sync::Mutex::new(HeapAllocator::new(
                stride - GPU_HEADER,
                GPU_HEADER,
            ))),
            exchange,
            host,
            debug: debug_from_env(),
            traffic,
            sharing,
            remote,
            network: OnceLock::new(),
        };
        tracing::debug!(
            pe = my_pe,
            device = inner.device.ordinal(),
            stride,
            granularity = gran,
            "GPU PE ready"
        );
        Ok(Self::ready(inner).await)
    }

    /// Starts PE `my_pe`'s completion queue (polling `copy_stream` among others) and its
    /// staging buffers.
    fn start_queues(
        device: &GpuDevice,
        my_pe: usize,
        copy_stream: &Arc<CudaStream>,
        traffic: &Traffic,
    ) -> Result<(Cq, crate::rma::Staging)> {
        let cq = Cq::start(
            my_pe,
            device.context().clone(),
            spin_from_env()?,
            copy_stream.clone(),
            traffic.clone(),
        )?;
        let staging = crate::rma::Staging::new(device.context())?;
        Ok((cq, staging))
    }

    /// The PE made of `inner`: starts compiling the internal kernels its GPU and routes need
    /// (in the background) and reports its heap.
    async fn ready(inner: Inner) -> GpuPe {
        InternalKernels::precompile(
            inner.device.compute_capability(),
            inner.remote.iter().any(|&r| r),
        );
        let pe = GpuPe {
            inner: Arc::new(inner),
        };
        pe.report_heap(&*pe.inner.allocator.lock().await);
        pe
    }

    /// Checks peer-to-peer reachability, maps this PE's allocation and every peer's (fetched
    /// from its handle server) into a new view, and zeroes this PE's header.
    async fn map_all(
        device: &GpuDevice,
        peers: &[PeerGpu],
        my_pe: usize,
        n_pes: usize,
        stride: usize,
        gran: usize,
        physical: Physical,
    ) -> Result<(HeapView, Arc<CudaStream>)> {
        device.bind()?;
        for (pe, (uuid, _)) in peers
            .iter()
            .enumerate()
            .filter_map(|(pe, p)| Some((pe, p.as_ref()?)))
        {
            if let Some(theirs) = ordinal_of(uuid)? {
                if !driver::can_access_peer(device.ordinal(), theirs)? {
                    return Err(unreachable(my_pe, device.ordinal(), pe, theirs,
                        "no NVLink/PCIe peer-to-peer path (ferroshmem's proxy transport for such pairs is not built yet)"));
                }
                if !driver::peer_atomics_native(device.ordinal(), theirs)? {
                    return Err(unreachable(my_pe, device.ordinal(), pe, theirs,
                        "its atomics there are not atomic with that GPU's own (a PCIe link without native peer atomics; ferroshmem's proxy transport for such pairs is not built yet)"));
                }
            }
        }
        let mut view = HeapView::reserve(n_pes, stride, gran)?;
        view.map(my_pe, physical, device.ordinal())?;
        let copy_stream = device
            .context()
            .new_stream()
            .map_err(|e| Error::cuda(format!("creating the copy stream: {e}")))?;
        driver::zero_async(view.pe_base(my_pe), GPU_HEADER, copy_stream.cu_stream())?;
        driver::stream_synchronize(copy_stream.cu_stream())?;
        let fetches = peers
            .iter()
            .enumerate()
            .filter(|(pe, _)| *pe != my_pe)
            .filter_map(|(pe, peer)| Some((pe, peer.as_ref()?.1)))
            .map(|(pe, token)| async move { (pe, fetch(pe, token, FETCH_TIMEOUT).await) });
        for (pe, fetched) in futures::future::join_all(fetches).await {
            let (payload, fd) = fetched?;
            let size = payload
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| Error::Bootstrap(format!("malformed GPU handle of PE {pe}")))?;
            device.bind()?;
            let physical = Physical::import(fd, size as usize)?;
            view.map(pe, physical, device.ordinal()).map_err(|e| {
                Error::cuda(format!(
                    "mapping the GPU heap of PE {pe} into PE {my_pe}'s view: {e}"
                ))
            })?;
        }
        Ok((view, copy_stream))
    }

    /// This PE's number.
    pub fn my_pe(&self) -> usize {
        self.inner.my_pe
    }

    /// The number of PEs.
    pub fn n_pes(&self) -> usize {
        self.inner.n_pes
    }

    /// The PE's GPU.
    pub fn device(&self) -> &GpuDevice {
        &self.inner.device
    }

    /// The PE's CUDA context (bind it before raw driver calls of your own).
    pub fn context(&self) -> &Arc<CudaContext> {
        self.inner.device.context()
    }

    /// A new non-blocking stream on the PE's GPU, for on-stream operations and kernels.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.context()
            .new_stream()
            .map_err(|e| Error::cuda(format!("creating a stream: {e}")))
    }

    /// Who else uses this PE's GPU (found at set-up).
    pub fn sharing(&self) -> &GpuSharing {
        &self.inner.sharing
    }

    /// The host data plane of this PE.
    pub fn host(&self) -> &Arc<DataPlane> {
        &self.inner.host
    }

    /// Zeroes `bytes` bytes of this PE's GPU heap at `offset`, and waits for it.
    pub(crate) async fn zero_own(&self, offset: usize, bytes: usize) -> Result<()> {
        self.bind()?;
        driver::zero_async(
            self.addr_of(self.my_pe(), offset),
            bytes,
            self.copy_stream_raw(),
        )?;
        self.track(self.copy_stream_raw())?.await
    }

    /// Publishes the GPU heap's use in the metrics (`memory="gpu"`).
    pub(crate) fn report_heap(&self, heap: &HeapAllocator) {
        self.host()
            .metrics()
            .set_heap(HeapMemory::Gpu, heap.used(), self.heap_size());
    }

    /// The identity of the job's GPU heap (its views are refused by host operations, and
    /// host-heap views by GPU operations).
    pub fn heap_id(&self) -> HeapId {
        self.inner.heap
    }

    /// Usable bytes of each PE's GPU heap.
    pub fn heap_size(&self) -> usize {
        self.inner.stride - GPU_HEADER
    }

    /// Bytes of this PE's GPU heap in use.
    pub async fn heap_used(&self) -> usize {
        self.inner.allocator.lock().await.used()
    }

    /// Whether device-library modules of this PE are compiled with the debug checks.
    pub fn device_debug(&self) -> bool {
        self.inner.debug
    }

    pub(crate) fn bind(&self) -> Result<()> {
        self.inner.device.bind()
    }

    pub(crate) fn copy_stream_raw(&self) -> CUstream {
        self.inner.copy_stream.cu_stream()
    }

    /// Queues completion tracking of the work on `stream` so far.
    pub(crate) fn track(&self, stream: CUstream) -> Result<Completion> {
        self.inner.cq.submit(stream)
    }

    /// The address, in this PE's view, of heap offset `offset` (user area) of PE `pe`.
    pub(crate) fn addr_of(&self, pe: usize, offset: usize) -> u64 {
        self.inner.view.pe_base(pe) + (GPU_HEADER + offset) as u64
    }

    pub(crate) fn check_pe(&self, pe: usize) -> Result<()> {
        if pe >= self.inner.n_pes {
            return Err(Error::PeOutOfRange {
                pe,
                n_pes: self.inner.n_pes,
            });
        }
        Ok(())
    }

    /// Whether this PE's job spans nodes (some PE is reached through the network path):
    /// modules are then compiled with the network path, and modules compiled without it are
    /// refused.
    pub fn spans_nodes(&self) -> bool {
        self.inner.remote.iter().any(|&r| r)
    }

    /// Whether PE `pe` lives on another node: its GPU heap is not mapped here and is reached
    /// through the NIC handler.
    pub fn is_remote(&self, pe: usize) -> bool {
        self.inner.remote.get(pe).copied().unwrap_or(false)
    }

    /// Checks a view that must hold `needed` elements; returns its address on PE `pe`.
    pub(crate) fn locate<T: Pod>(
        &self,
        view: SymSlice<'_, T>,
        needed: usize,
        what: &'static str,
        pe: usize,
    ) -> Result<u64> {
        self.check_pe(pe)?;
        if self.is_remote(pe) {
            return Err(unreachable(
                self.my_pe(),
                self.device().ordinal(),
                pe,
                self.device().ordinal(),
                "it lives on another node: its GPU heap is not mapped here",
            ));
        }
        let offset = self.heap_offset(view, needed, what)?;
        Ok(self.addr_of(pe, offset))
    }

    /// Checks a view of the GPU heap that must hold `needed` elements; returns its offset in
    /// the user area.
    pub(crate) fn heap_offset<T: Pod>(
        &self,
        view: SymSlice<'_, T>,
        needed: usize,
        what: &'static str,
    ) -> Result<usize> {
        let span = view.span(self.inner.heap)?;
        // A handle made by hand may claim any range: it must lie inside the GPU heap.
        if view.reach().1 > self.heap_size() {
            return Err(Error::NotSymmetric);
        }
        if needed > span.len {
            return Err(Error::OutOfBounds {
                what,
                needed,
                available: span.len,
            });
        }
        Ok(span.offset)
    }

    /// [`GpuPe::locate`] for a 64-bit signal word, `view[0]` of PE `pe`, which the GPU
    /// updates atomically or waits on: a misaligned one is refused before anything is queued
    /// (on the GPU it would fail the whole context).
    pub(crate) fn locate_signal(&self, view: SymSlice<'_, u64>, pe: usize) -> Result<u64> {
        let at = self.locate(view, 1, "signal", pe)?;
        if at % 8 != 0 {
            return Err(Error::MisalignedAtomic {
                offset: (at - self.addr_of(pe, 0)) as usize,
                align: 8,
            });
        }
        Ok(at)
    }

    /// The address of `view` on PE `pe` in this PE's view: what `nvshmem_ptr` gives, for
    /// kernels of this PE's GPU (and for on-stream copies).
    pub fn ptr<'a, T: Pod>(&self, view: impl Into<SymSlice<'a, T>>, pe: usize) -> Result<u64> {
        self.locate(view.into(), 0, "symmetric view", pe)
    }

    /// The address of this PE's own copy of `view`, to pass to kernels.
    pub fn local_ptr<'a, T: Pod>(&self, view: impl Into<SymSlice<'a, T>>) -> Result<u64> {
        self.ptr(view, self.inner.my_pe)
    }

    /// Where this PE's device-library debug report lives (in its own heap header).
    pub(crate) fn report_addr(&self) -> u64 {
        self.inner.view.pe_base(self.inner.my_pe) + REPORT_OFFSET as u64
    }

    /// The device state the device library reads (for modules of this PE).
    pub(crate) fn device_state(&self) -> DeviceState {
        DeviceState {
            view_base: self.inner.view.base(),
            stride: self.inner.stride as u64,
            header: GPU_HEADER as u64,
            report: self.report_addr(),
            my_pe: self.inner.my_pe as i32,
            n_pes: self.inner.n_pes as i32,
            debug: i32::from(self.inner.debug),
            reserved: 0,
            net: self.inner.network.get().map_or(0, Network::device_addr),
        }
    }

    /// The kernels behind on-stream operations: compiled from `init` on a thread of their
    /// own, loaded into the context at their first use (which waits for that compile, or
    /// compiles them itself if it failed; a failure is tried again at the next use).
    pub(crate) fn internal(&self) -> Result<&InternalKernels> {
        if let Some(kernels) = self.inner.internal.get() {
            return Ok(kernels);
        }
        let loaded = InternalKernels::load(self)?;
        // Two threads may have compiled them at once; either copy will do.
        let _ = self.inner.internal.set(loaded);
        Ok(self.inner.internal.get().expect("set just above"))
    }

    /// Waits until every piece of work queued in this PE's context has finished (off the
    /// async workers). PEs of one process on one GPU have a context each, so this never
    /// waits for another PE's kernels.
    pub async fn synchronize(&self) -> Result<()> {
        let ctx = self.context().clone();
        tokio::task::spawn_blocking(move || {
            driver::bind(&ctx)?;
            ctx.synchronize()
                .map_err(|e| Error::cuda(format!("synchronizing the GPU: {e}")))
        })
        .await
        .map_err(|e| Error::cuda(format!("GPU synchronize task failed: {e}")))??;
        match self.inner.network.get().and_then(Network::take_failure) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// [`GpuError::Unreachable`]: PE `pe`'s GPU `gpu` cannot reach PE `peer`'s GPU `peer_gpu`.
fn unreachable(pe: usize, gpu: usize, peer: usize, peer_gpu: usize, why: &'static str) -> Error {
    Error::Gpu(GpuError::Unreachable {
        pe,
        gpu,
        peer,
        peer_gpu,
        why,
    })
}

#[path = "pe_setup.rs"]
mod setup;

#[cfg(test)]
#[path = "pe_tests.rs"]
mod tests;
