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
//!
//! Any operation of the lane that fails while data started before its end is not yet
//! confirmed fails the confirmation of that data as well (so every settle that waits for it),
//! even where the confirmation itself lands: a provider may drop its connection to the peer
//! on an error at the target (a bad key or bounds there) and make a new one, and writes that
//! were on their way through the old connection are then lost without a word, where the
//! confirmation, posted through the new one, lands. The verdict errs on the side of a
//! failure: data still held in the queue when the operation failed, or an operation refused
//! before it was posted, counts too. It relies on the failed operation's end being handled
//! before the confirmation posted after it: the completion queue reports them in that
//! order, and an operation's end reaches its lane before its completion resolves. Where
//! two readers of the queue (the progress thread and a driving task) each take one of the
//! two at once, the confirmation's end may be handled first, and the loss is missed.
//! Flags are not covered: one lost that way leaves its barrier to the job's failure
//! detection.
//!
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ferroshmem_runtime::route::Completion;
use ferroshmem_runtime::Error;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

use crate::{Ended, Hooks};

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

/// Operations of each class posted and not yet ended, and what a failure among them may
/// have lost.
#[derive(Debug, Default)]
struct InFlight {
    count: [AtomicUsize; 2],
    ended: Notify,
    /// The number of the last sent write of the application's data ([`Marks::data`]),
    /// readable without the lane's lock, which an operation's end may not take (a provider
    /// may end an operation it refuses while the lane posts it, under that lock).
    data: AtomicU64,
    /// The highest [`InFlight::data`] any operation's failure ended behind: data sent
    /// through it and not confirmed before then may be lost.
    failed_behind: AtomicU64,
    /// [`Marks::settled`], readable without the lane's lock, stored after
    /// [`InFlight::failure_kept`] is: a settle that reads it and finds nothing beyond it may
    /// pass the lane by ([`Lane::is_settled`]).
    settled: AtomicU64,
    /// Whether [`Marks::failure`] holds a failure, readable without the lane's lock.
    failure_kept: AtomicBool,
}

impl InFlight {
    fn begin(&self, class: Class) {
        self.count[class.index()].fetch_add(1, Ordering::AcqRel);
    }

    fn end(&self, class: Class, how: Ended) {
        if how == Ended::Failed {
            let data = self.data.load(Ordering::Acquire);
            self.failed_behind.fetch_max(data, Ordering::AcqRel);
        }
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
    /// The first failure of a confirmation (its own, or a loss it found) not yet reported by
    /// a settle.
    failure: Option<Error>,
}

impl Marks {
    /// The possible loss of data sent before an operation of the lane failed and not
    /// settled by then (see the module documentation), if there is one.
    fn loss(&self, in_flight: &InFlight) -> Result<(), Error> {
        if in_flight.failed_behind.load(Ordering::Acquire) <= self.settled {
            return Ok(());
        }
        Err(Error::Os {
            context: "fabric operation",
            message: "an operation to this peer failed while puts to it were not yet \
                      confirmed: the provider may have dropped them with its connection, so \
                      they may not have landed"
                .into(),
        })
    }
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
                self.in_flight
                    .data
                    .store(queue.marks.data, Ordering::Release);
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

    /// Whether the lane has nothing for [`Lane::settle`] to confirm or report, read without
    /// its lock: every data write started before the call is settled, and no failure is
    /// kept. A `quiet` takes such a lane off its list of lanes to settle
    /// ([`crate::unsettled`]) without taking the lane's lock.
    pub fn is_settled(&self) -> bool {
        let settled = self.in_flight.settled.load(Ordering::Acquire);
        self.in_flight.data.load(Ordering::Acquire) <= settled
            && !self.in_flight.failure_kept.load(Ordering::Acquire)
    }

    /// Confirms the application's data sent so far: resolves once it has landed, with the
    /// first failure (of its confirmation, a loss its confirmation found behind a failed
    /// operation, or an earlier failure not yet reported); `None`
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
        let (lane, in_flight) = (self.queue.clone(), self.in_flight.clone());
        Some(Box::pin(async move {
            let confirmed = match confirmation {
                Some(confirmation) => confirmation.await,
                None => Ok(()),
            };
            // Reported here, so no longer kept: the first failure kept (an earlier one, or
            // this settle's own), else this settle's own.
            let kept = {
                let mut queue = lock(&lane);
                in_flight.failure_kept.store(false, Ordering::Release);
                queue.marks.failure.take()
            };
            match (confirmed, kept) {
                (_, Some(failed)) | (Err(failed), None) => Err(failed),
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
        let (lane, in_flight) = (self.queue.clone(), self.in_flight.clone());
        let confirmation = async move {
            let landed = posted.await.map(drop);
            let marks = &mut lock(&lane).marks;
            // Its own failure first; else a loss behind another operation's failure (for
            // every settle that shares it).
            let outcome = landed.and_then(|()| marks.loss(&in_flight));
            if let Err(failed) = &outcome {
                marks.failure.get_or_insert_with(|| failed.clone());
                in_flight.failure_kept.store(true, Ordering::Release);
            }
            marks.settled = marks.settled.max(through);
            in_flight.settled.store(marks.settled, Ordering::Release);
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
        ended: Some(Box::new(move |how| ended.end(class, how))),
    })
}

#[cfg(test)]
mod tests;
