//! [`Lane`]: the order of one PE's fabric operations to one peer, and the confirmation of
//! its writes.
//!
//! libfabric keeps RMA operations in order among themselves (a read sees the writes posted
//! before it) and atomics among themselves (the endpoint asks for that), but nothing orders
//! an atomic after an RMA write or the reverse: measured on `tcp;ofi_rxm`, a signal's atomic
//! overtakes the 4 KiB writes posted before it. A lane restores program order across the two
//! classes: an operation of one class is posted only once every operation of the other class
//! posted before it has completed, and the operations behind a held one wait their turn, so
//! the lane stays first in, first out. An operation the provider could not take at once
//! (its queue full, or, for the first ones, its connection to the peer still being made)
//! holds the later ones the same way until it could, so that retries do not reorder them
//! either.
//!
//! # Confirming writes
//! A write completes once the provider has taken its bytes (the endpoint asks for inject
//! completion), not once the target has placed them: the target then sends no
//! acknowledgement, which would go out before it reports the write, on the path of every
//! answer to it. Reads and fetching atomics complete once their answer comes. So an atomic
//! after writes waits for a read the lane posts behind them (the confirmation: the target
//! answers it only after placing them), and [`Lane::settle`] posts one for `quiet`, where
//! the application's writes were posted since the last confirmation (not for writes of
//! [`Kind::Flag`]: flags their readers wait on by value).
//!
//! Held operations wait in the lane's queue and are posted, in order, by one task per lane
//! that runs while the queue is not empty, not when their completions are polled: an `_nbi`
//! operation's completion is polled only at `quiet`, and a signal must not wait that long.
//! (Outside a tokio runtime nothing could run that task: operations then go out at once,
//! ordered only within their class.) Operations of the same class as those in flight go out
//! at once, which keeps streams of puts (or of atomics) at the provider's speed; a flood
//! that outruns the provider costs one queue entry per operation, not a task each.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
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

/// What an operation is to its lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A write of the application's data: `quiet` confirms it.
    Write,
    /// A write of a flag its reader waits on by value: `quiet` does not confirm it.
    Flag,
    /// A read.
    Read,
    /// An atomic that fetches (it completes once applied).
    Atomic,
}

impl Kind {
    fn class(self) -> Class {
        match self {
            Kind::Write | Kind::Flag | Kind::Read => Class::Rma,
            Kind::Atomic => Class::Atomic,
        }
    }

    /// The marks a posted operation of this kind leaves until a read confirms it.
    fn marks(self) -> u8 {
        match self {
            Kind::Write => WRITTEN | FOR_QUIET,
            Kind::Flag => WRITTEN,
            Kind::Read | Kind::Atomic => 0,
        }
    }
}

/// A lane's mark: writes posted since the last confirmation.
const WRITTEN: u8 = 1;
/// A lane's mark: writes `quiet` confirms posted since the last confirmation.
const FOR_QUIET: u8 = 2;

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

/// Builds the read that confirms the writes posted before it (see the module documentation).
pub type Confirm = Arc<dyn Fn() -> Post + Send + Sync>;

/// An operation waiting in a lane for its turn, and where its completion goes once posted.
struct Held {
    kind: Kind,
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
pub struct Lane {
    in_flight: Arc<InFlight>,
    queue: Arc<Mutex<Queue>>,
    /// The marks of the writes posted since the last confirmation ([`WRITTEN`],
    /// [`FOR_QUIET`]).
    written: Arc<AtomicU8>,
    confirm: Confirm,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Lane {
    /// A lane whose writes are confirmed by the reads `confirm` builds.
    pub fn new(confirm: Confirm) -> Lane {
        Lane {
            in_flight: Arc::default(),
            queue: Arc::default(),
            written: Arc::default(),
            confirm,
        }
    }

    /// Posts an operation of `kind` through `post`, now or once the lane lets it go.
    pub fn start(&self, kind: Kind, post: Post) -> Completion {
        let mut queue = lock(&self.queue);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Nothing could post later: it goes out now.
            return self.post_now(kind, post, oneshot::channel().0);
        };
        let class = kind.class();
        let unconfirmed = class == Class::Atomic && self.written.load(Ordering::Acquire) != 0;
        if queue.draining || unconfirmed || self.in_flight.busy(class.other()) {
            let (completion, handed) = oneshot::channel();
            queue.held.push_back(Held {
                kind,
                post,
                completion,
            });
            if !queue.draining {
                queue.draining = true;
                runtime.spawn(self.drain(None));
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
        let completion = self.post_now(kind, post, taken);
        if matches!(
            was_taken.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ) {
            queue.draining = true;
            runtime.spawn(self.drain(Some(was_taken)));
        }
        completion
    }

    /// The confirmation of the writes posted so far that `quiet` confirms, or `None` when
    /// none is unconfirmed: a read posted behind them.
    pub fn settle(&self) -> Option<Completion> {
        if self.written.load(Ordering::Acquire) & FOR_QUIET == 0 {
            return None;
        }
        self.written.store(0, Ordering::Release);
        Some(self.start(Kind::Read, (self.confirm)()))
    }

    /// Posts an operation of `kind`, counted in flight until it ends, and marks the lane
    /// with it; `taken` learns when the provider took it (or refused it for good).
    fn post_now(&self, kind: Kind, post: Post, taken: oneshot::Sender<()>) -> Completion {
        self.written.fetch_or(kind.marks(), Ordering::AcqRel);
        post_counted(&self.in_flight, kind.class(), post, taken)
    }

    /// The task that posts the lane's held operations (see [`drain`]).
    fn drain(
        &self,
        ahead: Option<oneshot::Receiver<()>>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let lane = Lane {
            in_flight: self.in_flight.clone(),
            queue: self.queue.clone(),
            written: self.written.clone(),
            confirm: self.confirm.clone(),
        };
        drain(lane, ahead)
    }
}

/// The lane's queue, locked (a panic elsewhere while it was held leaves it usable: every
/// change to it is one push, pop or flag).
fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Posts a lane's held operations in order, each once the provider took the one before it
/// (`ahead`, if that one is not yet taken) and the other class has drained, an atomic once
/// the writes before it are confirmed; ends, letting later operations go out at once again,
/// when none is left.
async fn drain(lane: Lane, mut ahead: Option<oneshot::Receiver<()>>) {
    loop {
        if let Some(taken) = ahead.take() {
            // An error means the one ahead was dropped unposted: its turn is over.
            let _ = taken.await;
        }
        let next = {
            let mut queue = lock(&lane.queue);
            match queue.held.pop_front() {
                Some(next) => next,
                None => {
                    queue.draining = false;
                    return;
                }
            }
        };
        let class = next.kind.class();
        lane.in_flight.drained(class.other()).await;
        if class == Class::Atomic && lane.written.swap(0, Ordering::AcqRel) != 0 {
            // A failed confirmation fails the job's operations to that peer: the atomic
            // after it reports its own outcome.
            let (taken, _) = oneshot::channel();
            let _ = lane.post_now(Kind::Read, (lane.confirm)(), taken).await;
        }
        let (taken, was_taken) = oneshot::channel();
        let completion = lane.post_now(next.kind, next.post, taken);
        // Whoever started it may have stopped waiting: it went out all the same.
        let _ = next.completion.send(completion);
        ahead = Some(was_taken);
    }
}

/// Posts an operation of `class`, counted in flight until it ends; `taken` learns when the
/// provider took it (or refused it for good).
fn post_counted(
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

    /// The names of the operations posted so far, in order, the hooks each was given, and
    /// the completions still to be told of reads.
    #[derive(Clone, Default)]
    struct Provider {
        posted: Arc<Mutex<Vec<&'static str>>>,
        hooks: Arc<Mutex<Vec<(&'static str, Hooks)>>>,
        reads: Arc<Mutex<Vec<oneshot::Sender<()>>>>,
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

        /// A confirming read: taken at once, complete once [`Provider::end`] ends it.
        fn read(&self) -> Post {
            let provider = self.clone();
            Box::new(move |hooks: Hooks| {
                provider.posted.lock().unwrap().push("read");
                let (told, ends) = oneshot::channel();
                provider.reads.lock().unwrap().push(told);
                let mut hooks = hooks;
                if let Some(taken) = hooks.posted.take() {
                    taken();
                }
                provider.hooks.lock().unwrap().push(("read", hooks));
                Box::pin(async move {
                    let _ = ends.await;
                    Ok(Vec::new())
                })
            })
        }

        /// The hooks of the first operation named `name` whose end was not yet told.
        fn hooks_of<R>(&self, name: &str, f: impl FnOnce(&mut Hooks) -> R) -> R {
            let mut hooks = self.hooks.lock().unwrap();
            let (_, h) = hooks
                .iter_mut()
                .find(|(n, h)| *n == name && h.ended.is_some())
                .expect("posted");
            f(h)
        }

        fn take(&self, name: &str) {
            self.hooks_of(name, |h| h.posted.take())
                .expect("called once")();
        }

        fn end(&self, name: &str) {
            let ended = self.hooks_of(name, |h| h.ended.take());
            ended.expect("called once")(crate::Ended::Completed);
            if name == "read" {
                let _ = self.reads.lock().unwrap().remove(0).send(());
            }
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

    /// A lane whose confirming reads are `provider`'s operation "read".
    fn lane_of(provider: &Provider) -> Lane {
        let provider = provider.clone();
        Lane::new(Arc::new(move || provider.read()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lane_posts_in_order_and_holds_across_classes_and_behind_untaken_operations() {
        let provider = Provider::default();
        let lane = lane_of(&provider);
        let start = |kind, name, takes| drop(lane.start(kind, provider.op(name, takes)));

        start(Kind::Write, "w1", true);
        provider.posted_are(&["w1"]).await;
        // An atomic waits for the writes in flight, then for a read that confirms them; a
        // write behind it waits its turn.
        start(Kind::Atomic, "a1", true);
        start(Kind::Write, "w2", true);
        provider.posted_are(&["w1"]).await;
        provider.end("w1");
        provider.posted_are(&["w1", "read"]).await;
        provider.end("read");
        provider.posted_are(&["w1", "read", "a1"]).await;
        provider.end("a1");
        provider.posted_are(&["w1", "read", "a1", "w2"]).await;
        // The queue is empty again: a write of the class in flight goes out at once.
        start(Kind::Write, "w3", true);
        provider.posted_are(&["w1", "read", "a1", "w2", "w3"]).await;
        // One the provider could not take yet holds the later ones, of any class.
        start(Kind::Write, "w4", false);
        start(Kind::Write, "w5", true);
        provider
            .posted_are(&["w1", "read", "a1", "w2", "w3", "w4"])
            .await;
        provider.take("w4");
        provider
            .posted_are(&["w1", "read", "a1", "w2", "w3", "w4", "w5"])
            .await;
        for name in ["w2", "w3", "w4", "w5"] {
            provider.end(name);
        }
        // Writes ended, but not confirmed: the atomic still waits for a read.
        start(Kind::Atomic, "a2", true);
        provider
            .posted_are(&["w1", "read", "a1", "w2", "w3", "w4", "w5", "read"])
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_atomic_after_reads_and_atomics_needs_no_confirmation() {
        let provider = Provider::default();
        let lane = lane_of(&provider);
        drop(lane.start(Kind::Read, provider.op("r1", true)));
        provider.end("r1");
        drop(lane.start(Kind::Atomic, provider.op("a1", true)));
        provider.posted_are(&["r1", "a1"]).await;
        provider.end("a1");
        drop(lane.start(Kind::Atomic, provider.op("a2", true)));
        provider.posted_are(&["r1", "a1", "a2"]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settling_confirms_the_applications_writes_and_not_flags() {
        let provider = Provider::default();
        let lane = lane_of(&provider);
        assert!(lane.settle().is_none(), "nothing written yet");
        drop(lane.start(Kind::Flag, provider.op("f1", true)));
        assert!(lane.settle().is_none(), "quiet does not confirm flags");
        drop(lane.start(Kind::Write, provider.op("w1", true)));
        drop(lane.settle().expect("quiet confirms writes"));
        provider.posted_are(&["f1", "w1", "read"]).await;
        assert!(lane.settle().is_none(), "confirmed already");
        // A flag alone still holds an atomic behind a confirmation.
        provider.end("f1");
        provider.end("w1");
        provider.end("read");
        drop(lane.start(Kind::Flag, provider.op("f2", true)));
        provider.end("f2");
        drop(lane.start(Kind::Atomic, provider.op("a1", true)));
        provider
            .posted_are(&["f1", "w1", "read", "f2", "read"])
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_operations_completion_is_its_own() {
        let provider = Provider::default();
        let lane = lane_of(&provider);
        drop(lane.start(Kind::Write, provider.op("w1", true)));
        let held = lane.start(
            Kind::Atomic,
            Box::new(|_hooks| Box::pin(std::future::ready(Ok(vec![7])))),
        );
        provider.end("w1");
        provider.posted_are(&["w1", "read"]).await;
        provider.end("read");
        let got = tokio::time::timeout(Duration::from_secs(5), held).await;
        assert_eq!(got.expect("in time").expect("completed"), vec![7]);
    }
}
