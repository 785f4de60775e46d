//! `fcollect` (equal blocks) and `collect` (blocks of any size): every member's `source`,
//! concatenated in member order, into every member's `dest`.
//!
//! - Eager (small blocks, teams with eager slots): each member writes its block into every
//!   other member's slot; each copies the blocks out. For `collect` the slot headers carry
//!   the block sizes; a block too large for a slot is read from its member's `source`
//!   instead, and then all members sync before returning. An `fcollect` whose whole result
//!   fits a slot, on a team that spans nodes with several members on some node, goes by
//!   node instead, through the leaders (`gather_nodes.rs`).
//! - Flat: enter, read every other member's block from its `source` as soon as that member
//!   has entered (see `Team::enter` in `sync.rs`), sync. `collect` without eager slots
//!   syncs first: its members read each other's counts.
//! - Ring (large blocks in large teams): in step `k` each member reads from its left
//!   neighbour's `dest` the block that neighbour got in step `k − 1`; n − 1 steps.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::eager::{agree, Payload, Senders, Stamp};
use super::plan::MoveAlgorithm;
use super::{bytes_of, disjoint, holds, Descriptor, Kind};
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::region::value;
use crate::team::{Op, Team};

/// Where each member's block goes in `dest`, in member order.
enum Blocks {
    /// `each` elements per member.
    Equal { each: usize },
    /// Element offsets and counts.
    Varying {
        offsets: Vec<usize>,
        counts: Vec<usize>,
    },
}

impl Blocks {
    fn from_counts(counts: Vec<usize>) -> Blocks {
        let offsets = counts
            .iter()
            .scan(0usize, |at, &c| {
                let here = *at;
                *at = at.saturating_add(c);
                Some(here)
            })
            .collect();
        Blocks::Varying { offsets, counts }
    }

    fn count(&self, j: usize) -> usize {
        match self {
            Blocks::Equal { each } => *each,
            Blocks::Varying { counts, .. } => counts[j],
        }
    }

    fn total(&self, n: usize) -> usize {
        (0..n).fold(0usize, |t, j| t.saturating_add(self.count(j)))
    }

    fn range(&self, j: usize) -> std::ops::Range<usize> {
        match self {
            Blocks::Equal { each } => j * each..(j + 1) * each,
            Blocks::Varying { offsets, counts } => offsets[j]..offsets[j] + counts[j],
        }
    }
}

impl Team {
    /// Concatenates every member's `source` (`source.len()` elements each) into `dest` on
    /// every member, in member order (`shmem_fcollect`). Collective; every member passes the
    /// same length; `dest` holds `n_pes × source.len()` elements and does not overlap
    /// `source`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a short `dest`, [`Error::InvalidArgument`] for overlapping
    /// buffers, [`Error::CollectiveMismatch`] when members passed different lengths.
    /// On the eager path, a message that an earlier mismatched call left behind also gives
    /// `CollectiveMismatch`, and leaves the team unusable (see [`crate::collectives`]).
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn fcollect<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let n = self.n_pes();
        let nelems = source.len();
        let checks = (|| {
            let total = nelems.checked_mul(n).ok_or_else(|| {
                Error::InvalidArgument(format!("{n} blocks of {nelems} overflow"))
            })?;
            holds(self.dp(), source, nelems, "fcollect source")?;
            holds(self.dp(), dest, total, "fcollect destination")?;
            let dest = dest.slice(..total);
            disjoint(self.dp(), dest, source, false)?;
            Ok(dest)
        })();
        let dest = self.refuse_on(Kind::Fcollect, checks)?;
        let bytes = bytes_of::<T>(nelems);
        let desc = Descriptor::of(Kind::Fcollect, self.contract_detail(), bytes as u64);
        let blocks = Blocks::Equal { each: nelems };
        let mut op = self.begin(desc)?;
        let outcome = self.fcollect_in(&mut op, dest, source, &blocks, desc).await;
        op.settle(outcome)
    }

    async fn fcollect_in<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        blocks: &Blocks,
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let bytes = bytes_of::<T>(source.len());
        let algorithm = self.inner.plan.fcollect(bytes);
        if n > 1 && bytes > 0 && algorithm == MoveAlgorithm::EagerByNode {
            return self.fcollect_by_node(op, dest, source, desc).await;
        }
        if n > 1 && bytes > 0 && algorithm == MoveAlgorithm::Eager {
            for k in 1..n {
                self.eager_prefetch(op, (me + k) % n, bytes);
            }
            let stamp = Stamp::new(op, desc);
            for k in 1..n {
                let to = (me + k) % n;
                if !self.eager_slot_free(op, to) {
                    self.eager_slot_wait(op, to).await?;
                }
                self.eager_send(op, to, Payload::Sym(source), bytes, stamp)?;
            }
            self.copy_local(dest.slice(blocks.range(me)), source)?;
            return self.eager_gather(op, dest, blocks, stamp).await;
        }
        if n == 1 || bytes == 0 {
            return self.copy_local(dest.slice(blocks.range(me)), source);
        }
        let caching = self.block_caching(bytes.saturating_add(bytes_of::<T>(blocks.total(n))));
        // This member's own block as the others' blocks here, but where it is read again
        // at once: the ring sends it on to the right, a leader by node to the other nodes.
        let own = match algorithm {
            MoveAlgorithm::Ring | MoveAlgorithm::PushByNode => Caching::Keep,
            _ => caching,
        };
        self.copy_local_as(dest.slice(blocks.range(me)), source, own)
            .await?;
        match algorithm {
            MoveAlgorithm::Ring => return self.ring(op, dest, blocks).await,
            MoveAlgorithm::Push => {
                let push = |_| (dest.slice(blocks.range(me)), source);
                let pull = |j| (dest.slice(blocks.range(j)), source);
                return self.move_across_nodes(op, desc, push, pull, caching).await;
            }
            MoveAlgorithm::IntoReady => {
                let push = |_| (dest.slice(blocks.range(me)), source);
                return self.move_into_ready(op, desc, push, caching).await;
            }
            MoveAlgorithm::PushByNode => {
                let each = blocks.count(me);
                let move_by_node =
                    self.fcollect_pushed_by_node(op, (dest, source), (each, caching), desc);
                return Box::pin(move_by_node).await;
            }
            MoveAlgorithm::Eager
            | MoveAlgorithm::EagerByNode
            | MoveAlgorithm::Flat
            | MoveAlgorithm::Pairwise => {}
        }
        // Boxed: inline, it made the eager fcollects of 4 and 256 bytes 1.07-1.11x slower at
        // 2 PEs (the call's future no longer polled fcollect_in inline); boxed they are
        // level, and a flat call pays one allocation.
        Box::pin(self.fcollect_flat(op, (dest, source), blocks, desc, caching)).await
    }

    /// [`Team::fcollect_in`] flat: enters, reads each member's block as soon as that member
    /// has entered, then syncs.
    async fn fcollect_flat<T: Pod>(
        &self,
        op: &mut Op<'_>,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        blocks: &Blocks,
        desc: u64,
        caching: Caching,
    ) -> Result<()> {
        let mut entrants = self.enter(op, desc).await?;
        while let Some(j) = self.next_entrant(op, &mut entrants).await? {
            if blocks.count(j) > 0 {
                let from = source.resized(blocks.count(j));
                self.dp()
                    .get_into(dest.slice(blocks.range(j)), from, self.pe(j), caching)
                    .await?;
            }
        }
        if op.rejected() {
            return Ok(());
        }
        self.sync_in(op, Descriptor::END).await
    }

    /// Receives one eager block from every other member into `dest`.
    async fn eager_gather<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        blocks: &Blocks,
        stamp: Stamp,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        if !self.eager_arrived(op, Senders::All) {
            self.eager_wait(op, Senders::All).await?;
        }
        for j in (1..n).map(|k| (me + k) % n) {
            let got = self.eager_peek(op, j, stamp)?;
            match agree(stamp.desc, got.desc, j) {
                Ok(()) => {
                    let part = dest.slice(blocks.range(j));
                    self.copy_local(part, self.view::<T>(got.data, part.len()))?;
                }
                Err(e) => op.reject(e),
            }
            self.eager_done(op, j, true)?;
        }
        Ok(())
    }

    /// Reads the blocks of the members `wanted` picks from their `source` into `dest`.
    async fn pull_blocks<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        blocks: &Blocks,
        wanted: impl Fn(usize) -> bool,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        // Every read started first: those from other nodes overlap.
        let reads: Vec<_> = (1..n)
            .map(|k| (me + k) % n)
            .filter(|&j| wanted(j) && blocks.count(j) > 0)
            .map(|j| {
                let from = source.resized(blocks.count(j));
                self.dp()
                    .get_into(dest.slice(blocks.range(j)), from, self.pe(j), Caching::Keep)
            })
            .collect();
        for read in reads {
            read.await?;
        }
        Ok(())
    }

    /// The ring allgather; this PE's own block is already in `dest`.
    async fn ring<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        blocks: &Blocks,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let layout = self.inner.layout;
        let seq = op.next_seq();
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        self.signal(right, layout.sig(me), value(seq, 0))?;
        for k in 1..n {
            let b = (me + n - k) % n;
            self.wait_word("ring", layout.sig(left), value(seq, k - 1))
                .await?;
            let part = dest.slice(blocks.range(b));
            if !part.is_empty() {
                // Ordinary stores: the member on the right reads this block next.
                self.dp()
                    .get_into(part, part, self.pe(left), Caching::Keep)
                    .await?;
            }
            if k < n - 1 {
                self.signal(right, layout.sig(me), value(seq, k))?;
            }
        }
        self.signal(left, layout.ack(me), value(seq, 0))?;
        self.wait_word("ring", layout.ack(right), value(seq, 0))
            .await
    }

    /// Concatenates every member's `source`, of any length, into `dest` on every member, in
    /// member order (`shmem_collect`); resolves to the number of elements gathered. Collective;
    /// `dest` holds the sum of the lengths and does not overlap `source`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `dest` is too short for the total (on every member whose
    /// `dest` is; the team stays usable), [`Error::InvalidArgument`] for overlapping buffers,
    /// [`Error::CollectiveMismatch`] when members called another collective.
    /// On the eager path, a message that an earlier mismatched call left behind also gives
    /// `CollectiveMismatch`, and leaves the team unusable (see [`crate::collectives`]).
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn collect<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
    ) -> Result<usize> {
        let (dest, source) = (dest.into(), source.into());
        let checks = (|| {
            holds(self.dp(), source, source.len(), "collect source")?;
            // A lone member knows the total now, and finds a short `dest` before it takes the
            // team; larger teams learn it in the protocol, which rejects it on every member.
            let needed = if self.n_pes() == 1 { source.len() } else { 0 };
            holds(self.dp(), dest, needed, "collect destination")?;
            disjoint(self.dp(), dest, source, false)
        })();
        self.refuse_on(Kind::Collect, checks)?;
        let desc = Descriptor::of(Kind::Collect, std::mem::size_of::<T>() as u64, 0);
        let mut op = self.begin(desc)?;
        let outcome = self.collect_in(&mut op, dest, source, desc).await;
        op.settle(outcome)
    }

    /// The collect protocol after the call's checks: a team of one copies its block; others
    /// go eager or counted, by whether the team has eager slots.
    async fn collect_in<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<usize> {
        let mine = source.len();
        if self.n_pes() == 1 {
            self.copy_local(dest.slice(..mine), source)?;
            return Ok(mine);
        }
        if self.inner.layout.eager_bytes > 0 {
            return self.collect_eager(op, dest, source, desc).await;
        }
        self.collect_counted(op, dest, source, desc).await
    }

    /// [`Team::collect_in`] in a team with eager slots: every member sends its block (or,
    /// for a large one, its size) to every other through their slots, so that each learns
    /// all sizes from what it receives; blocks too large for a slot are then pulled.
    async fn collect_eager<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<usize> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let size = std::mem::size_of::<T>().max(1);
        let mine = source.len();
        let bytes = bytes_of::<T>(mine);
        for k in 1..n {
            self.eager_prefetch(op, (me + k) % n, bytes);
        }
        let inline = if self.eager_copy(bytes) {
            source
        } else {
            source.slice(..0)
        };
        let stamp = Stamp::new(op, desc);
        for k in 1..n {
            let to = (me + k) % n;
            if !self.eager_slot_free(op, to) {
                self.eager_slot_wait(op, to).await?;
            }
            self.eager_send(op, to, Payload::Sym(inline), bytes, stamp)?;
        }
        let others: Vec<usize> = (1..n).map(|k| (me + k) % n).collect();
        if !self.eager_arrived(op, Senders::All) {
            self.eager_wait(op, Senders::All).await?;
        }
        let mut counts = vec![mine; n];
        let mut arrived = Vec::with_capacity(others.len());
        for &j in &others {
            let got = self.eager_peek(op, j, stamp)?;
            counts[j] = got.bytes / size;
            if let Err(e) = agree(desc, got.desc, j) {
                op.reject(e);
            }
            arrived.push(got);
        }
        let blocks = Blocks::from_counts(counts);
        let total = blocks.total(n);
        if let Err(e) = holds(self.dp(), dest, total, "collect destination") {
            op.reject(e);
        }
        let copy = !op.rejected();
        if copy {
            self.copy_local(dest.slice(blocks.range(me)), source)?;
        }
        for (&j, got) in others.iter().zip(arrived) {
            if copy && self.eager_copy(got.bytes) {
                let part = dest.slice(blocks.range(j));
                self.copy_local(part, self.view::<T>(got.data, part.len()))?;
            }
            self.eager_done(op, j, true)?;
        }
        if (0..n).any(|j| !self.eager_copy(bytes_of::<T>(blocks.count(j)))) {
            if copy {
                self.pull_blocks(dest, source, &blocks, |j| {
                    !self.eager_copy(bytes_of::<T>(blocks.count(j)))
                })
                .await?;
            }
            self.sync_in(op, Descriptor::END).await?;
        }
        Ok(total)
    }

    /// [`Team::collect_in`] in a team without eager slots: members publish their sizes and
    /// room in their count words, agree in a sync, read each other's words, and move the
    /// blocks by pulls (or by a ring, for large blocks in a tree-shaped plan).
    async fn collect_counted<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<usize> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let mine = source.len();
        let count = self.inner.layout.count();
        self.local(count).store(mine as u64, Ordering::Release);
        self.local(count + 8)
            .store(dest.len() as u64, Ordering::Release);
        self.sync_in(op, desc).await?;
        if op.rejected() {
            return Ok(0);
        }
        let mut words = vec![[0u64; 2]; n];
        let reads: Vec<_> = words
            .iter_mut()
            .enumerate()
            .map(|(j, w)| self.dp().get(w, self.view::<u64>(count, 2), self.pe(j)))
            .collect();
        for read in reads {
            read.await?;
        }
        let counts: Vec<usize> = words.iter().map(|w| w[0] as usize).collect();
        let room: Vec<usize> = words.iter().map(|w| w[1] as usize).collect();
        let blocks = Blocks::from_counts(counts);
        let total = blocks.total(n);
        if let Some(j) = (0..n).find(|&j| room[j] < total) {
            op.reject(Error::OutOfBounds {
                what: if j == me {
                    "collect destination"
                } else {
                    "another member's collect destination"
                },
                needed: total,
                available: room[j],
            });
            self.sync_in(op, Descriptor::END).await?;
            return Ok(total);
        }
        self.copy_local(dest.slice(blocks.range(me)), source)?;
        let largest = (0..n).map(|j| blocks.count(j)).max().unwrap_or(0);
        if !self.flat() && self.large(bytes_of::<T>(largest)) {
            self.ring(op, dest.slice(..total), &blocks).await?;
        } else {
            self.pull_blocks(dest, source, &blocks, |_| true).await?;
            self.sync_in(op, Descriptor::END).await?;
        }
        Ok(total)
    }
}
