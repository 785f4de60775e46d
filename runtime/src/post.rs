//! Posts: how teams and collectives hand control words and small messages to a member, on
//! any route. A post writes its words (and a message its payload) at the member, then sets
//! one word with a SeqCst swap that publishes them (a reader that sees the new value sees the
//! rest) and wakes a sleeper watching any of it.
//!
//! To a mapped member that is a few stores, one swap and one wake check, inline; to one on
//! another node it is one write whose flag the target publishes itself
//! ([`RemoteOp::PutPublished`]: no round trip between data and flag), started at once and
//! complete at the next `quiet` (the member learns of it from the flag; the sender does not
//! wait). The team code never touches a member's memory itself.

use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::route::{RemoteOp, Route};
use crate::segment::Segment;
use crate::shared_memory::Caching;

/// Bytes of a line: a post's signal starts one, and its words and value stay in it.
const LINE: usize = 64;
/// Where in its line a post without words has its value land on another node: the last word.
const SPARE_WORD: usize = LINE - 8;

/// Where a message's payload comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Payload<'a, T> {
    /// Elements of this PE's symmetric memory.
    Sym(SymSlice<'a, T>),
    /// Elements of a local buffer.
    Local(&'a [T]),
}

/// Swaps `v` into the word at mapping offset `at` of `target` and wakes a sleeper watching
/// mapping bytes `[lo, hi)`.
#[inline]
fn publish(target: &Segment, at: usize, v: u64, lo: usize, hi: usize) {
    target
        .mapping()
        .atomic::<AtomicU64>(at)
        .swap(v, Ordering::SeqCst);
    target.wake_watchers(lo, hi);
}

impl DataPlane {
    /// Writes `words` at `words_at` on PE `pe` (none when empty), then sets `signal` there
    /// to `v`, publishing them. `signal` starts a 64-byte line that holds the words, and
    /// the word after them (or, without words, the line's last word) is spare: a PE on
    /// another node gets the words and `v` in one write, which it publishes itself.
    pub(crate) fn post(
        &self,
        pe: usize,
        words_at: SymSlice<'_, u64>,
        words: &[u64],
        signal: SymSlice<'_, u64>,
        v: u64,
    ) -> Result<()> {
        let (route, (at, w)) = self.validate(pe, || {
            let at = self.locate_atomic(signal)?;
            if words.is_empty() {
                return Ok((at, None));
            }
            let w = self.locate(words_at, words.len(), "team control words")?;
            Ok((at, Some(w)))
        })?;
        let bytes = 8 + 8 * words.len();
        match (route, w) {
            (Route::Mapped(target), w) => self.mapped(Op::Signal, pe, bytes, || {
                let (mut lo, mut hi) = (at, at + 8);
                if let Some(w) = w {
                    target.mapping().write(w, bytemuck::cast_slice(words));
                    (lo, hi) = (lo.min(w), hi.max(w + 8 * words.len()));
                }
                publish(target, at, v, lo, hi);
            }),
            (Route::Remote, w) => {
                // One write, published into the signal: the words, then `v` in the word after
                // them (or in the line's last word when there are none), which the line keeps
                // spare for it.
                let (from, op) = match w {
                    Some(w) => (w, Op::PutSignal),
                    None => (at + SPARE_WORD, Op::Signal),
                };
                debug_assert!(
                    at % LINE == 0 && at < from && from + 8 * words.len() < at + LINE,
                    "a post's signal starts its line and its words and value follow in it"
                );
                let put = || {
                    let mut data = Vec::with_capacity(8 * words.len() + 8);
                    data.extend_from_slice(bytemuck::cast_slice(words));
                    data.extend_from_slice(&v.to_ne_bytes());
                    RemoteOp::PutPublished(data)
                };
                let started = self.remote(op, pe, bytes, from, put);
                self.defer(started);
            }
        }
        Ok(())
    }

    /// Sends a message to PE `pe`: `words` into `header[1..4]`, the payload into `data`
    /// (which must follow the header), then `header[0]` set to `v`, publishing them.
    pub(crate) fn post_message<T: Pod>(
        &self,
        pe: usize,
        header: SymSlice<'_, u64>,
        words: [u64; 3],
        payload: Payload<'_, T>,
        data: SymSlice<'_, T>,
        v: u64,
    ) -> Result<()> {
        let (route, (at, from, to)) = self.validate(pe, || {
            let at = self.locate(header, 4, "eager header")?;
            let from = match payload {
                Payload::Sym(src) => Ok(self.locate(src, src.len(), "eager source")?),
                Payload::Local(src) => Err(src),
            };
            let len = data.len();
            Ok((at, from, self.locate(data, len, "eager slot")?))
        })?;
        let moved = data.len() * std::mem::size_of::<T>();
        match route {
            Route::Mapped(target) => self.mapped(Op::PutSignal, pe, moved + 32, || {
                match from {
                    Ok(src) => target.mapping().copy_from(
                        to,
                        self.own_segment().mapping(),
                        src,
                        moved,
                        Caching::Keep,
                    ),
                    Err(src) => target.mapping().write(to, bytemuck::cast_slice(src)),
                }
                target.mapping().write(at + 8, bytemuck::cast_slice(&words));
                publish(target, at, v, at, to + moved);
            }),
            Route::Remote => {
                // The header's last three words and the data lie end to end (checked by the
                // slot layout), and the slot keeps a word free after the largest payload:
                // one write of both and the first word's value, which the target publishes.
                debug_assert_eq!(to, at + 32, "the payload follows its header");
                let put = || {
                    let mut message = Vec::with_capacity(24 + moved + 8);
                    message.extend_from_slice(bytemuck::cast_slice(&words));
                    match from {
                        Ok(src) => {
                            message.resize(24 + moved, 0);
                            self.own_segment().mapping().read(src, &mut message[24..]);
                        }
                        Err(src) => message.extend_from_slice(bytemuck::cast_slice(src)),
                    }
                    message.extend_from_slice(&v.to_ne_bytes());
                    RemoteOp::PutPublished(message)
                };
                let started = self.remote(Op::PutSignal, pe, moved + 32, at + 8, put);
                self.defer(started);
            }
        }
        Ok(())
    }
}
