//! The tree broadcast: broadcasts above the eager sizes, or on teams without eager slots.
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
//!   holds the data, puts it into the child's `dest` and posts `READY` behind it
//!   (`Team::put_posted`), or, where the descriptors differ or the parent has learnt that
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
//! A push that fails fails its parent's call. Its `READY` may still reach the child where
//! the provider drops a connection on an error and carries the post on a new one (see the
//! fabric transport's lanes): the child then returns with a `dest` not written. Pushes
//! address buffers every member checked alike, so only a broken link or a lost peer makes
//! one fail, and the job's failure detection reports those.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::eager::{agree, disagreement, DISAGREED};
use super::push::{Post, Posted};
use super::shapes::{Shape, Tree};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

/// The parent's signal at a child: the data is there to pull, or has landed.
const READY: usize = 0;
/// The parent's signal at a pushed child: no data comes, members disagree.
const REFUSED: usize = 1;
/// A pushed child's signal at its parent: it has entered the call.
const ENTERED: usize = 1;
/// A child's signal at its parent: it has the data (or has found the mismatch).
const DONE: usize = 2;

/// A tree broadcast's fixed inputs on one member.
#[derive(Clone, Copy)]
struct Call<'d, 's, T: Pod> {
    dest: SymSlice<'d, T>,
    source: SymSlice<'s, T>,
    root: usize,
    seq: u64,
    desc: u64,
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
        let layout = self.inner.layout;
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
        for &c in children.iter().filter(|&&c| self.pulls_from(c)) {
            let ready = value(seq, READY);
            self.post(c, layout.sig(me), ready, layout.sig(me) + 8, &[forward])?;
        }
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
        let done = value(seq, DONE);
        self.wait_words("broadcast", Layout::ack, &children, done)
            .await?;
        for &c in &children {
            let verdict = self.local(layout.ack(c) + 8).load(Ordering::Acquire);
            if let Err(e) = agree(forward, verdict, c) {
                op.reject(e);
            }
        }
        Ok(())
    }

    /// Whether the tree edge between this member and member `peer` is pulled (they share a
    /// node) rather than pushed.
    pub(super) fn pulls_from(&self, peer: usize) -> bool {
        self.inner.plan.nodes.nodes() == 1 || self.dp().is_mapped(self.pe(peer))
    }

    /// A non-root member's receiving part: the data from `parent` into `dest`, pulled or
    /// pushed, then its acknowledgement. Returns what this member forwards to its children:
    /// the call's descriptor, or [`DISAGREED`] where it found members disagreeing.
    async fn tree_broadcast_receive<T: Pod>(
        &self,
        op: &mut Op<'_>,
        parent: usize,
        call: Call<'_, '_, T>,
    ) -> Result<u64> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        let Call { seq, desc, .. } = call;
        let pushed = !self.pulls_from(parent);
        if pushed {
            let entered = value(seq, ENTERED);
            self.post(parent, layout.ack(me), entered, layout.ack(me) + 8, &[desc])?;
        }
        let ready = value(seq, READY);
        self.wait_word("broadcast", layout.sig(parent), ready)
            .await?;
        let signal = self.local(layout.sig(parent)).load(Ordering::Acquire);
        let theirs = self.local(layout.sig(parent) + 8).load(Ordering::Acquire);
        let verdict = match (pushed, signal == ready) {
            (true, true) => Ok(()),
            (true, false) => Err(disagreement(desc, theirs, parent)),
            (false, _) => agree(desc, theirs, parent),
        };
        let forward = match verdict {
            Ok(()) => {
                if !pushed {
                    let from = if parent == call.root {
                        call.source
                    } else {
                        call.dest
                    };
                    self.dp().get_into(call.dest, from, self.pe(parent)).await?;
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

    /// The parent's part on those of its `children` on other nodes (pushed): for each in
    /// turn, once it has entered, the data (the root's `source`, an inner member's `dest`)
    /// into its `dest` with `READY` posted behind it, or `REFUSED` with `forward` where its
    /// descriptor differs or `forward` says members disagree. Returns the pushes.
    async fn tree_broadcast_push<T: Pod>(
        &self,
        op: &mut Op<'_>,
        children: &[usize],
        call: Call<'_, '_, T>,
        forward: u64,
    ) -> Result<Vec<Posted>> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        let Call { seq, desc, .. } = call;
        let from = if me == call.root {
            call.source
        } else {
            call.dest
        };
        let mut pushes = Vec::new();
        for &c in children.iter().filter(|&&c| !self.pulls_from(c)) {
            let entered = value(seq, ENTERED);
            self.wait_word("broadcast", layout.ack(c), entered).await?;
            let theirs = self.local(layout.ack(c) + 8).load(Ordering::Acquire);
            let agreed = agree(desc, theirs, c);
            let ready = Post {
                to: c,
                offset: layout.sig(me),
                v: value(seq, READY),
                word: None,
            };
            if forward == desc && agreed.is_ok() {
                pushes.push(self.put_posted(call.dest, from, ready)?);
                continue;
            }
            if let Err(e) = agreed {
                op.reject(e);
            }
            let refused = value(seq, REFUSED);
            self.post(c, layout.sig(me), refused, layout.sig(me) + 8, &[forward])?;
        }
        Ok(pushes)
    }
}
