//! The pairwise `alltoall`: on a team of one node that syncs flat, each pair of members
//! moves its two blocks once, and the member that claims the pair second moves both.
//!
//! # Protocol
//! Each member posts its arrival (with its descriptor) to every other member, as the flat
//! entry does, copies its own block, then claims each pair it belongs to, on the pair's
//! claim word (`Layout::claim_word` of the higher-numbered member, in the lower-numbered
//! one's region), by compare-and-swap. In the call whose entry sync has epoch `e` the
//! claim word takes three values, above those of earlier calls: `4e` (claimed), `4e + 1`
//! (moving) and `4e + 3` (withdrawn). A member that finds less than `4e` there claims
//! first and raises it to `4e`. One that finds `4e` comes second, and the first member's
//! arrival is then visible to it (posted before the first claim): if the first passed the
//! same descriptor, it raises the word to `4e + 1`, writes its block into the first's
//! `dest`, reads the first's block from the first's `source` into its own `dest`, and
//! marks the pair done: `4e + 2` into the first member's pair word for it
//! (`Layout::pair_word`, in the first's sync lines). The first waits for that mark only:
//! the claims lie outside the lines it watches, so they wake no one. Its buffers are done
//! with once the mark comes. A member whose pairs all found their other member in the call
//! returns without waiting at all.
//!
//! Words only grow, and a mark or a claim of another call never passes for this one's: no
//! counter other than the sync epoch (which every sync takes, matched or not) is used.
//! Marks are atomic sets through the data plane, never posts: a pair word is the last of
//! its line, where a post to another node would put its value past the line.
//!
//! # Failures
//! A first member whose call fails after it claimed (a member gave the call up, the job
//! failed) takes its claims back before it returns, so that nothing is written into its
//! `dest` after the call: it raises the claim word of each pair it claimed first from `4e`
//! to `4e + 3`, and a second member that comes later moves nothing and fails the call too
//! (giving it up, and withdrawing its own first claims); where the second is already moving
//! (`4e + 1`), it waits until that member's mark comes, the job fails, or that member gives
//! the call up. Two ends are left open: a job that fails (a PE lost) ends that wait and
//! may leave a live mover writing, and a call dropped midway (cancelled) withdraws its
//! pairs at once, without waiting, so that a second member already moving may still write
//! into its `dest` then.
//!
//! # Why
//! The flat form (enter, read every block in place, sync) takes two waits per call: for the
//! sources' owners to enter, and for the readers to finish. When PEs outnumber CPUs each
//! wait is a trip through the scheduler, and a member cannot read from one that is not
//! running. Here a running member does all the work of its pairs with members already in
//! the call, and one wait covers the rest; every block is copied once (the eager form
//! copies twice, through the receivers' slots).
//!
//! # Mismatches
//! A second member that finds another descriptor moves nothing and leaves the pair at the
//! first claim, unmarked (a mark could land after the first member has gone on to its next
//! call). A first member judges by the other's arrival at this call's sync (the other
//! cannot post a sync after its next one before this member has posted its own next one,
//! so that arrival stays in place), and stops waiting for a member that arrived there with
//! another descriptor (another collective called there). Both members report the mismatch,
//! and the team stays usable, as after a flat call: a member that has gone on to a later
//! pairwise call has raised the claim word past this call's values, which then only makes
//! the late member first, never overwrites the later claim.

use std::ops::Range;
use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::bytes_of;
use super::sync::judge;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::landing::Landing;
use crate::team::region::LINE;
use crate::team::{Op, Team};

/// The values of a pair's words in the call whose entry sync has `epoch`: above every
/// value of an earlier call's, so that words only grow.
#[derive(Debug, Clone, Copy)]
struct PairStates {
    /// The first member's claim.
    claimed: u64,
    /// The second member's claim, over the first's: it moves both blocks.
    moving: u64,
    /// The second member's mark, in the first member's pair word: both blocks have moved.
    done: u64,
    /// The first member's withdrawal, over its own claim, when its call failed first.
    withdrawn: u64,
}

impl PairStates {
    fn of(epoch: u64) -> PairStates {
        let claimed = 4 * epoch;
        PairStates {
            claimed,
            moving: claimed + 1,
            done: claimed + 2,
            withdrawn: claimed + 3,
        }
    }
}

/// How a member's claim of its pair with another ended.
#[derive(Debug, Clone, Copy)]
enum Claim {
    /// It claimed first (or the other member has gone on to a later call after a mismatch
    /// of this one): it waits for the pair to settle.
    First,
    /// It claimed second, over the first member's claim of the same call: it moves both
    /// blocks, then marks the pair done.
    Second,
    /// It came second to a member whose call differs (the descriptors of that member's
    /// arrival, lowest and highest): nothing moves.
    Mismatch(u64, u64),
    /// It came second to a member that had withdrawn (its call failed): nothing moves.
    Withdrawn,
}

/// The blocks of one call: `dest`, `source` and the elements per block.
type Blocks<'d, 's, T> = (SymSlice<'d, T>, SymSlice<'s, T>, usize);

impl Team {
    /// [`Team::alltoall`] pairwise (see the module documentation): `nelems` elements per
    /// block, `desc` the call's descriptor.
    pub(crate) async fn exchange_pairwise<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        nelems: usize,
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let epoch = self.announce(op, desc)?;
        let dp = self.dp();
        let own = me * nelems..(me + 1) * nelems;
        let caching = self.alltoall_caching(bytes_of::<T>(nelems));
        dp.get_into(
            dest.slice(own.clone()),
            source.slice(own),
            dp.my_pe(),
            caching,
        )
        .await?;
        let mut claims = FirstClaims {
            team: self,
            epoch,
            waiting: 0,
            open: true,
        };
        let blocks = (dest, source, nelems);
        let mut settled = self
            .move_pairs(op, blocks, (epoch, desc), &mut claims.waiting)
            .await;
        if settled.is_ok() {
            settled = self.await_pairs(op, claims.waiting, epoch, desc).await;
        }
        if settled.is_err() {
            // The members this one waits for in `withdraw` learn of the failure meanwhile.
            op.record_given_up();
            self.withdraw(claims.waiting, epoch).await;
        }
        claims.open = false;
        settled?;
        dp.health().check()
    }

    /// Claims each of this member's pairs and moves the blocks of those it claimed second;
    /// sets bit `j` of `waiting` for each member `j` whose pair it claimed first.
    async fn move_pairs<T: Pod>(
        &self,
        op: &mut Op<'_>,
        (dest, source, nelems): Blocks<'_, '_, T>,
        (epoch, desc): (u64, u64),
        waiting: &mut u32,
    ) -> Result<()> {
        let (n, me, dp) = (self.n_pes(), self.my_pe(), self.dp());
        let block = |j: usize| j * nelems..(j + 1) * nelems;
        let caching = self.alltoall_caching(bytes_of::<T>(nelems));
        for j in (1..n).map(|k| (me + k) % n) {
            match self.claim(j, epoch, desc).await? {
                Claim::First => *waiting |= 1 << j,
                Claim::Second => {
                    let pe = self.pe(j);
                    dp.put_within(dest.slice(block(me)), source.slice(block(j)), pe, caching)
                        .await?;
                    dp.get_into(dest.slice(block(j)), source.slice(block(me)), pe, caching)
                        .await?;
                    let mark = self.view::<u64>(self.inner.layout.pair_word(me), 1);
                    dp.atomic_set(mark, PairStates::of(epoch).done, pe).await?;
                }
                // Unmarked: the first member learns of the mismatch from this member's
                // arrival, and may be past this call before a mark could land.
                Claim::Mismatch(lo, hi) => judge(op, (desc.min(lo), desc.max(hi))),
                // A failure, as the first member's: this call gives up too (and withdraws
                // the claims it made first), so the team's members see it unusable alike.
                Claim::Withdrawn => {
                    return Err(Error::CollectiveMismatch {
                        operation: "alltoall",
                        detail: format!(
                            "member {j} gave this call up (it failed there) before this \
                             member came to their pair; the team cannot be used any more"
                        ),
                    })
                }
            }
        }
        Ok(())
    }

    /// Waits until each member of `waiting` has settled its pair with this one: marked it
    /// done (after its arrival at this call's sync, which shows its descriptor and stays in
    /// place until this member posts its next sync), or arrived with another descriptor.
    async fn await_pairs(
        &self,
        op: &mut Op<'_>,
        waiting: u32,
        epoch: u64,
        desc: u64,
    ) -> Result<()> {
        let layout = self.inner.layout;
        let done = PairStates::of(epoch).done;
        let settled = |j: usize| {
            let arrival = self.arrival(j, epoch)?;
            let marked = self.local(layout.pair_word(j)).load(Ordering::Acquire) >= done;
            (marked || arrival != (desc, desc)).then_some(arrival)
        };
        let all_settled = || members(waiting).all(|j| settled(j).is_some());
        if !all_settled() && !self.settled_elsewhere(waiting, &all_settled) {
            self.wait_for("alltoall", self.sync_lines(), all_settled)
                .await?;
        }
        for j in members(waiting) {
            let (lo, hi) = settled(j).unwrap_or((desc, desc));
            judge(op, (desc.min(lo), desc.max(hi)));
        }
        Ok(())
    }

    /// On a crowded node whose waits spin at all (`FERROSHMEM_SPIN_US` above 0), where every
    /// member of `waiting` is known to run on another CPU than this PE: spins a slice for
    /// `all_settled` before the wait, which would yield the CPU to PEs that owe this one
    /// nothing directly (`wait::spin_a_slice`). Whether the pairs settled.
    fn settled_elsewhere(&self, waiting: u32, all_settled: &impl Fn() -> bool) -> bool {
        let dp = self.dp();
        dp.crowded()
            && !dp.spin.is_zero()
            && members(waiting).all(|j| dp.runs_on_another_cpu(self.pe(j)))
            && crate::wait::spin_a_slice(all_settled)
    }

    /// After this member's call failed with the pairs of `waiting` claimed first, takes
    /// those claims back so that no member writes into its `dest` once the call has
    /// returned: a pair that no second member has claimed is withdrawn (one that comes
    /// later moves nothing), and one whose second member is moving is waited for until its
    /// mark comes, the job fails, or that member gives the call up. Errors here change
    /// nothing: the call fails with its own.
    async fn withdraw(&self, waiting: u32, epoch: u64) {
        let states = PairStates::of(epoch);
        for j in members(waiting) {
            let swap = self.swap_claim(j, states.claimed, states.withdrawn);
            if swap.await.ok() != Some(states.moving) {
                continue;
            }
            let at = self.inner.layout.pair_word(j);
            let mark = self.local(at);
            let marked = move || mark.load(Ordering::Acquire) >= states.done;
            let _ = self
                .wait_for_member(j, "alltoall", at..at + 8, marked)
                .await;
        }
    }

    /// Claims this member's pair with member `j` in the call of `epoch` and descriptor
    /// `desc`: raises the pair's claim word (see [`Team::claim_word`]) to the first claim
    /// when it holds less ([`Claim::First`]), or over the first member's claim to the
    /// second one when that member's arrival shows `desc` ([`Claim::Second`]); each by a
    /// compare-and-swap, tried again while the word changes under it. Changes nothing for a
    /// first member of another call ([`Claim::Mismatch`]), one that withdrew
    /// ([`Claim::Withdrawn`]), or a member gone on to a later call ([`Claim::First`]).
    async fn claim(&self, j: usize, epoch: u64, desc: u64) -> Result<Claim> {
        let states = PairStates::of(epoch);
        let mut seen = self.read_claim(j).await?;
        loop {
            let (next, claim) = if seen < states.claimed {
                (states.claimed, Claim::First)
            } else if seen == states.claimed {
                // The first member posted its arrival before it claimed.
                let theirs = self.arrival(j, epoch).ok_or(Error::Desynchronized {
                    what: "a pairwise alltoall's claim word",
                })?;
                if theirs != (desc, desc) {
                    return Ok(Claim::Mismatch(theirs.0, theirs.1));
                }
                (states.moving, Claim::Second)
            } else if seen == states.withdrawn {
                return Ok(Claim::Withdrawn);
            } else if seen > states.withdrawn {
                // The other member has gone on to a later call after a mismatch of this one.
                return Ok(Claim::First);
            } else {
                // Moving: only the second member of this call's pair, this one, moves.
                return Err(Error::Desynchronized {
                    what: "a pairwise alltoall's claim word",
                });
            };
            let old = self.swap_claim(j, seen, next).await?;
            if old == seen {
                return Ok(claim);
            }
            seen = old;
        }
    }

    /// Reads the claim word of this member's pair with member `j`.
    async fn read_claim(&self, j: usize) -> Result<u64> {
        if self.my_pe() < j {
            return Ok(self
                .local(self.inner.layout.claim_word(j))
                .load(Ordering::SeqCst));
        }
        let (word, owner) = self.claim_word(j);
        self.dp().atomic_fetch(word, owner).await
    }

    /// Compare-and-swap of the claim word of this member's pair with member `j` from
    /// `current` to `new`, resolving to the value found: done when it returns, on the one
    /// node the pairwise form runs on. The lower-numbered member's is a plain atomic on its
    /// own word: no one waits on a claim word (first members wait for their marks), so its
    /// claims need no wake-up.
    fn swap_claim(&self, j: usize, current: u64, new: u64) -> Landing<u64> {
        if self.my_pe() < j {
            let word = self.local(self.inner.layout.claim_word(j));
            let swapped = word.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst);
            return Landing::ready(Ok(swapped.unwrap_or_else(|found| found)));
        }
        let (word, owner) = self.claim_word(j);
        self.dp().atomic_compare_swap(word, current, new, owner)
    }

    /// [`Team::withdraw`] without waiting, for a call dropped midway (cancelled): withdraws
    /// each pair of `waiting` that no second member has claimed yet; a second member
    /// already moving may still write into this member's `dest` afterwards.
    fn withdraw_at_once(&self, waiting: u32, epoch: u64) {
        let states = PairStates::of(epoch);
        for j in members(waiting) {
            // Done at once on a mapped route (the only kind the pairwise form runs on).
            let _ = self
                .swap_claim(j, states.claimed, states.withdrawn)
                .succeeded_at_once();
        }
    }

    /// The claim word of this member's pair with member `j` and the PE that holds it: the
    /// claim word of the higher-numbered member in the lower-numbered one's region.
    fn claim_word(&self, j: usize) -> (SymSlice<'_, u64>, usize) {
        let (lower, higher) = (self.my_pe().min(j), self.my_pe().max(j));
        let word = self.view::<u64>(self.inner.layout.claim_word(higher), 1);
        (word, self.pe(lower))
    }

    /// The region's sync lines, pair words included: what a first member's wait watches.
    fn sync_lines(&self) -> Range<usize> {
        let layout = self.inner.layout;
        layout.sync(0)..layout.sync(self.n_pes() - 1) + LINE
    }
}

/// The pairs a member claimed first in one call, withdrawn at once if the call is dropped
/// before they settle (see [`Team::withdraw_at_once`]).
struct FirstClaims<'t> {
    team: &'t Team,
    epoch: u64,
    /// Bit `j` for each member whose mark this one waits for (at most FLAT_SYNC_MAX).
    waiting: u32,
    /// Whether the call still runs: its pairs neither settled nor withdrawn.
    open: bool,
}

impl Drop for FirstClaims<'_> {
    fn drop(&mut self) {
        if self.open {
            self.team.withdraw_at_once(self.waiting, self.epoch);
        }
    }
}

/// The members whose bits are set in `waiting`.
fn members(waiting: u32) -> impl Iterator<Item = usize> {
    (0..u32::BITS as usize).filter(move |&j| waiting & 1 << j != 0)
}
