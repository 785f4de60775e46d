//! GPU-initiated networking in mlx5 format (IBGDA): the send work-queue entries a GPU writes,
//! the completion-queue entries it polls, and one RC send queue's memory as the NIC handler
//! sees it.
//!
//! Everything here follows the ConnectX (mlx5) layouts of rdma-core's `mlx5dv.h` and the PRM,
//! as NVSHMEM's IBGDA device code writes them:
//!
//! - A send queue is a ring of 64-byte WQE basic blocks (WQEBBs, `MLX5_SEND_WQE_BB`). A WQE is
//!   a control segment followed by 16-byte segments; the control segment's `ds` counts them,
//!   so a WQE takes `ceil(ds / 4)` WQEBBs and may wrap around the ring's end ([`wqe`]).
//! - All multi-byte fields are big-endian. Keys are written big-endian too (as
//!   `mlx5dv_set_data_seg` does; NVSHMEM keeps its keys pre-swapped and stores them as is).
//! - The producer index (the next empty WQEBB) goes to the send doorbell record, 16 bits,
//!   big-endian; in CPU-assisted mode the GPU bumps a plain 64-bit cell with `atomicMax`
//!   instead ([`queue`]).
//! - Completions are 64-byte CQEs (`mlx5_cqe64`): `wqe_counter` names the first WQEBB of the
//!   completed WQE, `op_own` carries the CQE opcode and the owner bit ([`cqe`]).
//!
//! [`decode()`] reads a WQE back byte for byte and validates every field, which is what a CPU NIC
//! handler needs; `device/ibgda.cuh` is the same encoder in C for the device library.

pub mod amo;
pub mod cqe;
pub mod decode;
pub mod queue;
pub mod wqe;

pub use amo::{AmoFamily, AmoRequest};
pub use cqe::{Cqe, CqeOpcode, Syndrome};
pub use decode::{decode, DecodedWqe, Ring, WqeError};
pub use queue::{Completion, Consumer, Pending, Producer, QueueLayout, QueueMemory, Words};
pub use wqe::{encode, AtomicOp, Fence, Width, WorkRequest, WqeFlags};

/// `MLX5_SEND_WQE_BB`: bytes in one WQE basic block.
pub const WQEBB: usize = 64;
/// Bytes in one WQE segment (the unit `ds` counts).
pub const SEG: usize = 16;
/// Most WQEBBs one WQE may take here (ds ≤ 16); NVSHMEM's RC WQEs take at most 2.
pub const MAX_WQEBBS: usize = 4;
/// Bytes in one CQE (`mlx5_cqe64`).
pub const CQE_BYTES: usize = 64;

/// Send opcodes (`MLX5_OPCODE_*` in `mlx5dv.h`), the low byte of `opmod_idx_opcode`.
pub mod opcode {
    /// `MLX5_OPCODE_NOP`: no data effect; used for padding and to carry a CQ update.
    pub const NOP: u8 = 0x00;
    /// `MLX5_OPCODE_RDMA_WRITE`.
    pub const RDMA_WRITE: u8 = 0x08;
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`: a write that also hands `imm` to the responder.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// `MLX5_OPCODE_RDMA_READ`.
    pub const RDMA_READ: u8 = 0x10;
    /// `MLX5_OPCODE_ATOMIC_CS`: 8-byte compare-and-swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// `MLX5_OPCODE_ATOMIC_FA`: 8-byte fetch-and-add.
    pub const ATOMIC_FA: u8 = 0x12;
    /// `MLX5_OPCODE_ATOMIC_MASKED_CS`: extended (masked) compare-and-swap, 4 or 8 bytes.
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    /// `MLX5_OPCODE_ATOMIC_MASKED_FA`: extended (masked) fetch-and-add, 4 or 8 bytes.
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
}

/// Bits of the control segment's `fm_ce_se` byte (`MLX5_WQE_CTRL_*`).
pub mod ctrl_flags {
    /// `MLX5_WQE_CTRL_CQ_UPDATE` (CE = 2): write a CQE when this WQE completes.
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// The CE field (bits 3:2).
    pub const CE_MASK: u8 = 3 << 2;
    /// The SE (solicited event) bit, meaningful only for sends.
    pub const SOLICITED: u8 = 1 << 1;
    /// The FM (fence mode) field (bits 7:5).
    pub const FM_MASK: u8 = 7 << 5;
    /// Bits the PRM reserves (4 and 0): always zero.
    pub const RESERVED: u8 = 1 << 4 | 1;
}

/// `MLX5_INLINE_SEG`: the bit of an inline data segment's `byte_count` that marks it inline.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Extended-atomic opmod for 4-byte operands (`opmod_idx_opcode` top byte).
pub const EXT_AMO_OPMOD_4: u8 = 0x08;
/// Extended-atomic opmod for 8-byte operands.
pub const EXT_AMO_OPMOD_8: u8 = 0x09;

#[cfg(test)]
mod amo_cqe_tests;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod wqe_tests;
