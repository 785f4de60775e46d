//! Fabric traffic is counted, per target PE, under `transport="fabric"`, beside (not in) the
//! shared-memory traffic. Its own test binary: the metrics exporter is process-wide.

mod common;

use common::{available, two_nodes, view, within};
use ferroshmem_observability::install_exporter;

/// The value of the sample of `metric` whose labels contain every one of `labels`.
fn value(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
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
    let fabric_put = [
        "pe=\"0\"",
        "target_pe=\"1\"",
        "op=\"put\"",
        "transport=\"fabric\"",
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
        "pe=\"0\"",
        "target_pe=\"1\"",
        "op=\"amo\"",
        "transport=\"fabric\"",
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &fabric_amo),
        Some(1.0),
        "{text}"
    );
    let own = [
        "pe=\"0\"",
        "target_pe=\"0\"",
        "op=\"put\"",
        "transport=\"shm\"",
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &own),
        Some(1.0),
        "{text}"
    );
    let not_shm = [
        "pe=\"0\"",
        "target_pe=\"1\"",
        "op=\"put\"",
        "transport=\"shm\"",
    ];
    assert_eq!(
        value(&text, "ferroshmem_ops_total", &not_shm).unwrap_or(0.0),
        0.0,
        "{text}"
    );
    std::mem::forget(words);
}
