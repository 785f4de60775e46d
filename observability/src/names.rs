//! The single source of ferroshmem's metric names: each metric's name, type, unit, labels and
//! help text, the label names, and the histogram buckets. The exporter describes every metric
//! from [`ALL`]; the README's table and the Grafana dashboard are checked against it.
//!
//! Every series also carries the labels [`PE`] (the PE that recorded it), [`JOB_ID`] (the
//! job's random identity, the same on every PE of a job) and [`NODE`] (the host name). The
//! label is `job_id`, not `job`, because Prometheus owns `job` (the scrape job).

use metrics::Unit;

/// Label: the PE that recorded the series.
pub const PE: &str = "pe";
/// Label: the job's identity (16 hex digits), the same on every PE of one job.
pub const JOB_ID: &str = "job_id";
/// Label: the host the PE runs on.
pub const NODE: &str = "node";
/// Label: which symmetric heap a heap gauge describes: `host` (every PE's) or `gpu` (a GPU
/// PE's heap in GPU memory).
pub const MEMORY: &str = "memory";
/// Label: the kind of operation (`put`, `get`, … for traffic; `barrier`, `malloc`, … for
/// collectives).
pub const OP: &str = "op";
/// Label: the transport that carried the operation: `shm` (host PEs' shared memory), `fabric`
/// (PEs on other nodes, through the fabric library) or `cuda` (GPU PEs' host-initiated and
/// on-stream operations: copy engines and stream memory operations).
pub const TRANSPORT: &str = "transport";
/// Label: the fabric library's provider that carries a transport (`tcp;ofi_rxm`, `verbs;ofi_rxm`,
/// `efa`, `cxi`, …), on [`TRANSPORT_INFO`].
pub const PROVIDER: &str = "provider";
/// Label: the PE whose memory an operation reached.
pub const TARGET_PE: &str = "target_pe";
/// Label: an error's kind (`ferroshmem::Error::kind()`: `peer_lost`, `timeout`, …).
pub const KIND: &str = "kind";

/// One-sided operations issued and past every check, by initiator, target, operation and
/// transport.
pub const OPS_TOTAL: &str = "ferroshmem_ops_total";
/// Payload bytes moved by one-sided operations.
pub const BYTES_TOTAL: &str = "ferroshmem_bytes_total";
/// Duration of host-initiated one-sided operations (sampled).
pub const OP_DURATION_SECONDS: &str = "ferroshmem_op_duration_seconds";
/// Operations issued and not yet complete.
pub const OPS_IN_FLIGHT: &str = "ferroshmem_ops_in_flight";
/// Completion-queue entries waiting to be polled.
pub const CQ_DEPTH: &str = "ferroshmem_cq_depth";
/// Info metric (always 1): what carries a transport of this PE, as labels (the fabric's
/// provider).
pub const TRANSPORT_INFO: &str = "ferroshmem_transport_info";
/// Info metric (always 1): that this PE of this job runs on this node. Joined on `pe` (as
/// `target_pe`) and `job_id`, it names the node of an operation's target.
pub const PE_INFO: &str = "ferroshmem_pe_info";
/// Symmetric-heap bytes in live allocations.
pub const HEAP_USED_BYTES: &str = "ferroshmem_heap_used_bytes";
/// Symmetric-heap bytes not allocated.
pub const HEAP_FREE_BYTES: &str = "ferroshmem_heap_free_bytes";
/// Collective calls completed (barriers, collective allocation, exchanges, …).
pub const COLLECTIVES_TOTAL: &str = "ferroshmem_collectives_total";
/// Duration of collective calls (barriers sampled).
pub const COLLECTIVE_DURATION_SECONDS: &str = "ferroshmem_collective_duration_seconds";
/// How long the PE took to join its job.
pub const BOOTSTRAP_DURATION_SECONDS: &str = "ferroshmem_bootstrap_duration_seconds";
/// Peers this PE learned were lost.
pub const PEERS_LOST_TOTAL: &str = "ferroshmem_peers_lost_total";
/// Failed calls, by error kind.
pub const ERRORS_TOTAL: &str = "ferroshmem_errors_total";

/// One timed host-initiated one-sided operation in this many is recorded in
/// [`OP_DURATION_SECONDS`] (per thread and PE); the counters count every operation.
pub const OP_SAMPLE_EVERY: u64 = 1024;
/// One barrier in this many is timed into [`COLLECTIVE_DURATION_SECONDS`].
pub const BARRIER_SAMPLE_EVERY: u64 = 64;

/// Bucket bounds of the `_duration_seconds` histograms: 100 ns to 10 s.
pub const DURATION_BUCKETS: [f64; 25] = [
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
    5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A metric's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic count.
    Counter,
    /// Value that goes up and down.
    Gauge,
    /// Distribution over [`DURATION_BUCKETS`].
    Histogram,
}

/// The description of one metric.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its unit.
    pub unit: Unit,
    /// Its labels beyond `pe`, `job_id` and `node`.
    pub labels: &'static [&'static str],
    /// Its help text.
    pub help: &'static str,
}

/// Every metric ferroshmem exports.
pub const ALL: &[MetricDef] = &[
    MetricDef {
        name: OPS_TOTAL,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[OP, TRANSPORT, TARGET_PE],
        help: "One-sided operations issued by this PE and past every check (shm: before their data moves; cuda: awaited ones when done, _nbi and on-stream ones when queued), by operation, transport and target PE.",
    },
    MetricDef {
        name: BYTES_TOTAL,
        kind: Kind::Counter,
        unit: Unit::Bytes,
        labels: &[OP, TRANSPORT, TARGET_PE],
        help: "Payload bytes moved by this PE's one-sided operations (a signal counts 8 bytes).",
    },
    MetricDef {
        name: OP_DURATION_SECONDS,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &[OP, TRANSPORT],
        help: "Duration of host-initiated one-sided operations; about one in 1024 is timed, so _count is a sample: use ferroshmem_ops_total for rates.",
    },
    MetricDef {
        name: OPS_IN_FLIGHT,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &[TRANSPORT],
        help: "Operations issued and not yet complete (fabric: from when the transport takes them until their completion, _nbi ones included; always 0 on shm, which completes inline).",
    },
    MetricDef {
        name: CQ_DEPTH,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &[TRANSPORT],
        help: "Completion-queue entries waiting for the poller (fabric: entries the progress thread's latest read of the completion queue found, at most 32 per read; always 0 on shm, which has no CQ).",
    },
    MetricDef {
        name: TRANSPORT_INFO,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &[TRANSPORT, PROVIDER],
        help: "Always 1: the fabric library provider that carries this PE's transport (fabric: tcp;ofi_rxm, verbs;ofi_rxm, efa, cxi, ...).",
    },
    MetricDef {
        name: PE_INFO,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &[],
        help: "Always 1: this PE of this job runs on this node; join target_pe to pe (and job_id) to name a target's node.",
    },
    MetricDef {
        name: HEAP_USED_BYTES,
        kind: Kind::Gauge,
        unit: Unit::Bytes,
        labels: &[MEMORY],
        help: "Symmetric-heap bytes of this PE in live allocations.",
    },
    MetricDef {
        name: HEAP_FREE_BYTES,
        kind: Kind::Gauge,
        unit: Unit::Bytes,
        labels: &[MEMORY],
        help: "Symmetric-heap bytes of this PE not allocated.",
    },
    MetricDef {
        name: COLLECTIVES_TOTAL,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[OP],
        help: "Collective calls completed by this PE (barrier, malloc, free, exchange, ...).",
    },
    MetricDef {
        name: COLLECTIVE_DURATION_SECONDS,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &[OP],
        help: "Duration of collective calls; barriers are sampled (one in 64 per thread), the others all timed.",
    },
    MetricDef {
        name: BOOTSTRAP_DURATION_SECONDS,
        kind: Kind::Gauge,
        unit: Unit::Seconds,
        labels: &[],
        help: "How long this PE took to join its job (from the start of bootstrap to a working data plane).",
    },
    MetricDef {
        name: PEERS_LOST_TOTAL,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Peer PEs this PE learned were lost.",
    },
    MetricDef {
        name: ERRORS_TOTAL,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[KIND],
        help: "Calls of this PE that failed, by error kind.",
    },
];

/// The definition of the metric called `name`, if ferroshmem exports one.
pub fn find(name: &str) -> Option<&'static MetricDef> {
    ALL.iter().find(|m| m.name == name)
}

/// The series names Prometheus stores for a metric: its name, plus `_bucket`, `_sum` and
/// `_count` for a histogram.
pub fn series_names(def: &MetricDef) -> Vec<String> {
    match def.kind {
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{}{s}", def.name))
            .collect(),
        Kind::Counter | Kind::Gauge => vec![def.name.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        for m in ALL {
            assert!(m.name.starts_with("ferroshmem_"), "{}", m.name);
            assert!(
                m.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                m.name
            );
            match (m.kind, m.unit) {
                (Kind::Counter, _) => assert!(m.name.ends_with("_total"), "{}", m.name),
                (_, Unit::Seconds) => assert!(m.name.ends_with("_seconds"), "{}", m.name),
                (_, Unit::Bytes) => assert!(m.name.ends_with("_bytes"), "{}", m.name),
                _ => {}
            }
            if m.name.ends_with("_info") {
                assert_eq!(m.kind, Kind::Gauge, "{}: info metrics are gauges", m.name);
            }
            assert!(ALL.iter().filter(|o| o.name == m.name).count() == 1);
        }
        assert!(DURATION_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        assert!(OP_SAMPLE_EVERY.is_power_of_two() && BARRIER_SAMPLE_EVERY.is_power_of_two());
    }
}
