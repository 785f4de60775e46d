//! OpenSHMEM atomic families onto mlx5 atomics, the way NVSHMEM's IBGDA writes them
//! (`ibgda_write_atomic_wqe`), and what each mlx5 atomic does to the remote word
//! ([`AtomicOp::apply`]) so a NIC handler can execute it.
//!
//! | family | 4 bytes | 8 bytes |
//! |---|---|---|
//! | inc, fetch-inc, add, signal-add, fetch | masked FA, boundary 0 (fetch adds 0) | same |
//! | fetch-add | masked FA, boundary 0 | `ATOMIC_FA` |
//! | set, swap, signal-set | masked CS: swap mask all ones, compare mask 0 | same (2 WQEBBs) |
//! | and, fetch-and | masked CS: swap = v, swap mask = !v, compare mask 0 | same |
//! | or, fetch-or | masked CS: swap = v, swap mask = v, compare mask 0 | same |
//! | xor, fetch-xor | masked FA, boundary all ones (an add without carries) | same |
//! | compare-swap | masked CS, both masks all ones | `ATOMIC_CS` |

use super::decode::WqeError;
use super::wqe::{AtomicOp, Width};

/// NVSHMEM's atomic families (`nvshmemi_amo_t`) that travel as one mlx5 atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AmoFamily {
    /// `inc`.
    Inc,
    /// `fetch_inc`.
    FetchInc,
    /// `add`.
    Add,
    /// `fetch_add`.
    FetchAdd,
    /// `set`.
    Set,
    /// `swap`.
    Swap,
    /// A signal set posted as an atomic (the device library posts `signal_op` with
    /// `SIGNAL_SET`, and the signal of `put_signal`, as an inline RDMA write instead).
    SignalSet,
    /// `signal_op` with `SIGNAL_ADD`.
    SignalAdd,
    /// `and`.
    And,
    /// `fetch_and`.
    FetchAnd,
    /// `or`.
    Or,
    /// `fetch_or`.
    FetchOr,
    /// `xor`.
    Xor,
    /// `fetch_xor`.
    FetchXor,
    /// `fetch`.
    Fetch,
    /// `compare_swap`.
    CompareSwap,
}

/// One OpenSHMEM atomic: its family, width and operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AmoRequest {
    /// The family.
    pub family: AmoFamily,
    /// Operand width.
    pub width: Width,
    /// The value operand (the new value for swap and compare-swap; ignored by inc and fetch).
    pub value: u64,
    /// The compare operand of compare-swap (ignored by the others).
    pub compare: u64,
}

impl AmoRequest {
    /// The mlx5 atomic NVSHMEM posts for this request.
    pub fn op(&self) -> Result<AtomicOp, WqeError> {
        let w = self.width;
        let all = w.mask();
        let v = self.value;
        for x in [v, self.compare] {
            if x & !all != 0 {
                return Err(WqeError::OperandTooWide { value: x });
            }
        }
        let fa = |add, field_boundary| AtomicOp::MaskedFetchAdd {
            add,
            field_boundary,
        };
        let cs = |swap, swap_mask| AtomicOp::MaskedCompareSwap {
            swap,
            compare: 0,
            swap_mask,
            compare_mask: 0,
        };
        Ok(match self.family {
            AmoFamily::Inc | AmoFamily::FetchInc => fa(1, 0),
            AmoFamily::Add | AmoFamily::SignalAdd => fa(v, 0),
            AmoFamily::Fetch => fa(0, 0),
            AmoFamily::Xor | AmoFamily::FetchXor => fa(v, all),
            AmoFamily::Set | AmoFamily::Swap | AmoFamily::SignalSet => cs(v, all),
            AmoFamily::And | AmoFamily::FetchAnd => cs(v, !v & all),
            AmoFamily::Or | AmoFamily::FetchOr => cs(v, v),
            AmoFamily::FetchAdd => match w {
                Width::W4 => fa(v, 0),
                Width::W8 => AtomicOp::FetchAdd { add: v },
            },
            AmoFamily::CompareSwap => match w {
                Width::W4 => AtomicOp::MaskedCompareSwap {
                    swap: v,
                    compare: self.compare,
                    swap_mask: all,
                    compare_mask: all,
                },
                Width::W8 => AtomicOp::CompareSwap {
                    compare: self.compare,
                    swap: v,
                },
            },
        })
    }
}

impl AtomicOp {
    /// The value the remote word holds after this atomic, given its old value (both at
    /// `width`; bits above it are ignored and come back zero).
    pub fn apply(&self, old: u64, width: Width) -> u64 {
        let all = width.mask();
        let old = old & all;
        let new = match *self {
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare & all {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::MaskedFetchAdd {
                add,
                field_boundary,
            } => {
                // Each set boundary bit is a field's top bit: add below it with that bit
                // cleared (the carry stops there), then fold the top bits in without carry.
                let b = field_boundary & all;
                let low = (old & !b).wrapping_add(add & !b);
                low ^ ((old ^ add) & b)
            }
            AtomicOp::MaskedCompareSwap {
                swap,
                compare,
                swap_mask,
                compare_mask,
            } => {
                if old & compare_mask == compare & compare_mask {
                    (old & !swap_mask) | (swap & swap_mask)
                } else {
                    old
                }
            }
        };
        new & all
    }
}
