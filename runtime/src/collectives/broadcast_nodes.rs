//! The eager broadcast by node, a non-root member's part: small broadcasts on a team that
//! spans nodes with several members on some node.
//!
//! # Protocol
//! The root writes its message into the slots of the other nodes' leaders first (theirs
//! cross the fabric, the slowest), then into its own node's members' (`broadcast.rs`). A
//! leader of another node passes the message on to its node's members straight from its
//! slot, then copies it out; those members take it from their leader. Every message goes
//! through the eager slots (`eager.rs`): nobody waits for a receiver to arrive.
//!
//! # Why
//! The flat eager broadcast writes one message per member, so the root sends as many over
//! the fabric as there are members on other nodes, one after another. Here one message
//! crosses the fabric per node, and the copies to a node's members are made on that node.
//!
//! # Mismatches
//! A leader whose descriptor differs from the root's passes [`DISAGREED`] on in place of
//! the root's descriptor, so its node's members report the mismatch even where they agree
//! with the root; the messages still flow, so nobody is left waiting.

use bytemuck::Pod;

use super::bytes_of;
use super::eager::{agree, Payload, Stamp, DISAGREED};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::{Op, Team};

impl Team {
    /// A non-root member's part of [`Team::broadcast`]'s eager form by node, stamped `stamp`
    /// (see the module documentation).
    pub(super) async fn eager_broadcast_by_node<T: Pod>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        root: usize,
        stamp: Stamp,
    ) -> Result<()> {
        let (me, nodes) = (self.my_pe(), &self.inner.plan.nodes);
        let from = nodes.broadcast_sender(me, root);
        let pass_on_to = nodes.broadcast_forwards(me, root);
        let got = self.eager_receive(op, from, stamp).await?;
        let agreed = match agree(stamp.desc, got.desc, from) {
            Ok(()) => true,
            Err(e) => {
                op.reject(e);
                false
            }
        };
        let data = self.view::<T>(got.data, dest.len());
        let onward = stamp.with_desc(if agreed { stamp.desc } else { DISAGREED });
        let bytes = bytes_of::<T>(dest.len());
        for &m in pass_on_to {
            self.eager_send_when_free(op, m, Payload::Sym(data), bytes, onward)
                .await?;
        }
        if agreed {
            self.copy_local(dest, data)?;
        }
        self.eager_done(op, from, false)
    }
}
