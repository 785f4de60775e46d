//! Driver calls the `gpu` NIC handler needs: a dmabuf of a range of GPU memory (how the NIC
//! reaches the heap and the queues), a fill of GPU memory with a byte, and a NIC doorbell
//! page mapped into the GPU (`cuMemHostRegister` with `IOMEMORY`).

use std::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::Result;

use super::{bind, check, synchronize_legacy_stream};

/// A dmabuf file descriptor exporting `bytes` of GPU memory at `addr` (both aligned to the
/// host page size), for `ibv_reg_dmabuf_mr` and `mlx5dv_devx_umem_reg_ex`.
pub(crate) fn dmabuf_fd(ctx: &CudaContext, addr: u64, bytes: usize) -> Result<OwnedFd> {
    bind(ctx)?;
    let mut fd: c_int = -1;
    check(
        // SAFETY: `fd` is a valid out-pointer of the `int` the driver writes for a dmabuf
        // handle; the range is the caller's GPU memory in the bound context.
        unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut c_int).cast::<c_void>(),
                addr,
                bytes,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        },
        "cuMemGetHandleForAddressRange (dmabuf)",
    )?;
    // SAFETY: the driver returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets `bytes` of GPU memory at `addr` to `value`, and returns once they are set: a memset
/// of device memory may return before it has run, on the legacy default stream, which kernels
/// on our non-blocking streams are not ordered after (as for `copy_from_host`).
pub(crate) fn fill(ctx: &CudaContext, addr: u64, value: u8, bytes: usize) -> Result<()> {
    bind(ctx)?;
    check(
        // SAFETY: the range is the caller's GPU memory in the bound context.
        unsafe { sys::cuMemsetD8_v2(addr, value, bytes) },
        "cuMemsetD8",
    )?;
    synchronize_legacy_stream()
}

/// A page of device registers (a NIC's doorbell page) mapped into the GPU; unmapped on drop.
#[derive(Debug)]
pub(crate) struct IoMapping {
    host: u64,
    device: u64,
    ctx: Arc<CudaContext>,
}

impl IoMapping {
    /// Maps `bytes` at `host` (a page-aligned register mapping of this process) for the GPU.
    pub fn new(ctx: &Arc<CudaContext>, host: u64, bytes: usize) -> Result<IoMapping> {
        bind(ctx)?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE
            | sys::CU_MEMHOSTREGISTER_DEVICEMAP
            | sys::CU_MEMHOSTREGISTER_IOMEMORY;
        check(
            // SAFETY: the range is a live mapping of this process (the UAR page, kept by the
            // caller beyond this mapping); the driver only maps it.
            unsafe { sys::cuMemHostRegister_v2(host as *mut c_void, bytes, flags) },
            "cuMemHostRegister (IOMEMORY: the NIC doorbell page)",
        )?;
        let mut mapping = IoMapping {
            host,
            device: 0,
            ctx: ctx.clone(),
        };
        check(
            // SAFETY: the range was registered just above; the out-pointer is a field of ours.
            unsafe {
                sys::cuMemHostGetDevicePointer_v2(&mut mapping.device, host as *mut c_void, 0)
            },
            "cuMemHostGetDevicePointer (the NIC doorbell page)",
        )?;
        Ok(mapping)
    }

    /// The page's address on the GPU.
    pub fn device_addr(&self) -> u64 {
        self.device
    }
}

impl Drop for IoMapping {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: registered by `new` in this context, unregistered once.
            unsafe { sys::cuMemHostUnregister(self.host as *mut c_void) };
        }
    }
}
