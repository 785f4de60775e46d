//! Send work requests as data ([`WorkRequest`]) and their mlx5 encoding, byte for byte as the
//! GPU writes them into an RC send queue.
//!
//! Segment layouts (all fields big-endian; offsets inside the 16-byte segment):
//!
//! | segment (rdma-core name) | layout |
//! |---|---|
//! | control `mlx5_wqe_ctrl_seg` | `opmod_idx_opcode`@0 = opmod<<24 \| wqe_index<<8 \| opcode, `qpn_ds`@4 = qpn<<8 \| ds, `signature`@8, `dci_stream_channel_id`@9 (be16), `fm_ce_se`@11, `imm`@12 |
//! | remote address `mlx5_wqe_raddr_seg` | `raddr`@0 (be64), `rkey`@8, `reserved`@12 |
//! | data pointer `mlx5_wqe_data_seg` | `byte_count`@0, `lkey`@4, `addr`@8 (be64) |
//! | inline `mlx5_wqe_inl_data_seg` | `byte_count | MLX5_INLINE_SEG`@0, then the bytes, padded to 16 |
//! | atomic `mlx5_wqe_atomic_seg` | `swap_add`@0 (be64), `compare`@8 (be64) |
//! | masked FA, 4 B | `add_data`@0, `field_boundary`@4, reserved 8 B |
//! | masked FA, 8 B | `add_data`@0 (be64), `field_boundary`@8 (be64) |
//! | masked CS, 4 B | `swap_data`@0, `compare_data`@4, `swap_mask`@8, `compare_mask`@12 |
//! | masked CS, 8 B | two segments: `{swap, compare}` then `{swap_mask, compare_mask}` (be64 each) |
//!
//! WQE shapes (RC, so no address vector): NOP = ctrl + one unused segment (ds 2, as NVSHMEM's
//! `ibgda_write_nop_wqe`); WRITE / WRITE_IMM / READ = ctrl + raddr + data (ds 3); inline WRITE =
//! ctrl + raddr + inline (ds 2 + ⌈(4 + len) / 16⌉); atomics = ctrl + raddr + atomic + data (ds 4),
//! except the 8-byte masked CS with its second (mask) segment (ds 5, two WQEBBs). The data
//! segment of an atomic names the local buffer that receives the old value.

use super::decode::WqeError;
use super::{ctrl_flags, opcode, EXT_AMO_OPMOD_4, EXT_AMO_OPMOD_8, INLINE_SEG, MAX_WQEBBS};
use super::{SEG, WQEBB};

/// Most bytes an inline write carries here: a WQE of [`MAX_WQEBBS`] less ctrl, raddr and the
/// inline header.
pub const MAX_INLINE: usize = MAX_WQEBBS * WQEBB - 2 * SEG - 4;
/// Largest QP number (24 bits).
pub const MAX_QPN: u32 = 0x00ff_ffff;

/// Operand width of an atomic: the mlx5 extended atomics take 4 or 8 bytes; the base ones 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// 4-byte operands (extended-atomic opmod 0x08).
    W4,
    /// 8-byte operands (extended-atomic opmod 0x09).
    W8,
}

impl Width {
    /// The operand size in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            Width::W4 => 4,
            Width::W8 => 8,
        }
    }

    /// The width of `bytes` bytes, if it is one.
    pub fn of(bytes: usize) -> Option<Width> {
        match bytes {
            4 => Some(Width::W4),
            8 => Some(Width::W8),
            _ => None,
        }
    }

    /// All ones at this width.
    pub fn mask(self) -> u64 {
        match self {
            Width::W4 => u64::from(u32::MAX),
            Width::W8 => u64::MAX,
        }
    }

    /// The extended-atomic opmod that selects this width.
    pub fn opmod(self) -> u8 {
        match self {
            Width::W4 => EXT_AMO_OPMOD_4,
            Width::W8 => EXT_AMO_OPMOD_8,
        }
    }
}

/// An atomic operation as the NIC executes it (operands at the request's [`Width`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `ATOMIC_FA` (8 bytes only): `new = old + add`.
    FetchAdd {
        /// The addend.
        add: u64,
    },
    /// `ATOMIC_CS` (8 bytes only): `new = if old == compare { swap } else { old }`.
    CompareSwap {
        /// The value compared with the old one.
        compare: u64,
        /// The value stored when they are equal.
        swap: u64,
    },
    /// `ATOMIC_MASKED_FA`: an add whose carries stop at every bit set in `field_boundary`
    /// (all ones makes it XOR, zero a plain add).
    MaskedFetchAdd {
        /// The addend.
        add: u64,
        /// Bits after which no carry propagates.
        field_boundary: u64,
    },
    /// `ATOMIC_MASKED_CS`: when `old & compare_mask == compare & compare_mask`, the bits of
    /// `swap_mask` take `swap`'s: `new = (old & !swap_mask) | (swap & swap_mask)`.
    MaskedCompareSwap {
        /// The value whose masked bits are stored.
        swap: u64,
        /// The value compared under `compare_mask`.
        compare: u64,
        /// Which bits are stored.
        swap_mask: u64,
        /// Which bits are compared (zero: always succeeds).
        compare_mask: u64,
    },
}

/// The control segment's fence mode (FM, `fm_ce_se` bits 7:5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fence {
    /// No fence (0).
    #[default]
    None,
    /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` (1).
    InitiatorSmall,
    /// Fence (2): wait for earlier RDMA reads and atomics.
    Fence,
    /// Strong ordering (3).
    StrongOrdering,
    /// `MLX5_WQE_CTRL_FENCE` (4): fence and initiator small fence.
    FenceAndInitiatorSmall,
}

impl Fence {
    /// The FM value (before shifting into place).
    pub fn mode(self) -> u8 {
        match self {
            Fence::None => 0,
            Fence::InitiatorSmall => 1,
            Fence::Fence => 2,
            Fence::StrongOrdering => 3,
            Fence::FenceAndInitiatorSmall => 4,
        }
    }

    /// The fence mode with FM value `fm`, if it is one.
    pub fn from_mode(fm: u8) -> Option<Fence> {
        Some(match fm {
            0 => Fence::None,
            1 => Fence::InitiatorSmall,
            2 => Fence::Fence,
            3 => Fence::StrongOrdering,
            4 => Fence::FenceAndInitiatorSmall,
            _ => return None,
        })
    }
}

/// Per-WQE flags carried in `fm_ce_se`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WqeFlags {
    /// CQ update requested (`MLX5_WQE_CTRL_CQ_UPDATE`): a CQE is written on success too.
    pub signaled: bool,
    /// The fence mode.
    pub fence: Fence,
}

impl WqeFlags {
    /// Signaled, no fence.
    pub const SIGNALED: WqeFlags = WqeFlags {
        signaled: true,
        fence: Fence::None,
    };

    /// The `fm_ce_se` byte.
    pub fn fm_ce_se(self) -> u8 {
        let ce = if self.signaled {
            ctrl_flags::CQ_UPDATE
        } else {
            0
        };
        self.fence.mode() << 5 | ce
    }
}

/// One send work request, as data. Addresses are the NIC's (remote: in the peer's registered
/// region named by `rkey`; local: in a local region named by `lkey`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WorkRequest {
    /// `NOP`: no data effect (padding, or a carrier for a CQ update).
    Nop,
    /// `RDMA_WRITE` of `len` bytes from `local` to `remote`.
    Write {
        /// Local source address.
        local: u64,
        /// Local key.
        lkey: u32,
        /// Remote destination address.
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes (1 ..= 2^31 − 1).
        len: u32,
    },
    /// `RDMA_WRITE` whose bytes travel inside the WQE (1 ..= [`MAX_INLINE`]).
    WriteInline {
        /// The bytes written.
        data: Vec<u8>,
        /// Remote destination address.
        remote: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `RDMA_WRITE_IMM`: a write that also delivers `imm` to the responder.
    WriteImm {
        /// Local source address.
        local: u64,
        /// Local key.
        lkey: u32,
        /// Remote destination address.
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes (1 ..= 2^31 − 1).
        len: u32,
        /// Immediate data (stored big-endian in the control segment's `imm`).
        imm: u32,
    },
    /// `RDMA_READ` of `len` bytes from `remote` into `local`.
    Read {
        /// Local destination address.
        local: u64,
        /// Local key.
        lkey: u32,
        /// Remote source address.
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes (1 ..= 2^31 − 1).
        len: u32,
    },
    /// An atomic on `width` bytes at `remote`; the old value lands at `result`.
    Atomic {
        /// What the NIC does to the remote word.
        op: AtomicOp,
        /// Operand width.
        width: Width,
        /// Remote address (aligned to the width).
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Local address receiving the old value.
        result: u64,
        /// Local key of `result`.
        lkey: u32,
    },
}

/// A WQE encoded linearly (before being placed in a ring): its bytes and its WQEBB count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The WQE's bytes; those past `wqebbs * 64` are zero.
    pub bytes: [u8; MAX_WQEBBS * WQEBB],
    /// WQEBBs taken.
    pub wqebbs: usize,
    /// The control segment's `ds`.
    pub ds: u8,
}

/// Largest length of a pointer data segment (`byte_count` with the inline bit clear).
pub const MAX_LEN: u32 = INLINE_SEG - 1;

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Writes a control segment at the start of `b` (like `mlx5dv_set_ctrl_seg`, with `imm`).
pub fn ctrl_seg(b: &mut [u8], head: (u8, u16, u8), qpn: u32, ds: u8, fm_ce_se: u8, imm: u32) {
    let (opmod, index, opc) = head;
    put32(
        b,
        0,
        u32::from(opmod) << 24 | u32::from(index) << 8 | u32::from(opc),
    );
    put32(b, 4, qpn << 8 | u32::from(ds));
    b[8..11].fill(0);
    b[11] = fm_ce_se;
    put32(b, 12, imm);
}

/// Writes a remote-address segment.
pub fn raddr_seg(b: &mut [u8], raddr: u64, rkey: u32) {
    put64(b, 0, raddr);
    put32(b, 8, rkey);
    put32(b, 12, 0);
}

/// Writes a data-pointer segment (like `mlx5dv_set_data_seg`).
pub fn data_seg(b: &mut [u8], byte_count: u32, lkey: u32, addr: u64) {
    put32(b, 0, byte_count);
    put32(b, 4, lkey);
    put64(b, 8, addr);
}

fn check_len(len: u32) -> Result<(), WqeError> {
    if len == 0 || len > MAX_LEN {
        return Err(WqeError::BadLength { len });
    }
    Ok(())
}

fn check_operand(width: Width, v: u64) -> Result<(), WqeError> {
    if v & !width.mask() != 0 {
        return Err(WqeError::OperandTooWide { value: v });
    }
    Ok(())
}

/// The (opmod, opcode) and ds of an atomic request, validating its operands.
fn atomic_shape(op: &AtomicOp, width: Width) -> Result<(u8, u8, u8), WqeError> {
    let operands: &[u64] = match op {
        AtomicOp::FetchAdd { add } => &[*add],
        AtomicOp::CompareSwap { compare, swap } => &[*compare, *swap],
        AtomicOp::MaskedFetchAdd {
            add,
            field_boundary,
        } => &[*add, *field_boundary],
        AtomicOp::MaskedCompareSwap {
            swap,
            compare,
            swap_mask,
            compare_mask,
        } => &[*swap, *compare, *swap_mask, *compare_mask],
    };
    for v in operands {
        check_operand(width, *v)?;
    }
    match (op, width) {
        (AtomicOp::FetchAdd { .. }, Width::W8) => Ok((0, opcode::ATOMIC_FA, 4)),
        (AtomicOp::CompareSwap { .. }, Width::W8) => Ok((0, opcode::ATOMIC_CS, 4)),
        (AtomicOp::FetchAdd { .. } | AtomicOp::CompareSwap { .. }, Width::W4) => {
            Err(WqeError::UnsupportedWidth)
        }
        (AtomicOp::MaskedFetchAdd { .. }, w) => Ok((w.opmod(), opcode::ATOMIC_MASKED_FA, 4)),
        (AtomicOp::MaskedCompareSwap { .. }, Width::W4) => {
            Ok((EXT_AMO_OPMOD_4, opcode::ATOMIC_MASKED_CS, 4))
        }
        (AtomicOp::MaskedCompareSwap { .. }, Width::W8) => {
            Ok((EXT_AMO_OPMOD_8, opcode::ATOMIC_MASKED_CS, 5))
        }
    }
}

/// Writes an atomic's operand segment(s) at `b` (one segment, two for the 8-byte masked CS).
pub fn atomic_segs(b: &mut [u8], op: &AtomicOp, width: Width) {
    match *op {
        AtomicOp::FetchAdd { add } => {
            put64(b, 0, add);
            put64(b, 8, 0);
        }
        AtomicOp::CompareSwap { compare, swap } => {
            put64(b, 0, swap);
            put64(b, 8, compare);
        }
        AtomicOp::MaskedFetchAdd {
            add,
            field_boundary,
        } => match width {
            Width::W4 => {
                put32(b, 0, add as u32);
                put32(b, 4, field_boundary as u32);
                put64(b, 8, 0);
            }
            Width::W8 => {
                put64(b, 0, add);
                put64(b, 8, field_boundary);
            }
        },
        AtomicOp::MaskedCompareSwap {
            swap,
            compare,
            swap_mask,
            compare_mask,
        } => {
            for (i, v) in [swap, compare, swap_mask, compare_mask]
                .into_iter()
                .enumerate()
            {
                match width {
                    Width::W4 => put32(b, 4 * i, v as u32),
                    Width::W8 => put64(b, 8 * i, v),
                }
            }
        }
    }
}

/// Writes an atomic's segments after the control segment; returns (opmod, opcode, ds).
fn atomic_body(
    b: &mut [u8],
    (op, width): (&AtomicOp, &Width),
    (remote, rkey): (&u64, &u32),
    (result, lkey): (&u64, &u32),
) -> Result<(u8, u8, u8), WqeError> {
    if remote % u64::from(width.bytes()) != 0 {
        return Err(WqeError::MisalignedAtomic { remote: *remote });
    }
    let (opmod, opc, ds) = atomic_shape(op, *width)?;
    raddr_seg(&mut b[SEG..], *remote, *rkey);
    atomic_segs(&mut b[2 * SEG..], op, *width);
    // The data segment follows the operands: segment 3, or the second WQEBB after two.
    let data_at = if ds == 5 { WQEBB } else { 3 * SEG };
    data_seg(&mut b[data_at..], width.bytes(), *lkey, *result);
    Ok((opmod, opc, ds))
}

/// Writes the segments after the control segment; returns (opmod, opcode, ds, imm).
fn body(b: &mut [u8], req: &WorkRequest) -> Result<(u8, u8, u8, u32), WqeError> {
    let rdma = |b: &mut [u8], local, lkey, remote, rkey, len| {
        check_len(len)?;
        raddr_seg(&mut b[SEG..], remote, rkey);
        data_seg(&mut b[2 * SEG..], len, lkey, local);
        Ok::<(), WqeError>(())
    };
    match req {
        WorkRequest::Nop => Ok((0, opcode::NOP, 2, 0)),
        WorkRequest::Write {
            local,
            lkey,
            remote,
            rkey,
            len,
        } => rdma(b, *local, *lkey, *remote, *rkey, *len).map(|_| (0, opcode::RDMA_WRITE, 3, 0)),
        WorkRequest::Read {
            local,
            lkey,
            remote,
            rkey,
            len,
        } => rdma(b, *local, *lkey, *remote, *rkey, *len).map(|_| (0, opcode::RDMA_READ, 3, 0)),
        WorkRequest::WriteImm {
            local,
            lkey,
            remote,
            rkey,
            len,
            imm,
        } => rdma(b, *local, *lkey, *remote, *rkey, *len)
            .map(|_| (0, opcode::RDMA_WRITE_IMM, 3, *imm)),
        WorkRequest::WriteInline { data, remote, rkey } => {
            if data.is_empty() || data.len() > MAX_INLINE {
                return Err(WqeError::BadInlineLength { len: data.len() });
            }
            raddr_seg(&mut b[SEG..], *remote, *rkey);
            put32(b, 2 * SEG, data.len() as u32 | INLINE_SEG);
            b[2 * SEG + 4..2 * SEG + 4 + data.len()].copy_from_slice(data);
            let ds = 2 + (4 + data.len()).div_ceil(SEG);
            Ok((0, opcode::RDMA_WRITE, ds as u8, 0))
        }
        WorkRequest::Atomic {
            op,
            width,
            remote,
            rkey,
            result,
            lkey,
        } => atomic_body(b, (op, width), (remote, rkey), (result, lkey))
            .map(|(opmod, opc, ds)| (opmod, opc, ds, 0)),
    }
}

/// Encodes `req` as WQE number `index` of QP `qpn`, linearly.
pub fn encode_linear(
    req: &WorkRequest,
    flags: WqeFlags,
    index: u16,
    qpn: u32,
) -> Result<Encoded, WqeError> {
    if qpn > MAX_QPN {
        return Err(WqeError::QpnTooLarge { qpn });
    }
    let mut b = [0u8; MAX_WQEBBS * WQEBB];
    let (opmod, opc, ds, imm) = body(&mut b, req)?;
    ctrl_seg(&mut b, (opmod, index, opc), qpn, ds, flags.fm_ce_se(), imm);
    Ok(Encoded {
        bytes: b,
        wqebbs: wqebbs_of(ds),
        ds,
    })
}

/// WQEBBs taken by a WQE of `ds` segments.
pub fn wqebbs_of(ds: u8) -> usize {
    (usize::from(ds) * SEG).div_ceil(WQEBB)
}

/// Encodes `req` as WQE number `index` of QP `qpn` into `ring` (a send queue of 64-byte
/// WQEBBs, a power of two of them), at slot `index mod nwqes`, wrapping around the ring's end.
/// Returns the WQEBBs written.
pub fn encode(
    req: &WorkRequest,
    flags: WqeFlags,
    index: u16,
    qpn: u32,
    ring: &mut [u8],
) -> Result<usize, WqeError> {
    let nwqes = ring.len() / WQEBB;
    if ring.len() % WQEBB != 0 || !nwqes.is_power_of_two() {
        return Err(WqeError::BadRing { bytes: ring.len() });
    }
    let e = encode_linear(req, flags, index, qpn)?;
    if e.wqebbs > nwqes {
        return Err(WqeError::BadRing { bytes: ring.len() });
    }
    for bb in 0..e.wqebbs {
        let slot = (usize::from(index) + bb) & (nwqes - 1);
        ring[slot * WQEBB..(slot + 1) * WQEBB]
            .copy_from_slice(&e.bytes[bb * WQEBB..(bb + 1) * WQEBB]);
    }
    Ok(e.wqebbs)
}
