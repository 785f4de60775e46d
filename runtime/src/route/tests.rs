//! [`Remotes::driven`] against a transport whose completion queue is read only by whoever
//! drives it: within its spin an awaited completion is read by its own task (no wake-up by
//! the reactor needed); without one the task registers with the reactor and sleeps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::*;

/// The transport's queue: the operation completes after `reads_needed` reads of it.
#[derive(Debug, Default)]
struct Queue {
    reads_needed: AtomicUsize,
    /// Reads by the task itself ([`Drive::progress_now`]).
    own_reads: AtomicUsize,
    /// Registrations with the reactor ([`Drive::poll_drive`]), which reads nothing here.
    registrations: AtomicUsize,
    /// The completion's waker, once it waits.
    waker: Mutex<Option<Waker>>,
}

impl Queue {
    fn done(&self) -> bool {
        self.reads_needed.load(Ordering::SeqCst) == 0
    }
}

#[derive(Debug)]
struct Transport(Arc<Queue>);

struct Driver(Arc<Queue>);

impl Drive for Driver {
    fn poll_drive(&mut self, _cx: &mut Context<'_>) {
        self.0.registrations.fetch_add(1, Ordering::SeqCst);
    }

    fn progress_now(&mut self) {
        let q = &self.0;
        q.own_reads.fetch_add(1, Ordering::SeqCst);
        let _ = q
            .reads_needed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if q.done() {
            if let Some(w) = q.waker.lock().unwrap().take() {
                w.wake();
            }
        }
    }
}

impl Remote for Transport {
    fn start(&self, _pe: usize, _at: usize, _op: RemoteOp) -> Completion {
        let q = self.0.clone();
        Box::pin(std::future::poll_fn(move |cx| {
            if q.done() {
                return Poll::Ready(Ok(Vec::new()));
            }
            *q.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }))
    }

    fn drive(&self) -> Option<Box<dyn Drive>> {
        Some(Box::new(Driver(self.0.clone())))
    }
}

/// Polls `completion` (driven with `spin`) up to `polls` times with a no-op waker; whether it
/// ended.
fn poll_driven(q: &Arc<Queue>, spin: Duration, polls: usize) -> bool {
    let remotes = Remotes::new(Arc::new(Transport(q.clone())), Traffic::disabled(), spin);
    let mut completion =
        remotes.driven(remotes.start_in(remotes.default_domain(), 1, 0, RemoteOp::Get(8)));
    let mut cx = Context::from_waker(Waker::noop());
    (0..polls).any(|_| completion.as_mut().poll(&mut cx).is_ready())
}

#[test]
fn within_its_spin_an_awaited_completion_is_read_by_its_own_task() {
    let q = Arc::new(Queue::default());
    q.reads_needed.store(3, Ordering::SeqCst);
    assert!(poll_driven(&q, Duration::from_secs(5), 10), "it ended");
    assert!(q.own_reads.load(Ordering::SeqCst) >= 3);
    assert_eq!(
        q.registrations.load(Ordering::SeqCst),
        0,
        "no registration with the reactor was needed"
    );
}

#[test]
fn without_a_spin_the_task_leaves_the_queue_to_the_reactor() {
    let q = Arc::new(Queue::default());
    q.reads_needed.store(3, Ordering::SeqCst);
    assert!(!poll_driven(&q, Duration::ZERO, 10), "nothing read it");
    assert_eq!(q.own_reads.load(Ordering::SeqCst), 0);
    assert!(q.registrations.load(Ordering::SeqCst) > 0);
}
