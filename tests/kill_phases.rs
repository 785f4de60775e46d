//! One PE killed (SIGKILL) in each phase of a job, under `ferroshmem run` and under Open MPI's
//! `mpirun` (with recovery, so that it lets the survivors end on their own), 4 PEs: every
//! survivor's call fails with `PeerLost` naming the killed PE, the job ends in time, and
//! `ferroshmem run` exits non-zero naming the killed PE as the one that failed first — even
//! though the survivors exit at once, on their own, when they learn of the loss.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_KILL_PHASE` is set. Its survivors ignore the launcher's SIGTERM, so that each one
//! reports what its call returned before it exits (the launcher kills them after the grace
//! period otherwise, and that would not be in time). They report in a file of their own as
//! well as on stdout: `mpirun` may drop the last output of ranks it stops when it aborts a
//! job.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ferroshmem::{Cmp, Pe};
use rustix::process::{kill_process, Pid, Signal};

const PHASE: &str = "FSH_KILL_PHASE";
/// The folder where each survivor writes what its call returned.
const REPORTS: &str = "FSH_KILL_REPORTS";
/// The PE that is killed.
const VICTIM: usize = 2;
const N: usize = 4;
/// Longest a job here may take: survivors learn of the loss in milliseconds.
const BOUND: Duration = Duration::from_secs(15);

/// Phases in which the victim dies, the survivors being in the call the phase names.
const PHASES: &[&str] = &[
    "barrier",
    "malloc",
    "exchange",
    "sum_reduce",
    "fcollect",
    "wait_until",
    "lock",
    "finalize",
    "mid_reduce",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Launcher {
    Ferroshmem,
    Mpirun,
}

fn job(launcher: Launcher, phase: &str, reports: &Path) -> Output {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = match launcher {
        Launcher::Ferroshmem => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
            // Survivors ignore SIGTERM to report first; in the bootstrap they have nothing to
            // report, and are killed after a short grace.
            let grace = if phase == "bootstrap" { "1s" } else { "10s" };
            c.args(["run", "-n", &N.to_string(), "--grace", grace, "--"]);
            c
        }
        Launcher::Mpirun => {
            let mut c = Command::new("mpirun");
            // Without recovery, mpirun kills the survivors when it sees the victim die, and
            // may do so before they report (their exit status then says nothing either).
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
                "--enable-recovery",
            ]);
            c.args(["-np", &N.to_string()]);
            c
        }
    };
    cmd.arg(exe)
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(PHASE, phase)
        .env(REPORTS, reports)
        .env("FERROSHMEM_SYMMETRIC_SIZE", "32M")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "20s")
        .env("RUST_BACKTRACE", "0")
        .env_remove("FERROSHMEM_RANK");
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {launcher:?}: {e}"));
    let pid = Pid::from_child(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(BOUND) {
        Ok(out) => out.expect("the job's output"),
        Err(_) => {
            // The launcher's PEs die with it; mpirun stops its ranks on SIGTERM.
            let _ = kill_process(pid, Signal::TERM);
            std::thread::sleep(Duration::from_secs(2));
            let _ = kill_process(pid, Signal::KILL);
            let out = rx.recv().expect("the job's end").expect("the job's output");
            panic!(
                "{launcher:?}, {phase}: still running after {BOUND:?}\n{}",
                text(&out)
            );
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A fresh folder for the survivors' reports of one job.
fn reports(launcher: Launcher, phase: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fsh-kill-{launcher:?}-{phase}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("reports folder");
    dir
}

fn check(launcher: Launcher, phase: &str) {
    let dir = reports(launcher, phase);
    let out = job(launcher, phase, &dir);
    let all = text(&out);
    for me in (0..N).filter(|&pe| pe != VICTIM) {
        let line = std::fs::read_to_string(dir.join(me.to_string()))
            .unwrap_or_else(|_| panic!("{launcher:?}, {phase}: PE {me} said nothing\n{all}"));
        assert!(
            line.contains(&format!("PeerLost {{ pe: {VICTIM},")),
            "{launcher:?}, {phase}: PE {me} did not report PE {VICTIM} lost: {line}\n{all}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    // mpirun with recovery does not fail the job for a lost rank; the launcher does.
    if launcher == Launcher::Ferroshmem {
        assert_eq!(out.status.code(), Some(128 + 9), "{phase}: {all}");
        let named = format!("ferroshmem: PE {VICTIM} was killed by signal 9 (SIGKILL)");
        assert!(
            all.contains(&named),
            "{phase}: the launcher named another PE\n{all}"
        );
    }
}

#[test]
fn a_pe_killed_in_any_phase_is_named_by_the_launcher_and_every_survivor() {
    // Three rounds: which exit the launcher reaps first varies from run to run.
    for _ in 0..3 {
        for phase in PHASES {
            check(Launcher::Ferroshmem, phase);
        }
    }
}

#[test]
fn a_pe_killed_in_any_phase_is_reported_by_every_survivor_under_mpirun() {
    for phase in PHASES {
        check(Launcher::Mpirun, phase);
    }
}

#[test]
fn a_pe_killed_before_it_joins_is_named_by_the_launcher() {
    let dir = reports(Launcher::Ferroshmem, "bootstrap");
    let out = job(Launcher::Ferroshmem, "bootstrap", &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(128 + 9), "{all}");
    assert!(
        all.contains(&format!("ferroshmem: PE {VICTIM} was killed by signal 9")),
        "{all}"
    );
}

fn die() -> ! {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    unreachable!("SIGKILL ends the process")
}

/// What a survivor does in `phase` while the victim dies.
async fn survive(pe: &Pe, phase: &str) -> ferroshmem::Result<()> {
    let me = pe.my_pe();
    let world = pe.team_world();
    match phase {
        "barrier" => pe.barrier_all().await,
        "malloc" => pe.malloc::<u64>(16).await.map(std::mem::forget),
        "exchange" => pe.exchange(0, me, N, vec![1]).await.map(drop),
        "sum_reduce" | "mid_reduce" => {
            let buf = pe.calloc::<u64>(1 << 18).await?;
            let out = pe.calloc::<u64>(1 << 18).await?;
            pe.barrier_all().await?;
            let r = world.sum_reduce(&out, &buf).await;
            std::mem::forget((buf, out));
            // Killed inside the reduction, the victim may already have given a survivor all
            // it needed (survivors read their peers' buffers, which outlive them): that
            // survivor's reduction completes, rightly, and it learns of the loss when it
            // finalizes.
            r?;
            pe.clone().finalize().await
        }
        "fcollect" => {
            let src = pe.calloc::<u64>(1 << 16).await?;
            let dest = pe.calloc::<u64>(N << 16).await?;
            pe.barrier_all().await?;
            let r = world.fcollect(&dest, &src).await;
            std::mem::forget((src, dest));
            r
        }
        "wait_until" => {
            let flag = pe.calloc::<u64>(1).await?;
            pe.barrier_all().await?;
            let r = pe.wait_until(&flag, Cmp::Eq, 1).await.map(drop);
            std::mem::forget(flag);
            r
        }
        "lock" => {
            let lock = pe.calloc::<u64>(1).await?;
            pe.barrier_all().await?;
            // The victim took the lock before it died.
            pe.barrier_all().await?;
            let r = pe.set_lock(&lock).await;
            std::mem::forget(lock);
            r
        }
        "finalize" => pe.clone().finalize().await,
        other => panic!("unknown phase {other}"),
    }
}

/// What the victim does in `phase` before it dies: the calls the survivors make before the
/// one the phase names.
async fn fall(pe: &Pe, phase: &str) -> ferroshmem::Result<()> {
    match phase {
        "sum_reduce" => {
            std::mem::forget(pe.calloc::<u64>(1 << 18).await?);
            std::mem::forget(pe.calloc::<u64>(1 << 18).await?);
            pe.barrier_all().await?;
        }
        "mid_reduce" => {
            let buf = pe.calloc::<u64>(1 << 18).await?;
            let out = pe.calloc::<u64>(1 << 18).await?;
            pe.barrier_all().await?;
            // Killed inside the reduction, once it has been polled twice: it has sent its
            // first messages and cannot have received everything it needs.
            let world = pe.team_world();
            let reduce = world.sum_reduce(&out, &buf);
            tokio::pin!(reduce);
            tokio::select! {
                biased;
                _ = &mut reduce => {}
                () = tokio::task::yield_now() => die(),
            }
        }
        "fcollect" => {
            std::mem::forget(pe.calloc::<u64>(1 << 16).await?);
            std::mem::forget(pe.calloc::<u64>(N << 16).await?);
            pe.barrier_all().await?;
        }
        "wait_until" => {
            std::mem::forget(pe.calloc::<u64>(1).await?);
            pe.barrier_all().await?;
        }
        "lock" => {
            let lock = pe.calloc::<u64>(1).await?;
            pe.barrier_all().await?;
            pe.set_lock(&lock).await?;
            pe.barrier_all().await?;
        }
        _ => {}
    }
    die()
}

/// Not a test of its own: the PE program of the tests above. Without `FSH_KILL_PHASE` it
/// does nothing.
#[test]
fn pe_entry() {
    let Ok(phase) = std::env::var(PHASE) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let code = rt.block_on(async move {
        // Survivors report before they go; the launcher's SIGTERM would end them first.
        let _term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
        let rank: usize = ["FERROSHMEM_RANK", "OMPI_COMM_WORLD_RANK"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.parse().ok())
            .expect("a rank");
        if phase == "bootstrap" && rank == VICTIM {
            die();
        }
        let pe = ferroshmem::init().await.expect("join the job");
        let me = pe.my_pe();
        if me == VICTIM {
            let e = fall(&pe, &phase).await;
            panic!("the victim's phase failed: {e:?}");
        }
        let ended = survive(&pe, &phase).await;
        let report = format!("PE {me}: {phase} ended with {ended:?}");
        println!("{report}");
        let folder = PathBuf::from(std::env::var_os(REPORTS).expect("a reports folder"));
        std::fs::write(folder.join(me.to_string()), report).expect("the report");
        1
    });
    std::process::exit(code);
}
