//! The completion queue of one GPU PE. No future waits for GPU work in the driver: the
//! futures read the fence themselves or are woken by the CQ thread (the one exception, a
//! fence that could not be queued, synchronizes the copy stream so that no copy outlives the
//! memory it uses).
//!
//! Work on the PE's copy stream (host-initiated RMA) completes through the *fence*: a 64-bit
//! counter in pinned host memory. Each completion queues a stream memory write of the next
//! sequence number after the work queued so far; the work up to a number has completed (and
//! is visible: the write has a memory barrier before it) once the counter reaches it. The
//! future reads the counter itself, with no driver call and no other thread on its way.
//!
//! Work on other streams completes through an event: the CQ thread polls the events
//! (`cuEventQuery`, which never blocks) and wakes the futures waiting on them.
//!
//! A [`FenceMark`] remembers a fence number for memory a transfer borrows: the memory's owner
//! waits for it before the memory is read, written or freed again.
//!
//! A future keeps its task polling (rescheduling itself) for a few microseconds before it
//! parks, so that short operations complete without waking a parked worker. A parked fence
//! future hands its number to the CQ thread, which watches the counter for it (and the copy
//! stream for errors, which would stop the counter). The thread spins while operations are
//! outstanding and for `spin` after the last one completes, then sleeps on a condition
//! variable until the next submission; only a submission that finds it asleep notifies it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaContext, CudaStream};
use ferroshmem_observability::Traffic;
use ferroshmem_runtime::{Error, Result};

use crate::driver::{self, Event, MemOp, Pinned, Word};

const PENDING: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// How often the CQ thread asks the copy stream for errors while fence futures are parked.
const FENCE_CHECK: Duration = Duration::from_micros(100);

/// The state one parked future shares with the CQ thread.
#[derive(Debug, Default)]
struct OpState {
    status: AtomicU8,
    error: Mutex<Option<Error>>,
    waker: Mutex<Option<Waker>>,
    /// Set when the future is dropped unresolved: the CQ thread stops watching for it.
    abandoned: AtomicBool,
}

impl OpState {
    fn finish(&self, outcome: Result<()>) {
        let status = match outcome {
            Ok(()) => DONE,
            Err(e) => {
                *self.error.lock().expect("op error lock") = Some(e);
                FAILED
            }
        };
        self.status.store(status, Ordering::Release);
        if let Some(w) = self.waker.lock().expect("op waker lock").take() {
            w.wake();
        }
    }

    fn outcome(&self) -> Option<Result<()>> {
        match self.status.load(Ordering::Acquire) {
            PENDING => None,
            DONE => Some(Ok(())),
            _ => Some(Err(self
                .error
                .lock()
                .expect("op error lock")
                .clone()
                .unwrap_or_else(|| Error::cuda("a GPU operation failed")))),
        }
    }
}

/// The copy stream's completion counter (see the module documentation).
struct Fence {
    word: Pinned,
    stream: Arc<CudaStream>,
    /// The last number queued; held while queuing the next, so that the counter only grows.
    issued: Mutex<u64>,
}

impl Fence {
    /// Queues the write of the next number after the copy stream's work so far, and after
    /// `first` when given (one driver call for both); returns the number. The caller has
    /// bound the stream's context.
    fn advance(&self, first: Option<MemOp>) -> Result<u64> {
        let mut issued = self.issued.lock().expect("fence lock");
        let next = *issued + 1;
        let (stream, addr) = (self.stream.cu_stream(), self.word.addr());
        match first {
            None => driver::write_value64(stream, addr, next)?,
            Some(op) => driver::batch_mem_ops(
                stream,
                &[
                    op,
                    MemOp::WriteWord {
                        addr,
                        value: Word::U64(next),
                    },
                ],
            )?,
        }
        *issued = next;
        Ok(next)
    }

    /// Whether the work before number `seq` has completed.
    fn reached(&self, seq: u64) -> bool {
        self.word.load_u64(0) >= seq
    }
}

/// The copy stream's work up to one fence number: what memory borrowed by a transfer waits
/// for before it is used again.
#[derive(Clone)]
pub(crate) struct FenceMark {
    shared: Arc<Shared>,
    seq: u64,
}

impl std::fmt::Debug for FenceMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceMark").field("seq", &self.seq).finish()
    }
}

impl FenceMark {
    /// Whether `self` and `other` count on the same copy stream.
    pub fn same_fence(&self, other: &FenceMark) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The fence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the work before the mark has completed.
    pub fn is_done(&self) -> bool {
        self.shared.fence.reached(self.seq)
    }

    /// Blocks the calling thread until the work before the mark has completed, or until the
    /// copy stream has failed (its work then never runs).
    pub fn wait(&self) {
        let mut checked = Instant::now();
        while !self.is_done() {
            if checked.elapsed() >= FENCE_CHECK {
                if driver::stream_query(self.shared.fence.stream.cu_stream()).is_err() {
                    return;
                }
                checked = Instant::now();
            }
            std::thread::yield_now();
        }
    }
}

/// What the CQ thread watches for one parked future.
enum Watch {
    Event(Event),
    Fence(u64),
}

struct Entry {
    watch: Watch,
    op: Arc<OpState>,
}

/// Entries handed to the CQ thread, and whether it sleeps (both under one lock).
struct Queue {
    entries: Vec<Entry>,
    sleeping: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    submitted: Condvar,
    stop: AtomicBool,
    pool: Mutex<Vec<Event>>,
    fence: Fence,
}

impl Shared {
    /// Hands `entry` to the CQ thread, waking it if it sleeps.
    fn enqueue(&self, entry: Entry) {
        let mut q = self.queue.lock().expect("cq lock");
        q.entries.push(entry);
        let asleep = q.sleeping;
        drop(q);
        if asleep {
            self.submitted.notify_one();
        }
    }
}

/// A PE's completion queue and its polling thread.
pub(crate) struct Cq {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").finish_non_exhaustive()
    }
}

impl Cq {
    /// Starts the CQ thread of PE `pe`, bound to `ctx`, with the fence of `copy_stream`; it
    /// reports its depth to `traffic`.
    pub fn start(
        pe: usize,
        ctx: Arc<CudaContext>,
        spin: Duration,
        copy_stream: Arc<CudaStream>,
        traffic: Traffic,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                entries: Vec::new(),
                sleeping: false,
            }),
            submitted: Condvar::new(),
            stop: AtomicBool::new(false),
            pool: Mutex::new(Vec::new()),
            fence: Fence {
                word: Pinned::new(&ctx, 64)?,
                stream: copy_stream,
                issued: Mutex::new(0),
            },
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fsh-gpu-cq-{pe}"))
            .spawn(move || poll_loop(&s, &ctx, spin, &traffic))
            .map_err(|e| Error::os("starting the GPU completion thread", e))?;
        Ok(Cq {
            shared,
            thread: Some(thread),
        })
    }

    /// Records an event on `stream` after the work queued so far and returns the future that
    /// resolves when that work has completed. The caller has bound the stream's context.
    pub fn submit(&self, stream: CUstream) -> Result<Completion> {
        let pooled = self.shared.pool.lock().expect("event pool").pop();
        let event = match pooled {
            Some(e) => e,
            None => Event::new()?,
        };
        event.record(stream)?;
        let op = Arc::new(OpState::default());
        self.shared.enqueue(Entry {
            watch: Watch::Event(event),
            op: op.clone(),
        });
        Ok(Completion {
            shared: self.shared.clone(),
            wait: Wait::Op(op),
            poll_until: None,
        })
    }

    /// Advances the copy stream's fence after the work queued on it so far — after writing
    /// `write_first`'s word at its device address (aligned to the word's size) too, in the
    /// same stream memory batch, when given — and returns the future that resolves when that
    /// work has completed. The caller has bound the context.
    pub fn fence(&self, write_first: Option<(u64, Word)>) -> Result<Completion> {
        let first = write_first.map(|(addr, value)| MemOp::WriteWord { addr, value });
        let seq = self.shared.fence.advance(first)?;
        Ok(Completion {
            shared: self.shared.clone(),
            wait: Wait::Fence { seq, op: None },
            poll_until: None,
        })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Taking the lock orders the store before the thread's next look at `stop`.
        drop(self.shared.queue.lock().expect("cq lock"));
        self.shared.submitted.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The CQ thread: watches the parked futures' events and fences, and publishes how many it
/// watches as the CQ depth of `traffic`.
fn poll_loop(shared: &Shared, ctx: &CudaContext, spin: Duration, traffic: &Traffic) {
    if let Err(e) = driver::bind(ctx) {
        tracing::error!("GPU completion thread cannot bind its context: {e}");
    }
    let mut pending: Vec<Entry> = Vec::new();
    let mut idle_since = Instant::now();
    let mut fence_checked = Instant::now();
    let mut depth = 0;
    loop {
        {
            let mut q = shared.queue.lock().expect("cq lock");
            if pending.is_empty() && q.entries.is_empty() {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                if idle_since.elapsed() >= spin {
                    q.sleeping = true;
                    q = shared
                        .submitted
                        .wait_while(q, |q| {
                            q.entries.is_empty() && !shared.stop.load(Ordering::Acquire)
                        })
                        .expect("cq lock");
                    q.sleeping = false;
                    idle_since = Instant::now();
                }
            }
            pending.append(&mut q.entries);
        }
        // The copy stream's errors stop its fence: ask the stream now and then.
        let mut fence_error = None;
        if fence_checked.elapsed() >= FENCE_CHECK
            && pending.iter().any(|e| matches!(e.watch, Watch::Fence(_)))
        {
            fence_checked = Instant::now();
            fence_error = driver::stream_query(shared.fence.stream.cu_stream()).err();
        }
        let mut finished = 0;
        let mut i = 0;
        while i < pending.len() {
            let abandoned = pending[i].op.abandoned.load(Ordering::Acquire);
            let outcome = match &pending[i].watch {
                _ if abandoned => Some(Ok(())),
                Watch::Event(event) => match event.query() {
                    Ok(false) => None,
                    Ok(true) => Some(Ok(())),
                    Err(e) => Some(Err(e)),
                },
                Watch::Fence(seq) if shared.fence.reached(*seq) => Some(Ok(())),
                Watch::Fence(_) => fence_error.clone().map(Err),
            };
            match outcome {
                None => i += 1,
                Some(outcome) => {
                    let entry = pending.swap_remove(i);
                    if !abandoned {
                        entry.op.finish(outcome);
                    }
                    if let Watch::Event(event) = entry.watch {
                        shared.pool.lock().expect("event pool").push(event);
                    }
                    finished += 1;
                }
            }
        }
        if pending.len() != depth {
            depth = pending.len();
            traffic.set_cq_depth(depth as u64);
        }
        if finished > 0 {
            idle_since = Instant::now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// How long a completion future keeps its task polling (rescheduling itself) before it
/// parks until the CQ thread wakes it: short operations then complete without the cost of
/// waking a parked worker.
const SELF_POLL: Duration = Duration::from_micros(30);

/// What a completion future waits for.
#[derive(Debug)]
enum Wait {
    /// An event the CQ thread polls.
    Op(Arc<OpState>),
    /// Fence number `seq`; `op` once the future has handed it to the CQ thread.
    Fence { seq: u64, op: Option<Arc<OpState>> },
}

/// Resolves when the GPU work before its event or fence number has completed. Dropping it
/// before then leaves the work running and stops watching it.
pub(crate) struct Completion {
    shared: Arc<Shared>,
    wait: Wait,
    poll_until: Option<Instant>,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl Completion {
    /// The fence mark of a completion of the copy stream's work.
    pub fn fence_mark(&self) -> Option<FenceMark> {
        match &self.wait {
            Wait::Fence { seq, .. } => Some(FenceMark {
                shared: self.shared.clone(),
                seq: *seq,
            }),
            Wait::Op(_) => None,
        }
    }

    fn outcome(&self) -> Option<Result<()>> {
        match &self.wait {
            Wait::Op(op) => op.outcome(),
            Wait::Fence { seq, .. } if self.shared.fence.reached(*seq) => Some(Ok(())),
            Wait::Fence { op, .. } => op.as_ref().and_then(|op| op.outcome()),
        }
    }

    /// The state the CQ thread finishes for this future, handing a fence number to the
    /// thread on first use; `waker` (if any) is installed before the thread can see it.
    fn park(&mut self, waker: Option<&Waker>) {
        let Completion { shared, wait, .. } = self;
        let set = |op: &OpState| {
            if let Some(w) = waker {
                *op.waker.lock().expect("op waker lock") = Some(w.clone());
            }
        };
        match wait {
            Wait::Op(op) => set(op),
            Wait::Fence { op: Some(op), .. } => set(op),
            Wait::Fence { seq, op } => {
                let state = Arc::new(OpState::default());
                set(&state);
                shared.enqueue(Entry {
                    watch: Watch::Fence(*seq),
                    op: state.clone(),
                });
                *op = Some(state);
            }
        }
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(done) = self.outcome() {
            return Poll::Ready(done);
        }
        let until = *self
            .poll_until
            .get_or_insert_with(|| Instant::now() + SELF_POLL);
        if Instant::now() < until {
            std::hint::spin_loop();
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.park(Some(cx.waker()));
        match self.outcome() {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }
}

impl Drop for Completion {
    /// Stops the CQ thread watching for an unresolved completion. The work goes on; memory it
    /// borrows is kept by its owner until then (see [`FenceMark`]).
    fn drop(&mut self) {
        let op = match &self.wait {
            Wait::Op(op) | Wait::Fence { op: Some(op), .. } => op,
            Wait::Fence { op: None, .. } => return,
        };
        op.abandoned.store(true, Ordering::Release);
    }
}
