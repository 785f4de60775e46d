//! The initiator side of the agent: per peer, the requests queued for credit and those
//! placed in the peer's request ring, waiting for their replies.
//!
//! Requests to one peer are placed in the order they were submitted and never overtake one
//! another: a chunk is placed only once every earlier one has been, and the records of one
//! batch go out in one counted write ([`Shared::send_counted`]), after the batches before it
//! (the data plane orders one PE's operations to a peer, on the fabric through its lane). Credit is counted in
//! blocks of both rings: a request is placed only when its record fits in the peer's
//! request ring beside the records the peer has not yet consumed (a reply says it has), and
//! its reply fits in this PE's reply ring beside the replies not yet read. So a ring never
//! overflows, and requests beyond the credit wait in the queue, never lost.

use std::collections::VecDeque;

use ferroshmem_runtime::{Error, Result, SignalOp};
use futures::FutureExt;
use tokio::sync::oneshot;

use super::request::Reply;
use super::wire::{decode_reply, pad, record_blocks, Chunk, Header, BLOCK};
use super::Shared;

/// Where a chunk's outcome goes.
pub(crate) type Done = oneshot::Sender<Result<Reply>>;

/// A chunk waiting for credit.
#[derive(Debug)]
pub(crate) struct Queued {
    pub chunk: Chunk,
    pub done: Done,
}

/// A chunk in the peer's ring, waiting for its reply.
#[derive(Debug)]
struct Placed {
    seq: u64,
    /// The running block after its record (and any skip before it).
    request_end: u64,
    reply_at: u64,
    reply_end: u64,
    /// The reply blocks written to this PE for the link once its reply has landed (the
    /// count of this PE's reply signal for the peer: gaps before a ring turn not counted).
    reply_count: u64,
    done: Done,
}

/// This PE's requests to one peer.
#[derive(Debug, Default)]
pub(crate) struct Link {
    queue: VecDeque<Queued>,
    placed: VecDeque<Placed>,
    /// Running blocks of the peer's request ring written, and consumed by the peer.
    request_head: u64,
    request_freed: u64,
    /// Running blocks of this PE's reply ring reserved, and read.
    reply_head: u64,
    reply_freed: u64,
    /// Reply blocks reserved, the gaps left before ring turns not counted.
    reply_written: u64,
    seq: u64,
    /// Set once the agent stops: nothing more is accepted.
    pub closed: Option<Error>,
}

impl Link {
    /// Queues `chunks`, each with the sender of its outcome.
    pub fn queue(&mut self, chunks: impl IntoIterator<Item = Queued>) {
        self.queue.extend(chunks);
    }

    /// Fails every chunk queued or placed with `error`, and accepts nothing more.
    pub fn close(&mut self, error: Error) {
        for q in self.queue.drain(..) {
            let _ = q.done.send(Err(error.clone()));
        }
        for p in self.placed.drain(..) {
            let _ = p.done.send(Err(error.clone()));
        }
        self.closed = Some(error);
    }
}

impl Shared {
    /// Places as many queued chunks to `peer` as the credit allows and writes them into its
    /// request ring; on an error every chunk of the link fails with it.
    pub(crate) fn pump(&self, peer: usize, link: &mut Link) {
        if let Err(e) = self.place(peer, link) {
            link.close(e);
        }
    }

    fn place(&self, peer: usize, link: &mut Link) -> Result<()> {
        // The fabric's lane posts held operations from tasks: they go to the service's runtime,
        // whichever thread submits.
        let _runtime = self.runtime.enter();
        let capacity = self.layout.blocks as u64;
        let mut batch = Vec::new();
        let mut start = link.request_head;
        while let Some(next) = link.queue.front() {
            let blocks = next.chunk.header.blocks() as u64;
            let reply_blocks = record_blocks(next.chunk.header.reply_len()) as u64;
            let skip = self.layout.skip(link.request_head, blocks as usize);
            let reply_skip = self.layout.skip(link.reply_head, reply_blocks as usize);
            let requests = link.request_head + skip + blocks - link.request_freed;
            let replies = link.reply_head + reply_skip + reply_blocks - link.reply_freed;
            if requests > capacity || replies > capacity {
                break;
            }
            let Some(Queued { chunk, done }) = link.queue.pop_front() else {
                break;
            };
            if skip > 0 {
                Header::skip().encode(&mut batch);
                link.request_head += skip;
                self.send_requests(peer, start, std::mem::take(&mut batch))?;
                start = link.request_head;
            }
            if link.request_head % capacity == 0 && !batch.is_empty() {
                // The ring turns here: the batch's bytes end at the ring's end.
                self.send_requests(peer, start, std::mem::take(&mut batch))?;
                start = link.request_head;
            }
            link.reply_head += reply_skip;
            let mut header = chunk.header;
            header.seq = link.seq;
            header.reply_at = link.reply_head;
            header.encode(&mut batch);
            batch.extend_from_slice(chunk.payload.as_slice());
            pad(&mut batch);
            link.request_head += blocks;
            link.reply_head += reply_blocks;
            link.reply_written += reply_blocks;
            link.seq += 1;
            link.placed.push_back(Placed {
                seq: header.seq,
                request_end: link.request_head,
                reply_at: header.reply_at,
                reply_end: link.reply_head,
                reply_count: link.reply_written,
                done,
            });
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.send_requests(peer, start, batch)
    }

    /// Writes `records`, from running block `start` of this PE's request ring on `peer`,
    /// counted there in this PE's request signal.
    fn send_requests(&self, peer: usize, start: u64, records: Vec<u8>) -> Result<()> {
        let at = self.layout.request_byte(self.me, start);
        self.send_counted(peer, at, records, self.layout.request_signal(self.me))
    }

    /// Writes `bytes` (whole blocks) at byte `at` of `peer`'s agent buffer and adds their
    /// blocks to word `signal` there, in one message: a write whose notice the peer's write
    /// counter counts (see [`ferroshmem_runtime::landed`]) on the fabric, taking `bytes` as
    /// they are, a put-with-signal adding the count on a mapped route.
    pub(crate) fn send_counted(
        &self,
        peer: usize,
        at: usize,
        bytes: Vec<u8>,
        signal: usize,
    ) -> Result<()> {
        let dest = self.rings.all().as_bytes().slice(at..at + bytes.len());
        let blocks = (bytes.len() / BLOCK) as u64;
        let landing = if self.dp.is_mapped(peer) {
            let signal = self.rings.at(signal);
            self.dp
                .put_signal(dest, &bytes, signal, blocks, SignalOp::Add, peer)
        } else {
            self.dp.put_owned(dest, bytes, peer)
        };
        // On a mapped route it has landed; a remote one has started, and its failure is the
        // job's (a peer lost), which every waiting request sees.
        match landing.now_or_never() {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Hands the replies from target `t` that have landed (`landed` reply blocks written
    /// here, see [`Placed::reply_count`]) to their requests, frees their credit and places
    /// what it allows.
    pub(crate) fn take_replies(&self, t: usize, landed: u64) -> Result<()> {
        let mut link = self.link(t);
        while link.placed.front().is_some_and(|p| p.reply_count <= landed) {
            let Some(placed) = link.placed.pop_front() else {
                break;
            };
            let at = self.layout.reply_byte(t, placed.reply_at);
            let mut head = [0; BLOCK];
            self.read_own(at, &mut head)?;
            let (seq, status, value, len) = decode_reply(&head)?;
            let room = (placed.reply_end - placed.reply_at - 1) as usize * BLOCK;
            if seq != placed.seq || len > room {
                return Err(Error::InvalidArgument(format!(
                    "PE {t} replied to request {seq} ({len} bytes) where request {} ({room} bytes) was awaited",
                    placed.seq
                )));
            }
            let mut data = vec![0; len];
            self.read_own(at + BLOCK, &mut data)?;
            link.request_freed = placed.request_end;
            link.reply_freed = placed.reply_end;
            tracing::trace!(from = t, seq, ?status, "NIC agent reply taken");
            let _ = placed.done.send(Ok(Reply {
                status,
                value,
                data,
            }));
        }
        self.pump(t, &mut link);
        Ok(())
    }

    /// Copies bytes of this PE's own agent buffer.
    pub(crate) fn read_own(&self, at: usize, out: &mut [u8]) -> Result<()> {
        let view = self.rings.all().as_bytes().slice(at..at + out.len());
        match self.dp.get(out, view, self.me).now_or_never() {
            Some(done) => done,
            None => Err(Error::NotMapped { pe: self.me }),
        }
    }
}
