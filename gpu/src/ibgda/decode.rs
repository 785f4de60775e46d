//! Reading a send WQE back from its ring, byte for byte: every field is checked (index, QP
//! number, opcode and opmod, `ds` against the opcode's segments, flags, reserved bytes, the
//! inline bit, lengths, atomic alignment), and the result is the request as data.
//!
//! This is the CPU NIC handler's decoder, and the proof that the encoders (Rust here, C in
//! `device/ibgda.cuh`) write what they mean. Errors are typed ([`WqeError`]); each maps onto the
//! CQE syndrome a ConnectX would report ([`WqeError::syndrome`]).

use std::fmt;

use super::cqe::Syndrome;
use super::wqe::{wqebbs_of, AtomicOp, Fence, Width, WorkRequest, WqeFlags, MAX_INLINE, MAX_QPN};
use super::{ctrl_flags, opcode, INLINE_SEG, MAX_WQEBBS, SEG, WQEBB};

/// Why a WQE (or a queue operation) was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WqeError {
    /// A ring that is not a power of two of 64-byte WQEBBs (or too small for the WQE).
    BadRing {
        /// The ring's size in bytes.
        bytes: usize,
    },
    /// A QP number over 24 bits.
    QpnTooLarge {
        /// The QP number.
        qpn: u32,
    },
    /// A data length of zero or with the inline bit set.
    BadLength {
        /// The length.
        len: u32,
    },
    /// An inline write of no bytes or more than [`MAX_INLINE`].
    BadInlineLength {
        /// The length.
        len: usize,
    },
    /// An atomic operand with bits above its width.
    OperandTooWide {
        /// The operand.
        value: u64,
    },
    /// A base (unmasked) atomic at 4 bytes: mlx5 has those only at 8.
    UnsupportedWidth,
    /// An atomic whose remote address is not aligned to its width.
    MisalignedAtomic {
        /// The remote address.
        remote: u64,
    },
    /// The control segment's `wqe_index` is not the consumer index.
    IndexMismatch {
        /// The consumer index.
        expected: u16,
        /// The index in the WQE.
        found: u16,
    },
    /// The control segment names another QP.
    QpnMismatch {
        /// This QP.
        expected: u32,
        /// The QP number in the WQE.
        found: u32,
    },
    /// An opcode this decoder does not execute.
    UnknownOpcode {
        /// The opcode.
        opcode: u8,
    },
    /// An opmod the opcode does not take.
    BadOpmod {
        /// The opcode.
        opcode: u8,
        /// The opmod.
        opmod: u8,
    },
    /// A segment count that does not match the opcode's segments.
    BadDs {
        /// The opcode.
        opcode: u8,
        /// The `ds` found.
        ds: u8,
    },
    /// A reserved (or, for this opcode, unused) byte that is not zero, at this offset in the WQE.
    Reserved {
        /// Byte offset from the WQE's start.
        offset: usize,
    },
    /// An `fm_ce_se` byte with an unknown fence mode, CE value, SE or reserved bit.
    BadFlags {
        /// The byte.
        fm_ce_se: u8,
    },
    /// A data segment whose inline bit is wrong for its place.
    InlineBit {
        /// Byte offset of the segment in the WQE.
        offset: usize,
    },
    /// The WQE claims more WQEBBs than the producer has published.
    BeyondProducer {
        /// The WQE's index.
        index: u16,
        /// WQEBBs the WQE claims.
        wqebbs: usize,
        /// WQEBBs published from it on.
        available: u16,
    },
    /// A queue whose sizes break the layout's rules.
    BadLayout(&'static str),
    /// `complete` for an index that is not the oldest WQE in flight.
    NotInFlight {
        /// The index given.
        index: u16,
    },
    /// The CQ has no room: its poller fell `ncqes` CQEs behind.
    CqOverrun,
    /// A CQE whose `wqe_counter` does not follow the previous one.
    CqeOutOfOrder {
        /// The previous CQE's counter.
        previous: u16,
        /// This CQE's counter.
        found: u16,
    },
    /// A wait on the queue (ring space, publishing order, quiet) ran past its timeout.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: std::time::Duration,
    },
    /// An error CQE: the WQE at `wqe_counter` failed (and the QP is in error).
    Completion {
        /// The CQE's syndrome.
        syndrome: u8,
        /// The vendor syndrome.
        vendor: u8,
        /// The failed WQE's index.
        wqe_counter: u16,
    },
}

impl WqeError {
    /// The CQE syndrome a ConnectX reports for a WQE refused this way.
    pub fn syndrome(&self) -> Syndrome {
        match self {
            WqeError::BadLength { .. } | WqeError::BadInlineLength { .. } => Syndrome::LocalLength,
            WqeError::MisalignedAtomic { .. } => Syndrome::RemoteInvalidRequest,
            _ => Syndrome::LocalQpOp,
        }
    }
}

impl fmt::Display for WqeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WqeError::BadRing { bytes } => write!(f, "a send queue of {bytes} bytes is not a power of two of 64-byte WQEBBs large enough"),
            WqeError::QpnTooLarge { qpn } => write!(f, "QP number {qpn:#x} has more than 24 bits"),
            WqeError::BadLength { len } => write!(f, "data length {len:#x} is zero or has the inline bit"),
            WqeError::BadInlineLength { len } => write!(f, "inline length {len} is not in 1..={MAX_INLINE}"),
            WqeError::OperandTooWide { value } => write!(f, "atomic operand {value:#x} is wider than the operation"),
            WqeError::UnsupportedWidth => write!(f, "mlx5 has unmasked atomics only on 8 bytes"),
            WqeError::MisalignedAtomic { remote } => write!(f, "atomic at {remote:#x} is not aligned to its width"),
            WqeError::IndexMismatch { expected, found } => write!(f, "WQE index {found} where {expected} was expected"),
            WqeError::QpnMismatch { expected, found } => write!(f, "WQE for QP {found:#x} on QP {expected:#x}"),
            WqeError::UnknownOpcode { opcode } => write!(f, "unknown send opcode {opcode:#x}"),
            WqeError::BadOpmod { opcode, opmod } => write!(f, "opmod {opmod:#x} is invalid for opcode {opcode:#x}"),
            WqeError::BadDs { opcode, ds } => write!(f, "ds {ds} does not fit opcode {opcode:#x}"),
            WqeError::Reserved { offset } => write!(f, "reserved byte {offset} of the WQE is not zero"),
            WqeError::BadFlags { fm_ce_se } => write!(f, "fm_ce_se {fm_ce_se:#04x} is invalid"),
            WqeError::InlineBit { offset } => write!(f, "the data segment at byte {offset} has the wrong inline bit"),
            WqeError::BeyondProducer { index, wqebbs, available } => write!(f, "WQE {index} takes {wqebbs} WQEBBs but {available} are published"),
            WqeError::BadLayout(why) => write!(f, "bad send queue layout: {why}"),
            WqeError::NotInFlight { index } => write!(f, "WQE {index} is not the oldest in flight"),
            WqeError::CqOverrun => write!(f, "the completion queue is full"),
            WqeError::CqeOutOfOrder { previous, found } => write!(f, "CQE for WQE {found} after one for {previous}"),
            WqeError::Timeout { what, after } => write!(f, "waiting for {what} timed out after {after:?}"),
            WqeError::Completion { syndrome, vendor, wqe_counter } => write!(f, "WQE {wqe_counter} failed: syndrome {syndrome:#x} ({}), vendor syndrome {vendor:#x}", Syndrome::name(*syndrome)),
        }
    }
}

impl std::error::Error for WqeError {}

impl From<WqeError> for ferroshmem_runtime::Error {
    fn from(e: WqeError) -> Self {
        match e {
            WqeError::Timeout { what, after } => ferroshmem_runtime::Error::Timeout {
                operation: what,
                after,
            },
            other => ferroshmem_runtime::Error::InvalidArgument(other.to_string()),
        }
    }
}

/// A send queue's WQEBBs, wherever they live.
pub trait Ring {
    /// WQEBBs in the ring (a power of two).
    fn nwqebbs(&self) -> usize;
    /// Copies WQEBB number `slot` (< [`nwqebbs`](Ring::nwqebbs)) into `out`.
    fn read_wqebb(&self, slot: usize, out: &mut [u8]);
}

impl Ring for [u8] {
    fn nwqebbs(&self) -> usize {
        self.len() / WQEBB
    }

    fn read_wqebb(&self, slot: usize, out: &mut [u8]) {
        out.copy_from_slice(&self[slot * WQEBB..(slot + 1) * WQEBB]);
    }
}

/// A decoded WQE: the request, its flags and its place in the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedWqe {
    /// The WQE's index (its first WQEBB), as in the control segment.
    pub index: u16,
    /// The send opcode.
    pub opcode: u8,
    /// The control segment's `ds`.
    pub ds: u8,
    /// WQEBBs taken.
    pub wqebbs: usize,
    /// Signaled / fence.
    pub flags: WqeFlags,
    /// The request.
    pub request: WorkRequest,
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn be64(b: &[u8], off: usize) -> u64 {
    u64::from(be32(b, off)) << 32 | u64::from(be32(b, off + 4))
}

fn zero(b: &[u8], range: std::ops::Range<usize>) -> Result<(), WqeError> {
    match b[range.clone()].iter().position(|&x| x != 0) {
        Some(i) => Err(WqeError::Reserved {
            offset: range.start + i,
        }),
        None => Ok(()),
    }
}

fn flags(fm_ce_se: u8) -> Result<WqeFlags, WqeError> {
    let bad = WqeError::BadFlags { fm_ce_se };
    if fm_ce_se & (ctrl_flags::RESERVED | ctrl_flags::SOLICITED) != 0 {
        return Err(bad);
    }
    let ce = fm_ce_se & ctrl_flags::CE_MASK;
    if ce != 0 && ce != ctrl_flags::CQ_UPDATE {
        return Err(bad);
    }
    let fence = Fence::from_mode((fm_ce_se & ctrl_flags::FM_MASK) >> 5).ok_or(bad)?;
    Ok(WqeFlags {
        signaled: ce == ctrl_flags::CQ_UPDATE,
        fence,
    })
}

/// The control segment's fields: (opmod, index, opcode, qpn, ds).
fn ctrl_fields(b: &[u8]) -> (u8, u16, u8, u32, u8) {
    let w0 = be32(b, 0);
    let w1 = be32(b, 4);
    (
        (w0 >> 24) as u8,
        (w0 >> 8) as u16,
        w0 as u8,
        w1 >> 8,
        w1 as u8,
    )
}

/// The `ds` an opcode's WQE must have, from its first WQEBB (`None`: NOP, any ds in one WQEBB).
fn expected_ds(b: &[u8], opc: u8, opmod: u8) -> Result<Option<u8>, WqeError> {
    let masked = matches!(opc, opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA);
    let opmod_ok = if masked {
        opmod == Width::W4.opmod() || opmod == Width::W8.opmod()
    } else {
        opmod == 0
    };
    if !opmod_ok {
        return Err(WqeError::BadOpmod { opcode: opc, opmod });
    }
    Ok(match opc {
        opcode::NOP => None,
        opcode::RDMA_WRITE if be32(b, 2 * SEG) & INLINE_SEG != 0 => {
            let len = (be32(b, 2 * SEG) & !INLINE_SEG) as usize;
            if len == 0 || len > MAX_INLINE {
                return Err(WqeError::BadInlineLength { len });
            }
            Some((2 + (4 + len).div_ceil(SEG)) as u8)
        }
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => Some(3),
        opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_FA => Some(4),
        opcode::ATOMIC_MASKED_CS if opmod == Width::W8.opmod() => Some(5),
        opcode::ATOMIC_MASKED_CS => Some(4),
        other => return Err(WqeError::UnknownOpcode { opcode: other }),
    })
}

/// Decodes the WQE at consumer index `index` of QP `qpn` from `ring`.
pub fn decode<R: Ring + ?Sized>(ring: &R, index: u16, qpn: u32) -> Result<DecodedWqe, WqeError> {
    let n = ring.nwqebbs();
    if !n.is_power_of_two() || qpn > MAX_QPN {
        return Err(WqeError::BadRing { bytes: n * WQEBB });
    }
    let mut b = [0u8; MAX_WQEBBS * WQEBB];
    let slot = |bb: usize| (usize::from(index) + bb) & (n - 1);
    ring.read_wqebb(slot(0), &mut b[..WQEBB]);
    let (opmod, found, opc, found_qpn, ds) = ctrl_fields(&b);
    if found != index {
        return Err(WqeError::IndexMismatch {
            expected: index,
            found,
        });
    }
    if found_qpn != qpn {
        return Err(WqeError::QpnMismatch {
            expected: qpn,
            found: found_qpn,
        });
    }
    let ds_ok = match expected_ds(&b, opc, opmod)? {
        None => (1..=4).contains(&ds),
        Some(want) => ds == want,
    };
    let wqebbs = wqebbs_of(ds);
    if !ds_ok || wqebbs > n {
        return Err(WqeError::BadDs { opcode: opc, ds });
    }
    for bb in 1..wqebbs {
        ring.read_wqebb(slot(bb), &mut b[bb * WQEBB..(bb + 1) * WQEBB]);
    }
    zero(&b, 8..11)?;
    if opc != opcode::RDMA_WRITE_IMM {
        zero(&b, 12..16)?;
    }
    let request = request(&b, opc, opmod, ds)?;
    Ok(DecodedWqe {
        index,
        opcode: opc,
        ds,
        wqebbs,
        flags: flags(b[11])?,
        request,
    })
}

/// (remote, rkey) of the remote-address segment, checking its reserved word.
fn raddr(b: &[u8]) -> Result<(u64, u32), WqeError> {
    zero(b, SEG + 12..2 * SEG)?;
    Ok((be64(b, SEG), be32(b, SEG + 8)))
}

/// (byte_count, lkey, addr) of the pointer data segment at `off`.
fn data(b: &[u8], off: usize) -> Result<(u32, u32, u64), WqeError> {
    let bc = be32(b, off);
    if bc & INLINE_SEG != 0 {
        return Err(WqeError::InlineBit { offset: off });
    }
    if bc == 0 {
        return Err(WqeError::BadLength { len: bc });
    }
    Ok((bc, be32(b, off + 4), be64(b, off + 8)))
}

fn request(b: &[u8], opc: u8, opmod: u8, ds: u8) -> Result<WorkRequest, WqeError> {
    if opc == opcode::NOP {
        return Ok(WorkRequest::Nop);
    }
    let (remote, rkey) = raddr(b)?;
    let inline = be32(b, 2 * SEG) & INLINE_SEG != 0;
    match opc {
        opcode::RDMA_WRITE if inline => {
            let len = (be32(b, 2 * SEG) & !INLINE_SEG) as usize;
            let start = 2 * SEG + 4;
            zero(b, start + len..usize::from(ds) * SEG)?;
            Ok(WorkRequest::WriteInline {
                data: b[start..start + len].to_vec(),
                remote,
                rkey,
            })
        }
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => {
            let (len, lkey, local) = data(b, 2 * SEG)?;
            Ok(match opc {
                opcode::RDMA_WRITE => WorkRequest::Write {
                    local,
                    lkey,
                    remote,
                    rkey,
                    len,
                },
                opcode::RDMA_READ => WorkRequest::Read {
                    local,
                    lkey,
                    remote,
                    rkey,
                    len,
                },
                _ => WorkRequest::WriteImm {
                    local,
                    lkey,
                    remote,
                    rkey,
                    len,
                    imm: be32(b, 12),
                },
            })
        }
        _ => atomic(b, opc, opmod, remote, rkey),
    }
}

fn atomic(b: &[u8], opc: u8, opmod: u8, remote: u64, rkey: u32) -> Result<WorkRequest, WqeError> {
    let width = if opmod == Width::W4.opmod() {
        Width::W4
    } else {
        Width::W8
    };
    let a = 2 * SEG;
    let (op, data_at) = match (opc, width) {
        (opcode::ATOMIC_FA, _) => {
            zero(b, a + 8..a + 16)?;
            (AtomicOp::FetchAdd { add: be64(b, a) }, 3 * SEG)
        }
        (opcode::ATOMIC_CS, _) => {
            let (swap, compare) = (be64(b, a), be64(b, a + 8));
            (AtomicOp::CompareSwap { compare, swap }, 3 * SEG)
        }
        (opcode::ATOMIC_MASKED_FA, Width::W4) => {
            zero(b, a + 8..a + 16)?;
            let (add, field_boundary) = (be32(b, a).into(), be32(b, a + 4).into());
            let op = AtomicOp::MaskedFetchAdd {
                add,
                field_boundary,
            };
            (op, 3 * SEG)
        }
        (opcode::ATOMIC_MASKED_FA, Width::W8) => {
            let (add, field_boundary) = (be64(b, a), be64(b, a + 8));
            let op = AtomicOp::MaskedFetchAdd {
                add,
                field_boundary,
            };
            (op, 3 * SEG)
        }
        (_, Width::W4) => {
            let f = |i: usize| u64::from(be32(b, a + 4 * i));
            let op = AtomicOp::MaskedCompareSwap {
                swap: f(0),
                compare: f(1),
                swap_mask: f(2),
                compare_mask: f(3),
            };
            (op, 3 * SEG)
        }
        (_, Width::W8) => {
            let f = |i: usize| be64(b, a + 8 * i);
            let op = AtomicOp::MaskedCompareSwap {
                swap: f(0),
                compare: f(1),
                swap_mask: f(2),
                compare_mask: f(3),
            };
            (op, WQEBB)
        }
    };
    let (bc, lkey, result) = data(b, data_at)?;
    if bc != width.bytes() {
        return Err(WqeError::BadLength { len: bc });
    }
    if remote % u64::from(width.bytes()) != 0 {
        return Err(WqeError::MisalignedAtomic { remote });
    }
    Ok(WorkRequest::Atomic {
        op,
        width,
        remote,
        rkey,
        result,
        lkey,
    })
}
