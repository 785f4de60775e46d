//! Collectives on teams that span hosts, with the hosts' shapes that pick each algorithm:
//! 2 hosts × 2 PEs and an uneven 3 + 1 (syncs by node, trees by node), 3 hosts × 1 PE (one
//! member per node: the flat forms). Each host is a network + UTS namespace on a bridge
//! (`common::netns`), PEs started by `ferroshmem run --hosts … --rsh AGENT`. Runs the
//! `across-nodes` collective scenario (every collective on teams split to span the nodes,
//! values checked, and mismatches across nodes caught on every member) and, on the uneven
//! shape, the whole collective suite. Needs root (namespaces) and libfabric; says so and
//! skips otherwise.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_SCENARIOS` is set, and does nothing otherwise.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::Hosts;
use ferroshmem::Error;

/// The collective scenarios a PE runs, comma-separated.
const SCENARIOS: &str = "FSH_TEST_SCENARIOS";
/// Longer than any of these jobs takes; reaching it means a hang.
const JOB_BOUND: Duration = Duration::from_secs(900);

#[test]
fn pe_entry() {
    let Ok(list) = std::env::var(SCENARIOS) else {
        return;
    };
    let rt = common::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let list = list.clone();
        async move {
            let me = pe.my_pe();
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            println!("PE {me} runs on {}", host.trim());
            for name in list.split(',') {
                let started = Instant::now();
                let outcome = common::collective_scenarios::run(name, pe.clone()).await;
                println!("PE {me}: scenario {name} took {:?}", started.elapsed());
                if let Err(e) = outcome {
                    println!("PE {me}: scenario {name} failed: {e}");
                    return Err(Error::InvalidArgument(format!("{name} failed")));
                }
            }
            println!("PE {me}: every scenario passed");
            Ok(())
        }
    }));
    match results {
        Ok(r) if r.iter().all(|r| r.is_ok()) => {}
        other => {
            eprintln!("{other:?}");
            std::process::exit(1);
        }
    }
}

fn fabric_available() -> bool {
    match ferroshmem_net::Library::load() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// Runs `scenarios` as a job with `per_host[i]` PEs on host `i`, and checks that every PE
/// passed, on the host it was meant for.
fn scenarios_pass(per_host: &[usize], scenarios: &str) {
    if !fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(per_host.len()) else {
        return;
    };
    let spread: Vec<String> = hosts
        .addresses
        .iter()
        .zip(per_host)
        .map(|(a, k)| format!("{a}:{k}"))
        .collect();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
        .args([
            "run",
            "--grace",
            "2s",
            "--hosts",
            &spread.join(","),
            "--rsh",
        ])
        .arg(&hosts.agent)
        .arg("--")
        .arg(std::env::current_exe().expect("test binary"))
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIOS, scenarios)
        .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the launcher starts");
    while child.try_wait().expect("job status").is_none() {
        if started.elapsed() > JOB_BOUND {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("job output");
    let all = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{spread:?}, {scenarios}: {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    assert!(out.status.success(), "{all}");
    let n: usize = per_host.iter().sum();
    assert_eq!(all.matches("every scenario passed").count(), n, "{all}");
    for (address, &k) in hosts.addresses.iter().zip(per_host) {
        let here = all.matches(&format!("runs on h-{address}")).count();
        assert_eq!(here, k, "PEs on host {address}:\n{all}");
    }
}

#[test]
fn collectives_across_two_hosts_of_two_pes() {
    scenarios_pass(&[2, 2], "across-nodes");
}

#[test]
fn collectives_across_three_hosts_of_one_pe() {
    scenarios_pass(&[1, 1, 1], "across-nodes");
}

#[test]
fn collectives_across_an_uneven_three_and_one() {
    scenarios_pass(&[3, 1], "across-nodes,collectives");
}
