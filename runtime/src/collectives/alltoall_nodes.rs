//! The eager `alltoall` by node: small contiguous blocks on a team that spans nodes with
//! several members on some node, where a member's blocks and a pair of nodes' blocks each
//! fit an eager slot.
//!
//! # Protocol
//! Each member sends all its blocks to its node's leader, over mapped memory. A leader sends
//! every other leader the blocks its node's members send that node's members, packed
//! (sender by sender in member order, receivers in member order: one message per pair of
//! leaders over the fabric), then hands each member of its node the blocks bound for it, in
//! sender order, from its node's messages and the other leaders' packs. Every message goes
//! through the eager slots (`eager.rs`).
//!
//! # Why
//! The flat eager form sends each member's block to each other member: n(n − 1) messages,
//! each PE's half of them over the fabric. With 8 PEs on 2 namespace hosts, 4 each, a
//! 4-byte `alltoall` took 125–135 µs that way, and 31–36 µs this way.
//!
//! # Mismatches
//! As in the reduction by node (`reduce_nodes.rs`): a leader that sees another descriptor
//! sends [`DISAGREED`](super::eager::DISAGREED) on, so every member reports the mismatch,
//! and the messages still flow.

use bytemuck::Pod;

use super::bytes_of;
use super::eager::{Payload, Stamp};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::{Op, Team};

impl Team {
    /// [`Team::alltoall`] by node (see the module documentation): `nelems` elements per
    /// block.
    pub(super) async fn alltoall_by_node<T: Pod>(
        &self,
        state: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        nelems: usize,
        desc: u64,
    ) -> Result<()> {
        let (me, n) = (self.my_pe(), self.n_pes());
        let nodes = &self.inner.plan.nodes;
        let leader = nodes.members(nodes.group_of(me))[0];
        let stamp = Stamp::new(state, desc);
        let (dest, source) = (dest.slice(..n * nelems), source.slice(..n * nelems));
        if me == leader {
            return self.lead_alltoall(state, dest, source, nelems, stamp).await;
        }
        let all = bytes_of::<T>(n * nelems);
        self.eager_through_leader(state, leader, (dest, source), all, stamp)
            .await
    }

    /// A leader's part of [`Team::alltoall_by_node`].
    async fn lead_alltoall<T: Pod>(
        &self,
        state: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        nelems: usize,
        stamp: Stamp,
    ) -> Result<()> {
        let (me, n) = (self.my_pe(), self.n_pes());
        let nodes = &self.inner.plan.nodes;
        let group = nodes.group_of(me);
        let (mine, leaders) = (nodes.members(group), nodes.leaders());
        let bytes = bytes_of::<T>(nelems);
        let mut forward = stamp.desc;
        // Where each member of this node sent its blocks (region offsets).
        let mut sources = vec![0; n];
        for &m in &mine[1..] {
            sources[m] = self.eager_heard(state, m, stamp, &mut forward).await?;
        }
        // The block member `s` of this node sends member `r`.
        let sent = |s: usize, r: usize| match s == me {
            true => source.slice(r * nelems..(r + 1) * nelems),
            false => self.view::<T>(sources[s] + r * bytes, nelems),
        };
        let onward = stamp.with_desc(forward);
        for (g, &l) in leaders.iter().enumerate().filter(|&(_, &l)| l != me) {
            let theirs = nodes.members(g);
            let pairs: Vec<(usize, usize)> = mine
                .iter()
                .flat_map(|&s| theirs.iter().map(move |&r| (s, r)))
                .collect();
            let packed = self.gather_blocks(state, &pairs, nelems, &sent).await?;
            let len = bytes * mine.len() * theirs.len();
            self.eager_send_when_free(state, l, Payload::Local(&packed), len, onward)
                .await?;
        }
        let packs = self.eager_hear_leaders(state, stamp, &mut forward).await?;
        // The block member `s` (of any node) sends member `r` of this node.
        let place = |of: &[usize], m: usize| {
            of.iter()
                .position(|&x| x == m)
                .expect("a member is in its node's group")
        };
        let incoming = |s: usize, r: usize| match nodes.group_of(s) {
            g if g == group => sent(s, r),
            g => {
                let at = place(nodes.members(g), s) * mine.len() + place(mine, r);
                self.view::<T>(packs[g] + at * bytes, nelems)
            }
        };
        if !state.rejected() {
            for s in 0..n {
                self.copy_local(dest.slice(s * nelems..(s + 1) * nelems), incoming(s, me))?;
            }
        }
        let result = stamp.with_desc(forward);
        for &r in &mine[1..] {
            let blocks = self
                .gather_blocks(
                    state,
                    &(0..n).map(|s| (s, r)).collect::<Vec<_>>(),
                    nelems,
                    &incoming,
                )
                .await?;
            let len = bytes * n;
            self.eager_send_when_free(state, r, Payload::Local(&blocks), len, result)
                .await?;
        }
        for &j in mine[1..].iter().chain(leaders.iter().filter(|&&l| l != me)) {
            self.eager_done(state, j, true)?;
        }
        Ok(())
    }

    /// The blocks `block(s, r)` of `pairs`, end to end (left zeroed once the call is
    /// rejected: its messages only carry the verdict).
    async fn gather_blocks<'b, T: Pod>(
        &self,
        state: &Op<'_>,
        pairs: &[(usize, usize)],
        nelems: usize,
        block: &impl Fn(usize, usize) -> SymSlice<'b, T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let me = self.dp().my_pe();
        for &(s, r) in pairs {
            let at = out.len();
            out.resize(at + nelems, T::zeroed());
            if !state.rejected() {
                self.dp().get(&mut out[at..], block(s, r), me).await?;
            }
        }
        Ok(out)
    }
}
