//! Eager messages: small payloads copied straight into a receiver's scratch slot, so that a
//! sender never waits for its receiver to arrive.
//!
//! Member `s` sends its messages to member `r` through two slots on `r` reserved for `s`,
//! alternately. Message `m` (counted per pair, by both sides alike) goes into slot `m mod 2`:
//! data and header first, then the header's first word set to `m + 1`. Before writing
//! message `m ≥ 2`, `s` must know that `r` has read message `m − 2`, the slot's last
//! occupant: its credit for `r` (the messages `r` has consumed from it) must reach `m − 1`.
//!
//! Credits travel two ways. Every header carries the sender's count of messages consumed
//! from the receiver, so in collectives where each member sends, in every call, to every
//! member it receives from (all but broadcast: every member to every other, or members and
//! their leader and the leaders among themselves in the forms by node) credits come for
//! free: by the time a member sends again, it has received its receivers' newer messages.
//! A member that consumes without sending back (a broadcast's non-roots) writes its count
//! into the sender's credit line instead.
//!
//! Every message is also stamped with its call (a [`Stamp`]): the call's number among the
//! team's collectives and its descriptor. The number comes from the team's sequence counter,
//! which every member advances alike (an eager call takes one number; the other algorithms
//! take theirs for their signal values), so in calls that match, the `m`-th message from
//! `s` to `r` carries the number of the call in which `r` reads it. A message with another
//! number is one a mismatched call left behind (or one sent in a call that `r` skipped):
//! nobody will consume it in step any more, and the pair's message and credit counts no
//! longer agree, so the receiver fails with [`Error::CollectiveMismatch`] and the team
//! becomes unusable on it, as after a cancelled call. The number is kept modulo 2^24 (the
//! header's length word holds it above 40 bits of length), so a message left behind exactly
//! a multiple of 2^24 calls earlier would pass. A message of the same call with another
//! descriptor is consumed as usual, and the receiver reports the mismatch without giving up
//! the team.
//!
//! A receiver waits by reading its slot's header, so the slot's lines sit in the receiver's
//! cache when the sender comes to write them, and the sender's first store waits for them to
//! travel. Where every member sends to every other (all-to-all, fcollect, collect, the eager
//! reductions), senders therefore ask for those lines for writing ([`Team::eager_prefetch`])
//! as soon as the call knows it goes eager, ahead of the rest of its set-up, so that the trip
//! overlaps that work (the forms by node, whose members send one message, do not). A flat
//! broadcast's root takes only the lines past the first
//! ([`Team::eager_prefetch_data`]): its receivers do nothing but read their headers
//! meanwhile, so a header line taken early is taken back before the write and travels twice
//! (1.3x slower at 4 bytes on an Intel Xeon; 0.85-0.9x on an AMD EPYC).

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::Descriptor;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
pub(crate) use crate::post::Payload;
use crate::team::region::{LINE, SLOT_HEADER};
use crate::team::{Op as Collective, Team};

/// Bits of the call number a header carries, above the message's 40 bits of length.
const CALL_BITS: u32 = 24;
/// The length bits of a header's second word.
const LENGTH_MASK: u64 = (1 << (64 - CALL_BITS)) - 1;

/// What ties an eager message to its call: the call's number (modulo 2^24) and descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    /// The call's number among the team's collectives, modulo 2^24.
    call: u64,
    /// The call's descriptor.
    pub desc: u64,
}

impl Stamp {
    /// Numbers `op`, an eager call with descriptor `desc`: takes the next value of the
    /// team's sequence counter, which every member advances alike. Call once per call.
    pub fn new(op: &Collective<'_>, desc: u64) -> Stamp {
        Stamp {
            call: op.next_seq() & ((1 << CALL_BITS) - 1),
            desc,
        }
    }

    /// The same call's stamp with descriptor `desc`: what a member that forwards its
    /// verdict on others' descriptors sends on ([`DISAGREED`] after a mismatch).
    pub fn with_desc(self, desc: u64) -> Stamp {
        Stamp { desc, ..self }
    }
}

/// Whose next messages a receiver waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Senders {
    /// Every other member.
    All,
    /// Member `j` alone.
    One(usize),
}

/// A message that has arrived, still in its slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrived {
    /// Region offset of its data.
    pub data: usize,
    /// Its length in bytes.
    pub bytes: usize,
    /// Its sender's descriptor.
    pub desc: u64,
}

/// The error of a member whose eager messages and this PE's calls are out of step.
fn out_of_step(detail: String) -> Error {
    Error::CollectiveMismatch {
        operation: "team collective",
        detail: format!("{detail}; the team cannot be used any more"),
    }
}

impl Team {
    /// Whether member `to`'s slot for collective `op`'s next eager message to it is free:
    /// `to` has read the slot's last occupant (the credit this PE holds says so, or the
    /// credit line `to` writes here, read once, does). Never waits.
    pub(crate) fn eager_slot_free(&self, op: &mut Collective<'_>, to: usize) -> bool {
        let m = op.sent(to);
        if m < 2 || op.credit(to) >= m - 1 {
            return true;
        }
        let line = self.inner.layout.credit(to);
        let written = self.local(line).load(Ordering::Acquire);
        op.set_credit(to, op.credit(to).max(written));
        op.credit(to) >= m - 1
    }

    /// Waits until member `to`'s slot for collective `op`'s next eager message to it is free
    /// (see [`Team::eager_slot_free`], which callers ask first: when it says so, this future
    /// need not be made at all).
    pub(crate) async fn eager_slot_wait(&self, op: &mut Collective<'_>, to: usize) -> Result<()> {
        let line = self.inner.layout.credit(to);
        self.wait_word("eager credit", line, op.sent(to) - 1)
            .await?;
        let free = self.eager_slot_free(op, to);
        debug_assert!(free, "the credit line reached the credit the slot needs");
        Ok(())
    }

    /// Asks for the lines of member `to`'s slot for this PE's next eager message to it (its
    /// header and up to `bytes` bytes of data) for writing, so that they come to this core
    /// while the call does its other work instead of when the message is written. A hint
    /// (see [`DataPlane::prefetch_for_write`](crate::data_plane::DataPlane::prefetch_for_write)):
    /// it changes no memory, and is harmless if the slot is still being read.
    pub(crate) fn eager_prefetch(&self, op: &Collective<'_>, to: usize, bytes: usize) {
        self.prefetch_slot_from(op, to, bytes, 0);
    }

    /// [`Team::eager_prefetch`] without the slot's first line, the one whose header the
    /// receiver polls.
    pub(crate) fn eager_prefetch_data(&self, op: &Collective<'_>, to: usize, bytes: usize) {
        self.prefetch_slot_from(op, to, bytes, LINE);
    }

    /// Prefetches for writing the bytes from `skip` on of the slot span that the next eager
    /// message of `bytes` bytes to member `to` fills.
    fn prefetch_slot_from(&self, op: &Collective<'_>, to: usize, bytes: usize, skip: usize) {
        let layout = self.inner.layout;
        let slot = layout.slot(self.my_pe(), op.sent(to) % 2);
        let len = SLOT_HEADER + bytes.min(layout.eager_bytes);
        if len > skip {
            self.dp()
                .prefetch_for_write(self.pe(to), self.view::<u8>(slot + skip, len - skip));
        }
    }

    /// Sends `payload` to member `to` as collective `op`'s next eager message, stamped with
    /// `stamp`, its header announcing `bytes` bytes (the payload's size, or more when the
    /// receiver is to read the rest from the sender's buffer itself). The slot must be free
    /// ([`Team::eager_slot_free`] or [`Team::eager_slot_wait`] first).
    pub(crate) fn eager_send<T: Pod>(
        &self,
        op: &mut Collective<'_>,
        to: usize,
        payload: Payload<'_, T>,
        bytes: usize,
        stamp: Stamp,
    ) -> Result<()> {
        let m = op.sent(to);
        debug_assert!(m < 2 || op.credit(to) >= m - 1, "the slot must be free");
        let slot = self.inner.layout.slot(self.my_pe(), m % 2);
        let len = match payload {
            Payload::Sym(src) => src.len(),
            Payload::Local(src) => src.len(),
        };
        debug_assert!(bytes as u64 <= LENGTH_MASK, "descriptors hold 40-bit sizes");
        debug_assert!(
            len * std::mem::size_of::<T>() <= self.inner.layout.eager_bytes,
            "the payload fits its slot, with the word after it spare"
        );
        let length = stamp.call << (64 - CALL_BITS) | (bytes as u64 & LENGTH_MASK);
        self.dp().post_message(
            self.pe(to),
            self.view::<u64>(slot, 4),
            [length, stamp.desc, op.recvd(to)],
            payload,
            self.view::<T>(slot + SLOT_HEADER, len),
            m + 1,
        )?;
        op.set_sent(to, m + 1);
        Ok(())
    }

    /// Whether the next message of every member of `from` has arrived. Never waits.
    pub(crate) fn eager_arrived(&self, op: &Collective<'_>, from: Senders) -> bool {
        let layout = self.inner.layout;
        let (n, me) = (self.n_pes(), self.my_pe());
        let here = |j: usize| {
            let m = op.recvd(j);
            self.local(layout.slot(j, m % 2)).load(Ordering::Acquire) > m
        };
        match from {
            Senders::All => (0..n).all(|j| j == me || here(j)),
            Senders::One(j) => here(j),
        }
    }

    /// Waits until the next message of every member of `from` has arrived (see
    /// [`Team::eager_arrived`], which callers ask first: when they have, this future need
    /// not be made at all).
    pub(crate) async fn eager_wait(&self, op: &Collective<'_>, from: Senders) -> Result<()> {
        let span = self.inner.layout.slot(0, 0)..self.inner.layout.bytes;
        self.wait_for("eager receive", span, move || self.eager_arrived(op, from))
            .await
    }

    /// The next message from member `j`, which [`Team::eager_arrived`] saw arrive, checked to
    /// belong to the call `stamp` numbers (its descriptor is left to the caller to compare).
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] when it belongs to another call; the caller must then
    /// fail the collective (not merely reject it), which leaves the team unusable.
    pub(crate) fn eager_peek(
        &self,
        op: &Collective<'_>,
        j: usize,
        stamp: Stamp,
    ) -> Result<Arrived> {
        let slot = self.inner.layout.slot(j, op.recvd(j) % 2);
        let length = self.local(slot + 8).load(Ordering::Acquire);
        let arrived = Arrived {
            data: slot + SLOT_HEADER,
            bytes: (length & LENGTH_MASK) as usize,
            desc: self.local(slot + 16).load(Ordering::Acquire),
        };
        let call = length >> (64 - CALL_BITS);
        if call != stamp.call {
            return Err(out_of_step(format!(
                "member {j}'s next eager message ({}) belongs to its call {call}, not to this \
                 PE's call {} ({}): the members' earlier calls did not match",
                Descriptor::describe(arrived.desc),
                stamp.call,
                Descriptor::describe(stamp.desc)
            )));
        }
        Ok(arrived)
    }

    /// Checks that no member's next message has arrived yet, for a member that receives
    /// none in this call (a broadcast's root): no member can be ahead of it, since every
    /// other member must first receive its message (from it, or by node through its
    /// leader), so a message already there is one a member sent in a call that does not
    /// match (or left from an earlier mismatched one).
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] when one is there; the team becomes unusable.
    pub(crate) fn eager_none_pending(&self, op: &Collective<'_>, stamp: Stamp) -> Result<()> {
        let layout = self.inner.layout;
        let me = self.my_pe();
        for j in (0..self.n_pes()).filter(|&j| j != me) {
            let m = op.recvd(j);
            let slot = layout.slot(j, m % 2);
            if self.local(slot).load(Ordering::Acquire) > m {
                let theirs = self.local(slot + 16).load(Ordering::Acquire);
                return Err(out_of_step(format!(
                    "member {j} sent this PE an eager message ({}) while this PE calls {}, \
                     which sends but receives nothing",
                    Descriptor::describe(theirs),
                    Descriptor::describe(stamp.desc)
                )));
            }
        }
        Ok(())
    }

    /// Marks the next message from member `j` consumed, taking the credit it carries. With
    /// `reply` false (this member sends nothing back to `j` in this collective), also writes
    /// `j` its credit.
    pub(crate) fn eager_done(&self, op: &mut Collective<'_>, j: usize, reply: bool) -> Result<()> {
        let m = op.recvd(j);
        let slot = self.inner.layout.slot(j, m % 2);
        let carried = self.local(slot + 24).load(Ordering::Acquire);
        op.set_credit(j, op.credit(j).max(carried));
        let consumed = m + 1;
        op.set_recvd(j, consumed);
        if reply {
            return Ok(());
        }
        self.signal(j, self.inner.layout.credit(self.my_pe()), consumed)
    }

    /// Where member `j`'s next message of the call `stamp` numbers lies, once it has come; a
    /// descriptor other than the call's rejects the call and sets `forward` to [`DISAGREED`].
    pub(crate) async fn eager_heard(
        &self,
        state: &mut Collective<'_>,
        j: usize,
        stamp: Stamp,
        forward: &mut u64,
    ) -> Result<usize> {
        let got = self.eager_receive(state, j, stamp).await?;
        if let Err(e) = agree(stamp.desc, got.desc, j) {
            state.reject(e);
            *forward = DISAGREED;
        }
        Ok(got.data)
    }

    /// For a node's leader in a collective by node: where each other leader's next message
    /// of the call `stamp` numbers lies, indexed by node (0 for this leader's own), heard in
    /// node order (see [`Team::eager_heard`] for `forward`).
    pub(crate) async fn eager_hear_leaders(
        &self,
        state: &mut Collective<'_>,
        stamp: Stamp,
        forward: &mut u64,
    ) -> Result<Vec<usize>> {
        let (me, leaders) = (self.my_pe(), self.inner.plan.nodes.leaders());
        let mut heard = vec![0; leaders.len()];
        for (g, &l) in leaders.iter().enumerate().filter(|&(_, &l)| l != me) {
            heard[g] = self.eager_heard(state, l, stamp, forward).await?;
        }
        Ok(heard)
    }

    /// Member `j`'s next message of the call `stamp` numbers, once it has come.
    pub(crate) async fn eager_receive(
        &self,
        state: &Collective<'_>,
        j: usize,
        stamp: Stamp,
    ) -> Result<Arrived> {
        if !self.eager_arrived(state, Senders::One(j)) {
            self.eager_wait(state, Senders::One(j)).await?;
        }
        self.eager_peek(state, j, stamp)
    }

    /// The part, in a collective by node, of a member that is not its node's leader: sends
    /// `source` (`bytes` bytes) to `leader`, then takes the leader's answer into the whole
    /// of `dest`, or rejects the call when the leader reports another descriptor.
    pub(crate) async fn eager_through_leader<T: Pod>(
        &self,
        state: &mut Collective<'_>,
        leader: usize,
        (dest, source): (SymSlice<'_, T>, SymSlice<'_, T>),
        bytes: usize,
        stamp: Stamp,
    ) -> Result<()> {
        self.eager_send_when_free(state, leader, Payload::Sym(source), bytes, stamp)
            .await?;
        let got = self.eager_receive(state, leader, stamp).await?;
        match agree(stamp.desc, got.desc, leader) {
            Ok(()) => self.copy_local(dest, self.view::<T>(got.data, dest.len()))?,
            Err(e) => state.reject(e),
        }
        self.eager_done(state, leader, true)
    }

    /// Sends `payload` to member `to` once its slot is free.
    pub(crate) async fn eager_send_when_free<T: Pod>(
        &self,
        state: &mut Collective<'_>,
        to: usize,
        payload: Payload<'_, T>,
        bytes: usize,
        stamp: Stamp,
    ) -> Result<()> {
        if !self.eager_slot_free(state, to) {
            self.eager_slot_wait(state, to).await?;
        }
        self.eager_send(state, to, payload, bytes, stamp)
    }
}

/// The descriptor a member sends on when it has seen members disagree.
pub(crate) const DISAGREED: u64 = u64::MAX;

/// Checks a received descriptor against this PE's own.
pub(crate) fn agree(mine: u64, theirs: u64, from_pe: usize) -> Result<()> {
    match mine == theirs {
        true => Ok(()),
        false => Err(disagreement(mine, theirs, from_pe)),
    }
}

/// The error of a member whose descriptor `mine` differs from `theirs`, received from member
/// `from_pe` (or that member's report, [`DISAGREED`], that members differ).
fn disagreement(mine: u64, theirs: u64, from_pe: usize) -> Error {
    let detail = if theirs == DISAGREED {
        format!("member {from_pe} reports that members called different collectives or sizes")
    } else {
        format!(
            "member {from_pe} called {}, this PE called {}",
            Descriptor::describe(theirs),
            Descriptor::describe(mine)
        )
    };
    Error::CollectiveMismatch {
        operation: "team collective",
        detail,
    }
}
