//! A team's call records: what keeps mismatched or abandoned collectives from waiting forever.
//!
//! Every member numbers its collectives on a team alike (one number per call, whatever the
//! algorithm) and keeps a record of its last [`RING`] calls in its own control region: the
//! number, the call's descriptor, and how the call ended if it did not run: given up
//! (cancelled, or failed midway) or refused (its arguments failed this member's own checks;
//! such a call takes its number too, and leaves the team usable when every member refused
//! it alike; see [`Team::refuse_on`] for one that refused alone). A wait of a collective that
//! sleeps reads the records of the other members when it falls asleep and when it wakes (at
//! least every 10 ms, at most every 2 ms), and ends the call with
//! [`Error::CollectiveMismatch`] when
//!
//! - a member gave up or refused this call, or gave up an earlier one, or has begun to
//!   finalize without making this call, and so will never come to it: at once;
//! - every member has made this call, one of them with another descriptor (another
//!   collective, root, reduction or size), and this PE is still waiting [`MISMATCH_GRACE`]
//!   later: the calls chose algorithms that never meet (an eager 64-byte reduction against a
//!   reduce-scatter of 128 KiB), whereas calls that meet report the mismatch through their
//!   own protocol well within that time and keep the team usable.
//!
//! Either way this PE gives its own call up too, so the members waiting on it learn of it in
//! turn. A team split, which agrees through the control plane, watches the records the same
//! way while it waits there. A destroy stops reading them once every member has agreed to
//! it, since members then hand their regions (and records) back.
//!
//! A call of the world team also fails when a member that has not made it stays, for
//! [`MISMATCH_GRACE`], in a world barrier (`barrier_all`, `sync_all`) that this PE has not
//! begun: both are world collectives, called in different orders. (Like OpenSHMEM, where
//! `shmem_barrier_all` is a call of the world team, this takes a PE's world collectives to
//! come in the same order as on the other PEs; a PE that runs a world barrier and world-team
//! calls at once from different tasks risks the error if one task stalls for that long.)
//!
//! Not caught: a member that never makes the call and has not begun to finalize (its last
//! record is an earlier, finished call, as for a slow PE), for instance one that finished a
//! mismatched call without waiting (an eager broadcast root) and calls nothing more on the
//! team, or one blocked in another team's call, or (for teams other than the world team) in
//! a world barrier. A PE waiting in
//! a world barrier does not read the records: it completes once the PE it waits for gives
//! its call up and comes to the barrier, or fails with the job. A `destroy` dropped after
//! every member agreed to it leaves the others waiting in its second sync.
//!
//! A record is one word (the call's number modulo 2^24, the given-up, refused and written
//! bits, and a 37-bit digest of the descriptor), so that every conclusion rests on one
//! atomic read; the descriptor itself sits in the next word, for error messages only.
//! Writing a record is two stores to this PE's own line, so it costs a collective next to
//! nothing; peers read it only while they sleep.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Team, WORLD_ID};
use crate::collectives::{Collective, Descriptor, Kind};
use crate::error::{Error, Result};
use crate::route::Route;
use crate::segment::{Segment, HEADER_SIZE};

/// Calls a member keeps records of (a broadcast root may run a few calls ahead: up to about
/// four of a member on another node in a broadcast by node, two slots to its leader and two
/// from it; a member that finds only later calls in a record takes the writer as ahead).
pub(crate) const RING: usize = 4;
/// Bytes of one record: the record word, then the descriptor.
pub(crate) const RECORD_BYTES: usize = 16;
/// How long a waiter tolerates a member that made this call with another descriptor (or, on
/// the world team, one that stays in a world barrier without making this call) before it
/// concludes that their calls cannot meet.
pub const MISMATCH_GRACE: Duration = Duration::from_millis(100);

/// How often a sleeping waiter reads the other members' records at most.
const READ_EVERY: Duration = Duration::from_millis(2);

/// Bits of the call number a record keeps.
const NUMBER_BITS: u32 = 24;
const NUMBER_MASK: u64 = (1 << NUMBER_BITS) - 1;
/// Set once the member gave the call up.
const GAVE_UP: u64 = 1 << 39;
/// Set when the member's arguments failed its own checks: it does not take part in the call
/// (see [`Team::refuse_on`]).
const REFUSED: u64 = 1 << 38;
/// Set in every record written (a zeroed region holds none).
const WRITTEN: u64 = 1 << 37;
const DIGEST_MASK: u64 = WRITTEN - 1;
/// The bits that say how a call ended rather than which call it is.
const ENDING: u64 = GAVE_UP | REFUSED;

/// One member's record of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record(u64);

impl Record {
    fn new(call: u64, desc: u64) -> Record {
        let digest = (desc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 27) & DIGEST_MASK;
        Record((call & NUMBER_MASK) << 40 | WRITTEN | digest)
    }

    fn written(self) -> bool {
        self.0 & WRITTEN != 0
    }

    fn number(self) -> u64 {
        self.0 >> 40
    }

    fn gave_up(self) -> bool {
        self.0 & GAVE_UP != 0
    }

    fn refused(self) -> bool {
        self.0 & REFUSED != 0
    }

    fn same_call_as(self, other: Record) -> bool {
        (self.0 & !ENDING) == (other.0 & !ENDING)
    }

    /// How many calls this record's number lies behind `number` (0: the same call; `None`
    /// when it lies ahead).
    fn behind(self, number: u64) -> Option<u64> {
        let d = number.wrapping_sub(self.number()) & NUMBER_MASK;
        (d < 1 << (NUMBER_BITS - 1)).then_some(d)
    }
}

/// A record read from a peer, with its descriptor when it could be read consistently.
#[derive(Debug, Clone, Copy)]
struct Seen {
    record: Record,
    desc: Option<u64>,
}

impl Seen {
    /// A record read as `before`, then its descriptor `desc`, then the record again as
    /// `after`: the descriptor counts when the record did not change meanwhile (the
    /// descriptor is written before its record: it may already be the next call's).
    fn read(before: u64, desc: u64, after: u64) -> Seen {
        let (before, after) = (Record(before), Record(after));
        let consistent =
            before.same_call_as(after) && Record::new(after.number(), desc).same_call_as(after);
        Seen {
            record: after,
            desc: consistent.then_some(desc),
        }
    }

    fn describe(&self) -> String {
        self.desc
            .map_or_else(|| "another collective".into(), Descriptor::describe)
    }
}

/// What a sleeping waiter has concluded so far about the other members.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Since when a suspicion has held (a member made this call with another descriptor, or
    /// stays in a world barrier without making it).
    suspect_since: Option<Instant>,
    /// When the records were last read.
    last_read: Option<Instant>,
}

/// Where another member stands with respect to this PE's current call.
#[derive(Debug, Clone, Copy)]
enum Standing {
    /// It made this call, with the same descriptor.
    Here,
    /// It made this call with another descriptor.
    Other(Seen),
    /// It is past this call.
    Ahead,
    /// It has not made this call yet; on the world team, the world barrier it is in when
    /// this PE has not begun that barrier.
    Behind(Option<u64>),
}

impl Team {
    /// Numbers this PE's next call on the team, of descriptor `desc`, and records it
    /// (as refused when `refused`).
    pub(crate) fn record_call(&self, desc: u64, refused: bool) -> u64 {
        let call = super::bump(&self.inner.counters.calls);
        let at = self.inner.layout.call(call);
        let refused = if refused { REFUSED } else { 0 };
        self.local(at + 8).store(desc, Ordering::Relaxed);
        self.local(at)
            .store(Record::new(call, desc).0 | refused, Ordering::Release);
        call
    }

    /// Hands back the outcome of a collective's argument checks. When they failed on this
    /// PE, the call is recorded as refused (if the team could have run it), so that members
    /// which did make the call fail instead of waiting for this PE. A refused call also
    /// takes the sequence number that every algorithm but the sync-first ones (and the
    /// pairwise `alltoall`) takes: when every member refuses alike, their counters stay in
    /// step and the team usable; when this PE refused alone, the eager messages the others
    /// sent it in that call carry another number than its next call's, which then fails
    /// instead of taking them.
    pub(crate) fn refuse_on<T>(&self, kind: Kind, checks: Result<T>) -> Result<T> {
        if checks.is_err() {
            self.record_refusal(kind);
        }
        checks
    }

    /// Hands back `checks`, the caller's own checks of the arguments of a collective
    /// `which` it is about to make (the C library's, for a pointer outside the symmetric
    /// heap or a count that overflows). Where they failed, this member takes its part in
    /// the call as a refusal, as one whose arguments fail the team's own checks, so that
    /// the members that made it fail with [`Error::CollectiveMismatch`] naming this PE
    /// instead of waiting for it, and a call every member refused alike leaves the team
    /// usable.
    ///
    /// A team that cannot run a collective now (destroyed, this PE finalizing, or busy with
    /// another of this PE's collectives) records nothing.
    pub fn refuse_unless_ok<T>(&self, which: Collective, checks: Result<T>) -> Result<T> {
        self.refuse_on(which.kind(), checks)
    }

    /// Records this PE's next call on the team, of `kind`, as refused (see
    /// [`Team::refuse_on`]).
    fn record_refusal(&self, kind: Kind) {
        if let Ok(op) = self.begin_recorded(Descriptor::of(kind, 0, 0), true) {
            op.next_seq();
            op.finish();
        }
    }

    /// Marks this PE's call `call` given up.
    pub(crate) fn record_gave_up(&self, call: u64) {
        self.local(self.inner.layout.call(call))
            .fetch_or(GAVE_UP, Ordering::Release);
    }

    /// The records of the member whose segment is `peer`, each with its descriptor when the
    /// record did not change while it was read.
    fn peer_records(&self, peer: &Segment) -> [Seen; RING] {
        std::array::from_fn(|k| {
            let at = HEADER_SIZE + self.inner.base + self.inner.layout.call(k as u64);
            let word = peer.mapping().atomic::<AtomicU64>(at);
            let before = word.load(Ordering::Acquire);
            let desc = peer
                .mapping()
                .atomic::<AtomicU64>(at + 8)
                .load(Ordering::Acquire);
            Seen::read(before, desc, word.load(Ordering::Acquire))
        })
    }

    /// Member `j`'s records, whether it has begun to finalize, and how many world barriers
    /// it has begun: read now when it is mapped here, else its latest snapshot (`None`
    /// before the first), where a member the control plane said finalized and left counts
    /// as finalizing, snapshot or not (its process may be gone, its records unreadable).
    fn member_state(&self, j: usize) -> Result<Option<([Seen; RING], bool, u64)>> {
        Ok(match self.dp().route(self.pe(j))? {
            Route::Mapped(peer) => Some((
                self.peer_records(peer),
                peer.finalizing().load(Ordering::Acquire) != 0,
                peer.barriers_begun().load(Ordering::Acquire),
            )),
            Route::Remote => {
                let left = self.dp().health().has_finished(self.pe(j));
                match self.remote_snapshot(j) {
                    Some(s) => {
                        let seen = s
                            .records
                            .map(|(before, desc, after)| Seen::read(before, desc, after));
                        Some((seen, s.finalizing != 0 || left, s.barriers_begun))
                    }
                    None if left => Some(([Seen::read(0, 0, 0); RING], true, 0)),
                    None => None,
                }
            }
        })
    }

    /// Where member `j` stands with respect to this PE's call `mine`.
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] when `j` will never make this call: it gave it (or an
    /// earlier one) up, refused it, or has begun to finalize without it.
    fn standing(&self, j: usize, mine: Record) -> Result<Standing> {
        let Some((seen, finalizing, barrier)) = self.member_state(j)? else {
            return Ok(Standing::Behind(None));
        };
        let written = seen.iter().filter(|s| s.record.written());
        let number = mine.number();
        if let Some(s) = written.clone().find(|s| s.record.behind(number) == Some(0)) {
            if s.record.gave_up() || s.record.refused() {
                return Err(gave_up(j, s, number, true));
            }
            return Ok(if s.record.same_call_as(mine) {
                Standing::Here
            } else {
                Standing::Other(*s)
            });
        }
        // A member ahead of this call cannot have given an earlier one up (a team it gave a
        // call up on takes no more calls); one behind may have.
        if written.clone().any(|s| s.record.behind(number).is_none()) {
            return Ok(Standing::Ahead);
        }
        let latest = written
            .filter_map(|s| s.record.behind(number).map(|d| (d, s)))
            .min_by_key(|&(d, _)| d);
        if let Some((_, s)) = latest.filter(|(_, s)| s.record.gave_up()) {
            return Err(gave_up(j, s, s.record.number(), false));
        }
        if finalizing {
            return Err(Error::CollectiveMismatch {
                operation: "team collective",
                detail: format!(
                    "member {j} has finalized without making the team's call {number}, which \
                     this PE is in; the team cannot be used any more"
                ),
            });
        }
        // `barrier_all` and the world team's calls are all world collectives: a member in a
        // world barrier this PE has not begun, without this call, calls them in another
        // order, if that lasts (it may not: it may make the call from another task, or may
        // have made it since its records were read).
        let in_barrier = self.inner.id == WORLD_ID && barrier > self.dp().barriers_begun();
        Ok(Standing::Behind(in_barrier.then_some(barrier)))
    }

    /// Runs `work`, a wait outside the team's region (a team split's control-plane
    /// exchange), failing as a sleeping wait of a collective does when the other members'
    /// records show that this call cannot complete.
    pub(crate) async fn watching<T>(&self, work: impl Future<Output = Result<T>>) -> Result<T> {
        let records = self.wait_for("team split", 0..self.inner.layout.bytes, || false);
        tokio::select! {
            biased;
            done = work => done,
            // Its condition never holds: it ends only with an error.
            stopped = records => Err(stopped.err().unwrap_or(Error::Shutdown)),
        }
    }

    /// Checks member `j`'s records against this PE's current call, for a waiter on work that
    /// `j` alone owes it ([`Team::wait_for_member`]).
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] when `j` will never finish this call: it gave it (or an
    /// earlier one) up, refused it, or has begun to finalize without it.
    pub(crate) fn check_member(&self, j: usize) -> Result<()> {
        let mine = Record(self.local(self.current_record()).load(Ordering::Relaxed));
        self.standing(j, mine).map(drop)
    }

    /// The region offset of this PE's record of its current call.
    fn current_record(&self) -> usize {
        let call = self.inner.counters.calls.load(Ordering::Relaxed);
        self.inner.layout.call(call)
    }

    /// Checks this PE's current call against the other members' records, for a waiter that
    /// sleeps (see the module documentation).
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] when a member gave up, or made this call with another
    /// descriptor and `watch` has seen that for [`MISMATCH_GRACE`].
    pub(crate) fn check_calls(&self, watch: &mut Watch) -> Result<()> {
        if self.inner.leaving.load(Ordering::Relaxed) {
            return Ok(());
        }
        // A sleeper may wake for every peer's write; reading every record each time would
        // cost large teams more than the wait itself.
        let now = Instant::now();
        if watch
            .last_read
            .is_some_and(|last| now.duration_since(last) < READ_EVERY)
        {
            return Ok(());
        }
        watch.last_read = Some(now);
        let at = self.current_record();
        let mine = Record(self.local(at).load(Ordering::Relaxed));
        let my_desc = self.local(at + 8).load(Ordering::Relaxed);
        let me = self.my_pe();
        let mut suspect = None;
        let mut order = None;
        let mut all_here = true;
        for j in (0..self.n_pes()).filter(|&j| j != me) {
            match self.standing(j, mine)? {
                Standing::Here | Standing::Ahead => {}
                Standing::Other(theirs) => {
                    suspect.get_or_insert((j, theirs));
                }
                Standing::Behind(barrier) => {
                    all_here = false;
                    if let Some(barrier) = barrier {
                        order.get_or_insert((j, barrier));
                    }
                }
            }
        }
        // Until every member has made this call, a mismatch may still be caught where the
        // calls meet (a sync), which keeps the team usable: only then does the clock start.
        let suspect = suspect.filter(|_| all_here);
        if suspect.is_none() && order.is_none() {
            watch.suspect_since = None;
            return Ok(());
        }
        let since = *watch.suspect_since.get_or_insert_with(Instant::now);
        if since.elapsed() < MISMATCH_GRACE {
            return Ok(());
        }
        let detail = match (suspect, order) {
            (Some((j, theirs)), _) => format!(
                "member {j} called {} where this PE called {} (the team's call {}), and their \
                 algorithms do not meet; the team cannot be used any more",
                theirs.describe(),
                Descriptor::describe(my_desc),
                mine.number()
            ),
            (None, Some((j, barrier))) => format!(
                "PE {j} is in world barrier {barrier} (barrier_all or sync_all), which this PE \
                 has not begun, and has not made the world team's call {}, which this PE is \
                 in: the PEs call world collectives in different orders; the team cannot be \
                 used any more",
                mine.number()
            ),
            (None, None) => return Ok(()),
        };
        Err(Error::CollectiveMismatch {
            operation: "team collective",
            detail,
        })
    }
}

/// The error of a waiter whose member `j` gave up its call `number` (this PE's current call
/// when `this_call`).
fn gave_up(j: usize, seen: &Seen, number: u64, this_call: bool) -> Error {
    let which = if this_call {
        "this call"
    } else {
        "an earlier call"
    };
    let why = if seen.record.refused() {
        "its arguments failed its own checks"
    } else {
        "it failed or was cancelled midway"
    };
    Error::CollectiveMismatch {
        operation: "team collective",
        detail: format!(
            "member {j} gave up {which} ({}, the team's call {number}): {why}, so it will not \
             take part; the team cannot be used any more",
            seen.describe()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_number_digest_and_state_apart() {
        let r = Record::new(5, 0x4000_0000_0000_0040);
        assert!(r.written() && !r.gave_up());
        assert_eq!(r.number(), 5);
        let given_up = Record(r.0 | GAVE_UP);
        assert!(given_up.gave_up() && given_up.same_call_as(r));
        assert!(!Record::new(5, 0x4000_0000_0000_0080).same_call_as(r));
        assert!(!Record::new(6, 0x4000_0000_0000_0040).same_call_as(r));
        assert!(!Record(0).written());
    }

    #[test]
    fn call_numbers_compare_across_the_wrap() {
        let last = Record::new(NUMBER_MASK, 1);
        assert_eq!(last.behind(NUMBER_MASK), Some(0));
        assert_eq!(
            last.behind(NUMBER_MASK + 1),
            Some(1),
            "numbers wrap at 2^24"
        );
        assert_eq!(Record::new(NUMBER_MASK + 1, 1).number(), 0);
        assert_eq!(Record::new(3, 1).behind(2), None, "a record ahead");
    }
}
