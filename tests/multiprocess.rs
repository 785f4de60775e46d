//! Multi-process jobs, one PE per process, through `ferroshmem run` and through Open MPI's
//! `mpirun`, at 1, 2, 3, 4 and 8 PEs: every scenario of `common::scenarios`, lost PEs ending
//! the job instead of hanging it, and nothing left behind by a killed job.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_SCENARIO` is set, and does nothing otherwise. These tests need `mpirun`
//! (Debian's `openmpi-bin`, installed by `.ci/run`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ferroshmem::{Cmp, Error};

const SCENARIO: &str = "FSH_TEST_SCENARIO";

/// How a job is launched.
#[derive(Clone, Copy, Debug)]
enum Launcher {
    Ferroshmem,
    Mpirun,
}

fn pe_command(launcher: Launcher, n: usize) -> Command {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = match launcher {
        Launcher::Ferroshmem => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
            c.args(["run", "-n", &n.to_string(), "--"]);
            c.arg(&exe);
            c
        }
        Launcher::Mpirun => {
            let mut c = Command::new("mpirun");
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
                "-np",
                &n.to_string(),
            ]);
            c.arg(&exe);
            c
        }
    };
    cmd.args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
        .env("RUST_BACKTRACE", "0");
    cmd
}

/// Runs a job with `temp` as every process's temporary directory (which must stay empty).
fn run_job(launcher: Launcher, n: usize, scenario: &str, temp: &Path) -> Output {
    let started = Instant::now();
    let out = pe_command(launcher, n)
        .env(SCENARIO, scenario)
        .env("TMPDIR", temp)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {launcher:?} (is it installed?): {e}"));
    eprintln!(
        "{launcher:?} -n {n} {scenario}: {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    out
}

fn text(out: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What ferroshmem left in `dir` (the launcher's own session files aside).
fn ours(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("ferroshmem"))
        .collect()
}

/// A fresh, empty temporary directory for one test's jobs.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fsh-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn every_scenario_passes(launcher: Launcher) {
    let dir = scratch(&format!("{launcher:?}"));
    for n in [1, 2, 3, 4, 8] {
        let out = run_job(launcher, n, "all", &dir);
        let all = text(&out);
        assert!(
            out.status.success(),
            "{launcher:?} with {n} PEs failed:\n{all}"
        );
        let passed = all.matches("every scenario passed").count();
        assert_eq!(
            passed, n,
            "{launcher:?} with {n} PEs: {passed} PEs reported success:\n{all}"
        );
    }
    assert_eq!(
        ours(&dir),
        Vec::<String>::new(),
        "left in the temporary directory"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_scenario_passes_under_the_launcher() {
    every_scenario_passes(Launcher::Ferroshmem);
}

#[test]
fn every_scenario_passes_under_mpirun() {
    every_scenario_passes(Launcher::Mpirun);
}

#[test]
fn a_lost_pe_ends_the_job_under_mpirun_instead_of_hanging() {
    let dir = scratch("lost");
    let started = Instant::now();
    let out = run_job(Launcher::Mpirun, 3, "exit-early", &dir);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(started.elapsed() < Duration::from_secs(60), "{all}");
    assert!(
        all.contains("PE 1 was lost"),
        "the surviving PEs name the lost one:\n{all}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn dev_shm() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_killed_job_leaves_nothing_behind() {
    let before = dev_shm();
    for launcher in [Launcher::Ferroshmem, Launcher::Mpirun] {
        let dir = scratch(&format!("killed-{launcher:?}"));
        let out = run_job(launcher, 4, "sigkill", &dir);
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        if let Launcher::Ferroshmem = launcher {
            assert!(all.contains("PE 2 was killed by signal 9"), "{all}");
        }
        assert_eq!(
            ours(&dir),
            Vec::<String>::new(),
            "left in the temporary directory"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert_eq!(dev_shm(), before, "a killed job left files in /dev/shm");
}

#[test]
fn bootstrap_failures_name_the_pe_and_the_address_and_time_out() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let address = unused.local_addr().expect("addr");
    drop(unused);
    let started = Instant::now();
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(["pe_entry", "--exact", "--nocapture"])
        .env(SCENARIO, "all")
        .env("FERROSHMEM_RANK", "1")
        .env("FERROSHMEM_SIZE", "2")
        .env("FERROSHMEM_ROOT", address.to_string())
        .env("FERROSHMEM_SECRET", "00ff")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "1s")
        .output()
        .expect("run");
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(started.elapsed() < Duration::from_secs(30), "{all}");
    assert!(
        all.contains(&format!(
            "PE 1 could not reach the bootstrap root at {address}"
        )),
        "{all}"
    );
}

/// Not a test of its own: the PE program of the tests above, run by the launcher or
/// `mpirun` with `FSH_TEST_SCENARIO` set. Without it, it does nothing.
#[test]
fn pe_entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let scenario = scenario.clone();
        async move {
            let me = pe.my_pe();
            match scenario.as_str() {
                "all" => {
                    for name in common::scenarios::ALL {
                        common::scenarios::run(name, pe.clone())
                            .await
                            .map_err(|e| {
                                Error::InvalidArgument(format!("scenario {name} on PE {me}: {e}"))
                            })?;
                    }
                    println!("PE {me}: every scenario passed");
                }
                "exit-early" => {
                    let flag = pe.calloc::<u64>(1).await?;
                    pe.barrier_all().await?;
                    if me == 1 {
                        std::process::exit(3);
                    }
                    let lost = pe.wait_until(&flag, Cmp::Eq, 1).await;
                    println!("PE {me}: wait ended with {lost:?}");
                    return Err(lost.err().unwrap_or(Error::Shutdown));
                }
                "sigkill" => {
                    let buf = pe.calloc::<u64>(1 << 20).await?;
                    pe.put(&buf, &vec![1u64; 1 << 20], (me + 1) % pe.n_pes())
                        .await?;
                    pe.barrier_all().await?;
                    if me == 2 {
                        let _ = rustix::process::kill_process(
                            rustix::process::getpid(),
                            rustix::process::Signal::KILL,
                        );
                    }
                    let lost = pe.barrier_all().await;
                    println!("PE {me}: barrier ended with {lost:?}");
                    // Stay until the launcher, which saw PE 2 die first, stops this PE.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return Err(lost.err().unwrap_or(Error::Shutdown));
                }
                other => panic!("unknown scenario {other}"),
            }
            Ok::<_, Error>(())
        }
    }));
    match results {
        Ok(mut r) => r.pop().expect("one PE").expect("the PE's scenario"),
        Err(e) => panic!("job failed: {e}"),
    }
}
