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
//! 4. A head that holds every part (and has read the words that came with them)
//!    acknowledges to the root and to every other head (`DONE`, with its verdict), then
//!    releases its node's other members, which read the message in place and acknowledge,
//!    as down the tree (`broadcast_tree.rs`); the root's node's members read the root's
//!    `source`, released at once.
//! 5. A head returns once its puts have landed and every other head and its node's members
//!    have acknowledged; the root, once its puts have landed and every head and its node's
//!    members have.
//!
//! Where descriptors differ, `READY` comes with [`DISAGREED`] in place of the descriptor
//! and no data, and is passed on so: every head still hears from every other, so nobody is
//! left waiting, and each reports the mismatch; so does every head whose verdict another
//! head or the root reads. An empty part (fewer elements than heads) moves no data: its
//! `READY` comes alone.
//!
//! # Why
//! Down the tree by node the root puts the whole message into every other node's leader:
//! its link carries L − 1 times the message, one after another. Here it carries the message
//! once, and every other head's link carries it once in and (L − 2)/(L − 1) of it out, all
//! heads at once. At 2 nodes both carry it once, and the tree's one hop wins.
//!
//! On 3 namespace hosts whose links were each held to 1 Gbit/s (`tc` token buckets, as a
//! cluster's hosts each have a link of their own), 2 + 1 + 1 PEs, alternated against the
//! tree: 2.00, 1.20 and 1.09 times its bandwidth at 64 KiB, 1 MiB and 8 MiB (1 + 1 + 1:
//! 2.16, 1.24, 1.08). Unshaped, where every "link" is the same two CPUs copying (the same
//! bytes in all, in more messages): 0.64, 0.92 and 0.88. Large messages gain less than the
//! links allow: a head passes its part on only once the whole of it has come, so at 3
//! nodes the last part lands after 1.5 times the message's time on a link, against the
//! tree's 2 (passing it on in blocks as they come is not built).
//!
//! # When the words are read
//! Within a call a head writes, at the root and at every other head, its `ack` line twice
//! (`ENTERED`, its descriptor in the line's fourth word, then `DONE`, its verdict in the
//! second) and its `sig` line at the other heads once (`READY`); the root writes its `sig`
//! line at each head once. Other collectives write a member's `sig` line without waiting
//! for it to enter (a reduction tree's child, the leaders of a reduction by node), so a
//! sender must not return before its receiver has read the word beside its `READY`: it
//! waits for the receiver's `DONE`, which comes after that read. The verdict beside a
//! `DONE` is written again only after its reader's next `READY` (down a tree) or part
//! (here), sent once the reader has finished this call; an entry's descriptor, in a word of
//! its own, only at the writer's next entry. Nobody reads another member's buffers across
//! nodes: every byte that crosses is pushed.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::broadcast_tree::{Call, DONE, ENTERED, ENTRY_DESC, READY};
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
        let children = tree.children(me);
        match (tree.parent(me), heads.iter().position(|&h| h == me)) {
            (None, _) => {
                self.release_pulling(&children, call.seq, desc)?;
                let parts = |i: usize| part(i, heads.len(), dest.len());
                let what = |i: usize| (dest.slice(parts(i)), source.slice(parts(i)));
                let pushes = self.push_as_entered(op, call, &heads, desc, what).await?;
                if root_copies {
                    self.copy_local(dest, source)?;
                }
                for push in pushes {
                    push.landed(self).await?;
                }
                self.children_done(op, &children, call.seq, desc).await
            }
            (Some(_), Some(index)) => {
                let forward = self.gather_parts(op, call, &heads, index).await?;
                let members: Vec<usize> = children
                    .into_iter()
                    .filter(|&c| self.shares_node(c))
                    .collect();
                self.release_pulling(&members, call.seq, forward)?;
                let acknowledging: Vec<usize> = heads
                    .iter()
                    .copied()
                    .filter(|&h| h != me)
                    .chain(members)
                    .collect();
                self.children_done(op, &acknowledging, call.seq, forward)
                    .await
            }
            (Some(head), None) => {
                self.tree_broadcast_receive(op, head, call).await?;
                Ok(())
            }
        }
    }

    /// The part of head `heads[index]` (this member), not the root: its entry, its part from
    /// the root, that part to every other head, the others' parts, and its acknowledgement
    /// to the root and the other heads. Returns what it forwards to its node's members: the
    /// call's descriptor, or [`DISAGREED`].
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
        let entered = value(seq, ENTERED);
        for &to in others.iter().chain([&root]) {
            let at = layout.ack(me) + ENTRY_DESC;
            self.post(to, layout.ack(me), entered, at, &[desc])?;
        }
        let ready = value(seq, READY);
        self.wait_word("broadcast", layout.sig(root), ready).await?;
        let from_root = self.forwarded_descriptor(op, desc, &[root]);
        let mine = call.dest.slice(part(index, heads.len(), call.dest.len()));
        let pushes = self
            .push_as_entered(op, call, &others, from_root, |_| (mine, mine))
            .await?;
        for push in pushes {
            push.landed(self).await?;
        }
        self.wait_words("broadcast", Layout::sig, &others, ready)
            .await?;
        let forward = match self.forwarded_descriptor(op, desc, &others) {
            theirs if theirs == desc => from_root,
            _ => DISAGREED,
        };
        let done = value(seq, DONE);
        for &to in others.iter().chain([&root]) {
            self.post(to, layout.ack(me), done, layout.ack(me) + 8, &[forward])?;
        }
        Ok(forward)
    }

    /// Serves each of `to` as soon as it has entered: `what(i)` for the `i`-th of them (its
    /// `dest` range, this member's data) put there with `READY` and `forward` posted behind
    /// it; `READY` with [`DISAGREED`] alone where `forward` or its descriptor disagrees, or
    /// with `forward` alone where the range is empty. Returns the puts.
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
        let mut waiting: Vec<(usize, usize)> = to.iter().copied().enumerate().collect();
        let mut pushes = Vec::with_capacity(waiting.len());
        while !waiting.is_empty() {
            let members: Vec<usize> = waiting.iter().map(|&(_, h)| h).collect();
            self.wait_any_word("broadcast", Layout::ack, &members, entered)
                .await?;
            let (arrived, later): (Vec<_>, Vec<_>) =
                waiting.into_iter().partition(|(_, h)| has_entered(h));
            for (i, h) in arrived {
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
                let (into, from) = what(i);
                match (forward == call.desc, agreed) {
                    (true, Ok(())) if !from.is_empty() => {
                        pushes.push(self.put_posted(into, from, post)?)
                    }
                    (true, Ok(())) => self.post_one(post)?,
                    (_, agreed) => {
                        if let Err(e) = agreed {
                            op.reject(e);
                        }
                        let refused = Post {
                            word: Some(DISAGREED),
                            ..post
                        };
                        self.post_one(refused)?;
                    }
                }
            }
            waiting = later;
        }
        Ok(pushes)
    }
}
