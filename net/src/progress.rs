//! Who reads an endpoint's completion queue: its progress thread, or a task that drives it
//! while it waits.
//!
//! # Why tasks drive
//! With manual progress (`tcp;ofi_rxm`), a peer's write reaches this PE's memory when
//! someone reads the completion queue. The progress thread does, sleeping in the queue's wait
//! meanwhile; but a waiter woken by the thread pays a second thread wake-up after the one
//! the network's arrival costs. A task that waits for something only the fabric brings (a
//! wait on a variable peers write, an operation's completion) can instead take the drive
//! ([`Core::drive`]): it watches the queue's wait object from its own event loop (tokio's
//! reactor), and reads the queue itself when it fires, so that the arrival wakes the thread
//! that wants it and no other.
//!
//! # One driver, and the thread standing aside
//! One task drives at a time; others are woken as before, by what the driver's reads hand
//! on. While a task holds the drive the progress thread does not sleep in the queue's wait
//! (which would wake it too at every arrival): it reads the queue without waiting every
//! [`ASIDE_TICK`] instead, so that peers' operations on this PE are still served if the
//! driver's thread is busy elsewhere, and it takes its place again at the first tick that
//! finds the drive free. A task that takes the drive while the thread sleeps in the queue
//! interrupts it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use ferroshmem_observability::Traffic;
use ferroshmem_runtime::route::Drive;
use tokio::io::unix::AsyncFd;

use crate::ffi::{Endpoint, WaitObject};

/// How long the progress thread waits on the completion queue before it looks at its stop
/// flag again.
pub const PROGRESS_WAIT_MS: i32 = 100;
/// The same while an operation waits for room in the provider's queue: a queue full of
/// operations in flight frees room as they complete, which ends the wait at once, but one
/// refused while its connection is being made frees none.
const ROOM_WAIT_MS: i32 = 1;
/// How often the progress thread reads the queue while a task drives it.
pub const ASIDE_TICK: Duration = Duration::from_millis(1);
/// Reads a driver makes in one poll before it lets other tasks run.
const DRIVE_ROUNDS: usize = 8;

/// Room in the provider's queue: operations it refused (queue full, or connection not yet
/// made) wait here for the next read of the queue instead of retrying on a busy core.
#[derive(Debug, Default)]
pub struct Room {
    /// Notified after every read of the queue.
    pub freed: tokio::sync::Notify,
    /// Operations waiting for room (the progress thread then waits briefly).
    pub waiting: AtomicUsize,
}

/// What the progress thread and driving tasks share: the endpoint and what a read of its
/// queue hands on.
pub struct Core {
    /// The queue's wait object on the reactor of the first runtime a task drove from.
    wait: OnceLock<Option<(tokio::runtime::Id, AsyncFd<WaitObject>)>>,
    /// The endpoint whose queue is read.
    pub endpoint: Arc<Endpoint>,
    /// Room in the provider's queue.
    pub room: Room,
    /// Called with the data of every peer's write that carries some.
    on_data: Box<dyn Fn(u64) + Send + Sync>,
    /// The PE's fabric traffic block, once given.
    pub traffic: OnceLock<Traffic>,
    /// The CQ depth last stored.
    depth: AtomicUsize,
    /// Set when the endpoint closes: the progress thread ends.
    pub stop: AtomicBool,
    /// Set while a task holds the drive.
    driven: AtomicBool,
    /// Set while the progress thread sleeps in the queue's wait.
    serving: AtomicBool,
}

impl Core {
    /// The shared state of `endpoint`, handing peers' data to `on_data`.
    pub fn new(endpoint: Arc<Endpoint>, on_data: Box<dyn Fn(u64) + Send + Sync>) -> Core {
        Core {
            wait: OnceLock::new(),
            endpoint,
            room: Room::default(),
            on_data,
            traffic: OnceLock::new(),
            depth: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            driven: AtomicBool::new(false),
            serving: AtomicBool::new(false),
        }
    }

    /// Reads the queue once, waiting up to `timeout_ms` (0: not at all): ends the operations
    /// it reports, hands on peers' data, tells operations waiting for room to try again and
    /// keeps the CQ depth. Returns how many entries it read.
    fn pass(&self, timeout_ms: i32) -> usize {
        let progressed = self.endpoint.progress(timeout_ms);
        self.room.freed.notify_waiters();
        match progressed {
            Ok(found) => {
                let read = found.ended + found.remote.len();
                let changed = self.depth.swap(read, Ordering::Relaxed) != read;
                if let (true, Some(traffic)) = (changed, self.traffic.get()) {
                    traffic.set_cq_depth(read as u64);
                }
                found.remote.into_iter().for_each(&self.on_data);
                read
            }
            Err(e) => {
                tracing::warn!("fabric progress: {e}");
                std::thread::sleep(Duration::from_millis(10));
                0
            }
        }
    }

    /// The drive of the queue for the calling task, if it can take it: on a tokio runtime
    /// (the one the first driver ran on), where the provider's queue has a wait object and
    /// no other task drives.
    pub fn drive(self: &Arc<Core>) -> Option<Driver> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (id, _) = self.wait.get_or_init(|| self.watch()).as_ref()?;
        if *id != runtime.id() || self.driven.swap(true, Ordering::SeqCst) {
            return None;
        }
        if self.serving.load(Ordering::SeqCst) {
            // The thread sleeps in the queue's wait: it is to stand aside now.
            self.endpoint.interrupt();
        }
        Some(Driver(self.clone()))
    }

    /// Registers the queue's wait object with the current runtime's reactor.
    fn watch(&self) -> Option<(tokio::runtime::Id, AsyncFd<WaitObject>)> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some((runtime.id(), self.endpoint.watch()?))
    }
}

/// A task's hold on the drive of the queue (see the module documentation); released when
/// dropped.
pub struct Driver(Arc<Core>);

impl Drive for Driver {
    /// Reads what has arrived, handing it on, and arranges for `cx` to be woken when more
    /// may have.
    fn poll_drive(&mut self, cx: &mut Context<'_>) {
        let core = &self.0;
        let Some((_, watched)) = core.wait.get().and_then(Option::as_ref) else {
            return;
        };
        for round in 1..=DRIVE_ROUNDS {
            let mut ready = match watched.poll_read_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                // Pending: `cx` is woken when the wait object fires. An error (the reactor
                // shut down): the progress thread's ticks serve the queue.
                _ => return,
            };
            let read = core.pass(0);
            if core.endpoint.try_wait() {
                // Nothing left to read: the next arrival fires the wait object again.
                ready.clear_ready();
            } else if round == DRIVE_ROUNDS {
                if read > 0 {
                    // Still arriving: come back after the other tasks had a turn.
                    cx.waker().wake_by_ref();
                } else {
                    // The provider says to read on, but reads find nothing: leave it to the
                    // next arrival and the progress thread's ticks rather than spin.
                    ready.clear_ready();
                }
            }
        }
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.driven.store(false, Ordering::SeqCst);
    }
}

/// The progress thread: reads the queue until `stop` is set, sleeping in its wait while no
/// task drives it and reading it every [`ASIDE_TICK`] while one does.
pub fn progress_loop(core: &Core) {
    while !core.stop.load(Ordering::Acquire) {
        if core.driven.load(Ordering::SeqCst) {
            std::thread::sleep(ASIDE_TICK);
            core.pass(0);
            continue;
        }
        core.serving.store(true, Ordering::SeqCst);
        // A task that took the drive before the store above did not see it: look again.
        if !core.driven.load(Ordering::SeqCst) {
            let wait = if core.room.waiting.load(Ordering::Acquire) > 0 {
                ROOM_WAIT_MS
            } else {
                PROGRESS_WAIT_MS
            };
            core.pass(wait);
        }
        core.serving.store(false, Ordering::SeqCst);
    }
}
