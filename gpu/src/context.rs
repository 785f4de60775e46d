//! One GPU for one PE: finding the CUDA driver and devices ("no GPU" is a normal answer,
//! never a panic), choosing a device from the PE's node-local rank, and opening its primary
//! context with the properties the rest of the crate needs.

use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

use crate::driver;

/// What the machine offers for GPU PEs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInventory {
    /// Number of CUDA devices.
    pub devices: usize,
}

/// Looks for the CUDA driver and counts devices. [`GpuError::NoGpu`](ferroshmem_runtime::GpuError::NoGpu) when there is none.
pub fn detect() -> Result<GpuInventory> {
    if !driver::driver_present() {
        return Err(Error::no_gpu(
            "the CUDA driver library (libcuda) is not installed",
        ));
    }
    let count = std::panic::catch_unwind(CudaContext::device_count)
        .map_err(|_| Error::no_gpu("the CUDA driver library could not be used"))?
        .map_err(|e| Error::no_gpu(format!("the CUDA driver did not start: {e}")))?;
    if count <= 0 {
        return Err(Error::no_gpu("the CUDA driver sees no device"));
    }
    Ok(GpuInventory {
        devices: count as usize,
    })
}

/// An opened GPU: its primary context and the properties ferroshmem uses.
#[derive(Debug, Clone)]
pub struct GpuDevice {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    name: String,
    compute_capability: (i32, i32),
    multiprocessors: u32,
    mps: bool,
    uuid: [u8; 16],
}

impl GpuDevice {
    /// Opens device `ordinal` (its primary context), checking that it supports what
    /// ferroshmem needs (virtual memory management, POSIX-fd handles, 64-bit stream memory
    /// operations).
    pub fn open(ordinal: usize) -> Result<Self> {
        Self::open_with(ordinal, false)
    }

    /// Opens device `ordinal` as [`GpuDevice::open`] does, in a new context of its own
    /// instead of the primary one (for PEs of one process that share a GPU).
    pub fn open_own_context(ordinal: usize) -> Result<Self> {
        Self::open_with(ordinal, true)
    }

    fn open_with(ordinal: usize, own_context: bool) -> Result<Self> {
        let inventory = detect()?;
        if ordinal >= inventory.devices {
            return Err(Error::no_gpu(format!(
                "device {ordinal} asked for, but the driver sees {}",
                inventory.devices
            )));
        }
        let ctx = std::panic::catch_unwind(|| match own_context {
            true => CudaContext::new_non_primary(ordinal, 0),
            false => CudaContext::new(ordinal),
        })
        .map_err(|_| Error::no_gpu(format!("opening GPU {ordinal} panicked in the driver")))?
        .map_err(|e| Error::cuda(format!("opening GPU {ordinal}: {e}")))?;
        let attr = |a: Attr| {
            ctx.attribute(a)
                .map_err(|e| Error::cuda(format!("reading {a:?} of GPU {ordinal}: {e}")))
        };
        if attr(Attr::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)? != 1 {
            return Err(Error::cuda(format!(
                "GPU {ordinal} does not support CUDA virtual memory management"
            )));
        }
        if attr(Attr::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)? != 1 {
            return Err(Error::cuda(format!(
                "GPU {ordinal} cannot export memory as POSIX file descriptors"
            )));
        }
        // Host RMA completes through 64-bit stream memory writes, and stream barriers and
        // signal waits are made of them.
        if attr(Attr::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)? != 1 {
            return Err(Error::cuda(format!(
                "GPU {ordinal} does not offer 64-bit stream memory operations (cuStreamWriteValue64), which ferroshmem needs"
            )));
        }
        let compute_capability = ctx
            .compute_capability()
            .map_err(|e| Error::cuda(format!("compute capability of GPU {ordinal}: {e}")))?;
        let multiprocessors = attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        // Drivers before CUDA 12.3 do not know the attribute: no MPS as far as we can tell.
        let mps = attr(Attr::CU_DEVICE_ATTRIBUTE_MPS_ENABLED).is_ok_and(|v| v == 1);
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let uuid = driver::device_uuid(ordinal)?;
        Ok(GpuDevice {
            ctx,
            ordinal,
            name,
            compute_capability,
            multiprocessors,
            mps,
            uuid,
        })
    }

    /// Whether CUDA MPS serves this device (contexts of several processes on it run side
    /// by side).
    pub fn mps_enabled(&self) -> bool {
        self.mps
    }

    /// The primary context (`bind_to_thread` it before raw driver calls).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Device ordinal in this process.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Device name, e.g. `NVIDIA H200`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// Number of streaming multiprocessors.
    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// The device's UUID (identifies it across processes).
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// Makes the context current on this thread.
    pub fn bind(&self) -> Result<()> {
        driver::bind(&self.ctx)
    }
}

/// The device a PE with node-local rank `local_rank` takes: rank modulo the device count
/// (PEs beyond the device count share GPUs).
pub fn device_for_local_rank(local_rank: usize) -> Result<usize> {
    Ok(local_rank % detect()?.devices)
}

/// The ordinal of the device with `uuid` in this process, if it is visible here.
pub(crate) fn ordinal_of(uuid: &[u8; 16]) -> Result<Option<usize>> {
    let n = detect()?.devices;
    for ordinal in 0..n {
        if &driver::device_uuid(ordinal)? == uuid {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}
