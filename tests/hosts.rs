//! Jobs across hosts: each host a network + UTS namespace on a bridge (`common::netns`), PEs
//! started on them by `ferroshmem run --hosts … --rsh AGENT`, PEs of one host mapped to each
//! other and the others reached through the fabric (`tcp;ofi_rxm`). Every scenario of
//! `common::scenarios` at 2 hosts × 2 PEs and 3 hosts × 1 PE. Needs root (namespaces) and
//! libfabric; says so and skips otherwise. `.ci/run` runs it as root with both installed.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_SCENARIO` is set, and does nothing otherwise.

mod common;

use std::process::{Command, Output};
use std::time::Instant;

use common::netns::Hosts;
use ferroshmem::Error;

const SCENARIO: &str = "FSH_TEST_SCENARIO";

#[test]
fn pe_entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let rt = common::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let scenario = scenario.clone();
        async move {
            let me = pe.my_pe();
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            println!("PE {me} runs on {}", host.trim());
            // `all`, `collectives`, one scenario, or `c:NAME` for one collective scenario.
            let names: Vec<&str> = match scenario.as_str() {
                "all" => common::scenarios::ALL.to_vec(),
                "collectives" => common::collective_scenarios::ALL.to_vec(),
                one => vec![one.strip_prefix("c:").unwrap_or(one)],
            };
            let collective = scenario == "collectives" || scenario.starts_with("c:");
            let mut failed = Vec::new();
            for name in names {
                let started = Instant::now();
                let outcome = if collective {
                    common::collective_scenarios::run(name, pe.clone()).await
                } else {
                    common::scenarios::run(name, pe.clone()).await
                };
                println!("PE {me}: scenario {name} took {:?}", started.elapsed());
                if let Err(e) = outcome {
                    println!("PE {me}: scenario {name} failed: {e}");
                    failed.push(name);
                }
            }
            if failed.is_empty() {
                println!("PE {me}: every scenario passed");
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!("failed: {failed:?}")))
            }
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

/// Runs `scenario` as a job of `per_host` PEs on each of `hosts`.
fn job(hosts: &Hosts, per_host: usize, scenario: &str) -> Output {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
        .args(["run", "--hosts", &hosts.hosts_arg(per_host), "--rsh"])
        .arg(&hosts.agent)
        .arg("--")
        .arg(std::env::current_exe().expect("test binary"))
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, scenario)
        .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the launcher starts");
    eprintln!(
        "{} hosts x {per_host} PEs, {scenario}: {:?} in {:?}",
        hosts.addresses.len(),
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

fn every_scenario_passes(n_hosts: usize, per_host: usize) {
    scenarios_pass(n_hosts, per_host, "all");
}

fn scenarios_pass(n_hosts: usize, per_host: usize, set: &str) {
    if !fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(n_hosts) else {
        return;
    };
    let out = job(&hosts, per_host, set);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let passed = all.matches("every scenario passed").count();
    assert_eq!(passed, n_hosts * per_host, "{all}");
    for address in &hosts.addresses {
        let here = all.matches(&format!("runs on h-{address}")).count();
        assert_eq!(here, per_host, "PEs on host {address}:\n{all}");
    }
}

#[test]
fn every_scenario_passes_on_two_hosts_of_two_pes() {
    every_scenario_passes(2, 2);
}

#[test]
fn every_scenario_passes_on_three_hosts_of_one_pe() {
    every_scenario_passes(3, 1);
}

#[test]
fn every_collective_scenario_passes_on_two_hosts_of_two_pes() {
    scenarios_pass(2, 2, "collectives");
}

#[test]
fn every_collective_scenario_passes_on_three_hosts_of_one_pe() {
    scenarios_pass(3, 1, "collectives");
}
