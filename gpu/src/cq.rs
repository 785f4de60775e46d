//! The completion queue of one GPU PE: host-initiated operations are queued on a CUDA
//! stream, followed by an event; the CQ thread polls the events (`cuEventQuery`, which never
//! blocks) and wakes the futures waiting on them. No tokio worker ever blocks in the driver.
//!
//! A future keeps its task polling (rescheduling itself) for a few microseconds before it
//! parks, so that short operations complete without waking a parked worker. The thread spins while operations are
//! outstanding and for `spin` after the last one completes, then sleeps on a condition
//! variable until the next submission.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUstream;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

use crate::driver::{self, Event};

const PENDING: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// The state one completion future shares with the CQ thread.
#[derive(Debug, Default)]
struct OpState {
    status: AtomicU8,
    error: Mutex<Option<Error>>,
    waker: Mutex<Option<Waker>>,
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
                .unwrap_or_else(|| Error::Cuda("a GPU operation failed".into())))),
        }
    }
}

struct Entry {
    event: Event,
    op: Arc<OpState>,
}

struct Shared {
    pending: Mutex<Vec<Entry>>,
    submitted: Condvar,
    stop: AtomicBool,
    pool: Mutex<Vec<Event>>,
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
    /// Starts the CQ thread of PE `pe`, bound to `ctx`.
    pub fn start(pe: usize, ctx: Arc<CudaContext>, spin: Duration) -> Result<Self> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Vec::new()),
            submitted: Condvar::new(),
            stop: AtomicBool::new(false),
            pool: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fsh-gpu-cq-{pe}"))
            .spawn(move || poll_loop(&s, &ctx, spin))
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
        self.shared.pending.lock().expect("cq lock").push(Entry {
            event,
            op: op.clone(),
        });
        self.shared.submitted.notify_one();
        Ok(Completion {
            op,
            poll_until: None,
        })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.submitted.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn poll_loop(shared: &Shared, ctx: &CudaContext, spin: Duration) {
    if let Err(e) = driver::bind(ctx) {
        tracing::error!("GPU completion thread cannot bind its context: {e}");
    }
    let mut idle_since = Instant::now();
    loop {
        let mut pending = shared.pending.lock().expect("cq lock");
        if pending.is_empty() {
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            if idle_since.elapsed() >= spin {
                pending = shared
                    .submitted
                    .wait_while(pending, |p| {
                        p.is_empty() && !shared.stop.load(Ordering::Acquire)
                    })
                    .expect("cq lock");
                idle_since = Instant::now();
            } else {
                drop(pending);
                std::hint::spin_loop();
                continue;
            }
        }
        let mut finished = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            match pending[i].event.query() {
                Ok(false) => i += 1,
                Ok(true) => finished.push((pending.swap_remove(i), Ok(()))),
                Err(e) => finished.push((pending.swap_remove(i), Err(e))),
            }
        }
        drop(pending);
        if !finished.is_empty() {
            idle_since = Instant::now();
            let mut pool = shared.pool.lock().expect("event pool");
            for (entry, outcome) in finished {
                entry.op.finish(outcome);
                pool.push(entry.event);
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

/// How long a completion future keeps its task polling (rescheduling itself) before it
/// parks until the CQ thread wakes it: short operations then complete without the cost of
/// waking a parked worker.
const SELF_POLL: Duration = Duration::from_micros(30);

/// Resolves when the GPU work before its event has completed. Dropping it before then waits
/// (blocking) for the work, so that memory borrowed by the operation outlives the transfer.
#[derive(Debug)]
pub(crate) struct Completion {
    op: Arc<OpState>,
    poll_until: Option<Instant>,
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(done) = self.op.outcome() {
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
        *self.op.waker.lock().expect("op waker lock") = Some(cx.waker().clone());
        match self.op.outcome() {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        while self.op.status.load(Ordering::Acquire) == PENDING {
            std::thread::yield_now();
        }
    }
}
