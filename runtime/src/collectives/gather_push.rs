//! `fcollect` above the eager sizes by node: on a team that spans nodes with several members
//! on a node, each node's members consecutive, one message crosses the fabric per pair of
//! leaders, carrying a whole node's blocks, instead of one per pair of members.
//!
//! # Steps
//! After a sync (every member has entered, so its `source` may be read and its `dest`
//! written, and the descriptors agree):
//! - each leader reads its node-mates' blocks into its own `dest` in place, so that its
//!   `dest` holds its node's blocks, contiguous since the node's members are; it puts them
//!   into every other leader's `dest` with a post behind (`posted.rs`), waits until they
//!   have landed (where the transport does not keep them in order, their posts go only
//!   then) and for every other leader's post, then tells its node-mates;
//! - meanwhile each other member reads its node-mates' blocks in place, waits for its
//!   leader's word, then reads the other nodes' blocks from its leader's `dest`;
//! - a sync of each node ends the call: the leaders on other nodes are done with this
//!   node's buffers once their posts have come and this leader's puts have landed, and only
//!   node-mates still read here (see `push.rs` for what that gives up, and `sync.rs` for
//!   why a node's sync may end this call: every leader has heard from every other).
//!
//! Where a node's members are not consecutive, its blocks are not contiguous in `dest`, and
//! the call moves each block alone (`push.rs`).
//!
//! A leader's put that fails on its way while its post still lands (see `push.rs`) costs
//! every member of the receiving node a whole node's blocks, not one block.

use bytemuck::Pod;

use super::posted::Post;
use super::Descriptor;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

impl Team {
    /// `fcollect` by node of blocks of `each` elements into `dest`, this member's own block
    /// already in place (see the module documentation). The members other than the leader
    /// copy the blocks they read as `caching` says ([`Team::block_caching`]); the leader
    /// keeps them in cache, for the puts that send them on.
    pub(crate) async fn fcollect_pushed_by_node<T: Pod>(
        &self,
        op: &mut Op<'_>,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        (each, caching): (usize, Caching),
        desc: u64,
    ) -> Result<()> {
        self.sync_in(op, desc).await?;
        if op.rejected() {
            return Ok(());
        }
        let me = self.my_pe();
        let nodes = &self.inner.plan.nodes;
        let group = nodes.group_of(me);
        let members = nodes.members(group);
        let leader = members[0];
        let signal = value(op.next_seq(), 0);
        let block = |j: usize| dest.slice(j * each..(j + 1) * each);
        let gathering = if me == leader { Caching::Keep } else { caching };
        for &j in members.iter().filter(|&&j| j != me) {
            self.dp()
                .get_into(block(j), source.resized(each), self.pe(j), gathering)
                .await?;
        }
        let span = |g: usize| {
            let node = nodes.members(g);
            dest.slice(node[0] * each..(node[node.len() - 1] + 1) * each)
        };
        if me == leader {
            let leaders: Vec<usize> = (0..nodes.nodes())
                .filter(|&g| g != group)
                .map(|g| nodes.leaders()[g])
                .collect();
            let mut pushes = Vec::with_capacity(leaders.len());
            for &to in &leaders {
                let post = Post {
                    to,
                    offset: self.inner.layout.sig(me),
                    value: signal,
                    word: None,
                };
                pushes.push(self.put_posted(span(group), span(group), post)?);
            }
            for pushed in pushes {
                pushed.landed(self).await?;
            }
            self.wait_words("fcollect by node", Layout::sig, &leaders, signal)
                .await?;
            for &j in &members[1..] {
                self.signal(j, self.inner.layout.sig(me), signal)?;
            }
        } else {
            self.wait_word("fcollect by node", self.inner.layout.sig(leader), signal)
                .await?;
            // The other nodes' blocks lie before and after this node's.
            let (at, end) = (members[0] * each, (members[members.len() - 1] + 1) * each);
            for range in [0..at, end..dest.len()] {
                if !range.is_empty() {
                    let theirs = dest.slice(range);
                    self.dp()
                        .get_into(theirs, theirs, self.pe(leader), caching)
                        .await?;
                }
            }
        }
        self.sync_node_in(op, Descriptor::END).await
    }
}
