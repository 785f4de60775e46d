//! The kernels' source compiles under NVRTC with every kernel in it.

use ferroshmem_gpu::{compile_library_ptx, CompileOptions};
use ferroshmem_runtime::{Error, GpuError};

use super::SOURCE;

/// The names of the source's kernels (`extern "C" __global__ void [__launch_bounds__(..)]
/// name(`).
fn kernel_names() -> Vec<&'static str> {
    SOURCE
        .split("extern \"C\" __global__")
        .skip(1)
        .filter_map(|rest| {
            let rest = match rest.split_once("__launch_bounds__") {
                Some((_, bounded)) => bounded.split_once(')')?.1,
                None => rest,
            };
            rest.split('(').next()?.split_whitespace().last()
        })
        .collect()
}

/// Every kernel compiles for the H200 (sm_90) with NVRTC, on one node and with the
/// network path, with the device library's checks on and off: what a GPU machine does at
/// a buffer's creation, checked where NVRTC is but no GPU (skipped where NVRTC is not).
#[test]
fn every_kernel_compiles_under_nvrtc_on_one_node_and_across_nodes() {
    let names = kernel_names();
    assert!(names.contains(&"ep_ll_reduce") && names.contains(&"ep_layout"));
    for (network, debug) in [(false, false), (true, false), (true, true)] {
        let options = CompileOptions {
            debug: Some(debug),
            ..CompileOptions::default()
        };
        let ptx = match compile_library_ptx(SOURCE, (9, 0), network, &options) {
            Err(Error::Gpu(GpuError::NoGpu(why))) => {
                eprintln!("skipping: {why}");
                return;
            }
            Err(e) => panic!("network {network}, debug {debug}: {e}"),
            Ok(ptx) => ptx,
        };
        for name in &names {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "network {network}, debug {debug}: no kernel {name} in the PTX"
            );
        }
    }
}
