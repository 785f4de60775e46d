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
//! A held operation is posted by a task of its own, not when its completion is polled: an
//! `_nbi` operation's completion is polled only at `quiet`, and a signal must not wait that
//! long. (Outside a tokio runtime nothing could run that task: operations then go out at
//! once, ordered only within their class.) Operations of the same class as those in flight go out at once, which keeps
//! streams of puts (or of atomics) at the provider's speed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ferroshmem_runtime::route::Completion;
use ferroshmem_runtime::Error;
use tokio::sync::{watch, Notify};

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

/// The order of one PE's operations to one peer; see the module documentation.
#[derive(Debug, Default)]
pub struct Lane {
    in_flight: Arc<InFlight>,
    /// Set to true once the last operation that could not go out at once has been posted.
    last_held: Mutex<Option<watch::Receiver<bool>>>,
}

impl Lane {
    /// Posts an operation of `class` through `post`, now or once the lane lets it go.
    pub fn start(&self, class: Class, post: Post) -> Completion {
        let mut last = self
            .last_held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let behind = last.as_ref().filter(|held| !*held.borrow()).cloned();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let hold = behind.is_some() || self.in_flight.busy(class.other());
        let (posted, gate) = watch::channel(false);
        let (Some(runtime), true) = (runtime, hold) else {
            // Posted under the lock, so that no later operation overtakes it; one the
            // provider could not take yet holds the later ones until it could.
            let completion = post_now(&self.in_flight, class, post, posted);
            if !*gate.borrow() {
                *last = Some(gate);
            }
            return completion;
        };
        *last = Some(gate);
        drop(last);
        let in_flight = self.in_flight.clone();
        let task = runtime.spawn(async move {
            if let Some(mut behind) = behind {
                // An error means the one ahead was dropped unposted: its turn is over.
                let _ = behind.wait_for(|posted| *posted).await;
            }
            in_flight.drained(class.other()).await;
            post_now(&in_flight, class, post, posted).await
        });
        Box::pin(async move {
            task.await
                .unwrap_or_else(|e| Err(Error::os("a held fabric operation's task", e)))
        })
    }
}

/// Posts an operation of `class`, counted in flight until it ends; `posted` learns when
/// the provider took it.
fn post_now(
    in_flight: &Arc<InFlight>,
    class: Class,
    post: Post,
    posted: watch::Sender<bool>,
) -> Completion {
    in_flight.begin(class);
    let ended = in_flight.clone();
    post(Hooks {
        posted: Some(Box::new(move || {
            let _ = posted.send(true);
        })),
        ended: Some(Box::new(move || ended.end(class))),
    })
}
