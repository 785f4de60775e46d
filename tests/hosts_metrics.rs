//! Traffic between nodes, end to end: a job of 2 namespace hosts × 2 PEs under
//! `ferroshmem run --hosts` (each PE serving `/metrics` on its host's address), a known
//! pattern of puts between every pair of PEs, and a real Prometheus scraping the four
//! endpoints across the bridge. The dashboard's node traffic matrix must name the two hosts
//! and carry, for each pair of them, the bytes the pattern sent from one to the other (the
//! diagonal over shared memory, the rest over the fabric); the fabric's panel must name its
//! provider on both hosts, and no fabric operation may stay counted in flight.
//!
//! Root only (namespace hosts; skips saying so otherwise), and needs libfabric and
//! `/usr/bin/prometheus` (`.ci/run` installs them). The PE program is this test binary:
//! [`pe_entry`] acts as a PE when `FSH_HOSTS_METRICS_DIR` is set.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::{self, Hosts};
use common::prometheus::{
    eventually, free_ports, node_pair_totals, pairs, panel_query, query, scratch, start_prometheus,
    wait_for, Job, STEP,
};
use ferroshmem::Error;

/// Where the PEs and the test meet: each PE writes `ready.<pe>` (holding its host name)
/// there, the test `release`.
const DIR: &str = "FSH_HOSTS_METRICS_DIR";
/// Hosts of the job, and PEs on each.
const HOSTS: usize = 2;
const PER_HOST: usize = 2;
const PES: usize = HOSTS * PER_HOST;

/// How many puts PE `from` makes to PE `to`, and the bytes of each.
fn puts(from: usize, to: usize) -> (usize, usize) {
    (1 + from + 2 * to, 64 * (from + 1))
}

/// Not a test of its own: the PE program of
/// [`the_node_traffic_matrix_shows_the_bytes_between_hosts`], run by the launcher with
/// `FSH_HOSTS_METRICS_DIR` set. Without it, it does nothing.
#[test]
fn pe_entry() {
    let Ok(dir) = std::env::var(DIR) else {
        return;
    };
    let rt = common::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let dir = PathBuf::from(&dir);
        async move {
            let (me, n) = (pe.my_pe(), pe.n_pes());
            let data = pe.calloc::<u64>(1024).await?;
            pe.barrier_all().await?;
            for target in 0..n {
                let (count, bytes) = puts(me, target);
                let words = vec![me as u64; bytes / 8];
                for _ in 0..count {
                    pe.put(data.slice(..words.len()), &words, target).await?;
                }
            }
            pe.barrier_all().await?;
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map_err(|e| Error::os("reading the host name", e))?;
            std::fs::write(dir.join(format!("ready.{me}")), host.trim())
                .map_err(|e| Error::os("writing the ready file", e))?;
            let deadline = Instant::now() + 2 * STEP;
            while !dir.join("release").exists() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            pe.barrier_all().await?;
            pe.free(data).await?;
            Ok::<_, Error>(())
        }
    }));
    let results = results.expect("the job ran");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// `ferroshmem_bytes_total` as Prometheus has it, summed by `(pe, target_pe)` over the
/// operations whose `op` matches `op` (a regular expression).
fn bytes_by_pair(server: std::net::SocketAddr, op: &str) -> Option<BTreeMap<(usize, usize), f64>> {
    let promql = format!(r#"sum by (pe, target_pe) (ferroshmem_bytes_total{{op=~"{op}"}})"#);
    let mut out = BTreeMap::new();
    for (pe, target, bytes) in pairs(&query(server, &promql)?, "pe", "target_pe") {
        out.insert((pe.parse().ok()?, target.parse().ok()?), bytes);
    }
    Some(out)
}

/// What the pattern puts, by `(pe, target_pe)`.
fn pattern() -> BTreeMap<(usize, usize), f64> {
    (0..PES)
        .flat_map(|from| (0..PES).map(move |to| (from, to)))
        .map(|(from, to)| {
            let (count, bytes) = puts(from, to);
            ((from, to), (count * bytes) as f64)
        })
        .collect()
}

/// `by_pe` (bytes by `(pe, target_pe)`) summed by the pair of their nodes.
fn by_node(
    by_pe: &BTreeMap<(usize, usize), f64>,
    node_of: &[String],
) -> Vec<(String, String, f64)> {
    let mut sent = BTreeMap::new();
    for (&(from, to), bytes) in by_pe {
        let pair = (node_of[from].clone(), node_of[to].clone());
        *sent.entry(pair).or_insert(0.0) += bytes;
    }
    sent.into_iter().map(|((a, b), v)| (a, b, v)).collect()
}

#[test]
fn the_node_traffic_matrix_shows_the_bytes_between_hosts() {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(HOSTS) else {
        return;
    };
    let dir = scratch("hosts-metrics");
    // Each host is its own network: every PE listens on 0.0.0.0 at the same base port
    // plus its local rank there, and Prometheus reaches them through the bridge.
    let base = free_ports(PER_HOST as u16);
    let targets: Vec<String> = hosts
        .addresses
        .iter()
        .flat_map(|a| (0..PER_HOST).map(move |i| format!("{a}:{}", base + i as u16)))
        .collect();
    let server = std::net::SocketAddr::from(([127, 0, 0, 1], free_ports(1)));
    let prometheus = start_prometheus(&dir, server, &targets);
    let job = Job {
        launcher: Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
            .args(["run", "--hosts", &hosts.hosts_arg(PER_HOST), "--rsh"])
            .arg(&hosts.agent)
            .arg("--")
            .arg(std::env::current_exe().expect("test binary"))
            .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(DIR, &dir)
            .env("FERROSHMEM_METRICS_ADDR", format!("0.0.0.0:{base}"))
            .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
            .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the job"),
        release: dir.join("release"),
    };
    wait_for("the PEs to run their pattern", || {
        (0..PES).all(|pe| dir.join(format!("ready.{pe}")).exists())
    });
    let node_of: Vec<String> = (0..PES)
        .map(|pe| std::fs::read_to_string(dir.join(format!("ready.{pe}"))).expect("ready file"))
        .collect();
    let nodes: std::collections::BTreeSet<&String> = node_of.iter().collect();
    assert_eq!(nodes.len(), HOSTS, "one node per host: {node_of:?}");

    // Every put of the pattern is in, then the matrix's totals are every byte (the puts and
    // the barriers' signals) from the PEs of one node to those of the other, as this test
    // joins them with the nodes the PEs reported.
    let put = eventually(
        || bytes_by_pair(server, "put"),
        |p| p.as_ref() == Some(&pattern()),
    );
    assert_eq!(put, Some(pattern()), "the pattern's puts");
    let every_op = bytes_by_pair(server, ".*").expect("every operation's bytes");
    let want = by_node(&every_op, &node_of);
    let got = eventually(
        || query(server, &node_pair_totals()).map(|s| pairs(&s, "node", "target_node")),
        |got| got.as_ref() == Some(&want),
    );
    assert_eq!(
        got,
        Some(want),
        "bytes from node to node (PEs' nodes: {node_of:?})"
    );
    let rated = eventually(
        || query(server, &panel_query("Node traffic matrix")).map(|s| s.len()),
        |n| *n == Some(HOSTS * HOSTS),
    );
    assert_eq!(
        rated,
        Some(HOSTS * HOSTS),
        "the matrix has every pair of nodes"
    );
    let providers = eventually(
        || {
            query(server, &panel_query("Fabric bytes/s by node"))
                .map(|s| pairs(&s, "node", "provider"))
        },
        |p| p.as_ref().is_some_and(|p| p.len() == HOSTS),
    )
    .expect("the fabric panel");
    let named: Vec<(&str, &str)> = providers
        .iter()
        .map(|(node, provider, _)| (node.as_str(), provider.as_str()))
        .collect();
    let mut expected_named: Vec<(&str, &str)> =
        nodes.iter().map(|n| (n.as_str(), "tcp;ofi_rxm")).collect();
    expected_named.sort();
    assert_eq!(
        named, expected_named,
        "each host's fabric traffic names its provider"
    );
    let in_flight =
        query(server, r#"ferroshmem_ops_in_flight{transport="fabric"}"#).expect("in-flight gauges");
    assert_eq!(in_flight.len(), PES, "{in_flight:?}");
    assert!(
        in_flight.iter().all(|s| s["value"][1] == "0"),
        "no fabric operation stays in flight: {in_flight:?}"
    );

    let (status, stderr) = job.finish();
    assert!(status.success(), "job failed: {status:?}\n{stderr}");
    drop(prometheus);
    drop(hosts);
    let _ = std::fs::remove_dir_all(&dir);
}
