//! The eager reduction by node: small reductions on a team that spans nodes with several
//! members on some node.
//!
//! # Protocol
//! Each member sends its contribution to its node's leader, over mapped memory. A leader
//! combines its node's contributions in member order into its `dest` (the node's partial),
//! sends the partial to every other leader, over the fabric, combines the leaders' partials
//! in node order into its `dest`, and sends the result to its node's members. Every message
//! goes through the eager slots (`eager.rs`): nobody waits for a receiver to arrive.
//!
//! Every member gets the same bits: a node's partial is computed once, by its leader, and
//! every leader combines the same partials in the same order.
//!
//! # Why
//! The flat eager reduction sends every contribution to every member: n(n − 1) messages,
//! each PE's half of them over the fabric, and each member waits for all of them. Here one
//! message per pair of leaders crosses the fabric, and each member waits for one message.
//! With 8 PEs on 2 namespace hosts, 4 each, a 4-byte sum took 118–122 µs flat, 79 µs down
//! the by-node tree (whose syncs cost more than eager messages) and 27–31 µs this way.
//!
//! # Mismatches
//! A leader that sees a contribution or a partial with another descriptor than its own
//! sends [`DISAGREED`](super::eager::DISAGREED) on in place of its descriptor, so every
//! member reports the mismatch, as after the flat form; the messages still flow, so nobody
//! is left waiting. A call by node against a flat eager call (a `reducescatter`, or sizes on
//! either side of the limit of a form by node) only partly meets it: see
//! `collectives/mod.rs`.

use super::bytes_of;
use super::eager::{Payload, Stamp};
use super::reduce_ops::{ReduceOp, Reducible};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::{Op, Team};

impl Team {
    /// [`Team::reduce`]'s eager form by node (see the module documentation).
    pub(super) async fn eager_reduce_by_node<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let nodes = &self.inner.plan.nodes;
        let group = nodes.group_of(me);
        let members = nodes.members(group);
        let stamp = Stamp::new(state, desc);
        let bytes = bytes_of::<T>(dest.len());
        let leader = members[0];
        if me != leader {
            return self
                .eager_through_leader(state, leader, (dest, source), bytes, stamp)
                .await;
        }
        let mut forward = desc;
        let partial = self
            .node_partial(
                state,
                op,
                (dest, source),
                &members[1..],
                (stamp, &mut forward),
            )
            .await?;
        let leaders = nodes.leaders();
        let onward = stamp.with_desc(forward);
        for &l in leaders.iter().filter(|&&l| l != me) {
            self.eager_send_when_free(state, l, Payload::Sym(partial), bytes, onward)
                .await?;
        }
        let data = self.eager_hear_leaders(state, stamp, &mut forward).await?;
        if !state.rejected() {
            let input = |g: usize| match g == group {
                true => partial,
                false => self.view::<T>(data[g], dest.len()),
            };
            self.combine_local(op, dest, leaders.len(), input)?;
        }
        for &l in leaders.iter().filter(|&&l| l != me) {
            self.eager_done(state, l, true)?;
        }
        let result = stamp.with_desc(forward);
        for &m in &members[1..] {
            self.eager_send_when_free(state, m, Payload::Sym(dest), bytes, result)
                .await?;
        }
        Ok(())
    }

    /// A leader's partial of its node: its `source` where it is alone, else its `dest`, once
    /// the contributions of `others` (the node's other members) are combined into it with
    /// its own, in member order. A contribution with another descriptor than the call's
    /// rejects the call and sets `forward` to [`DISAGREED`](super::eager::DISAGREED).
    async fn node_partial<'a, T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        (dest, source): (SymSlice<'a, T>, SymSlice<'a, T>),
        others: &[usize],
        (stamp, forward): (Stamp, &mut u64),
    ) -> Result<SymSlice<'a, T>> {
        if others.is_empty() {
            return Ok(source);
        }
        let mut data = Vec::with_capacity(others.len());
        for &m in others {
            data.push(self.eager_heard(state, m, stamp, forward).await?);
        }
        if !state.rejected() {
            let input = |k: usize| match k {
                0 => source,
                _ => self.view::<T>(data[k - 1], dest.len()),
            };
            self.combine_local(op, dest, others.len() + 1, input)?;
        }
        for &m in others {
            self.eager_done(state, m, true)?;
        }
        Ok(dest)
    }
}
