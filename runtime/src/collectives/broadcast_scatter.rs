//! The broadcast scattered among the node heads: broadcasts of `large_bytes` and more on
//! teams that span three nodes or more.
//!
//! # Protocol
//! The heads are the root and the leaders of the other nodes. The elements are split into
//! one part per head other than the root, in node order.
//! 1. Each head other than the root signals to the root and to every other such head that
//!    it has entered (`ENTERED`, with its descriptor): its `dest` may now be written.
//! 2. The root, as each head enters, puts that head's part of its `source` into the head's
//!    `dest`, with `READY` and its descriptor posted behind it.
//! 3. A head, once its own part has come, puts it (from its `dest`), as each other head
//!    enters, into that head's `dest`, with `READY` posted behind it on its own line there.
//! 4. A head that holds every part releases its node's other members, which read the
//!    message in place and acknowledge, as down the tree (`broadcast_tree.rs`); the root's
//!    node's members read the root's `source`, released at once.
//!
//! Where descriptors differ, `READY` comes with [`DISAGREED`] in place of the descriptor
//! and no data, and is passed on so: every head still hears from every other, so nobody is
//! left waiting, and each reports the mismatch.
//!
//! # Why
//! Down the tree by node the root puts the whole message into every other node's leader:
//! its link carries L − 1 times the message, one after another. Here it carries the message
//! once, and every other head's link carries it once in and (L − 2)/(L − 1) of it out, all
//! heads at once. At 2 nodes both carry it once, and the tree's one hop wins.
//!
//! On 3 namespace hosts whose links were each held to 1 Gbit/s (`tc` token buckets, as a
//! cluster's hosts each have a link of their own), 2 + 1 + 1 PEs, alternated against the
//! tree: 2.26, 1.37 and 1.24 times its bandwidth at 64 KiB, 1 MiB and 8 MiB (1 + 1 + 1:
//! 2.20, 1.39, 1.24). Unshaped, where every "link" is the same two CPUs copying (the same
//! bytes in all, in more messages): 0.73, 1.01 and 0.93.
//!
//! # When the words are read
//! A head writes its `ack` and `sig` lines at another head, and the root its `sig` line at
//! a head, once per call each. The root and a head write into a head's `sig` line (and its
//! `dest`) in a call only after that head has entered it, so after it has read what they
//! wrote in the last; a head's entry into the next call comes after every part of the
//! last reached it, each put after its sender read the entry it answered. Nobody reads
//! another member's buffers across nodes: every byte that crosses is pushed. A head
//! returns once its own puts have landed and its node's members have acknowledged.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::broadcast_tree::{Call, ENTERED, ENTRY_DESC, READY};
use super::eager::{agree, DISAGREED};
use super::posted::{Post, Posted};
use super::reduce::part;
use super::shapes::{Shape, Tree};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

impl Team {
    /// [`Team::broadcast`] scattered among the node heads (see the module documentation).
    pub(super) async fn scattered_broadcast<T: Pod>(
        &self,
        op: &mut Op<'_>,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        (root, root_copies): (usize, bool),
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let call = Call {
            dest,
            source,
            root,
            seq: op.next_seq(),
            desc,
        };
        let nodes = &self.inner.plan.nodes;
        let tree = Tree::new(Shape::Nodes, root, nodes);
        let heads: Vec<usize> = (0..nodes.nodes())
            .filter(|&g| g != nodes.group_of(root))
            .map(|g| nodes.leaders()[g])
            .collect();
        let forward = match (me == root, heads.iter().position(|&h| h == me)) {
            (true, _) => {
                self.release_pulling(&tree.children(me), call.seq, desc)?;
                self.scatter_parts(op, call, &heads).await?;
                if root_copies {
                    self.copy_local(dest, source)?;
                }
                desc
            }
            (false, Some(index)) => self.gather_parts(op, call, &heads, index).await?,
            (false, None) => {
                let head = tree.parent(me).unwrap_or(root);
                self.tree_broadcast_receive(op, head, call).await?;
                return Ok(());
            }
        };
        let members = tree.children(me);
        let members: Vec<usize> = members
            .into_iter()
            .filter(|&c| self.shares_node(c))
            .collect();
        if me != root {
            self.release_pulling(&members, call.seq, forward)?;
        }
        self.children_done(op, &members, call.seq, forward).await
    }

    /// The root's part: each head's part of `source` into its `dest` as it enters.
    async fn scatter_parts<T: Pod>(
        &self,
        op: &mut Op<'_>,
        call: Call<'_, '_, T>,
        heads: &[usize],
    ) -> Result<()> {
        let parts = |h: usize| {
            let index = heads.iter().position(|&x| x == h).unwrap_or_default();
            part(index, heads.len(), call.dest.len())
        };
        let pushes = self
            .push_as_entered(op, call, heads, call.desc, |h| {
                let range = parts(h);
                (call.dest.slice(range.clone()), call.source.slice(range))
            })
            .await?;
        for push in pushes {
            push.landed(self).await?;
        }
        Ok(())
    }

    /// A head's part other than the root's: its entry, its part from the root, that part
    /// to every other head, and the others' parts. Returns what it forwards to its node's
    /// members: the call's descriptor, or [`DISAGREED`].
    async fn gather_parts<T: Pod>(
        &self,
        op: &mut Op<'_>,
        call: Call<'_, '_, T>,
        heads: &[usize],
        index: usize,
    ) -> Result<u64> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        let Call {
            root, seq, desc, ..
        } = call;
        let others: Vec<usize> = heads.iter().copied().filter(|&h| h != me).collect();
        for &to in others.iter().chain([&root]) {
            let entered = value(seq, ENTERED);
            let at = layout.ack(me) + ENTRY_DESC;
            self.post(to, layout.ack(me), entered, at, &[desc])?;
        }
        let ready = value(seq, READY);
        self.wait_word("broadcast", layout.sig(root), ready).await?;
        let mut forward = self.verdict(op, desc, root);
        let mine = call.dest.slice(part(index, heads.len(), call.dest.len()));
        let pushes = self
            .push_as_entered(op, call, &others, forward, |_| (mine, mine))
            .await?;
        for push in pushes {
            push.landed(self).await?;
        }
        self.wait_words("broadcast", Layout::sig, &others, ready)
            .await?;
        for &h in &others {
            if self.verdict(op, desc, h) != desc {
                forward = DISAGREED;
            }
        }
        Ok(forward)
    }

    /// What member `from` posted with its `READY` on its `sig` line here, checked against
    /// `desc`: `desc`, or [`DISAGREED`] with the call rejected.
    fn verdict(&self, op: &mut Op<'_>, desc: u64, from: usize) -> u64 {
        let layout = self.inner.layout;
        let theirs = self.local(layout.sig(from) + 8).load(Ordering::Acquire);
        match agree(desc, theirs, from) {
            Ok(()) => desc,
            Err(e) => {
                op.reject(e);
                DISAGREED
            }
        }
    }

    /// Serves each of `to` as soon as it has entered: `what(h)` (its `dest` range, this
    /// member's data) put there with `READY` and `forward` posted behind it, or `READY`
    /// with [`DISAGREED`] alone where `forward` or its descriptor disagrees. Returns the
    /// puts.
    async fn push_as_entered<'d, T: Pod>(
        &self,
        op: &mut Op<'_>,
        call: Call<'d, '_, T>,
        to: &[usize],
        forward: u64,
        what: impl Fn(usize) -> (SymSlice<'d, T>, SymSlice<'d, T>),
    ) -> Result<Vec<Posted>> {
        let (me, layout) = (self.my_pe(), self.inner.layout);
        let entered = value(call.seq, ENTERED);
        let has_entered = |h: &usize| self.local(layout.ack(*h)).load(Ordering::Acquire) >= entered;
        let mut waiting = to.to_vec();
        let mut pushes = Vec::with_capacity(waiting.len());
        while !waiting.is_empty() {
            self.wait_any_word("broadcast", Layout::ack, &waiting, entered)
                .await?;
            let (arrived, later) = waiting.into_iter().partition(has_entered);
            for h in arrived {
                let theirs = self
                    .local(layout.ack(h) + ENTRY_DESC)
                    .load(Ordering::Acquire);
                let agreed = agree(call.desc, theirs, h);
                let post = Post {
                    to: h,
                    offset: layout.sig(me),
                    value: value(call.seq, READY),
                    word: Some(forward),
                };
                if forward == call.desc && agreed.is_ok() {
                    let (into, from) = what(h);
                    pushes.push(self.put_posted(into, from, post)?);
                    continue;
                }
                if let Err(e) = agreed {
                    op.reject(e);
                }
                self.post_one(Post {
                    word: Some(DISAGREED),
                    ..post
                })?;
            }
            waiting = later;
        }
        Ok(pushes)
    }
}
