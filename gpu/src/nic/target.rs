//! The target side of the agent and its service: the thread that waits, with no core
//! spinning once idle, for any request or reply signal of this PE to move, performs the
//! requests that landed on this PE's [`HeapMemory`](super::HeapMemory) in ring order (key,
//! bounds and alignment checked first), writes their replies into each initiator's reply
//! ring, and hands the replies that landed here to this PE's waiting requests.

use std::sync::atomic::Ordering;

use ferroshmem_runtime::segment::HEADER_SIZE;
use ferroshmem_runtime::{Error, Result, Wait};

use super::request::Status;
use super::wire::{action, encode_reply, record_blocks, Action, Header, BLOCK};
use super::Shared;

/// A run of reply records for one initiator, contiguous in its reply ring.
struct Replies {
    start: Option<u64>,
    end: u64,
    bytes: Vec<u8>,
}

/// The bytes a request moves (written or read) from which its reply goes at once.
const EARLY_REPLY: usize = 16 * 1024;

/// What a request did: its status, an atomic's old value, a read's bytes.
type Outcome = (Status, u64, Vec<u8>);

/// How far the service has read one initiator's request ring.
#[derive(Debug, Clone, Default)]
struct Cursor {
    /// The running block of the next record.
    at: u64,
    /// The blocks written there that were read (a skip record is one block written, however
    /// many it skips): what the ring's request signal counts.
    taken: u64,
    /// The request signal when the ring was last served. Over the fabric it may stop inside
    /// a record for a moment: two threads reading the endpoint can add the counts of two
    /// writes out of order, and a count never runs ahead of the bytes landed.
    seen: u64,
}

impl Shared {
    /// Serves the service's rings until the agent stops or the job fails; then fails every
    /// request of this PE still waiting. A failure of its own (its rings broken) fails the
    /// PE's job.
    pub(crate) async fn serve(&self) {
        let error = match self.serve_until_stopped().await {
            Ok(()) => Error::Shutdown,
            Err(e) => e,
        };
        if !matches!(error, Error::Shutdown | Error::PeerLost { .. }) {
            // Its rings are broken (a bug, or memory overwritten): peers' requests would wait
            // for it forever, so this PE's job fails, as a NIC's queue pair goes to error.
            tracing::error!(pe = self.me, %error, "the NIC agent's service failed");
            self.dp.health().fail(error.clone());
        }
        for peer in 0..self.layout.n {
            self.link(peer).close(error.clone());
        }
    }

    /// One wait for the service's whole life, whose check serves what moved: so the service
    /// keeps the drive of the fabric's completion queue once it took it (the fabric's
    /// progress module says how), and a peer's write wakes this thread directly, with no
    /// hop through another thread that read the queue.
    async fn serve_until_stopped(&self) -> Result<()> {
        let n = self.layout.n;
        let mut cursors = vec![Cursor::default(); n];
        let mut replies_seen = vec![0u64; n];
        let mut scratch = Vec::new();
        let start = HEADER_SIZE + self.rings.offset();
        let mut failed = None;
        let serve = || {
            if self.stop.load(Ordering::Acquire) {
                return Some(());
            }
            match self.serve_moved(&mut cursors, &mut replies_seen, &mut scratch) {
                Ok(()) => None,
                Err(e) => {
                    failed = Some(e);
                    Some(())
                }
            }
        };
        Wait::new(
            &self.dp,
            "the NIC agent's service",
            start..start + 16 * n,
            Ok(serve),
        )
        .await?;
        failed.map_or(Ok(()), Err)
    }

    /// Serves the requests and takes the replies that landed since the last look; `scratch`
    /// holds a payload while it is performed (kept, so that a large one is not allocated
    /// afresh each time).
    fn serve_moved(
        &self,
        cursors: &mut [Cursor],
        replies_seen: &mut [u64],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        for (i, cursor) in cursors.iter_mut().enumerate() {
            let landed = self.signal(self.layout.request_signal(i))?;
            if landed != cursor.seen {
                self.serve_ring(i, cursor, landed, scratch)?;
                cursor.seen = landed;
            }
        }
        for (t, seen) in replies_seen.iter_mut().enumerate() {
            let landed = self.signal(self.layout.reply_signal(t))?;
            if landed != *seen {
                self.take_replies(t, landed)?;
                *seen = landed;
            }
        }
        Ok(())
    }

    /// A signal word of this PE's agent buffer.
    fn signal(&self, word: usize) -> Result<u64> {
        self.dp.signal_fetch(self.rings.at(word))
    }

    /// Performs the requests from initiator `i` from `cursor` up to `landed` blocks written
    /// into its ring here, in order (a record not yet landed whole waits for its rest), and
    /// sends their replies: together, but at once after a large write or read, so that its
    /// credit goes back while the next ones are performed.
    fn serve_ring(
        &self,
        i: usize,
        cursor: &mut Cursor,
        landed: u64,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let mut replies = Replies {
            start: None,
            end: 0,
            bytes: Vec::new(),
        };
        let mut head = [0; BLOCK];
        while cursor.taken < landed {
            let at = self.layout.request_byte(i, cursor.at);
            self.read_own(at, &mut head)?;
            let header = Header::decode(&head);
            if header.is_skip() {
                cursor.at = self.layout.next_turn(cursor.at);
                cursor.taken += 1;
                continue;
            }
            let blocks = header.blocks() as u64;
            if header.payload() > self.config.max_chunk.max(BLOCK)
                || self.layout.skip(cursor.at, blocks as usize) > 0
            {
                return Err(Error::InvalidArgument(format!(
                    "PE {i} wrote a request record of {blocks} blocks at {}, past its ring's end",
                    cursor.at
                )));
            }
            if cursor.taken + blocks > landed {
                break;
            }
            if scratch.len() < header.payload_read_first() {
                scratch.resize(header.payload_read_first(), 0);
            }
            let payload = &mut scratch[..header.payload_read_first()];
            self.read_own(at + BLOCK, payload)?;
            tracing::trace!(
                pe = self.me,
                from = i,
                seq = header.seq,
                "NIC agent request performing"
            );
            let outcome = self.perform(&header, payload, at + BLOCK);
            tracing::trace!(pe = self.me, from = i, seq = header.seq, status = ?outcome.0, "NIC agent request performed");
            cursor.at += blocks;
            cursor.taken += blocks;
            let turns = header.reply_at % self.layout.blocks as u64 == 0;
            if replies.start.is_some() && (header.reply_at != replies.end || turns) {
                self.send_replies(i, &mut replies)?;
            }
            replies.start.get_or_insert(header.reply_at);
            let first = replies.bytes.len();
            encode_reply(
                header.seq,
                outcome.0,
                outcome.1,
                &outcome.2,
                &mut replies.bytes,
            );
            // The place the initiator reserved, whatever the outcome brought back.
            let reserved = record_blocks(header.reply_len());
            replies.bytes.resize(first + reserved * BLOCK, 0);
            replies.end = header.reply_at + reserved as u64;
            if header.payload() + header.reply_len() >= EARLY_REPLY {
                self.send_replies(i, &mut replies)?;
            }
        }
        self.send_replies(i, &mut replies)
    }

    /// Writes a run of replies into initiator `i`'s reply ring for this PE, counted there in
    /// this PE's reply signal, once the writes they answer are visible (deferred writes are
    /// flushed first).
    fn send_replies(&self, i: usize, replies: &mut Replies) -> Result<()> {
        let Some(start) = replies.start.take() else {
            return Ok(());
        };
        self.memory.flush()?;
        let _runtime = self.runtime.enter();
        let at = self.layout.reply_byte(self.me, start);
        let signal = self.layout.reply_signal(self.me);
        self.send_counted(i, at, std::mem::take(&mut replies.bytes), signal)
    }

    /// Performs one request record on this PE's memory: `payload`, what of its payload was
    /// read first ([`Header::payload_read_first`]), the rest still at byte `payload_at` of
    /// the agent's buffer.
    fn perform(&self, header: &Header, payload: &[u8], payload_at: usize) -> Outcome {
        let action = match action(header, payload) {
            Ok(Action::Nop) => return (Status::Ok, 0, Vec::new()),
            Ok(_) if header.rkey != self.rkey => return (Status::RemoteAccess, 0, Vec::new()),
            Ok(action) => action,
            Err(status) => return (status, 0, Vec::new()),
        };
        let memory = &self.memory;
        let (addr, len) = match &action {
            Action::Write(len) => (header.addr, *len),
            Action::OrderedWrite(data) => (header.addr, data.len()),
            Action::Read(len) => (header.addr, *len),
            Action::Atomic(width, _) => (header.addr, width.bytes() as usize),
            Action::Nop => (0, 0),
        };
        if let Err(status) = self.check_range(header, addr, len) {
            return (status, 0, Vec::new());
        }
        let done = match action {
            Action::Write(len) => {
                let written = memory
                    .write_deferred_from_ring(addr, payload_at, len)
                    .unwrap_or_else(|| {
                        let mut from_ring =
                            |offset: usize, out: &mut [u8]| self.read_own(payload_at + offset, out);
                        memory.write_deferred_from(addr, len, &mut from_ring)
                    });
                written.map(|()| (0, Vec::new()))
            }
            Action::OrderedWrite(data) => {
                memory.write_ordered(addr, data).map(|()| (0, Vec::new()))
            }
            Action::Read(len) => {
                let mut data = vec![0; len];
                memory.read(addr, &mut data).map(|()| (0, data))
            }
            Action::Atomic(width, op) => {
                if addr % width.bytes() as u64 != 0 {
                    return (Status::RemoteInvalidRequest, 0, Vec::new());
                }
                memory.atomic(addr, width, op).map(|old| (old, Vec::new()))
            }
            Action::Nop => Ok((0, Vec::new())),
        };
        match done {
            Ok((value, data)) => (Status::Ok, value, data),
            Err(error) => {
                tracing::debug!(pe = self.me, %error, "a NIC agent request failed on its memory");
                (Status::RemoteOperation, 0, Vec::new())
            }
        }
    }

    /// Checks that the request (all of it, for a chunk of a larger one) and the chunk's
    /// `len` bytes at `addr` lie in this PE's heap.
    fn check_range(&self, header: &Header, addr: u64, len: usize) -> Result<(), Status> {
        let base = self.memory.base();
        let end = base.checked_add(self.memory.size() as u64);
        let (span_start, span_end) = match header.span {
            (s, e) if s == e => (addr, addr.checked_add(len as u64)),
            (s, e) => (s, Some(e).filter(|&e| e > s)),
        };
        let chunk_end = addr.checked_add(len as u64);
        let inside = match (span_end, chunk_end, end) {
            (Some(span_end), Some(chunk_end), Some(end)) => {
                base <= span_start && span_end <= end && span_start <= addr && chunk_end <= span_end
            }
            _ => false,
        };
        if inside {
            Ok(())
        } else {
            Err(Status::RemoteAccess)
        }
    }
}
