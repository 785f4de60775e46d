//! Waking a PE's sleeping waiters when another PE (in any process) writes its segment.
//!
//! Each PE runs one doorbell thread that sleeps on the futex word in its segment header.
//! Writers bump that word and wake the futex only when a waiter sleeps on the bytes they wrote
//! (see [`Segment::wake_watchers`]), so the data path pays one load when nobody sleeps. On
//! each wake-up the thread notifies the async waiters of the PE, which re-check their
//! conditions. An idle waiter therefore holds no core. While anyone sleeps, and for a second
//! after, the thread also wakes every [`TICK`], so that sleeping waits notice timeouts and job
//! failures (and a waiter that goes to sleep while it ticks need not wake it).
//!
//! Writes this PE's own process learns of without the writer's help, the data of fabric
//! peers' writes, notify the waiters directly instead ([`Segment::wake_here`]): the doorbell
//! thread's wake-up would be one more thread hop on a remote write's way to its waiter.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::segment::Segment;

/// How often the doorbell wakes sleeping waiters even without a write.
pub const TICK: Duration = Duration::from_millis(10);

/// The doorbell of one local PE.
#[derive(Debug)]
pub struct Doorbell {
    segment: Arc<Segment>,
    notify: Arc<Notify>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Doorbell {
    /// Starts the doorbell thread of the PE that owns `segment`.
    pub fn start(pe: usize, segment: Arc<Segment>) -> Result<Self> {
        let notify = Arc::new(Notify::new());
        segment.set_bell(notify.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name(format!("fsh-doorbell-{pe}"))
            .spawn({
                let segment = segment.clone();
                let notify = notify.clone();
                let stop = stop.clone();
                move || ring_loop(&segment, &notify, &stop)
            })
            .map_err(|e| Error::os("starting the doorbell thread", e))?;
        Ok(Doorbell {
            segment,
            notify,
            stop,
            thread: Some(thread),
        })
    }

    /// A future that completes at the next ring. Enable it (or poll it once) before checking
    /// the condition it guards, so that no ring is lost in between.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// The segment whose writes ring this doorbell.
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// Wakes every local waiter now (used when the job fails or shuts down).
    pub fn ring_local(&self) {
        self.notify.notify_waiters();
    }
}

/// How long the doorbell thread keeps ticking after it last saw a sleeper, so that waits
/// that sleep one after another (a ping-pong) need not ring it awake each time.
const LINGER: Duration = Duration::from_secs(1);

fn ring_loop(segment: &Segment, notify: &Notify, stop: &AtomicBool) {
    let word = segment.wake_seq();
    let tick = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: TICK.as_nanos() as _,
    };
    let mut last_sleeper = Instant::now();
    loop {
        let seen = word.load(Ordering::Acquire);
        if stop.load(Ordering::Acquire) {
            return;
        }
        notify.notify_waiters();
        let now = Instant::now();
        if segment.has_sleepers() {
            last_sleeper = now;
        }
        let ticking = now.duration_since(last_sleeper) < LINGER || {
            // A sleeper that registers from here on rings; one that registered before this
            // store is seen by the check after it (see `Segment::watch`).
            segment.set_dozing(true);
            segment.has_sleepers()
        };
        if ticking {
            segment.set_dozing(false);
        }
        let timeout = ticking.then_some(&tick);
        // Returns at once if the word moved since `seen` (EAGAIN), so no ring is lost.
        let _ =
            rustix::thread::futex::wait(word, rustix::thread::futex::Flags::empty(), seen, timeout);
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.segment.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_with_a_sleeper_rings_the_waiter() {
        let seg = Arc::new(Segment::create(0, 4096).unwrap());
        let bell = Doorbell::start(0, seg.clone()).unwrap();
        let notified = bell.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let watch = seg.watch(64, 72);
        seg.wake_watchers(64, 72);
        tokio::time::timeout(Duration::from_secs(5), notified)
            .await
            .expect("the doorbell rang");
        seg.unwatch(watch);
    }

    #[test]
    fn a_write_learned_here_notifies_the_waiters_before_it_returns() {
        let seg = Arc::new(Segment::create(0, 4096).unwrap());
        let bell = Doorbell::start(0, seg.clone()).unwrap();
        let notified = bell.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let watch = seg.watch(64, 72);
        let rings = seg.wake_seq().load(Ordering::SeqCst);
        seg.wake_here(64, 72);
        // Not through the doorbell thread: notified already, and counted as a ring.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(notified.as_mut().poll(&mut cx).is_ready());
        assert!(seg.wake_seq().load(Ordering::SeqCst) > rings);
        seg.unwatch(watch);
    }

    #[test]
    fn a_sleeper_rings_the_doorbell_only_when_it_dozes() {
        let seg = Arc::new(Segment::create(0, 4096).unwrap());
        let _bell = Doorbell::start(0, seg.clone()).unwrap();
        let first = seg.watch(64, 72);
        seg.unwatch(first);
        // The thread saw the sleeper (it rang) and ticks for a while after.
        std::thread::sleep(TICK * 3);
        let rings = seg.wake_seq().load(Ordering::SeqCst);
        let again = seg.watch(64, 72);
        seg.unwatch(again);
        assert_eq!(
            seg.wake_seq().load(Ordering::SeqCst),
            rings,
            "rang while ticking"
        );
        // Past the linger it dozes without a tick: the next sleeper must ring it.
        std::thread::sleep(LINGER + TICK * 5);
        let rings = seg.wake_seq().load(Ordering::SeqCst);
        let late = seg.watch(64, 72);
        assert!(
            seg.wake_seq().load(Ordering::SeqCst) > rings,
            "a dozing doorbell not rung"
        );
        seg.unwatch(late);
    }
}
