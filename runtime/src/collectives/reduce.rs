//! Reductions (`shmem_<op>_reduce`: the result on every member) and `reducescatter` (member
//! `j` gets block `j` of the result).
//!
//! - Eager (small messages, teams with eager slots): every member sends its contribution to
//!   every other; each combines all of them in member order, so all get the same bits. On a
//!   team that spans nodes with several members on some node, by node instead: members to
//!   their leader, leaders among themselves, leaders back to their members
//!   (`reduce_nodes.rs`).
//! - Tree (medium messages, or large teams): contributions are combined up a tree into the
//!   root's `dest` (each inner member accumulating its subtree into its own `dest`, reading
//!   its children's buffers in place), then the result goes back down the tree: read from
//!   the parent's `dest` on its node, pushed into the child's `dest` with the signal behind
//!   it from another node (the child, waiting since it signalled its part, no longer uses
//!   it; `posted.rs`). A star in small teams, binomial in large ones, two levels by
//!   node, below `large_bytes`, on teams that span more nodes than their flat limit with
//!   several members on some node.
//! - Scattered by node (teams that span nodes with several members on some node: up to
//!   their flat limit of nodes at any size above the eager ones, beyond it from
//!   `large_bytes` up): each node's partial is combined into its leader's `dest` (by
//!   its members, each a part of the elements, where the leader alone would read more
//!   than `large_bytes` of theirs; else by the leader), and the leaders split the combining
//!   of the partials among themselves (`reduce_nodes.rs`).
//! - Reduce-scatter then allgather (large messages): after a sync each member combines one
//!   n-th of the elements, reading every member's `source`; then each enters a second sync
//!   and reads another member's part of the result as soon as that member has entered it
//!   (on a flat team, member by member: see `Team::enter`; after the whole sync on others);
//!   a third sync ends it. Every member does an equal share of the arithmetic.
//!
//! Combining goes block by block (16 KiB), so that the operands stay in cache.

use std::sync::atomic::Ordering;

use super::eager::{agree, Payload, Senders, Stamp, DISAGREED};
use super::plan::{MoveAlgorithm, ReduceAlgorithm};
use super::posted::Post;
use super::reduce_ops::{BitwiseReducible, ReduceOp, Reducible};
use super::scratch::Scratch;
use super::shapes::{Shape, Tree};
use super::{bytes_of, disjoint, holds, Descriptor, Kind};
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

/// Bytes combined at a time.
const BLOCK_BYTES: usize = 16 << 10;
/// Bytes combined at a time from inputs that include PEs on other nodes: each block is a
/// round trip over the fabric (blocks of [`BLOCK_BYTES`] made an 8 MiB reduction across two
/// hosts 512 of them).
const REMOTE_BLOCK_BYTES: usize = 1 << 20;
/// Words of each stack buffer that small combinations use instead of the heap.
const SMALL_WORDS: usize = 64;
/// Members of a team whose eager reduction keeps where their messages lie on the stack
/// (the default `flat_max_pes`); larger teams allocate.
const STACK_MEMBERS: usize = 8;

/// Where one contribution lives: a view and the world PE that holds it.
pub(super) type Input<'a, T> = (SymSlice<'a, T>, usize);

/// Refuses a bitwise operator on a floating-point type, and `min`/`max` on complex numbers.
fn applies<T: Reducible>(op: ReduceOp) -> Result<()> {
    if op.is_bitwise() && !T::INTEGER {
        return Err(Error::InvalidArgument(format!(
            "{op:?} applies to integers only, not {}",
            std::any::type_name::<T>()
        )));
    }
    if matches!(op, ReduceOp::Min | ReduceOp::Max) && !T::ORDERED {
        return Err(Error::InvalidArgument(format!(
            "{op:?} applies to ordered types only, not {}",
            std::any::type_name::<T>()
        )));
    }
    Ok(())
}

/// Element range of part `c` of `len` elements cut into `n` parts.
pub(super) fn part(c: usize, n: usize, len: usize) -> std::ops::Range<usize> {
    let at = |c: usize| ((c as u128 * len as u128) / n as u128) as usize;
    at(c)..at(c + 1)
}

impl Team {
    /// Combines `source` of every member element-wise with `op` and stores the result in
    /// `dest` on every member (`shmem_<op>_reduce`); `source.len()` elements. Collective;
    /// every member passes the same operator, type and length. `dest` and `source` may be
    /// the same range.
    ///
    /// ```no_run
    /// # async fn f(team: ferroshmem_runtime::Team, x: ferroshmem_runtime::SymBuffer<f64>) -> ferroshmem_runtime::Result<()> {
    /// use ferroshmem_runtime::ReduceOp;
    /// team.reduce(ReduceOp::Sum, &x, &x).await?; // x now holds the sum over the team
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bitwise operator on a float type or overlapping
    /// buffers, [`Error::OutOfBounds`] for a short `dest`, [`Error::CollectiveMismatch`]
    /// when members passed different operators, types or lengths.
    /// On the eager path, a message that an earlier mismatched call left behind also gives
    /// `CollectiveMismatch`, and leaves the team unusable (see [`crate::collectives`]).
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn reduce<'d, 's, T: Reducible>(
        &self,
        op: ReduceOp,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let nreduce = source.len();
        let checks = (|| {
            applies::<T>(op)?;
            holds(self.dp(), source, nreduce, "reduce source")?;
            holds(self.dp(), dest, nreduce, "reduce destination")?;
            let dest = dest.slice(..nreduce);
            disjoint(self.dp(), dest, source, true)?;
            Ok(dest)
        })();
        let dest = self.refuse_on(Kind::Reduce, checks)?;
        let bytes = bytes_of::<T>(nreduce);
        let detail = op.code() | T::TAG << 3;
        let desc = Descriptor::of(Kind::Reduce, detail, bytes as u64);
        let mut state = self.begin(desc)?;
        let outcome = self.reduce_in(&mut state, op, dest, source, desc).await;
        state.settle(outcome)
    }

    async fn reduce_in<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let n = self.n_pes();
        let bytes = bytes_of::<T>(source.len());
        if n == 1 {
            return self.copy_local(dest, source);
        }
        if bytes == 0 {
            return Ok(());
        }
        match self.inner.plan.reduce(bytes) {
            ReduceAlgorithm::Eager => self.eager_reduce(state, op, dest, |_| source, desc).await,
            ReduceAlgorithm::EagerByNode => {
                self.eager_reduce_by_node(state, op, dest, source, desc)
                    .await
            }
            ReduceAlgorithm::ScatterGather => {
                self.reduce_scatter_allgather(state, op, dest, source, desc)
                    .await
            }
            ReduceAlgorithm::Tree(shape) => {
                self.tree_reduce(state, shape, op, dest, source, desc).await
            }
            ReduceAlgorithm::ScatteredByNode => {
                // Boxed: inline, its state would enlarge every reduction's future, the
                // one-node and eager ones included, for a form whose every call crosses the
                // fabric.
                Box::pin(self.scattered_reduce_by_node(state, op, dest, source, desc)).await
            }
        }
    }

    /// Stores in `dest` the combination of the `count` inputs `input(0)`, `input(1)`, …, in
    /// that order: in blocks of [`BLOCK_BYTES`], so that the operands stay in cache, each
    /// input read in turn, where every input lies on this node.
    pub(super) async fn combine_into<'s, T: Reducible>(
        &self,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        count: usize,
        input: impl Fn(usize) -> Input<'s, T>,
    ) -> Result<()> {
        let across = self.inner.plan.nodes.nodes() > 1
            && (0..count).any(|k| !self.dp().is_mapped(input(k).1));
        if across {
            // Boxed: its reads would otherwise enlarge every reduction's future, the
            // one-node and eager ones included.
            return Box::pin(self.combine_across_nodes(op, dest, count, &input)).await;
        }
        self.combine_onto(op, (dest, self.dp().my_pe()), count, input)
            .await
    }

    /// [`Team::combine_into`] where every input lies on this node, into `dest` on PE `to`
    /// (this PE, or one mapped here).
    pub(super) async fn combine_onto<'s, T: Reducible>(
        &self,
        op: ReduceOp,
        (dest, to): (SymSlice<'_, T>, usize),
        count: usize,
        input: impl Fn(usize) -> Input<'s, T>,
    ) -> Result<()> {
        let len = dest.len();
        let size = std::mem::size_of::<T>().max(1);
        let block = (BLOCK_BYTES / size).clamp(1, len.max(1));
        // Small messages combine in two stack buffers, larger ones in two heap blocks.
        let mut stack = [[0u64; SMALL_WORDS]; 2];
        let mut heap: [Scratch<T>; 2];
        let (acc, tmp) = {
            let [a, t] = &mut stack;
            match (
                bytemuck::try_cast_slice_mut::<u64, T>(a),
                bytemuck::try_cast_slice_mut::<u64, T>(t),
            ) {
                (Ok(a), Ok(t)) if block <= a.len() => (&mut a[..block], &mut t[..block]),
                _ => {
                    heap = [Scratch::zeroed(block), Scratch::zeroed(block)];
                    let [a, t] = &mut heap;
                    (&mut a[..], &mut t[..])
                }
            }
        };
        for start in (0..len).step_by(block) {
            let end = (start + block).min(len);
            let (a, t) = (&mut acc[..end - start], &mut tmp[..end - start]);
            for k in 0..count {
                let (src, pe) = input(k);
                let target = if k == 0 { &mut *a } else { &mut *t };
                self.dp().get(target, src.slice(start..end), pe).await?;
                if k > 0 {
                    T::combine(op, a, t);
                }
            }
            self.dp().put(dest.slice(start..end), a, to).await?;
        }
        Ok(())
    }

    /// [`Team::combine_into`] where some input lies on another node: blocks of
    /// [`REMOTE_BLOCK_BYTES`], each block's inputs read at once
    /// ([`Team::combine_overlapped`]), so that a block costs one round trip over the fabric.
    async fn combine_across_nodes<'s, T: Reducible>(
        &self,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        count: usize,
        input: &impl Fn(usize) -> Input<'s, T>,
    ) -> Result<()> {
        let len = dest.len();
        let block = (REMOTE_BLOCK_BYTES / std::mem::size_of::<T>().max(1)).clamp(1, len.max(1));
        let me = self.dp().my_pe();
        for start in (0..len).step_by(block) {
            let end = (start + block).min(len);
            let combined = self
                .combine_overlapped(op, count, start..end, input)
                .await?;
            self.dp().put(dest.slice(start..end), &combined, me).await?;
        }
        Ok(())
    }

    /// Elements `range` of the `count` inputs combined in input order, every input read at
    /// once: on a team that spans nodes, the reads from other nodes overlap instead of taking
    /// a round trip each.
    pub(super) async fn combine_overlapped<'s, T: Reducible>(
        &self,
        op: ReduceOp,
        count: usize,
        range: std::ops::Range<usize>,
        input: &impl Fn(usize) -> Input<'s, T>,
    ) -> Result<Scratch<T>> {
        let len = range.len();
        let mut parts: Vec<Scratch<T>> = (0..count).map(|_| Scratch::zeroed(len)).collect();
        let reads: Vec<_> = parts
            .iter_mut()
            .enumerate()
            .map(|(k, part)| {
                let (src, pe) = input(k);
                self.dp().get(part, src.slice(range.clone()), pe)
            })
            .collect();
        for read in reads {
            read.await?;
        }
        let mut parts = parts.into_iter();
        let mut acc = parts.next().unwrap_or_else(|| Scratch::zeroed(len));
        for other in parts {
            T::combine(op, &mut acc, &other);
        }
        Ok(acc)
    }

    /// As [`Team::combine_into`] for inputs that all lie in this PE's own memory (its source
    /// and its eager slots): plain loads and stores, one wake-up check at the end.
    pub(super) fn combine_local<'s, T: Reducible>(
        &self,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        count: usize,
        input: impl Fn(usize) -> SymSlice<'s, T>,
    ) -> Result<()> {
        let dp = self.dp();
        let own = dp.own_segment();
        let map = own.mapping();
        let len = dest.len();
        let size = std::mem::size_of::<T>().max(1);
        let to = dp.locate(dest, len, "reduce destination")?;
        let mut stack = [[0u64; SMALL_WORDS]; 2];
        let [a, t] = &mut stack;
        let (acc, tmp) = match (
            bytemuck::try_cast_slice_mut::<u64, T>(a),
            bytemuck::try_cast_slice_mut::<u64, T>(t),
        ) {
            (Ok(a), Ok(t)) if !a.is_empty() => (a, t),
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "{} cannot be reduced in place",
                    std::any::type_name::<T>()
                )))
            }
        };
        let block = acc.len();
        for start in (0..len).step_by(block) {
            let end = (start + block).min(len);
            let (a, t) = (&mut acc[..end - start], &mut tmp[..end - start]);
            for k in 0..count {
                let at = dp.locate(input(k), len, "reduce contribution")?;
                let target = if k == 0 { &mut *a } else { &mut *t };
                map.read(at + start * size, bytemuck::cast_slice_mut(target));
                if k > 0 {
                    T::combine(op, a, t);
                }
            }
            map.write(to + start * size, bytemuck::cast_slice(a));
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        own.wake_watchers(to, to + len * size);
        Ok(())
    }

    /// Every member sends `block(j)` of its contribution to member `j` and combines what it
    /// receives with its own `block(me)`, in member order, into `dest`.
    async fn eager_reduce<'s, T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        block: impl Fn(usize) -> SymSlice<'s, T>,
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let bytes = bytes_of::<T>(dest.len());
        for k in 1..n {
            self.eager_prefetch(state, (me + k) % n, bytes);
        }
        let stamp = Stamp::new(state, desc);
        for k in 1..n {
            let j = (me + k) % n;
            if !self.eager_slot_free(state, j) {
                self.eager_slot_wait(state, j).await?;
            }
            self.eager_send(state, j, Payload::Sym(block(j)), bytes, stamp)?;
        }
        if !self.eager_arrived(state, Senders::All) {
            self.eager_wait(state, Senders::All).await?;
        }
        // Where each member's message lies: on the stack for the small teams that use
        // eager reductions by default, no allocation per call.
        let mut on_stack = [0usize; STACK_MEMBERS];
        let mut on_heap = Vec::new();
        let data = match n <= STACK_MEMBERS {
            true => &mut on_stack[..n],
            false => {
                on_heap.resize(n, 0);
                &mut on_heap[..]
            }
        };
        for j in (1..n).map(|k| (me + k) % n) {
            let got = self.eager_peek(state, j, stamp)?;
            if let Err(e) = agree(desc, got.desc, j) {
                state.reject(e);
            }
            data[j] = got.data;
        }
        if !state.rejected() {
            let input = |j: usize| match j == me {
                true => block(me),
                false => self.view::<T>(data[j], dest.len()),
            };
            self.combine_local(op, dest, n, input)?;
        }
        for j in (1..n).map(|k| (me + k) % n) {
            self.eager_done(state, j, true)?;
        }
        Ok(())
    }

    /// Up a tree rooted at member 0 into `dest`, then back down.
    async fn tree_reduce<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        shape: Shape,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let layout = self.inner.layout;
        let seq = state.next_seq();
        let (up, down) = (value(seq, 0), value(seq, 1));
        let tree = Tree::new(shape, 0, &self.inner.plan.nodes);
        let children = tree.children(me);
        self.wait_words("reduce", Layout::sig, &children, up)
            .await?;
        let mut forward = desc;
        for &c in &children {
            if self.local(layout.sig(c) + 8).load(Ordering::Acquire) != desc {
                forward = DISAGREED;
            }
        }
        if forward == desc && !children.is_empty() {
            let me_pe = self.dp().my_pe();
            let input = |k: usize| match k {
                0 => (source, me_pe),
                _ => {
                    let c = children[k - 1];
                    let leaf = tree.children(c).is_empty();
                    (if leaf { source } else { dest }, self.pe(c))
                }
            };
            self.combine_into(op, dest, children.len() + 1, input)
                .await?;
        }
        if let Some(p) = tree.parent(me) {
            forward = self
                .reduce_child_step(state, p, dest, (desc, forward), seq)
                .await?;
        } else if let Err(e) = agree(desc, forward, me) {
            state.reject(e);
        }
        let mut pushes = Vec::new();
        for &c in &children {
            let result = Post {
                to: c,
                offset: layout.sig(me),
                value: down,
                word: Some(forward),
            };
            match forward == desc && !self.shares_node(c) {
                true => pushes.push(self.put_posted(dest, dest, result)?),
                false => self.post_one(result)?,
            }
        }
        for pushed in pushes {
            pushed.landed(self).await?;
        }
        self.wait_words("reduce", Layout::ack, &children, up).await
    }

    /// A reduction tree's child's step to its `parent` (member numbers) in call `seq`: it
    /// posts `forward` (its descriptor, or [`DISAGREED`] from below) beside its entry on its
    /// `sig` line there, waits for the parent's release, reads the result from the parent's
    /// `dest` where they share a node (a parent on another node pushes it) unless the
    /// verdict disagrees with `desc`, which rejects the call, and acknowledges. Returns what
    /// to pass on to its own children: `forward`, or [`DISAGREED`].
    pub(super) async fn reduce_child_step<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        parent: usize,
        dest: SymSlice<'_, T>,
        (desc, forward): (u64, u64),
        seq: u64,
    ) -> Result<u64> {
        let me = self.my_pe();
        let layout = self.inner.layout;
        let (up, down) = (value(seq, 0), value(seq, 1));
        self.post(parent, layout.sig(me), up, layout.sig(me) + 8, &[forward])?;
        self.reduce_child_result(state, parent, dest, (desc, forward), (down, up))
            .await
    }

    /// The rest of [`Team::reduce_child_step`], once the child's entry is posted: the wait
    /// for the parent's release (`release` on its `sig` line here), the read of the result
    /// and the acknowledgement (`done` on this member's `ack` line there).
    pub(super) async fn reduce_child_result<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        parent: usize,
        dest: SymSlice<'_, T>,
        (desc, forward): (u64, u64),
        (release, done): (u64, u64),
    ) -> Result<u64> {
        let me = self.my_pe();
        let layout = self.inner.layout;
        self.wait_word("reduce", layout.sig(parent), release)
            .await?;
        let verdict = self.local(layout.sig(parent) + 8).load(Ordering::Acquire);
        let passed = match agree(desc, verdict, parent) {
            Ok(()) if self.shares_node(parent) => {
                self.dp()
                    .get_into(dest, dest, self.pe(parent), Caching::Keep)
                    .await?;
                forward
            }
            Ok(()) => forward,
            Err(e) => {
                state.reject(e);
                DISAGREED
            }
        };
        self.signal(parent, layout.ack(me), done)?;
        Ok(passed)
    }

    /// Each member combines its n-th of the elements, then gathers the others' parts.
    async fn reduce_scatter_allgather<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let len = source.len();
        self.sync_in(state, desc).await?;
        if state.rejected() {
            return Ok(());
        }
        let mine = part(me, n, len);
        let input = |k: usize| (source.slice(mine.clone()), self.pe((me + k) % n));
        self.combine_into(op, dest.slice(mine.clone()), n, input)
            .await?;
        // Each member's part is ready once it has entered this sync: read it then (every
        // read started first, so that those from other nodes overlap).
        let mut combined = self.enter(state, Descriptor::END).await?;
        let mut reads = Vec::with_capacity(n - 1);
        while let Some(j) = self.next_entrant(state, &mut combined).await? {
            let theirs = dest.slice(part(j, n, len));
            if !theirs.is_empty() {
                reads.push(
                    self.dp()
                        .get_into(theirs, theirs, self.pe(j), Caching::Keep),
                );
            }
        }
        for read in reads {
            read.await?;
        }
        self.sync_in(state, Descriptor::END).await
    }

    /// Combines `source` (`n_pes × nreduce` elements) of every member element-wise with
    /// `op`; member `j` receives elements `j·nreduce .. (j+1)·nreduce` of the result in
    /// `dest` (`shmem_<op>_reducescatter`). Collective; `dest` holds `nreduce` elements and
    /// does not overlap `source`.
    ///
    /// # Errors
    /// As [`Team::reduce`].
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn reducescatter<'d, 's, T: Reducible>(
        &self,
        op: ReduceOp,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
        nreduce: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let (n, me) = (self.n_pes(), self.my_pe());
        let checks = (|| {
            applies::<T>(op)?;
            let total = nreduce.checked_mul(n).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "reducescatter: {nreduce} elements per member overflow"
                ))
            })?;
            holds(self.dp(), source, total, "reducescatter source")?;
            holds(self.dp(), dest, nreduce, "reducescatter destination")?;
            let (dest, source) = (dest.slice(..nreduce), source.slice(..total));
            disjoint(self.dp(), dest, source, false)?;
            Ok((dest, source))
        })();
        let (dest, source) = self.refuse_on(Kind::Reducescatter, checks)?;
        let bytes = bytes_of::<T>(nreduce);
        let desc = Descriptor::of(Kind::Reducescatter, op.code() | T::TAG << 3, bytes as u64);
        let block = |j: usize| source.slice(j * nreduce..(j + 1) * nreduce);
        let mut state = self.begin(desc)?;
        let outcome = if n == 1 {
            self.copy_local(dest, block(0))
        } else if bytes == 0 {
            Ok(())
        } else if self.inner.plan.reducescatter(bytes) == MoveAlgorithm::Eager {
            self.eager_reduce(&mut state, op, dest, block, desc).await
        } else {
            self.flat_reducescatter(&mut state, op, dest, block(me), desc)
                .await
        };
        state.settle(outcome)
    }

    async fn flat_reducescatter<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        mine: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        self.sync_in(state, desc).await?;
        if state.rejected() {
            return Ok(());
        }
        let input = |k: usize| (mine, self.pe((me + k) % n));
        self.combine_into(op, dest, n, input).await?;
        self.sync_in(state, Descriptor::END).await
    }
}

/// The named forms of [`Team::reduce`] and [`Team::reducescatter`].
macro_rules! named {
    ($($reduce:ident, $scatter:ident, $op:ident, $bound:ident, $c:literal;)*) => {
        impl Team {$(
            #[doc = concat!("`shmem_", $c, "_reduce`: [`Team::reduce`] with [`ReduceOp::", stringify!($op), "`].")]
            ///
            /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
            pub async fn $reduce<'d, 's, T: $bound>(
                &self,
                dest: impl Into<SymSlice<'d, T>>,
                source: impl Into<SymSlice<'s, T>>,
            ) -> Result<()> {
                self.reduce(ReduceOp::$op, dest, source).await
            }

            #[doc = concat!("`shmem_", $c, "_reducescatter`: [`Team::reducescatter`] with [`ReduceOp::", stringify!($op), "`].")]
            ///
            /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
            pub async fn $scatter<'d, 's, T: $bound>(
                &self,
                dest: impl Into<SymSlice<'d, T>>,
                source: impl Into<SymSlice<'s, T>>,
                nreduce: usize,
            ) -> Result<()> {
                self.reducescatter(ReduceOp::$op, dest, source, nreduce).await
            }
        )*}
    };
}

named! {
    and_reduce, and_reducescatter, And, BitwiseReducible, "and";
    or_reduce, or_reducescatter, Or, BitwiseReducible, "or";
    xor_reduce, xor_reducescatter, Xor, BitwiseReducible, "xor";
    min_reduce, min_reducescatter, Min, Reducible, "min";
    max_reduce, max_reducescatter, Max, Reducible, "max";
    sum_reduce, sum_reducescatter, Sum, Reducible, "sum";
    prod_reduce, prod_reducescatter, Prod, Reducible, "prod";
}

#[cfg(test)]
mod tests {
    use super::part;

    #[test]
    fn parts_tile_the_range() {
        for n in 1..9 {
            for len in [0, 1, 7, 100] {
                let ends: Vec<_> = (0..n).map(|c| part(c, n, len)).collect();
                assert_eq!(ends[0].start, 0);
                assert_eq!(ends[n - 1].end, len);
                assert!(ends.windows(2).all(|w| w[0].end == w[1].start));
            }
        }
    }
}
