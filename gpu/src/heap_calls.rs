//! Collective calls on the symmetric GPU heap (`malloc`, `calloc`, `align`, `free`): the
//! local allocator's decision, agreed on by every PE through one exchange (a PE that differs
//! makes the call fail on every PE, and nothing changes), run to its end even when the
//! caller stops waiting.

use bytemuck::Pod;
use ferroshmem_runtime::heap::{AllocRequest, HeapAllocator, HeapCall};
use ferroshmem_runtime::{Allocation, Error, Result, SymBuffer};
use tokio::sync::OwnedMutexGuard;

use crate::collective::GPU_GROUP;
use crate::heap::{GpuBuffer, GPU_HEADER};
use crate::pe::GpuPe;

/// What the GPU heap asks of an allocation besides the host's checks: device addresses are
/// aligned only [`GPU_HEADER`] far.
fn gpu_checked(request: &AllocRequest) -> Result<(usize, usize)> {
    let (bytes, align) = request.checked()?;
    if align > GPU_HEADER {
        return Err(Error::AlignmentTooLarge {
            align,
            max: GPU_HEADER,
        });
    }
    Ok((bytes, align))
}

impl GpuPe {
    async fn allocate<T: Pod>(&self, len: usize, align: usize, zero: bool) -> Result<GpuBuffer<T>> {
        let request = AllocRequest::of::<T>(len, align);
        // The heap is this call's from here on: calls run in the order they were made, and a
        // future dropped before this point has had no effect.
        let heap = self.inner.allocator.clone().lock_owned().await;
        let pe = self.clone();
        let alloc = run_to_the_end(async move { pe.allocate_bytes(heap, request, zero).await })
            .await
            .and_then(|done| done)?;
        Ok(GpuBuffer::new(SymBuffer::from_allocation(alloc, len)?))
    }

    /// The collective part of an allocation. A request this PE refuses still takes part in
    /// the agreement, as an allocation that failed locally, so that the others fail instead
    /// of waiting for it.
    async fn allocate_bytes(
        &self,
        mut heap: OwnedMutexGuard<HeapAllocator>,
        request: AllocRequest,
        zero: bool,
    ) -> Result<Allocation> {
        self.inner.host.health().check()?;
        let bytes = request.bytes();
        let mut local = gpu_checked(&request).and_then(|(bytes, align)| heap.alloc(bytes, align));
        if let (Ok(offset), true) = (&local, zero) {
            // A failed zero-fill is a failed local allocation: this PE still takes part in
            // the agreement below (the others would wait for it), and every PE rolls back.
            let offset = *offset;
            if let Err(e) = self.zero_own(offset, bytes).await {
                let _ = heap.free(offset);
                local = Err(e);
            }
        }
        let call = HeapCall::alloc(bytes, request.align(), local.as_ref().ok().copied());
        let agreed = self.agree(&call, "GPU malloc").await;
        // A PE whose own step failed reports why; the others, the mismatch.
        let offset = match (local, agreed) {
            (Err(own), _) => return Err(own),
            (Ok(offset), Err(e)) => {
                let _ = heap.free(offset);
                return Err(e);
            }
            (Ok(offset), Ok(())) => offset,
        };
        self.report_heap(&heap);
        Ok(Allocation::new(self.inner.heap, offset, bytes))
    }

    /// Allocates `len` elements of `T` in every PE's GPU heap (`nvshmem_malloc`). Collective:
    /// every PE calls it with the same `len`, in the same order; a PE that differs gets, on
    /// every PE, [`Error::CollectiveMismatch`] and nothing is allocated. Contents unspecified.
    ///
    /// # Cancel safety
    /// Once it has this PE's GPU heap to itself (calls take it in the order they are made),
    /// the call runs to its end as a task of its own even if this future is dropped, so that
    /// the other PEs are not left waiting and every heap stays in step; a buffer allocated
    /// for a dropped future stays allocated (unreachable) for the life of the PE. A future
    /// dropped while an earlier call still holds the heap has done nothing. The same
    /// holds for [`GpuPe::calloc`], [`GpuPe::align`] and [`GpuPe::free`] (a dropped free
    /// still frees).
    pub async fn malloc<T: Pod>(&self, len: usize) -> Result<GpuBuffer<T>> {
        self.allocate(len, std::mem::align_of::<T>(), false).await
    }

    /// As [`GpuPe::malloc`], zero-filled (`nvshmem_calloc`).
    pub async fn calloc<T: Pod>(&self, len: usize) -> Result<GpuBuffer<T>> {
        self.allocate(len, std::mem::align_of::<T>(), true).await
    }

    /// As [`GpuPe::malloc`], aligned to `align` bytes, a power of two of at most
    /// [`GPU_HEADER`](crate::GPU_HEADER) (64 KiB) (`nvshmem_align`).
    ///
    /// # Errors
    /// [`Error::InvalidAlignment`] for 0 or a non-power of two, [`Error::AlignmentTooLarge`]
    /// above 64 KiB (device addresses are aligned only that far), as [`GpuPe::malloc`]
    /// otherwise.
    pub async fn align<T: Pod>(&self, align: usize, len: usize) -> Result<GpuBuffer<T>> {
        self.allocate(len, align, false).await
    }

    /// Frees a symmetric GPU buffer on every PE (`nvshmem_free`). Collective, like `malloc`.
    /// It first completes this PE's host operations (as [`GpuPe::quiet`]: a `get_nbi` from a
    /// PE of another node lands then) and waits until its GPU has finished all queued work
    /// (on-stream operations and kernels), so no transfer of this PE still uses the memory
    /// when another PE reuses it. When either fails, the free fails on every PE (here with
    /// that error, elsewhere with [`Error::CollectiveMismatch`]) and the buffer comes back in
    /// the error. So it does on a mismatch, and, with [`Error::NotSymmetric`], for a buffer of
    /// another PE's GPU heap.
    ///
    /// # Cancel safety
    /// As [`GpuPe::malloc`]: a dropped free still runs to its end.
    pub async fn free<T: Pod>(&self, buffer: GpuBuffer<T>) -> Result<(), (Error, GpuBuffer<T>)> {
        let sym = buffer.into_inner();
        let len = sym.len();
        let alloc = sym.into_allocation();
        let back = |alloc: Allocation| {
            GpuBuffer::new(SymBuffer::from_allocation(alloc, len).expect("the same allocation"))
        };
        let (offset, bytes) = (alloc.offset(), alloc.bytes());
        let heap = self.inner.allocator.clone().lock_owned().await;
        let pe = self.clone();
        match run_to_the_end(async move { pe.free_allocation(heap, alloc).await }).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err((e, alloc))) => Err((e, back(alloc))),
            Err(e) => Err((e, back(Allocation::new(self.inner.heap, offset, bytes)))),
        }
    }

    /// The collective part of a free. A buffer of another heap, or a free whose host
    /// operations or GPU work failed to complete, is refused inside the agreement, so that the other PEs
    /// fail instead of waiting for this one.
    async fn free_allocation(
        &self,
        mut heap: OwnedMutexGuard<HeapAllocator>,
        alloc: Allocation,
    ) -> Result<(), (Error, Allocation)> {
        // Host operations first (a get from another node lands at its quiet), then the rest
        // of the GPU's work.
        let finished = match self.quiet().await {
            Ok(()) => self.synchronize().await,
            Err(e) => Err(e),
        };
        let ours = alloc.heap() == self.inner.heap;
        let call = match ours && finished.is_ok() {
            true => HeapCall::free(alloc.bytes(), alloc.offset()),
            false => HeapCall::refused_free(finished.is_err()),
        };
        let agreed = self.agree(&call, "GPU free").await;
        // A PE that refused reports its own reason, never `agreed`: refusals for different
        // reasons differ as calls, and would read as a mismatch among the refusing PEs.
        if let Err(e) = finished {
            return Err((e, alloc));
        }
        if !ours {
            return Err((Error::NotSymmetric, alloc));
        }
        if let Err(e) = agreed {
            return Err((e, alloc));
        }
        match heap.free(alloc.offset()) {
            Ok(()) => {
                self.report_heap(&heap);
                Ok(())
            }
            Err(e) => Err((e, alloc)),
        }
    }

    /// Exchanges `call` (an `operation`) with every PE: fails, on every PE alike, when the
    /// exchange fails or a PE made a different call.
    async fn agree(&self, call: &HeapCall, operation: &'static str) -> Result<()> {
        let all = self
            .inner
            .exchange
            .exchange(GPU_GROUP, self.my_pe(), self.n_pes(), call.encode())
            .await?;
        match call.mismatch(self.my_pe(), &all) {
            Some(detail) => Err(Error::CollectiveMismatch { operation, detail }),
            None => Ok(()),
        }
    }
}

/// Runs the collective part of a GPU heap call as a task of its own, so that it reaches its
/// end even when the caller stops waiting: the other PEs would otherwise wait for this one
/// forever, or the heaps would fall out of step.
async fn run_to_the_end<R: Send + 'static>(
    work: impl std::future::Future<Output = R> + Send + 'static,
) -> Result<R> {
    match tokio::spawn(work).await {
        Ok(done) => Ok(done),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Shutdown),
    }
}
