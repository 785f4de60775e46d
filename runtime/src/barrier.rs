//! `sync_all` and `barrier_all` over the segments' header flags: a dissemination barrier,
//! ⌈log₂ n⌉ rounds; in round k PE i signals PE (i + 2^k) mod n and waits for PE
//! (i − 2^k) mod n. Flags are monotonic counters, so no reset is needed between barriers.
//!
//! # By node
//!
//! A job that spans nodes with more than one PE on some node syncs by node instead: each
//! PE adds one to its node leader's gather flag (mapped memory) and waits for the leader's
//! release; each leader (its node's lowest PE) waits until its gather flag counts every
//! other PE of its node, runs the dissemination above among the leaders only (⌈log₂
//! nodes⌉ rounds across the fabric), then releases its node. A one-node job whose PEs
//! outnumber the CPUs they may use ([`crate::cpus`]) syncs the same way, as one node: where
//! each round waits for a PE that may have no CPU, a gather and a release cost fewer trips
//! through the scheduler than the dissemination's rounds, and the leader leaves first, so
//! what it does next (often a broadcast from PE 0) is under way when the others leave.
//! Other one-node jobs, and jobs of one PE per node, keep the flat dissemination.
//!
//! # Across nodes
//!
//! A signal to a PE on another node is a write of the barrier's number into the flag, which
//! wakes the target as it lands (see `arrived` for why reading it is sound), and the barrier
//! goes on without waiting for the write to be acknowledged (a flag, complete once sent,
//! which the target does not acknowledge): n PEs meet after ⌈log₂ n⌉ one-way trips, not
//! round trips. The writes' completions are checked by later barriers; the PE's final
//! barrier writes ones that complete once landed, and awaits them.
//!
//! # Broken and finalized barriers
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
//!
//! A peer on another node reads those header words through the remote transport, at most
//! every 10 ms while it sleeps, and learns from the control plane when a PE has finalized
//! and left (its process may be gone, its header unreadable). A signal sent before its PE
//! broke or left may still travel then, so there the verdict waits until the signal is
//! still missing [`MISMATCH_GRACE`] after the verdict was first reached. A signal delayed
//! longer than that (a fabric retransmitting) fails a barrier that a mapped peer's would
//! have passed: the barrier is broken on that PE then, which the job's other PEs learn.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::route::{RemoteOp, Route};
use crate::segment::{Segment, BARRIER_ROUNDS};
use crate::team::shape::NodeShape;
use crate::team::MISMATCH_GRACE;
use crate::wait::Wait;

/// The bit of a PE's barrier word set once one of its barriers was left unfinished; the
/// other bits count the barriers begun.
const BROKEN: u64 = 1 << 63;

/// The barrier flag where a node's leader counts its node's arrivals, in a barrier by node;
/// the leaders' dissemination needs ⌈log₂ nodes⌉ < 62 flags, from round 0 up.
const GATHER: usize = BARRIER_ROUNDS - 1;

/// The barrier flag where a node's leader signals each PE of its node that it may leave,
/// in a barrier by node.
const RELEASE: usize = BARRIER_ROUNDS - 2;

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

/// What a PE's header says of its world barriers, for a peer waiting for its signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BarrierWords {
    /// Whether it left one of its world barriers unfinished.
    broken: bool,
    /// Its final barrier's number once it has begun to finalize, else 0.
    finalizing: u64,
}

impl BarrierWords {
    /// The words of a mapped peer's header.
    fn of(peer: &Segment) -> BarrierWords {
        BarrierWords {
            broken: peer.barrier_broken().load(Ordering::Acquire) != 0,
            finalizing: peer.finalizing().load(Ordering::Acquire),
        }
    }

    /// The words of a remote read of [`REMOTE_WORDS_BYTES`] at
    /// [`Segment::BARRIER_BROKEN_OFFSET`] (the broken word, the barriers begun, the final
    /// barrier's number); `None` for a read of another length.
    fn from_bytes(bytes: &[u8]) -> Option<BarrierWords> {
        let word = |i: usize| {
            let raw: [u8; 8] = bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?;
            Some(u64::from_ne_bytes(raw))
        };
        (bytes.len() == REMOTE_WORDS_BYTES).then_some(())?;
        Some(BarrierWords {
            broken: word(0)? != 0,
            finalizing: word(2)?,
        })
    }
}

/// Bytes of a remote read of a peer's barrier words: from its broken word to its final
/// barrier's number.
const REMOTE_WORDS_BYTES: usize = 24;
const _: () = assert!(
    Segment::BARRIERS_BEGUN_OFFSET == Segment::BARRIER_BROKEN_OFFSET + 8
        && Segment::FINALIZING_OFFSET == Segment::BARRIERS_BEGUN_OFFSET + 8
);

/// How often a waiter reads the barrier words of a peer on another node at most.
const REMOTE_REFRESH: Duration = Duration::from_millis(10);

/// A sleeping waiter's readings of the barrier words of the peer on another node whose
/// signal it waits for: the latest, whether a read is in flight, when the last began, and
/// since when the readings say the signal will never come.
#[derive(Debug, Default)]
struct RemoteWords {
    latest: Option<BarrierWords>,
    reading: bool,
    started: Option<Instant>,
    never_since: Option<Instant>,
}

/// Why PE `pe`, whose header holds `words`, will never signal this PE's world barrier
/// `epoch`, if its header says so: it left one of its barriers unfinished, or it finalized at
/// an earlier barrier.
fn never_signals(words: BarrierWords, pe: usize, epoch: u64) -> Result<()> {
    let detail = if words.broken {
        format!(
            "PE {pe} left a world barrier unfinished (cancelled or failed midway), so it will \
             not come to this one"
        )
    } else {
        match words.finalizing {
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

/// Fails when PE `pe`, whose header holds `words`, has not `signalled` world barrier `epoch`
/// and never will (see [`never_signals`]). A PE may signal and break or finalize
/// afterwards, so the signal is looked for again after its header was read: only a missing
/// signal is final.
fn missed(words: BarrierWords, pe: usize, epoch: u64, signalled: impl Fn() -> bool) -> Result<()> {
    if signalled() {
        return Ok(());
    }
    match never_signals(words, pe, epoch) {
        Err(_) if signalled() => Ok(()),
        other => other,
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

    /// The protocol of world barrier `epoch`: by node when the job's shape asks for it, the
    /// dissemination among all PEs otherwise.
    async fn rounds(&self, epoch: u64) -> Result<()> {
        match &self.world_nodes {
            Some(shape) => self.by_node(shape, epoch).await?,
            None => {
                let n = self.n_pes();
                self.disseminate((n, |i| i), self.my_pe, epoch).await?;
            }
        }
        self.barrier_signals_ended(epoch).await
    }

    /// The dissemination among a group of `n` PEs, the one at position `p` being PE
    /// `pe(p)` and this one at position `at`, over the barrier flags of rounds
    /// 0..⌈log₂ n⌉.
    async fn disseminate(
        &self,
        (n, pe): (usize, impl Fn(usize) -> usize),
        at: usize,
        epoch: u64,
    ) -> Result<()> {
        let mut distance = 1;
        let mut round = 0;
        while distance < n {
            let offset = Segment::barrier_flag_offset(round);
            self.signal_barrier(pe((at + distance) % n), offset, epoch);
            self.await_signal(round, pe((at + n - distance) % n), epoch)
                .await?;
            distance *= 2;
            round += 1;
        }
        Ok(())
    }

    /// The barrier by node: every PE but its node's leader signals the leader's gather flag
    /// and waits for its release; the leader waits for its node, runs the dissemination
    /// among the leaders (across the fabric), then releases its node.
    async fn by_node(&self, shape: &NodeShape, epoch: u64) -> Result<()> {
        let group = shape.group_of(self.my_pe);
        let members = shape.members(group);
        let leader = members[0];
        if self.my_pe != leader {
            self.signal_barrier(leader, Segment::barrier_flag_offset(GATHER), epoch);
            return self.await_signal(RELEASE, leader, epoch).await;
        }
        let others = &members[1..];
        self.await_gather(others, epoch).await?;
        let leaders = shape.leaders();
        self.disseminate((leaders.len(), |g| leaders[g]), group, epoch)
            .await?;
        for &member in others {
            self.signal_barrier(member, Segment::barrier_flag_offset(RELEASE), epoch);
        }
        Ok(())
    }

    /// Waits for PE `from`'s signal of world barrier `epoch` in this PE's barrier flag
    /// `slot`, of which it is the only signaller.
    async fn await_signal(&self, slot: usize, from: usize, epoch: u64) -> Result<()> {
        let flag = self.own_segment().barrier_flag(slot);
        // A mapped peer's header is read with loads; one on another node's through the
        // remote transport, or the control plane's word that it left (`missed_remotely`).
        let peer = match self.route(from)? {
            Route::Mapped(peer) => Some(&**peer),
            Route::Remote => None,
        };
        let remote = peer.is_none();
        let signalled = move || arrived(flag.load(Ordering::Acquire), epoch, remote);
        // Made when the wait first stalls: most waits end before, and an allocation on
        // every barrier round made the collectives timed after one slower.
        let mut readings = None;
        let mut stalled = || match peer {
            Some(peer) => missed(BarrierWords::of(peer), from, epoch, signalled),
            None => {
                let readings = readings.get_or_insert_with(Default::default);
                self.missed_remotely(from, epoch, readings, signalled)
            }
        };
        let at = Segment::barrier_flag_offset(slot);
        Wait::new(
            self,
            "barrier",
            at..at + 8,
            Ok(|| signalled().then_some(())),
        )
        .on_stall(&mut stalled)
        .await
    }

    /// [`missed`] for PE `from` on another node: from the control plane's word that it
    /// finalized and left (after its final barrier, so it signals no later one), else from
    /// the latest of `readings` of its barrier words (starting the next read when it is
    /// due). A signal sent before the PE broke its barrier or left may still travel when
    /// this PE learns of it, so the verdict stands only once the signal is still missing
    /// [`MISMATCH_GRACE`] after the verdict was first reached.
    fn missed_remotely(
        &self,
        from: usize,
        epoch: u64,
        readings: &Arc<Mutex<RemoteWords>>,
        signalled: impl Fn() -> bool,
    ) -> Result<()> {
        let verdict = if self.health.has_finished(from) {
            Err(Error::CollectiveMismatch {
                operation: "barrier",
                detail: format!(
                    "PE {from} has finalized and left the job without coming to world barrier \
                     {epoch} (the PEs made different numbers of world barriers); this PE's \
                     world barrier cannot be used any more"
                ),
            })
        } else {
            self.read_barrier_words(from, readings);
            match lock(readings).latest {
                Some(words) => never_signals(words, from, epoch),
                None => Ok(()),
            }
        };
        let Err(never) = verdict else {
            return Ok(());
        };
        if signalled() {
            return Ok(());
        }
        let since = *lock(readings).never_since.get_or_insert_with(Instant::now);
        match since.elapsed() >= MISMATCH_GRACE {
            true => Err(never),
            false => Ok(()),
        }
    }

    /// Starts a read of PE `from`'s barrier words through the remote transport into
    /// `readings`, unless one is in flight or the last began less than [`REMOTE_REFRESH`]
    /// ago (or no tokio runtime runs this code: the words are then never known).
    fn read_barrier_words(&self, from: usize, readings: &Arc<Mutex<RemoteWords>>) {
        let now = Instant::now();
        {
            let mut r = lock(readings);
            let due = !r.reading
                && r.started
                    .is_none_or(|t| now.duration_since(t) >= REMOTE_REFRESH);
            if !due {
                return;
            }
            r.reading = true;
            r.started = Some(now);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            lock(readings).reading = false;
            return;
        };
        let at = Segment::BARRIER_BROKEN_OFFSET;
        let read = self.remote(Op::Get, from, REMOTE_WORDS_BYTES, at, || {
            RemoteOp::Get(REMOTE_WORDS_BYTES)
        });
        let readings = readings.clone();
        runtime.spawn(async move {
            let words = read.await.ok().and_then(|b| BarrierWords::from_bytes(&b));
            let mut r = lock(&readings);
            r.reading = false;
            if words.is_some() {
                r.latest = words;
            }
        });
    }

    /// Waits until every PE of `others` (this PE's node, which this PE leads) has signalled
    /// world barrier `epoch` in this PE's gather flag: each adds one per barrier.
    async fn await_gather(&self, others: &[usize], epoch: u64) -> Result<()> {
        if others.is_empty() {
            return Ok(());
        }
        let flag = self.own_segment().barrier_flag(GATHER);
        let all = epoch.wrapping_mul(others.len() as u64);
        let mut stalled = || {
            for &pe in others {
                if let Route::Mapped(peer) = self.route(pe)? {
                    // A member signals right after counting the barrier as begun.
                    let begun = || peer.barriers_begun().load(Ordering::Acquire) >= epoch;
                    missed(BarrierWords::of(peer), pe, epoch, begun)?;
                }
            }
            Ok(())
        };
        let at = Segment::barrier_flag_offset(GATHER);
        Wait::new(
            self,
            "barrier",
            at..at + 8,
            Ok(|| (flag.load(Ordering::Acquire) >= all).then_some(())),
        )
        .on_stall(&mut stalled)
        .await
    }

    /// Signals world barrier `epoch` in the barrier flag at mapping offset `at` of PE `to`:
    /// adds one to it on a mapped route (waking a sleeper there); on a remote one, writes
    /// `epoch` into it (a write wakes the target's sleepers as it lands, where an atomic would
    /// need a notice after it) and keeps the write's completion for later barriers to check.
    ///
    /// Either way a dissemination or release flag ends up holding `epoch`: it has a single
    /// signaller (in round k, PE i is signalled by PE i − 2^k only; a PE by its leader),
    /// which signals every barrier once. A gather flag, signalled by every other PE of the
    /// node (all mapped), ends up holding `epoch` times their number.
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
                // A flag, complete once sent; the final barrier's complete once landed, so that
                // none is lost when the PE closes its endpoint after it.
                let last = self.own_segment().finalizing().load(Ordering::Acquire) == epoch;
                let flag = epoch.to_ne_bytes().to_vec();
                let write = move || match last {
                    true => RemoteOp::Put(flag),
                    false => RemoteOp::PutFlag(flag),
                };
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
    /// As [`DataPlane::sync_all`]; the error of the completion ([`DataPlane::quiet`]'s),
    /// reported after the synchronization, which takes place all the same (the other PEs
    /// are not left waiting for this one).
    ///
    /// Cancel safety: not cancel safe; dropped midway (or failing midway), it leaves this PE
    /// out of step with the others, so every later `sync_all` and `barrier_all` of the PE
    /// fails (with [`Error::Desynchronized`] after a cancellation).
    pub async fn barrier_all(&self) -> Result<()> {
        let quieted = self.quiet().await;
        let synced = self.sync_all().await;
        quieted.and(synced)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::cpus::CpuShare;
    use crate::data_plane::{DataPlane, DataPlaneParts};
    use crate::health::Health;
    use crate::heap::HeapId;
    use crate::route::Route;
    use crate::segment::Segment;

    /// The data planes of one node's PEs, PE `i` recorded as running on `cpus[i]`.
    fn node_of(cpus: &[&[usize]]) -> Vec<Arc<DataPlane>> {
        let segments: Vec<Arc<Segment>> = (0..cpus.len())
            .map(|pe| {
                let segment = Segment::create(pe, 1 << 16).expect("segment");
                segment.record_cpu_share(&CpuShare::of_cpus(cpus[pe]));
                Arc::new(segment)
            })
            .collect();
        (0..cpus.len())
            .map(|my_pe| {
                let parts = DataPlaneParts {
                    my_pe,
                    heap: HeapId(1),
                    routes: segments.iter().cloned().map(Route::Mapped).collect(),
                    remote: None,
                    nodes: vec![0; cpus.len()],
                    machine_pes: cpus.len(),
                    health: Arc::new(Health::new()),
                    spin: Duration::from_micros(50),
                };
                Arc::new(DataPlane::new(parts).expect("data plane"))
            })
            .collect()
    }

    /// Runs `rounds` world barriers on every PE of `pes` at once.
    async fn barriers(pes: &[Arc<DataPlane>], rounds: usize) {
        let tasks: Vec<_> = pes
            .iter()
            .map(|pe| {
                let pe = pe.clone();
                tokio::spawn(async move {
                    for _ in 0..rounds {
                        pe.barrier_all().await?;
                    }
                    Ok::<(), crate::error::Error>(())
                })
            })
            .collect();
        for task in tasks {
            let done = tokio::time::timeout(Duration::from_secs(10), task).await;
            assert!(matches!(done, Ok(Ok(Ok(())))), "{done:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crowded_node_gathers_at_its_leader_and_every_pe_agrees() {
        let crowded = node_of(&[&[0], &[0], &[0], &[0]]);
        assert!(crowded
            .iter()
            .all(|pe| pe.crowded() && pe.world_nodes.is_some()));
        barriers(&crowded, 200).await;
        let leader = crowded[0].own_segment();
        let gather = leader
            .barrier_flag(super::GATHER)
            .load(super::Ordering::Acquire);
        assert_eq!(
            gather,
            3 * 200,
            "each of 3 PEs signals the leader every barrier"
        );

        // One PE may use four CPUs, the others one: together they are not crowded, and
        // every PE reads the same records, so none syncs by node.
        let roomy = node_of(&[&[0, 1, 2, 3], &[0], &[0], &[0]]);
        assert!(roomy
            .iter()
            .all(|pe| !pe.crowded() && pe.world_nodes.is_none()));
        barriers(&roomy, 200).await;
        let flag = roomy[0].own_segment().barrier_flag(super::GATHER);
        assert_eq!(flag.load(super::Ordering::Acquire), 0);
    }
}
