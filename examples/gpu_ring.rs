//! NVSHMEM's `simple_shift` on GPUs: one PE per GPU; each PE's kernel writes its PE number
//! into the next PE's symmetric `destination` with `fsh_p`, a barrier on the stream follows,
//! and each PE prints what it received. Without a GPU it says so and exits successfully.
//!
//! ```text
//! cargo run --release --example gpu_ring                     # one PE per GPU, one process
//! ferroshmem run -n 2 -- target/release/examples/gpu_ring    # one PE per process
//! ```

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use ferroshmem::gpu::{CompileOptions, LaunchDims};
use ferroshmem::{Error, GpuError};

const SIMPLE_SHIFT: &str = r#"
extern "C" __global__ void simple_shift(int* destination) {
    int mype = fsh_my_pe();
    int npes = fsh_n_pes();
    int peer = (mype + 1) % npes;
    fsh_p(destination, mype, peer);
}
"#;

#[tokio::main]
async fn main() -> ferroshmem::Result<()> {
    ferroshmem::observability::init_tracing();
    let launched = ferroshmem::launch_env::LaunchEnv::detect()?.is_some();
    let gpus = match ferroshmem::gpu::detect() {
        Ok(inv) => inv.devices,
        Err(e) if !launched => {
            println!("gpu_ring: nothing to run, {e}");
            return Ok(());
        }
        Err(_) => 1,
    };
    let results = ferroshmem::run(gpus, |pe| async move {
        let gpu = match pe.init_gpu().await {
            Ok(g) => g,
            Err(Error::Gpu(GpuError::NoGpu(why))) => {
                println!("PE {}: nothing to run, no GPU: {why}", pe.my_pe());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let module = gpu.compile(SIMPLE_SHIFT, &CompileOptions::default())?;
        let destination = gpu.calloc::<i32>(1).await?;
        let stream = gpu.new_stream()?;
        // SAFETY: `simple_shift` takes one pointer to symmetric memory, alive until freed.
        unsafe {
            module.launch(
                "simple_shift",
                LaunchDims::linear(1, 1),
                &stream,
                &[gpu.local_ptr(&destination)?.into()],
            )?
        };
        gpu.barrier_all_on_stream(&stream)?;
        gpu.wait_stream(&stream).await?;
        let received = gpu.g(&destination, gpu.my_pe()).await?;
        println!(
            "PE {} of {} (GPU {}, {}) received {received}",
            gpu.my_pe(),
            gpu.n_pes(),
            gpu.device().ordinal(),
            gpu.device().name()
        );
        gpu.free(destination).await.map_err(|(e, _)| e)?;
        Ok::<_, Error>(())
    })
    .await?;
    results.into_iter().collect()
}
