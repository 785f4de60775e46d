//! 64-byte completion-queue entries (`mlx5_cqe64` / `mlx5_err_cqe` in rdma-core's `mlx5dv.h`)
//! as a requester sees them, their writer and their reader.
//!
//! Offsets used (big-endian fields): `byte_cnt`@44 (be32), `vendor_err_synd`@54,
//! `syndrome`@55, `sop_drop_qpn` / `s_wqe_opcode_qpn`@56 (be32: the WQE's send opcode << 24 |
//! QP number), `wqe_counter`@60 (be16: the completed WQE's first WQEBB), `signature`@62,
//! `op_own`@63 (CQE opcode << 4 | format << 2 | SE << 1 | owner). The rest is zero here.
//!
//! Owner bit (normal, non-collapsed CQ): entry `n` is valid when its opcode is not
//! `MLX5_CQE_INVALID` and its owner bit equals `(n / ncqes) & 1`; the ring starts as all 0xFF
//! bytes (opcode 15, owner 1), so nothing is valid on the first pass until written.
//! The writer stores the first 56 bytes, then the last 8 (`sop_drop_qpn`, `wqe_counter`,
//! `signature`, `op_own`) as one 64-bit release store, so a poller never sees a torn CQE.

use std::sync::atomic::{AtomicU64, Ordering};

use super::CQE_BYTES;

/// CQE opcodes (`MLX5_CQE_*`, `op_own >> 4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqeOpcode {
    /// `MLX5_CQE_REQ` (0): a send WQE completed.
    Req,
    /// `MLX5_CQE_REQ_ERR` (13): a send WQE failed (or was flushed).
    ReqErr,
    /// `MLX5_CQE_INVALID` (15): the entry has not been written.
    Invalid,
}

impl CqeOpcode {
    /// The 4-bit opcode.
    pub fn code(self) -> u8 {
        match self {
            CqeOpcode::Req => 0,
            CqeOpcode::ReqErr => 13,
            CqeOpcode::Invalid => 15,
        }
    }
}

/// Error syndromes (`MLX5_CQE_SYNDROME_*`, byte 55 of an error CQE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// 0x01: local length error (a length the QP cannot take).
    LocalLength,
    /// 0x02: local QP operation error (a malformed WQE).
    LocalQpOp,
    /// 0x04: local protection error (a bad lkey or a local address outside it).
    LocalProt,
    /// 0x05: work request flushed (the QP was already in error).
    WrFlush,
    /// 0x12: remote invalid request.
    RemoteInvalidRequest,
    /// 0x13: remote access error (a bad rkey or a remote address outside it).
    RemoteAccess,
    /// 0x14: remote operation error.
    RemoteOp,
    /// 0x15: transport retry counter exceeded (the peer is gone).
    TransportRetryExceeded,
}

impl Syndrome {
    /// The syndrome byte.
    pub fn code(self) -> u8 {
        match self {
            Syndrome::LocalLength => 0x01,
            Syndrome::LocalQpOp => 0x02,
            Syndrome::LocalProt => 0x04,
            Syndrome::WrFlush => 0x05,
            Syndrome::RemoteInvalidRequest => 0x12,
            Syndrome::RemoteAccess => 0x13,
            Syndrome::RemoteOp => 0x14,
            Syndrome::TransportRetryExceeded => 0x15,
        }
    }

    /// The syndrome with byte `code`, if it is one of these.
    pub fn from_code(code: u8) -> Option<Syndrome> {
        [
            Syndrome::LocalLength,
            Syndrome::LocalQpOp,
            Syndrome::LocalProt,
            Syndrome::WrFlush,
            Syndrome::RemoteInvalidRequest,
            Syndrome::RemoteAccess,
            Syndrome::RemoteOp,
            Syndrome::TransportRetryExceeded,
        ]
        .into_iter()
        .find(|s| s.code() == code)
    }

    /// rdma-core's name for a syndrome byte (`"unknown"` for others).
    pub fn name(code: u8) -> &'static str {
        match Syndrome::from_code(code) {
            Some(Syndrome::LocalLength) => "LOCAL_LENGTH_ERR",
            Some(Syndrome::LocalQpOp) => "LOCAL_QP_OP_ERR",
            Some(Syndrome::LocalProt) => "LOCAL_PROT_ERR",
            Some(Syndrome::WrFlush) => "WR_FLUSH_ERR",
            Some(Syndrome::RemoteInvalidRequest) => "REMOTE_INVAL_REQ_ERR",
            Some(Syndrome::RemoteAccess) => "REMOTE_ACCESS_ERR",
            Some(Syndrome::RemoteOp) => "REMOTE_OP_ERR",
            Some(Syndrome::TransportRetryExceeded) => "TRANSPORT_RETRY_EXC_ERR",
            None => "unknown",
        }
    }
}

/// One requester CQE's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cqe {
    /// The CQE opcode (`op_own >> 4`).
    pub opcode: u8,
    /// The owner bit.
    pub owner: bool,
    /// The completed WQE's index (its first WQEBB).
    pub wqe_counter: u16,
    /// The WQE's send opcode (`sop_drop_qpn >> 24`).
    pub wqe_opcode: u8,
    /// The QP number (`sop_drop_qpn & 0xffffff`).
    pub qpn: u32,
    /// Bytes transferred (reads and atomics; writes report their length too here).
    pub byte_cnt: u32,
    /// The error syndrome (zero in a successful CQE).
    pub syndrome: u8,
    /// The vendor syndrome (zero in a successful CQE).
    pub vendor_syndrome: u8,
}

/// The owner bit of CQE number `index` in a ring of `ncqes` (a ring of none: `false`).
pub fn owner_of(index: u64, ncqes: usize) -> bool {
    index
        .checked_div(ncqes as u64)
        .is_some_and(|pass| pass & 1 == 1)
}

impl Cqe {
    /// A successful requester CQE.
    pub fn success(wqe_opcode: u8, qpn: u32, wqe_counter: u16, byte_cnt: u32) -> Cqe {
        Cqe {
            opcode: CqeOpcode::Req.code(),
            owner: false,
            wqe_counter,
            wqe_opcode,
            qpn,
            byte_cnt,
            syndrome: 0,
            vendor_syndrome: 0,
        }
    }

    /// An error CQE (`MLX5_CQE_REQ_ERR`) with `syndrome`.
    pub fn error(
        syndrome: Syndrome,
        vendor: u8,
        wqe_opcode: u8,
        qpn: u32,
        wqe_counter: u16,
    ) -> Cqe {
        Cqe {
            opcode: CqeOpcode::ReqErr.code(),
            syndrome: syndrome.code(),
            vendor_syndrome: vendor,
            ..Cqe::success(wqe_opcode, qpn, wqe_counter, 0)
        }
    }

    /// Whether this is an error CQE.
    pub fn is_error(&self) -> bool {
        self.opcode == CqeOpcode::ReqErr.code()
    }

    /// The 64 bytes, with this CQE's owner bit.
    pub fn to_bytes(&self) -> [u8; CQE_BYTES] {
        let mut b = [0u8; CQE_BYTES];
        if !self.is_error() {
            b[44..48].copy_from_slice(&self.byte_cnt.to_be_bytes());
        }
        b[54] = self.vendor_syndrome;
        b[55] = self.syndrome;
        let sop = u32::from(self.wqe_opcode) << 24 | (self.qpn & 0x00ff_ffff);
        b[56..60].copy_from_slice(&sop.to_be_bytes());
        b[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[63] = self.opcode << 4 | u8::from(self.owner);
        b
    }

    /// Parses 64 CQE bytes (the error fields only when the opcode says error).
    pub fn parse(b: &[u8; CQE_BYTES]) -> Cqe {
        let sop = u32::from_be_bytes([b[56], b[57], b[58], b[59]]);
        let opcode = b[63] >> 4;
        let error = opcode == CqeOpcode::ReqErr.code();
        Cqe {
            opcode,
            owner: b[63] & 1 == 1,
            wqe_counter: u16::from_be_bytes([b[60], b[61]]),
            wqe_opcode: (sop >> 24) as u8,
            qpn: sop & 0x00ff_ffff,
            byte_cnt: u32::from_be_bytes([b[44], b[45], b[46], b[47]]),
            syndrome: if error { b[55] } else { 0 },
            vendor_syndrome: if error { b[54] } else { 0 },
        }
    }
}

/// Words of one CQE in a CQ ring; `None` for a ring shorter than one CQE.
fn entry(ring: &[AtomicU64], index: u64) -> Option<&[AtomicU64; 8]> {
    let ncqes = ring.len() / 8;
    let slot = index.checked_rem(ncqes as u64)? as usize;
    ring.get(slot * 8..slot * 8 + 8)?.try_into().ok()
}

/// Writes `cqe` as CQE number `index` of `ring` (ncqes × 8 words), with the owner bit of that
/// index: the body first, then the last 8 bytes in one release store. A ring shorter than
/// one CQE holds none: nothing is written.
pub fn write_cqe(ring: &[AtomicU64], index: u64, cqe: &Cqe) {
    let ncqes = ring.len() / 8;
    let bytes = Cqe {
        owner: owner_of(index, ncqes),
        ..*cqe
    }
    .to_bytes();
    let Some(words) = entry(ring, index) else {
        return;
    };
    for (w, chunk) in words.iter().zip(bytes.chunks_exact(8)).take(7) {
        w.store(
            u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8])),
            Ordering::Relaxed,
        );
    }
    let last = u64::from_ne_bytes(bytes[56..].try_into().unwrap_or([0; 8]));
    words[7].store(last, Ordering::Release);
}

/// Reads CQE number `index` of `ring` if it has been written on this pass (opcode valid,
/// owner bit matching); `None` while it is not there yet, and from a ring shorter than one
/// CQE.
pub fn read_cqe(ring: &[AtomicU64], index: u64) -> Option<Cqe> {
    let ncqes = ring.len() / 8;
    let words = entry(ring, index)?;
    let last = words[7].load(Ordering::Acquire).to_ne_bytes();
    let op_own = last[7];
    if op_own >> 4 == CqeOpcode::Invalid.code() || (op_own & 1 == 1) != owner_of(index, ncqes) {
        return None;
    }
    let mut b = [0u8; CQE_BYTES];
    for (w, chunk) in words.iter().zip(b.chunks_exact_mut(8)).take(7) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    b[56..].copy_from_slice(&last);
    Some(Cqe::parse(&b))
}

/// Fills a CQ ring with 0xFF bytes: every entry invalid, owner 1.
pub fn init_cq(ring: &[AtomicU64]) {
    for w in ring {
        w.store(u64::MAX, Ordering::Relaxed);
    }
}
