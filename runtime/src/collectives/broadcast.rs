//! `broadcast`: the root's `source` into every member's `dest` (the root's own included).
//!
//! - Eager (small messages, teams with eager slots): the root writes the data into every
//!   other member's slot and returns at once; each member copies it out of its slot.
//! - Eager by node (the same sizes, on a team that spans nodes with several members on some
//!   node): the root writes into its own node's members' slots and into the other nodes'
//!   leaders', and each of those leaders passes the message on to its node's members, so
//!   one message crosses the fabric per node (the leaders first: theirs are the slowest).
//! - Scattered by node (from `large_bytes` up, on teams that span three nodes or more,
//!   `broadcast_scatter.rs`): the root puts a part of the message into each other node's
//!   leader, each leader puts its part into the other leaders', and each node's members
//!   read the whole from their leader (from the root, on its node).
//! - Tree (otherwise, `broadcast_tree.rs`): each member takes the data from its parent (on
//!   its node, by reading the parent's buffer in place once signalled; from another node,
//!   pushed into its `dest` once it has entered), acknowledges, and serves its own
//!   children; a member returns once its children have acknowledged. Flat (a star) in
//!   small teams and for large messages, binomial for small messages in large teams, two
//!   levels by node on teams that span nodes with several members on some node.

use bytemuck::Pod;

use super::eager::{agree, Payload, Senders, Stamp};
use super::plan::BroadcastAlgorithm;
use super::{bytes_of, disjoint, holds, Descriptor, Kind};
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::region::{LINE, SLOT_HEADER};
use crate::team::{Op, Team};

/// The sizes of eager broadcast whose root prefetches its receivers' data lines (all but
/// the slot's first line, whose header the receivers poll: taken early, it would be taken
/// back before the root writes). From the first size that reaches a second line up to 256
/// bytes, where it was measured to gain: at 2 PEs 256 bytes took 0.92-0.95x the time with
/// it (Intel Xeon, `scripts/compare-revisions --only broadcast --rounds 30`, twice).
/// Larger eager broadcasts happen by default only where PEs outnumber CPUs, whose figures
/// swing by 2-4x between runs here: no gain could be shown there, so none is claimed.
const PREFETCHED_BROADCASTS: std::ops::RangeInclusive<usize> = (LINE - SLOT_HEADER + 1)..=256;

impl Team {
    /// Copies `source` on member `root` into `dest` on every member, `root` included
    /// (`shmem_broadcast`); `source.len()` elements. Collective: every member calls it with
    /// the same root and length. `dest` and `source` may be the same range.
    ///
    /// ```no_run
    /// # async fn f(team: ferroshmem_runtime::Team, buf: ferroshmem_runtime::SymBuffer<u64>) -> ferroshmem_runtime::Result<()> {
    /// team.broadcast(&buf, &buf, 0).await?; // every member now holds member 0's buf
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a root outside the team, [`Error::OutOfBounds`] when
    /// `dest` is shorter than `source`, [`Error::InvalidArgument`] when they overlap
    /// otherwise than exactly, [`Error::CollectiveMismatch`] on the members that find other
    /// members called with another root or length.
    ///
    /// Small (eager) broadcasts find mismatches through the messages they receive (see
    /// [`crate::collectives`]): a non-root member gets `CollectiveMismatch` when the
    /// message it takes (the root's, or by node, on a node other than the root's, its
    /// leader's unless it leads) carries another root or length, or its leader's verdict
    /// that members differ, and also, leaving the team unusable, when the message it takes
    /// belongs to another call (one a mismatched call left behind). The root receives
    /// nothing, so it checks only that no member has already sent it a message (which no
    /// member of a matching call can have done yet): if one has, it gets
    /// `CollectiveMismatch` and the team becomes unusable. Not caught at once: a root whose
    /// mismatched peers have not sent yet returns `Ok`; their messages are found later, by
    /// the root's next call that receives from them or its next broadcast as root. A member
    /// waiting for a root (or by node, a leader) that called something else, or for a
    /// member that gave the team up, fails with `CollectiveMismatch` once the other
    /// members' call records show it (after [`MISMATCH_GRACE`](crate::MISMATCH_GRACE) for a
    /// call made with other arguments).
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn broadcast<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
        root: usize,
    ) -> Result<()> {
        let source = source.into();
        let (dest, desc) = self.broadcast_checks(dest.into(), source, root)?;
        let mut op = self.begin(desc)?;
        let outcome = match self.broadcast_at_once(&mut op, (dest, source), (root, true), desc) {
            Some(outcome) => outcome,
            None => {
                self.broadcast_in(&mut op, (dest, source), (root, true), desc)
                    .await
            }
        };
        op.settle(outcome)
    }

    /// [`Team::broadcast`] that leaves the root's own `dest` as it was, as OpenSHMEM's
    /// deprecated active-set broadcasts (`shmem_broadcast32`, `_64`) have it. The two forms
    /// match each other in a call (members may mix them).
    ///
    /// # Errors
    /// As [`Team::broadcast`].
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn broadcast_to_others<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
        root: usize,
    ) -> Result<()> {
        let source = source.into();
        let (dest, desc) = self.broadcast_checks(dest.into(), source, root)?;
        let mut op = self.begin(desc)?;
        let outcome = match self.broadcast_at_once(&mut op, (dest, source), (root, false), desc) {
            Some(outcome) => outcome,
            None => {
                self.broadcast_in(&mut op, (dest, source), (root, false), desc)
                    .await
            }
        };
        op.settle(outcome)
    }

    /// A broadcast's checks (refused on every member alike): `dest` cut to the source's
    /// length, and the call's descriptor.
    fn broadcast_checks<'d, T: Pod>(
        &self,
        dest: SymSlice<'d, T>,
        source: SymSlice<'_, T>,
        root: usize,
    ) -> Result<(SymSlice<'d, T>, u64)> {
        let n = self.n_pes();
        let nelems = source.len();
        let checks = (|| {
            if root >= n {
                return Err(Error::PeOutOfRange { pe: root, n_pes: n });
            }
            holds(self.dp(), source, nelems, "broadcast source")?;
            holds(self.dp(), dest, nelems, "broadcast destination")?;
            let dest = dest.slice(..nelems);
            disjoint(self.dp(), dest, source, true)?;
            Ok(dest)
        })();
        let dest = self.refuse_on(Kind::Broadcast, checks)?;
        let bytes = bytes_of::<T>(nelems);
        Ok((
            dest,
            Descriptor::of(Kind::Broadcast, root as u64, bytes as u64),
        ))
    }

    async fn broadcast_in<T: Pod>(
        &self,
        op: &mut Op<'_>,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        (root, root_copies): (usize, bool),
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let bytes = bytes_of::<T>(source.len());
        if n == 1 || bytes == 0 {
            return match me == root && root_copies {
                true => self.copy_local(dest, source),
                false => Ok(()),
            };
        }
        let shape = match self.inner.plan.broadcast(bytes) {
            BroadcastAlgorithm::Tree(shape) => shape,
            BroadcastAlgorithm::ScatteredByNode => {
                // Boxed: inline, its state would enlarge every broadcast's future, the
                // one-node and eager ones included, for a form whose every call crosses the
                // fabric.
                let scattered =
                    self.scattered_broadcast(op, (dest, source), (root, root_copies), desc);
                return Box::pin(scattered).await;
            }
            eager => {
                return self
                    .eager_broadcast(op, eager, (dest, source), (root, root_copies), desc)
                    .await
            }
        };
        self.tree_broadcast(op, shape, (dest, source), (root, root_copies), desc)
            .await
    }

    /// The whole broadcast without waiting, when this PE is the root of a flat eager
    /// broadcast and every other member's slot is free: no future to make, poll and move for
    /// the common case of a root that never waits. `None` (nothing done) otherwise. (Kept to
    /// the flat form over a plain range: over a chained iterator of either form's
    /// receivers, which cost about 35 ns a call in the checks and the sends, a 4-byte
    /// broadcast at 2 PEs on one node took 1.15-1.3x the time. A root by node sends over
    /// the fabric, where making a future and a list of receivers costs nothing that shows.)
    fn broadcast_at_once<T: Pod>(
        &self,
        op: &mut Op<'_>,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        (root, root_copies): (usize, bool),
        desc: u64,
    ) -> Option<Result<()>> {
        let n = self.n_pes();
        let bytes = bytes_of::<T>(source.len());
        let eager_root = self.my_pe() == root
            && n > 1
            && bytes > 0
            && self.inner.plan.broadcast(bytes) == BroadcastAlgorithm::Eager;
        if eager_root && PREFETCHED_BROADCASTS.contains(&bytes) {
            for k in 1..n {
                self.eager_prefetch_data(op, (root + k) % n, bytes);
            }
        }
        if !eager_root || !(1..n).all(|k| self.eager_slot_free(op, (root + k) % n)) {
            return None;
        }
        let stamp = Stamp::new(op, desc);
        Some(self.eager_none_pending(op, stamp).and_then(|()| {
            let receivers = (1..n).map(|k| (root + k) % n);
            self.eager_broadcast_root(op, receivers, (dest, source), root_copies, stamp)
        }))
    }

    /// An eager broadcast (`algorithm`, flat or by node): the root writes `source` into its
    /// receivers' slots; every other member takes the message from the root (or by node,
    /// see `broadcast_nodes.rs`) and copies it out.
    async fn eager_broadcast<T: Pod>(
        &self,
        op: &mut Op<'_>,
        algorithm: BroadcastAlgorithm,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        (root, root_copies): (usize, bool),
        desc: u64,
    ) -> Result<()> {
        let stamp = Stamp::new(op, desc);
        if self.my_pe() == root {
            self.eager_none_pending(op, stamp)?;
            let receivers = self.eager_broadcast_receivers(algorithm, root);
            for &to in &receivers {
                if !self.eager_slot_free(op, to) {
                    self.eager_slot_wait(op, to).await?;
                }
            }
            let receivers = receivers.into_iter();
            return self.eager_broadcast_root(op, receivers, (dest, source), root_copies, stamp);
        }
        if algorithm == BroadcastAlgorithm::EagerByNode {
            return self.eager_broadcast_by_node(op, dest, root, stamp).await;
        }
        if !self.eager_arrived(op, Senders::One(root)) {
            self.eager_wait(op, Senders::One(root)).await?;
        }
        let got = self.eager_peek(op, root, stamp)?;
        match agree(desc, got.desc, root) {
            Ok(()) => self.copy_local(dest, self.view::<T>(got.data, dest.len()))?,
            Err(e) => op.reject(e),
        }
        self.eager_done(op, root, false)
    }

    /// The root's part of an eager broadcast stamped `stamp`, once the slots of its
    /// `receivers` are free: one message to each, then its own copy (when `root_copies`).
    fn eager_broadcast_root<T: Pod>(
        &self,
        op: &mut Op<'_>,
        receivers: impl Iterator<Item = usize>,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        root_copies: bool,
        stamp: Stamp,
    ) -> Result<()> {
        let bytes = bytes_of::<T>(source.len());
        for to in receivers {
            self.eager_send(op, to, Payload::Sym(source), bytes, stamp)?;
        }
        match root_copies {
            true => self.copy_local(dest, source),
            false => Ok(()),
        }
    }

    /// The members the root of an eager broadcast writes to: every other one, in turn from
    /// the root on; by node, the other nodes' leaders, then the root's own node's other
    /// members (`NodeShape::broadcast_receivers`).
    fn eager_broadcast_receivers(&self, algorithm: BroadcastAlgorithm, root: usize) -> Vec<usize> {
        let n = self.n_pes();
        match algorithm {
            BroadcastAlgorithm::EagerByNode => self.inner.plan.nodes.broadcast_receivers(root),
            _ => (1..n).map(|k| (root + k) % n).collect(),
        }
    }

    /// Copies `src` into `dest`, both in this PE's symmetric memory (nothing when they are
    /// the same range).
    pub(crate) fn copy_local<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
    ) -> Result<()> {
        let dp = self.dp();
        if dp.span_of(dest)? == dp.span_of(src)? {
            return Ok(());
        }
        self.dp().get_nbi(dest, src, self.dp().my_pe())
    }

    /// As [`Team::copy_local`], the copy made as `caching` says ([`Team::block_caching`]).
    pub(crate) async fn copy_local_as<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        caching: Caching,
    ) -> Result<()> {
        let dp = self.dp();
        if dp.span_of(dest)? == dp.span_of(src)? {
            return Ok(());
        }
        dp.get_into(dest, src, dp.my_pe(), caching).await
    }
}
