//! ferroshmem's GPU layer. For now: finding out whether a usable CUDA driver and GPU exist,
//! reporting their absence as a normal answer, never a panic.

use ferroshmem_runtime::{Error, Result};

/// What the machine offers for GPU PEs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInventory {
    /// Number of CUDA devices.
    pub devices: usize,
}

/// Looks for the CUDA driver and counts devices. `Err(Error::NoGpu)` when there is none.
pub fn detect() -> Result<GpuInventory> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by its usual names
    // and drops what it opened; loading libcuda runs no user-visible initialisers.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::NoGpu(
            "the CUDA driver library (libcuda) is not installed".into(),
        ));
    }
    let count = cudarc::driver::CudaContext::device_count()
        .map_err(|e| Error::NoGpu(format!("the CUDA driver did not start: {e}")))?;
    if count <= 0 {
        return Err(Error::NoGpu("the CUDA driver sees no device".into()));
    }
    Ok(GpuInventory {
        devices: count as usize,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn detection_never_panics() {
        match super::detect() {
            Ok(inv) => assert!(inv.devices > 0),
            Err(e) => eprintln!("no GPU here (skipping GPU checks): {e}"),
        }
    }
}
