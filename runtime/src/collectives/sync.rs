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
//!   of leaders (flat) or per leader and round, not per pair of members. A sync of each
//!   node alone (`sync_node_in`, the end of a block move across nodes) leaves the leaders'
//!   exchange out.
//! - Entering (`enter`, `next_entrant`: the first sync of the flat `alltoall` and `fcollect`):
//!   on a flat team, the flat sync's posts, with each other member handed to the caller as
//!   soon as its arrival is seen, so that a member reads the buffers of those that are in the
//!   call while one that is not running (PEs outnumbering CPUs) has yet to arrive; on other
//!   teams, a whole sync first.
//!
//! Each message also carries the lowest and highest [`Descriptor`] its sender has seen so far,
//! so in the end every member knows them over all members: when they differ, the members did
//! not call the same collective, and every one of them reports it. Among peers the pair sits
//! in one of two slots of the line, by epoch parity: a sender can be at most one sync ahead
//! of its receiver, so it never overwrites a pair that has not been read. A sync of each
//! node alone skips an epoch on the leaders' lines, so their next exchange uses the slot of
//! their last; it may only end a call in which every leader has heard from every other
//! leader by a message sent after that leader's last whole sync (a block move's signals or
//! posts, sent once their sender has read its pairs), which keeps a leader from overwriting
//! a pair not yet read. A member's `up` and its leader's `down` need one slot: neither side
//! can post the next sync's before the other has read this one's.

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
    /// issued before it. An error of the completion is reported after the sync, which takes
    /// place all the same (the other members are not left waiting for this one).
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn barrier(&self) -> Result<()> {
        let quieted = self.dp().quiet().await;
        let synced = self.sync().await;
        quieted.and(synced)
    }

    /// One sync of collective `op`, checking that every member passed `desc` (when they did
    /// not, the mismatch is recorded in `op`, alike on every member).
    pub(crate) async fn sync_in(&self, op: &mut Op<'_>, desc: u64) -> Result<()> {
        let epoch = op.next_epoch();
        let (lo, hi) = match self.inner.plan.sync() {
            SyncAlgorithm::Nodes => self.sync_by_node(epoch, desc, true).await?,
            SyncAlgorithm::Flat | SyncAlgorithm::Dissemination => {
                let (n, me) = (self.n_pes(), self.my_pe());
                self.sync_among((n, |j| j), me, epoch, (desc, desc)).await?
            }
        };
        self.dp().health().check()?;
        judge(op, (lo, hi));
        Ok(())
    }

    /// Whether [`Team::enter`] only announces this member (a flat team) rather than waiting
    /// for every member: work of its own a member then does after entering overlaps the
    /// others' entries.
    pub(crate) fn entry_only_announces(&self) -> bool {
        self.inner.plan.sync() == SyncAlgorithm::Flat
    }

    /// Enters collective `op` with descriptor `desc`: the first sync of a collective whose
    /// work with member `j` needs only `j` to be in the call (reading `j`'s `source`, say).
    /// [`Team::next_entrant`] then hands out the other members as they enter.
    pub(crate) async fn enter(&self, op: &mut Op<'_>, desc: u64) -> Result<Entrants> {
        let n = self.n_pes();
        let pending = if self.entry_only_announces() {
            let epoch = self.announce(op, desc)?;
            // At most FLAT_SYNC_MAX members: one bit for each other one.
            let waiting = (1..n).fold(0, |bits, k| bits | offset_bit(k));
            Pending::Arriving { epoch, waiting }
        } else {
            self.sync_in(op, desc).await?;
            Pending::InOrder { next: 1 }
        };
        Ok(Entrants {
            desc,
            seen: (desc, desc),
            pending,
        })
    }

    /// On a team that syncs flat, posts this member's arrival at a new sync with descriptor
    /// `desc` to every other member, without waiting for theirs; returns the sync's epoch.
    pub(crate) fn announce(&self, op: &mut Op<'_>, desc: u64) -> Result<u64> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let epoch = op.next_epoch();
        let line = self.inner.layout.sync(me);
        for k in 1..n {
            let to = (me + k) % n;
            self.post(to, line, epoch, line + pair_offset(epoch), &[desc, desc])?;
        }
        Ok(epoch)
    }

    /// The lowest and highest descriptor that member `j` posted with its arrival at the
    /// flat sync of `epoch` ([`Team::announce`]), once it has arrived.
    pub(crate) fn arrival(&self, j: usize, epoch: u64) -> Option<(u64, u64)> {
        let line = self.inner.layout.sync(j);
        (self.local(line).load(Ordering::Acquire) >= epoch).then(|| self.sync_pair(line, epoch))
    }

    /// The next member of `entrants` in the call with this member's descriptor, or `None`
    /// once every member has entered: the entry sync is then whole, and a mismatch is
    /// recorded in `op`, alike on every member. Once a member with another descriptor has
    /// been seen, no more members are handed out (the call only completes its sync), so
    /// blocks move only between members that passed the same buffers' sizes.
    pub(crate) async fn next_entrant(
        &self,
        op: &mut Op<'_>,
        entrants: &mut Entrants,
    ) -> Result<Option<usize>> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let layout = self.inner.layout;
        loop {
            let (epoch, waiting) = match &mut entrants.pending {
                Pending::InOrder { next } => {
                    let k = *next;
                    if k >= n || op.rejected() {
                        return Ok(None);
                    }
                    *next = k + 1;
                    return Ok(Some((me + k) % n));
                }
                Pending::Arriving { epoch, waiting } => (*epoch, waiting),
            };
            let arrived = |k: usize| {
                let line = layout.sync((me + k) % n);
                self.local(line).load(Ordering::Acquire) >= epoch
            };
            let unseen = |bits: u32, k: usize| bits & offset_bit(k) != 0;
            if let Some(k) = (1..n).find(|&k| unseen(*waiting, k) && arrived(k)) {
                *waiting &= !offset_bit(k);
                let (lo, hi) = self.sync_pair(layout.sync((me + k) % n), epoch);
                entrants.seen = (entrants.seen.0.min(lo), entrants.seen.1.max(hi));
                if entrants.seen == (entrants.desc, entrants.desc) {
                    return Ok(Some((me + k) % n));
                }
                continue;
            }
            if *waiting == 0 {
                entrants.pending = Pending::InOrder { next: n };
                self.dp().health().check()?;
                judge(op, entrants.seen);
                return Ok(None);
            }
            let bits = *waiting;
            let span = layout.sync(0)..layout.sync(n - 1) + 8;
            self.wait_for("team sync", span, || {
                (1..n).any(|k| unseen(bits, k) && arrived(k))
            })
            .await?;
        }
    }

    /// The pair of descriptors that the sync of `epoch` left in this member's sync line
    /// `line`: the lowest and highest its sender had seen.
    fn sync_pair(&self, line: usize, epoch: u64) -> (u64, u64) {
        let pair = line + pair_offset(epoch);
        (
            self.local(pair).load(Ordering::Acquire),
            self.local(pair + 8).load(Ordering::Acquire),
        )
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
        let pair = pair_offset(epoch);
        let take = |(lo, hi): (u64, u64), line: usize| {
            let (l, h) = self.sync_pair(line, epoch);
            (lo.min(l), hi.max(h))
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

    /// One sync of collective `op` among the members of this member's node alone, on a team
    /// that syncs by node (a whole sync elsewhere), checking that they passed `desc`: for the
    /// end of a call whose members on other nodes are done with this member's buffers once
    /// their own parts are, so that only its node-mates (which read them in place) must be
    /// waited for. Every member of the team makes it, so the epochs stay in step. The call
    /// must have had every leader hear from every other leader since the last whole sync
    /// (see the module documentation).
    pub(crate) async fn sync_node_in(&self, op: &mut Op<'_>, desc: u64) -> Result<()> {
        if self.inner.plan.sync() != SyncAlgorithm::Nodes {
            return self.sync_in(op, desc).await;
        }
        let epoch = op.next_epoch();
        let (lo, hi) = self.sync_by_node(epoch, desc, false).await?;
        self.dp().health().check()?;
        judge(op, (lo, hi));
        Ok(())
    }

    /// The sync by node: gather at the node's leader, leaders among themselves (unless not
    /// `across` nodes), release.
    async fn sync_by_node(&self, epoch: u64, desc: u64, across: bool) -> Result<(u64, u64)> {
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
        let (lo, hi) = if across {
            self.sync_among((leaders.len(), |j| leaders[j]), group, epoch, (lo, hi))
                .await?
        } else {
            (lo, hi)
        };
        for &j in others {
            self.post(j, layout.down(), epoch, layout.down() + 8, &[lo, hi])?;
        }
        Ok((lo, hi))
    }
}

/// The other members of a collective as they enter it, from [`Team::enter`]: on a team that
/// syncs flat, each one as soon as its arrival is seen, so that the work with a member that
/// has arrived does not wait for the last to arrive (when PEs outnumber CPUs, the last may
/// not even be running); on other teams, all of them after a whole sync. Members are
/// preferred in the order `me + 1`, `me + 2`, … (mod n), so that members spread their reads
/// over different peers.
pub(crate) struct Entrants {
    /// This member's descriptor of the call.
    desc: u64,
    /// The lowest and highest descriptor seen so far, this member's included.
    seen: (u64, u64),
    /// The members not handed out yet.
    pending: Pending,
}

/// The members an [`Entrants`] has yet to hand out.
enum Pending {
    /// On a flat team, while arrivals at the sync of `epoch` are still to be seen: bit
    /// `k − 1` of `waiting` is set while member `me + k` has not been seen to arrive.
    Arriving { epoch: u64, waiting: u32 },
    /// After a whole sync: the members `me + k` for `k` from `next` to `n − 1`.
    InOrder { next: usize },
}

// A flat team's other members fit the bits of `Pending::Arriving`.
const _: () = assert!(FLAT_SYNC_MAX <= 32);

/// The bit of `waiting` ([`Pending::Arriving`]) of the member `k` places after this one.
fn offset_bit(k: usize) -> u32 {
    1 << (k - 1)
}

/// Where in a sync line the pair of descriptors of the sync of `epoch` sits: one of two
/// slots by parity, each followed by a word that a post to another node uses
/// (`crate::post`).
fn pair_offset(epoch: u64) -> usize {
    8 + 24 * (epoch % 2) as usize
}

/// Records in `op` the mismatch that a sync's lowest and highest descriptors show, if any.
pub(crate) fn judge(op: &mut Op<'_>, (lo, hi): (u64, u64)) {
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
}
