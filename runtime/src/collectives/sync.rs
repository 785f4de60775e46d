//! `sync` and `barrier` on a team, over the team's sync lines; the algorithm comes from the
//! team's plan (`plan.rs`).
//!
//! - Flat (teams of up to four): every member writes its arrival to every other and waits
//!   once, for all of them. When PEs outnumber CPUs, every wait costs a trip through the
//!   scheduler, so one wait beats two in a row.
//! - Dissemination (larger teams): ⌈log₂ n⌉ rounds, correct for any n; in round `r` member
//!   `i` writes to member `(i + 2^r) mod n` and waits for member `(i − 2^r) mod n`.
//! - By node (teams that span nodes with several members on a node): each member posts its
//!   arrival to its node's leader (its `up` line there, over mapped memory) and waits for
//!   the leader's release (its `down` line); each leader waits for its node, syncs with the
//!   other leaders as above (flat or dissemination among the leaders, over the sync lines
//!   numbered by leader), then releases its node. One exchange crosses the fabric per pair
//!   of leaders (flat) or per leader and round, not per pair of members.
//!
//! Each message also carries the lowest and highest [`Descriptor`] its sender has seen so far,
//! so in the end every member knows them over all members: when they differ, the members did
//! not call the same collective, and every one of them reports it. Among peers the pair sits
//! in one of two slots of the line, by epoch parity: a sender can be at most one sync ahead
//! of its receiver, so it never overwrites a pair that has not been read. A member's `up`
//! and its leader's `down` need one slot: neither side can post the next sync's before the
//! other has read this one's.

use std::sync::atomic::Ordering;

use super::plan::SyncAlgorithm;
use super::Descriptor;
use crate::error::{Error, Result};
use crate::team::region::{rounds, Layout, FLAT_SYNC_MAX};
use crate::team::{Op, Team};

impl Team {
    /// Waits until every member of the team has called `sync` (`shmem_team_sync`): a pure
    /// synchronization that completes no outstanding operation.
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] on every member when some member called another
    /// collective at the same point; [`Error::TeamDestroyed`]; [`Error::PeerLost`] when a
    /// member is lost.
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn sync(&self) -> Result<()> {
        let mut op = self.begin(Descriptor::SYNC)?;
        let outcome = self.sync_in(&mut op, Descriptor::SYNC).await;
        op.settle(outcome)
    }

    /// Completes this PE's outstanding operations, then synchronizes the team
    /// (`shmem_barrier` on a team): after it, every member sees every put that members
    /// issued before it.
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn barrier(&self) -> Result<()> {
        self.dp().quiet().await?;
        self.sync().await
    }

    /// One sync of collective `op`, checking that every member passed `desc` (when they did
    /// not, the mismatch is recorded in `op`, alike on every member).
    pub(crate) async fn sync_in(&self, op: &mut Op<'_>, desc: u64) -> Result<()> {
        let epoch = op.next_epoch();
        let (lo, hi) = match self.inner.plan.sync() {
            SyncAlgorithm::Nodes => self.sync_by_node(epoch, desc).await?,
            SyncAlgorithm::Flat | SyncAlgorithm::Dissemination => {
                let (n, me) = (self.n_pes(), self.my_pe());
                self.sync_among((n, |j| j), me, epoch, (desc, desc)).await?
            }
        };
        self.dp().health().check()?;
        if lo != hi {
            op.reject(Error::CollectiveMismatch {
                operation: "team collective",
                detail: format!(
                    "members of the team called different collectives or sizes: {} and {}",
                    Descriptor::describe(lo),
                    Descriptor::describe(hi)
                ),
            });
        }
        Ok(())
    }

    /// Syncs a group of `n` members, the one at position `p` being member `member(p)` and
    /// this one at position `at`, over the sync lines numbered by position: flat for up to
    /// [`FLAT_SYNC_MAX`], dissemination otherwise. Resolves to the lowest and highest
    /// descriptor seen, `(lo, hi)` (this member's) included.
    async fn sync_among(
        &self,
        (n, member): (usize, impl Fn(usize) -> usize),
        at: usize,
        epoch: u64,
        (mut lo, mut hi): (u64, u64),
    ) -> Result<(u64, u64)> {
        let layout = self.inner.layout;
        // Each pair is followed by a word that a post to another node uses (`crate::post`).
        let pair = 8 + 24 * (epoch % 2) as usize;
        let take = |(lo, hi): (u64, u64), line: usize| {
            (
                lo.min(self.local(line + pair).load(Ordering::Acquire)),
                hi.max(self.local(line + pair + 8).load(Ordering::Acquire)),
            )
        };
        if n <= FLAT_SYNC_MAX {
            let line = layout.sync(at);
            for k in 1..n {
                self.post(member((at + k) % n), line, epoch, line + pair, &[lo, hi])?;
            }
            let arrived = || {
                (0..n)
                    .all(|j| j == at || self.local(layout.sync(j)).load(Ordering::Acquire) >= epoch)
            };
            if !arrived() {
                let span = layout.sync(0)..layout.sync(n - 1) + 8;
                self.wait_for("team sync", span, arrived).await?;
            }
            let received = (1..n).map(|k| layout.sync((at + k) % n));
            Ok(received.fold((lo, hi), take))
        } else {
            for r in 0..rounds(n) {
                let line = layout.sync(r);
                let to = member((at + (1 << r)) % n);
                self.post(to, line, epoch, line + pair, &[lo, hi])?;
                self.wait_word("team sync", line, epoch).await?;
                (lo, hi) = take((lo, hi), line);
            }
            Ok((lo, hi))
        }
    }

    /// The sync by node: gather at the node's leader, leaders among themselves, release.
    async fn sync_by_node(&self, epoch: u64, desc: u64) -> Result<(u64, u64)> {
        let me = self.my_pe();
        let layout = self.inner.layout;
        let nodes = &self.inner.plan.nodes;
        let group = nodes.group_of(me);
        let members = nodes.members(group);
        let leader = members[0];
        let pair_at = |line: usize| {
            (
                self.local(line + 8).load(Ordering::Acquire),
                self.local(line + 16).load(Ordering::Acquire),
            )
        };
        if me != leader {
            self.post(
                leader,
                layout.up(me),
                epoch,
                layout.up(me) + 8,
                &[desc, desc],
            )?;
            self.wait_word("team sync", layout.down(), epoch).await?;
            return Ok(pair_at(layout.down()));
        }
        let (others, leaders) = (&members[1..], nodes.leaders());
        self.wait_words("team sync", Layout::up, others, epoch)
            .await?;
        let (lo, hi) = others.iter().fold((desc, desc), |(lo, hi), &j| {
            let (l, h) = pair_at(layout.up(j));
            (lo.min(l), hi.max(h))
        });
        let (lo, hi) = self
            .sync_among((leaders.len(), |j| leaders[j]), group, epoch, (lo, hi))
            .await?;
        for &j in others {
            self.post(j, layout.down(), epoch, layout.down() + 8, &[lo, hi])?;
        }
        Ok((lo, hi))
    }
}
