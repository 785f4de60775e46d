//! `sync_all` and `barrier_all` over the segments' header flags: a dissemination barrier,
//! ⌈log₂ n⌉ rounds; in round k PE i signals PE (i + 2^k) mod n and waits for PE
//! (i − 2^k) mod n. Flags are monotonic counters, so no reset is needed between barriers.
//!
//! A signal to a PE on another node is a write of the barrier's number into the flag, which
//! wakes the target as it lands (see [`arrived`] for why reading it is sound), and the barrier
//! goes on without waiting for the write to be acknowledged: n PEs meet after ⌈log₂ n⌉
//! one-way trips, not round trips. The writes' completions are checked by later barriers
//! and awaited by the PE's final one.
//!
//! A PE numbers its barriers in its data plane's barrier word, and every PE must reach the
//! same numbers in step. A barrier left unfinished (its future dropped, or a failure midway)
//! has signalled some peers but not waited for them, so its PE is out of step for good: the
//! barrier's guard then sets the word's broken bit, and every later barrier of the PE fails.
//! The guard also marks the PE's segment header, where a peer whose wait for that PE's
//! signal has gone to sleep reads it: the signal will never come, so the peer's barrier
//! fails too (and breaks in turn, so the PEs waiting for it learn of it the same way).
//!
//! A PE that finalizes writes the number of its final barrier in its header first. A peer
//! whose sleeping wait is for a later barrier of that PE's (it made one barrier more than the
//! finalizing PE, whose final barrier met one of its own) fails the same way, with
//! [`Error::CollectiveMismatch`], instead of waiting for a PE that has left.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::route::{RemoteOp, Route};
use crate::segment::Segment;
use crate::wait::Wait;

/// The bit of a PE's barrier word set once one of its barriers was left unfinished; the
/// other bits count the barriers begun.
const BROKEN: u64 = 1 << 63;

/// A barrier in progress on this PE. Dropped before [`InProgress::finish`] (an error midway,
/// or a cancelled future), it marks the PE's world barrier broken.
struct InProgress<'a> {
    dp: &'a DataPlane,
    finished: bool,
}

impl InProgress<'_> {
    /// The protocol ran to its end: this PE is in step with the others.
    fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.dp.note_if_panicking();
            // Relaxed: only this PE's later barriers read the word, each with a
            // read-modify-write that comes after this one.
            self.dp.barrier_epoch.fetch_or(BROKEN, Ordering::Relaxed);
            self.dp
                .own_segment()
                .barrier_broken()
                .store(1, Ordering::Release);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether barrier flag value `seen` says world barrier `epoch` was signalled.
///
/// A mapped signaller adds one atomically, so any value from `epoch` on will do. A remote
/// one writes `epoch` over `epoch − 1`, and the fabric may place those 8 bytes in pieces, so
/// a read can see a mix of the two; the signaller writes `epoch + 1` only after `epoch` was
/// placed (writes to a peer land in order), and never `epoch + 2` before this PE has passed
/// barrier `epoch`. So only `epoch` and `epoch + 1` are accepted: no mix of the bytes of
/// `epoch − 1` and `epoch` equals `epoch + 1` (its lowest byte differs from both) or
/// `epoch` unless it is `epoch`, written whole.
fn arrived(seen: u64, epoch: u64, remote: bool) -> bool {
    if remote {
        seen.wrapping_sub(epoch) <= 1
    } else {
        seen >= epoch
    }
}

/// Why the PE of segment `peer` (PE `pe`) will never signal this PE's world barrier `epoch`,
/// if its header says so: it left one of its barriers unfinished, or it finalized at an
/// earlier barrier.
fn never_signals(peer: &Segment, pe: usize, epoch: u64) -> Result<()> {
    let detail = if peer.barrier_broken().load(Ordering::Acquire) != 0 {
        format!(
            "PE {pe} left a world barrier unfinished (cancelled or failed midway), so it will \
             not come to this one"
        )
    } else {
        match peer.finalizing().load(Ordering::Acquire) {
            last @ 1.. if last < epoch => format!(
                "PE {pe} has finalized: its final barrier was world barrier {last}, and this \
                 PE is in world barrier {epoch} (the PEs made different numbers of world \
                 barriers)"
            ),
            _ => return Ok(()),
        }
    };
    Err(Error::CollectiveMismatch {
        operation: "barrier",
        detail: format!("{detail}; this PE's world barrier cannot be used any more"),
    })
}

impl DataPlane {
    /// Waits until every PE has called `sync_all` (`shmem_sync_all`): a pure synchronization,
    /// it completes no outstanding operation.
    ///
    /// Collective: every PE calls it, one call at a time per PE.
    ///
    /// # Errors
    /// [`Error::PeerLost`] (or the job's other failure) when the job has failed;
    /// [`Error::Shutdown`] once this PE has finalized; at once, when an earlier `sync_all`
    /// or `barrier_all` of this PE was left unfinished, the error that one failed with, or
    /// [`Error::Desynchronized`] if it was cancelled;
    /// [`Error::CollectiveMismatch`] when a PE whose signal it waits for left one unfinished
    /// or finalized at an earlier barrier (it will never signal again).
    ///
    /// Cancel safety: not cancel safe; dropped midway (or failing midway), it leaves this PE
    /// out of step with the others, so every later `sync_all` and `barrier_all` of the PE
    /// fails (with [`Error::Desynchronized`] after a cancellation).
    pub async fn sync_all(&self) -> Result<()> {
        let started = self.traffic.barrier_start();
        let result = self.dissemination().await;
        self.traffic.barrier_done(started, &result);
        result
    }

    /// The dissemination barrier behind [`DataPlane::sync_all`].
    async fn dissemination(&self) -> Result<()> {
        // A failed job's barrier fails in its wait; one of a PE that finalized, here.
        if self.is_shut_down() {
            self.health.check()?;
            return Err(Error::Shutdown);
        }
        let epoch = self.barrier_epoch.fetch_add(1, Ordering::Relaxed) + 1;
        if epoch & BROKEN != 0 {
            self.health.check()?;
            return Err(self.broken_barrier());
        }
        self.own_segment()
            .barriers_begun()
            .store(epoch, Ordering::Release);
        let barrier = InProgress {
            dp: self,
            finished: false,
        };
        match self.rounds(epoch).await {
            Ok(()) => {
                barrier.finish();
                self.health.check()
            }
            Err(e) => {
                *lock(&self.barrier_failure) = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Why this PE's world barrier cannot be used: the error its broken barrier failed with
    /// (a lost peer stays a lost peer), or its cancellation.
    #[cold]
    fn broken_barrier(&self) -> Error {
        lock(&self.barrier_failure)
            .clone()
            .unwrap_or(Error::Desynchronized {
                what: "this PE's world barrier",
            })
    }

    /// The rounds of world barrier `epoch`.
    async fn rounds(&self, epoch: u64) -> Result<()> {
        let n = self.n_pes();
        let own = self.own_segment();
        let mut distance = 1;
        let mut round = 0;
        while distance < n {
            let at = Segment::barrier_flag_offset(round);
            self.signal_barrier((self.my_pe + distance) % n, at, epoch);
            let flag = own.barrier_flag(round);
            let from = (self.my_pe + n - distance) % n;
            // A PE on another node tells nothing in a header this PE can read: a lost one is
            // reported by the control plane.
            let peer = match self.route(from)? {
                Route::Mapped(peer) => Some(&**peer),
                Route::Remote => None,
            };
            let mut stalled = || {
                // A PE may signal and break or finalize afterwards: only a missing signal is
                // final.
                match peer {
                    Some(peer) if flag.load(Ordering::Acquire) < epoch => {
                        never_signals(peer, from, epoch)
                    }
                    _ => Ok(()),
                }
            };
            let remote = peer.is_none();
            Wait::new(
                self,
                "barrier",
                at..at + 8,
                Ok(move || arrived(flag.load(Ordering::Acquire), epoch, remote).then_some(())),
            )
            .on_stall(&mut stalled)
            .await?;
            distance *= 2;
            round += 1;
        }
        self.barrier_signals_ended(epoch).await
    }

    /// Signals world barrier `epoch` in the barrier flag at mapping offset `at` of PE `to`:
    /// adds one to it on a mapped route (waking a sleeper there); on a remote one, writes
    /// `epoch` into it (a write wakes the target's sleepers as it lands, where an atomic would
    /// need a notice after it) and keeps the write's completion for later barriers to check.
    ///
    /// Either way the flag ends up holding `epoch`: each flag has a single signaller (in
    /// round k, PE i is signalled by PE i − 2^k only), which signals every barrier once.
    fn signal_barrier(&self, to: usize, at: usize, epoch: u64) {
        match &self.routes[to] {
            Route::Mapped(target) => {
                target
                    .mapping()
                    .atomic::<AtomicU64>(at)
                    .fetch_add(1, Ordering::SeqCst);
                target.wake_watchers(at, at + 8);
            }
            Route::Remote => {
                let write = || RemoteOp::Put(epoch.to_ne_bytes().to_vec());
                let completion = self.remote(Op::Signal, to, 8, at, write);
                if let Some(remotes) = &self.remotes {
                    remotes.keep_signal(completion);
                }
            }
        }
    }

    /// Ends world barrier `epoch` with the first error of its earlier remote signals that has
    /// come back, if any; this PE's final barrier (see [`DataPlane::mark_finalizing`]) waits
    /// for all of them, so that none is lost when the PE closes its endpoint.
    async fn barrier_signals_ended(&self, epoch: u64) -> Result<()> {
        let Some(remotes) = &self.remotes else {
            return Ok(());
        };
        if let Some(failed) = remotes.signal_failure() {
            return Err(failed);
        }
        if self.own_segment().finalizing().load(Ordering::Acquire) == epoch {
            if let Some(landed) = remotes.signals_landed() {
                landed.await?;
            }
        }
        Ok(())
    }

    /// Tells the other PEs that this PE has begun to finalize: it will make no more collective
    /// calls but its final barrier, the next world barrier it begins. A team call waiting for
    /// a call it has not made, and a world barrier waiting for one past its final barrier,
    /// fail instead of waiting.
    pub fn mark_finalizing(&self) {
        let final_barrier = self.barriers_begun() + 1;
        self.own_segment()
            .finalizing()
            .store(final_barrier, Ordering::Release);
    }

    /// How many world barriers this PE has begun.
    pub(crate) fn barriers_begun(&self) -> u64 {
        self.barrier_epoch.load(Ordering::Relaxed) & !BROKEN
    }

    /// Completes this PE's outstanding operations, then synchronizes every PE
    /// (`shmem_barrier_all`): after it, every PE sees every put issued before it.
    ///
    /// # Errors
    /// As [`DataPlane::sync_all`].
    ///
    /// Cancel safety: not cancel safe; dropped midway (or failing midway), it leaves this PE
    /// out of step with the others, so every later `sync_all` and `barrier_all` of the PE
    /// fails (with [`Error::Desynchronized`] after a cancellation).
    pub async fn barrier_all(&self) -> Result<()> {
        self.quiet().await?;
        self.sync_all().await
    }
}
