//! The device library's send-queue posting (`src/device/network.cuh`: slots reserved by
//! atomics, in-order publication, batched doorbells, CQEs consumed under a poll lock) run on
//! the host: `tests/network/posting.cpp` compiles the real header with host stand-ins for the
//! GPU's atomics and fences (`tests/network/host_shim.h`), lets threads post inline writes,
//! fetch-adds and two-WQEBB masked swaps to one small queue at once, and plays the NIC
//! handler. Every write must arrive once, every fetch-add get its own old value, and nothing
//! may stall (a 30 s watchdog). Shown failing on mutants of the header: a non-atomic
//! reservation, waiters that do not ring for skipped doorbells, publication out of order, a
//! result slot reused before its fetch was read (a real defect this harness found first).
//! Without a C++ compiler the test says so and skips.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the harness with `g++`, or `None` when there is none.
fn build(out: &Path) -> Option<PathBuf> {
    let there = Command::new("g++").arg("--version").output();
    if !there.map(|o| o.status.success()).unwrap_or(false) {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/network");
    let exe = out.join("network_posting");
    let built = Command::new("g++")
        .args([
            "-std=c++17",
            "-O2",
            "-pthread",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg(dir.join("posting.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("g++ runs");
    assert!(
        built.status.success(),
        "g++ failed on network.cuh's host build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}

#[test]
fn threads_post_to_one_queue_at_once_without_loss_or_stall() {
    let Some(exe) = build(Path::new(env!("CARGO_TARGET_TMPDIR"))) else {
        eprintln!("threads_post_to_one_queue_at_once_without_loss_or_stall: skipped, no g++");
        return;
    };
    // (threads, iterations each, WQEBBs in the queue): rings far smaller than the posters,
    // so reservations wait for room, slots come round while their fetches are unread, and
    // two-WQEBB WQEs straddle the ring's end. The crowded small ring runs several times: a
    // slot reused before its fetch was read failed about half of its runs.
    let crowded = [(16, 300, 16); 6];
    let others = [(1, 500, 16), (8, 200, 64), (32, 100, 1024)];
    for (threads, iterations, nwqes) in crowded.into_iter().chain(others) {
        let run = Command::new(&exe)
            .args([threads, iterations, nwqes].map(|n| n.to_string()))
            .output()
            .expect("the harness runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            run.status.success() && text.starts_with("ok "),
            "{threads} threads x {iterations} on {nwqes} WQEBBs: {text}"
        );
    }
}
