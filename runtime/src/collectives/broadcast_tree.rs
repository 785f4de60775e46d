//! The tree broadcast: broadcasts above the eager sizes, or on teams without eager slots, but
//! for those scattered among the node heads (`broadcast_scatter.rs`).
//!
//! # Protocol
//! Down the tree of the team's plan (`shapes.rs`), each edge moves the data in one of two
//! ways, chosen by the route between its ends (both ends see the same route):
//!
//! - **Pulled** (the ends share a node): the parent signals `READY` with its descriptor;
//!   the child checks it, reads the data from the parent's buffer in place (the root's
//!   `source`, an inner member's `dest`) and acknowledges `DONE` with its verdict.
//! - **Pushed** (the ends are on different nodes): the child signals that it has entered
//!   (`ENTERED`, with its descriptor: its `dest` may now be written); the parent, once it
//!   holds the data, puts it into the child's `dest` and posts `READY` with its descriptor
//!   behind it (`posted.rs`), or, where the descriptors differ or the parent has learnt that
//!   members disagree, posts `REFUSED` with what it forwards; the child then acknowledges
//!   `DONE` as above.
//!
//! A member acknowledges its parent before it serves its own children, and returns once its
//! children have acknowledged, so no member's signal words are written again before their
//! reader is done with them.
//!
//! # Why push across nodes
//! A pull across the fabric takes three one-way trips after the parent has the data (its
//! signal, the get's request, the get's reply with the data), each served by the receiving
//! PE's progress. A push takes one after both ends have entered; the child's entry message
//! usually travels while the parent is still on its way in. On one node a pull costs one
//! copy either way, and lets the children copy side by side.
//!
//! # Failures
//! See `posted.rs`: a push that fails fails its parent's call.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::eager::{agree, DISAGREED};
use super::posted::{Post, Posted};
use super::shapes::{Shape, Tree};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::shared_memory::Caching;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

/// The parent's signal at a child: the data is there to pull, or has landed.
pub(super) const READY: usize = 0;
/// The parent's signal at a pushed child: no data comes, members disagree.
const REFUSED: usize = 1;
/// A pushed child's signal at its parent: it has entered the call.
pub(super) const ENTERED: usize = 1;
/// A child's signal at its parent: it has the data (or has found the mismatch).
pub(super) const DONE: usize = 2;
/// Where in a member's `ack` line its entry's descriptor goes (bytes from the line's
/// start), apart from its acknowledgement's verdict (the word after the value) and the
/// spare word after that verdict (where a post from another node has its value land): a
/// pushed child that has acknowledged may return and enter the next call, and its entry
/// there must not overwrite the verdict its parent has yet to read, nor the value the
/// parent's transport has yet to publish. The verdict's own next writing comes only after
/// the parent's next `READY`, once it has read it.
pub(super) const ENTRY_DESC: usize = 24;

/// A broadcast's fixed inputs on one member (down a tree or scattered among the heads).
#[derive(Clone, Copy)]
pub(super) struct Call<'d, 's, T: Pod> {
    /// Where the data lands on this member.
    pub(super) dest: SymSlice<'d, T>,
    /// The root's data (read on the root alone).
    pub(super) source: SymSlice<'s, T>,
    /// The root's member number.
    pub(super) root: usize,
    /// The call's number on the team, in the values it posts.
    pub(super) seq: u64,
    /// The call's descriptor.
    pub(super) desc: u64,
}

impl<'d, 's, T: Pod> Call<'d, 's, T> {
    /// The buffer member `member` passes the data on from: the root's `source`, an inner
    /// member's `dest` (their symmetric address, the same on every member).
    fn passed_on_by(&self, member: usize) -> SymSlice<'_, T> {
        match member == self.root {
            true => self.source,
            false => self.dest,
        }
    }
}

impl Team {
    /// The broadcast down the `shape` tree rooted at `root` (see the module documentation).
    pub(super) async fn tree_broadcast<T: Pod>(
        &self,
        op: &mut Op<'_>,
        shape: Shape,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        (root, root_copies): (usize, bool),
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let seq = op.next_seq();
        let call = Call {
            dest,
            source,
            root,
            seq,
            desc,
        };
        let tree = Tree::new(shape, root, &self.inner.plan.nodes);
        let forward = match tree.parent(me) {
            Some(parent) => self.tree_broadcast_receive(op, parent, call).await?,
            None => desc,
        };
        let children = tree.children(me);
        self.release_pulling(&children, seq, forward)?;
        let landings = match self.inner.plan.nodes.nodes() {
            1 => Vec::new(),
            _ => {
                self.tree_broadcast_push(op, &children, call, forward)
                    .await?
            }
        };
        if me == root && root_copies {
            // The pulling children read the root's source, so its own copy can wait until now.
            self.copy_local(dest, source)?;
        }
        for landing in landings {
            landing.landed(self).await?;
        }
        self.children_done(op, &children, seq, forward).await
    }

    /// Tells those of `children` on this node that the data is there to read in place
    /// (`READY`, with what this member forwards).
    pub(super) fn release_pulling(&self, children: &[usize], seq: u64, forward: u64) -> Result<()> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        for &c in children.iter().filter(|&&c| self.shares_node(c)) {
            let ready = value(seq, READY);
            self.post(c, layout.sig(me), ready, layout.sig(me) + 8, &[forward])?;
        }
        Ok(())
    }

    /// Waits for every one of `children` to acknowledge (`DONE`), and rejects the call
    /// where one's verdict differs from what this member forwarded.
    pub(super) async fn children_done(
        &self,
        op: &mut Op<'_>,
        children: &[usize],
        seq: u64,
        forward: u64,
    ) -> Result<()> {
        let layout = self.inner.layout;
        let done = value(seq, DONE);
        self.wait_words("broadcast", Layout::ack, children, done)
            .await?;
        for &c in children {
            let verdict = self.local(layout.ack(c) + 8).load(Ordering::Acquire);
            if let Err(e) = agree(forward, verdict, c) {
                op.reject(e);
            }
        }
        Ok(())
    }

    /// A non-root member's receiving part: the data from `parent` into `dest`, pulled or
    /// pushed, then its acknowledgement. Returns what this member forwards to its children:
    /// the call's descriptor, or [`DISAGREED`] where it found members disagreeing.
    pub(super) async fn tree_broadcast_receive<T: Pod>(
        &self,
        op: &mut Op<'_>,
        parent: usize,
        call: Call<'_, '_, T>,
    ) -> Result<u64> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        let Call { seq, desc, .. } = call;
        let pushed = !self.shares_node(parent);
        if pushed {
            let entered = value(seq, ENTERED);
            let at = layout.ack(me) + ENTRY_DESC;
            self.post(parent, layout.ack(me), entered, at, &[desc])?;
        }
        let ready = value(seq, READY);
        self.wait_word("broadcast", layout.sig(parent), ready)
            .await?;
        // `READY` and `REFUSED` both carry a descriptor: the parent's with the data, what it
        // forwards (never this call's descriptor) without. The word also tells a signal of
        // another collective of the parent's with this call's number (a tree reduction's
        // leaf writes it) from this call's.
        let theirs = self.local(layout.sig(parent) + 8).load(Ordering::Acquire);
        let forward = match agree(desc, theirs, parent) {
            Ok(()) => {
                if !pushed {
                    let from = call.passed_on_by(parent);
                    self.dp()
                        .get_into(call.dest, from, self.pe(parent), Caching::Keep)
                        .await?;
                }
                desc
            }
            Err(e) => {
                op.reject(e);
                DISAGREED
            }
        };
        let done = value(seq, DONE);
        self.post(parent, layout.ack(me), done, layout.ack(me) + 8, &[forward])?;
        Ok(forward)
    }

    /// The parent's part on those of its `children` on other nodes (pushed), each served as
    /// soon as it has entered, whichever comes first: the data (the root's `source`, an
    /// inner member's `dest`) into its `dest` with `READY` posted behind it, or `REFUSED`
    /// with `forward` where its descriptor differs or `forward` says members disagree.
    /// Returns the pushes.
    async fn tree_broadcast_push<T: Pod>(
        &self,
        op: &mut Op<'_>,
        children: &[usize],
        call: Call<'_, '_, T>,
        forward: u64,
    ) -> Result<Vec<Posted>> {
        let layout = self.inner.layout;
        let entered = value(call.seq, ENTERED);
        let has_entered = |c: &usize| self.local(layout.ack(*c)).load(Ordering::Acquire) >= entered;
        let mut waiting: Vec<usize> = children
            .iter()
            .copied()
            .filter(|&c| !self.shares_node(c))
            .collect();
        let mut pushes = Vec::with_capacity(waiting.len());
        while !waiting.is_empty() {
            self.wait_any_word("broadcast", Layout::ack, &waiting, entered)
                .await?;
            let (arrived, later) = waiting.into_iter().partition(has_entered);
            for c in arrived {
                pushes.extend(self.tree_broadcast_serve(op, c, call, forward)?);
            }
            waiting = later;
        }
        Ok(pushes)
    }

    /// Serves pushed child `c`, which has entered: the data with `READY` behind it, or
    /// `REFUSED` (see [`Team::tree_broadcast_push`]).
    fn tree_broadcast_serve<T: Pod>(
        &self,
        op: &mut Op<'_>,
        c: usize,
        call: Call<'_, '_, T>,
        forward: u64,
    ) -> Result<Option<Posted>> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        let Call { seq, desc, .. } = call;
        let theirs = self
            .local(layout.ack(c) + ENTRY_DESC)
            .load(Ordering::Acquire);
        let agreed = agree(desc, theirs, c);
        if forward == desc && agreed.is_ok() {
            let from = call.passed_on_by(me);
            let ready = Post {
                to: c,
                offset: layout.sig(me),
                value: value(seq, READY),
                word: Some(desc),
            };
            return self.put_posted(call.dest, from, ready).map(Some);
        }
        if let Err(e) = agreed {
            op.reject(e);
        }
        let refused = value(seq, REFUSED);
        self.post(c, layout.sig(me), refused, layout.sig(me) + 8, &[forward])?;
        Ok(None)
    }
}
