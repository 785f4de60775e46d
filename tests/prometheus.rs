//! A real Prometheus scrapes a running job: a 3-PE job under `ferroshmem run` (one process
//! per PE, each serving `/metrics` on `FERROSHMEM_METRICS_ADDR` + its local rank) runs a known
//! traffic pattern and stays up; Debian's `prometheus` server scrapes it every second; the
//! test reads the counters back through Prometheus's query API (`/api/v1/query`) and compares
//! them with the pattern's totals, and has it evaluate every query of the Grafana dashboard.
//! Then it releases the job and stops the server.
//!
//! The PE program is this test binary: [`pe_entry`] acts as a PE when `FSH_PROM_DIR` is set.
//! Needs `/usr/bin/prometheus` (Debian's `prometheus` package, installed by `.ci/run`).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::prometheus::{
    dashboard_queries, eventually, free_ports, node_pair_totals, pairs, panel_query, query,
    scratch, start_prometheus, wait_for, Job, STEP,
};
use ferroshmem::{Error, SignalOp};

/// Where the PEs and the test meet: the PEs write `ready.<pe>` there, the test `release`.
const DIR: &str = "FSH_PROM_DIR";
/// PEs of the job.
const PES: usize = 3;

/// Not a test of its own: the PE program of [`prometheus_counts_match_the_traffic`], run by
/// the launcher with `FSH_PROM_DIR` set. Without it, it does nothing.
#[test]
fn pe_entry() {
    let Ok(dir) = std::env::var(DIR) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let dir = PathBuf::from(&dir);
        async move {
            let (me, n) = (pe.my_pe(), pe.n_pes());
            let data = pe.calloc::<u64>(256).await?;
            let sig = pe.calloc::<u64>(1).await?;
            pe.barrier_all().await?;
            let words = 8 * (me + 1);
            for target in (0..n).filter(|&t| t != me) {
                for _ in 0..1 + me + target {
                    pe.put(data.slice(..words), &vec![1u64; words], target)
                        .await?;
                }
            }
            let (right, far) = ((me + 1) % n, (me + 2) % n);
            let mut got = [0u64; 2];
            for _ in 0..5 {
                pe.get(&mut got, data.slice(..2), right).await?;
            }
            for _ in 0..7 {
                pe.atomic_fetch_add(data.at(100), 1u64, far).await?;
            }
            for _ in 0..3 {
                pe.put_signal(
                    data.slice(200..208),
                    &[7u64; 8],
                    &sig,
                    1,
                    SignalOp::Add,
                    right,
                )
                .await?;
            }
            let refused = pe.put(&data, &[1u64], n).await;
            assert!(matches!(refused, Err(Error::PeOutOfRange { .. })));
            pe.barrier_all().await?;
            std::fs::write(dir.join(format!("ready.{me}")), b"")
                .map_err(|e| Error::os("writing the ready file", e))?;
            let deadline = Instant::now() + 2 * STEP;
            while !dir.join("release").exists() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            pe.free(sig).await?;
            pe.free(data).await?;
            Ok::<_, Error>(())
        }
    }));
    let results = results.expect("the job ran");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// A counter series, as [`expected`] and [`scraped`] key it: `(metric, pe, op or error
/// kind, target_pe or "")`.
type Series = (String, String, String, String);

/// The counters the pattern of [`pe_entry`] must leave.
fn expected() -> BTreeMap<Series, u64> {
    let mut want = BTreeMap::new();
    let mut add = |metric: &str, pe: usize, op: &str, target: String, n: u64| {
        let key = (metric.to_string(), pe.to_string(), op.to_string(), target);
        *want.entry(key).or_insert(0) += n;
    };
    for me in 0..PES {
        let (right, far) = ((me + 1) % PES, (me + 2) % PES);
        let mut traffic: Vec<(&str, usize, u64, u64)> = (0..PES)
            .filter(|&t| t != me)
            .map(|t| ("put", t, (1 + me + t) as u64, 64 * (me as u64 + 1)))
            .collect();
        traffic.extend([
            ("get", right, 5, 16),
            ("amo", far, 7, 8),
            ("put_signal", right, 3, 64 + 8),
        ]);
        for (op, target, ops, bytes) in traffic {
            add("ferroshmem_ops_total", me, op, target.to_string(), ops);
            add(
                "ferroshmem_bytes_total",
                me,
                op,
                target.to_string(),
                ops * bytes,
            );
        }
        add(
            "ferroshmem_errors_total",
            me,
            "pe_out_of_range",
            String::new(),
            1,
        );
        add(
            "ferroshmem_collectives_total",
            me,
            "barrier",
            String::new(),
            2,
        );
        add(
            "ferroshmem_collectives_total",
            me,
            "malloc",
            String::new(),
            2,
        );
    }
    want
}

/// The series of ferroshmem's counters as Prometheus stores them, keyed as in [`expected`].
fn scraped(server: SocketAddr) -> Option<BTreeMap<Series, u64>> {
    let series = query(
        server,
        r#"{__name__=~"ferroshmem_(ops|bytes|errors|collectives)_total"}"#,
    )?;
    let label = |s: &serde_json::Value, name: &str| s["metric"][name].as_str().map(String::from);
    let mut got = BTreeMap::new();
    for s in &series {
        let metric = label(s, "__name__")?;
        let op = label(s, "op")
            .or_else(|| label(s, "kind"))
            .unwrap_or_default();
        let key = (
            metric,
            label(s, "pe")?,
            op,
            label(s, "target_pe").unwrap_or_default(),
        );
        got.insert(key, s["value"][1].as_str()?.parse().ok()?);
    }
    Some(got)
}

#[test]
fn prometheus_counts_match_the_traffic() {
    let started = Instant::now();
    let dir = scratch("prometheus");
    let base = free_ports(PES as u16);
    let server = SocketAddr::from(([127, 0, 0, 1], free_ports(1)));
    let targets: Vec<String> = (0..PES)
        .map(|i| format!("127.0.0.1:{}", base + i as u16))
        .collect();
    let prometheus = start_prometheus(&dir, server, &targets);
    let job = Job {
        launcher: Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
            .args(["run", "-n", &PES.to_string(), "--"])
            .arg(std::env::current_exe().expect("test binary"))
            .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(DIR, &dir)
            .env("FERROSHMEM_METRICS_ADDR", base.to_string())
            .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
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
    let want = expected();
    let got = eventually(|| scraped(server), |got| got.as_ref() == Some(&want));
    assert_eq!(
        got.as_ref(),
        Some(&want),
        "Prometheus's counters against the pattern's totals"
    );
    let up = query(server, r#"up{job="ferroshmem"} == 1"#).expect("up");
    assert_eq!(up.len(), PES, "every PE's endpoint is up: {up:?}");
    let labels = query(server, "count by (job_id, node) (ferroshmem_ops_total)").expect("labels");
    assert_eq!(
        labels.len(),
        1,
        "one job id and node for all PEs: {labels:?}"
    );
    assert!(labels[0]["metric"]["job_id"]
        .as_str()
        .is_some_and(|j| j.len() == 16));
    let heap = query(server, "ferroshmem_heap_used_bytes").expect("heap");
    assert_eq!(heap.len(), PES, "{heap:?}");
    for h in &heap {
        let used: f64 = h["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap();
        assert!(
            used >= 2048.0 + 64.0,
            "the two allocations are counted: {h}"
        );
    }

    for expr in dashboard_queries() {
        assert!(
            query(server, &expr).is_some(),
            "Prometheus cannot evaluate the dashboard's query `{expr}`"
        );
    }
    // The node traffic matrix: every PE is on this node, so one pair, which carries every
    // byte the pattern sent.
    let host = labels[0]["metric"]["node"].as_str().expect("node label");
    let sent: u64 = want
        .iter()
        .filter(|(series, _)| series.0 == "ferroshmem_bytes_total")
        .map(|(_, bytes)| bytes)
        .sum();
    let totals = query(server, &node_pair_totals()).expect("node pair totals");
    assert_eq!(
        pairs(&totals, "node", "target_node"),
        vec![(host.to_string(), host.to_string(), sent as f64)],
        "bytes from node to node"
    );
    // A rate needs two scrapes of each series.
    let rate_pairs = || {
        let rates = query(server, &panel_query("Node traffic matrix")).expect("node pair rates");
        pairs(&rates, "node", "target_node")
            .into_iter()
            .map(|(from, to, _)| (from, to))
            .collect::<Vec<_>>()
    };
    let rated = eventually(rate_pairs, |pairs| !pairs.is_empty());
    assert_eq!(rated, vec![(host.to_string(), host.to_string())]);
    let pe_info = query(server, "ferroshmem_pe_info == 1").expect("pe info");
    assert_eq!(pe_info.len(), PES, "every PE names its node: {pe_info:?}");

    let (status, stderr) = job.finish();
    assert!(status.success(), "job failed: {status:?}\n{stderr}");
    for target in &targets {
        assert!(
            stderr.contains(&format!("serves metrics at http://{target}/metrics")),
            "the launcher prints every endpoint: {stderr}"
        );
    }
    drop(prometheus);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("Prometheus test done in {:?}", started.elapsed());
}
