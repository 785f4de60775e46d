//! [`Room`]: operations the provider could not take yet, held per peer and posted again
//! after every read of the completion queue.
//!
//! A provider refuses an operation for room (`-FI_EAGAIN`) while its queue is full or while
//! its connection to the peer is being made. Such an operation waits here, behind the earlier
//! ones to the same peer, and whoever reads the completion queue next posts it (the progress
//! thread, or a task driving the queue): no task or runtime needs to exist for it, and its
//! future need not be polled (an `_nbi` operation's is polled only at `quiet`). Each peer's
//! operations keep their order; a peer whose connection is not made holds up only its own.
//! One that waits [`ROOM_DEADLINE`] fails; closing the endpoint fails the rest with
//! [`Error::Shutdown`](ferroshmem_runtime::Error::Shutdown).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::ffi::types::FiAddr;
use crate::ffi::{failed, Done, Endpoint, Operation, Refused};

/// How long an operation may wait for room in the provider's queue before it fails: the
/// peer has taken none of this PE's operations for that long (its connection never made,
/// or it stopped reading), and by then the job's peer timeout has ended every wait on it.
pub const ROOM_DEADLINE: Duration = Duration::from_secs(60);

/// An operation waiting for room.
pub struct Deferred {
    /// The operation.
    pub op: Operation,
    /// Where it goes: the peer, the remote address or offset, and the key.
    pub to: (FiAddr, u64, u64),
    /// Told how it ended.
    pub done: Done,
    /// Called once the provider took it, or refused it for good.
    pub posted: Box<dyn FnOnce() + Send>,
    /// When it began to wait (to its peer, behind others, or refused itself).
    pub since: Instant,
}

/// How many groups of peers [`Room`] counts waiting operations for without its lock.
const PEER_GROUPS: usize = 32;

/// The operations waiting for room, per peer, in order; see the module documentation.
#[derive(Default)]
pub struct Room {
    waiting: Mutex<BTreeMap<FiAddr, VecDeque<Deferred>>>,
    /// How many wait; changed with `waiting` held.
    count: AtomicUsize,
    /// How many wait per group of peers (a peer's group: its address modulo
    /// [`PEER_GROUPS`]); changed with `waiting` held, read without it, so that an operation
    /// to a peer none of whose group waits is posted without taking the lock.
    by_group: [AtomicUsize; PEER_GROUPS],
}

/// An operation taken out of the room, and how its last post went: its hooks run once the
/// room is let go (a hook may post again).
type Settled = (Box<dyn FnOnce() + Send>, Result<(), Refused>);

impl Room {
    /// How many operations wait.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Whether an operation to `peer` waits: a later one must wait behind it.
    pub fn holds_for(&self, peer: FiAddr) -> bool {
        self.group(peer).load(Ordering::Acquire) > 0 && self.lock().contains_key(&peer)
    }

    /// The count of waiting operations of `peer`'s group.
    fn group(&self, peer: FiAddr) -> &AtomicUsize {
        &self.by_group[(peer % PEER_GROUPS as FiAddr) as usize]
    }

    /// Adds `deferred` behind the operations to its peer that wait; true when it is the
    /// only operation waiting (the reader of the queue may be in a long wait).
    pub fn defer(&self, deferred: Deferred) -> bool {
        let mut waiting = self.lock();
        self.group(deferred.to.0).fetch_add(1, Ordering::AcqRel);
        waiting
            .entry(deferred.to.0)
            .or_default()
            .push_back(deferred);
        self.count.fetch_add(1, Ordering::AcqRel) == 0
    }

    /// Posts through `endpoint`, for each peer, its waiting operations in order until the
    /// provider refuses one for room; one that waited [`ROOM_DEADLINE`] fails instead.
    pub fn post_waiting(&self, endpoint: &Endpoint) {
        if self.count() == 0 {
            return;
        }
        let mut settled: Vec<Settled> = Vec::new();
        {
            let mut waiting = self.lock();
            for queue in waiting.values_mut() {
                self.post_queue(endpoint, queue, &mut settled);
            }
            waiting.retain(|_, queue| !queue.is_empty());
        }
        for (posted, outcome) in settled {
            posted();
            match outcome {
                Ok(()) => {}
                Err(Refused::Full(done)) => done(Err(failed(format!(
                    "the provider had no room for it for {ROOM_DEADLINE:?}"
                )))),
                Err(Refused::Failed(e, Some(done))) => done(Err(e)),
                Err(Refused::Failed(_, None)) => {}
            }
        }
    }

    /// Posts one peer's waiting operations until the provider refuses one for room.
    fn post_queue(
        &self,
        endpoint: &Endpoint,
        queue: &mut VecDeque<Deferred>,
        settled: &mut Vec<Settled>,
    ) {
        while let Some(mut next) = queue.pop_front() {
            let (peer, remote, key) = next.to;
            let done = next.done;
            match endpoint.post(&mut next.op, peer, remote, key, done) {
                Err(Refused::Full(back)) if next.since.elapsed() < ROOM_DEADLINE => {
                    next.done = back;
                    queue.push_front(next);
                    return;
                }
                outcome => {
                    self.count.fetch_sub(1, Ordering::AcqRel);
                    self.group(peer).fetch_sub(1, Ordering::AcqRel);
                    settled.push((next.posted, outcome));
                }
            }
        }
    }

    /// Drops every waiting operation (the endpoint closes): their owners are told
    /// [`Error::Shutdown`](ferroshmem_runtime::Error::Shutdown), their hooks that they failed.
    pub fn drop_all(&self) {
        let dropped = {
            let mut waiting = self.lock();
            let all = std::mem::take(&mut *waiting);
            for (&peer, queue) in &all {
                self.count.fetch_sub(queue.len(), Ordering::AcqRel);
                self.group(peer).fetch_sub(queue.len(), Ordering::AcqRel);
            }
            all
        };
        drop(dropped);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<FiAddr, VecDeque<Deferred>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn write_to(peer: FiAddr, told: &Arc<AtomicBool>) -> Deferred {
        let told = told.clone();
        Deferred {
            op: Operation::Write(vec![1]),
            to: (peer, 0, 0),
            done: Box::new(move |outcome| told.store(outcome.is_ok(), Ordering::SeqCst)),
            posted: Box::new(|| {}),
            since: Instant::now(),
        }
    }

    #[test]
    fn a_peer_is_held_only_by_its_own_operations_even_in_a_shared_group() {
        let room = Room::default();
        let told = Arc::new(AtomicBool::new(false));
        let peer = 1;
        let same_group = peer + PEER_GROUPS as FiAddr;
        assert!(room.defer(write_to(peer, &told)), "the first to wait");
        assert!(!room.defer(write_to(peer, &told)), "the second to wait");
        assert!(room.holds_for(peer));
        assert!(!room.holds_for(same_group), "a peer of the same group");
        assert!(!room.holds_for(peer + 1), "a peer of another group");
        assert_eq!(room.count(), 2);
        room.drop_all();
        assert_eq!(
            Arc::strong_count(&told),
            1,
            "the dropped operations' owners let go"
        );
        assert!(
            !told.load(Ordering::SeqCst),
            "no dropped operation is told it was done"
        );
        assert_eq!(room.count(), 0);
        assert!(!room.holds_for(peer), "nothing waits after drop_all");
        assert!(
            room.defer(write_to(same_group, &told)),
            "first again after drop_all"
        );
        assert!(room.holds_for(same_group));
        assert!(!room.holds_for(peer));
    }
}
