//! A team's control region: the symmetric bytes (same offset on every member, taken from the
//! team pool) through which its collectives synchronize, and the word-level operations on
//! them: remote sets, local reads, and waits on sets of words.
//!
//! Layout, in 64-byte lines (one writer per line, so writers never share a cache line, but
//! for the mark and claim words of a pairwise `alltoall`, which share their sync and
//! arrival lines):
//!
//! | lines | content | written by |
//! |---|---|---|
//! | 1 | `count`: this member's element count of a `collect` | the member itself |
//! | n (n ≤ 4) or ⌈log₂ n⌉ | sync line of member `j` (flat syncs) or of round `r` (dissemination): epoch, then two (lowest, highest) descriptor pairs (by epoch parity), each followed by a spare word; last, the mark word of this member's pair with `j` in a pairwise `alltoall` (`Layout::pair_word`) | member `j`, or member `me − 2^r` |
//! | n | `sig[j]`: signal from member `j` (value, descriptor) | member `j` |
//! | n | `ack[j]`: acknowledgement from member `j` (value, verdict); in a broadcast, first its entry (value, then its descriptor in the fourth word, clear of the verdict, and the verdict's spare word, that its parent may still have to read from the last call) where `j` is a child on another node or a node's head | member `j` |
//! | n | `credit[j]`: eager messages of this member that `j` has consumed | member `j` |
//! | 2n slots | eager slot `(j, parity)`: a header (message number + 1, length with the call's number in its top 24 bits, descriptor, credit), then up to `eager_bytes` of data, in the same lines, and a word to spare (a remote message's flag value) | member `j` |
//! | n | `up[j]`: member `j`'s arrival at its node's leader in a sync by node (epoch, lowest and highest descriptor); last, on a team of one node, the claim word of this member's pair with a higher-numbered `j` in a pairwise `alltoall` (`Layout::claim_word`) | member `j`; the claim word by both members of the pair |
//! | 1 | `down`: the release of this member's node leader in a sync by node (epoch, lowest and highest descriptor) | the leader |
//! | 1 | records of this member's last calls on the team (`calls.rs`) | the member itself |
//!
//! Signal and acknowledgement values are [`value`]`(seq, step)`: they only grow, so a waiter
//! compares with `>=` and no word is ever reset.
//!
//! Every line's first word is the one its writer publishes, and the word after the words a
//! writer stores with it (the last word of the line, where it stores none) is spare: a
//! writer on another node sends the words and the new value in one write, and the owner's
//! transport publishes the value into the first word once the write has landed
//! (`crate::post`). The credit and eager lines exist only in
//! teams small enough for the eager (small-message) algorithms.

use std::future::IntoFuture;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::segment::HEADER_SIZE;
use crate::wait::{StallCheck, Wait};

use super::calls::{Watch, RECORD_BYTES, RING};
use super::{Team, TeamConfig};

/// Bytes of a line.
pub(crate) const LINE: usize = 64;
/// Bytes of an eager slot's header; the data follows it at once, so that a small message
/// and its header share a line.
pub(crate) const SLOT_HEADER: usize = 32;
/// Bits of a signal value that count steps within one collective.
const STEP_BITS: u32 = 20;
/// The largest team (steps of a ring go up to n).
pub const MAX_TEAM_PES: usize = 1 << STEP_BITS;

/// The signal value of step `step` of collective number `seq` of a team.
#[inline]
pub(crate) fn value(seq: u64, step: usize) -> u64 {
    (seq << STEP_BITS) | step as u64
}

/// Number of dissemination rounds for `n` members.
pub(crate) fn rounds(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

/// Teams (or groups of node leaders) of up to this many members sync flat (every member
/// tells every other) rather than by dissemination: one wait instead of ⌈log₂ n⌉ in a row,
/// for at most three writes.
pub(crate) const FLAT_SYNC_MAX: usize = 4;

/// Number of sync lines of a team of `n` members: enough for a flat or dissemination sync
/// among all of them or among any of them (node leaders).
fn sync_lines(n: usize) -> usize {
    if n <= FLAT_SYNC_MAX {
        n
    } else {
        rounds(n).max(FLAT_SYNC_MAX)
    }
}

/// Offsets (from the region's start) of a team's control words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    n: usize,
    calls: usize,
    sync: usize,
    sig: usize,
    ack: usize,
    credit: usize,
    slots: usize,
    up: usize,
    down: usize,
    /// Bytes from one eager slot to the next.
    slot_stride: usize,
    /// Bytes one eager slot holds after its header; 0 when the team has no eager slots.
    pub eager_bytes: usize,
    /// Bytes of the whole region.
    pub bytes: usize,
}

impl Layout {
    /// The layout of a team of `n` members configured with `config`.
    pub fn new(n: usize, config: &TeamConfig) -> Layout {
        let sync = LINE;
        let sig = sync + sync_lines(n) * LINE;
        let ack = sig + n * LINE;
        let credit = ack + n * LINE;
        let eager = config.eager_bytes > 0 && n <= config.flat_max_pes && n > 1;
        // A word past the largest payload: a message to another node carries its flag's
        // value there (`DataPlane::post_message`).
        let slot_stride = if eager {
            (SLOT_HEADER + config.eager_bytes + 8).next_multiple_of(LINE)
        } else {
            0
        };
        let eager_bytes = slot_stride.saturating_sub(SLOT_HEADER + 8);
        let slots = credit + if eager { n * LINE } else { 0 };
        let up = slots + 2 * n * slot_stride;
        let down = up + n * LINE;
        // Last, so that the lines the collectives exchange keep their places.
        let calls = down + LINE;
        Layout {
            n,
            calls,
            sync,
            sig,
            ack,
            credit,
            slots,
            up,
            down,
            slot_stride,
            eager_bytes,
            bytes: calls + LINE,
        }
    }

    /// The `count` word.
    pub fn count(&self) -> usize {
        0
    }

    /// The record of call `number` (a slot of the ring of the last [`RING`] calls).
    pub fn call(&self, number: u64) -> usize {
        self.calls + (number % RING as u64) as usize * RECORD_BYTES
    }

    /// The sync line of member `r` (flat syncs) or of round `r` (dissemination).
    pub fn sync(&self, r: usize) -> usize {
        self.sync + r * LINE
    }

    /// The mark word of this member's pair with member `j` in a pairwise `alltoall`
    /// (`pairwise.rs`): the last word of `j`'s sync line, which no sync writes; `j` marks
    /// the pair done there when this member claimed it first. Written by atomic operations
    /// only, never posted: a post to another node would put its value in the spare word
    /// after it, past the line.
    pub fn pair_word(&self, j: usize) -> usize {
        self.sync(j) + LINE - 8
    }

    /// The claim word of this member's pair with the higher-numbered member `j` in a
    /// pairwise `alltoall` (`pairwise.rs`), which both members raise: the last word of
    /// `j`'s arrival line, which only syncs by node write, never run on a team of one node
    /// (the only teams that run the pairwise form). Outside the sync lines, so that a claim
    /// wakes no member waiting for its marks.
    pub fn claim_word(&self, j: usize) -> usize {
        self.up(j) + LINE - 8
    }

    /// The signal line from member `j`.
    pub fn sig(&self, j: usize) -> usize {
        self.sig + j * LINE
    }

    /// The acknowledgement line from member `j`.
    pub fn ack(&self, j: usize) -> usize {
        self.ack + j * LINE
    }

    /// The credit word from member `j`.
    pub fn credit(&self, j: usize) -> usize {
        self.credit + j * LINE
    }

    /// The header of eager slot `(j, parity)`; its data follows it.
    pub fn slot(&self, j: usize, parity: u64) -> usize {
        self.slots + (2 * j + parity as usize) * self.slot_stride
    }

    /// The arrival line from member `j` (at its node's leader).
    pub fn up(&self, j: usize) -> usize {
        self.up + j * LINE
    }

    /// The release line from this member's node leader.
    pub fn down(&self) -> usize {
        self.down
    }

    /// The bytes of the lines of `what(0) .. what(n)`.
    pub fn span(&self, what: fn(&Layout, usize) -> usize) -> Range<usize> {
        what(self, 0)..what(self, self.n.saturating_sub(1)) + LINE
    }
}

/// Where member `j`'s word of a kind lies in a region (`Layout::sig`, `Layout::ack`, …).
type WordAt = fn(&Layout, usize) -> usize;

impl Team {
    /// The data plane of this team's PE.
    #[inline]
    pub(crate) fn dp(&self) -> &DataPlane {
        &self.inner.home.dp
    }

    /// A view of `len` elements of `T` at `offset` of the region.
    #[inline]
    pub(crate) fn view<T: bytemuck::Pod>(&self, offset: usize, len: usize) -> SymSlice<'_, T> {
        let size = std::mem::size_of::<T>();
        self.inner
            .region
            .slice(offset..offset + len * size)
            .cast::<T>()
    }

    /// This PE's own word at `offset` of the region.
    #[inline]
    pub(crate) fn local(&self, offset: usize) -> &AtomicU64 {
        self.dp()
            .own_segment()
            .mapping()
            .atomic(HEADER_SIZE + self.inner.base + offset)
    }

    /// Posts to member `to`: stores `words` at region offset `words_at` there, then sets its
    /// word at `offset` to `v` with one atomic swap, which publishes the stores (a reader
    /// that sees `v` sees them), and wakes a sleeper watching any of it. Through the data
    /// plane's posts (`crate::post`), so on any route.
    pub(crate) fn post(
        &self,
        to: usize,
        offset: usize,
        v: u64,
        words_at: usize,
        words: &[u64],
    ) -> Result<()> {
        self.dp().post(
            self.pe(to),
            self.view::<u64>(words_at, words.len()),
            words,
            self.view::<u64>(offset, 1),
            v,
        )
    }

    /// Sets the word at `offset` on member `to` to `v`, waking a sleeper there.
    pub(crate) fn signal(&self, to: usize, offset: usize, v: u64) -> Result<()> {
        self.post(to, offset, v, offset, &[])
    }

    /// Waits until `ready()` holds; only writes to `watched` (region offsets) can make it
    /// hold. While it sleeps it checks the other members' call records, and fails when one
    /// gave up or cannot meet this call (`calls.rs`).
    pub(crate) async fn wait_for(
        &self,
        what: &'static str,
        watched: Range<usize>,
        ready: impl FnMut() -> bool + Unpin + Send,
    ) -> Result<()> {
        let mut watch = Watch::default();
        let mut stalled = || self.check_calls(&mut watch);
        self.wait_in_region(what, watched, ready, &mut stalled)
            .await
    }

    /// Waits, watching `watched`, until `ready` holds, for work that member `j` alone owes
    /// this PE in its current call: ends early when the job fails or when `j` will never
    /// finish the call (it gave it up, refused it, or finalized without it), whatever the
    /// other members do (the call may already have failed for one of them).
    pub(crate) async fn wait_for_member(
        &self,
        j: usize,
        what: &'static str,
        watched: Range<usize>,
        ready: impl FnMut() -> bool + Unpin + Send,
    ) -> Result<()> {
        let mut stalled = || self.check_member(j);
        self.wait_in_region(what, watched, ready, &mut stalled)
            .await
    }

    /// The wait, watching `watched` (offsets in the region), until `ready` holds; `stalled`
    /// judges the other members while it sleeps. Built here and awaited by the caller, with
    /// no future of its own around it: one more layer made the 4-byte broadcast at 2 PEs
    /// 1.3x slower (`scripts/compare-revisions`).
    fn wait_in_region<'a>(
        &'a self,
        what: &'static str,
        watched: Range<usize>,
        mut ready: impl FnMut() -> bool + Unpin + Send + 'a,
        stalled: StallCheck<'a>,
    ) -> impl IntoFuture<Output = Result<()>, IntoFuture: Send> + 'a {
        let at = HEADER_SIZE + self.inner.base;
        Wait::new(
            self.dp(),
            what,
            at + watched.start..at + watched.end,
            Ok(move || ready().then_some(())),
        )
        .on_stall(stalled)
    }

    /// Waits until this PE's word at `offset` is at least `v`.
    pub(crate) async fn wait_word(&self, what: &'static str, offset: usize, v: u64) -> Result<()> {
        let word = self.local(offset);
        if word.load(Ordering::Acquire) >= v {
            return Ok(());
        }
        self.wait_for(what, offset..offset + 8, move || {
            word.load(Ordering::Acquire) >= v
        })
        .await
    }

    /// Waits until this PE's word at `offset(j)` is at least `v` for some `j` of `from`
    /// (at once where `from` is empty).
    pub(crate) async fn wait_any_word(
        &self,
        what: &'static str,
        offset: fn(&Layout, usize) -> usize,
        from: &[usize],
        v: u64,
    ) -> Result<()> {
        self.wait_on_words(what, (offset, from), v, false).await
    }

    /// Waits until this PE's word at `offset(j)` is at least `v` for every `j` of `from`.
    pub(crate) async fn wait_words(
        &self,
        what: &'static str,
        offset: fn(&Layout, usize) -> usize,
        from: &[usize],
        v: u64,
    ) -> Result<()> {
        self.wait_on_words(what, (offset, from), v, true).await
    }

    /// Waits until this PE's word at `offset(j)` is at least `v` for every `j` of `from`
    /// (`every`) or for some; at once where `from` is empty.
    async fn wait_on_words(
        &self,
        what: &'static str,
        words: (WordAt, &[usize]),
        v: u64,
        every: bool,
    ) -> Result<()> {
        let (offset, from) = words;
        let words = self.words_at(offset, from);
        let met = move || match every {
            true => words.iter().all(|w| w.load(Ordering::Acquire) >= v),
            false => words.iter().any(|w| w.load(Ordering::Acquire) >= v),
        };
        if from.is_empty() || met() {
            return Ok(());
        }
        self.wait_for(what, self.inner.layout.span(offset), met)
            .await
    }

    /// This PE's words at `offset(j)` for each `j` of `from`.
    fn words_at(&self, offset: fn(&Layout, usize) -> usize, from: &[usize]) -> Vec<&AtomicU64> {
        let layout = self.inner.layout;
        from.iter()
            .map(|&j| self.local(offset(&layout, j)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_fit_their_lines() {
        let config = TeamConfig::default();
        let l = Layout::new(5, &config);
        assert_eq!(rounds(5), 3);
        assert_eq!(l.sig(0), LINE + 4 * LINE, "room for 4 leaders syncing flat");
        assert_eq!(l.call(RING as u64 - 1) + RECORD_BYTES, l.bytes);
        assert_eq!(l.call(RING as u64), l.call(0));
        assert_eq!(
            Layout::new(3, &config).sig(0),
            LINE + 3 * LINE,
            "flat syncs"
        );
        assert_eq!(l.ack(0), l.sig(4) + LINE);
        assert_eq!(l.slot(4, 1) + SLOT_HEADER + l.eager_bytes + 8, l.up(0));
        assert_eq!(l.up(4) + LINE, l.down());
        assert_eq!(l.down() + LINE + LINE, l.bytes);
        assert_eq!(l.eager_bytes, 4096 + LINE - SLOT_HEADER - 8);
        assert_eq!(l.span(Layout::sig), l.sig(0)..l.sig(4) + LINE);
        let big = Layout::new(100, &config);
        assert_eq!(big.eager_bytes, 0, "large teams have no eager slots");
        assert_eq!(big.up(0), big.credit(0));
        assert_eq!(big.bytes, big.down() + 2 * LINE);
        assert_eq!(Layout::new(64, &config).sig(0), LINE + 6 * LINE);
        assert_eq!(rounds(1), 0);
        assert!(value(1, 0) > value(0, MAX_TEAM_PES - 1));
    }
}
