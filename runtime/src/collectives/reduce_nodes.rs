//! Reductions by node: on a team that spans nodes with several members on some node, the
//! members of a node go through its leader (its lowest member), and only the leaders meet
//! over the fabric.
//!
//! # Eager (small reductions)
//! Each member sends its contribution to its node's leader, over mapped memory. A leader
//! combines its node's contributions in member order into its `dest` (the node's partial),
//! sends the partial to every other leader, over the fabric, combines the leaders' partials
//! in node order into its `dest`, and sends the result to its node's members. Every message
//! goes through the eager slots (`eager.rs`): nobody waits for a receiver to arrive.
//!
//! With 8 PEs on 2 namespace hosts, 4 each, a 4-byte sum took 118–122 µs flat (every
//! contribution to every member: n(n − 1) messages, each PE's half of them over the
//! fabric), 79 µs down the by-node tree (whose syncs cost more than eager messages) and
//! 27–31 µs this way.
//!
//! # Scattered among the leaders (larger reductions)
//! 1. Each member signals its entry to its leader. Once all have, the leader tells them to
//!    combine: member `k` of the node's `m` combines part `k` (of `m`) of the elements from
//!    every member's `source`, in member order, into that part of the leader's `dest`, over
//!    mapped memory, and says so. The leader's `dest` then holds the node's partial, each
//!    member having read and combined 1/m of it, all at once, where the leader alone would
//!    read every member's whole `source`. It does so alone, without waking its members,
//!    where it would read no more than `large_bytes` of theirs
//!    ([`Plan::node_combine_shared`](super::plan::Plan::node_combine_shared)): its release
//!    then comes in place of the word to combine. A leader alone on its node keeps its
//!    `source` as the partial.
//! 2. Each leader signals every other leader that its partial is ready, with the call's
//!    descriptor.
//! 3. Leader `g` (of node `g`) combines part `g` of the elements, reading that part of
//!    every leader's partial in node order (over the fabric, all at once), into part `g` of
//!    its `dest`. No one else reads that part of any partial.
//! 4. It puts the combined part into part `g` of every other leader's `dest`, with a post
//!    behind it. Only leader `g` reads part `g` of a partial, and it has done so; the
//!    receiver's partial was complete before its signal of step 2, which `g` waited for.
//! 5. Once every other leader's part has landed, a leader's `dest` holds the result: it
//!    releases its node's members, which read it in place and acknowledge.
//!
//! Each leader's link carries 2(L − 1)/L of the elements each way (its reads of the others'
//! partials and theirs of its own, then the parts pushed both ways), every leader's at
//! once, and each leader combines 1/L of them; the tree that went before (every partial up
//! to member 0, the result back down) carried all of them through member 0's link, up then
//! down, and combined all of them there. Teams of more than `flat_max_pes` nodes run this
//! form from `large_bytes` up, and the tree below it ([`Plan::reduce`](super::plan::Plan::reduce)).
//!
//! A leader returns once the others' parts have landed in its `dest` (each sent after its
//! sender read this leader's partial), its own pushes have landed and its members have
//! acknowledged: no one reads its buffers after it returns. The words stay readable until
//! read: another leader writes this one's `sig` line again only in its next call, which it
//! begins only after this leader's part reached it, sent after this leader read the line;
//! a member writes its `sig` line again only after the leader's release, sent after the
//! leader read it; and a leader writes a member's line again (the release after the word to
//! combine, or the next call's word) only after the member's word that it combined, or its
//! acknowledgement of the result, each sent after the member read the verdict beside the
//! line. The leaders' posts on each other's `ack` lines carry no word: only their value is
//! read. A member's `source` is read by its node-mates only before they say they combined,
//! which the leader waits for before it releases anyone, or by the leader alone, before it
//! releases anyone.
//!
//! # Every member gets the same bits
//! Each part of a node's partial is computed once, by one member (or all by its leader),
//! element by element in member order, and each part of the result once, by one leader,
//! combining the partials in node order.
//!
//! # Mismatches
//! A leader that sees a contribution or a partial with another descriptor than its own
//! sends [`DISAGREED`](super::eager::DISAGREED) on in place of its descriptor, so every
//! member reports the mismatch; the messages still flow, so nobody is left waiting. In the
//! eager form, a call by node against a flat eager call (a `reducescatter`, or sizes on
//! either side of the limit of a form by node) only partly meets it: see
//! `collectives/mod.rs`.

use std::sync::atomic::Ordering;

use super::bytes_of;
use super::eager::{agree, Payload, Stamp, DISAGREED};
use super::posted::Post;
use super::reduce::part;
use super::reduce_ops::{ReduceOp, Reducible};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::region::{value, Layout};
use crate::team::{Op, Team};

// The steps of `scattered_reduce_by_node` between a leader and its node's members, each
// line's in increasing order, since a wait ends at any value at least the one it waits for.
// A member's entry is step 0 on its `sig` line at its leader. Where the leader combines its
// node's partial alone, COMBINE and COMBINED are left out: the release comes in place of
// the word to combine.

/// On the leader's `sig` line at a member: combine your part of the node's partial.
const COMBINE: usize = 1;
/// On the leader's `sig` line at a member, after [`COMBINE`]: the result is ready.
const RELEASE: usize = 2;
/// On a member's `ack` line at its leader: its part of the node's partial is combined.
const COMBINED: usize = 1;
/// On a member's `ack` line at its leader, after [`COMBINED`]: it has read the result.
const MEMBER_DONE: usize = 2;
/// On a leader's `ack` line at another leader: its part of the result has landed there
/// (its partial's readiness is step 0 on its `sig` line there).
const PART_LANDED: usize = 1;

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

    /// [`Team::reduce`] scattered among the node leaders (see the module documentation).
    pub(super) async fn scattered_reduce_by_node<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let layout = self.inner.layout;
        let seq = state.next_seq();
        let up = value(seq, 0);
        let nodes = &self.inner.plan.nodes;
        let members = nodes.members(nodes.group_of(me));
        if me != members[0] {
            let member = self.scattered_member_step(state, op, (dest, source), members, desc, seq);
            return member.await;
        }
        let others = &members[1..];
        self.wait_words("reduce", Layout::sig, others, up).await?;
        let mut forward = self.forwarded_descriptor(state, desc, others);
        let bytes = bytes_of::<T>(dest.len());
        if self.inner.plan.node_combine_shared(bytes, members.len()) {
            self.share_node_partial(op, (dest, source), members, (desc, forward), seq)
                .await?;
        } else if forward == desc && !others.is_empty() {
            let input = |k: usize| (source, self.pe(members[k]));
            self.combine_into(op, dest, members.len(), input).await?;
        }
        let peers: Vec<usize> = nodes
            .leaders()
            .iter()
            .copied()
            .filter(|&l| l != me)
            .collect();
        for &l in &peers {
            self.post(l, layout.sig(me), up, layout.sig(me) + 8, &[forward])?;
        }
        self.wait_words("reduce", Layout::sig, &peers, up).await?;
        if self.forwarded_descriptor(state, desc, &peers) != desc {
            forward = DISAGREED;
        }
        let mine = self.leaders_part(dest.len());
        let agreed = forward == desc;
        self.leaders_combine(op, (dest, source), mine.clone(), agreed)
            .await?;
        let part = (agreed && !mine.is_empty()).then(|| dest.slice(mine));
        self.exchange_parts(part, (&peers, others), (forward, seq))
            .await?;
        self.wait_words("reduce", Layout::ack, others, value(seq, MEMBER_DONE))
            .await
    }

    /// A leader's node partial, combined by all its node's `members` at once: it tells the
    /// others to start (with the verdict `forward`, which they check against `desc`), each
    /// member combines its part of the elements from every member's `source` into this
    /// leader's `dest` ([`Team::combine_node_part`]), and the leader waits until every part
    /// is there (nothing is combined where the members disagree).
    async fn share_node_partial<T: Reducible>(
        &self,
        op: ReduceOp,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        members: &[usize],
        (desc, forward): (u64, u64),
        seq: u64,
    ) -> Result<()> {
        let layout = self.inner.layout;
        let me = self.my_pe();
        let others = &members[1..];
        for &m in others {
            let combine = value(seq, COMBINE);
            self.post(m, layout.sig(me), combine, layout.sig(me) + 8, &[forward])?;
        }
        if forward == desc {
            self.combine_node_part(op, (dest, source), members, 0)
                .await?;
        }
        self.wait_words("reduce", Layout::ack, others, value(seq, COMBINED))
            .await
    }

    /// Member `members[k]` of a node combines part `k` of the elements (of `members.len()`)
    /// from every member's `source`, in member order, into that part of the leader's
    /// (`members[0]`) `dest`. Only this member reads that part of any member's `source`, so
    /// an in-place reduction's `dest` may take it at once.
    async fn combine_node_part<T: Reducible>(
        &self,
        op: ReduceOp,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        members: &[usize],
        k: usize,
    ) -> Result<()> {
        let mine = part(k, members.len(), dest.len());
        if mine.is_empty() {
            return Ok(());
        }
        let input = |j: usize| (source.slice(mine.clone()), self.pe(members[j]));
        let into = (dest.slice(mine.clone()), self.pe(members[0]));
        self.combine_onto(op, into, members.len(), input).await
    }

    /// A member's part of [`Team::scattered_reduce_by_node`]: it posts its entry to its
    /// leader (`members[0]`), combines its part of the node's partial where the leader says
    /// so ([`Team::share_node_partial`]) and acknowledges that, then reads the result from
    /// the leader once released (the release may come in place of the word to combine, where
    /// the leader combines alone), as a tree's child on its parent's node does.
    async fn scattered_member_step<T: Reducible>(
        &self,
        state: &mut Op<'_>,
        op: ReduceOp,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        members: &[usize],
        desc: u64,
        seq: u64,
    ) -> Result<()> {
        let layout = self.inner.layout;
        let (me, leader) = (self.my_pe(), members[0]);
        self.post(
            leader,
            layout.sig(me),
            value(seq, 0),
            layout.sig(me) + 8,
            &[desc],
        )?;
        // The word to combine, or the release where the leader combines alone.
        let combine = value(seq, COMBINE);
        self.wait_word("reduce", layout.sig(leader), combine)
            .await?;
        if self.local(layout.sig(leader)).load(Ordering::Acquire) == combine {
            let verdict = self.local(layout.sig(leader) + 8).load(Ordering::Acquire);
            let mine = members.iter().position(|&m| m == me);
            if let (true, Some(k)) = (verdict == desc, mine) {
                self.combine_node_part(op, (dest, source), members, k)
                    .await?;
            }
            self.signal(leader, layout.ack(me), value(seq, COMBINED))?;
        }
        let steps = (value(seq, RELEASE), value(seq, MEMBER_DONE));
        let result = self.reduce_child_result(state, leader, dest, (desc, desc), steps);
        result.await.map(|_| ())
    }

    /// The descriptor a member sends on after reading those that members `from` left beside
    /// their `sig` words: the call's own where all agree with it, else [`DISAGREED`] (the
    /// first disagreement rejects the call). A reduction's leader reads its node's members'
    /// and the other leaders'; a scattered broadcast's head, the root's and the other heads'.
    pub(super) fn forwarded_descriptor(
        &self,
        state: &mut Op<'_>,
        desc: u64,
        from: &[usize],
    ) -> u64 {
        let layout = self.inner.layout;
        let mut forward = desc;
        for &j in from {
            let theirs = self.local(layout.sig(j) + 8).load(Ordering::Acquire);
            if let Err(e) = agree(desc, theirs, j) {
                state.reject(e);
                forward = DISAGREED;
            }
        }
        forward
    }

    /// A leader puts its combined `part` of `dest` (none where the leaders disagree or its
    /// part is empty) into every other leader's (`peers`), each with a post behind it; once
    /// every other leader's post has come (its part landed here), it releases its node's
    /// other members (`others`) with the verdict `forward`. Returns once its own pushes
    /// have landed too. `seq` numbers the call.
    async fn exchange_parts<T: Reducible>(
        &self,
        part: Option<SymSlice<'_, T>>,
        (peers, others): (&[usize], &[usize]),
        (forward, seq): (u64, u64),
    ) -> Result<()> {
        let layout = self.inner.layout;
        let me = self.my_pe();
        let down = value(seq, PART_LANDED);
        let mut pushes = Vec::with_capacity(peers.len());
        for &l in peers {
            let post = Post {
                to: l,
                offset: layout.ack(me),
                value: down,
                word: None,
            };
            match part {
                Some(part) => pushes.push(self.put_posted(part, part, post)?),
                None => self.post_one(post)?,
            }
        }
        let landed = async {
            for pushed in pushes {
                pushed.landed(self).await?;
            }
            Ok(())
        };
        let released = async {
            self.wait_words("reduce", Layout::ack, peers, down).await?;
            for &m in others {
                let release = Post {
                    to: m,
                    offset: layout.sig(me),
                    value: value(seq, RELEASE),
                    word: Some(forward),
                };
                self.post_one(release)?;
            }
            Ok(())
        };
        // Together: where the transport does not keep long writes in order, a push's post
        // goes out only once its data has landed, and the other leaders wait for it; and the
        // members need not wait for this leader's pushes (sent from copies of its part). On
        // an error the other half is dropped: the call fails, and those waiting for its posts
        // learn of it from its call record or from the job's failure.
        tokio::try_join!(landed, released).map(|_| ())
    }

    /// The elements whose combination this leader computes: the part of its node.
    fn leaders_part(&self, len: usize) -> std::ops::Range<usize> {
        let nodes = &self.inner.plan.nodes;
        part(nodes.group_of(self.my_pe()), nodes.nodes(), len)
    }

    /// A leader combines its part `mine` of the elements, reading it from every leader's
    /// partial in node order, into its `dest`; nothing where the leaders disagree (`agreed`
    /// false).
    async fn leaders_combine<T: Reducible>(
        &self,
        op: ReduceOp,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        mine: std::ops::Range<usize>,
        agreed: bool,
    ) -> Result<()> {
        if !agreed || mine.is_empty() {
            return Ok(());
        }
        let nodes = &self.inner.plan.nodes;
        let partial = |g: usize| match nodes.members(g).len() {
            1 => source,
            _ => dest,
        };
        let input = |g: usize| {
            let of = partial(g).slice(mine.clone());
            (of, self.pe(nodes.leaders()[g]))
        };
        self.combine_into(op, dest.slice(mine.clone()), nodes.nodes(), input)
            .await
    }
}
