//! Local (non-symmetric) memory that host-initiated GPU operations read from or write to:
//! [`HostBuffer`] (pinned, device-mapped host memory) and [`DeviceBuffer`] (plain device
//! memory of a PE's GPU). Both are typed, zero-initialised, and freed on drop.

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

use crate::driver::{DeviceAlloc, Pinned};

pub(crate) mod private {
    /// Seals [`LocalMem`](super::LocalMem); what the crate asks of local memory beyond it.
    pub trait Sealed {
        /// The bytes, when the host may read them (pinned host memory), else `None`.
        fn host_bytes(&self) -> Option<&[u8]> {
            None
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
    _type: PhantomData<T>,
}

impl<T: Pod> HostBuffer<T> {
    /// Allocates `len` zeroed elements (pinned for every GPU of the process; `ctx`, any
    /// context, is made current for the allocation).
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        Ok(HostBuffer {
            mem: Pinned::new(ctx, bytes_for::<T>(len)?)?,
            len,
            _type: PhantomData,
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_slice(ctx: &Arc<CudaContext>, data: &[T]) -> Result<Self> {
        let mut b = Self::new(ctx, data.len())?;
        b.as_mut_slice().copy_from_slice(data);
        Ok(b)
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        bytemuck::cast_slice(&self.mem.bytes()[..self.len * std::mem::size_of::<T>()])
    }

    /// The elements, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        let n = self.len * std::mem::size_of::<T>();
        bytemuck::cast_slice_mut(&mut self.mem.bytes_mut()[..n])
    }
}

impl<T> private::Sealed for HostBuffer<T> {
    fn host_bytes(&self) -> Option<&[u8]> {
        Some(self.mem.bytes())
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
    _type: PhantomData<T>,
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` elements on the device of `ctx` (contents unspecified until written).
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        Ok(DeviceBuffer {
            mem: DeviceAlloc::new(ctx, bytes_for::<T>(len)?)?,
            len,
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

impl<T> private::Sealed for DeviceBuffer<T> {}

impl<T: Pod> LocalMem<T> for DeviceBuffer<T> {
    fn addr(&self) -> u64 {
        self.mem.addr()
    }
    fn len(&self) -> usize {
        self.len
    }
}
