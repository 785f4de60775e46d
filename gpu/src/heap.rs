//! The symmetric heap in GPU memory, as one PE sees it.
//!
//! Every PE owns one VMM allocation (`cuMemCreate`, exportable as a POSIX fd) of `stride`
//! bytes. Each PE reserves one virtual range of `n_pes × stride` bytes (its *view*) and maps
//! every PE's allocation into it, PE `p`'s at `base + p × stride`, readable and writable by
//! its own GPU. A symmetric address on PE `me` therefore reaches PE `p` by adding
//! `(p − me) × stride`, which is all the device library's `fsh_ptr` does.
//!
//! The first [`GPU_HEADER`] bytes of each allocation hold ferroshmem's own synchronization
//! words (barrier epoch and flags, the grid barrier: `FSH_SYNC_*` in the device library);
//! user allocations come after them.

use bytemuck::Pod;
use ferroshmem_runtime::{Error, HeapId, Result, SymBuffer, SymSlice};

use crate::driver::{AddressRange, Mapping, Physical};

/// Bytes at the start of every PE's GPU heap reserved for ferroshmem's synchronization words.
pub const GPU_HEADER: usize = 64 * 1024;
/// One PE's view: every PE's allocation mapped at a fixed stride.
#[derive(Debug)]
pub(crate) struct HeapView {
    // Field order is drop order: unmap before freeing the address range.
    mappings: Vec<Mapping>,
    range: AddressRange,
    stride: usize,
    n_pes: usize,
}

impl HeapView {
    /// Reserves the view for `n_pes` allocations of `stride` bytes each.
    pub fn reserve(n_pes: usize, stride: usize, align: usize) -> Result<Self> {
        let size = n_pes
            .checked_mul(stride)
            .ok_or_else(|| Error::Config("the GPU heap view overflows".into()))?;
        Ok(HeapView {
            mappings: Vec::with_capacity(n_pes),
            range: AddressRange::reserve(size, align)?,
            stride,
            n_pes,
        })
    }

    /// Maps PE `pe`'s allocation into the view for device `ordinal`.
    pub fn map(&mut self, pe: usize, physical: Physical, ordinal: usize) -> Result<()> {
        let at = self.pe_base(pe);
        self.mappings.push(Mapping::map(at, physical, ordinal)?);
        Ok(())
    }

    /// Where PE `pe`'s allocation starts in this view.
    pub fn pe_base(&self, pe: usize) -> u64 {
        debug_assert!(pe < self.n_pes);
        self.range.base() + (pe * self.stride) as u64
    }

    /// The first address of the view (PE 0's allocation).
    pub fn base(&self) -> u64 {
        self.range.base()
    }
}

/// A symmetric array of `len` elements of `T` in the GPU heap: the same offset on every PE.
///
/// Returned by the collective [`crate::GpuPe::malloc`] family; give it back with
/// [`crate::GpuPe::free`]. Views (`all`, `slice`, `at`) are the runtime's [`SymSlice`], checked
/// against the GPU heap when used (a host-heap view given to a GPU operation, or the reverse,
/// is [`Error::NotSymmetric`]).
#[derive(Debug)]
pub struct GpuBuffer<T> {
    inner: SymBuffer<T>,
}

impl<T: Pod> GpuBuffer<T> {
    pub(crate) fn new(inner: SymBuffer<T>) -> Self {
        GpuBuffer { inner }
    }

    pub(crate) fn into_inner(self) -> SymBuffer<T> {
        self.inner
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Offset in the GPU heap's user area (the same on every PE).
    pub fn offset(&self) -> usize {
        self.inner.offset()
    }

    /// A view of the whole buffer.
    pub fn all(&self) -> SymSlice<'_, T> {
        self.inner.all()
    }

    /// A view of `range` (checked when used).
    pub fn slice(&self, range: impl std::ops::RangeBounds<usize>) -> SymSlice<'_, T> {
        self.inner.slice(range)
    }

    /// A view of element `index` alone (checked when used).
    pub fn at(&self, index: usize) -> SymSlice<'_, T> {
        self.inner.at(index)
    }
}

impl<'a, T: Pod> From<&'a GpuBuffer<T>> for SymSlice<'a, T> {
    fn from(b: &'a GpuBuffer<T>) -> Self {
        b.all()
    }
}

/// The GPU heap's identity, derived from the job's host heap identity.
pub(crate) fn gpu_heap_id(host: HeapId) -> HeapId {
    HeapId(host.0 ^ 0x4750_5548_4541_5021)
}
