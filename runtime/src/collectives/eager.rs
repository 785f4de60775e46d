//! Eager messages: small payloads copied straight into a receiver's scratch slot, so that a
//! sender never waits for its receiver to arrive.
//!
//! Member `s` sends its messages to member `r` through two slots on `r` reserved for `s`,
//! alternately. Message `m` (counted per pair, by both sides alike) goes into slot `m mod 2`,
//! its header set to `m + 1` once the data is in place. After copying a message out, `r`
//! sets its credit line on `s` to the number of messages it has consumed from `s`; before
//! writing message `m ≥ 2`, `s` waits until that credit reaches `m − 1`, i.e. until message
//! `m − 2` (the slot's last occupant) has been read. The credit has almost always arrived by
//! then, so the wait costs nothing.

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use super::{put_from, Descriptor};
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::team::region::{Layout, LINE};
use crate::team::{Op, Team};

/// What an eager message carries.
pub(crate) enum Payload<'a, T> {
    /// Elements of this PE's symmetric memory.
    Sym(SymSlice<'a, T>),
    /// Elements of a local buffer.
    Local(&'a [T]),
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

impl Team {
    /// Sends `payload` to member `to` as collective `op`'s next eager message, its header
    /// announcing `bytes` bytes (the payload's size, or more when the receiver is to read
    /// the rest from the sender's buffer itself).
    pub(crate) async fn eager_send<T: Pod>(
        &self,
        op: &mut Op<'_>,
        to: usize,
        payload: Payload<'_, T>,
        bytes: usize,
        desc: u64,
    ) -> Result<()> {
        let layout = self.inner.layout;
        let m = op.state.sent[to];
        if m >= 2 {
            self.wait_word("eager credit", layout.credit(to), m - 1)
                .await?;
        }
        let slot = layout.slot(self.my_pe(), m % 2);
        let pe = self.pe(to);
        match payload {
            Payload::Sym(src) => {
                put_from(self.dp(), self.view::<T>(slot + LINE, src.len()), src, pe)?;
            }
            Payload::Local(src) => {
                self.dp()
                    .put(self.view::<T>(slot + LINE, src.len()), src, pe)
                    .await?;
            }
        }
        self.put_words(to, slot + 8, &[bytes as u64, desc]).await?;
        self.signal(to, slot, m + 1).await?;
        op.state.sent[to] = m + 1;
        Ok(())
    }

    /// Waits until the next message of every member of `from` has arrived.
    pub(crate) async fn eager_wait(&self, op: &Op<'_>, from: &[usize]) -> Result<()> {
        let layout = self.inner.layout;
        let heads: Vec<_> = from
            .iter()
            .map(|&j| {
                let m = op.state.recvd[j];
                (self.local(layout.slot(j, m % 2)), m + 1)
            })
            .collect();
        if heads.iter().all(|(w, v)| w.load(Ordering::Acquire) >= *v) {
            return Ok(());
        }
        let span = layout.slot(0, 0)..layout.bytes;
        self.wait_for("eager receive", span, move || {
            heads.iter().all(|(w, v)| w.load(Ordering::Acquire) >= *v)
        })
        .await
    }

    /// The next message from member `j`, which [`Team::eager_wait`] saw arrive.
    pub(crate) fn eager_peek(&self, op: &Op<'_>, j: usize) -> Arrived {
        let slot = self.inner.layout.slot(j, op.state.recvd[j] % 2);
        Arrived {
            data: slot + LINE,
            bytes: self.local(slot + 8).load(Ordering::Acquire) as usize,
            desc: self.local(slot + 16).load(Ordering::Acquire),
        }
    }

    /// Marks the next message from member `j` consumed and gives `j` its credit.
    pub(crate) async fn eager_done(&self, op: &mut Op<'_>, j: usize) -> Result<()> {
        op.state.recvd[j] += 1;
        let credit = op.state.recvd[j];
        self.signal(j, Layout::credit(&self.inner.layout, self.my_pe()), credit)
            .await
    }
}

/// The descriptor a member sends on when it has seen members disagree.
pub(crate) const DISAGREED: u64 = u64::MAX;

/// Checks a received descriptor against this PE's own.
pub(crate) fn agree(mine: u64, theirs: u64, from_pe: usize) -> Result<()> {
    if mine == theirs {
        return Ok(());
    }
    let detail = if theirs == DISAGREED {
        format!("member {from_pe} reports that members called different collectives or sizes")
    } else {
        format!(
            "member {from_pe} called {}, this PE called {}",
            Descriptor::describe(theirs),
            Descriptor::describe(mine)
        )
    };
    Err(Error::CollectiveMismatch {
        operation: "team collective",
        detail,
    })
}
