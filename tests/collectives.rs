//! Teams, collectives and locks: every scenario of `common::collective_scenarios` in
//! `run_local` jobs of 1 to 8 PEs, and in multi-process jobs (one PE per process) under
//! `ferroshmem run` and Open MPI's `mpirun`.
//!
//! The PE program of the multi-process jobs is this test binary itself: [`pe_entry`] acts as
//! a PE when `FSH_COLLECTIVE_SCENARIO` is set, and does nothing otherwise.

mod common;

use std::process::Command;
use std::time::Instant;

use common::{collective_scenarios, runtime};
use ferroshmem::{run_local, Error, TeamConfig};

const SCENARIO: &str = "FSH_COLLECTIVE_SCENARIO";

fn check_locally(name: &'static str, sizes: &[usize]) {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let rt = runtime();
    for &n in sizes {
        let started = Instant::now();
        // A PE whose check fails panics, so that the job fails at once instead of leaving
        // its peers waiting in the next collective.
        rt.block_on(run_local(n, move |pe| async move {
            let me = pe.my_pe();
            if let Err(e) = collective_scenarios::run(name, pe).await {
                panic!("{name} with {n} PEs, PE {me}: {e}");
            }
        }))
        .unwrap_or_else(|e| panic!("{name} with {n} PEs: {e}"));
        eprintln!("{name} with {n} PEs: {:?}", started.elapsed());
    }
}

#[test]
fn teams() {
    check_locally("teams", &[1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn collectives() {
    check_locally("collectives", &[1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn several_mib() {
    check_locally("big", &[1, 2, 3, 8]);
}

#[test]
fn locks() {
    check_locally("locks", &[1, 2, 3, 5, 8]);
}

/// Eager reductions in a flat team of ten, more members than an eager reduction keeps the
/// places of their messages for on the stack (eight): every member's sums, three calls in a
/// row at two sizes.
#[test]
fn eager_reductions_in_a_flat_team_of_ten() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let results = runtime().block_on(run_local(10, |pe| async move {
        let n = pe.n_pes() as u64;
        let config = TeamConfig {
            flat_max_pes: 16,
            ..TeamConfig::default()
        };
        let world = pe.team_world();
        let team = world.split_strided_with(0, 1, pe.n_pes(), config).await?;
        let team = team.ok_or_else(|| Error::InvalidArgument("not a member".into()))?;
        let buf = pe.calloc::<u64>(64).await?;
        let me = pe.my_pe() as u64;
        for len in [1usize, 32] {
            for call in 0..3u64 {
                let mine: Vec<u64> = (0..len as u64).map(|i| me * 1000 + i + call).collect();
                pe.put(buf.slice(..len), &mine, pe.my_pe()).await?;
                team.sum_reduce(buf.slice(32..32 + len), buf.slice(..len))
                    .await?;
                let mut got = vec![0u64; len];
                pe.get(&mut got, buf.slice(32..32 + len), pe.my_pe())
                    .await?;
                let want: Vec<u64> = (0..len as u64)
                    .map(|i| 1000 * n * (n - 1) / 2 + n * (i + call))
                    .collect();
                if got != want {
                    return Err(Error::InvalidArgument(format!(
                        "PE {me}, {len} elements, call {call}: {got:?}, expected {want:?}"
                    )));
                }
            }
        }
        team.destroy().await?;
        pe.free(buf).await?;
        Ok::<(), Error>(())
    }));
    for (pe, result) in results.expect("job").into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("PE {pe}: {e}"));
    }
}

/// Runs `scenario` (`all` for every one) as a job of `n` processes started by `launcher`,
/// with heaps of `heap` bytes.
fn check_processes(launcher: &str, n: usize, scenario: &str, heap: &str) {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = match launcher {
        "ferroshmem" => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
            c.args(["run", "-n", &n.to_string(), "--"]);
            c
        }
        _ => {
            let mut c = Command::new("mpirun");
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ]);
            c.args(["-np", &n.to_string()]);
            c
        }
    };
    let started = Instant::now();
    let out = cmd
        .arg(&exe)
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, scenario)
        .env("FERROSHMEM_SYMMETRIC_SIZE", heap)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot start {launcher} (is it installed?): {e}"));
    let all = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{launcher} -n {n}: {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    assert!(
        out.status.success(),
        "{launcher} with {n} PEs failed:\n{all}"
    );
    let passed = all.matches("every collective scenario passed").count();
    assert_eq!(
        passed, n,
        "{launcher} with {n} PEs: {passed} PEs passed:\n{all}"
    );
}

#[test]
fn every_scenario_passes_in_processes_under_the_launcher() {
    for n in [2, 3, 5] {
        check_processes("ferroshmem", n, "all", "64M");
    }
}

#[test]
fn every_scenario_passes_in_processes_under_mpirun() {
    for n in [4, 8] {
        check_processes("mpirun", n, "all", "64M");
    }
}

#[test]
fn a_heap_too_small_for_eager_slots_still_has_teams() {
    check_processes("ferroshmem", 3, "small-heap", "256K");
}

/// Not a test of its own: the PE program of the multi-process tests, run with
/// `FSH_COLLECTIVE_SCENARIO` set. Without it, it does nothing.
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
            let names: Vec<&str> = match scenario.as_str() {
                "all" => collective_scenarios::ALL.to_vec(),
                one => vec![one],
            };
            for name in names {
                // Exit at once on a failed check, so that the peers do not wait for this PE.
                if let Err(e) = collective_scenarios::run(name, pe.clone()).await {
                    eprintln!("scenario {name} on PE {me}: {e}");
                    std::process::exit(1);
                }
            }
            println!("PE {me}: every collective scenario passed");
            Ok::<_, Error>(())
        }
    }));
    match results {
        Ok(mut r) => r.pop().expect("one PE").expect("the PE's scenarios"),
        Err(e) => panic!("job failed: {e}"),
    }
}
