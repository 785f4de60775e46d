//! One RC send queue's memory as a CPU NIC handler sees it, its consumer (the handler side:
//! [`Consumer`]) and a Rust producer ([`Producer`]: tests and host-initiated posts).
//!
//! The memory is 64-bit words (a GPU PE hands pinned host memory mapped into the GPU; tests
//! use plain memory), laid out by [`QueueLayout`]:
//!
//! | words | what |
//! |---|---|
//! | SQ | `nwqes` × 64-byte WQEBBs (power of two, 8 ..= 2^15) |
//! | CQ | `ncqes` × 64-byte CQEs (power of two, ≥ `nwqes`), initialised to 0xFF |
//! | DBR | send doorbell record: bytes 0..4 receive counter, 4..8 send producer index (be32, low 16 bits) |
//! | CQ DBR | CQ consumer index (be32, low 24 bits, `MLX5_CQ_SET_CI`) in bytes 0..4 |
//! | PROD | the producer-index cell a GPU bumps with `atomicMax` (NVSHMEM's `use_async_postsend`) |
//! | RESV | reservation counter (slots are claimed by fetch-add) |
//! | READY | ready counter (advances in reservation order once WQEs are written) |
//! | CONS | SQ consumer index as CQEs report it (`wqe_counter + 1`, a lower bound) |
//!
//! The consumer reads the producer index (PROD, or the DBR when that is ahead, as hardware
//! recovery does) with acquire and compares modulo 2^16, decodes at its consumer index and
//! advances; the handler performs each request and calls [`Consumer::complete`] in order, which
//! writes a CQE when the WQE is signaled, or an error CQE followed by WR-flush CQEs for every
//! other WQE posted (the QP is in error from then on: later posts are flushed too).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cqe::{init_cq, read_cqe, write_cqe, Cqe, Syndrome};
use super::decode::{decode, DecodedWqe, Ring, WqeError};
use super::wqe::{encode_linear, wqebbs_of, WorkRequest, WqeFlags, MAX_QPN};
use super::{ctrl_flags, MAX_WQEBBS, WQEBB};

const WORDS_PER_BB: usize = WQEBB / 8;
const DBR: usize = 0;
const CQ_DBR: usize = 1;
const PROD: usize = 2;
const RESV: usize = 3;
const READY: usize = 4;
const CONS: usize = 5;
const CONTROL_WORDS: usize = 8;

/// Sizes of one send queue and its CQ, and where each part sits in the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLayout {
    /// WQEBBs in the send queue.
    pub nwqes: usize,
    /// CQEs in the completion queue.
    pub ncqes: usize,
}

impl QueueLayout {
    /// A layout, checking its rules: `nwqes` a power of two in 8 ..= 2^15 (so 16-bit indices
    /// compare unambiguously and a signaled WQE always lies in reach), `ncqes` a power of two
    /// ≥ `nwqes` (so the CQ cannot overrun: each unconsumed CQE holds a WQEBB).
    pub fn new(nwqes: usize, ncqes: usize) -> Result<QueueLayout, WqeError> {
        if !nwqes.is_power_of_two() || !(2 * MAX_WQEBBS..=1 << 15).contains(&nwqes) {
            return Err(WqeError::BadLayout(
                "nwqes must be a power of two in 8..=32768",
            ));
        }
        if !ncqes.is_power_of_two() || ncqes < nwqes {
            return Err(WqeError::BadLayout("ncqes must be a power of two >= nwqes"));
        }
        Ok(QueueLayout { nwqes, ncqes })
    }

    /// Words the queue needs.
    pub fn words(&self) -> usize {
        self.control_at() + CONTROL_WORDS
    }

    /// First word of the CQ ring (the SQ ring starts at word 0).
    pub fn cq_at(&self) -> usize {
        self.nwqes * WORDS_PER_BB
    }

    /// First control word (DBR, CQ DBR, PROD, RESV, READY, CONS in that order).
    pub fn control_at(&self) -> usize {
        self.cq_at() + self.ncqes * WORDS_PER_BB
    }
}

/// Memory holding a queue: any owner of 64-bit words.
pub trait Words: Send + Sync {
    /// The words.
    fn words(&self) -> &[AtomicU64];
}

impl Words for Vec<AtomicU64> {
    fn words(&self) -> &[AtomicU64] {
        self
    }
}

/// A send queue's memory, its layout and its QP number, shared by producers and the consumer.
#[derive(Clone)]
pub struct QueueMemory {
    mem: Arc<dyn Words>,
    layout: QueueLayout,
    qpn: u32,
}

impl QueueMemory {
    /// A queue over `mem`, initialised (SQ and counters zero, CQ 0xFF).
    pub fn new(layout: QueueLayout, qpn: u32, mem: Arc<dyn Words>) -> Result<Self, WqeError> {
        if qpn > MAX_QPN {
            return Err(WqeError::QpnTooLarge { qpn });
        }
        if mem.words().len() < layout.words() {
            return Err(WqeError::BadLayout("memory smaller than the layout"));
        }
        let q = QueueMemory { mem, layout, qpn };
        for w in q.sq() {
            w.store(0, Ordering::Relaxed);
        }
        init_cq(q.cq());
        for w in &q.mem.words()[layout.control_at()..layout.words()] {
            w.store(0, Ordering::Release);
        }
        Ok(q)
    }

    /// A queue in plain host memory.
    pub fn host(layout: QueueLayout, qpn: u32) -> Result<Self, WqeError> {
        let mem: Vec<AtomicU64> = (0..layout.words()).map(|_| AtomicU64::new(0)).collect();
        QueueMemory::new(layout, qpn, Arc::new(mem))
    }

    /// The layout.
    pub fn layout(&self) -> QueueLayout {
        self.layout
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The SQ ring's words.
    pub fn sq(&self) -> &[AtomicU64] {
        &self.mem.words()[..self.layout.cq_at()]
    }

    /// The CQ ring's words.
    pub fn cq(&self) -> &[AtomicU64] {
        &self.mem.words()[self.layout.cq_at()..self.layout.control_at()]
    }

    fn control(&self, which: usize) -> &AtomicU64 {
        &self.mem.words()[self.layout.control_at() + which]
    }

    /// The send doorbell record's producer index (16 bits).
    pub fn dbr_send(&self) -> u16 {
        let b = self.control(DBR).load(Ordering::Acquire).to_ne_bytes();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as u16
    }

    /// The producer-index cell (what a GPU `atomicMax`es).
    pub fn prod_cell(&self) -> &AtomicU64 {
        self.control(PROD)
    }

    /// The CQ consumer index published in the CQ doorbell record (24 bits).
    pub fn cq_consumer(&self) -> u32 {
        let b = self.control(CQ_DBR).load(Ordering::Acquire).to_ne_bytes();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x00ff_ffff
    }

    /// The SQ consumer index CQEs have reported so far (full width).
    pub fn consumed(&self) -> u64 {
        self.control(CONS).load(Ordering::Acquire)
    }

    /// The producer index the NIC sees: PROD's low 16 bits, or the DBR's when that is further
    /// ahead of `from` (each ignored if more than `nwqes` ahead, which no producer can be).
    fn producer_index(&self, from: u16) -> u16 {
        let n = self.layout.nwqes as u16;
        let a = (self.prod_cell().load(Ordering::Acquire) as u16).wrapping_sub(from);
        let b = self.dbr_send().wrapping_sub(from);
        let ahead = [a, b].into_iter().filter(|d| *d <= n).max().unwrap_or(0);
        from.wrapping_add(ahead)
    }

    /// Raises the send DBR to `index` unless it is already at or past it (mod 2^16).
    fn raise_dbr(&self, index: u16) {
        let cell = self.control(DBR);
        let mut cur = cell.load(Ordering::Acquire);
        loop {
            let b = cur.to_ne_bytes();
            let have = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as u16;
            let ahead = index.wrapping_sub(have);
            if ahead == 0 || ahead >= 0x8000 {
                return;
            }
            let mut nb = b;
            nb[4..].copy_from_slice(&u32::from(index).to_be_bytes());
            match cell.compare_exchange_weak(
                cur,
                u64::from_ne_bytes(nb),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }
}

impl Ring for QueueMemory {
    fn nwqebbs(&self) -> usize {
        self.layout.nwqes
    }

    fn read_wqebb(&self, slot: usize, out: &mut [u8]) {
        let words = &self.sq()[slot * WORDS_PER_BB..(slot + 1) * WORDS_PER_BB];
        for (w, chunk) in words.iter().zip(out.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
    }
}

/// How the handler finished a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Performed.
    Success,
    /// Failed with this syndrome (and vendor syndrome): the QP goes into error.
    Error(Syndrome, u8),
}

/// A WQE the consumer has taken from the ring: decoded, or refused with why.
pub type Pending = (u16, Result<DecodedWqe, WqeError>);

#[derive(Clone, Copy, Debug)]
struct InFlight {
    index: u16,
    opcode: u8,
    signaled: bool,
    byte_cnt: u32,
    /// Why the WQE was refused at decode, if it was: it can only complete in error.
    refused: Option<Syndrome>,
}

/// The NIC handler's side of one send queue (single consumer).
pub struct Consumer {
    q: QueueMemory,
    ci: u16,
    cq_pi: u64,
    inflight: VecDeque<InFlight>,
    stalled: bool,
    in_error: bool,
}

fn byte_count(req: &WorkRequest) -> u32 {
    match req {
        WorkRequest::Nop => 0,
        WorkRequest::Write { len, .. }
        | WorkRequest::WriteImm { len, .. }
        | WorkRequest::Read { len, .. } => *len,
        WorkRequest::WriteInline { data, .. } => data.len() as u32,
        WorkRequest::Atomic { width, .. } => width.bytes(),
    }
}

impl Consumer {
    /// The consumer of `q`, starting at index 0.
    pub fn new(q: QueueMemory) -> Consumer {
        Consumer {
            q,
            ci: 0,
            cq_pi: 0,
            inflight: VecDeque::new(),
            stalled: false,
            in_error: false,
        }
    }

    /// Whether the QP is in error (every WQE is flushed).
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// The next posted WQE, decoded (`None`: nothing new). A refused WQE comes back as its
    /// error; the handler completes it with that error's syndrome, and nothing more is decoded
    /// until it has. In error, new WQEs are flushed here and `None` is returned.
    pub fn pending(&mut self) -> Result<Option<Pending>, WqeError> {
        if self.in_error {
            self.flush_posted()?;
            return Ok(None);
        }
        if self.stalled {
            return Ok(None);
        }
        let pi = self.q.producer_index(self.ci);
        if pi == self.ci {
            return Ok(None);
        }
        let index = self.ci;
        let available = pi.wrapping_sub(index);
        let got = decode(&self.q, index, self.q.qpn).and_then(|d| {
            if d.wqebbs > usize::from(available) {
                return Err(WqeError::BeyondProducer {
                    index,
                    wqebbs: d.wqebbs,
                    available,
                });
            }
            Ok(d)
        });
        match &got {
            Ok(d) => {
                self.inflight.push_back(InFlight {
                    index,
                    opcode: d.opcode,
                    signaled: d.flags.signaled,
                    byte_cnt: byte_count(&d.request),
                    refused: None,
                });
                self.ci = index.wrapping_add(d.wqebbs as u16);
            }
            Err(e) => {
                let (op, step) = self.peek_ctrl(index, available);
                self.inflight.push_back(InFlight {
                    index,
                    opcode: op,
                    signaled: true,
                    byte_cnt: 0,
                    refused: Some(e.syndrome()),
                });
                self.ci = index.wrapping_add(step);
                self.stalled = true;
            }
        }
        Ok(Some((index, got)))
    }

    /// The opcode and WQEBB count a control segment claims (at least 1, at most what is
    /// published), for stepping over WQEs that are not executed.
    fn peek_ctrl(&self, index: u16, available: u16) -> (u8, u16) {
        let mut bb = [0u8; WQEBB];
        let n = self.q.layout.nwqes;
        self.q.read_wqebb(usize::from(index) & (n - 1), &mut bb);
        let ds = bb[7] & 0x3f;
        let step = wqebbs_of(ds).clamp(1, MAX_WQEBBS) as u16;
        (bb[3], step.min(available.max(1)))
    }

    /// Finishes the oldest WQE in flight, which must be `index`: a CQE when it is signaled or
    /// failed; after a failure, WR-flush CQEs for every other WQE posted (whose own
    /// completions, coming later, then do nothing). A WQE refused at decode completes in
    /// error whatever `status` says.
    pub fn complete(&mut self, index: u16, status: Completion) -> Result<(), WqeError> {
        if self.in_error && self.inflight.iter().all(|f| f.index != index) {
            // An error before it flushed it: its CQE is written already.
            return Ok(());
        }
        match self.inflight.front() {
            Some(f) if f.index == index => {}
            _ => return Err(WqeError::NotInFlight { index }),
        }
        self.cq_room()?;
        let Some(f) = self.inflight.pop_front() else {
            return Err(WqeError::NotInFlight { index });
        };
        let status = match (status, f.refused) {
            (Completion::Success, Some(why)) => Completion::Error(why, 0),
            (status, _) => status,
        };
        match status {
            Completion::Success if f.signaled => {
                self.push_cqe(&Cqe::success(f.opcode, self.q.qpn, index, f.byte_cnt));
            }
            Completion::Success => {}
            Completion::Error(s, vendor) => {
                self.push_cqe(&Cqe::error(s, vendor, f.opcode, self.q.qpn, index));
                self.in_error = true;
                self.stalled = false;
                self.flush_posted()?;
            }
        }
        Ok(())
    }

    /// Fails the queue (a lost peer, say): the oldest WQE in flight gets an error CQE with
    /// `syndrome`, and every other WQE posted a WR-flush CQE.
    pub fn fail(&mut self, syndrome: Syndrome) -> Result<(), WqeError> {
        match self.inflight.front() {
            Some(f) => self.complete(f.index, Completion::Error(syndrome, 0)),
            None => {
                self.in_error = true;
                self.flush_posted()
            }
        }
    }

    /// WR-flush CQEs for the WQEs in flight and those posted but not decoded.
    fn flush_posted(&mut self) -> Result<(), WqeError> {
        while let Some(f) = self.inflight.front().copied() {
            self.cq_room()?;
            self.inflight.pop_front();
            self.push_flush(f.opcode, f.index);
        }
        loop {
            let pi = self.q.producer_index(self.ci);
            if pi == self.ci {
                return Ok(());
            }
            self.cq_room()?;
            let (op, step) = self.peek_ctrl(self.ci, pi.wrapping_sub(self.ci));
            self.push_flush(op, self.ci);
            self.ci = self.ci.wrapping_add(step);
        }
    }

    fn push_flush(&mut self, op: u8, index: u16) {
        self.push_cqe(&Cqe::error(Syndrome::WrFlush, 0, op, self.q.qpn, index));
    }

    fn cq_room(&self) -> Result<(), WqeError> {
        let used = (self.cq_pi as u32).wrapping_sub(self.q.cq_consumer()) & 0x00ff_ffff;
        if used as usize >= self.q.layout.ncqes {
            return Err(WqeError::CqOverrun);
        }
        Ok(())
    }

    fn push_cqe(&mut self, cqe: &Cqe) {
        write_cqe(self.q.cq(), self.cq_pi, cqe);
        self.cq_pi += 1;
    }
}

/// The CQ poller of a [`Producer`] (one at a time, behind its lock).
#[derive(Debug, Default)]
struct Poller {
    ci: u64,
    last: Option<u16>,
    cqes: u64,
    error: Option<WqeError>,
}

/// A Rust producer for one send queue, safe to share among threads: slots are reserved by
/// fetch-add, WQEs written, published in reservation order (a ready counter), the producer
/// index raised with fetch-max and the DBR after it. Every WQE whose slots reach a multiple of
/// `nwqes / 4` is signaled, so completions always free the ring.
pub struct Producer {
    q: QueueMemory,
    poller: Mutex<Poller>,
    timeout: Duration,
}

impl Producer {
    /// A producer on `q` whose waits (ring space, publishing order, quiet) give up after
    /// `timeout`.
    pub fn new(q: QueueMemory, timeout: Duration) -> Producer {
        Producer {
            q,
            poller: Mutex::new(Poller::default()),
            timeout,
        }
    }

    /// CQEs consumed so far.
    pub fn cqes(&self) -> u64 {
        self.poller.lock().map(|p| p.cqes).unwrap_or(0)
    }

    /// The first error: an error CQE (the QP is in error after it), or a post that timed out
    /// waiting for ring space while it held slots of the ring (no WQE after it can be
    /// published).
    pub fn error(&self) -> Option<WqeError> {
        self.poller.lock().ok().and_then(|p| p.error.clone())
    }

    /// Records `e` as the queue's error, unless it has one.
    fn record_error(&self, e: WqeError) {
        if let Ok(mut p) = self.poller.lock() {
            p.error.get_or_insert(e);
        }
    }

    /// Posts `req`; returns its index (full width: its first WQEBB is `index mod 2^16`).
    pub fn post(&self, req: &WorkRequest, flags: WqeFlags) -> Result<u64, WqeError> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        let mut e = encode_linear(req, flags, 0, self.q.qpn)?;
        let n = e.wqebbs as u64;
        let nwqes = self.q.layout.nwqes as u64;
        let base = self.q.control(RESV).fetch_add(n, Ordering::AcqRel);
        let period = nwqes / 4;
        if (base + n - 1) / period != base.wrapping_sub(1) / period || base == 0 {
            e.bytes[11] |= ctrl_flags::CQ_UPDATE;
        }
        e.bytes[1..3].copy_from_slice(&(base as u16).to_be_bytes());
        let start = Instant::now();
        let space = self.wait(start, "ring space", || {
            base + n <= self.q.consumed() + nwqes
        });
        if let Err(e) = space {
            // Its slots stay reserved and can never be published, so no later WQE can be
            // published either: the queue fails every post from now on, at once.
            self.record_error(e.clone());
            return Err(e);
        }
        let sq = self.q.sq();
        for bb in 0..e.wqebbs {
            let slot = ((base + bb as u64) % nwqes) as usize;
            let words = &sq[slot * WORDS_PER_BB..(slot + 1) * WORDS_PER_BB];
            let bytes = &e.bytes[bb * WQEBB..(bb + 1) * WQEBB];
            for (w, chunk) in words.iter().zip(bytes.chunks_exact(8)) {
                w.store(
                    u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8])),
                    Ordering::Relaxed,
                );
            }
        }
        let ready = self.q.control(READY);
        let published = self.wait(start, "publishing order", || {
            ready
                .compare_exchange(base, base + n, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if let Err(e) = published {
            // Written but never published: the same as above for every later WQE.
            self.record_error(e.clone());
            return Err(e);
        }
        self.q.prod_cell().fetch_max(base + n, Ordering::AcqRel);
        self.q.raise_dbr((base + n) as u16);
        Ok(base)
    }

    /// Waits until every WQE posted before this call has completed: posts a signaled NOP and
    /// waits for its CQE. An error CQE on the way is returned.
    pub fn quiet(&self) -> Result<(), WqeError> {
        let index = self.post(&WorkRequest::Nop, WqeFlags::SIGNALED)?;
        self.wait(Instant::now(), "quiet", || self.q.consumed() > index)?;
        match self.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Spins (polling the CQ, then yielding) until `done`, the queue's error, or the timeout.
    fn wait(
        &self,
        start: Instant,
        what: &'static str,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), WqeError> {
        let mut spins = 0u32;
        while !done() {
            self.poll();
            spins += 1;
            if spins % 64 == 0 {
                // An error recorded meanwhile (an error CQE, or another post's timeout that
                // wedged the queue) ends this wait too: it can only end in a timeout now.
                if let Some(e) = self.error() {
                    return Err(e);
                }
                if start.elapsed() > self.timeout {
                    return Err(WqeError::Timeout {
                        what,
                        after: self.timeout,
                    });
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Consumes the CQEs written so far (if no other thread is): checks their order, records
    /// the first error, raises CONS to `wqe_counter + 1` and publishes the CQ consumer index.
    pub fn poll(&self) {
        let Ok(mut p) = self.poller.try_lock() else {
            return;
        };
        while let Some(c) = read_cqe(self.q.cq(), p.ci) {
            p.ci += 1;
            p.cqes += 1;
            if let Some(prev) = p.last {
                let ahead = c.wqe_counter.wrapping_sub(prev);
                if (ahead == 0 || ahead >= 0x8000) && p.error.is_none() {
                    p.error = Some(WqeError::CqeOutOfOrder {
                        previous: prev,
                        found: c.wqe_counter,
                    });
                }
            }
            p.last = Some(c.wqe_counter);
            if c.is_error() && p.error.is_none() {
                p.error = Some(WqeError::Completion {
                    syndrome: c.syndrome,
                    vendor: c.vendor_syndrome,
                    wqe_counter: c.wqe_counter,
                });
            }
            let cons = self.q.control(CONS);
            let have = cons.load(Ordering::Acquire);
            let next = c.wqe_counter.wrapping_add(1).wrapping_sub(have as u16);
            if usize::from(next) <= self.q.layout.nwqes {
                cons.fetch_max(have + u64::from(next), Ordering::AcqRel);
            }
            let ci = ((p.ci & 0x00ff_ffff) as u32).to_be_bytes();
            let word = u64::from_ne_bytes([ci[0], ci[1], ci[2], ci[3], 0, 0, 0, 0]);
            self.q.control(CQ_DBR).store(word, Ordering::Release);
        }
    }
}
