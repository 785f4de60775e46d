//! The agent's rings in the host symmetric heap and the records in them.
//!
//! # Layout (one symmetric buffer of `u64` words, the same on every PE of `n`)
//! | words / bytes | what |
//! |---|---|
//! | word `i < n` | request blocks written here by initiator `i` that have landed (a count) |
//! | word `n + t` | reply blocks written here by target `t` that have landed (a count) |
//! | `n` request rings | ring `i` here: initiator `i`'s requests to this PE |
//! | `n` reply rings | ring `t` here: target `t`'s replies to this PE |
//!
//! A ring is `blocks` blocks of [`BLOCK`] bytes, addressed by a running block count taken
//! modulo the ring. A record (a header block, then its payload padded to whole blocks) never
//! wraps: one that would is put at the ring's start, after a skip record (requests) or a gap
//! the initiator leaves (replies, whose places the initiator chooses and names in the
//! request). Each side writes the other's ring in one message that adds the blocks it wrote
//! to the ring's signal word once they have landed (a counted write, or a put-with-signal
//! adding them), so whoever reads the count sees every record before it. The count is of
//! blocks written, not of running blocks: a skip record counts as one block, the gap before
//! a reply ring's turn as none.

use std::ops::Range;
use std::sync::Arc;

use ferroshmem_runtime::{Error, Result};

use super::request::{AmoOp, Request, Status, Width};

/// The unit of the rings, as an mlx5 WQE basic block.
pub(crate) const BLOCK: usize = 64;

/// Record kinds.
const WRITE: u8 = 1;
const READ: u8 = 2;
const ATOMIC: u8 = 3;
const NOP: u8 = 4;
const ORDERED_WRITE: u8 = 5;
const SKIP: u8 = 0xFF;

/// Where things are in the agent's buffer, for `n` PEs and rings of `blocks` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub n: usize,
    pub blocks: usize,
}

impl Layout {
    /// The buffer's size in `u64` words.
    pub fn words(&self) -> usize {
        2 * self.n + 2 * self.n * self.blocks * BLOCK / 8
    }

    /// The word counting the request blocks landed from initiator `i`.
    pub fn request_signal(&self, i: usize) -> usize {
        i
    }

    /// The word counting the reply blocks landed from target `t`.
    pub fn reply_signal(&self, t: usize) -> usize {
        self.n + t
    }

    /// The byte of running block `block` of the request ring of initiator `i`.
    pub fn request_byte(&self, i: usize, block: u64) -> usize {
        self.ring_byte(i, block)
    }

    /// The byte of running block `block` of the reply ring of target `t`.
    pub fn reply_byte(&self, t: usize, block: u64) -> usize {
        self.ring_byte(self.n + t, block)
    }

    fn ring_byte(&self, ring: usize, block: u64) -> usize {
        let within = (block % self.blocks as u64) as usize;
        16 * self.n + (ring * self.blocks + within) * BLOCK
    }

    /// The blocks to skip at running block `head` so that a record of `blocks` blocks fits
    /// before the ring's end.
    pub fn skip(&self, head: u64, blocks: usize) -> u64 {
        let used = (head % self.blocks as u64) as usize;
        if used + blocks <= self.blocks {
            0
        } else {
            (self.blocks - used) as u64
        }
    }

    /// The running block where the ring turn after `head`'s begins.
    pub fn next_turn(&self, head: u64) -> u64 {
        (head / self.blocks as u64 + 1) * self.blocks as u64
    }
}

/// The blocks of a record with `payload` bytes after its header.
pub(crate) fn record_blocks(payload: usize) -> usize {
    1 + payload.div_ceil(BLOCK)
}

/// The operands block of an atomic: four words.
const AMO_PAYLOAD: usize = 32;

/// One request record's header fields (one chunk of a request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: u8,
    pub width: u8,
    pub amo: u8,
    pub rkey: u32,
    /// Payload bytes of a write, bytes asked of a read.
    pub len: u32,
    pub seq: u64,
    pub addr: u64,
    /// Where the reply goes (a running block of the initiator's reply ring for this target).
    pub reply_at: u64,
    /// The whole request's range (a chunk is checked with all of it).
    pub span: (u64, u64),
}

impl Header {
    /// The payload bytes that follow the header.
    pub fn payload(&self) -> usize {
        match self.kind {
            WRITE | ORDERED_WRITE => self.len as usize,
            ATOMIC => AMO_PAYLOAD,
            _ => 0,
        }
    }

    /// The payload bytes the target reads before it performs the record: all but a plain
    /// write's, which go from the ring straight to the heap's staging memory.
    pub fn payload_read_first(&self) -> usize {
        match self.kind {
            WRITE => 0,
            _ => self.payload(),
        }
    }

    /// The bytes of the reply.
    pub fn reply_len(&self) -> usize {
        if self.kind == READ {
            self.len as usize
        } else {
            0
        }
    }

    /// The record's blocks.
    pub fn blocks(&self) -> usize {
        record_blocks(self.payload())
    }

    pub fn is_skip(&self) -> bool {
        self.kind == SKIP
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[self.kind, self.width, self.amo, 0]);
        out.extend_from_slice(&self.rkey.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for word in [self.seq, self.addr, self.reply_at, self.span.0, self.span.1] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.resize(start + BLOCK, 0);
    }

    pub fn decode(b: &[u8]) -> Header {
        let word = |at: usize| u64::from_le_bytes(array(&b[at..at + 8]));
        let half = |at: usize| u32::from_le_bytes(array(&b[at..at + 4]));
        Header {
            kind: b[0],
            width: b[1],
            amo: b[2],
            rkey: half(4),
            len: half(8),
            seq: word(16),
            addr: word(24),
            reply_at: word(32),
            span: (word(40), word(48)),
        }
    }

    /// A skip record: the rest of the ring turn is empty.
    pub fn skip() -> Header {
        Header {
            kind: SKIP,
            width: 0,
            amo: 0,
            rkey: 0,
            len: 0,
            seq: 0,
            addr: 0,
            reply_at: 0,
            span: (0, 0),
        }
    }
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// Pads `out` to whole blocks.
pub(crate) fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
}

/// One chunk of a request, ready to be placed: its header (without sequence and reply
/// place) and payload.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub header: Header,
    pub payload: Payload,
}

/// A chunk's payload: its part of the request's bytes, shared by the request's chunks (a
/// large write is not copied to be split).
#[derive(Debug, Clone)]
pub(crate) struct Payload {
    bytes: Arc<Vec<u8>>,
    part: Range<usize>,
}

impl Payload {
    /// The payload's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[self.part.clone()]
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload {
            part: 0..bytes.len(),
            bytes: Arc::new(bytes),
        }
    }
}

/// Splits `request` into chunks of at most `max` payload (or read) bytes.
pub(crate) fn chunks(request: Request, max: usize) -> Vec<Chunk> {
    match request {
        Request::Write { addr, rkey, data } => write_chunks(WRITE, (addr, rkey), data, max),
        Request::OrderedWrite { addr, rkey, data } => {
            write_chunks(ORDERED_WRITE, (addr, rkey), data, max)
        }
        Request::Read { addr, rkey, len } => {
            let span = (addr, addr.wrapping_add(len as u64));
            let mut out = Vec::new();
            let mut done = 0;
            loop {
                let n = (len - done).min(max);
                let at = addr.wrapping_add(done as u64);
                out.push(Chunk {
                    header: header(READ, rkey, at, n, span),
                    payload: Vec::new().into(),
                });
                done += n;
                if done >= len {
                    break out;
                }
            }
        }
        Request::Atomic {
            addr,
            rkey,
            width,
            op,
        } => {
            let (code, operands) = op.encode();
            let mut h = header(ATOMIC, rkey, addr, width.bytes() as usize, (addr, addr));
            h.width = width.bytes() as u8;
            h.amo = code;
            let payload = operands.iter().flat_map(|w| w.to_le_bytes());
            vec![Chunk {
                header: h,
                payload: payload.collect::<Vec<u8>>().into(),
            }]
        }
        Request::Nop => vec![Chunk {
            header: header(NOP, 0, 0, 0, (0, 0)),
            payload: Vec::new().into(),
        }],
    }
}

/// A request record's header: `kind` at `addr` under `rkey`, `len` bytes, part of `span`.
fn header(kind: u8, rkey: u32, addr: u64, len: usize, span: (u64, u64)) -> Header {
    Header {
        kind,
        width: 0,
        amo: 0,
        rkey,
        len: len as u32,
        seq: 0,
        addr,
        reply_at: 0,
        span,
    }
}

/// A write of `kind` (`WRITE` or `ORDERED_WRITE`) of `data` at `addr` under `rkey`, in
/// chunks of at most `max` bytes (an ordered write's chunks are each ordered: they land
/// in order anyway).
fn write_chunks(kind: u8, (addr, rkey): (u64, u32), data: Vec<u8>, max: usize) -> Vec<Chunk> {
    let span = (addr, addr.wrapping_add(data.len() as u64));
    let len = data.len();
    let bytes = Arc::new(data);
    let mut out = Vec::with_capacity(len.div_ceil(max).max(1));
    let mut from = 0;
    loop {
        let to = len.min(from + max);
        out.push(Chunk {
            header: header(kind, rkey, addr.wrapping_add(from as u64), to - from, span),
            payload: Payload {
                bytes: bytes.clone(),
                part: from..to,
            },
        });
        from = to;
        if from >= len {
            return out;
        }
    }
}

/// What a target is asked to do by one record.
#[derive(Debug)]
pub(crate) enum Action<'a> {
    /// A write of this many bytes, the record's payload: read from the ring as it lands in
    /// the heap (see [`Header::payload_read_first`]).
    Write(usize),
    /// A write that must not be seen before the writes performed before it.
    OrderedWrite(&'a [u8]),
    Read(usize),
    Atomic(Width, AmoOp),
    Nop,
}

/// The action of a record with `header` and `payload`, or the status of a malformed one.
pub(crate) fn action<'a>(
    header: &Header,
    payload: &'a [u8],
) -> std::result::Result<Action<'a>, Status> {
    match header.kind {
        WRITE => Ok(Action::Write(header.len as usize)),
        ORDERED_WRITE => Ok(Action::OrderedWrite(payload)),
        READ => Ok(Action::Read(header.len as usize)),
        ATOMIC => {
            let width = Width::of(header.width as usize).ok_or(Status::RemoteInvalidRequest)?;
            let operands = std::array::from_fn(|i| u64::from_le_bytes(array(&payload[i * 8..])));
            let op = AmoOp::decode(header.amo, operands).ok_or(Status::RemoteInvalidRequest)?;
            Ok(Action::Atomic(width, op))
        }
        NOP => Ok(Action::Nop),
        _ => Err(Status::RemoteInvalidRequest),
    }
}

/// A reply record: header fields, then the read bytes.
pub(crate) fn encode_reply(seq: u64, status: Status, value: u64, data: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[status.code(), 0, 0, 0]);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&value.to_le_bytes());
    out.resize(start + BLOCK, 0);
    out.extend_from_slice(data);
    pad(out);
}

/// A reply header's sequence number, status, value and data length.
pub(crate) fn decode_reply(b: &[u8]) -> Result<(u64, Status, u64, usize)> {
    let status = Status::from_code(b[0])
        .ok_or_else(|| Error::InvalidArgument(format!("a reply with status code {}", b[0])))?;
    let len = u32::from_le_bytes(array(&b[4..8])) as usize;
    Ok((
        u64::from_le_bytes(array(&b[8..16])),
        status,
        u64::from_le_bytes(array(&b[16..24])),
        len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_never_wraps_and_skips_only_what_it_must() {
        let l = Layout { n: 2, blocks: 8 };
        assert_eq!(l.skip(0, 8), 0);
        assert_eq!(l.skip(5, 3), 0);
        assert_eq!(l.skip(5, 4), 3);
        assert_eq!(l.skip(13, 4), 3);
        assert_eq!(l.next_turn(13), 16);
        assert_eq!(l.request_byte(1, 9), 32 + (8 + 1) * BLOCK);
        assert_eq!(l.reply_byte(0, 3), 32 + (16 + 3) * BLOCK);
        assert_eq!(l.words() * 8, 32 + 4 * 8 * BLOCK);
    }

    #[test]
    fn writes_and_reads_split_at_the_chunk_size_with_their_whole_span() {
        let data: Vec<u8> = (0..250).map(|i| i as u8).collect();
        let parts = chunks(
            Request::Write {
                addr: 1000,
                rkey: 7,
                data: data.clone(),
            },
            100,
        );
        let lens: Vec<u32> = parts.iter().map(|c| c.header.len).collect();
        assert_eq!(lens, [100, 100, 50]);
        assert_eq!(parts[2].header.addr, 1200);
        assert!(parts.iter().all(|c| c.header.span == (1000, 1250)));
        let joined: Vec<u8> = parts
            .iter()
            .flat_map(|c| c.payload.as_slice().to_vec())
            .collect();
        assert_eq!(joined, data);
        let reads = chunks(
            Request::Read {
                addr: 0,
                rkey: 7,
                len: 200,
            },
            100,
        );
        assert_eq!(reads.len(), 2);
        assert_eq!(reads[1].header.reply_len(), 100);
        assert_eq!(reads[1].header.blocks(), 1, "a read carries no payload");
        let empty = chunks(
            Request::Read {
                addr: 0,
                rkey: 7,
                len: 0,
            },
            100,
        );
        assert_eq!(empty.len(), 1);
    }

    #[test]
    fn headers_and_replies_survive_the_wire() {
        let mut parts = chunks(
            Request::Atomic {
                addr: 64,
                rkey: 3,
                width: Width::W4,
                op: AmoOp::MaskedCompareSwap {
                    compare: 1,
                    compare_mask: 2,
                    swap: 3,
                    swap_mask: 4,
                },
            },
            100,
        );
        let mut c = parts.remove(0);
        c.header.seq = 99;
        c.header.reply_at = 1234;
        let mut bytes = Vec::new();
        c.header.encode(&mut bytes);
        assert_eq!(bytes.len(), BLOCK);
        let back = Header::decode(&bytes);
        assert_eq!(back, c.header);
        assert_eq!(back.blocks(), 2);
        match action(&back, c.payload.as_slice()) {
            Ok(Action::Atomic(Width::W4, AmoOp::MaskedCompareSwap { swap_mask: 4, .. })) => {}
            other => panic!("{other:?}"),
        }
        let write = chunks(
            Request::Write {
                addr: 8,
                rkey: 0xDEAD_BEEF,
                data: vec![1; 150],
            },
            100,
        );
        let mut bytes = Vec::new();
        write[1].header.encode(&mut bytes);
        assert_eq!(Header::decode(&bytes), write[1].header);
        assert_eq!(Header::decode(&bytes).span, (8, 158));
        let mut reply = Vec::new();
        encode_reply(99, Status::RemoteAccess, 5, &[1, 2, 3], &mut reply);
        assert_eq!(reply.len(), 2 * BLOCK);
        assert_eq!(
            decode_reply(&reply).expect("reply"),
            (99, Status::RemoteAccess, 5, 3)
        );
        assert_eq!(&reply[BLOCK..BLOCK + 3], &[1, 2, 3]);
    }
}
