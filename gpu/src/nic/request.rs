//! What the agent carries: a [`Request`] as data (an RDMA write or read, or an atomic, with
//! the remote heap address and the key the initiator used, as a decoded mlx5 WQE gives
//! them), the atomic operations of mlx5 ([`AmoOp`], masked forms included) with their exact
//! semantics, and the [`Reply`] with the [`Status`] a handler turns into a CQE syndrome.

pub use crate::ibgda::Width;

/// An atomic operation on a remote word. Every operation fetches: the old value comes back
/// in [`Reply::value`]. Operands are taken to the word's width.
///
/// The plain forms are what OpenSHMEM names; the masked forms are mlx5's extended atomics
/// (`MLX5_OPCODE_ATOMIC_MASKED_CS`/`_FA`), which NVSHMEM's IBGDA uses for everything but the
/// 8-byte fetch-add and compare-swap (set and swap: masked CS with a zero compare mask; and:
/// swap mask `!v`; or: swap mask `v`; xor: masked FA with every bit a field boundary), so a
/// WQE decoder can hand them over as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AmoOp {
    /// Read the word.
    Fetch,
    /// Replace the word.
    Swap(u64),
    /// Replace the word with `swap` if it equals `compare` (`MLX5_OPCODE_ATOMIC_CS`).
    CompareSwap {
        /// The value the word must hold.
        compare: u64,
        /// The value it gets then.
        swap: u64,
    },
    /// Add, wrapping (`MLX5_OPCODE_ATOMIC_FA`).
    FetchAdd(u64),
    /// Bitwise and.
    And(u64),
    /// Bitwise or.
    Or(u64),
    /// Bitwise xor.
    Xor(u64),
    /// If `old & compare_mask == compare & compare_mask`, the word becomes
    /// `(old & !swap_mask) | (swap & swap_mask)` (`MLX5_OPCODE_ATOMIC_MASKED_CS`).
    MaskedCompareSwap {
        /// The compared value.
        compare: u64,
        /// Which bits are compared.
        compare_mask: u64,
        /// The swapped-in value.
        swap: u64,
        /// Which bits are swapped in.
        swap_mask: u64,
    },
    /// Adds `add` field by field: a set bit of `boundary` is the top bit of a field, and the
    /// carry out of it is dropped (`MLX5_OPCODE_ATOMIC_MASKED_FA`; all ones is xor, zero a
    /// plain add).
    MaskedFetchAdd {
        /// The addend.
        add: u64,
        /// The fields' top bits.
        boundary: u64,
    },
}

impl AmoOp {
    /// The word's new value when it held `old` (both at `width`): the semantics every
    /// [`HeapMemory`](super::HeapMemory) must give.
    pub fn apply(self, old: u64, width: Width) -> u64 {
        let old = old & width.mask();
        let new = match self {
            AmoOp::Fetch => old,
            AmoOp::Swap(v) => v,
            AmoOp::CompareSwap { compare, swap } => {
                if old == compare & width.mask() {
                    swap
                } else {
                    old
                }
            }
            AmoOp::FetchAdd(v) => old.wrapping_add(v),
            AmoOp::And(v) => old & v,
            AmoOp::Or(v) => old | v,
            AmoOp::Xor(v) => old ^ v,
            AmoOp::MaskedCompareSwap {
                compare,
                compare_mask,
                swap,
                swap_mask,
            } => {
                if old & compare_mask == compare & compare_mask {
                    (old & !swap_mask) | (swap & swap_mask)
                } else {
                    old
                }
            }
            AmoOp::MaskedFetchAdd { add, boundary } => field_add(old, add, boundary),
        };
        new & width.mask()
    }

    /// The operation's code and operands on the wire.
    pub(crate) fn encode(self) -> (u8, [u64; 4]) {
        match self {
            AmoOp::Fetch => (0, [0; 4]),
            AmoOp::Swap(v) => (1, [v, 0, 0, 0]),
            AmoOp::CompareSwap { compare, swap } => (2, [compare, swap, 0, 0]),
            AmoOp::FetchAdd(v) => (3, [v, 0, 0, 0]),
            AmoOp::And(v) => (4, [v, 0, 0, 0]),
            AmoOp::Or(v) => (5, [v, 0, 0, 0]),
            AmoOp::Xor(v) => (6, [v, 0, 0, 0]),
            AmoOp::MaskedCompareSwap {
                compare,
                compare_mask,
                swap,
                swap_mask,
            } => (7, [compare, compare_mask, swap, swap_mask]),
            AmoOp::MaskedFetchAdd { add, boundary } => (8, [add, boundary, 0, 0]),
        }
    }

    /// The operation of a wire code and operands, if the code is one.
    pub(crate) fn decode(code: u8, [a, b, c, d]: [u64; 4]) -> Option<AmoOp> {
        Some(match code {
            0 => AmoOp::Fetch,
            1 => AmoOp::Swap(a),
            2 => AmoOp::CompareSwap {
                compare: a,
                swap: b,
            },
            3 => AmoOp::FetchAdd(a),
            4 => AmoOp::And(a),
            5 => AmoOp::Or(a),
            6 => AmoOp::Xor(a),
            7 => AmoOp::MaskedCompareSwap {
                compare: a,
                compare_mask: b,
                swap: c,
                swap_mask: d,
            },
            8 => AmoOp::MaskedFetchAdd {
                add: a,
                boundary: b,
            },
            _ => return None,
        })
    }
}

/// `a + b` where the carry out of every bit set in `boundary` is dropped.
fn field_add(a: u64, b: u64, boundary: u64) -> u64 {
    let (mut sum, mut carry) = (0u64, 0u64);
    for bit in 0..64 {
        let s = (a >> bit & 1) + (b >> bit & 1) + carry;
        sum |= (s & 1) << bit;
        carry = if boundary >> bit & 1 == 1 { 0 } else { s >> 1 };
    }
    sum
}

/// One operation on a peer's heap, as an RC work request carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Write `data` at `addr` (an RDMA WRITE; large ones travel in chunks, in order).
    Write {
        /// The remote heap address.
        addr: u64,
        /// The remote key the initiator used.
        rkey: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Write `data` at `addr`, visible only after every earlier write of the same queue is
    /// (a WQE with a fence: the device library posts a signal set so, after the data it
    /// announces).
    OrderedWrite {
        /// The remote heap address.
        addr: u64,
        /// The remote key the initiator used.
        rkey: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Read `len` bytes at `addr` (an RDMA READ); they come back in [`Reply::data`].
    Read {
        /// The remote heap address.
        addr: u64,
        /// The remote key the initiator used.
        rkey: u32,
        /// How many bytes.
        len: usize,
    },
    /// An atomic on the `width`-byte word at `addr`, which must be aligned to its width.
    Atomic {
        /// The remote heap address.
        addr: u64,
        /// The remote key the initiator used.
        rkey: u32,
        /// The word's width.
        width: Width,
        /// What to do.
        op: AmoOp,
    },
    /// Nothing: completes once every earlier request to the peer has (an mlx5 NOP).
    Nop,
}

/// How a request ended at the target; a handler maps it to a CQE ([`Status::syndrome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Done.
    Ok,
    /// The key is not the target's, or the range leaves its heap (a NIC's
    /// `REMOTE_ACCESS_ERR`).
    RemoteAccess,
    /// A malformed request: an atomic's width or alignment, an unknown operation
    /// (`REMOTE_INVAL_REQ_ERR`).
    RemoteInvalidRequest,
    /// The target's memory refused the operation (`REMOTE_OP_ERR`).
    RemoteOperation,
}

impl Status {
    /// The mlx5 error-CQE syndrome of this status (`None` for [`Status::Ok`]). A request
    /// whose future fails instead (a lost peer, a timeout, shutdown) is a flushed one:
    /// `WR_FLUSH_ERR`, `0x05`, or `TRANSPORT_RETRY_EXC_ERR`, `0x15`, for the first.
    pub fn syndrome(self) -> Option<u8> {
        match self {
            Status::Ok => None,
            Status::RemoteInvalidRequest => Some(0x12),
            Status::RemoteAccess => Some(0x13),
            Status::RemoteOperation => Some(0x14),
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::RemoteAccess => 1,
            Status::RemoteInvalidRequest => 2,
            Status::RemoteOperation => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Status> {
        Some(match code {
            0 => Status::Ok,
            1 => Status::RemoteAccess,
            2 => Status::RemoteInvalidRequest,
            3 => Status::RemoteOperation,
            _ => return None,
        })
    }
}

/// What came back for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// How it ended (for a chunked request, its first chunk that failed, else `Ok`).
    pub status: Status,
    /// An atomic's old value (zero otherwise).
    pub value: u64,
    /// A read's bytes (empty otherwise, and for a read that failed).
    pub data: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_forms_do_what_nvshmem_builds_them_for() {
        let w = Width::W8;
        let old = 0b1100u64;
        let set = |v| AmoOp::MaskedCompareSwap {
            compare: 0,
            compare_mask: 0,
            swap: v,
            swap_mask: u64::MAX,
        };
        assert_eq!(set(7).apply(old, w), 7);
        let and = |v: u64| AmoOp::MaskedCompareSwap {
            compare: 0,
            compare_mask: 0,
            swap: 0,
            swap_mask: !v,
        };
        assert_eq!(and(0b1010).apply(old, w), old & 0b1010);
        let or = |v| AmoOp::MaskedCompareSwap {
            compare: 0,
            compare_mask: 0,
            swap: v,
            swap_mask: v,
        };
        assert_eq!(or(0b0011).apply(old, w), old | 0b0011);
        let xor = |v| AmoOp::MaskedFetchAdd {
            add: v,
            boundary: u64::MAX,
        };
        assert_eq!(xor(0b1010).apply(old, w), old ^ 0b1010);
        let add = |v| AmoOp::MaskedFetchAdd {
            add: v,
            boundary: 0,
        };
        assert_eq!(add(u64::MAX).apply(old, w), old - 1);
        // Two 32-bit fields: the low one's carry stays in it.
        let fields = AmoOp::MaskedFetchAdd {
            add: 1,
            boundary: 1 << 31 | 1 << 63,
        };
        assert_eq!(
            fields.apply(0x0000_0005_FFFF_FFFF, w),
            0x0000_0005_0000_0000
        );
        let cas = AmoOp::MaskedCompareSwap {
            compare: 0xF0,
            compare_mask: 0xF0,
            swap: 0xAB,
            swap_mask: 0x0F,
        };
        assert_eq!(cas.apply(0xF3, w), 0xFB, "compared bits equal: swapped in");
        assert_eq!(cas.apply(0x73, w), 0x73, "compared bits differ: unchanged");
    }

    #[test]
    fn four_byte_words_wrap_at_their_width() {
        let w = Width::W4;
        assert_eq!(AmoOp::FetchAdd(1).apply(0xFFFF_FFFF, w), 0);
        assert_eq!(AmoOp::Swap(0x1_0000_0002).apply(7, w), 2);
        let cas = AmoOp::CompareSwap {
            compare: 0x1_0000_0007,
            swap: 9,
        };
        assert_eq!(cas.apply(7, w), 9, "the compare is taken to the width");
    }

    #[test]
    fn every_operation_survives_the_wire() {
        let ops = [
            AmoOp::Fetch,
            AmoOp::Swap(1),
            AmoOp::CompareSwap {
                compare: 2,
                swap: 3,
            },
            AmoOp::FetchAdd(4),
            AmoOp::And(5),
            AmoOp::Or(6),
            AmoOp::Xor(7),
            AmoOp::MaskedCompareSwap {
                compare: 8,
                compare_mask: 9,
                swap: 10,
                swap_mask: 11,
            },
            AmoOp::MaskedFetchAdd {
                add: 12,
                boundary: 13,
            },
        ];
        for op in ops {
            let (code, operands) = op.encode();
            assert_eq!(AmoOp::decode(code, operands), Some(op));
        }
        assert_eq!(AmoOp::decode(9, [0; 4]), None);
    }
}
