//! [`Lane`]: the order of one PE's fabric operations to one peer, and the confirmation of
//! the writes that complete once sent.
//!
//! libfabric keeps RMA operations in order among themselves (a read or write lands behind
//! the writes posted before it) and atomics among themselves (the endpoint asks for that),
//! but nothing orders an atomic after an RMA write or the reverse: measured on
//! `tcp;ofi_rxm`, a signal's atomic overtakes the 4 KiB writes posted before it. A lane
//! restores program order across the two classes: an operation of one class is posted only
//! once every operation of the other class posted before it has completed, and the
//! operations behind a held one wait their turn, so the lane stays first in, first out. An
//! operation the provider could not take at once (its queue full, or, for the first ones,
//! its connection to the peer still being made) holds the later ones the same way until it
//! could, so that retries do not reorder them either.
//!
//! # Confirming sent writes
//! Most operations complete once done at the target. A write of [`Kind::Sent`] or
//! [`Kind::Flag`] completes once the provider has taken its bytes: the target then sends no
//! acknowledgement, which it would send before it reports the write, on the path of every
//! answer to it. The lane numbers such writes as they start and confirms those of the
//! application's data ([`Kind::Sent`]; flags are read by value, never confirmed) with a
//! confirmation it posts behind them (a write of nothing that completes once the target has
//! placed it, and so the writes before it):
//! - before an atomic, when data was sent since the last confirmation started (the atomic is
//!   then held until the confirmation has completed, as behind any RMA operation);
//! - for [`Lane::settle`] (`quiet`), when data was sent since the last one; a settle that
//!   finds a confirmation already on its way behind that data waits for that one.
//!
//! A confirmation's failure is kept until a settle has reported it (one whose caller stopped
//! waiting reports nothing), so that a failed confirmation before an atomic, or behind a
//! settle that was dropped, is reported by the next.

//! # Posting
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
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

use crate::Hooks;

/// The two classes libfabric orders separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
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
    /// A write of the application's data that completes once sent: [`Lane::settle`]
    /// confirms it.
    Sent,
    /// A write of a flag, read by value, that completes once sent; never confirmed.
    Flag,
    /// A write or read that completes once done at the target.
    Rma,
    /// An atomic.
    Atomic,
}

impl Kind {
    fn class(self) -> Class {
        match self {
            Kind::Sent | Kind::Flag | Kind::Rma => Class::Rma,
            Kind::Atomic => Class::Atomic,
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

/// Builds the operation that confirms the writes posted before it (see the module
/// documentation).
pub type Confirm = Arc<dyn Fn() -> Post + Send + Sync>;

/// A confirmation's outcome, for everyone who waits for it.
type Confirmation = Shared<BoxFuture<'static, Result<(), Error>>>;

/// An operation waiting in a lane for its turn, and where its completion goes once posted.
struct Held {
    class: Class,
    post: Post,
    completion: oneshot::Sender<Completion>,
}

/// The sent writes of a lane, numbered as they start, and their confirmations.
#[derive(Default)]
struct Marks {
    /// The number of the last sent write (flags included).
    sent: u64,
    /// The number of the last sent write of the application's data.
    data: u64,
    /// The number of the last sent write the latest confirmation started covers.
    covered: u64,
    /// The number through which sent writes have been settled: confirmed landed, or their
    /// confirmation failed (the failure kept until reported).
    settled: u64,
    /// The latest confirmation started.
    latest: Option<Confirmation>,
    /// The first failure of a confirmation not yet reported by a settle.
    failure: Option<Error>,
}

/// The operations a lane holds, in order, whether a task is posting them, and its marks.
#[derive(Default)]
struct Queue {
    held: VecDeque<Held>,
    /// Set while a task posts the held operations: every later operation joins the queue.
    draining: bool,
    marks: Marks,
}

/// The order of one PE's operations to one peer; see the module documentation.
pub struct Lane {
    /// The runtime that runs the posting task for callers outside any runtime.
    runtime: Option<Handle>,
    in_flight: Arc<InFlight>,
    queue: Arc<Mutex<Queue>>,
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
    /// A lane whose posting task runs, for callers outside any runtime, on `runtime`, and
    /// whose sent writes are confirmed by the operations `confirm` builds.
    pub fn new(runtime: Option<Handle>, confirm: Confirm) -> Lane {
        Lane {
            runtime,
            in_flight: Arc::default(),
            queue: Arc::default(),
            confirm,
        }
    }

    /// The runtime the lane's tasks run on for the calling thread, if any.
    fn runtime(&self) -> Option<Handle> {
        Handle::try_current().ok().or_else(|| self.runtime.clone())
    }

    /// Posts an operation of `kind` through `post`, now or once the lane lets it go; an
    /// atomic behind sent data goes after a confirmation of it.
    pub fn start(&self, kind: Kind, post: Post) -> Completion {
        let mut queue = lock(&self.queue);
        let runtime = self.runtime();
        match kind {
            Kind::Sent => {
                queue.marks.sent += 1;
                queue.marks.data = queue.marks.sent;
            }
            Kind::Flag => queue.marks.sent += 1,
            Kind::Atomic if queue.marks.data > queue.marks.covered => {
                // Its failure is kept for the next settle.
                drop(self.start_confirmation(&mut queue, runtime.as_ref()));
            }
            Kind::Rma | Kind::Atomic => {}
        }
        self.start_in_order(&mut queue, runtime, kind.class(), post)
    }

    /// Confirms the application's data sent so far: resolves once it has landed, with the
    /// first failure (of its confirmation, or of an earlier one not yet reported); `None`
    /// when there is nothing to confirm or report. A kept failure goes to the first settle
    /// that resolves after it (whichever context's `quiet` asked); settles that shared the
    /// failed confirmation each report it.
    pub fn settle(&self) -> Option<Completion> {
        let mut queue = lock(&self.queue);
        let needed = queue.marks.data;
        let confirmation = if needed <= queue.marks.settled {
            queue.marks.failure.as_ref()?;
            None
        } else if needed <= queue.marks.covered {
            queue.marks.latest.clone()
        } else {
            let runtime = self.runtime();
            Some(self.start_confirmation(&mut queue, runtime.as_ref()))
        };
        let lane = self.queue.clone();
        Some(Box::pin(async move {
            let confirmed = match confirmation {
                Some(confirmation) => confirmation.await,
                None => Ok(()),
            };
            // Reported here, so no longer kept: this settle's own failure, or an earlier one.
            let kept = lock(&lane).marks.failure.take();
            match (confirmed, kept) {
                (Err(failed), _) | (Ok(()), Some(failed)) => Err(failed),
                (Ok(()), None) => Ok(Vec::new()),
            }
        }))
    }

    /// Starts, in the lane's order, a confirmation of every write sent so far, recording
    /// once it ends that they have been settled, and keeping its failure until a settle
    /// reports it. A task on `runtime` sees it to its end.
    fn start_confirmation(&self, queue: &mut Queue, runtime: Option<&Handle>) -> Confirmation {
        let through = queue.marks.sent;
        queue.marks.covered = through;
        let posted = self.start_in_order(queue, runtime.cloned(), Class::Rma, (self.confirm)());
        let lane = self.queue.clone();
        let confirmation = async move {
            let outcome = posted.await.map(drop);
            let marks = &mut lock(&lane).marks;
            marks.settled = marks.settled.max(through);
            if let Err(failed) = &outcome {
                marks.failure.get_or_insert_with(|| failed.clone());
            }
            outcome
        };
        let confirmation = confirmation.boxed().shared();
        queue.marks.latest = Some(confirmation.clone());
        if let Some(runtime) = runtime {
            runtime.spawn(confirmation.clone());
        }
        confirmation
    }

    /// Posts an operation of `class` now, or holds it (on `runtime`'s posting task) behind
    /// the lane's queue and the other class's operations in flight.
    fn start_in_order(
        &self,
        queue: &mut Queue,
        runtime: Option<Handle>,
        class: Class,
        post: Post,
    ) -> Completion {
        let Some(runtime) = runtime else {
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

    /// An operation the provider was handed: its hooks and how its completion is told.
    struct Given {
        name: &'static str,
        hooks: Hooks,
        outcome: Option<oneshot::Sender<ferroshmem_runtime::Result<Vec<u8>>>>,
    }

    /// The names of the operations posted so far, in order, and what each was given.
    #[derive(Clone, Default)]
    struct Provider {
        posted: Arc<Mutex<Vec<&'static str>>>,
        given: Arc<Mutex<Vec<Given>>>,
        confirmations: Arc<AtomicUsize>,
    }

    impl Provider {
        /// An operation named `name` that the provider takes at once when `takes`, else only
        /// once [`Provider::take`] says so; it ends when [`Provider::end`] (or `fail`) says so.
        fn op(&self, name: &'static str, takes: bool) -> Post {
            let provider = self.clone();
            Box::new(move |mut hooks: Hooks| {
                provider.posted.lock().unwrap().push(name);
                if let Some(taken) = hooks.posted.take_if(|_| takes) {
                    taken();
                }
                let (outcome, told) = oneshot::channel();
                provider.given.lock().unwrap().push(Given {
                    name,
                    hooks,
                    outcome: Some(outcome),
                });
                Box::pin(async move { told.await.unwrap_or(Err(Error::Shutdown)) })
            })
        }

        /// A lane whose confirmations are operations named `c1`, `c2`, … of this provider.
        fn lane(&self) -> Lane {
            let provider = self.clone();
            Lane::new(
                None,
                Arc::new(move || {
                    let n = provider.confirmations.fetch_add(1, Ordering::Relaxed) + 1;
                    provider.op(Box::leak(format!("c{n}").into_boxed_str()), true)
                }),
            )
        }

        /// What the operation named `name` was given.
        fn given<R>(&self, name: &str, f: impl FnOnce(&mut Given) -> R) -> R {
            let mut given = self.given.lock().unwrap();
            f(given.iter_mut().find(|g| g.name == name).expect("posted"))
        }

        fn take(&self, name: &str) {
            self.given(name, |g| g.hooks.posted.take())
                .expect("called once")();
        }

        /// Ends the operation named `name` with `outcome`.
        fn finish(&self, name: &str, outcome: ferroshmem_runtime::Result<Vec<u8>>) {
            let how = match outcome {
                Ok(_) => crate::Ended::Completed,
                Err(_) => crate::Ended::Failed,
            };
            let (ended, told) = self.given(name, |g| (g.hooks.ended.take(), g.outcome.take()));
            ended.expect("called once")(how);
            let _ = told.expect("told once").send(outcome);
        }

        fn end(&self, name: &str) {
            self.finish(name, Ok(Vec::new()));
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

    /// The outcome of `completion`, which must come within 5 s.
    async fn outcome(completion: Completion) -> ferroshmem_runtime::Result<Vec<u8>> {
        tokio::time::timeout(Duration::from_secs(5), completion)
            .await
            .expect("in time")
    }

    /// Whether `completion` is still pending after a moment.
    async fn pending(completion: &mut Completion) -> bool {
        let moment = tokio::time::sleep(Duration::from_millis(20));
        tokio::select! {
            _ = completion => false,
            () = moment => true,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lane_posts_in_order_and_holds_across_classes_and_behind_untaken_operations() {
        let provider = Provider::default();
        let lane = provider.lane();
        let start = |kind, name, takes| drop(lane.start(kind, provider.op(name, takes)));

        start(Kind::Rma, "w1", true);
        provider.posted_are(&["w1"]).await;
        // An atomic waits for the writes in flight; a write behind it waits its turn.
        start(Kind::Atomic, "a1", true);
        start(Kind::Rma, "w2", true);
        provider.posted_are(&["w1"]).await;
        provider.end("w1");
        provider.posted_are(&["w1", "a1"]).await;
        provider.end("a1");
        provider.posted_are(&["w1", "a1", "w2"]).await;
        // The queue is empty again: a write of the class in flight goes out at once.
        start(Kind::Rma, "w3", true);
        provider.posted_are(&["w1", "a1", "w2", "w3"]).await;
        // One the provider could not take yet holds the later ones, of any class.
        start(Kind::Rma, "w4", false);
        start(Kind::Rma, "w5", true);
        provider.posted_are(&["w1", "a1", "w2", "w3", "w4"]).await;
        provider.take("w4");
        provider
            .posted_are(&["w1", "a1", "w2", "w3", "w4", "w5"])
            .await;
        for name in ["w2", "w3", "w4", "w5"] {
            provider.end(name);
        }
        start(Kind::Atomic, "a2", true);
        provider
            .posted_are(&["w1", "a1", "w2", "w3", "w4", "w5", "a2"])
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_atomic_behind_sent_writes_waits_for_their_confirmation() {
        let provider = Provider::default();
        let lane = provider.lane();
        drop(lane.start(Kind::Sent, provider.op("w1", true)));
        drop(lane.start(Kind::Flag, provider.op("f1", true)));
        provider.end("w1");
        provider.end("f1");
        // Both writes were sent, not known landed: a confirmation goes first.
        drop(lane.start(Kind::Atomic, provider.op("a1", true)));
        provider.posted_are(&["w1", "f1", "c1"]).await;
        provider.end("c1");
        provider.posted_are(&["w1", "f1", "c1", "a1"]).await;
        provider.end("a1");
        // Nothing sent since: the next atomic goes at once.
        drop(lane.start(Kind::Atomic, provider.op("a2", true)));
        provider.posted_are(&["w1", "f1", "c1", "a1", "a2"]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_held_behind_an_atomic_are_confirmed_behind_it_and_so_is_the_next_atomic() {
        let provider = Provider::default();
        let lane = provider.lane();
        drop(lane.start(Kind::Rma, provider.op("r1", true)));
        // Held behind the read, then a sent write held behind the atomic.
        drop(lane.start(Kind::Atomic, provider.op("a1", true)));
        drop(lane.start(Kind::Sent, provider.op("w1", true)));
        let mut settled = lane.settle().expect("a write to confirm");
        drop(lane.start(Kind::Atomic, provider.op("a2", true)));
        provider.posted_are(&["r1"]).await;
        provider.end("r1");
        provider.posted_are(&["r1", "a1"]).await;
        provider.end("a1");
        // The write, then the settle's confirmation; the second atomic waits for both.
        provider.posted_are(&["r1", "a1", "w1", "c1"]).await;
        provider.end("w1");
        assert!(
            pending(&mut settled).await,
            "settled before the confirmation"
        );
        provider.posted_are(&["r1", "a1", "w1", "c1"]).await;
        provider.end("c1");
        outcome(settled).await.expect("settled");
        provider.posted_are(&["r1", "a1", "w1", "c1", "a2"]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_settle_waits_for_the_confirmation_on_its_way_and_flags_are_never_confirmed() {
        let provider = Provider::default();
        let lane = provider.lane();
        assert!(lane.settle().is_none(), "nothing was sent");
        drop(lane.start(Kind::Flag, provider.op("f1", true)));
        assert!(lane.settle().is_none(), "a flag is read by value");
        provider.end("f1");
        // No confirmation before an atomic for a flag either.
        drop(lane.start(Kind::Atomic, provider.op("a1", true)));
        provider.posted_are(&["f1", "a1"]).await;
        provider.end("a1");
        drop(lane.start(Kind::Sent, provider.op("w1", true)));
        provider.end("w1");
        let mut first = lane.settle().expect("a write to confirm");
        let mut second = lane.settle().expect("the same confirmation");
        provider.posted_are(&["f1", "a1", "w1", "c1"]).await;
        assert!(pending(&mut first).await && pending(&mut second).await);
        provider.end("c1");
        outcome(first).await.expect("first");
        outcome(second).await.expect("second");
        assert!(lane.settle().is_none(), "nothing left to confirm");
        drop(lane.start(Kind::Sent, provider.op("w2", true)));
        drop(lane.settle().expect("a later write"));
        provider
            .posted_are(&["f1", "a1", "w1", "c1", "w2", "c2"])
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_confirmation_nobody_awaited_fails_the_next_settle_once() {
        let provider = Provider::default();
        let lane = provider.lane();
        drop(lane.start(Kind::Sent, provider.op("w1", true)));
        provider.end("w1");
        drop(lane.start(Kind::Atomic, provider.op("a1", true)));
        provider.posted_are(&["w1", "c1"]).await;
        let lost = Error::PeerLost {
            pe: 1,
            reason: "gone".into(),
        };
        provider.finish("c1", Err(lost.clone()));
        provider.posted_are(&["w1", "c1", "a1"]).await;
        let settled = lane.settle().expect("a failure to report");
        assert_eq!(outcome(settled).await, Err(lost));
        assert!(lane.settle().is_none(), "reported once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failure_behind_a_dropped_settle_is_reported_by_the_next_and_later_data_confirmed() {
        let provider = Provider::default();
        let lane = provider.lane();
        drop(lane.start(Kind::Sent, provider.op("w1", true)));
        provider.end("w1");
        drop(lane.settle().expect("a write to confirm"));
        provider.posted_are(&["w1", "c1"]).await;
        provider.finish("c1", Err(Error::Shutdown));
        drop(lane.start(Kind::Sent, provider.op("w2", true)));
        provider.end("w2");
        // The next settle confirms the later write and reports the earlier failure.
        let mut settled = lane.settle().expect("a failure and a write");
        provider.posted_are(&["w1", "c1", "w2", "c2"]).await;
        assert!(
            pending(&mut settled).await,
            "reported before the later write landed"
        );
        provider.end("c2");
        assert_eq!(outcome(settled).await, Err(Error::Shutdown));
        assert!(lane.settle().is_none(), "reported once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_outside_any_runtime_is_ordered_on_the_lanes_runtime() {
        let provider = Provider::default();
        let lane = Arc::new(Lane::new(
            Some(Handle::current()),
            provider.lane().confirm.clone(),
        ));
        let started = {
            let (lane, provider) = (lane.clone(), provider.clone());
            std::thread::spawn(move || {
                drop(lane.start(Kind::Rma, provider.op("w1", true)));
                drop(lane.start(Kind::Atomic, provider.op("a1", true)));
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
        let provider = Provider::default();
        let lane = provider.lane();
        drop(lane.start(Kind::Rma, provider.op("w1", true)));
        let held = lane.start(
            Kind::Atomic,
            Box::new(|_hooks| Box::pin(std::future::ready(Ok(vec![7])))),
        );
        provider.end("w1");
        assert_eq!(outcome(held).await.expect("completed"), vec![7]);
    }
}
