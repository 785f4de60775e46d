//! [`Lane`]: the order of one PE's fabric operations to one peer.
//!
//! libfabric keeps RMA operations in order among themselves and atomics among themselves
//! (the endpoint asks for that), but nothing orders an atomic after an RMA write or the
//! reverse: measured on `tcp;ofi_rxm`, a signal's atomic overtakes the 4 KiB writes posted
//! before it. A lane restores program order across the two classes: an operation of one
//! class is posted only once every operation of the other class posted before it has
//! completed at the target (the endpoint completes operations once delivered), and the
//! operations behind a held one wait their turn, so the lane stays first in, first out. An
//! operation the provider could not take at once (its queue full, or, for the first ones,
//! its connection to the peer still being made) holds the later ones the same way until it
//! could, so that retries do not reorder them either.
//!
//! Held operations wait in the lane's queue and are posted, in order, by one task per lane
//! that runs while the queue is not empty, not when their completions are polled: an `_nbi`
//! operation's completion is polled only at `quiet`, and a signal must not wait that long.
//! A caller outside any tokio runtime (the C library's) has that task run on the runtime
//! the lane was made on; only where there is none either do operations go out at once,
//! ordered only within their class. Operations of the same class as those in flight go out
//! at once, which keeps streams of puts (or of atomics) at the provider's speed; a flood
//! that outruns the provider costs one queue entry per operation, not a task each.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ferroshmem_runtime::route::Completion;
use ferroshmem_runtime::Error;
use tokio::sync::{oneshot, Notify};

use crate::Hooks;

/// The two classes libfabric orders separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Writes and reads.
    Rma,
    /// Atomics.
    Atomic,
}

impl Class {
    fn index(self) -> usize {
        match self {
            Class::Rma => 0,
            Class::Atomic => 1,
        }
    }

    fn other(self) -> Class {
        match self {
            Class::Rma => Class::Atomic,
            Class::Atomic => Class::Rma,
        }
    }
}

/// Operations of each class posted and not yet ended.
#[derive(Debug, Default)]
struct InFlight {
    count: [AtomicUsize; 2],
    ended: Notify,
}

impl InFlight {
    fn begin(&self, class: Class) {
        self.count[class.index()].fetch_add(1, Ordering::AcqRel);
    }

    fn end(&self, class: Class) {
        self.count[class.index()].fetch_sub(1, Ordering::AcqRel);
        self.ended.notify_waiters();
    }

    fn busy(&self, class: Class) -> bool {
        self.count[class.index()].load(Ordering::Acquire) != 0
    }

    /// Resolves once no operation of `class` is in flight. None can begin meanwhile: the
    /// lane holds every later operation behind the waiter.
    async fn drained(&self, class: Class) {
        loop {
            let ended = self.ended.notified();
            if !self.busy(class) {
                return;
            }
            ended.await;
        }
    }
}

/// Posts an operation, given the callbacks for when the provider took it and when it ended.
pub type Post = Box<dyn FnOnce(Hooks) -> Completion + Send>;

/// An operation waiting in a lane for its turn, and where its completion goes once posted.
struct Held {
    class: Class,
    post: Post,
    completion: oneshot::Sender<Completion>,
}

/// The operations a lane holds, in order, and whether a task is posting them.
#[derive(Default)]
struct Queue {
    held: VecDeque<Held>,
    /// Set while a task posts the held operations: every later operation joins the queue.
    draining: bool,
}

/// The order of one PE's operations to one peer; see the module documentation.
#[derive(Default)]
pub struct Lane {
    /// The runtime that runs the posting task for callers outside any runtime.
    runtime: Option<tokio::runtime::Handle>,
    in_flight: Arc<InFlight>,
    queue: Arc<Mutex<Queue>>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Lane {
    /// A lane whose posting task runs, for callers outside any runtime, on `runtime`.
    pub fn new(runtime: Option<tokio::runtime::Handle>) -> Lane {
        Lane {
            runtime,
            ..Lane::default()
        }
    }

    /// Posts an operation of `class` through `post`, now or once the lane lets it go.
    pub fn start(&self, class: Class, post: Post) -> Completion {
        let mut queue = lock(&self.queue);
        let current = tokio::runtime::Handle::try_current().ok();
        let Some(runtime) = current.or_else(|| self.runtime.clone()) else {
            // Nothing could post later: it goes out now.
            return post_now(&self.in_flight, class, post, oneshot::channel().0);
        };
        if queue.draining || self.in_flight.busy(class.other()) {
            let (completion, handed) = oneshot::channel();
            queue.held.push_back(Held {
                class,
                post,
                completion,
            });
            if !queue.draining {
                queue.draining = true;
                runtime.spawn(drain(self.queue.clone(), self.in_flight.clone(), None));
            }
            return Box::pin(async move {
                match handed.await {
                    Ok(completion) => completion.await,
                    // The task posting it ended with the runtime.
                    Err(_) => Err(Error::Shutdown),
                }
            });
        }
        // Posted under the lock, so that no later operation overtakes it; one the provider
        // could not take yet holds the later ones until it could.
        let (taken, mut was_taken) = oneshot::channel();
        let completion = post_now(&self.in_flight, class, post, taken);
        if matches!(
            was_taken.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ) {
            queue.draining = true;
            runtime.spawn(drain(
                self.queue.clone(),
                self.in_flight.clone(),
                Some(was_taken),
            ));
        }
        completion
    }
}

/// The lane's queue, locked (a panic elsewhere while it was held leaves it usable: every
/// change to it is one push, pop or flag).
fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Posts a lane's held operations in order, each once the provider took the one before it
/// (`ahead`, if that one is not yet taken) and the other class has drained; ends, letting
/// later operations go out at once again, when none is left.
async fn drain(
    queue: Arc<Mutex<Queue>>,
    in_flight: Arc<InFlight>,
    mut ahead: Option<oneshot::Receiver<()>>,
) {
    loop {
        if let Some(taken) = ahead.take() {
            // An error means the one ahead was dropped unposted: its turn is over.
            let _ = taken.await;
        }
        let next = {
            let mut queue = lock(&queue);
            match queue.held.pop_front() {
                Some(next) => next,
                None => {
                    queue.draining = false;
                    return;
                }
            }
        };
        in_flight.drained(next.class.other()).await;
        let (taken, was_taken) = oneshot::channel();
        let completion = post_now(&in_flight, next.class, next.post, taken);
        // Whoever started it may have stopped waiting: it went out all the same.
        let _ = next.completion.send(completion);
        ahead = Some(was_taken);
    }
}

/// Posts an operation of `class`, counted in flight until it ends; `taken` learns when the
/// provider took it (or refused it for good).
fn post_now(
    in_flight: &Arc<InFlight>,
    class: Class,
    post: Post,
    taken: oneshot::Sender<()>,
) -> Completion {
    in_flight.begin(class);
    let ended = in_flight.clone();
    post(Hooks {
        posted: Some(Box::new(move || {
            let _ = taken.send(());
        })),
        ended: Some(Box::new(move |_| ended.end(class))),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The names of the operations posted so far, in order, and the hooks each was given.
    #[derive(Clone, Default)]
    struct Provider {
        posted: Arc<Mutex<Vec<&'static str>>>,
        hooks: Arc<Mutex<Vec<(&'static str, Hooks)>>>,
    }

    impl Provider {
        /// An operation named `name` that the provider takes at once when `takes`, else only
        /// once [`Provider::take`] says so; it ends when [`Provider::end`] says so.
        fn op(&self, name: &'static str, takes: bool) -> Post {
            let provider = self.clone();
            Box::new(move |mut hooks: Hooks| {
                provider.posted.lock().unwrap().push(name);
                if let Some(taken) = hooks.posted.take_if(|_| takes) {
                    taken();
                }
                provider.hooks.lock().unwrap().push((name, hooks));
                Box::pin(std::future::ready(Ok(Vec::new())))
            })
        }

        /// The hooks of the operation named `name`.
        fn hooks_of<R>(&self, name: &str, f: impl FnOnce(&mut Hooks) -> R) -> R {
            let mut hooks = self.hooks.lock().unwrap();
            let (_, h) = hooks.iter_mut().find(|(n, _)| *n == name).expect("posted");
            f(h)
        }

        fn take(&self, name: &str) {
            self.hooks_of(name, |h| h.posted.take())
                .expect("called once")();
        }

        fn end(&self, name: &str) {
            let ended = self.hooks_of(name, |h| h.ended.take());
            ended.expect("called once")(crate::Ended::Completed);
        }

        /// Waits (a while at most) until the posted operations are `expected`, and a moment
        /// more to see that no other follows.
        async fn posted_are(&self, expected: &[&str]) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while self.posted.lock().unwrap().len() < expected.len()
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(*self.posted.lock().unwrap(), expected);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lane_posts_in_order_and_holds_across_classes_and_behind_untaken_operations() {
        let lane = Lane::default();
        let provider = Provider::default();
        let start = |class, name, takes| drop(lane.start(class, provider.op(name, takes)));

        start(Class::Rma, "w1", true);
        provider.posted_are(&["w1"]).await;
        // An atomic waits for the writes in flight; a write behind it waits its turn.
        start(Class::Atomic, "a1", true);
        start(Class::Rma, "w2", true);
        provider.posted_are(&["w1"]).await;
        provider.end("w1");
        provider.posted_are(&["w1", "a1"]).await;
        provider.end("a1");
        provider.posted_are(&["w1", "a1", "w2"]).await;
        // The queue is empty again: a write of the class in flight goes out at once.
        start(Class::Rma, "w3", true);
        provider.posted_are(&["w1", "a1", "w2", "w3"]).await;
        // One the provider could not take yet holds the later ones, of any class.
        start(Class::Rma, "w4", false);
        start(Class::Rma, "w5", true);
        provider.posted_are(&["w1", "a1", "w2", "w3", "w4"]).await;
        provider.take("w4");
        provider
            .posted_are(&["w1", "a1", "w2", "w3", "w4", "w5"])
            .await;
        for name in ["w2", "w3", "w4", "w5"] {
            provider.end(name);
        }
        start(Class::Atomic, "a2", true);
        provider
            .posted_are(&["w1", "a1", "w2", "w3", "w4", "w5", "a2"])
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_outside_any_runtime_is_ordered_on_the_lanes_runtime() {
        let lane = Arc::new(Lane::new(Some(tokio::runtime::Handle::current())));
        let provider = Provider::default();
        let started = {
            let (lane, provider) = (lane.clone(), provider.clone());
            std::thread::spawn(move || {
                drop(lane.start(Class::Rma, provider.op("w1", true)));
                drop(lane.start(Class::Atomic, provider.op("a1", true)));
            })
        };
        started.join().expect("the starting thread");
        // The atomic waits for the write, as it would for a caller on a runtime.
        provider.posted_are(&["w1"]).await;
        provider.end("w1");
        provider.posted_are(&["w1", "a1"]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_operations_completion_is_its_own() {
        let lane = Lane::default();
        let provider = Provider::default();
        drop(lane.start(Class::Rma, provider.op("w1", true)));
        let held = lane.start(
            Class::Atomic,
            Box::new(|_hooks| Box::pin(std::future::ready(Ok(vec![7])))),
        );
        provider.end("w1");
        let got = tokio::time::timeout(Duration::from_secs(5), held).await;
        assert_eq!(got.expect("in time").expect("completed"), vec![7]);
    }
}
