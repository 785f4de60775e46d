//! Host-initiated RMA on the symmetric GPU heap, as futures: each transfer is a copy-engine
//! copy (`cuMemcpyAsync` between this PE's view of the heap and local device or pinned host
//! memory) on the PE's copy stream, completed through the completion queue's fence. A value
//! of 4 or 8 bytes the host can read (`p`, or `put` from pinned host memory) travels instead
//! as a stream memory write (`cuStreamWriteValue32/64`): no copy engine, no staging. `_nbi`
//! forms return once the copy is queued and complete at [`GpuPe::quiet`].
//!
//! Blocking forms resolve when the data has arrived. Cancel safety: a future dropped before
//! then leaves its copy running (it cannot be recalled); the local buffer it borrowed
//! remembers the copy, and reading, writing or freeing the buffer waits for it. `_nbi` forms
//! take symmetric memory of this PE as their local side, which lives until the collective
//! `free` (and `free` waits for the GPU first). `g` reads into pinned staging slots: copies
//! into a slot run in copy-stream order, so a slot given back by a dropped `g` is never
//! written by its old copy after a new one.
//!
//! Every operation is counted in the PE's traffic (transport `cuda`): a blocking one when it
//! completes, sampled for its latency, and in flight while it runs; an `_nbi` one when it is
//! queued, in flight until the `quiet` that completes it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytemuck::Pod;
use ferroshmem_observability::traffic::Op;
use ferroshmem_observability::Traffic;
use ferroshmem_runtime::{Error, Result, SymSlice};

use crate::buffers::private::Sealed;
use crate::buffers::{HostBuffer, InUse, LocalMem};
use crate::cq::Completion;
use crate::driver::{self, Pinned, Word};
use crate::pe::GpuPe;

/// Bytes of one staging slot: `g` of wider values reads into a pinned buffer of its own.
const SLOT: usize = 64;
const SLOTS: usize = 256;

/// Pinned slots that `g` reads single values into, and the `_nbi` bookkeeping of `quiet`.
#[derive(Debug)]
pub(crate) struct Staging {
    mem: Pinned,
    free: Mutex<Vec<usize>>,
    /// `_nbi` operations issued so far.
    issued: AtomicU64,
    /// Value of `issued` covered by the last completed `quiet`.
    quieted: AtomicU64,
}

impl Staging {
    pub fn new(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> Result<Self> {
        Ok(Staging {
            mem: Pinned::new(ctx, SLOT * SLOTS)?,
            free: Mutex::new((0..SLOTS).collect()),
            issued: AtomicU64::new(0),
            quieted: AtomicU64::new(0),
        })
    }
}

/// A staging slot, given back on drop.
struct Slot<'a> {
    staging: &'a Staging,
    index: usize,
}

impl Slot<'_> {
    fn addr(&self) -> u64 {
        self.staging.mem.addr() + (self.index * SLOT) as u64
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.staging.free.lock().expect("staging").push(self.index);
    }
}

/// The word a stream memory write can carry instead of a copy: `bytes` when they are 4 or 8
/// bytes and `at` is aligned to their size.
fn word_at(at: u64, bytes: &[u8]) -> Option<(u64, Word)> {
    Word::from_bytes(bytes)
        .filter(|w| at % w.size() == 0)
        .map(|w| (at, w))
}

/// Counts one operation in flight until dropped (completed, failed or cancelled).
struct InFlight<'a>(&'a Traffic);

impl<'a> InFlight<'a> {
    fn start(traffic: &'a Traffic) -> Self {
        traffic.in_flight(1);
        InFlight(traffic)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight(-1);
    }
}

impl GpuPe {
    /// Runs `work`, one blocking operation `op` of `bytes` bytes towards PE `pe`, counted in
    /// the PE's traffic: in flight while it runs, then done (its latency sampled) or failed.
    async fn counted<R>(
        &self,
        op: Op,
        pe: usize,
        bytes: usize,
        work: impl Future<Output = Result<R>>,
    ) -> Result<R> {
        let traffic = &self.inner.traffic;
        let timer = traffic.start();
        let flight = InFlight::start(traffic);
        let outcome = work.await;
        drop(flight);
        match outcome {
            Ok(value) => {
                traffic.done(op, pe, bytes, timer);
                Ok(value)
            }
            Err(e) => Err(traffic.failed(e)),
        }
    }

    /// Queues an `_nbi` copy `op` of `bytes` bytes towards PE `pe` on the copy stream,
    /// between the addresses `ends` locates (`(to, from)`): counted once queued, in flight
    /// until the `quiet` that completes it.
    fn copy_nbi(
        &self,
        op: Op,
        pe: usize,
        bytes: usize,
        ends: impl FnOnce() -> Result<(u64, u64)>,
    ) -> Result<()> {
        let queued = ends().and_then(|(to, from)| {
            self.bind()?;
            driver::copy_async(to, from, bytes, self.copy_stream_raw())
        });
        self.count_nbi(op, pe, bytes, queued)
    }

    /// Counts an `_nbi` operation that `started` (or failed to) as in flight until `quiet`.
    fn count_nbi(&self, op: Op, pe: usize, bytes: usize, started: Result<()>) -> Result<()> {
        let traffic = &self.inner.traffic;
        let queued = started.map(|()| {
            // In flight before `quiet` can see it issued, so the gauge never dips.
            traffic.in_flight(1);
            self.note_nbi();
        });
        traffic.count_outcome(op, pe, bytes, queued)
    }

    /// Starts tracking the copy stream's work (after writing `write_first`'s word, when
    /// given, in the same driver call); if that fails, waits for the stream so that no copy
    /// outlives the memory it borrows. The context is bound.
    fn completion(&self, write_first: Option<(u64, Word)>) -> Result<Completion> {
        self.inner.cq.fence(write_first).inspect_err(|_| {
            let _ = driver::stream_synchronize(self.copy_stream_raw());
        })
    }

    /// [`GpuPe::completion`] of a copy that uses local memories `uses`: each remembers it
    /// until it has completed.
    fn completion_using(&self, uses: &[&InUse]) -> Result<Completion> {
        let done = self.completion(None)?;
        if let Some(mark) = done.fence_mark() {
            for memory in uses {
                memory.add(mark.clone());
            }
        }
        Ok(done)
    }

    fn note_nbi(&self) {
        self.inner.staging.issued.fetch_add(1, Ordering::AcqRel);
    }

    /// Copies `src` into `dest` on PE `pe` (`nvshmem_put`); resolves once the data is there.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`], [`Error::NotSymmetric`] (a view of another heap),
    /// [`Error::OutOfBounds`] when `dest` holds fewer than `src.len()` elements, or
    /// [`GpuError::Driver`](ferroshmem_runtime::GpuError::Driver) when the copy fails on the GPU.
    pub async fn put<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        src: &impl LocalMem<T>,
        pe: usize,
    ) -> Result<()> {
        let bytes = src.len().saturating_mul(std::mem::size_of::<T>());
        let dest = dest.into();
        self.counted(Op::Put, pe, bytes, async {
            if self.is_remote(pe) {
                return self.remote_put(dest, src, pe).await;
            }
            let at = self.locate(dest, src.len(), "put destination", pe)?;
            self.bind()?;
            if let Some(word) = src
                .host_bytes()
                .and_then(|h| h.get(..bytes))
                .and_then(|h| word_at(at, h))
            {
                return self.completion(Some(word))?.await;
            }
            driver::copy_async(at, src.addr(), bytes, self.copy_stream_raw())?;
            self.completion_using(&[src.in_use()])?.await
        })
        .await
    }

    /// Copies `src` on PE `pe` into `dest` (`nvshmem_get`); `dest.len()` elements are read.
    pub async fn get<T: Pod>(
        &self,
        dest: &mut impl LocalMem<T>,
        src: impl Into<SymSlice<'_, T>>,
        pe: usize,
    ) -> Result<()> {
        let bytes = dest.len().saturating_mul(std::mem::size_of::<T>());
        let src = src.into();
        self.counted(Op::Get, pe, bytes, async {
            if self.is_remote(pe) {
                return self.remote_get(dest, src, pe).await;
            }
            let at = self.locate(src, dest.len(), "get source", pe)?;
            self.bind()?;
            driver::copy_async(dest.addr(), at, bytes, self.copy_stream_raw())?;
            self.completion_using(&[dest.in_use()])?.await
        })
        .await
    }

    /// Starts copying this PE's symmetric `src` into `dest` on PE `pe` (`nvshmem_put_nbi`);
    /// complete at [`GpuPe::quiet`].
    pub fn put_nbi<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> Result<()> {
        let src = src.into();
        let bytes = src.len().saturating_mul(std::mem::size_of::<T>());
        if self.is_remote(pe) {
            let started = self.remote_put_nbi(dest.into(), src, pe);
            return self.count_nbi(Op::Put, pe, bytes, started);
        }
        self.copy_nbi(Op::Put, pe, bytes, || {
            let from = self.locate(src, src.len(), "put_nbi source", self.my_pe())?;
            let at = self.locate(dest.into(), src.len(), "put_nbi destination", pe)?;
            Ok((at, from))
        })
    }

    /// Starts copying `src` on PE `pe` into this PE's symmetric `dest` (`nvshmem_get_nbi`);
    /// `dest.len()` elements are read; complete at [`GpuPe::quiet`].
    pub fn get_nbi<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> Result<()> {
        let dest = dest.into();
        let bytes = dest.len().saturating_mul(std::mem::size_of::<T>());
        if self.is_remote(pe) {
            let started = self.remote_get_nbi(dest, src.into(), pe);
            return self.count_nbi(Op::Get, pe, bytes, started);
        }
        self.copy_nbi(Op::Get, pe, bytes, || {
            let to = self.locate(dest, dest.len(), "get_nbi destination", self.my_pe())?;
            let at = self.locate(src.into(), dest.len(), "get_nbi source", pe)?;
            Ok((to, at))
        })
    }

    /// Writes one element into `dest[0]` on PE `pe` (`nvshmem_p`); resolves once it is there.
    pub async fn p<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        let bytes = bytemuck::bytes_of(&value);
        let dest = dest.into();
        self.counted(Op::Put, pe, bytes.len(), async {
            if self.is_remote(pe) {
                return self.remote_p(dest, value, pe).await;
            }
            let at = self.locate(dest, 1, "p destination", pe)?;
            self.bind()?;
            if let Some(word) = word_at(at, bytes) {
                return self.completion(Some(word))?.await;
            }
            driver::copy_from_host_async(at, bytes, self.copy_stream_raw())?;
            self.completion(None)?.await
        })
        .await
    }

    /// Reads one element `src[0]` from PE `pe` (`nvshmem_g`).
    pub async fn g<T: Pod>(&self, src: impl Into<SymSlice<'_, T>>, pe: usize) -> Result<T> {
        let size = std::mem::size_of::<T>();
        self.counted(Op::Get, pe, size, self.g_uncounted(src.into(), pe))
            .await
    }

    async fn g_uncounted<T: Pod>(&self, src: SymSlice<'_, T>, pe: usize) -> Result<T> {
        if self.is_remote(pe) {
            return self.remote_g(src, pe).await;
        }
        let at = self.locate(src, 1, "g source", pe)?;
        let size = std::mem::size_of::<T>();
        let taken = self.inner.staging.free.lock().expect("staging").pop();
        match taken {
            Some(index) if size <= SLOT => {
                let slot = Slot {
                    staging: &self.inner.staging,
                    index,
                };
                self.bind()?;
                driver::copy_async(slot.addr(), at, size, self.copy_stream_raw())?;
                self.completion(None)?.await?;
                let mut v = T::zeroed();
                self.inner
                    .staging
                    .mem
                    .read_into(index * SLOT, bytemuck::bytes_of_mut(&mut v));
                Ok(v)
            }
            other => {
                if let Some(index) = other {
                    self.inner.staging.free.lock().expect("staging").push(index);
                }
                let mut one = HostBuffer::<T>::new(self.context(), 1)?;
                driver::copy_async(one.addr(), at, size, self.copy_stream_raw())?;
                self.completion_using(&[one.in_use()])?.await?;
                Ok(one.as_mut_slice()[0])
            }
        }
    }

    /// Copies between two local memories of this PE (device or pinned host), on the copy
    /// stream; `dest.len()` elements.
    pub async fn copy_local<T: Pod>(
        &self,
        dest: &mut impl LocalMem<T>,
        src: &impl LocalMem<T>,
    ) -> Result<()> {
        if src.len() < dest.len() {
            return Err(Error::OutOfBounds {
                what: "local copy source",
                needed: dest.len(),
                available: src.len(),
            });
        }
        self.bind()?;
        driver::copy_async(
            dest.addr(),
            src.addr(),
            dest.len().saturating_mul(std::mem::size_of::<T>()),
            self.copy_stream_raw(),
        )?;
        self.completion_using(&[dest.in_use(), src.in_use()])?.await
    }

    /// Orders this PE's host-initiated operations to each PE (`nvshmem_fence`). They run in
    /// order on one copy stream already, so this only keeps the OpenSHMEM call.
    pub fn fence(&self) {}

    /// Completes every `_nbi` operation this PE has issued from the host (`nvshmem_quiet`).
    /// Those on PEs of other nodes are awaited too, each of them even past a failure; the
    /// first failure (a refused request, a lost peer) is returned.
    pub async fn quiet(&self) -> Result<()> {
        let staging = &self.inner.staging;
        let issued = staging.issued.load(Ordering::Acquire);
        if issued == staging.quieted.load(Ordering::Acquire) {
            return Ok(());
        }
        let remote = self.quiet_remote().await;
        self.bind()?;
        self.completion(None)?.await?;
        let before = staging.quieted.fetch_max(issued, Ordering::AcqRel);
        let completed = issued.saturating_sub(before);
        self.inner.traffic.in_flight(-(completed as i64));
        remote
    }

    /// Completes this PE's host-initiated operations, then synchronizes every PE on the host
    /// (`nvshmem_barrier_all` called from the host). An error of the completion is reported
    /// after the synchronization, which takes place all the same.
    ///
    /// Cancel safety: not cancel safe; dropped midway (or failing midway), it leaves this PE
    /// out of step with the others, so every later host `sync_all` and `barrier_all` of the
    /// PE fails with [`Error::InvalidArgument`].
    pub async fn barrier_all(&self) -> Result<()> {
        let quieted = self.quiet().await;
        let synced = self.host().sync_all().await;
        quieted.and(synced)
    }

    /// Synchronizes every PE on the host without completing anything (`nvshmem_sync_all`).
    ///
    /// Cancel safety: as [`GpuPe::barrier_all`].
    pub async fn sync_all(&self) -> Result<()> {
        self.host().sync_all().await
    }
}
