//! Block moves by their senders: `fcollect` and `alltoall` above the eager sizes on teams
//! that span nodes (but `fcollect` by node, `gather_push.rs`), or whose callers make every
//! `dest` ready before the call.
//!
//! # Across nodes
//!
//! After a sync (every member has entered the call, so its `dest` may be written, and the
//! descriptors agree), each member puts its block for every member on another node straight
//! into that member's `dest` with a signal posted behind it (`posted.rs`: one one-way trip
//! across the fabric, all of them in flight at once), reads its own node's blocks in place
//! over mapped memory, waits for the signals of the members on other nodes, and ends with a
//! sync of its node alone (its node-mates may still be reading its `source`; the members on
//! other nodes are done with its buffers once their signals have come and its puts have
//! landed). A team with one member per node
//! needs no second sync: once a member's puts are delivered and every signal for it has
//! come, its buffers are done with. The flat form would read every block of another node
//! with a fabric get, one round trip each, one after the other.
//!
//! A push that fails on its way fails its sender's call, but its receiver on another node
//! learns of it only where the post does not arrive: where a provider drops a connection on
//! an error and carries the post on a new one (`posted.rs`), the receiver may return `Ok`
//! with that block missing, as on a team of one member per node. The whole-team end sync
//! that would catch it costs an exchange among the leaders in every call.
//!
//! # Into ready buffers
//! Where the callers keep OpenSHMEM's contract (`TeamConfig::dest_ready`: every member's
//! `dest` is ready to be written before any member calls), there is no entry sync: each
//! member copies each of its blocks into its receiver's `dest` (over mapped memory, or a put
//! across the fabric, all in flight at once), and once they have landed, syncs with the
//! call's descriptor. When that sync completes, every member's blocks have landed
//! everywhere, so every `dest` is whole and every `source` done with; calls that do not
//! match fail there, after their blocks were written. A member never waits before it has
//! written all its blocks: where PEs outnumber CPUs, each does its share while it runs.
//!
//! # By node
//! `fcollect` on a team where some node holds several members and every node's members are
//! consecutive gathers each node's blocks at its leader and sends them whole, one message per
//! pair of leaders (`gather_push.rs`).
//! `alltoall` is not aggregated per node. Unlike `fcollect`'s, its blocks for another node
//! are all different, so gathering them at a leader saves messages, not bytes, and adds two
//! copies and staging room at the receiving leader that no buffer of the call has. Bytes are
//! what its calls wait for: a 4-PE call of 64 KiB blocks on two namespace hosts (2 + 2)
//! spent, by the median, 140–160 µs in the entry sync, 95 µs putting its blocks and reading
//! its node-mate's, and 200–290 µs more until its puts had landed and the others' signals
//! come: 256 KiB crossed the link each way, both ways at once, through the kernel's TCP on
//! the same 2 CPUs as the 4 PEs.

use bytemuck::Pod;

use super::posted::Post;
use super::Descriptor;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

/// The views of one block move: where it lands (on the receiver, or here) and where it is
/// read (here, or on the sender).
pub(crate) type Move<'a, T> = (SymSlice<'a, T>, SymSlice<'a, T>);

impl Team {
    /// Moves every member's blocks: `push(j)` gives, for member `j` on another node, where
    /// its block from this member lands there and where it is here; `pull(j)` gives, for
    /// member `j` on this node, where its block lands here and where it is there. The
    /// blocks pulled are copied as `caching` says ([`Team::block_caching`]).
    pub(crate) async fn move_across_nodes<'a, T: Pod>(
        &self,
        op: &mut Op<'_>,
        desc: u64,
        push: impl Fn(usize) -> Move<'a, T>,
        pull: impl Fn(usize) -> Move<'a, T>,
        caching: Caching,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        self.sync_in(op, desc).await?;
        if op.rejected() {
            return Ok(());
        }
        let nodes = &self.inner.plan.nodes;
        let mine = nodes.group_of(me);
        let signal = value(op.next_seq(), 0);
        let others = (1..n).map(|k| (me + k) % n);
        let away: Vec<usize> = others
            .clone()
            .filter(|&j| nodes.group_of(j) != mine)
            .collect();
        let mut landings = Vec::with_capacity(away.len());
        let dp = self.dp();
        for &j in &away {
            let (there, here) = push(j);
            let post = Post {
                to: j,
                offset: self.inner.layout.sig(me),
                value: signal,
                word: None,
            };
            landings.push(self.put_posted(there, here, post)?);
        }
        for j in others.filter(|&j| nodes.group_of(j) == mine) {
            let (here, there) = pull(j);
            if !here.is_empty() {
                dp.get_into(here, there, self.pe(j), caching).await?;
            }
        }
        for landing in landings {
            landing.landed(self).await?;
        }
        self.wait_words("block move", Layout::sig, &away, signal)
            .await?;
        if !nodes.layered() {
            // One member per node (alike on every member): every block for this member has
            // landed and every one of its own has been delivered, so nobody reads or writes
            // its buffers for this call any more.
            return Ok(());
        }
        // Members on other nodes are done with this member's buffers: only its node-mates
        // may still read its `source`.
        self.sync_node_in(op, Descriptor::END).await
    }

    /// Moves every member's blocks into `dest`s their callers made ready before the call
    /// (see the module documentation), this member's own block having moved: `push(j)`
    /// gives, for every other member `j`, where this member's block lands there and where
    /// it is here. Blocks for members on this node are copied as `caching` says
    /// ([`Team::block_caching`]).
    pub(crate) async fn move_into_ready<'a, T: Pod>(
        &self,
        op: &mut Op<'_>,
        desc: u64,
        push: impl Fn(usize) -> Move<'a, T>,
        caching: Caching,
    ) -> Result<()> {
        let (n, me) = (self.n_pes(), self.my_pe());
        let dp = self.dp();
        let landings: Vec<_> = (1..n)
            .map(|k| (me + k) % n)
            .map(|j| {
                let (there, here) = push(j);
                dp.put_within(there, here, self.pe(j), caching)
            })
            .collect();
        for landed in landings {
            landed.await?;
        }
        self.sync_in(op, desc).await
    }
}
