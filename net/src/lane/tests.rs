//! Unit tests of the lane: its order across classes, and its confirmations of sent writes
//! and their failures, against a provider the tests end operations of by hand.

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

/// A lane of `provider` whose sent write `w1` was followed by the atomic `a1`, and whose
/// confirmation `c1` before the atomic failed with the error returned (a lost PE, for
/// `reason`); `a1` has been posted behind it.
async fn failed_before_an_atomic(provider: &Provider, reason: &str) -> (Lane, Error) {
    let lane = provider.lane();
    drop(lane.start(Kind::Sent, provider.op("w1", true)));
    provider.end("w1");
    drop(lane.start(Kind::Atomic, provider.op("a1", true)));
    provider.posted_are(&["w1", "c1"]).await;
    let failed = Error::PeerLost {
        pe: 1,
        reason: reason.into(),
    };
    provider.finish("c1", Err(failed.clone()));
    provider.posted_are(&["w1", "c1", "a1"]).await;
    (lane, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_confirmation_nobody_awaited_fails_the_next_settle_once() {
    let provider = Provider::default();
    let (lane, lost) = failed_before_an_atomic(&provider, "gone").await;
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
async fn a_lane_reads_as_settled_without_its_lock_exactly_when_a_settle_would_find_nothing() {
    let provider = Provider::default();
    let lane = provider.lane();
    assert!(lane.is_settled(), "nothing was sent");
    drop(lane.start(Kind::Flag, provider.op("f1", true)));
    assert!(lane.is_settled(), "a flag is never confirmed");
    drop(lane.start(Kind::Sent, provider.op("w1", true)));
    assert!(!lane.is_settled(), "a write was sent");
    provider.end("w1");
    let settled = lane.settle().expect("a write to confirm");
    provider.posted_are(&["f1", "w1", "c1"]).await;
    assert!(!lane.is_settled(), "its confirmation is on its way");
    provider.end("c1");
    outcome(settled).await.expect("confirmed");
    assert!(lane.is_settled(), "the write was confirmed");

    let provider = Provider::default();
    let (lane, lost) = failed_before_an_atomic(&provider, "gone").await;
    assert!(
        !lane.is_settled(),
        "every write was settled, but a failure waits to be reported"
    );
    let settled = lane.settle().expect("a failure to report");
    assert_eq!(outcome(settled).await, Err(lost));
    assert!(lane.is_settled(), "the failure was reported");
}

/// Whether `outcome` is the loss a failed operation reports through the next settle.
fn lost(outcome: ferroshmem_runtime::Result<Vec<u8>>) -> bool {
    matches!(outcome, Err(Error::Os { message, .. }) if message.contains("may not have landed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_failing_while_data_is_unconfirmed_fails_the_settle_that_confirms_it() {
    let provider = Provider::default();
    let lane = provider.lane();
    let failed = |name| {
        let read = lane.start(Kind::Rma, provider.op(name, true));
        provider.finish(name, Err(Error::Shutdown));
        read
    };
    drop(lane.start(Kind::Sent, provider.op("w1", true)));
    provider.end("w1");
    assert!(outcome(failed("r1")).await.is_err());
    // The confirmation lands (through a new connection, say); w1 may not have.
    let settled = lane.settle().expect("a write to confirm");
    provider.posted_are(&["w1", "r1", "c1"]).await;
    provider.end("c1");
    assert!(lost(outcome(settled).await));
    assert!(lane.settle().is_none(), "reported once");
    // Data confirmed before the failure is not at risk.
    assert!(outcome(failed("r2")).await.is_err());
    assert!(lane.settle().is_none(), "nothing was unconfirmed");
    // A failure while the confirmation is on its way fails its settle too.
    drop(lane.start(Kind::Sent, provider.op("w2", true)));
    provider.end("w2");
    let read = lane.start(Kind::Rma, provider.op("r3", true));
    let settled = lane.settle().expect("a write to confirm");
    provider
        .posted_are(&["w1", "r1", "c1", "r2", "w2", "r3", "c2"])
        .await;
    provider.finish("r3", Err(Error::Shutdown));
    assert!(outcome(read).await.is_err());
    provider.end("c2");
    assert!(lost(outcome(settled).await));
    assert!(lane.settle().is_none(), "reported once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_sharing_a_confirmation_each_report_the_loss_it_found() {
    let provider = Provider::default();
    let lane = provider.lane();
    drop(lane.start(Kind::Sent, provider.op("w1", true)));
    provider.end("w1");
    let read = lane.start(Kind::Rma, provider.op("r1", true));
    let first = lane.settle().expect("a write to confirm");
    let second = lane.settle().expect("the same confirmation");
    provider.posted_are(&["w1", "r1", "c1"]).await;
    provider.finish("r1", Err(Error::Shutdown));
    assert!(outcome(read).await.is_err());
    provider.end("c1");
    assert!(lost(outcome(first).await));
    assert!(lost(outcome(second).await));
    assert!(
        lane.settle().is_none(),
        "reported, and nothing left to confirm"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_sent_behind_a_failed_confirmation_is_reported_lost_by_the_next() {
    let provider = Provider::default();
    let lane = provider.lane();
    drop(lane.start(Kind::Sent, provider.op("w1", true)));
    provider.end("w1");
    let settled = lane.settle().expect("a write to confirm");
    // w2 goes out behind the confirmation, which then fails (its connection dropped).
    drop(lane.start(Kind::Sent, provider.op("w2", true)));
    provider.end("w2");
    provider.posted_are(&["w1", "c1", "w2"]).await;
    provider.finish("c1", Err(Error::Shutdown));
    assert_eq!(outcome(settled).await, Err(Error::Shutdown));
    let next = lane.settle().expect("w2 to confirm");
    provider.posted_are(&["w1", "c1", "w2", "c2"]).await;
    provider.end("c2");
    assert!(lost(outcome(next).await));
    assert!(lane.settle().is_none(), "reported once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_whose_confirmation_fails_reports_the_first_failure_kept() {
    let provider = Provider::default();
    let (lane, first) = failed_before_an_atomic(&provider, "first").await;
    provider.end("a1");
    drop(lane.start(Kind::Sent, provider.op("w2", true)));
    provider.end("w2");
    let settled = lane.settle().expect("a failure and a write");
    provider.posted_are(&["w1", "c1", "a1", "w2", "c2"]).await;
    provider.finish("c2", Err(Error::Shutdown));
    assert_eq!(outcome(settled).await, Err(first));
    assert!(lane.settle().is_none(), "nothing left to report");
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
