//! GPU PEs on different nodes: the network path (IBGDA with the `cpu` NIC handler). Each
//! "host" is a UTS namespace with its own host name on this machine (`scripts/uts-rsh`), so
//! PEs of different hosts are on different nodes, share the loopback for the fabric, and
//! reach each other's GPU heaps only through the send queues their kernels write. The jobs
//! are 2 hosts × 1 PE (every peer remote) and 2 hosts × 2 PEs (NVLink-mapped within a host,
//! the network between), running the device scenario (every device-library function on the
//! next PE, values checked) and the scenarios of `net_scenarios`: host-initiated operations
//! (blocking and `_nbi`), one device function per kernel, 2048 threads on one send queue, a
//! put-with-signal ping-pong between running kernels. Jobs of their own check the faults: a
//! write past the peer's heap, a corrupted key, a killed peer.
//!
//! Skipped, saying why, without a GPU or without root (namespaces).

mod common;
mod gpu_scenarios;
mod net_scenarios;

use common::uts_hosts::{self, cannot_run};

use std::time::Instant;

const SCENARIO: &str = "FSH_GPU_HOSTS_SCENARIO";

/// Runs the device scenarios as a job placed by `hosts` (`--hosts` syntax) of `n` PEs.
fn hosts_job(test: &str, hosts: &str, n: usize) {
    hosts_job_of(
        test,
        hosts,
        n,
        &[
            "network_steps",
            "network_crowd",
            "network_pingpong",
            "host_ops",
            "freed_get_nbi",
            "device_functions",
            "networkless_module_refused",
        ],
    );
}

/// Runs `scenarios` as a job placed by `hosts` of `n` PEs; each must report success.
fn hosts_job_of(test: &str, hosts: &str, n: usize, scenarios: &[&str]) {
    if let Some(why) = cannot_run() {
        eprintln!("{test}: skipped, {why}");
        return;
    }
    let text = run_job(&["--hosts", hosts], scenarios, true);
    for name in scenarios {
        assert!(
            text.contains(&format!("GPU scenario {name}: ok on {n} PEs")),
            "scenario {name} did not report success"
        );
    }
}

/// Runs the PE entry over UTS hosts with the launcher's `placement` arguments; returns what
/// the job printed, once its exit status was as `succeed` says.
fn run_job(placement: &[&str], scenarios: &[&str], succeed: bool) -> String {
    uts_hosts::run_job(
        "gpu_hosts_pe_entry",
        placement,
        (SCENARIO, &scenarios.join(",")),
        succeed,
    )
}

#[test]
fn two_hosts_one_pe_each() {
    hosts_job("two_hosts_one_pe_each", "ha:1,hb:1", 2);
}

#[test]
fn two_hosts_two_pes_each() {
    hosts_job("two_hosts_two_pes_each", "ha:2,hb:2", 4);
}

/// A device write to an address outside the peer's heap: an error CQE, a typed error from
/// `module.check()` naming REMOTE_ACCESS_ERR, the handler's failure from `synchronize`.
#[test]
fn a_bad_remote_address_is_a_typed_error() {
    hosts_job_of(
        "a_bad_remote_address_is_a_typed_error",
        "ha:1,hb:1",
        2,
        &["network_errors"],
    );
}

/// PE 1's process killed while PE 0's kernel fetch-adds on it (it lives on another node):
/// the kernel ends with a TRANSPORT_RETRY_EXC_ERR CQE (`module.check()` names it),
/// `synchronize` returns the handler's failure, and the launcher exits non-zero.
#[test]
fn a_killed_peer_fails_the_kernel_waiting_for_it() {
    let test = "a_killed_peer_fails_the_kernel_waiting_for_it";
    if let Some(why) = cannot_run() {
        eprintln!("{test}: skipped, {why}");
        return;
    }
    let text = run_job(
        &["--hosts", "ha:1,hb:1", "--grace", "40s"],
        &["network_peer_killed"],
        false,
    );
    assert!(
        text.contains("GPU scenario network_peer_killed: ok on PE 0"),
        "PE 0 did not see the kernel end with the loss"
    );
}

/// A device write with a corrupted remote key: an error CQE, REMOTE_ACCESS_ERR from
/// `module.check()`, the handler's failure from `synchronize`.
#[test]
fn a_corrupted_key_is_a_typed_error() {
    hosts_job_of(
        "a_corrupted_key_is_a_typed_error",
        "ha:1,hb:1",
        2,
        &["network_bad_key"],
    );
}

/// PE 0's kernel writes where PE 1 (on another node) refuses, then every PE frees: PE 0's
/// free fails with that failure, the others' with a mismatch, none waits for another.
#[test]
fn a_failed_device_write_fails_the_next_free_on_every_pe() {
    hosts_job_of(
        "a_failed_device_write_fails_the_next_free_on_every_pe",
        "ha:1,hb:2",
        3,
        &["network_failed_free"],
    );
}

/// A PE of the jobs above (does nothing unless one of them started it).
#[test]
fn gpu_hosts_pe_entry() {
    let Some(which) = std::env::var_os(SCENARIO) else {
        return;
    };
    ferroshmem::observability::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pe = ferroshmem::init().await.unwrap();
        let gpu = pe.init_gpu().await.unwrap();
        let mut all = gpu_scenarios::all();
        all.extend(net_scenarios::all());
        let which = which.to_string_lossy().into_owned();
        for (name, scenario) in all {
            if !which.split(',').any(|w| w == name) {
                continue;
            }
            let started = Instant::now();
            if let Err(e) = scenario(pe.clone(), gpu.clone()).await {
                eprintln!("GPU scenario {name} FAILED on PE {}: {e}", pe.my_pe());
                panic!("{e}");
            }
            pe.barrier_all().await.unwrap();
            if pe.my_pe() == 0 {
                eprintln!(
                    "GPU scenario {name}: ok on {} PEs in {:?}",
                    pe.n_pes(),
                    started.elapsed()
                );
            }
        }
        drop(gpu);
        pe.finalize().await.unwrap();
    });
}
