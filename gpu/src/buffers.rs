//! Local (non-symmetric) memory that host-initiated GPU operations read from or write to:
//! [`HostBuffer`] (pinned, device-mapped host memory, zero-initialised) and [`DeviceBuffer`]
//! (plain device memory of a PE's GPU). Both are typed and freed on drop. [`HostWords`]: pinned
//! words the host and running kernels share, accessed atomically from the host.
//!
//! Each buffer remembers the transfers queued on it that may still run: reading, writing or
//! freeing it first waits for them. A future of a transfer that is dropped or leaked before
//! the transfer completes therefore never lets the memory be touched under the copy.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use bytemuck::Pod;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

use crate::cq::FenceMark;
use crate::driver::{DeviceAlloc, Pinned};

pub(crate) mod private {
    /// Seals [`LocalMem`](super::LocalMem); what the crate asks of local memory beyond it.
    pub trait Sealed {
        /// The bytes, when the host may read them (pinned host memory), else `None`.
        fn host_bytes(&self) -> Option<&[u8]> {
            None
        }
        /// The transfers that may still use the memory.
        fn in_use(&self) -> &super::InUse;
    }
}

/// The transfers queued on one buffer that may still run: at most one fence mark per copy
/// stream (a later mark of a stream covers its earlier ones).
#[derive(Debug, Default)]
pub struct InUse(Mutex<Vec<FenceMark>>);

impl InUse {
    /// Records that the copy stream's work up to `mark` may use the memory.
    pub(crate) fn add(&self, mark: FenceMark) {
        let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        marks.retain(|m| !m.is_done());
        match marks.iter_mut().find(|m| m.same_fence(&mark)) {
            Some(m) if m.seq() < mark.seq() => *m = mark,
            Some(_) => {}
            None => marks.push(mark),
        }
    }

    /// Waits (blocking) until no recorded transfer can still use the memory.
    fn settle(&self) {
        let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for mark in marks.drain(..) {
            mark.wait();
        }
    }
}

/// Memory a host-initiated GPU operation may use as its local side: an address of the
/// unified address space and a number of elements.
pub trait LocalMem<T: Pod>: private::Sealed {
    /// The first element's address (valid on the host and on every GPU of the process).
    fn addr(&self) -> u64;
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether it holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn bytes_for<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::InvalidArgument(format!("{len} elements overflow")))
}

/// Pinned host memory, mapped for the GPUs: the fast local side of host puts and gets.
///
/// Its contents are readable and writable from the host; an operation that uses it borrows it
/// (shared for a put's source, exclusive for a get's destination) until it completes.
#[derive(Debug)]
pub struct HostBuffer<T> {
    mem: Pinned,
    len: usize,
    in_use: InUse,
    _type: PhantomData<T>,
}

impl<T: Pod> HostBuffer<T> {
    /// Allocates `len` zeroed elements (pinned for every GPU of the process; `ctx`, any
    /// context, is made current for the allocation).
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        Ok(HostBuffer {
            mem: Pinned::new(ctx, bytes_for::<T>(len)?)?,
            len,
            in_use: InUse::default(),
            _type: PhantomData,
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_slice(ctx: &Arc<CudaContext>, data: &[T]) -> Result<Self> {
        let mut b = Self::new(ctx, data.len())?;
        b.as_mut_slice().copy_from_slice(data);
        Ok(b)
    }

    /// The elements, once no transfer queued on the buffer can still write them (blocking
    /// until then, which only happens when a transfer's future was dropped before it
    /// completed).
    pub fn as_slice(&self) -> &[T] {
        self.in_use.settle();
        bytemuck::cast_slice(&self.mem.bytes()[..self.len * std::mem::size_of::<T>()])
    }

    /// The elements, mutably, once no transfer queued on the buffer can still use them
    /// (blocking until then, as [`HostBuffer::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        self.in_use.settle();
        let n = self.len * std::mem::size_of::<T>();
        bytemuck::cast_slice_mut(&mut self.mem.bytes_mut()[..n])
    }
}

/// Pinned, device-mapped 64-bit words that the host only ever reads and writes atomically,
/// while kernels poll or write them: abort flags, outcome words.
#[derive(Debug)]
pub struct HostWords {
    mem: Pinned,
    len: usize,
}

impl HostWords {
    /// Allocates `len` zeroed words (pinned for every GPU of the process; `ctx` is made
    /// current for the allocation).
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        Ok(HostWords {
            mem: Pinned::new(ctx, bytes_for::<u64>(len)?)?,
            len,
        })
    }

    /// Word `index`'s address, to pass to kernels.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn addr(&self, index: usize) -> u64 {
        assert!(index < self.len, "word {index} of {}", self.len);
        self.mem.addr() + 8 * index as u64
    }

    /// Stores `value` into word `index` (release).
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn store(&self, index: usize, value: u64) {
        self.mem.words()[..self.len][index].store(value, Ordering::Release);
    }

    /// Loads word `index` (acquire).
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn load(&self, index: usize) -> u64 {
        self.mem.words()[..self.len][index].load(Ordering::Acquire)
    }
}

impl<T> Drop for HostBuffer<T> {
    /// Waits for the transfers that may still use the memory, then frees it.
    fn drop(&mut self) {
        self.in_use.settle();
    }
}

impl<T> private::Sealed for HostBuffer<T> {
    fn host_bytes(&self) -> Option<&[u8]> {
        self.in_use.settle();
        Some(self.mem.bytes())
    }
    fn in_use(&self) -> &InUse {
        &self.in_use
    }
}

impl<T: Pod> LocalMem<T> for HostBuffer<T> {
    fn addr(&self) -> u64 {
        self.mem.addr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Device memory of one GPU (not symmetric): a local source or destination of host-initiated
/// operations, or scratch memory for kernels.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    mem: DeviceAlloc,
    len: usize,
    in_use: InUse,
    _type: PhantomData<T>,
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` elements on the device of `ctx` (contents unspecified until written).
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        Ok(DeviceBuffer {
            mem: DeviceAlloc::new(ctx, bytes_for::<T>(len)?)?,
            len,
            in_use: InUse::default(),
            _type: PhantomData,
        })
    }

    /// The device address, to pass to kernels.
    pub fn device_ptr(&self) -> u64 {
        self.mem.addr()
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.mem.len()
    }
}

impl<T> Drop for DeviceBuffer<T> {
    /// Waits for the transfers that may still use the memory, then frees it.
    fn drop(&mut self) {
        self.in_use.settle();
    }
}

impl<T> private::Sealed for DeviceBuffer<T> {
    fn in_use(&self) -> &InUse {
        &self.in_use
    }
}

impl<T: Pod> LocalMem<T> for DeviceBuffer<T> {
    fn addr(&self) -> u64 {
        self.mem.addr()
    }
    fn len(&self) -> usize {
        self.len
    }
}
