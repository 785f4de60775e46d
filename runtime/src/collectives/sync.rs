//! `sync` and `barrier` on a team, over the team's sync lines.
//!
//! - Flat (teams of up to four): every member writes its arrival to every other and waits
//!   once, for all of them. When PEs outnumber CPUs, every wait costs a trip through the
//!   scheduler, so one wait beats two in a row.
//! - Dissemination (larger teams): ⌈log₂ n⌉ rounds, correct for any n; in round `r` member
//!   `i` writes to member `(i + 2^r) mod n` and waits for member `(i − 2^r) mod n`.
//!
//! Each message also carries the lowest and highest [`Descriptor`] its sender has seen so far,
//! so in the end every member knows them over all members: when they differ, the members did
//! not call the same collective, and every one of them reports it. The pair sits in one of
//! two slots of the line, by epoch parity: a sender can be at most one sync ahead of its
//! receiver, so it never overwrites a pair that has not been read.

use std::sync::atomic::Ordering;

use super::Descriptor;
use crate::error::{Error, Result};
use crate::team::region::{rounds, FLAT_SYNC_MAX};
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

    /// One dissemination sync of collective `op`, checking that every member passed `desc`
    /// (when they did not, the mismatch is recorded in `op`, alike on every member).
    pub(crate) async fn sync_in(&self, op: &mut Op<'_>, desc: u64) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let layout = self.inner.layout;
        let epoch = op.next_epoch();
        let pair = 8 + 16 * (epoch % 2) as usize;
        let (mut lo, mut hi) = (desc, desc);
        let take = |(lo, hi): (u64, u64), line: usize| {
            (
                lo.min(self.local(line + pair).load(Ordering::Acquire)),
                hi.max(self.local(line + pair + 8).load(Ordering::Acquire)),
            )
        };
        if n <= FLAT_SYNC_MAX {
            let line = layout.sync(me);
            for to in (1..n).map(|k| (me + k) % n) {
                self.post(to, line, epoch, line + pair, &[desc, desc])?;
            }
            let arrived = || {
                (0..n)
                    .all(|j| j == me || self.local(layout.sync(j)).load(Ordering::Acquire) >= epoch)
            };
            if !arrived() {
                let span = layout.sync(0)..layout.sync(n - 1) + 8;
                self.wait_for("team sync", span, arrived).await?;
            }
            for j in (1..n).map(|k| (me + k) % n) {
                (lo, hi) = take((lo, hi), layout.sync(j));
            }
        } else {
            for r in 0..rounds(n) {
                let line = layout.sync(r);
                let to = (me + (1 << r)) % n;
                self.post(to, line, epoch, line + pair, &[lo, hi])?;
                self.wait_word("team sync", line, epoch).await?;
                (lo, hi) = take((lo, hi), line);
            }
        }
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
}
