//! GPU PEs end to end: every device-library function, the host futures, the on-stream
//! operations and CUDA-graph capture, debug reports, in one-process jobs (`run_local`: one
//! GPU per PE, and 2 and 4 PEs per GPU sharing its context) and in multi-process jobs
//! (`ferroshmem run -n N`: one process per GPU, and one process more than GPUs, so that two
//! processes share a GPU, side by side under CUDA MPS where it runs, taking turns without).
//!
//! Where no GPU exists each test says so and passes at once, except
//! `without_a_gpu_init_gpu_says_so`, which checks that answer on every PE.
//!
//! The multi-process test starts this binary as the PEs (`gpu_pe_entry` acts as a PE when
//! `FSH_GPU_SCENARIO` is set). It finds the launcher at `FERROSHMEM_LAUNCHER`, else at the
//! path cargo built it.

mod gpu_scenarios;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferroshmem::{Error, GpuError, Pe, Result};

const SCENARIO: &str = "FSH_GPU_SCENARIO";

/// The number of GPUs, or `None` (having said why) when there is none.
fn gpus(test: &str) -> Option<usize> {
    match ferroshmem::gpu::detect() {
        Ok(inv) => Some(inv.devices),
        Err(e) => {
            eprintln!("{test}: skipped, {e}");
            None
        }
    }
}

/// The tests of this file, one at a time: they share the GPUs, and the heap size they set
/// in the environment must not change while another thread may be reading it (the driver
/// and NVRTC read the environment).
static GPU_TESTS: Mutex<()> = Mutex::new(());

/// Waits for this test's turn, then sets the small heap every test uses.
fn exclusive() -> MutexGuard<'static, ()> {
    let turn = GPU_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "256M");
    turn
}

/// Runs the named scenarios (all when `only` is empty) on one PE.
async fn run_scenarios(pe: Pe, only: &[&str]) -> Result<()> {
    let gpu = pe.init_gpu().await.inspect_err(|e| {
        eprintln!("PE {}: init_gpu failed: {e}", pe.my_pe());
    })?;
    check_sharing(&pe, &gpu)?;
    for (name, scenario) in gpu_scenarios::all() {
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let started = Instant::now();
        if let Err(e) = scenario(pe.clone(), gpu.clone()).await {
            // Said at once: the other PEs may be left waiting for this one.
            eprintln!("GPU scenario {name} FAILED on PE {}: {e}", pe.my_pe());
            return Err(e);
        }
        pe.barrier_all().await?;
        if pe.my_pe() == 0 {
            eprintln!(
                "GPU scenario {name}: ok on {} PEs in {:?}",
                pe.n_pes(),
                started.elapsed()
            );
        }
    }
    Ok(())
}

/// The sharing a PE reports is the one its job has: PE `i` of `n` on GPU `i mod devices`,
/// sharing it with the other PEs there (of this process under `run_local`, of other
/// processes under the launcher).
fn check_sharing(pe: &Pe, gpu: &ferroshmem::gpu::GpuPe) -> Result<()> {
    use ferroshmem::gpu::GpuSharing;
    let devices = ferroshmem::gpu::detect()?.devices;
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let with: Vec<usize> = (0..n)
        .filter(|&p| p != me && p % devices == me % devices)
        .collect();
    let one_process = std::env::var_os(SCENARIO).is_none();
    let ok = match gpu.sharing() {
        GpuSharing::Alone => with.is_empty(),
        GpuSharing::InProcess { with: theirs, .. } => one_process && *theirs == with,
        GpuSharing::Processes {
            with: theirs,
            in_process,
            mps,
        } => {
            eprintln!("PE {me}: GPU shared with PEs {theirs:?} of other processes, MPS: {mps}");
            !one_process && !in_process && *theirs == with
        }
    };
    if !ok {
        return Err(Error::Config(format!(
            "PE {me}: reported sharing {:?}, expected the PEs {with:?}",
            gpu.sharing()
        )));
    }
    Ok(())
}

fn local_job(n: usize, only: &'static [&'static str]) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let job = ferroshmem::run_local(n, move |pe| run_scenarios(pe, only));
    let results = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(120), job).await })
        .unwrap_or_else(|_| panic!("the {n}-PE GPU job did not finish within 120 s"))
        .unwrap();
    for r in results {
        r.unwrap();
    }
}

#[test]
fn one_process_one_gpu_per_pe() {
    let _turn = exclusive();
    let Some(devices) = gpus("one_process_one_gpu_per_pe") else {
        return;
    };
    local_job(devices.clamp(1, 8), &[]);
}

/// Two PEs per GPU in one process: they share its context, each with its own heap,
/// streams and device state; kernels of the two wait for each other (the device scenarios'
/// barriers and signal waits).
#[test]
fn one_process_two_pes_per_gpu() {
    let _turn = exclusive();
    let Some(devices) = gpus("one_process_two_pes_per_gpu") else {
        return;
    };
    local_job(devices.clamp(1, 4) * 2, &[]);
}

/// Four PEs per GPU in one process.
#[test]
fn one_process_four_pes_per_gpu() {
    let _turn = exclusive();
    let Some(devices) = gpus("one_process_four_pes_per_gpu") else {
        return;
    };
    local_job(devices.clamp(1, 2) * 4, &[]);
}

#[test]
fn without_a_gpu_init_gpu_says_so() {
    let _turn = exclusive();
    if ferroshmem::gpu::detect().is_ok() {
        eprintln!("without_a_gpu_init_gpu_says_so: skipped, this machine has a GPU");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = rt
        .block_on(ferroshmem::run_local(2, |pe| async move {
            pe.init_gpu().await.map(|_| ())
        }))
        .unwrap();
    for o in outcomes {
        assert!(matches!(o, Err(Error::Gpu(GpuError::NoGpu(_)))), "{o:?}");
    }
}

fn launcher() -> std::path::PathBuf {
    std::env::var_os("FERROSHMEM_LAUNCHER")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ferroshmem").into())
}

#[test]
fn multi_process_one_gpu_per_pe() {
    let _turn = exclusive();
    let Some(devices) = gpus("multi_process_one_gpu_per_pe") else {
        return;
    };
    multi_process_job(devices.clamp(1, 8));
}

/// One PE more than GPUs, one per process: PEs of different processes share a GPU (local
/// rank modulo the device count) and reach each other's heaps through the same mappings.
#[test]
fn multi_process_more_pes_than_gpus_share_them() {
    let _turn = exclusive();
    let Some(devices) = gpus("multi_process_more_pes_than_gpus_share_them") else {
        return;
    };
    multi_process_job(devices.clamp(1, 7) + 1);
}

/// Runs every scenario as a job of `n` processes under the launcher.
fn multi_process_job(n: usize) {
    let started = Instant::now();
    let out = std::process::Command::new(launcher())
        .args(["run", "-n", &n.to_string(), "--timeout", "300s", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["gpu_pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, "all")
        .env("FERROSHMEM_SYMMETRIC_SIZE", "256M")
        .output()
        .expect("the ferroshmem launcher starts");
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "the GPU job failed in {:?}",
        started.elapsed()
    );
    for (name, _) in gpu_scenarios::all() {
        assert!(
            text.contains(&format!("GPU scenario {name}: ok on {n} PEs")),
            "scenario {name} did not report success"
        );
    }
}

/// A PE of the multi-process tests (does nothing unless one of them started it).
#[test]
fn gpu_pe_entry() {
    if std::env::var_os(SCENARIO).is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pe = ferroshmem::init().await.unwrap();
        let outcome = run_scenarios(pe.clone(), &[]).await;
        if let Err(e) = &outcome {
            eprintln!("PE {} failed: {e}", pe.my_pe());
        }
        outcome.unwrap();
        pe.finalize().await.unwrap();
    });
}
