//! Expert parallelism across nodes: the ep kernels' network path, on GPU PEs of two UTS
//! "hosts" sharing this machine's GPU (`common::uts_hosts`). Rows, top-k, weights, scales
//! and counts to a PE of the other host are staged in the sender's heap and put through the
//! send queues its kernels write (the `cpu` NIC handler over the fabric); the normal combine
//! fetches rows from the other host. Jobs of 2 hosts × 1 PE (every peer remote) and 2 hosts ×
//! 2 PEs (NVLink-mapped within a host, the network between) run normal dispatch and combine
//! over every routing (results from a device buffer and in place), FP8 rows with their
//! scales, and low-latency dispatch and combine in BF16 and FP8 (called, and captured in a
//! CUDA graph and replayed), each value checked against the host reference; a job whose PE 1 is killed after creating its buffer checks that the
//! other PE's dispatch fails in time instead of hanging.
//!
//! Skipped, saying why, without a GPU or without root (namespaces).

mod common;
#[allow(dead_code)] // the one-process runner and inputs not used across hosts
mod ep_support;
#[path = "ep_support/low_latency.rs"]
mod low_latency;
#[path = "ep_support/normal.rs"]
mod normal;

use std::time::{Duration, Instant};

use common::uts_hosts::{cannot_run, run_job};
use ep_support::{Routing, Shape};
use ferroshmem::ep::{Buffer, LowLatencyCombine};
use ferroshmem::gpu::GpuPe;
use ferroshmem::{Error, Pe, Result};

const SCENARIO: &str = "FSH_EP_HOSTS_SCENARIO";

/// Runs `scenarios` as a job placed by `hosts` (`--hosts` syntax) of `n` PEs; each must
/// report success.
fn hosts_job(test: &str, hosts: &str, n: usize, scenarios: &[&str]) {
    if let Some(why) = cannot_run() {
        eprintln!("{test}: skipped, {why}");
        return;
    }
    let text = run_job(
        "ep_hosts_pe_entry",
        &["--hosts", hosts],
        (SCENARIO, &scenarios.join(",")),
        true,
    );
    for name in scenarios {
        assert!(
            text.contains(&format!("ep scenario {name}: ok on {n} PEs")),
            "scenario {name} did not report success"
        );
    }
}

#[test]
fn ep_across_two_hosts_one_pe_each() {
    hosts_job(
        "ep_across_two_hosts_one_pe_each",
        "ha:1,hb:1",
        2,
        &["normal", "low_latency"],
    );
}

#[test]
fn ep_across_two_hosts_two_pes_each() {
    hosts_job(
        "ep_across_two_hosts_two_pes_each",
        "ha:2,hb:2",
        4,
        &["normal", "low_latency"],
    );
}

/// PE 1 (on the other host) killed once its buffer exists: PE 0's dispatch, waiting for PE
/// 1's counts, ends in an error within the test's bound, and the launcher exits non-zero.
#[test]
fn ep_dispatch_fails_when_a_peer_on_another_host_dies() {
    let test = "ep_dispatch_fails_when_a_peer_on_another_host_dies";
    if let Some(why) = cannot_run() {
        eprintln!("{test}: skipped, {why}");
        return;
    }
    let text = run_job(
        "ep_hosts_pe_entry",
        &["--hosts", "ha:1,hb:1", "--grace", "40s"],
        (SCENARIO, "peer_lost"),
        false,
    );
    assert!(
        text.contains("ep scenario peer_lost: ok on PE 0"),
        "PE 0's dispatch did not end with the loss"
    );
}

/// How long a call of these jobs may wait for the others (their rounds take milliseconds).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Normal mode: every routing twice (results from a device buffer, then in place), then FP8.
async fn normal_rounds(pe: Pe, gpu: GpuPe) -> Result<()> {
    let shape = Shape::small(pe.n_pes());
    let mut config = shape.config();
    config.timeout = CALL_TIMEOUT;
    let mut buffer = Buffer::new(&gpu, config).await?;
    for (i, routing) in Routing::ALL.into_iter().enumerate() {
        for seed in [2 * i as u64, 2 * i as u64 + 1] {
            normal::check_round(&pe, &gpu, &mut buffer, &shape, routing, seed).await?;
            eprintln!("PE {}: normal {routing:?} seed {seed} ok", pe.my_pe());
        }
    }
    normal::check_fp8_round(&gpu, &mut buffer, &shape).await?;
    buffer.destroy().await
}

/// Low-latency mode: every routing in BF16 (in place and from a buffer) and in FP8, graph
/// replays, rounds back to back, with combines in place pushed, then pulled within each node.
async fn low_latency_rounds(pe: Pe, gpu: GpuPe) -> Result<()> {
    let shape = Shape::small(pe.n_pes());
    for combine in [LowLatencyCombine::Push, LowLatencyCombine::Pull] {
        let mut config = low_latency::config_combining(&shape, combine);
        config.timeout = CALL_TIMEOUT;
        let mut buffer = Buffer::new(&gpu, config).await?;
        for (i, routing) in Routing::ALL.into_iter().enumerate() {
            for (seed, fp8) in [(i, false), (i + 11, false), (i + 21, true)] {
                low_latency::round(&gpu, &mut buffer, &shape, (routing, seed as u64, fp8)).await?;
                eprintln!(
                    "PE {}: low latency {combine:?} {routing:?} seed {seed} ok",
                    pe.my_pe()
                );
            }
        }
        low_latency::captured_rounds(&gpu, &mut buffer, &shape).await?;
        eprintln!(
            "PE {}: low latency {combine:?} graph replays ok",
            pe.my_pe()
        );
        low_latency::back_to_back_rounds(&gpu, &mut buffer, &shape, 4).await?;
        buffer.destroy().await?;
    }
    Ok(())
}

/// PE 1 dies once every buffer exists; PE 0's dispatch must end in an error, not hang.
async fn peer_lost(pe: Pe, gpu: GpuPe) -> Result<()> {
    let shape = Shape::small(pe.n_pes());
    let mut config = shape.config();
    config.timeout = CALL_TIMEOUT;
    let mut buffer = Buffer::new(&gpu, config).await?;
    // The launcher's SIGTERM, once PE 1 is gone, must not end PE 0 before it has seen that.
    let _term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    pe.barrier_all().await?;
    if pe.my_pe() == 1 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
    if pe.my_pe() != 0 {
        return Ok(());
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    eprintln!("PE 0: dispatching with PE 1 dead");
    let input = shape.input(0, Routing::Random, 7);
    let started = Instant::now();
    let outcome = normal::dispatch_only(&gpu, &mut buffer, &input).await;
    let took = started.elapsed();
    eprintln!("PE 0: the dispatch returned after {took:?}");
    match outcome {
        Err(e @ Error::PeerLost { .. }) if took < CALL_TIMEOUT => {
            eprintln!("ep scenario peer_lost: ok on PE 0 ({e} after {took:?})");
            Err(Error::Config("PE 1 was lost, as the scenario wants".into()))
        }
        other => Err(Error::Config(format!(
            "PE 0: the dispatch with PE 1 dead ended {other:?} after {took:?}"
        ))),
    }
}

/// A PE of the jobs above (does nothing unless one of them started it).
#[test]
fn ep_hosts_pe_entry() {
    let Some(which) = std::env::var_os(SCENARIO) else {
        return;
    };
    let which = which.to_string_lossy().into_owned();
    ferroshmem::observability::init_tracing();
    let rt = common::runtime();
    rt.block_on(async {
        let pe = ferroshmem::init().await.unwrap();
        let gpu = pe.init_gpu().await.unwrap();
        for name in which.split(',') {
            let started = Instant::now();
            let ran = match name {
                "normal" => normal_rounds(pe.clone(), gpu.clone()).await,
                "low_latency" => low_latency_rounds(pe.clone(), gpu.clone()).await,
                "peer_lost" => peer_lost(pe.clone(), gpu.clone()).await,
                other => panic!("no ep scenario {other}"),
            };
            if let Err(e) = ran {
                eprintln!("ep scenario {name} FAILED on PE {}: {e}", pe.my_pe());
                panic!("{e}");
            }
            pe.barrier_all().await.unwrap();
            if pe.my_pe() == 0 {
                eprintln!(
                    "ep scenario {name}: ok on {} PEs in {:?}",
                    pe.n_pes(),
                    started.elapsed()
                );
            }
        }
        drop(gpu);
        pe.finalize().await.unwrap();
    });
}
