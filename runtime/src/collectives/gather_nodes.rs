//! The eager `fcollect` by node: small blocks on a team that spans nodes with several members
//! on some node, where the whole result fits an eager slot.
//!
//! # Protocol
//! Each member sends its block to its node's leader, over mapped memory. A leader places its
//! node's blocks in its `dest`, sends them packed in member order to every other leader
//! (one message per pair of leaders over the fabric), places the blocks the other leaders
//! send, and sends its whole `dest` to its node's members. Every message goes through the
//! eager slots (`eager.rs`).
//!
//! # Why
//! The flat eager form sends every block to every member: n(n − 1) messages, each PE's half
//! of them over the fabric. With 8 PEs on 2 namespace hosts, 4 each, a 4-byte `fcollect`
//! took 120–155 µs that way, and 26–33 µs this way.
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

/// A node's blocks, in member order, as its leader sends them to the other leaders.
enum NodeBlocks<'a, T> {
    /// In place in the leader's `dest`: the node's members are consecutive.
    InPlace(SymSlice<'a, T>),
    /// Packed into a buffer of their own.
    Packed(Vec<T>),
}

impl<T: Pod> NodeBlocks<'_, T> {
    fn payload(&self) -> Payload<'_, T> {
        match self {
            NodeBlocks::InPlace(blocks) => Payload::Sym(*blocks),
            NodeBlocks::Packed(blocks) => Payload::Local(blocks),
        }
    }
}

impl Team {
    /// [`Team::fcollect`] by node (see the module documentation): `nelems` elements per
    /// block, `dest` holding every member's.
    pub(super) async fn fcollect_by_node<T: Pod>(
        &self,
        state: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let (me, nelems) = (self.my_pe(), source.len());
        let nodes = &self.inner.plan.nodes;
        let members = nodes.members(nodes.group_of(me));
        let stamp = Stamp::new(state, desc);
        let bytes = bytes_of::<T>(nelems);
        let block = |j: usize| dest.slice(j * nelems..(j + 1) * nelems);
        let leader = members[0];
        self.copy_local(block(me), source)?;
        if me != leader {
            return self
                .eager_through_leader(state, leader, (dest, source), bytes, stamp)
                .await;
        }
        let mut forward = desc;
        for &m in &members[1..] {
            let data = self.eager_heard(state, m, stamp, &mut forward).await?;
            if !state.rejected() {
                self.copy_local(block(m), self.view::<T>(data, nelems))?;
            }
            self.eager_done(state, m, true)?;
        }
        let packed = self.node_blocks(dest, members, nelems).await?;
        let leaders = nodes.leaders();
        let onward = stamp.with_desc(forward);
        for &l in leaders.iter().filter(|&&l| l != me) {
            let len = bytes * members.len();
            self.eager_send_when_free(state, l, packed.payload(), len, onward)
                .await?;
        }
        let heard = self.eager_hear_leaders(state, stamp, &mut forward).await?;
        for (g, &l) in leaders.iter().enumerate().filter(|&(_, &l)| l != me) {
            if !state.rejected() {
                for (k, &m) in nodes.members(g).iter().enumerate() {
                    let part = self.view::<T>(heard[g] + k * bytes, nelems);
                    self.copy_local(block(m), part)?;
                }
            }
            self.eager_done(state, l, true)?;
        }
        let result = stamp.with_desc(forward);
        for &m in &members[1..] {
            let total = bytes * self.n_pes();
            self.eager_send_when_free(state, m, Payload::Sym(dest), total, result)
                .await?;
        }
        Ok(())
    }

    /// The blocks (`nelems` elements each) of `members`, one node's, in member order from a
    /// leader's `dest`: in place where the members are consecutive, else packed.
    async fn node_blocks<'d, T: Pod>(
        &self,
        dest: SymSlice<'d, T>,
        members: &[usize],
        nelems: usize,
    ) -> Result<NodeBlocks<'d, T>> {
        let first = members[0];
        if members.iter().enumerate().all(|(k, &m)| m == first + k) {
            let end = first + members.len();
            return Ok(NodeBlocks::InPlace(
                dest.slice(first * nelems..end * nelems),
            ));
        }
        let mut packed = vec![T::zeroed(); members.len() * nelems];
        for (k, &m) in members.iter().enumerate() {
            let part = &mut packed[k * nelems..(k + 1) * nelems];
            let block = dest.slice(m * nelems..(m + 1) * nelems);
            self.dp().get(part, block, self.dp().my_pe()).await?;
        }
        Ok(NodeBlocks::Packed(packed))
    }
}
