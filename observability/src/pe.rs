//! [`PeMetrics`]: the metrics of one PE outside its traffic — heap usage, collective calls,
//! bootstrap, lost peers, errors — and the factory of its [`Traffic`] blocks. These are slow
//! paths (the PE's control plane), recorded straight into pre-registered handles.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};

use crate::exporter::{installed, Exporter};
use crate::names;
use crate::traffic::Traffic;

/// Where ferroshmem's registrations say they come from.
static METADATA: Metadata<'static> = Metadata::new("ferroshmem", Level::INFO, Some(module_path!()));

/// What every handle of one PE shares: the exporter, the PE's labels, and the handles
/// registered on demand.
#[derive(Debug)]
pub(crate) struct PeShared {
    exporter: &'static Exporter,
    /// The PE's number.
    pub(crate) pe: usize,
    labels: [Label; 2],
    errors: Mutex<Vec<(&'static str, Counter)>>,
    collectives: Mutex<Vec<(&'static str, Counter, Histogram)>>,
    /// `(used, free)` gauges of the host heap and, once the PE has one, of its GPU heap.
    heaps: [OnceLock<(Gauge, Gauge)>; 2],
    bootstrap: Gauge,
    peers_lost: Counter,
}

impl PeShared {
    fn key(&self, name: &'static str, extra: &[Label]) -> Key {
        let labels: Vec<Label> = self.labels.iter().chain(extra).cloned().collect();
        Key::from_parts(name, labels)
    }

    /// Registers the counter `name` with the PE's labels and `extra`.
    pub(crate) fn counter(&self, name: &'static str, extra: &[Label]) -> Counter {
        self.exporter
            .recorder()
            .register_counter(&self.key(name, extra), &METADATA)
    }

    /// Registers the gauge `name` with the PE's labels and `extra`.
    pub(crate) fn gauge(&self, name: &'static str, extra: &[Label]) -> Gauge {
        self.exporter
            .recorder()
            .register_gauge(&self.key(name, extra), &METADATA)
    }

    /// Registers the histogram `name` with the PE's labels and `extra`.
    pub(crate) fn histogram(&self, name: &'static str, extra: &[Label]) -> Histogram {
        self.exporter
            .recorder()
            .register_histogram(&self.key(name, extra), &METADATA)
    }

    /// Counts one error of `kind`.
    #[cold]
    #[inline(never)]
    pub(crate) fn error(&self, kind: &'static str) {
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match errors.iter().position(|(k, _)| *k == kind) {
            Some(at) => at,
            None => {
                let counter = self.counter(names::ERRORS_TOTAL, &[Label::new(names::KIND, kind)]);
                errors.push((kind, counter));
                errors.len() - 1
            }
        };
        errors[at].1.increment(1);
    }
}

/// Which symmetric heap a heap gauge describes (the `memory` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapMemory {
    /// The PE's heap in host memory.
    Host,
    /// A GPU PE's heap in GPU memory.
    Gpu,
}

impl HeapMemory {
    /// The `memory` label value.
    pub fn label(self) -> &'static str {
        match self {
            HeapMemory::Host => "host",
            HeapMemory::Gpu => "gpu",
        }
    }
}

/// The metrics of one PE: a cheap handle (clone it freely). Created disabled — recording
/// nothing, at the cost of a branch — unless the exporter is installed
/// ([`crate::install_exporter`]).
#[derive(Debug, Clone, Default)]
pub struct PeMetrics {
    shared: Option<Arc<PeShared>>,
}

impl PeMetrics {
    /// The metrics of PE `pe` of job `job_id`: enabled if the exporter is installed, and then
    /// announced by `ferroshmem_pe_info` (which names the PE's node for others' traffic).
    pub fn new(pe: usize, job_id: u64) -> PeMetrics {
        let Some(exporter) = installed() else {
            return PeMetrics::disabled();
        };
        let labels = [
            Label::new(names::PE, pe.to_string()),
            Label::new(names::JOB_ID, format!("{job_id:016x}")),
        ];
        let key = |name| Key::from_parts(name, labels.to_vec());
        let recorder = exporter.recorder();
        recorder
            .register_gauge(&key(names::PE_INFO), &METADATA)
            .set(1.0);
        let shared = PeShared {
            exporter,
            pe,
            heaps: Default::default(),
            bootstrap: recorder.register_gauge(&key(names::BOOTSTRAP_DURATION_SECONDS), &METADATA),
            peers_lost: recorder.register_counter(&key(names::PEERS_LOST_TOTAL), &METADATA),
            labels,
            errors: Mutex::new(Vec::new()),
            collectives: Mutex::new(Vec::new()),
        };
        PeMetrics {
            shared: Some(Arc::new(shared)),
        }
    }

    /// Metrics that record nothing.
    pub fn disabled() -> PeMetrics {
        PeMetrics { shared: None }
    }

    /// Whether anything is recorded.
    pub fn is_enabled(&self) -> bool {
        self.shared.is_some()
    }

    /// A traffic block for this PE's operations over `transport` (`shm`, `cuda-p2p`, …)
    /// towards `n_targets` PEs, published at every scrape while it lives.
    pub fn traffic(&self, transport: &'static str, n_targets: usize) -> Traffic {
        match &self.shared {
            None => Traffic::disabled(),
            Some(shared) => {
                let traffic = Traffic::new(shared.clone(), transport, n_targets);
                shared.exporter.add_source(&traffic);
                traffic
            }
        }
    }

    /// Counts a failed call by its error's kind (`ferroshmem::Error::kind()`).
    pub fn error(&self, kind: &'static str) {
        if let Some(shared) = &self.shared {
            shared.error(kind);
        }
    }

    /// Sets the host heap's gauges (`memory="host"`): `used` bytes of `size` allocated.
    pub fn heap(&self, used: usize, size: usize) {
        self.set_heap(HeapMemory::Host, used, size);
    }

    /// Sets the gauges of the heap in `memory`: `used` bytes of `size` allocated.
    pub fn set_heap(&self, memory: HeapMemory, used: usize, size: usize) {
        if let Some(shared) = &self.shared {
            let (used_gauge, free_gauge) = shared.heaps[memory as usize].get_or_init(|| {
                let label = [Label::new(names::MEMORY, memory.label())];
                (
                    shared.gauge(names::HEAP_USED_BYTES, &label),
                    shared.gauge(names::HEAP_FREE_BYTES, &label),
                )
            });
            used_gauge.set(used as f64);
            free_gauge.set(size.saturating_sub(used) as f64);
        }
    }

    /// Records how long the PE took to join its job.
    pub fn bootstrap(&self, took: Duration) {
        if let Some(shared) = &self.shared {
            shared.bootstrap.set(took.as_secs_f64());
        }
    }

    /// Counts a peer this PE learned was lost.
    pub fn peer_lost(&self) {
        if let Some(shared) = &self.shared {
            shared.peers_lost.increment(1);
        }
    }

    /// Counts and times one completed collective call `op` (the host heap's `malloc` and
    /// `free`, and `exchange`; barriers go through [`Traffic::barrier_start`] and
    /// [`Traffic::barrier_done`]).
    pub fn collective(&self, op: &'static str, took: Duration) {
        let Some(shared) = &self.shared else {
            return;
        };
        let mut known = shared
            .collectives
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = match known.iter().position(|(k, _, _)| *k == op) {
            Some(at) => at,
            None => {
                let label = [Label::new(names::OP, op)];
                known.push((
                    op,
                    shared.counter(names::COLLECTIVES_TOTAL, &label),
                    shared.histogram(names::COLLECTIVE_DURATION_SECONDS, &label),
                ));
                known.len() - 1
            }
        };
        known[at].1.increment(1);
        known[at].2.record(took.as_secs_f64());
    }
}
