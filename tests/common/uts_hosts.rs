//! GPU jobs across UTS "hosts" on this machine: processes with their own host names (so
//! different nodes to ferroshmem) started by the launcher through `scripts/uts-rsh`, sharing
//! the loopback for the fabric and the GPU(s) for their heaps.

use std::path::PathBuf;
use std::time::Instant;

/// Why this machine cannot run these tests, if it cannot.
pub fn cannot_run() -> Option<String> {
    if let Err(e) = ferroshmem::gpu::detect() {
        return Some(e.to_string());
    }
    // Namespaces need root.
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    (!root).then(|| "not root: UTS namespaces cannot be made".to_string())
}

fn launcher() -> PathBuf {
    std::env::var_os("FERROSHMEM_LAUNCHER")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ferroshmem").into())
}

/// The remote-shell agent that makes UTS "hosts" (from the working tree where the tests run,
/// else from the sources).
fn uts_rsh() -> PathBuf {
    let here = PathBuf::from("scripts/uts-rsh");
    if here.exists() {
        return here.canonicalize().unwrap_or(here);
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/uts-rsh"))
}

/// Runs the test binary's PE entry `entry` over UTS hosts with the launcher's `placement`
/// arguments and `env` (one variable: which scenarios to run); returns what the job printed,
/// once its exit status was as `succeed` says.
pub fn run_job(entry: &str, placement: &[&str], env: (&str, &str), succeed: bool) -> String {
    let started = Instant::now();
    let out = std::process::Command::new(launcher())
        .arg("run")
        .args(placement)
        .args(["--root-address", "127.0.0.1", "--timeout", "240s"])
        .arg("--rsh")
        .arg(uts_rsh())
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([entry, "--exact", "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .env("FERROSHMEM_SYMMETRIC_SIZE", "256M")
        .env("FERROSHMEM_FABRIC_ADDRESS", "127.0.0.1")
        .output()
        .expect("the ferroshmem launcher starts");
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert_eq!(
        out.status.success(),
        succeed,
        "the GPU job across hosts {placement:?} ended {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    text
}
