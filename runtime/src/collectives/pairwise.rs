//! The pairwise `alltoall`: on a team of one node that syncs flat, each pair of members
//! moves its two blocks once, and the member that enters the call second moves both.
//!
//! # Protocol
//! Each member posts its arrival (with its descriptor) to every other member, as the flat
//! entry does, copies its own block, then claims each pair it belongs to: one atomic swap
//! of the call's epoch into the pair's claim word. The swap that finds the epoch already
//! there is the second, and the first member's arrival is then visible to it (posted before
//! the first swap). The second member checks that the first passed the same descriptor,
//! writes its block into the first's `dest`, reads the first's block from the first's
//! `source` into its own `dest`, and signals the first. The first member waits for that
//! signal: its buffers are done with once it comes. A member whose pairs all found their
//! other member in the call returns without waiting at all.
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
//! A second member that finds another descriptor moves nothing and signals. A first member
//! judges by the other's arrival at this call's sync too (the other cannot post a sync after
//! its next one before this member has posted its own next one, so that arrival stays in
//! place), and stops waiting for a member that arrived there with another descriptor
//! (another collective called there): both members report the mismatch, and the team stays
//! usable, as after a flat call.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::sync::judge;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::team::region::value;
use crate::team::{Op, Team};

/// How a pair of members stands for this member once it has claimed the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// The other member entered first: this one moves both blocks.
    Moves,
    /// This member entered first: it waits for the other's signal.
    Waits,
}

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
        let done = value(op.next_seq(), 0);
        let block = |j: usize| j * nelems..(j + 1) * nelems;
        let dp = self.dp();
        dp.get_into(dest.slice(block(me)), source.slice(block(me)), dp.my_pe())
            .await?;
        let mut waiting = Vec::with_capacity(n - 1);
        for j in (1..n).map(|k| (me + k) % n) {
            if self.claim(j, epoch).await? == Turn::Waits {
                waiting.push(j);
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
            } else {
                judge(op, (desc.min(theirs.0), desc.max(theirs.1)));
            }
            self.signal(j, layout.sig(me), done)?;
        }
        // Member `j`'s arrival at this call's sync once it has settled their pair: signalled
        // its moves (posted after its arrival, which shows its descriptor and stays until this
        // member has posted its next sync), or arrived with another descriptor.
        let settled = |j: usize| {
            let arrival = self.arrival(j, epoch)?;
            let signalled = self.local(layout.sig(j)).load(Ordering::Acquire) >= done;
            (signalled || arrival != (desc, desc)).then_some(arrival)
        };
        let all_settled = || waiting.iter().all(|&j| settled(j).is_some());
        if !all_settled() {
            let span = layout.sync(0)..layout.sig(n - 1) + 8;
            self.wait_for("alltoall", span, all_settled).await?;
        }
        for &j in &waiting {
            let (lo, hi) = settled(j).unwrap_or((desc, desc));
            judge(op, (desc.min(lo), desc.max(hi)));
        }
        dp.health().check()
    }

    /// Claims this member's pair with member `j` for the call whose entry is the sync of
    /// `epoch`: swaps the epoch into the pair's claim word, in the lower-numbered member's
    /// region, and says whether the other member had done so first.
    async fn claim(&self, j: usize, epoch: u64) -> Result<Turn> {
        let me = self.my_pe();
        let old = if me < j {
            let word = self.local(self.inner.layout.claim(j));
            word.swap(epoch, Ordering::SeqCst)
        } else {
            let word = self.view::<u64>(self.inner.layout.claim(me), 1);
            self.dp().atomic_swap(word, epoch, self.pe(j)).await?
        };
        Ok(if old == epoch {
            Turn::Moves
        } else {
            Turn::Waits
        })
    }
}
