//! The pairwise `alltoall`: on a team of one node that syncs flat, each pair of members
//! moves its two blocks once, and the member that claims the pair second moves both.
//!
//! # Protocol
//! Each member posts its arrival (with its descriptor) to every other member, as the flat
//! entry does, copies its own block, then claims each pair it belongs to: it raises the
//! pair's claim word to `2·epoch` (the epoch of the entry) unless it holds more already (a
//! `fetch_max` by the lower-numbered member of the pair, in whose region the word lies; a
//! read, then a compare-and-swap loop, by the higher). The member that finds `2·epoch`
//! there is the second, and the first member's arrival is then visible to it (posted before
//! the first claim). The second checks that the first passed the same descriptor, writes
//! its block into the first's `dest`, reads the first's block from the first's `source`
//! into its own `dest`, and marks the pair done: `2·epoch + 1` into the first's pair word
//! for it (the claim word itself where the first is the lower-numbered member). The first
//! waits for that mark: its buffers are done with once it comes. A member whose pairs all
//! found their other member in the call returns without waiting at all.
//!
//! Claims only raise the claim word, and a mark into it replaces this call's claim while
//! its first member still waits in the call; both carry the epoch, so a mark or a claim of
//! another call never passes for this one's, and no counter other than the sync epoch
//! (which every sync takes, matched or not) is used. Marks are atomic sets through the data
//! plane, never posts: a pair word is the last of its line, where a post to another node
//! would put its value past the line.
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
//! A second member that finds another descriptor moves nothing and leaves the pair
//! unmarked (a mark could land after the first member has gone on to its next call, and
//! lower the claim word under that call's claim). A first member judges by the other's
//! arrival at this call's sync (the other cannot post a sync after its next one before
//! this member has posted its own next one, so that arrival stays in place), and stops
//! waiting for a member that arrived there with another descriptor (another collective
//! called there). Both members report the mismatch, and the team stays usable, as after a
//! flat call: a member that has gone on to a later pairwise call has raised the claim word
//! past this call's claim, which then only makes the late member first, never overwrites
//! the later claim.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::sync::judge;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::team::region::LINE;
use crate::team::{Op, Team};

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
        let (n, me) = (self.n_pes(), self.my_pe());
        let layout = self.inner.layout;
        let epoch = self.announce(op, desc)?;
        let (claimed, done) = (2 * epoch, 2 * epoch + 1);
        let block = |j: usize| j * nelems..(j + 1) * nelems;
        let dp = self.dp();
        dp.get_into(dest.slice(block(me)), source.slice(block(me)), dp.my_pe())
            .await?;
        // Bit `j` for each member whose mark this one waits for (at most FLAT_SYNC_MAX).
        let mut waiting = 0u32;
        for j in (1..n).map(|k| (me + k) % n) {
            if self.claim(j, claimed).await? != claimed {
                waiting |= 1 << j;
                continue;
            }
            let theirs = self.arrival(j, epoch).ok_or(Error::Desynchronized {
                what: "a pairwise alltoall's claim word",
            })?;
            if theirs == (desc, desc) {
                let pe = self.pe(j);
                dp.put_within(dest.slice(block(me)), source.slice(block(j)), pe)
                    .await?;
                dp.get_into(dest.slice(block(j)), source.slice(block(me)), pe)
                    .await?;
                let mark = self.view::<u64>(layout.pair_word(me), 1);
                dp.atomic_set(mark, done, pe).await?;
            } else {
                // Unmarked: the first member learns of the mismatch from this member's
                // arrival, and may be past this call before a mark could land.
                judge(op, (desc.min(theirs.0), desc.max(theirs.1)));
            }
        }
        // Member `j`'s arrival at this call's sync once it has settled their pair: marked it
        // done (after its arrival, which shows its descriptor and stays in place until this
        // member posts its next sync), or arrived with another descriptor.
        let settled = |j: usize| {
            let arrival = self.arrival(j, epoch)?;
            let marked = self.local(layout.pair_word(j)).load(Ordering::Acquire) >= done;
            (marked || arrival != (desc, desc)).then_some(arrival)
        };
        let members = move || (0..n).filter(move |&j| waiting & 1 << j != 0);
        let all_settled = || members().all(|j| settled(j).is_some());
        if !all_settled() {
            let span = layout.sync(0)..layout.sync(n - 1) + LINE;
            self.wait_for("alltoall", span, all_settled).await?;
        }
        for j in members() {
            let (lo, hi) = settled(j).unwrap_or((desc, desc));
            judge(op, (desc.min(lo), desc.max(hi)));
        }
        dp.health().check()
    }

    /// Claims this member's pair with member `j`: raises the pair's claim word (the pair
    /// word of the higher-numbered member in the lower-numbered one's region) to `claimed`
    /// unless it is higher already, and returns what it held. `claimed` there before means
    /// the other member claimed first; anything else, that this one did (or, after a
    /// mismatch, that the other has gone on to a later call).
    async fn claim(&self, j: usize, claimed: u64) -> Result<u64> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        if me < j {
            return Ok(self
                .local(layout.pair_word(j))
                .fetch_max(claimed, Ordering::SeqCst));
        }
        let (word, owner) = (self.view::<u64>(layout.pair_word(me), 1), self.pe(j));
        let mut seen = self.dp().atomic_fetch(word, owner).await?;
        while seen < claimed {
            let old = self
                .dp()
                .atomic_compare_swap(word, seen, claimed, owner)
                .await?;
            if old == seen {
                break;
            }
            seen = old;
        }
        Ok(seen)
    }
}
