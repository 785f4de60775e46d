//! The broadcast scattered among the node heads: broadcasts of `large_bytes` and more on
//! teams that span three nodes or more.
//!
//! # Protocol
//! The heads are the root and the leaders of the other nodes. The elements are split into
//! one part per head other than the root, in node order, and every part into the same
//! number of blocks of about `pipeline_bytes` ([`crate::TeamConfig::pipeline_bytes`]; one block
//! where it is 0).
//! 1. Each head other than the root signals to the root and to every other such head that
//!    it has entered (`ENTERED`, with its descriptor): its `dest` may now be written.
//! 2. The root, as each head enters, puts that head's part of its `source` into the head's
//!    `dest`, block `k` with `READY + k` and its descriptor posted behind it.
//! 3. A head passes each block of its own part on as it comes (from its `dest`): into the
//!    `dest` of each other head that has entered, with `READY + k` posted behind it on its
//!    own line there. A block that comes while the last is still being put goes behind it.
//! 4. A head that holds every part (every head's last block, and has read the words that
//!    came with them)
//!    acknowledges to the root and to every other head (`DONE`, with its verdict), then
//!    releases its node's other members, which read the message in place and acknowledge,
//!    as down the tree (`broadcast_tree.rs`); the root's node's members read the root's
//!    `source`, released at once.
//! 5. A head returns once its puts have landed and every other head and its node's members
//!    have acknowledged; the root, once its puts have landed and every head and its node's
//!    members have.
//!
//! Where descriptors differ, the last block's `READY` comes with [`DISAGREED`] in place of
//! the descriptor and no data, and is passed on so: every head still hears from every other, so nobody is
//! left waiting, and each reports the mismatch; so does every head whose verdict another
//! head or the root reads. An empty part (fewer elements than heads) moves no data: its
//! `READY` comes alone.
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
//! KiB (the default), 2.03, 1.47 and 1.82 times the tree's bandwidth at 64 KiB, 1 MiB and 8
//! MiB; parts moving whole, 2.07, 1.22 and 1.12; in blocks of 64 KiB, 2.12, 1.84 and 1.89.
//! Unshaped, where every "link" is the same two CPUs copying the same bytes in more
//! messages, every form loses to the tree: 0.56, 0.53 and 0.67 in blocks of 256 KiB; 0.57,
//! 0.82 and 0.78 whole; 0.59, 0.38 and 0.56 in blocks of 64 KiB. A block costs a post and
//! a wake-up at the head: where the link, not the CPU, is the limit (as on a cluster's
//! fabric) blocks pay for themselves; the default is sized for links of tens of Gbit/s,
//! where a 256 KiB block takes tens of microseconds.
//!
//! # When the words are read
//! Within a call a head writes, at the root and at every other head, its `ack` line twice
//! (`ENTERED`, its descriptor in the line's fourth word, then `DONE`, its verdict in the
//! second) and its `sig` line at the other heads once a block (`READY + k`, the same
//! descriptor beside each); the root writes its `sig` line at each head once a block. Other collectives write a member's `sig` line without waiting
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

/// Blocks of a part, at most one step's worth of posted values.
const MAX_BLOCKS: usize = 1 << 19;

/// The number of blocks every part of a call of `len` elements of `elem` bytes is split
/// into among `heads` heads, in blocks of about `block_bytes` (0: one block): that of the
/// largest part, so every head waits for the same last value; at least one (an empty
/// part's block moves no data).
fn blocks_per_part(len: usize, elem: usize, heads: usize, block_bytes: usize) -> usize {
    let largest = len.div_ceil(heads).saturating_mul(elem);
    match block_bytes {
        0 => 1,
        _ => largest.div_ceil(block_bytes).clamp(1, MAX_BLOCKS),
    }
}

impl Team {
    /// [`blocks_per_part`] with this team's `pipeline_bytes`.
    fn blocks_per_part(&self, len: usize, elem: usize, heads: usize) -> usize {
        blocks_per_part(len, elem, heads, self.inner.config.pipeline_bytes)
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
                    blocks: self.blocks_per_part(dest.len(), size_of::<T>(), heads.len()),
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
        let blocks = self.blocks_per_part(call.dest.len(), size_of::<T>(), heads.len());
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
    /// receiver's descriptor disagrees, the receiver gets the last block's value with
    /// [`DISAGREED`] alone. Returns the descriptor forwarded and the puts.
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
                    let blocks_now = (sent[i]..come, blocks);
                    let to = (h, forward_now);
                    sent[i] = self.push_blocks(op, call, to, what(i), blocks_now, &mut pushes)?;
                }
            }
            if come == blocks && sent.iter().all(|&s| s == blocks) {
                return Ok((forward_now, pushes));
            }
            let waiting: Vec<usize> = (0..to.len()).filter(|&i| sent[i] < come).collect();
            let ready = || {
                self.blocks_come(call, serving) > come
                    || waiting.iter().any(|&i| has_entered(to[i]))
            };
            let (sig, ack) = (layout.span(Layout::sig), layout.span(Layout::ack));
            let watched = sig.start.min(ack.start)..sig.end.max(ack.end);
            self.wait_for("broadcast", watched, ready).await?;
        }
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

    /// Puts blocks `range` of `blocks` (of `into`, from `from`) into member `to`, each with
    /// `READY + k` and `forward` posted behind it; the last block's value with
    /// [`DISAGREED`] alone where `forward` or `to`'s entry disagrees with the call. An empty
    /// block moves no data. Returns how many blocks `to` has been sent: the end of `range`,
    /// or all of them where it was told of a disagreement.
    fn push_blocks<'d, T: Pod>(
        &self,
        op: &mut Op<'_>,
        call: Call<'d, '_, T>,
        (to, forward): (usize, u64),
        (into, from): (SymSlice<'d, T>, SymSlice<'d, T>),
        (range, blocks): (std::ops::Range<usize>, usize),
        pushes: &mut Vec<Posted>,
    ) -> Result<usize> {
        let layout = self.inner.layout;
        let post = |k: usize, word: u64| Post {
            to,
            offset: layout.sig(self.my_pe()),
            value: value(call.seq, READY + k),
            word: Some(word),
        };
        let theirs = self
            .local(layout.ack(to) + ENTRY_DESC)
            .load(Ordering::Acquire);
        let agreed = match range.start {
            0 => agree(call.desc, theirs, to),
            _ => Ok(()),
        };
        if forward != call.desc || agreed.is_err() {
            if let Err(e) = agreed {
                op.reject(e);
            }
            self.post_one(post(blocks - 1, DISAGREED))?;
            return Ok(blocks);
        }
        let end = range.end;
        for k in range {
            let block = part(k, blocks, into.len());
            match block.is_empty() {
                true => self.post_one(post(k, forward))?,
                false => {
                    let (into, from) = (into.slice(block.clone()), from.slice(block));
                    pushes.push(self.put_posted(into, from, post(k, forward))?);
                }
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
