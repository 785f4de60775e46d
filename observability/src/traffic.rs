//! The hot path of ferroshmem's metrics: [`Traffic`], the per-PE, per-transport counters that
//! every one-sided operation and barrier bumps, read and published only when Prometheus
//! scrapes.
//!
//! Cost per operation when metrics are on: no allocation, no formatting, no map lookup, no
//! lock and no atomic read-modify-write. A block has [`SHARDS`] shards of counters, on cache
//! lines of their own, one per counting slot of the process (module `slot`): a thread that
//! counts holds a slot until it exits, and only it writes that shard of any block, so a count
//! is a thread-local load and a relaxed load and store of two counters in the shard, indexed
//! `[op][target_pe]`. A scrape sums the shards. Threads beyond [`SHARDS`] in the process
//! share an overflow shard updated with atomic adds (correct, slower). Every shard's counters
//! are allocated with the block (about 2 KB per target PE), so that counting never checks
//! whether they exist.
//!
//! About one operation in [`OP_SAMPLE_EVERY`] per `[op][target]` and thread is timed into a
//! pre-registered histogram: with [`Traffic::count_timed`] the operation whose count reaches a
//! multiple of it, from its counting on; with [`Traffic::start`] the next operation started
//! after such a count. One barrier in [`BARRIER_SAMPLE_EVERY`] likewise. Only sampled
//! operations read the clock.
//!
//! When metrics are off, a [`Traffic`] is empty and recording costs a test of it.
//!
//! Layers whose operations complete later (a CQ poller, a GPU proxy) use [`Traffic::count`],
//! [`Traffic::observe`], [`Traffic::in_flight`] and [`Traffic::set_cq_depth`] instead of
//! [`Traffic::start`], [`Traffic::done`] and [`Traffic::failed`], and name what carries them
//! with [`Traffic::set_provider`].

use std::cell::Cell as ThreadCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Label};

use crate::names::{self, BARRIER_SAMPLE_EVERY, OP_SAMPLE_EVERY};
pub use crate::op::{ErrorKind, Op};
use crate::pe::PeShared;

pub use crate::slot::SHARDS;
use crate::slot::{self, OVERFLOW};

thread_local! {
    /// Barriers this thread runs before it times one (counts down to 0).
    static BARRIERS_UNTIL_SAMPLE: ThreadCell<u64> = const { ThreadCell::new(BARRIER_SAMPLE_EVERY) };
}

/// Counts down `countdown`; `true` (and starts over from `every`) when it reaches 0.
#[inline(always)]
fn sample_due(countdown: &'static std::thread::LocalKey<ThreadCell<u64>>, every: u64) -> bool {
    countdown
        .try_with(|left| {
            let n = left.get().wrapping_sub(1);
            left.set(if n == 0 { every } else { n });
            n == 0
        })
        .unwrap_or(false)
}

/// Whether an operation count of `ops` is one the sampler times after (a multiple of
/// [`OP_SAMPLE_EVERY`]).
#[inline(always)]
fn sample_due_at(ops: u64) -> bool {
    ops % OP_SAMPLE_EVERY == 0
}

/// The count of one `[op][target]` pair.
#[derive(Debug, Default)]
struct Cell {
    ops: AtomicU64,
    bytes: AtomicU64,
}

impl Cell {
    /// Adds one operation of `bytes`, from any thread.
    /// Returns the new operation count.
    fn bump_shared(&self, bytes: u64) -> u64 {
        self.bytes.fetch_add(bytes, Relaxed);
        self.ops.fetch_add(1, Relaxed).wrapping_add(1)
    }

    /// Adds one operation of `bytes`, from the one thread that holds the cell's shard's slot:
    /// plain loads and stores. Returns the new operation count.
    #[inline(always)]
    fn bump_owned(&self, bytes: u64) -> u64 {
        let ops = self.ops.load(Relaxed).wrapping_add(1);
        self.ops.store(ops, Relaxed);
        self.bytes
            .store(self.bytes.load(Relaxed).wrapping_add(bytes), Relaxed);
        ops
    }
}

/// One shard's barrier count, on cache lines of its own. The shard's `[op][target]` counts
/// are block `i` of [`Counters::cells`].
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    /// Barriers completed through this shard.
    barriers: AtomicU64,
}

/// Cells per cache-line pair (128 bytes).
const CELLS_PER_LINE_PAIR: usize = 128 / std::mem::size_of::<Cell>();

/// Nanoseconds since the first call, at least 1 (0 means "not timed"), out of line: only
/// sampled operations read the clock.
#[cold]
#[inline(never)]
fn clock() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    (epoch.elapsed().as_nanos() as u64).max(1)
}

/// A series handle and how much of this block's count it has been given. Blocks publish
/// what they counted since their last scrape, so that blocks with the same labels (a PE's
/// GPU set up twice, a block and its replacement) add up instead of hiding each other.
#[derive(Debug)]
struct Sent<H> {
    handle: H,
    sent: u64,
}

impl Sent<Counter> {
    /// Adds to the series what `total` holds beyond what it was given.
    fn catch_up(&mut self, total: u64) {
        self.handle.increment(total.wrapping_sub(self.sent));
        self.sent = total;
    }
}

impl Sent<Gauge> {
    /// Moves the series by this block's change since the last publication.
    fn catch_up(&mut self, now: u64) {
        if now >= self.sent {
            self.handle.increment((now - self.sent) as f64);
        } else {
            self.handle.decrement((self.sent - now) as f64);
        }
        self.sent = now;
    }
}

/// Handles registered at scrape time, for the series that have counts.
#[derive(Debug)]
struct Published {
    /// `(ops_total, bytes_total)` per `[op][target]`.
    cells: Vec<Option<(Sent<Counter>, Sent<Counter>)>>,
    barriers: Option<Sent<Counter>>,
    in_flight: Sent<Gauge>,
    cq_depth: Sent<Gauge>,
}

/// A block's `[op][target]` counts and their shape. Each [`Traffic`] handle holds a copy, so
/// that counting reads them from the handle instead of following the block's pointer first;
/// with metrics off there are no targets, so that one comparison of the target turns away
/// both an empty block and a target out of range.
#[derive(Debug, Clone)]
struct Counters {
    /// [`SHARDS`] blocks of `stride` cells, one per shard, written by the holders of their
    /// slots with plain loads and stores, then the overflow block, written with atomic adds
    /// by threads without a slot. All allocated up front, so that counting never checks
    /// whether they exist.
    cells: Arc<[Cell]>,
    n_targets: usize,
    /// Cells per block: `[op][target]` rounded up to whole cache-line pairs, plus one pair of gap.
    stride: usize,
}

impl Counters {
    /// Counters for `n_targets` targets, all 0.
    fn new(n_targets: usize) -> Counters {
        let cells = Op::ALL.len() * n_targets;
        // A line pair of gap after each block: however the allocation is aligned, no two
        // shards' counters share a cache line (nor an adjacent-line prefetch pair).
        let stride = (cells.div_ceil(CELLS_PER_LINE_PAIR) + 1) * CELLS_PER_LINE_PAIR;
        Counters {
            cells: (0..stride * (SHARDS + 1))
                .map(|_| Cell::default())
                .collect(),
            n_targets,
            stride,
        }
    }

    /// No counters at all (metrics off): every target is out of range.
    fn empty() -> Counters {
        Counters {
            cells: Arc::new([]),
            n_targets: 0,
            stride: 0,
        }
    }

    /// The cells of shard `shard`, or of the overflow block ([`OVERFLOW`]).
    fn block(&self, shard: usize) -> &[Cell] {
        &self.cells[shard * self.stride..][..self.stride]
    }

    /// Counts one operation `op` of `bytes` towards `target` in the calling thread's shard
    /// (or the overflow block) and returns the cell's new operation count; `None` (nothing
    /// counted) for a target out of range, and always with metrics off.
    #[inline(always)]
    fn bump(&self, op: Op, target: usize, bytes: u64) -> Option<u64> {
        if target >= self.n_targets {
            return None;
        }
        let index = op as usize * self.n_targets + target;
        let slot = slot::current();
        Some(if slot < SHARDS {
            self.cells[slot * self.stride + index].bump_owned(bytes)
        } else {
            self.bump_without_slot(index, bytes)
        })
    }

    /// [`Counters::bump`] for a thread without a slot of its own: claims one, else counts in
    /// the overflow block. Returns the cell's new operation count.
    #[cold]
    #[inline(never)]
    fn bump_without_slot(&self, index: usize, bytes: u64) -> u64 {
        match slot::claim() {
            OVERFLOW => self.block(OVERFLOW)[index].bump_shared(bytes),
            slot => self.block(slot)[index].bump_owned(bytes),
        }
    }
}

/// The counters of an enabled traffic block.
#[derive(Debug)]
struct Active {
    pe: Arc<PeShared>,
    transport: &'static str,
    counters: Counters,
    shards: [Shard; SHARDS],
    overflow_barriers: AtomicU64,
    /// Set when an `[op][target]` count reaches a multiple of [`OP_SAMPLE_EVERY`]: the next
    /// operation started on this block is timed.
    sample_armed: AtomicBool,
    latency: [Histogram; Op::ALL.len()],
    barrier_latency: Histogram,
    in_flight: AtomicI64,
    cq_depth: AtomicU64,
    published: Mutex<Published>,
}

/// The traffic counters of one PE over one transport. Cheap to record into from any
/// thread; see the module documentation for the costs.
#[derive(Debug, Clone)]
pub struct Traffic {
    active: Option<Arc<Active>>,
    counters: Counters,
}

/// The exporter's weak reference to a traffic block, published at scrapes while it lives.
#[derive(Debug)]
pub(crate) struct Source(Weak<Active>);

impl Source {
    /// Whether the traffic block still exists.
    pub(crate) fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Publishes the block's counts to the recorder; `false` once the block is gone.
    pub(crate) fn publish(&self) -> bool {
        match self.0.upgrade() {
            Some(active) => {
                active.publish();
                true
            }
            None => false,
        }
    }
}

impl Traffic {
    /// A traffic block that records nothing (metrics off).
    pub fn disabled() -> Traffic {
        Traffic {
            active: None,
            counters: Counters::empty(),
        }
    }

    pub(crate) fn new(pe: Arc<PeShared>, transport: &'static str, n_targets: usize) -> Traffic {
        let transport_label = [Label::new(names::TRANSPORT, transport)];
        let latency = Op::ALL.map(|op| {
            pe.histogram(
                names::OP_DURATION_SECONDS,
                &[
                    Label::new(names::OP, op.label()),
                    transport_label[0].clone(),
                ],
            )
        });
        let barrier_latency = pe.histogram(
            names::COLLECTIVE_DURATION_SECONDS,
            &[Label::new(names::OP, "barrier")],
        );
        let in_flight_gauge = pe.gauge(names::OPS_IN_FLIGHT, &transport_label);
        let cq_depth_gauge = pe.gauge(names::CQ_DEPTH, &transport_label);
        let counters = Counters::new(n_targets);
        Traffic {
            counters: counters.clone(),
            active: Some(Arc::new(Active {
                pe,
                transport,
                counters,
                shards: Default::default(),
                overflow_barriers: AtomicU64::new(0),
                sample_armed: AtomicBool::new(false),
                latency,
                barrier_latency,
                in_flight: AtomicI64::new(0),
                cq_depth: AtomicU64::new(0),
                published: Mutex::new(Published {
                    cells: (0..Op::ALL.len() * n_targets).map(|_| None).collect(),
                    barriers: None,
                    in_flight: Sent {
                        handle: in_flight_gauge,
                        sent: 0,
                    },
                    cq_depth: Sent {
                        handle: cq_depth_gauge,
                        sent: 0,
                    },
                }),
            })),
        }
    }

    /// The exporter's handle on this block.
    pub(crate) fn source(&self) -> Option<Source> {
        self.active.as_ref().map(|a| Source(Arc::downgrade(a)))
    }

    /// Whether this block records anything.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.active.is_some()
    }

    /// Begins recording an operation that completes before it returns: the start time when
    /// the sampler is armed (about one operation in [`OP_SAMPLE_EVERY`]), else 0 — always 0
    /// with metrics off. Pass it to [`Traffic::done`] when the operation succeeds, or give its
    /// error to [`Traffic::failed`].
    ///
    /// Three calls rather than one taking a closure: wrapping the operation in a closure made
    /// the compiler keep its captures in memory, which cost ~29 instructions per operation
    /// even with metrics off.
    #[inline(always)]
    pub fn start(&self) -> u64 {
        match self.active.as_deref() {
            Some(active) => active.sample_start(),
            None => 0,
        }
    }

    /// Counts a successful operation `op` of `bytes` payload bytes towards PE `target`,
    /// begun when [`Traffic::start`] returned `timer`.
    #[inline(always)]
    pub fn done(&self, op: Op, target: usize, bytes: usize, timer: u64) {
        self.count(op, target, bytes);
        self.finish(op, timer);
    }

    /// Counts an operation `op` of `bytes` payload bytes towards PE `target` that can no
    /// longer fail, before it moves its data, and returns its timer: a start time for one
    /// operation in [`OP_SAMPLE_EVERY`] of each `[op][target]` count (the one that reaches a
    /// multiple of it), else 0. Give the timer to [`Traffic::finish`] once the data has
    /// moved. The cheapest way to record an operation: one comparison of the target (a
    /// disabled block has no targets), the count, and no sampler to consult before it.
    #[inline(always)]
    pub fn count_timed(&self, op: Op, target: usize, bytes: usize) -> u64 {
        if self
            .counters
            .bump(op, target, bytes as u64)
            .is_some_and(sample_due_at)
        {
            clock()
        } else {
            0
        }
    }

    /// Ends the timing of an operation whose timer came from [`Traffic::start`] (then
    /// counted with [`Traffic::count`]) or from [`Traffic::count_timed`]: records its duration
    /// if it was sampled (`timer` not 0).
    #[inline(always)]
    pub fn finish(&self, op: Op, timer: u64) {
        if timer != 0 {
            self.observe_since(op, timer);
        }
    }

    #[cold]
    #[inline(never)]
    fn observe_since(&self, op: Op, timer: u64) {
        if let Some(active) = self.active.as_deref() {
            active.observe_since(op, timer);
        }
    }

    /// Counts a failed operation by the kind of its error, and hands the error back.
    #[cold]
    #[inline(never)]
    pub fn failed<E: ErrorKind>(&self, error: E) -> E {
        if let Some(active) = self.active.as_deref() {
            active.failed(&error);
        }
        error
    }

    /// Counts a completed operation whose duration is measured elsewhere (or not at all), or
    /// one timed with [`Traffic::start`] and [`Traffic::finish`].
    #[inline(always)]
    pub fn count(&self, op: Op, target: usize, bytes: usize) {
        if self
            .counters
            .bump(op, target, bytes as u64)
            .is_some_and(sample_due_at)
        {
            self.arm_sampler();
        }
    }

    /// Has the next operation started on this block timed (see [`Traffic::start`]).
    #[cold]
    #[inline(never)]
    fn arm_sampler(&self) {
        if let Some(active) = &self.active {
            active.sample_armed.store(true, Relaxed);
        }
    }

    /// Counts the outcome of one untimed operation `op` of `bytes` bytes towards `target`:
    /// the operation when it succeeded (completed, or queued for a layer that never sees it
    /// complete), else its error by kind; hands the outcome back.
    #[inline]
    pub fn count_outcome<R, E: ErrorKind>(
        &self,
        op: Op,
        target: usize,
        bytes: usize,
        outcome: Result<R, E>,
    ) -> Result<R, E> {
        match outcome {
            Ok(value) => {
                self.count(op, target, bytes);
                Ok(value)
            }
            Err(error) => Err(self.failed(error)),
        }
    }

    /// Records the duration of one operation `op` (for layers that time their own
    /// completions: sample as [`Traffic::start`] does, so that histograms stay cheap).
    pub fn observe(&self, op: Op, took: Duration) {
        if let Some(active) = &self.active {
            active.latency[op as usize].record(took.as_secs_f64());
        }
    }

    /// Adds `delta` (negative when operations complete) to the operations in flight.
    pub fn in_flight(&self, delta: i64) {
        if let Some(active) = &self.active {
            active.in_flight.fetch_add(delta, Relaxed);
        }
    }

    /// Sets the number of completion-queue entries waiting to be polled.
    pub fn set_cq_depth(&self, depth: u64) {
        if let Some(active) = &self.active {
            active.cq_depth.store(depth, Relaxed);
        }
    }

    /// Names the fabric library provider that carries this block's transport, in the info
    /// metric `ferroshmem_transport_info{transport, provider}` (set to 1). Call it once, when
    /// the transport is set up: it registers a series.
    pub fn set_provider(&self, provider: &str) {
        if let Some(active) = &self.active {
            let labels = [
                Label::new(names::TRANSPORT, active.transport),
                Label::new(names::PROVIDER, provider.to_string()),
            ];
            active.pe.gauge(names::TRANSPORT_INFO, &labels).set(1.0);
        }
    }

    /// Begins recording a barrier of this PE: the start time when this thread's barrier
    /// sample is due (one in [`BARRIER_SAMPLE_EVERY`]), else `None` — always `None` with
    /// metrics off. Give it to [`Traffic::barrier_done`]. (Not a wrapper future: moving the
    /// barrier's future into another cost ~30 ns per barrier.)
    #[inline(always)]
    pub fn barrier_start(&self) -> Option<Instant> {
        self.active.as_ref()?;
        sample_due(&BARRIERS_UNTIL_SAMPLE, BARRIER_SAMPLE_EVERY).then(Instant::now)
    }

    /// Counts a barrier begun with [`Traffic::barrier_start`] in
    /// `ferroshmem_collectives_total` (`op="barrier"`) if it succeeded, else its error by
    /// kind.
    #[inline]
    pub fn barrier_done<R, E: ErrorKind>(&self, started: Option<Instant>, result: &Result<R, E>) {
        let Some(active) = &self.active else {
            return;
        };
        match result {
            Ok(_) => {
                active.count_barrier();
                if let Some(at) = started {
                    active.barrier_latency.record(at.elapsed().as_secs_f64());
                }
            }
            Err(e) => {
                tracing::debug!(pe = %active.pe.pe, error = e.kind(), "barrier failed");
                active.pe.error(e.kind());
            }
        }
    }
}

impl Drop for Active {
    /// Publishes the last counts, so that what a PE did after the last scrape still shows,
    /// and takes the block's part out of the gauges.
    fn drop(&mut self) {
        self.publish();
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        published.in_flight.catch_up(0);
        published.cq_depth.catch_up(0);
    }
}

impl Active {
    /// The start of an operation to time (nanoseconds from [`clock`]) when the sampler is
    /// armed, else 0: one load in the common case.
    #[inline(always)]
    fn sample_start(&self) -> u64 {
        if self.sample_armed.load(Relaxed) {
            self.begin_sample()
        } else {
            0
        }
    }

    /// Disarms the sampler; the one caller that did so times its operation.
    #[cold]
    #[inline(never)]
    fn begin_sample(&self) -> u64 {
        if self.sample_armed.swap(false, Relaxed) {
            clock()
        } else {
            0
        }
    }

    /// Counts a failed operation by the kind of its error.
    #[cold]
    #[inline(never)]
    fn failed<E: ErrorKind>(&self, error: &E) {
        self.pe.error(error.kind());
    }

    #[cold]
    #[inline(never)]
    fn observe_since(&self, op: Op, timer: u64) {
        let took = clock().saturating_sub(timer);
        self.latency[op as usize].record(took as f64 * 1e-9);
    }

    fn count_barrier(&self) {
        match slot::this_thread() {
            OVERFLOW => {
                self.overflow_barriers.fetch_add(1, Relaxed);
            }
            slot => {
                let barriers = &self.shards[slot].barriers;
                barriers.store(barriers.load(Relaxed).wrapping_add(1), Relaxed);
            }
        }
    }

    fn publish(&self) {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let published = &mut *published;
        let n_targets = self.counters.n_targets;
        let blocks: Vec<&[Cell]> = (0..=SHARDS).map(|b| self.counters.block(b)).collect();
        for index in 0..Op::ALL.len() * n_targets {
            let (mut ops, mut bytes) = (0u64, 0u64);
            for cells in &blocks {
                ops = ops.wrapping_add(cells[index].ops.load(Relaxed));
                bytes = bytes.wrapping_add(cells[index].bytes.load(Relaxed));
            }
            if ops == 0 {
                continue;
            }
            let handles = published.cells[index].get_or_insert_with(|| {
                let op = Op::ALL[index / n_targets];
                let labels = [
                    Label::new(names::OP, op.label()),
                    Label::new(names::TRANSPORT, self.transport),
                    Label::new(names::TARGET_PE, (index % n_targets).to_string()),
                ];
                (
                    Sent {
                        handle: self.pe.counter(names::OPS_TOTAL, &labels),
                        sent: 0,
                    },
                    Sent {
                        handle: self.pe.counter(names::BYTES_TOTAL, &labels),
                        sent: 0,
                    },
                )
            });
            handles.0.catch_up(ops);
            handles.1.catch_up(bytes);
        }
        let barriers = self
            .shards
            .iter()
            .map(|s| s.barriers.load(Relaxed))
            .fold(self.overflow_barriers.load(Relaxed), u64::wrapping_add);
        if barriers > 0 {
            published
                .barriers
                .get_or_insert_with(|| Sent {
                    handle: self.pe.counter(
                        names::COLLECTIVES_TOTAL,
                        &[Label::new(names::OP, "barrier")],
                    ),
                    sent: 0,
                })
                .catch_up(barriers);
        }
        published
            .in_flight
            .catch_up(self.in_flight.load(Relaxed).max(0) as u64);
        published.cq_depth.catch_up(self.cq_depth.load(Relaxed));
    }
}
