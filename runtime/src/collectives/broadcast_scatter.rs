//! The broadcast scattered among the node heads: broadcasts of `large_bytes` and more on
//! teams that span three nodes or more.
//!
//! # Protocol
//! The heads are the root and the leaders of the other nodes. The elements are split into
//! one part per head other than the root, in node order, and every part into the same
//! number of blocks of about `pipeline_bytes` bytes ([`crate::TeamConfig::pipeline_bytes`];
//! one block where it is 0).
//! 1. Each head other than the root signals to the root and to every other such head that
//!    it has entered (`ENTERED`, with its descriptor): its `dest` may now be written.
//! 2. The root, as each head enters, puts that head's part of its `source` into the head's
//!    `dest`, block `k` with `READY + k` and its descriptor posted behind it.
//! 3. A head passes each block of its own part on as it comes (from its `dest`): into the
//!    `dest` of each other head that has entered, with `READY + k` posted behind it on its
//!    own line there. A block that comes while the last is still being put goes behind it.
//! 4. A head that holds every part (every other head's last block, and has read the words
//!    that came with them) acknowledges to the root and to every other head (`DONE`, with
//!    its verdict), then releases its node's other members, which read the message in
//!    place and acknowledge, as down the tree (`broadcast_tree.rs`); the root's node's
//!    members read the root's `source`, released at once.
//! 5. A head returns once its puts have landed and every other head and its node's members
//!    have acknowledged; the root, once its puts have landed and every head and its node's
//!    members have.
//!
//! Where descriptors differ, a sender posts [`DISAGREEMENT`], a step above every block's,
//! with [`DISAGREED`] in place of the descriptor and no data, and a head passes it on so:
//! every head still hears from every other, whatever number of blocks it computed from
//! its own arguments, so nobody is left waiting, and each reports the mismatch; so does
//! every head whose verdict another head or the root reads. An empty block (of an empty
//! part, where there are fewer elements than heads) moves no data: its `READY + k` comes
//! alone.
//!
//! # Why
//! Down the tree by node the root puts the whole message into every other node's leader:
//! its link carries L − 1 times the message, one after another. Here it carries the message
//! once, and every other head's link carries it once in and (L − 2)/(L − 1) of it out, all
//! heads at once. At 2 nodes both carry it once, and the tree's one hop wins. In blocks, a
//! head's link carries its part out while the rest comes in: without them, at 3 nodes the
//! last part lands after 1.5 times the message's time on a link (a head passes its half on
//! once the whole half has come), against the tree's 2; with them, after about 1.
//!
//! On 3 namespace hosts whose links were each held to 1 Gbit/s (`tc` token buckets, as a
//! cluster's hosts each have a link of their own), 2 + 1 + 1 PEs, four rounds alternated
//! against the tree (`host_collectives --only broadcast`, paired medians): in blocks of 256
//! KiB (the default), 2.04, 1.43 and 1.81 times the tree's bandwidth at 64 KiB, 1 MiB and 8
//! MiB; parts moving whole, 1.81, 1.19 and 1.11 (at 64 KiB both move one block: the gap is
//! the runs' noise). Unshaped, where every "link" is the same two CPUs copying the same
//! bytes in more messages, the scattered forms lose to the tree: 0.50, 0.67 and 0.62 in
//! blocks of 256 KiB; 0.52, 1.03 and 0.78 whole. In an earlier run, blocks of 64 KiB read
//! 2.12, 1.84 and 1.89 shaped and 0.59, 0.38 and 0.56 unshaped. A block costs a put, a post
//! and a wake-up at the head: where the link, not the CPU, is the limit (as on a cluster's
//! fabric) blocks pay for themselves. The default is a guess for links of tens of Gbit/s,
//! where a 256 KiB block takes tens of microseconds; no such link was measured.
//!
//! # When the words are read
//! Within a call a head writes, at the root and at every other head, its `ack` line twice
//! (`ENTERED`, its descriptor in the line's fourth word, then `DONE`, its verdict in the
//! second) and its `sig` line at the other heads once a block (`READY + k`, the same
//! descriptor beside each); the root writes its `sig` line at each head once a block.
//! Other collectives write a member's `sig` line without waiting for it to enter (a
//! reduction tree's child, the leaders of a reduction by node), so a sender must not return
//! before its receiver has read the word beside its last `READY + k`: it waits for the
//! receiver's `DONE`, which comes after that read. The verdict beside a
//! `DONE` is written again only after its reader's next `READY` (down a tree) or part
//! (here), sent once the reader has finished this call; an entry's descriptor, in a word of
//! its own, only at the writer's next entry. Nobody reads another member's buffers across
//! nodes: every byte that crosses is pushed.

use std::ops::Range;
use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::broadcast_tree::{Call, DONE, ENTERED, ENTRY_DESC, READY};
use super::bytes_of;
use super::eager::{agree, DISAGREED};
use super::posted::{Post, Posted};
use super::reduce::part;
use super::shapes::{Shape, Tree};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::region::{value, Layout, LINE, MAX_TEAM_PES};
use crate::team::{Op, Team};

/// The most blocks of a part: their values `READY + k`, and [`DISAGREEMENT`] above them,
/// stay within a signal value's steps.
const MAX_BLOCKS: usize = 1 << 19;

/// The step a disagreement is posted at: above every block's, so that it ends a receiver's
/// wait for its last block whatever number of blocks the receiver computed from its own
/// arguments.
const DISAGREEMENT: usize = READY + MAX_BLOCKS;

const _: () = assert!(DISAGREEMENT < MAX_TEAM_PES, "a step fits a signal value");

/// The number of blocks every part of a call of `bytes` bytes is split into among `heads`
/// heads, in blocks of about `block_bytes` (0: one block): that of the largest part, so
/// every head waits for the same last value; at least one (an empty part's block moves no
/// data). Counted in bytes, as the members' descriptors compare calls.
fn blocks_per_part(bytes: usize, heads: usize, block_bytes: usize) -> usize {
    match block_bytes {
        0 => 1,
        _ => bytes
            .div_ceil(heads)
            .div_ceil(block_bytes)
            .clamp(1, MAX_BLOCKS),
    }
}

/// The blocks a member puts into one receiver ([`Team::push_blocks`]).
struct Delivery<'d, T: Pod> {
    /// The receiver.
    to: usize,
    /// The descriptor posted beside each block's value.
    forward: u64,
    /// The receiver's `dest` range of the part.
    into: SymSlice<'d, T>,
    /// This member's data for it.
    from: SymSlice<'d, T>,
    /// The blocks to put now.
    now: Range<usize>,
}

impl Team {
    /// [`blocks_per_part`] of a call of `len` elements of `T` with this team's
    /// `pipeline_bytes`.
    fn blocks_per_part<T: Pod>(&self, len: usize, heads: usize) -> usize {
        blocks_per_part(bytes_of::<T>(len), heads, self.inner.config.pipeline_bytes)
    }

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
                let serving = Serving {
                    to: &heads,
                    blocks: self.blocks_per_part::<T>(dest.len(), heads.len()),
                    from_root: false,
                };
                let (_, pushes) = self.push_as_entered(op, call, serving, what).await?;
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
    /// the root passed on block by block to every other head, the others' parts, and its
    /// acknowledgement to the root and the other heads. Returns what it forwards to its
    /// node's members: the call's descriptor, or [`DISAGREED`].
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
        let blocks = self.blocks_per_part::<T>(call.dest.len(), heads.len());
        let mine = call.dest.slice(part(index, heads.len(), call.dest.len()));
        let serving = Serving {
            to: &others,
            blocks,
            from_root: true,
        };
        let (from_root, pushes) = self
            .push_as_entered(op, call, serving, |_| (mine, mine))
            .await?;
        for push in pushes {
            push.landed(self).await?;
        }
        let last = value(seq, READY + blocks - 1);
        self.wait_words("broadcast", Layout::sig, &others, last)
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

    /// Serves each of `serving.to` as soon as it has entered and as blocks come: block `k`
    /// of `what(i)` for the `i`-th of them (its `dest` range, this member's data) put there
    /// with `READY + k` and the forwarded descriptor posted behind it. On the root every
    /// block is there at once and the descriptor forwarded is the call's; on a head
    /// (`from_root`) block `k` is there once the root's `READY + k` has come, and the
    /// descriptor forwarded is the one read beside the root's first. Where that or a
    /// receiver's descriptor disagrees, the receiver gets [`DISAGREEMENT`] with
    /// [`DISAGREED`] alone. Posts held for their blocks' data go out as those land, before
    /// the next wait. Returns the descriptor forwarded and the puts still to await.
    async fn push_as_entered<'d, T: Pod>(
        &self,
        op: &mut Op<'_>,
        call: Call<'d, '_, T>,
        serving: Serving<'_>,
        what: impl Fn(usize) -> (SymSlice<'d, T>, SymSlice<'d, T>),
    ) -> Result<(u64, Vec<Posted>)> {
        let layout = self.inner.layout;
        let Serving { to, blocks, .. } = serving;
        let entered = value(call.seq, ENTERED);
        let has_entered = |h: usize| self.local(layout.ack(h)).load(Ordering::Acquire) >= entered;
        let mut sent = vec![0; to.len()];
        let mut forward = (!serving.from_root).then_some(call.desc);
        let mut pushes = Vec::new();
        loop {
            let come = self.blocks_come(call, serving);
            if come > 0 && forward.is_none() {
                forward = Some(self.forwarded_descriptor(op, call.desc, &[call.root]));
            }
            let forward_now = forward.unwrap_or(call.desc);
            let come = match forward_now == call.desc {
                true => come,
                false => blocks,
            };
            for (i, &h) in to.iter().enumerate() {
                if sent[i] < come && has_entered(h) {
                    let (into, from) = what(i);
                    let delivery = Delivery {
                        to: h,
                        forward: forward_now,
                        into,
                        from,
                        now: sent[i]..come,
                    };
                    sent[i] = self.push_blocks(op, call, blocks, delivery, &mut pushes)?;
                }
            }
            if come == blocks && sent.iter().all(|&s| s == blocks) {
                return Ok((forward_now, pushes));
            }
            self.post_held(&mut pushes).await?;
            let waiting: Vec<usize> = (0..to.len()).filter(|&i| sent[i] < come).collect();
            let ready = || {
                self.blocks_come(call, serving) > come
                    || waiting.iter().any(|&i| has_entered(to[i]))
            };
            let root_line = layout.sig(call.root)..layout.sig(call.root) + LINE;
            let watched = match (come < blocks, waiting.is_empty()) {
                (true, true) => root_line,
                (false, _) => layout.span(Layout::ack),
                (true, false) => {
                    let entries = layout.span(Layout::ack);
                    root_line.start.min(entries.start)..root_line.end.max(entries.end)
                }
            };
            self.wait_for("broadcast", watched, ready).await?;
        }
    }

    /// Awaits the puts of `pushes` whose posts wait for their data (where the transport
    /// does not keep a block's write and its post in order), making those posts as they
    /// land, so that a receiver hears of a block before this member has put the last;
    /// keeps the others, whose posts went out behind them, for the caller to await.
    async fn post_held(&self, pushes: &mut Vec<Posted>) -> Result<()> {
        if !pushes.iter().any(Posted::holds_post) {
            return Ok(());
        }
        let (held, behind): (Vec<Posted>, Vec<Posted>) = std::mem::take(pushes)
            .into_iter()
            .partition(Posted::holds_post);
        *pushes = behind;
        for push in held {
            push.landed(self).await?;
        }
        Ok(())
    }

    /// How many blocks of its part this member holds: every one on the root, else as many
    /// as the root's `READY + k` says have come.
    fn blocks_come<T: Pod>(&self, call: Call<'_, '_, T>, serving: Serving<'_>) -> usize {
        if !serving.from_root {
            return serving.blocks;
        }
        let posted = self
            .local(self.inner.layout.sig(call.root))
            .load(Ordering::Acquire);
        let first = value(call.seq, READY);
        match posted.checked_sub(first) {
            Some(k) => (k as usize + 1).min(serving.blocks),
            None => 0,
        }
    }

    /// Puts blocks `delivery.now` of `blocks` into `delivery.to`, each with `READY + k` and
    /// `delivery.forward` posted behind it; [`DISAGREEMENT`] with [`DISAGREED`] alone where
    /// the forwarded descriptor or the receiver's entry disagrees with the call. An empty
    /// block moves no data. Every block's post is held until its data has landed, or none
    /// is, judged by the part's largest block, so that no post overtakes an earlier one's
    /// data. Returns how many blocks the receiver has been sent: the end of `delivery.now`,
    /// or all of them where it was told of a disagreement or a put was refused (whose
    /// landing reports it; no later post then tells the receiver that it came).
    fn push_blocks<'d, T: Pod>(
        &self,
        op: &mut Op<'_>,
        call: Call<'d, '_, T>,
        blocks: usize,
        delivery: Delivery<'d, T>,
        pushes: &mut Vec<Posted>,
    ) -> Result<usize> {
        let layout = self.inner.layout;
        let Delivery {
            to,
            forward,
            into,
            from,
            now,
        } = delivery;
        let post = |step: usize, word: u64| Post {
            to,
            offset: layout.sig(self.my_pe()),
            value: value(call.seq, step),
            word: Some(word),
        };
        let agreed = match now.start {
            0 => {
                let theirs = self.local(layout.ack(to) + ENTRY_DESC);
                agree(call.desc, theirs.load(Ordering::Acquire), to)
            }
            _ => Ok(()),
        };
        if forward != call.desc || agreed.is_err() {
            if let Err(e) = agreed {
                op.reject(e);
            }
            self.post_one(post(DISAGREEMENT, DISAGREED))?;
            return Ok(blocks);
        }
        let largest = bytes_of::<T>(into.len().div_ceil(blocks));
        let end = now.end;
        for k in now {
            let block = part(k, blocks, into.len());
            if block.is_empty() {
                self.post_one(post(READY + k, forward))?;
                continue;
            }
            let (into, from) = (into.slice(block.clone()), from.slice(block));
            let pushed = self.put_posted_judged(into, from, post(READY + k, forward), largest)?;
            let refused = pushed.refused();
            pushes.push(pushed);
            if refused {
                return Ok(blocks);
            }
        }
        Ok(end)
    }
}

/// Whom a member serves in a scattered broadcast, and how its blocks come.
#[derive(Clone, Copy)]
struct Serving<'a> {
    /// The heads it puts data into.
    to: &'a [usize],
    /// Blocks per part.
    blocks: usize,
    /// Whether its blocks come from the root (a head), rather than being there (the root).
    from_root: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_takes_the_blocks_of_the_largest() {
        // 0: whole parts.
        assert_eq!(blocks_per_part(8 << 20, 2, 0), 1);
        // Two parts of 4 MiB in blocks of 256 KiB.
        assert_eq!(blocks_per_part(8 << 20, 2, 256 << 10), 16);
        // An odd byte more: the larger part takes one block more, and so does the other.
        assert_eq!(blocks_per_part((8 << 20) + 1, 2, 256 << 10), 17);
        // Fewer bytes than heads, and none: one block, empty where the part is.
        assert_eq!(blocks_per_part(1, 4, 64), 1);
        assert_eq!(blocks_per_part(0, 4, 64), 1);
        // Never more blocks than their values leave room for.
        assert_eq!(blocks_per_part(usize::MAX, 2, 64), MAX_BLOCKS);
    }
}
