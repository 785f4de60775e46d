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
//! that wants it and no other. Tasks of any runtime may: the wait object is registered with
//! a runtime's reactor the first time one of its tasks drives (a service thread with a
//! runtime of its own, as the NIC agent's, drives as well as the application's tasks).
//!
//! # One driver, and the thread standing aside
//! One task drives at a time; others are woken as before, by what the driver's reads hand
//! on. While a task holds the drive the progress thread does not sleep in the queue's wait
//! (which would wake it too at every arrival): it reads the queue without waiting every
//! [`ASIDE_TICK`] instead, so that peers' operations on this PE are still served if the
//! driver's thread is busy elsewhere, and it takes its place again at the first tick that
//! finds the drive free (or takes it back, see [`Driver`]). A task that takes the drive while
//! the thread sleeps in the queue interrupts it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ferroshmem_observability::Traffic;
use ferroshmem_runtime::route::Drive;
use tokio::io::unix::AsyncFd;

use crate::ffi::{Endpoint, WaitObject};
use crate::room::{Deferred, Room};

/// How long the progress thread waits on the completion queue before it looks at its stop
/// flag again.
pub const PROGRESS_WAIT_MS: i32 = 100;
/// The same while an operation waits for room in the provider's queue: a queue full of
/// operations in flight frees room as they complete, which ends the wait at once, but one
/// refused while its connection is being made frees none.
const ROOM_WAIT_MS: i32 = 1;
/// How often the progress thread reads the queue while a task drives it (every
/// millisecond while operations wait for room).
pub const ASIDE_TICK: Duration = Duration::from_millis(10);
/// How long a holder of the drive that left arrivals unread may stay unpolled before the
/// progress thread takes the drive back.
const TAKE_BACK: Duration = Duration::from_millis(20);
/// How many ticks must find arrivals a holder left unread before its drive is taken back.
const STRIKES: u32 = 3;
/// Reads a driver makes in one poll before it lets other tasks run.
const DRIVE_ROUNDS: usize = 8;
/// How long one poll of a driver spinning after an arrival reads the queue before it lets
/// other tasks run.
const SPIN_SLICE: Duration = Duration::from_micros(4);

/// What the progress thread and driving tasks share: the endpoint and what a read of its
/// queue hands on.
pub struct Core {
    /// The queue's wait object on the reactor of each runtime tasks drove from (`None`
    /// where the provider has none): a service thread with a runtime of its own drives as
    /// well as the application's tasks.
    wait: Mutex<Vec<(tokio::runtime::Id, Option<Watched>)>>,
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
    /// The number of the drive's holder, 0 while it is free.
    driver: AtomicU64,
    /// The number the next holder gets.
    holders: AtomicU64,
    /// How many times holders polled the drive.
    polls: AtomicU64,
    /// Set while the progress thread sleeps in the queue's wait.
    serving: AtomicBool,
    /// How long, in nanoseconds, a driving task keeps reading the queue after the last
    /// arrival before it sleeps until the next (see [`Core::set_spin`]).
    spin_ns: AtomicU64,
}

impl Core {
    /// The shared state of `endpoint`, handing peers' data to `on_data`.
    pub fn new(endpoint: Arc<Endpoint>, on_data: Box<dyn Fn(u64) + Send + Sync>) -> Core {
        Core {
            wait: Mutex::default(),
            endpoint,
            room: Room::default(),
            on_data,
            traffic: OnceLock::new(),
            depth: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            driver: AtomicU64::new(0),
            holders: AtomicU64::new(1),
            polls: AtomicU64::new(0),
            serving: AtomicBool::new(false),
            spin_ns: AtomicU64::new(0),
        }
    }

    /// How long a driving task keeps reading the queue on its own core after the last
    /// arrival before it sleeps until the next: arrivals that follow each other closely (a
    /// peer's stream of atomics, each answered before the next comes) are then read without
    /// a thread wake-up each. Zero (the default): it sleeps at once.
    pub fn set_spin(&self, spin: Duration) {
        let ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
        self.spin_ns.store(ns, Ordering::Relaxed);
    }

    /// Has `deferred` wait for room (see [`crate::room`]).
    pub fn defer(&self, deferred: Deferred) {
        if self.room.defer(deferred) {
            // The progress thread may sleep in a long wait: it is to pass often now.
            self.endpoint.interrupt();
        }
    }

    /// Reads the queue once, waiting up to `timeout_ms` (0: not at all): ends the operations
    /// it reports, hands on peers' data, posts the operations waiting for room and keeps the
    /// CQ depth. Returns how many entries it read.
    fn pass(&self, timeout_ms: i32) -> usize {
        let progressed = self.endpoint.progress(timeout_ms);
        self.room.post_waiting(&self.endpoint);
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
                // The progress thread backs off before its next wait; a driving task (a read
                // that does not wait) goes on, its event loop not held up.
                if timeout_ms > 0 {
                    std::thread::sleep(Duration::from_millis(10));
                }
                0
            }
        }
    }

    /// The drive of the queue for the calling task, if it can take it: on a tokio runtime,
    /// where the provider's queue has a wait object and no other task drives.
    pub fn drive(self: &Arc<Core>) -> Option<Driver> {
        if self.driven() {
            return None;
        }
        let watched = self.watched()?;
        let number = self.holders.fetch_add(1, Ordering::Relaxed);
        self.take(number).then(|| Driver {
            core: self.clone(),
            number,
            watched,
            last_arrival: None,
        })
    }

    /// Takes the free drive for holder `number`; tells the progress thread to stand aside.
    fn take(&self, number: u64) -> bool {
        let taken = self
            .driver
            .compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if taken && self.serving.load(Ordering::SeqCst) {
            // The thread sleeps in the queue's wait: it is to stand aside now.
            self.endpoint.interrupt();
        }
        taken
    }

    /// Whether a task holds the drive.
    fn driven(&self) -> bool {
        self.driver.load(Ordering::SeqCst) != 0
    }

    /// The queue's wait object on the current runtime's reactor, registered there the first
    /// time.
    fn watched(&self) -> Option<Watched> {
        let id = tokio::runtime::Handle::try_current().ok()?.id();
        let mut wait = self.wait.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, watched)) = wait.iter().find(|(on, _)| *on == id) {
            return watched.clone();
        }
        let watched = self.endpoint.watch().map(Arc::new);
        wait.push((id, watched.clone()));
        watched
    }
}

/// A task's hold on the drive of the queue (see the crate documentation); released when
/// dropped. The progress thread takes the drive back from a holder that stays unpolled while
/// the thread keeps finding arrivals it left unread (a future polled once and then kept
/// unpolled, see `stand_aside`); the holder takes it again at its next poll if it is free.
pub struct Driver {
    core: Arc<Core>,
    number: u64,
    /// The queue's wait object on the holder's runtime.
    watched: Watched,
    /// When this holder last read something, while it spins after it (see
    /// [`Core::set_spin`]).
    last_arrival: Option<Instant>,
}

/// A registration of the queue's wait object with one runtime's reactor.
type Watched = Arc<AsyncFd<WaitObject>>;

impl Drive for Driver {
    /// Reads what has arrived, handing it on, and arranges for `cx` to be woken when more
    /// may have.
    fn poll_drive(&mut self, cx: &mut Context<'_>) {
        if !self.holds() {
            // Taken back, and held by another task now: woken by what that one hands on.
            return;
        }
        self.core.polls.fetch_add(1, Ordering::Relaxed);
        if self.spinning() {
            cx.waker().wake_by_ref();
            return;
        }
        let (core, watched) = (self.core.clone(), self.watched.clone());
        let (mut arrived, mut busy, mut registered) = (false, false, false);
        for _ in 0..DRIVE_ROUNDS {
            let mut ready = match watched.poll_read_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                // Pending: `cx` is woken when the wait object fires. An error (the reactor
                // shut down): the progress thread's ticks serve the queue.
                _ => {
                    registered = true;
                    break;
                }
            };
            busy = core.pass(0) > 0;
            arrived |= busy;
            if core.endpoint.try_wait() {
                // Nothing left to read: the next arrival fires the wait object again (the
                // next round's poll registers `cx` for it).
                ready.clear_ready();
            }
        }
        let spinning = arrived && self.start_spin();
        if spinning || (busy && !registered) {
            // Spinning for the next arrival, or still arriving: come back after the other
            // tasks had a turn.
            cx.waker().wake_by_ref();
            return;
        }
        if registered {
            // `cx` is woken when the wait object fires.
            return;
        }
        // The provider says to read on, but reads find nothing: leave it to the next arrival
        // (and the progress thread's ticks) rather than spin, with `cx` registered for it.
        if let Poll::Ready(Ok(mut ready)) = watched.poll_read_ready(cx) {
            ready.clear_ready();
            if watched.poll_read_ready(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
    }

    fn progress_now(&mut self) {
        if self.holds() {
            self.core.polls.fetch_add(1, Ordering::Relaxed);
            self.core.pass(0);
        }
    }
}

impl Driver {
    /// Starts the spin after an arrival (see [`Core::set_spin`]); whether there is one.
    fn start_spin(&mut self) -> bool {
        let spin = self.core.spin_ns.load(Ordering::Relaxed);
        self.last_arrival = (spin > 0).then(Instant::now);
        self.last_arrival.is_some()
    }

    /// Within the spin after the last arrival: reads the queue for one slice (a read that
    /// finds something starts the spin again) and says so. Past it, ends it.
    fn spinning(&mut self) -> bool {
        let Some(last) = self.last_arrival else {
            return false;
        };
        let spin = Duration::from_nanos(self.core.spin_ns.load(Ordering::Relaxed));
        let now = Instant::now();
        if now >= last + spin {
            self.last_arrival = None;
            return false;
        }
        let slice_end = now + SPIN_SLICE;
        while Instant::now() < slice_end {
            if self.core.pass(0) > 0 {
                self.last_arrival = Some(Instant::now());
                return true;
            }
            std::hint::spin_loop();
        }
        // Let another thread (perhaps a PE this one's peers wait for) have the CPU.
        std::thread::yield_now();
        true
    }

    /// Whether this holder has the drive, taking it again if it was taken back and is free.
    fn holds(&self) -> bool {
        let core = &self.core;
        core.driver.load(Ordering::SeqCst) == self.number || core.take(self.number)
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ =
            self.core
                .driver
                .compare_exchange(self.number, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The progress thread: reads the queue until `stop` is set, sleeping in its wait while no
/// task drives it and reading it every [`ASIDE_TICK`] while one does.
pub fn progress_loop(core: &Core) {
    // A holder that left arrivals unread, and how often holders had polled then.
    let mut suspect = None;
    while !core.stop.load(Ordering::Acquire) {
        let holder = core.driver.load(Ordering::SeqCst);
        if holder != 0 {
            std::thread::sleep(if core.room.count() > 0 {
                Duration::from_millis(ROOM_WAIT_MS as u64)
            } else {
                ASIDE_TICK
            });
            suspect = stand_aside(core, holder, suspect);
            continue;
        }
        core.serving.store(true, Ordering::SeqCst);
        // A task that took the drive before the store above did not see it: look again.
        if !core.driven() {
            let wait = if core.room.count() > 0 {
                ROOM_WAIT_MS
            } else {
                PROGRESS_WAIT_MS
            };
            core.pass(wait);
        }
        core.serving.store(false, Ordering::SeqCst);
    }
}

/// One tick of the progress thread standing aside for `holder`: reads the queue, and takes
/// the drive back from a holder that left arrivals for it to read at [`STRIKES`] ticks over
/// at least [`TAKE_BACK`] without being polled in between. Returns the suspect after this
/// tick.
///
/// One arrival read here proves nothing: the thread may read what came a moment before the
/// holder would have, and the holder's event loop then reports nothing to it.
fn stand_aside(core: &Core, holder: u64, suspect: Option<Suspect>) -> Option<Suspect> {
    let polls = core.polls.load(Ordering::Relaxed);
    let read = core.pass(0);
    match suspect {
        Some(s) if s.holder == holder && s.polls == polls => {
            let strikes = s.strikes + u32::from(read > 0);
            if strikes >= STRIKES && s.since.elapsed() >= TAKE_BACK {
                // Take the drive back (a holder that is polled takes it again).
                let _ = core
                    .driver
                    .compare_exchange(holder, 0, Ordering::SeqCst, Ordering::SeqCst);
                return None;
            }
            Some(Suspect { strikes, ..s })
        }
        // Arrivals read here were the holder's to read: it becomes a suspect until polled.
        _ => (read > 0).then(|| Suspect {
            holder,
            polls,
            since: Instant::now(),
            strikes: 1,
        }),
    }
}

/// A holder of the drive that left arrivals for the progress thread to read.
#[derive(Debug, Clone, Copy)]
struct Suspect {
    holder: u64,
    /// How often holders had polled the drive then.
    polls: u64,
    since: Instant,
    /// The ticks that found arrivals since.
    strikes: u32,
}
