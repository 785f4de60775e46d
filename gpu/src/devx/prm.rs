//! The mlx5 PRM commands the `gpu` NIC handler issues through DevX, as data: big-endian
//! command buffers written field by field ([`Cmd`]: a field is a bit offset and a width, as
//! rdma-core's `mlx5_ifc.h` declares them with `DEVX_SET`), one function per command:
//! `QUERY_HCA_CAP`, `CREATE_CQ` (CQ buffer and doorbell record in user memory), `CREATE_QP`
//! (an RC send queue in user memory, no receive queue), and the connection's
//! `RST2INIT_QP`, `INIT2RTR_QP`, `RTR2RTS_QP`. The same settings NVSHMEM's IBGDA transport
//! makes, except that completions are not collapsed: the device library reads one CQE per
//! WQE, each with its owner bit.

use ferroshmem_runtime::{Error, Result};

/// A field of a command: its first bit (counted from the buffer's first byte, most
/// significant bit first) and its width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// First bit.
    pub off: usize,
    /// Width in bits (1–32, within one big-endian dword; 64 for an aligned quadword).
    pub width: usize,
}

const fn f(off: usize, width: usize) -> Field {
    Field { off, width }
}

impl Field {
    /// The same field inside a structure that starts at bit `base`.
    pub const fn at(self, base: usize) -> Field {
        Field {
            off: base + self.off,
            width: self.width,
        }
    }
}

/// A command buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd(Vec<u8>);

impl Cmd {
    /// A zeroed command of `bits` bits.
    pub fn new(bits: usize) -> Cmd {
        Cmd(vec![0; bits / 8])
    }

    /// Writes `value` (its low `width` bits) into field `f`.
    pub fn set(&mut self, f: Field, value: u64) {
        if f.width == 64 {
            let at = f.off / 8;
            self.0[at..at + 8].copy_from_slice(&value.to_be_bytes());
            return;
        }
        let at = f.off / 32 * 4;
        let shift = 32 - f.width - f.off % 32;
        let mask = (u32::MAX >> (32 - f.width)) << shift;
        let word = u32::from_be_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]]);
        let word = (word & !mask) | (((value as u32) << shift) & mask);
        self.0[at..at + 4].copy_from_slice(&word.to_be_bytes());
    }

    /// The command's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Reads field `f` of a command's output, or `None` past its end.
pub fn get(out: &[u8], f: Field) -> Option<u64> {
    if f.width == 64 {
        let at = f.off / 8;
        return Some(u64::from_be_bytes(out.get(at..at + 8)?.try_into().ok()?));
    }
    let at = f.off / 32 * 4;
    let word = u32::from_be_bytes(out.get(at..at + 4)?.try_into().ok()?);
    let shift = 32 - f.width - f.off % 32;
    Some(u64::from((word >> shift) & (u32::MAX >> (32 - f.width))))
}

/// Command opcodes (`MLX5_CMD_OP_*`).
pub mod opcode {
    /// `QUERY_HCA_CAP`.
    pub const QUERY_HCA_CAP: u64 = 0x100;
    /// `CREATE_CQ`.
    pub const CREATE_CQ: u64 = 0x400;
    /// `CREATE_QP`.
    pub const CREATE_QP: u64 = 0x500;
    /// `RST2INIT_QP`.
    pub const RST2INIT_QP: u64 = 0x502;
    /// `INIT2RTR_QP`.
    pub const INIT2RTR_QP: u64 = 0x503;
    /// `RTR2RTS_QP`.
    pub const RTR2RTS_QP: u64 = 0x504;
}

/// Every command's header and every output's status (`*_in` / `*_out` of `mlx5_ifc.h`).
pub mod header {
    use super::{f, Field};
    /// `opcode` of any command.
    pub const OPCODE: Field = f(0x00, 16);
    /// `op_mod` of any command.
    pub const OP_MOD: Field = f(0x30, 16);
    /// `qpn` of the QP state transitions.
    pub const QPN: Field = f(0x48, 24);
    /// `status` of any output.
    pub const STATUS: Field = f(0x00, 8);
    /// `syndrome` of any output.
    pub const SYNDROME: Field = f(0x20, 32);
    /// `cqn` of `create_cq_out`, `qpn` of `create_qp_out`.
    pub const CREATED_ID: Field = f(0x48, 24);
}

/// Fields of `cmd_hca_cap` (general device capabilities) the handler reads.
pub mod hca_cap {
    use super::{f, Field};
    /// `log_max_qp_sz`: the largest send queue, log2 of WQEBBs.
    pub const LOG_MAX_QP_SZ: Field = f(0x88, 8);
    /// `log_max_cq_sz`: the largest CQ, log2 of CQEs.
    pub const LOG_MAX_CQ_SZ: Field = f(0xc8, 8);
    /// `port_type`: 0 InfiniBand, 1 Ethernet.
    pub const PORT_TYPE: Field = f(0x1b6, 2);
    /// `log_max_msg`: the largest message, log2 of bytes.
    pub const LOG_MAX_MSG: Field = f(0x1c3, 5);
    /// `atomic`: atomics supported.
    pub const ATOMIC: Field = f(0x21e, 1);
    /// `rc`: reliable-connected QPs supported.
    pub const RC: Field = f(0x23f, 1);
    /// `log_bf_reg_size`: the BlueFlame register's size, log2 of bytes.
    pub const LOG_BF_REG_SIZE: Field = f(0x26b, 5);
}

/// Fields of `cqc` (the CQ context).
pub mod cqc {
    use super::{f, Field};
    /// `dbr_umem_valid`: the doorbell record lies in the umem `dbr_umem_id` names.
    pub const DBR_UMEM_VALID: Field = f(0x06, 1);
    /// `cqe_sz`: 0 for 64-byte CQEs.
    pub const CQE_SZ: Field = f(0x08, 3);
    /// `cc`: collapsed CQ (one CQE written over and over).
    pub const CC: Field = f(0x0b, 1);
    /// `oi`: overrun ignore.
    pub const OI: Field = f(0x0e, 1);
    /// `dbr_umem_id`.
    pub const DBR_UMEM_ID: Field = f(0x20, 32);
    /// `log_cq_size`.
    pub const LOG_CQ_SIZE: Field = f(0x63, 5);
    /// `uar_page`.
    pub const UAR_PAGE: Field = f(0x68, 24);
    /// `c_eqn`: the EQ completion events would go to.
    pub const C_EQN: Field = f(0xb8, 8);
    /// `log_page_size` (of the buffer's pages, log2 of 4 KiB units).
    pub const LOG_PAGE_SIZE: Field = f(0xc3, 5);
    /// `dbr_addr`: the doorbell record (its offset in the umem when `dbr_umem_valid`).
    pub const DBR_ADDR: Field = f(0x1c0, 64);
}

/// Fields of `create_cq_in` around the context.
pub mod create_cq {
    use super::{f, Field};
    /// Where `cq_context` starts.
    pub const CQC: usize = 0x80;
    /// `cq_umem_offset`.
    pub const UMEM_OFFSET: Field = f(0x280, 64);
    /// `cq_umem_id`.
    pub const UMEM_ID: Field = f(0x2c0, 32);
    /// `cq_umem_valid`.
    pub const UMEM_VALID: Field = f(0x2e0, 1);
    /// The command's size in bits (no page list: the buffer is a umem).
    pub const BITS: usize = 0x880;
}

/// Fields of `ads` (an address path).
pub mod ads {
    use super::{f, Field};
    /// `pkey_index`.
    pub const PKEY_INDEX: Field = f(0x10, 16);
    /// `grh`: a global route header (always on RoCE).
    pub const GRH: Field = f(0x28, 1);
    /// `rlid`: the remote LID (InfiniBand).
    pub const RLID: Field = f(0x30, 16);
    /// `ack_timeout`: 4.096 µs × 2^value.
    pub const ACK_TIMEOUT: Field = f(0x40, 5);
    /// `src_addr_index`: this port's GID index.
    pub const SRC_ADDR_INDEX: Field = f(0x48, 8);
    /// `hop_limit`.
    pub const HOP_LIMIT: Field = f(0x58, 8);
    /// `rgid_rip`: the remote GID, 16 bytes from here.
    pub const RGID: usize = 0x80;
    /// `udp_sport` (RoCE v2).
    pub const UDP_SPORT: Field = f(0x110, 16);
    /// `vhca_port_num`: the port.
    pub const VHCA_PORT_NUM: Field = f(0x128, 8);
    /// `rmac_47_32`.
    pub const RMAC_HI: Field = f(0x130, 16);
    /// `rmac_31_0`.
    pub const RMAC_LO: Field = f(0x140, 32);
}

/// Fields of `qpc` (the QP context).
pub mod qpc {
    use super::{f, Field};
    /// `st`: 0 for RC.
    pub const ST: Field = f(0x08, 8);
    /// `pm_state`: 3, migrated.
    pub const PM_STATE: Field = f(0x13, 2);
    /// `pd`.
    pub const PD: Field = f(0x28, 24);
    /// `mtu`: 1 (256 B) … 5 (4 KiB), as `enum ibv_mtu`.
    pub const MTU: Field = f(0x40, 3);
    /// `log_msg_max`.
    pub const LOG_MSG_MAX: Field = f(0x43, 5);
    /// `log_rq_size`.
    pub const LOG_RQ_SIZE: Field = f(0x49, 4);
    /// `log_sq_size`: log2 of the send queue's WQEBBs.
    pub const LOG_SQ_SIZE: Field = f(0x51, 4);
    /// `uar_page`: the page whose register rings this QP's doorbell.
    pub const UAR_PAGE: Field = f(0x68, 24);
    /// `remote_qpn`.
    pub const REMOTE_QPN: Field = f(0xa8, 24);
    /// Where `primary_address_path` starts.
    pub const PRIMARY_PATH: usize = 0xc0;
    /// `log_ack_req_freq`.
    pub const LOG_ACK_REQ_FREQ: Field = f(0x380, 4);
    /// `log_sra_max`: outstanding reads and atomics this QP may initiate, log2.
    pub const LOG_SRA_MAX: Field = f(0x388, 3);
    /// `retry_count`.
    pub const RETRY_COUNT: Field = f(0x38d, 3);
    /// `rnr_retry`.
    pub const RNR_RETRY: Field = f(0x390, 3);
    /// `next_send_psn`.
    pub const NEXT_SEND_PSN: Field = f(0x3c8, 24);
    /// `cqn_snd`.
    pub const CQN_SND: Field = f(0x3e8, 24);
    /// `log_rra_max`: outstanding reads and atomics this QP may answer, log2.
    pub const LOG_RRA_MAX: Field = f(0x488, 3);
    /// `atomic_mode`: 3, atomics up to 64 bits.
    pub const ATOMIC_MODE: Field = f(0x48c, 4);
    /// `rre`: remote reads allowed.
    pub const RRE: Field = f(0x490, 1);
    /// `rwe`: remote writes allowed.
    pub const RWE: Field = f(0x491, 1);
    /// `rae`: remote atomics allowed.
    pub const RAE: Field = f(0x492, 1);
    /// `min_rnr_nak`.
    pub const MIN_RNR_NAK: Field = f(0x4a3, 5);
    /// `next_rcv_psn`.
    pub const NEXT_RCV_PSN: Field = f(0x4a8, 24);
    /// `cqn_rcv`.
    pub const CQN_RCV: Field = f(0x4e8, 24);
    /// `dbr_addr`: the doorbell record (its offset in the umem when `dbr_umem_valid`).
    pub const DBR_ADDR: Field = f(0x500, 64);
    /// `rq_type`: 3, a zero-size receive queue.
    pub const RQ_TYPE: Field = f(0x565, 3);
    /// `dbr_umem_valid`.
    pub const DBR_UMEM_VALID: Field = f(0x683, 1);
    /// `dbr_umem_id`.
    pub const DBR_UMEM_ID: Field = f(0x720, 32);
}

/// Fields of `create_qp_in` and the state transitions' inputs around the context.
pub mod create_qp {
    use super::{f, Field};
    /// Where `qpc` starts (in `create_qp_in` and every `*2*_qp_in`).
    pub const QPC: usize = 0xc0;
    /// `wq_umem_offset`.
    pub const UMEM_OFFSET: Field = f(0x800, 64);
    /// `wq_umem_id`.
    pub const UMEM_ID: Field = f(0x840, 32);
    /// `wq_umem_valid`.
    pub const UMEM_VALID: Field = f(0x860, 1);
    /// The size in bits of `create_qp_in` (no page list) and of every `*2*_qp_in`.
    pub const BITS: usize = 0x880;
}

/// The size of `query_hca_cap_in`, in bits.
pub const QUERY_HCA_CAP_IN_BITS: usize = 0x80;
/// The size of `query_hca_cap_out` (header and the 4 KiB capability union), in bytes.
pub const QUERY_HCA_CAP_OUT_BYTES: usize = 16 + 4096;
/// The size of every other command's output the handler reads, in bytes.
pub const OUT_BYTES: usize = 16;
/// Where `capability` starts in `query_hca_cap_out`.
const CAPABILITY: usize = 0x80;

/// `atomic_mode` for atomics up to 64 bits (NVSHMEM's `IBGDA_MLX5_QPC_ATOMIC_MODE_UP_TO_64BIT`).
pub const ATOMIC_MODE_UP_TO_64BIT: u64 = 3;
/// `rq_type` of a QP without a receive queue.
pub const RQ_TYPE_ZERO_SIZE: u64 = 3;
/// `pm_state` migrated.
pub const PM_STATE_MIGRATED: u64 = 3;

/// `QUERY_HCA_CAP` of the general device capabilities, current values.
pub fn query_hca_cap() -> Cmd {
    let mut c = Cmd::new(QUERY_HCA_CAP_IN_BITS);
    c.set(header::OPCODE, opcode::QUERY_HCA_CAP);
    // op_mod: capability type 0 (general) << 1 | 1 (current values).
    c.set(header::OP_MOD, 1);
    c
}

/// What the handler reads of the device's general capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcaCaps {
    /// Largest send queue, log2 of WQEBBs.
    pub log_max_qp_sz: u32,
    /// Largest CQ, log2 of CQEs.
    pub log_max_cq_sz: u32,
    /// Whether the ports are Ethernet (RoCE) rather than InfiniBand.
    pub ethernet: bool,
    /// Largest message, log2 of bytes.
    pub log_max_msg: u32,
    /// Atomics supported.
    pub atomic: bool,
    /// RC QPs supported.
    pub rc: bool,
    /// BlueFlame register size, log2 of bytes.
    pub log_bf_reg_size: u32,
}

/// The capabilities in a `QUERY_HCA_CAP` output.
pub fn parse_hca_caps(out: &[u8]) -> Result<HcaCaps> {
    check(out, "QUERY_HCA_CAP")?;
    let read = |field: Field| {
        get(out, field.at(CAPABILITY))
            .map(|v| v as u32)
            .ok_or_else(|| {
                Error::Config(format!("QUERY_HCA_CAP: an output of {} bytes", out.len()))
            })
    };
    Ok(HcaCaps {
        log_max_qp_sz: read(hca_cap::LOG_MAX_QP_SZ)?,
        log_max_cq_sz: read(hca_cap::LOG_MAX_CQ_SZ)?,
        ethernet: read(hca_cap::PORT_TYPE)? == 1,
        log_max_msg: read(hca_cap::LOG_MAX_MSG)?,
        atomic: read(hca_cap::ATOMIC)? == 1,
        rc: read(hca_cap::RC)? == 1,
        log_bf_reg_size: read(hca_cap::LOG_BF_REG_SIZE)?,
    })
}

/// A command output's status: `Ok` for 0, else a configuration error naming the command,
/// the status and the syndrome.
pub fn check(out: &[u8], what: &str) -> Result<()> {
    match (get(out, header::STATUS), get(out, header::SYNDROME)) {
        (Some(0), Some(_)) => Ok(()),
        (Some(status), Some(syndrome)) => Err(Error::Config(format!(
            "{what} failed: status {status:#x}, syndrome {syndrome:#010x}"
        ))),
        _ => Err(Error::Config(format!(
            "{what}: an output of {} bytes",
            out.len()
        ))),
    }
}

/// The CQN or QPN a `CREATE_CQ` or `CREATE_QP` output names.
pub fn created_id(out: &[u8], what: &str) -> Result<u32> {
    check(out, what)?;
    get(out, header::CREATED_ID)
        .map(|v| v as u32)
        .ok_or_else(|| Error::Config(format!("{what}: an output of {} bytes", out.len())))
}
