//! Fabric metrics: traffic counted, per target PE, under `transport="fabric"`, beside (not
//! in) the shared-memory traffic; the provider named by `ferroshmem_transport_info`, each PE's
//! node by `ferroshmem_pe_info`; the live gauges `ferroshmem_ops_in_flight` and
//! `ferroshmem_cq_depth` of the fabric. Its own test binary: the metrics exporter is
//! process-wide, and each test runs a job of its own heap id (the `job_id` label) so that
//! their series stay apart.

mod common;

use std::time::Duration;

use common::{available, two_nodes, two_nodes_in, view, view_in, within, HEAP_ID};
use ferroshmem_net::Registered;
use ferroshmem_observability::{install_exporter, Exporter};
use ferroshmem_runtime::{HeapId, SignalOp};

/// The labels of a sample line `metric{k="v",...} value`, and its value.
fn sample(line: &str) -> Option<(Vec<(&str, &str)>, f64)> {
    let (labels, value) = line.split_once('{')?.1.rsplit_once("} ")?;
    let labels = labels
        .split(',')
        .map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((k, v.strip_prefix('"')?.strip_suffix('"')?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((labels, value.parse().ok()?))
}

/// The value of the sample of `metric` that carries every label of `labels`.
fn value(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter_map(sample)
        .find(|(have, _)| labels.iter().all(|want| have.contains(want)))
        .map(|(_, v)| v)
}

/// The `job_id` label of the job whose heap is `heap`.
fn job_id(heap: HeapId) -> String {
    format!("{:016x}", heap.0)
}

/// The value of PE `pe`'s fabric gauge `metric` in the job of heap `heap`.
fn gauge(exporter: &Exporter, metric: &str, heap: HeapId, pe: usize) -> Option<f64> {
    let (job, pe) = (job_id(heap), pe.to_string());
    let labels = [
        ("pe", pe.as_str()),
        ("job_id", &job),
        ("transport", "fabric"),
    ];
    value(&exporter.render(), metric, &labels)
}

/// This host's name, the `node` label.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host name")
        .trim()
        .to_string()
}

/// Waits until PE `pe`'s fabric gauge `metric` reads `want`, failing after [`common::HANG`].
async fn settles(exporter: &Exporter, metric: &str, heap: HeapId, pe: usize, want: f64) {
    within(&format!("{metric} of PE {pe} to read {want}"), async {
        while gauge(exporter, metric, heap, pe) != Some(want) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabric_operations_are_counted_under_their_transport() {
    if !available() {
        return;
    }
    let exporter = install_exporter().expect("the exporter");
    let [a, _b] = two_nodes(|r| r);
    let words = view::<u64>(0, 3);
    within("traffic", async {
        for _ in 0..7 {
            a.dp.put(&words, &[1u64, 2, 3], 1)
                .await
                .expect("remote put");
        }
        a.dp.put(&words, &[4u64], 0).await.expect("own put");
        a.dp.atomic_fetch_add(words.at(0), 1u64, 1)
            .await
            .expect("remote fadd");
    })
    .await;
    let text = exporter.render();
    let job = job_id(HEAP_ID);
    let job = ("job_id", job.as_str());
    let fabric_put = [
        job,
        ("pe", "0"),
        ("target_pe", "1"),
        ("op", "put"),
        ("transport", "fabric"),
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &fabric_put),
        Some(7.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "ferroshmem_bytes_total", &fabric_put),
        Some(168.0),
        "{text}"
    );
    let fabric_amo = [
        job,
        ("pe", "0"),
        ("target_pe", "1"),
        ("op", "amo"),
        ("transport", "fabric"),
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &fabric_amo),
        Some(1.0),
        "{text}"
    );
    let own = [
        job,
        ("pe", "0"),
        ("target_pe", "0"),
        ("op", "put"),
        ("transport", "shm"),
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &own),
        Some(1.0),
        "{text}"
    );
    let not_shm = [
        job,
        ("pe", "0"),
        ("target_pe", "1"),
        ("op", "put"),
        ("transport", "shm"),
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &not_shm).unwrap_or(0.0),
        0.0,
        "{text}"
    );
    std::mem::forget(words);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_and_each_pes_node_are_info_metrics() {
    if !available() {
        return;
    }
    let exporter = install_exporter().expect("the exporter");
    let heap = HeapId(8);
    let _nodes = two_nodes_in(heap, |r| r);
    let text = exporter.render();
    let job = job_id(heap);
    for pe in ["0", "1"] {
        let info = [
            ("pe", pe),
            ("job_id", &job),
            ("transport", "fabric"),
            ("provider", "tcp;ofi_rxm"),
        ];
        assert_eq!(
            value(&text, "ferroshmem_transport_info", &info),
            Some(1.0),
            "{text}"
        );
        let me = [("pe", pe), ("job_id", &job), ("node", &hostname())];
        assert_eq!(value(&text, "ferroshmem_pe_info", &me), Some(1.0), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabric_in_flight_and_cq_depth_are_live() {
    if !available() {
        return;
    }
    let exporter = install_exporter().expect("the exporter");
    let heap = HeapId(9);
    let [a, _b] = two_nodes_in(heap, |r| r);
    let words = view_in::<u64>(heap, 0, 2048);
    let sig = view_in::<u64>(heap, 1 << 16, 1);
    let data = vec![5u64; 2048];
    let (mut most_in_flight, mut deepest_cq) = (0.0f64, 0.0f64);
    within("rounds of outstanding operations", async {
        // Operations of every kind left outstanding, then a look at the gauges, until both
        // were seen above 0 (the provider may finish a round before the look).
        for _ in 0..200 {
            for _ in 0..16 {
                a.dp.put_nbi(&words, &data, 1).expect("put_nbi");
            }
            a.dp.put_signal_nbi(words.slice(..8), &data[..8], &sig, 1, SignalOp::Add, 1)
                .expect("put_signal_nbi");
            let fadd = a.dp.atomic_fetch_add(words.at(0), 1u64, 1);
            most_in_flight = most_in_flight.max(
                gauge(exporter, "ferroshmem_ops_in_flight", heap, 0).expect("in-flight gauge"),
            );
            deepest_cq = deepest_cq
                .max(gauge(exporter, "ferroshmem_cq_depth", heap, 0).expect("CQ depth gauge"));
            fadd.await.expect("remote fadd");
            a.dp.quiet().await.expect("quiet");
            if most_in_flight > 0.0 && deepest_cq > 0.0 {
                break;
            }
        }
    })
    .await;
    assert!(most_in_flight > 0.0, "operations were seen in flight");
    assert!(deepest_cq > 0.0, "completions were seen in the CQ");
    // Every operation ended: nothing stays counted, and the progress thread's next read
    // finds the queue empty.
    settles(exporter, "ferroshmem_ops_in_flight", heap, 0, 0.0).await;
    settles(exporter, "ferroshmem_cq_depth", heap, 0, 0.0).await;
    std::mem::forget((words, sig));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fabric_operations_leave_the_in_flight_gauge() {
    if !available() {
        return;
    }
    let exporter = install_exporter().expect("the exporter");
    let heap = HeapId(10);
    let [a, _b] = two_nodes_in(heap, |r| Registered {
        key: r.key ^ 0xdead,
        ..r
    });
    let words = view_in::<u64>(heap, 0, 4);
    within("refused operations", async {
        for _ in 0..4 {
            a.dp.put_nbi(&words, &[1u64, 2], 1).expect("started");
        }
        assert!(a.dp.quiet().await.is_err(), "a bad key fails");
        assert!(a.dp.atomic_fetch_add(words.at(0), 1u64, 1).await.is_err());
    })
    .await;
    settles(exporter, "ferroshmem_ops_in_flight", heap, 0, 0.0).await;
    std::mem::forget(words);
}
