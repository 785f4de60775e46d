//! `sync_all` and `barrier_all` over the segments' header flags: a dissemination barrier,
//! ⌈log₂ n⌉ rounds; in round k PE i signals PE (i + 2^k) mod n and waits for PE
//! (i − 2^k) mod n. Flags are monotonic counters, so no reset is needed between barriers.
//!
//! A PE numbers its barriers in its data plane's barrier word, and every PE must reach the
//! same numbers in step. A barrier left unfinished (its future dropped, or a failure midway)
//! has signalled some peers but not waited for them, so its PE is out of step for good: the
//! barrier's guard then sets the word's broken bit, and every later barrier of the PE fails.
//! The guard also marks the PE's segment header, where a peer whose wait for that PE's
//! signal has gone to sleep reads it: the signal will never come, so the peer's barrier
//! fails too (and breaks in turn, so the PEs waiting for it learn of it the same way).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::segment::Segment;
use crate::wait::Wait;

/// The bit of a PE's barrier word set once one of its barriers was left unfinished; the
/// other bits count the barriers begun.
const BROKEN: u64 = 1 << 63;

/// A barrier in progress on this PE. Dropped before [`InProgress::finish`] (an error midway,
/// or a cancelled future), it marks the PE's world barrier broken.
struct InProgress<'a> {
    word: &'a AtomicU64,
    own: &'a Segment,
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
            // Relaxed: only this PE's later barriers read the word, each with a
            // read-modify-write that comes after this one.
            self.word.fetch_or(BROKEN, Ordering::Relaxed);
            self.own.barrier_broken().store(1, Ordering::Release);
        }
    }
}

impl DataPlane {
    /// Waits until every PE has called `sync_all` (`shmem_sync_all`): a pure synchronization,
    /// it completes no outstanding operation.
    ///
    /// Collective: every PE calls it, one call at a time per PE.
    ///
    /// # Errors
    /// [`Error::PeerLost`] (or the job's other failure) when the job has failed;
    /// [`Error::InvalidArgument`] at once when an earlier `sync_all` or `barrier_all` of this
    /// PE was left unfinished; [`Error::CollectiveMismatch`] when a PE whose signal it waits
    /// for left one unfinished (it will never signal again).
    ///
    /// Cancel safety: not cancel safe; dropped midway (or failing midway), it leaves this PE
    /// out of step with the others, so every later `sync_all` and `barrier_all` of the PE
    /// fails with [`Error::InvalidArgument`].
    pub async fn sync_all(&self) -> Result<()> {
        let started = self.traffic.barrier_start();
        let result = self.dissemination().await;
        self.traffic.barrier_done(started, &result);
        result
    }

    /// The dissemination barrier behind [`DataPlane::sync_all`].
    async fn dissemination(&self) -> Result<()> {
        let n = self.n_pes();
        let epoch = self.barrier_epoch.fetch_add(1, Ordering::Relaxed) + 1;
        if epoch & BROKEN != 0 {
            self.health.check()?;
            return Err(Error::InvalidArgument(
                "a barrier of this PE was cancelled or failed midway, so the PEs no longer agree: this PE's world barrier cannot be used".into(),
            ));
        }
        let own = self.own_segment();
        own.barriers_begun().store(epoch, Ordering::Release);
        let barrier = InProgress {
            word: &self.barrier_epoch,
            own,
            finished: false,
        };
        let mut distance = 1;
        let mut round = 0;
        while distance < n {
            let to = &self.segments[(self.my_pe + distance) % n];
            to.barrier_flag(round).fetch_add(1, Ordering::SeqCst);
            let at = Segment::barrier_flag_offset(round);
            to.wake_watchers(at, at + 8);
            let flag = own.barrier_flag(round);
            let from = (self.my_pe + n - distance) % n;
            let broken = self.segments[from].barrier_broken();
            let mut stalled = || {
                // A PE may signal and break afterwards: only a missing signal is final.
                if broken.load(Ordering::Acquire) == 0 || flag.load(Ordering::Acquire) >= epoch {
                    return Ok(());
                }
                Err(Error::CollectiveMismatch {
                    operation: "barrier",
                    detail: format!(
                        "PE {from} left a world barrier unfinished (cancelled or failed \
                         midway), so it will not come to this one; this PE's world barrier \
                         cannot be used any more"
                    ),
                })
            };
            Wait::new(
                self,
                "barrier",
                at..at + 8,
                Ok(move || (flag.load(Ordering::Acquire) >= epoch).then_some(())),
            )
            .on_stall(&mut stalled)
            .await?;
            distance *= 2;
            round += 1;
        }
        barrier.finish();
        self.health.check()
    }

    /// Tells the other PEs that this PE has begun to finalize: it will make no more collective
    /// calls, so a team call waiting for one it has not made fails instead of waiting.
    pub fn mark_finalizing(&self) {
        self.own_segment().finalizing().store(1, Ordering::Release);
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
    /// fails with [`Error::InvalidArgument`].
    pub async fn barrier_all(&self) -> Result<()> {
        self.quiet().await?;
        self.sync_all().await
    }
}
