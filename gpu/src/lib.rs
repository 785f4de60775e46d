//! ferroshmem's GPU layer: a PE's GPU ([`GpuPe`]), its symmetric heap in GPU memory (CUDA
//! VMM allocations mapped into every PE's view over NVLink), host-initiated operations as
//! futures, on-stream operations, and the device library that kernels compiled through
//! [`GpuPe::compile`] use (`ferroshmem_device.cuh`), and the `cpu` NIC handler's remote agent
//! ([`nic`]), which performs GPU-heap operations for PEs on other hosts. The `gpu` NIC
//! handler's side of a ConnectX NIC lies in `verbs` (rdma-core loaded at run time, audited)
//! and `devx` (the mlx5 PRM commands, as data).
//!
//! Everything builds without CUDA (the driver is loaded at run time); where no GPU or driver
//! exists, [`detect`] and [`GpuPe::init`] answer [`GpuError::NoGpu`](ferroshmem_runtime::GpuError::NoGpu)
//! instead of panicking. `ferroshmem-actors` sets a GPU PE up from a PE (`Pe::init_gpu`).

mod buffers;
mod collective;
mod context;
mod cq;
mod devx;
mod driver;
mod fd_share;
mod heap;
mod heap_calls;
pub mod ibgda;
mod module;
mod network;
pub mod nic;
mod pe;
mod rma;
mod sharing;
mod stream;
mod verbs;

pub use buffers::{DeviceBuffer, HostBuffer, HostWords, LocalMem};
pub use context::{detect, device_for_local_rank, GpuDevice, GpuInventory};
pub use cudarc;
pub use driver::{Graph, LaunchDims};
pub use heap::{GpuBuffer, GPU_HEADER};
pub use module::{compile_library_ptx, CompileOptions, GpuModule, KernelArg, DEVICE_HEADER};
pub use pe::GpuPe;
pub use sharing::GpuSharing;

#[cfg(test)]
mod tests {
    #[test]
    fn detection_never_panics() {
        match super::detect() {
            Ok(inv) => assert!(inv.devices > 0),
            Err(e) => eprintln!("no GPU here (skipping GPU checks): {e}"),
        }
    }

    #[test]
    fn the_device_header_is_self_contained() {
        let h = super::DEVICE_HEADER;
        assert!(
            !h.lines().any(|l| l.trim_start().starts_with("#include")),
            "the device library must need no header"
        );
        assert!(h.contains("struct fsh_qp_t {"), "the network path is in");
        assert!(h.contains("__constant__ fsh_state_t fsh_state;"));
    }
}
