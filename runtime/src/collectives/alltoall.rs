//! `alltoall` and `alltoalls`: block `j` of every member's `source` goes to member `j`, into
//! the block of `dest` numbered after the sender.
//!
//! - Eager (small blocks, teams with eager slots): each member writes block `j` into member
//!   `j`'s slot; each copies the blocks out. On a team that spans nodes with several members
//!   on some node, where the messages fit the slots, by node instead: through the leaders,
//!   one message per pair of leaders over the fabric (`alltoall_nodes.rs`).
//! - Pairwise (blocks up to `TeamConfig::pairwise_bytes` that the eager form does not take,
//!   contiguous, on a team of one node that syncs flat): of each pair of members, the one
//!   that claims the pair second moves both blocks (`pairwise.rs`).
//! - Push (contiguous blocks, teams that span nodes): blocks for other nodes go out by puts
//!   with signals (`push.rs`).
//! - Into ready buffers (contiguous blocks the eager form does not take, where the callers
//!   make every `dest` ready before the call, `TeamConfig::dest_ready`): each member writes
//!   its blocks into their receivers' `dest`, then syncs (`push.rs`).
//! - Flat (otherwise): enter, read block `me` of every member's `source` as soon as that
//!   member has entered (on a flat team; after the whole entry sync on others), member
//!   `me + 1` first, so that members spread their reads over different peers; then sync.

use bytemuck::Pod;

use super::eager::{agree, Payload, Senders, Stamp};
use super::plan::MoveAlgorithm;
use super::{bytes_of, disjoint, holds, Descriptor, Kind};
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::{Op, Team};

/// Elements spanned by `nelems` elements `stride` apart.
fn extent(nelems: usize, stride: usize) -> Result<usize> {
    if stride == 0 {
        return Err(Error::InvalidArgument(
            "alltoalls: strides must be at least 1".into(),
        ));
    }
    if nelems == 0 {
        return Ok(0);
    }
    (nelems - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(1))
        .ok_or_else(|| Error::InvalidArgument("alltoalls: the stride overflows".into()))
}

/// Strides of an `alltoalls`, in elements.
#[derive(Debug, Clone, Copy)]
struct Strides {
    dst: usize,
    sst: usize,
}

impl Team {
    /// Sends block `j` of `source` (elements `j·nelems ..`) to member `j`, which stores it as
    /// block `me` of its `dest` (`shmem_alltoall`). Collective; every member passes the same
    /// `nelems`; `source` and `dest` hold `n_pes × nelems` elements and do not overlap.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for short buffers, [`Error::InvalidArgument`] for overlapping
    /// ones, [`Error::CollectiveMismatch`] when members passed different counts.
    /// On the eager path, a message that an earlier mismatched call left behind also gives
    /// `CollectiveMismatch`, and leaves the team unusable (see [`crate::collectives`]).
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable, and in
    /// the pairwise form (see `collectives/pairwise.rs`) a member already moving its pair's
    /// blocks may still write into `dest` afterwards.
    pub async fn alltoall<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
        nelems: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let checks = (|| {
            let total = nelems.checked_mul(self.n_pes()).ok_or_else(|| {
                Error::InvalidArgument(format!("alltoall: {nelems} elements per member overflow"))
            })?;
            holds(self.dp(), source, total, "alltoall source")?;
            holds(self.dp(), dest, total, "alltoall destination")?;
            disjoint(self.dp(), dest.slice(..total), source.slice(..total), false)
        })();
        self.refuse_on(Kind::Alltoall, checks)?;
        let detail = self.contract_detail();
        let desc = Descriptor::of(Kind::Alltoall, detail, bytes_of::<T>(nelems) as u64);
        let mut op = self.begin(desc)?;
        let outcome = self
            .exchange_blocks(&mut op, dest, source, nelems, None, desc)
            .await;
        op.settle(outcome)
    }

    /// The strided form of [`Team::alltoall`] (`shmem_alltoalls`): element `k` of the block
    /// for member `j` is `source[(j·nelems + k)·sst]`, and it lands in
    /// `dest[(me·nelems + k)·dst]` on member `j`. Strides count elements and are at least 1,
    /// and every member passes the same ones: the call's descriptor carries them, so members
    /// that differ get [`Error::CollectiveMismatch`] where their calls meet.
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn alltoalls<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
        dst: usize,
        sst: usize,
        nelems: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let checks = (|| {
            let all = nelems.checked_mul(self.n_pes()).ok_or_else(|| {
                Error::InvalidArgument(format!("alltoalls: {nelems} elements per member overflow"))
            })?;
            let (dest_span, source_span) = (extent(all, dst)?, extent(all, sst)?);
            holds(self.dp(), source, source_span, "alltoalls source")?;
            holds(self.dp(), dest, dest_span, "alltoalls destination")?;
            disjoint(
                self.dp(),
                dest.slice(..dest_span),
                source.slice(..source_span),
                false,
            )
        })();
        self.refuse_on(Kind::Alltoalls, checks)?;
        let desc = Descriptor::of(
            Kind::Alltoalls,
            strides_detail(dst, sst),
            bytes_of::<T>(nelems) as u64,
        );
        let strides = Some(Strides { dst, sst });
        let mut op = self.begin(desc)?;
        let outcome = self
            .exchange_blocks(&mut op, dest, source, nelems, strides, desc)
            .await;
        op.settle(outcome)
    }

    /// Both forms: contiguous blocks (`strides` `None`) or strided ones.
    async fn exchange_blocks<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        nelems: usize,
        strides: Option<Strides>,
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let bytes = bytes_of::<T>(nelems);
        let algorithm = self.inner.plan.alltoall(bytes, strides.is_some());
        if n > 1 && bytes > 0 && algorithm == MoveAlgorithm::EagerByNode {
            return self.alltoall_by_node(op, dest, source, nelems, desc).await;
        }
        if n > 1 && bytes > 0 && algorithm == MoveAlgorithm::Eager {
            return self
                .exchange_eager(op, dest, source, nelems, strides, desc)
                .await;
        }
        let mut buf = vec![T::zeroed(); if strides.is_some() { nelems } else { 0 }];
        if n == 1 || bytes == 0 {
            return self
                .move_block(dest, source, nelems, strides, me, &mut buf)
                .await;
        }
        if algorithm == MoveAlgorithm::Pairwise {
            return self.exchange_pairwise(op, dest, source, nelems, desc).await;
        }
        if matches!(algorithm, MoveAlgorithm::IntoReady | MoveAlgorithm::Push) {
            self.move_block(dest, source, nelems, strides, me, &mut buf)
                .await?;
            let block = |j: usize| j * nelems..(j + 1) * nelems;
            let push = |j| (dest.slice(block(me)), source.slice(block(j)));
            let caching = self.alltoall_caching(bytes);
            if algorithm == MoveAlgorithm::IntoReady {
                return self.move_into_ready(op, desc, push, caching).await;
            }
            let pull = |j| (dest.slice(block(j)), source.slice(block(me)));
            return self.move_across_nodes(op, desc, push, pull, caching).await;
        }
        // Where the entry only announces this member, its own block moves while the others'
        // entries travel; where it waits for every member, the block moves first.
        let entry_waits = !self.entry_only_announces();
        if entry_waits {
            self.move_block(dest, source, nelems, strides, me, &mut buf)
                .await?;
        }
        let mut entrants = self.enter(op, desc).await?;
        if !entry_waits {
            self.move_block(dest, source, nelems, strides, me, &mut buf)
                .await?;
        }
        while let Some(j) = self.next_entrant(op, &mut entrants).await? {
            self.move_block(dest, source, nelems, strides, j, &mut buf)
                .await?;
        }
        if op.rejected() {
            return Ok(());
        }
        self.sync_in(op, Descriptor::END).await
    }

    /// [`Team::exchange_blocks`] through the eager slots: sends every other member its block,
    /// moves this PE's own, then takes each member's block from its slot.
    async fn exchange_eager<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        nelems: usize,
        strides: Option<Strides>,
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let bytes = bytes_of::<T>(nelems);
        let mut buf = vec![T::zeroed(); if strides.is_some() { nelems } else { 0 }];
        for k in 1..n {
            self.eager_prefetch(op, (me + k) % n, bytes);
        }
        let stamp = Stamp::new(op, desc);
        for k in 1..n {
            let j = (me + k) % n;
            let payload = match strides {
                None => Payload::Sym(source.slice(j * nelems..(j + 1) * nelems)),
                Some(s) => {
                    let block = source.slice(j * nelems * s.sst..);
                    self.dp()
                        .iget(&mut buf, block, 1, s.sst, nelems, self.dp().my_pe())
                        .await?;
                    Payload::Local(&buf)
                }
            };
            if !self.eager_slot_free(op, j) {
                self.eager_slot_wait(op, j).await?;
            }
            self.eager_send(op, j, payload, bytes, stamp)?;
        }
        self.move_block(dest, source, nelems, strides, me, &mut buf)
            .await?;
        if !self.eager_arrived(op, Senders::All) {
            self.eager_wait(op, Senders::All).await?;
        }
        for j in (1..n).map(|k| (me + k) % n) {
            let got = self.eager_peek(op, j, stamp)?;
            match agree(desc, got.desc, j) {
                Ok(()) => match strides {
                    None => {
                        let part = dest.slice(j * nelems..(j + 1) * nelems);
                        self.copy_local(part, self.view::<T>(got.data, nelems))?;
                    }
                    Some(s) => {
                        let me_pe = self.dp().my_pe();
                        self.dp()
                            .get(&mut buf, self.view::<T>(got.data, nelems), me_pe)
                            .await?;
                        let part = dest.slice(j * nelems * s.dst..);
                        self.dp().iput(part, &buf, s.dst, 1, nelems, me_pe).await?;
                    }
                },
                Err(e) => op.reject(e),
            }
            self.eager_done(op, j, true)?;
        }
        Ok(())
    }

    /// [`Team::block_caching`] for an `alltoall` of `bytes` bytes per block: every member's
    /// `source` and `dest` hold one block per member.
    pub(super) fn alltoall_caching(&self, bytes: usize) -> Caching {
        self.block_caching(bytes.saturating_mul(2 * self.n_pes()))
    }

    /// Reads block `me` of member `from`'s `source` into block `from` of this PE's `dest`.
    async fn move_block<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        nelems: usize,
        strides: Option<Strides>,
        from: usize,
        buf: &mut [T],
    ) -> Result<()> {
        let me = self.my_pe();
        let pe = self.pe(from);
        match strides {
            None => {
                let part = dest.slice(from * nelems..(from + 1) * nelems);
                let block = source.slice(me * nelems..(me + 1) * nelems);
                let caching = self.alltoall_caching(bytes_of::<T>(nelems));
                self.dp().get_into(part, block, pe, caching).await
            }
            Some(s) => {
                let block = source.slice(me * nelems * s.sst..);
                self.dp().iget(buf, block, 1, s.sst, nelems, pe).await?;
                let part = dest.slice(from * nelems * s.dst..);
                self.dp()
                    .iput(part, buf, s.dst, 1, nelems, self.dp().my_pe())
                    .await
            }
        }
    }
}

/// The strides of an `alltoalls` as a descriptor's 20-bit detail: exact when both are below
/// 1024, else a mix of both (two calls that differ then differ in their detail but for one
/// chance in 2^20).
fn strides_detail(dst: usize, sst: usize) -> u64 {
    if dst < 1024 && sst < 1024 {
        (dst as u64) << 10 | sst as u64
    } else {
        let mixed = (dst as u64 ^ (sst as u64).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (mixed >> 44) | 1 << 19
    }
}
