//! The recording API against the exporter's rendering: counts from many threads (more than
//! there are shards) add up exactly, errors are counted by kind, latencies are sampled one in
//! `OP_SAMPLE_EVERY`, every series carries the PE's labels, and counts made after the last
//! scrape are still published when their block is dropped, and the info metrics name a PE's
//! node and a transport's provider.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroshmem_observability::names::{self, OP_SAMPLE_EVERY};
use ferroshmem_observability::traffic::SHARDS;
use ferroshmem_observability::{install_exporter, ErrorKind, Op, PeMetrics, Traffic};

/// An error of a kind of its own.
#[derive(Debug)]
struct Refused;

impl ErrorKind for Refused {
    fn kind(&self) -> &'static str {
        "refused"
    }
}

/// The samples of `metric` in `text` whose labels include `labels`, keyed by all their
/// labels.
fn samples(text: &str, metric: &str, labels: &[(&str, &str)]) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?.strip_prefix('{')?;
            let (set, value) = rest.rsplit_once("} ")?;
            labels
                .iter()
                .all(|(k, v)| set.split(',').any(|kv| kv == format!("{k}=\"{v}\"")))
                .then(|| (set.to_string(), value.parse().expect("a number")))
        })
        .collect()
}

/// The one sample of `metric` with `labels`.
fn sample(text: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found = samples(text, metric, labels);
    assert_eq!(found.len(), 1, "{metric} {labels:?} in\n{text}");
    found.into_values().next().unwrap()
}

/// One operation through the recording API, as the data plane makes it: `start`, then
/// `done` or `failed`.
fn record(traffic: &Traffic, op: Op, target: usize, bytes: usize, ok: bool) -> Result<(), Refused> {
    let timer = traffic.start();
    if ok {
        traffic.done(op, target, bytes, timer);
        Ok(())
    } else {
        Err(traffic.failed(Refused))
    }
}

#[test]
fn counts_errors_samples_and_labels_reach_the_exposition() {
    let exporter = install_exporter().expect("exporter");
    let pe = PeMetrics::new(3, 0xabc);
    assert!(pe.is_enabled());
    let traffic = pe.traffic("shm", 4);
    let disabled = PeMetrics::disabled().traffic("shm", 4);
    assert!(!disabled.is_enabled());

    // More threads than shards: the overflow block keeps the sums exact.
    let threads = SHARDS + 4;
    std::thread::scope(|s| {
        for _ in 0..threads {
            let traffic = traffic.clone();
            s.spawn(move || {
                for _ in 0..1000 {
                    traffic.count(Op::Put, 1, 8);
                }
            });
        }
    });
    // One thread: OP_SAMPLE_EVERY * 2 successful gets are timed twice; failures are not
    // counted as operations.
    for _ in 0..OP_SAMPLE_EVERY * 2 {
        record(&traffic, Op::Get, 2, 16, true).unwrap();
    }
    record(&disabled, Op::Get, 2, 16, true).unwrap();
    // The data plane's way: count once validated, then finish; the count that reaches each
    // multiple of OP_SAMPLE_EVERY is timed.
    for _ in 0..OP_SAMPLE_EVERY * 3 {
        let timer = traffic.count_timed(Op::Signal, 2, 8);
        traffic.finish(Op::Signal, timer);
    }
    assert_eq!(disabled.count_timed(Op::Signal, 2, 8), 0);
    for _ in 0..3 {
        assert!(record(&traffic, Op::Amo, 0, 8, false).is_err());
    }
    assert!(record(&traffic, Op::Put, 9, 8, true).is_ok());
    pe.heap(4096, 1 << 20);
    pe.collective("malloc", Duration::from_micros(30));
    pe.peer_lost();

    let text = exporter.render();
    let me = [(names::PE, "3"), (names::JOB_ID, "0000000000000abc")];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        me.iter().chain(extra).copied().collect()
    };
    let put = with(&[("op", "put"), ("transport", "shm"), ("target_pe", "1")]);
    assert_eq!(
        sample(&text, names::OPS_TOTAL, &put),
        (threads * 1000) as f64
    );
    assert_eq!(
        sample(&text, names::BYTES_TOTAL, &put),
        (threads * 8000) as f64
    );
    let get = with(&[("op", "get"), ("target_pe", "2")]);
    assert_eq!(
        sample(&text, names::OPS_TOTAL, &get),
        (OP_SAMPLE_EVERY * 2) as f64
    );
    let timed = format!("{}_count", names::OP_DURATION_SECONDS);
    assert_eq!(sample(&text, &timed, &with(&[("op", "get")])), 2.0);
    let signal = with(&[("op", "signal"), ("target_pe", "2")]);
    assert_eq!(
        sample(&text, names::OPS_TOTAL, &signal),
        (OP_SAMPLE_EVERY * 3) as f64
    );
    assert_eq!(
        sample(&text, names::BYTES_TOTAL, &signal),
        (OP_SAMPLE_EVERY * 3 * 8) as f64
    );
    assert_eq!(sample(&text, &timed, &with(&[("op", "signal")])), 3.0);
    assert!(samples(&text, names::OPS_TOTAL, &with(&[("op", "amo")])).is_empty());
    assert!(samples(&text, names::OPS_TOTAL, &with(&[("target_pe", "9")])).is_empty());
    assert_eq!(
        sample(&text, names::ERRORS_TOTAL, &with(&[("kind", "refused")])),
        3.0
    );
    assert_eq!(sample(&text, names::HEAP_USED_BYTES, &me), 4096.0);
    assert_eq!(
        sample(&text, names::HEAP_FREE_BYTES, &me),
        (1 << 20) as f64 - 4096.0
    );
    assert_eq!(
        sample(&text, names::COLLECTIVES_TOTAL, &with(&[("op", "malloc")])),
        1.0
    );
    assert_eq!(sample(&text, names::PEERS_LOST_TOTAL, &me), 1.0);
    assert_eq!(sample(&text, names::OPS_IN_FLIGHT, &me), 0.0);
    assert!(
        text.lines()
            .filter(|l| l.starts_with("ferroshmem_"))
            .all(|l| l.contains("node=\"")),
        "every series names its node"
    );
    for m in names::ALL {
        assert!(
            text.contains(&format!("# HELP {} ", m.name)) || !text.contains(m.name),
            "{} is described",
            m.name
        );
    }

    // A PE's series outlive scrapes but its traffic block is dropped with it.
    drop(traffic);
    assert!(exporter.render().contains("target_pe=\"1\""));
}

#[test]
fn counts_survive_their_block_and_replaced_blocks_start_afresh() {
    let exporter = install_exporter().expect("exporter");
    let job = 0x5eed;
    let pes: Vec<PeMetrics> = (0..6).map(|pe| PeMetrics::new(pe, job)).collect();
    let blocks: Vec<Traffic> = pes.iter().map(|pe| pe.traffic("shm", 3)).collect();
    // Round robin over six blocks from one thread.
    for round in 0..500 {
        for (i, traffic) in blocks.iter().enumerate() {
            traffic.count(Op::Put, round % 3, i + 1);
            let timer = traffic.count_timed(Op::Get, 2, 4);
            traffic.finish(Op::Get, timer);
        }
    }
    // Blocks dropped before any scrape: their counts are published as they go. Their
    // replacements (the allocator may hand out the same memory) count from 0 in series of
    // their own.
    drop(blocks);
    let replaced: Vec<Traffic> = pes.iter().map(|pe| pe.traffic("cuda", 3)).collect();
    for traffic in &replaced {
        for _ in 0..7 {
            traffic.count(Op::Put, 0, 100);
        }
    }

    let text = exporter.render();
    let job_label = "0000000000005eed";
    for pe in 0..6 {
        let pe_label = pe.to_string();
        let labels = |op, transport, target| {
            vec![
                (names::PE, pe_label.as_str()),
                (names::JOB_ID, job_label),
                ("op", op),
                ("transport", transport),
                ("target_pe", target),
            ]
        };
        for target in ["0", "1", "2"] {
            let put = labels("put", "shm", target);
            let expected = [167.0, 167.0, 166.0][target.parse::<usize>().unwrap()];
            assert_eq!(sample(&text, names::OPS_TOTAL, &put), expected);
            assert_eq!(
                sample(&text, names::BYTES_TOTAL, &put),
                expected * (pe + 1) as f64
            );
        }
        assert_eq!(
            sample(&text, names::OPS_TOTAL, &labels("get", "shm", "2")),
            500.0
        );
        assert_eq!(
            sample(&text, names::BYTES_TOTAL, &labels("put", "cuda", "0")),
            700.0
        );
        assert!(samples(&text, names::OPS_TOTAL, &labels("get", "cuda", "2")).is_empty());
    }
}

#[test]
fn blocks_with_the_same_labels_add_up() {
    let exporter = install_exporter().expect("exporter");
    let pe = PeMetrics::new(0, 0xadd);
    let first = pe.traffic("cuda", 2);
    let second = pe.traffic("cuda", 2);
    for _ in 0..10 {
        first.count(Op::Get, 1, 8);
    }
    for _ in 0..4 {
        second.count(Op::Get, 1, 8);
    }
    first.in_flight(2);
    second.in_flight(3);
    let labels = [
        (names::PE, "0"),
        (names::JOB_ID, "0000000000000add"),
        ("op", "get"),
        ("transport", "cuda"),
        ("target_pe", "1"),
    ];
    let text = exporter.render();
    assert_eq!(sample(&text, names::OPS_TOTAL, &labels), 14.0);
    assert_eq!(sample(&text, names::BYTES_TOTAL, &labels), 112.0);
    let gauge = [(names::PE, "0"), (names::JOB_ID, "0000000000000add")];
    assert_eq!(sample(&text, names::OPS_IN_FLIGHT, &gauge), 5.0);
    // A dropped block keeps its counts and takes its operations out of the gauge.
    drop(first);
    for _ in 0..5 {
        second.count(Op::Get, 1, 8);
    }
    let text = exporter.render();
    assert_eq!(sample(&text, names::OPS_TOTAL, &labels), 19.0);
    assert_eq!(sample(&text, names::OPS_IN_FLIGHT, &gauge), 3.0);
}

#[test]
fn info_metrics_name_the_pe_node_and_the_provider() {
    let exporter = install_exporter().expect("exporter");
    let pe = PeMetrics::new(3, 0x1f0);
    pe.traffic("fabric", 4).set_provider("tcp;ofi_rxm");
    Traffic::disabled().set_provider("verbs;ofi_rxm");
    let text = exporter.render();
    let me = [(names::PE, "3"), (names::JOB_ID, "00000000000001f0")];
    assert_eq!(sample(&text, names::PE_INFO, &me), 1.0);
    let provider = [
        me[0],
        me[1],
        (names::TRANSPORT, "fabric"),
        (names::PROVIDER, "tcp;ofi_rxm"),
    ];
    assert_eq!(sample(&text, names::TRANSPORT_INFO, &provider), 1.0);
    assert!(
        samples(
            &text,
            names::TRANSPORT_INFO,
            &[(names::PROVIDER, "verbs;ofi_rxm")]
        )
        .is_empty(),
        "a disabled block names nothing: {text}"
    );
}
