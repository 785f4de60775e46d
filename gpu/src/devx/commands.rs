//! One function per PRM command that makes and connects a `gpu`-handler queue: `CREATE_CQ`,
//! `CREATE_QP`, `RST2INIT_QP`, `INIT2RTR_QP`, `RTR2RTS_QP`, each filling a [`Cmd`] from
//! plain parameters (the fields are those of [`super::prm`]). Parameters out of a field's
//! range are a configuration error, never a truncated field.

use ferroshmem_runtime::{Error, Result};

use super::prm::*;

/// Where a queue's ring and doorbell record lie: user memory registered with DevX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UmemPlace {
    /// The ring's umem.
    pub umem_id: u32,
    /// The ring's offset in it.
    pub umem_offset: u64,
    /// The doorbell record's umem.
    pub dbr_umem_id: u32,
    /// The doorbell record's offset in it (8-byte aligned).
    pub dbr_offset: u64,
}

/// A completion queue of 64-byte CQEs, one per WQE (not collapsed), in user memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqParams {
    /// log2 of the number of CQEs.
    pub log_size: u32,
    /// The UAR page (a CQ needs one, though IBGDA never arms it).
    pub uar_page: u32,
    /// The EQ its events would go to.
    pub eqn: u32,
    /// Its ring and doorbell record.
    pub place: UmemPlace,
}

/// An RC QP with its send queue in user memory and no receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// The PD number.
    pub pdn: u32,
    /// log2 of the send queue's WQEBBs.
    pub log_sq_size: u32,
    /// The UAR page whose register rings its doorbell.
    pub uar_page: u32,
    /// Its CQ (sends and, formally, receives).
    pub cqn: u32,
    /// Its send queue and doorbell record.
    pub place: UmemPlace,
}

/// How to reach the remote QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// InfiniBand: the remote port's LID.
    Ib {
        /// Remote LID.
        lid: u16,
    },
    /// RoCE: a global route to the remote GID.
    Roce {
        /// Remote GID.
        gid: [u8; 16],
        /// This port's GID index.
        gid_index: u8,
        /// The next hop's MAC address.
        mac: [u8; 6],
        /// UDP source port (RoCE v2 flow entropy).
        udp_sport: u16,
    },
}

/// What `INIT2RTR_QP` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrParams {
    /// The path MTU, as `enum ibv_mtu` (1: 256 B … 5: 4 KiB).
    pub mtu: u32,
    /// log2 of the largest message.
    pub log_msg_max: u32,
    /// The remote QP.
    pub remote_qpn: u32,
    /// log2 of the reads and atomics this QP answers at once.
    pub log_rra_max: u32,
    /// This port (1-based).
    pub port: u8,
    /// The remote end.
    pub route: Route,
}

/// NVSHMEM's `IBGDA_MIN_RNR_NAK`.
pub const MIN_RNR_NAK: u64 = 12;
/// NVSHMEM's RTR2RTS `ack_timeout`.
pub const ACK_TIMEOUT: u64 = 20;
/// NVSHMEM's RTR2RTS retry counts (the most).
pub const RETRIES: u64 = 7;
/// NVSHMEM's `IBGDA_GRH_HOP_LIMIT`.
pub const HOP_LIMIT: u64 = 255;

/// `value` if it fits `bits` bits, else a configuration error naming it.
fn fits(value: u64, bits: u32, what: &str) -> Result<u64> {
    if bits < 64 && value >> bits != 0 {
        return Err(Error::Config(format!(
            "{what} {value} does not fit {bits} bits"
        )));
    }
    Ok(value)
}

fn place_dbr(
    c: &mut Cmd,
    umem_valid: Field,
    umem_id: Field,
    addr: Field,
    p: &UmemPlace,
) -> Result<()> {
    if p.dbr_offset % 8 != 0 {
        return Err(Error::Config(format!(
            "doorbell record offset {} not 8-byte aligned",
            p.dbr_offset
        )));
    }
    c.set(umem_valid, 1);
    c.set(umem_id, u64::from(p.dbr_umem_id));
    c.set(addr, p.dbr_offset);
    Ok(())
}

/// `CREATE_CQ`.
pub fn create_cq(p: &CqParams) -> Result<Cmd> {
    let mut c = Cmd::new(create_cq::BITS);
    let base = create_cq::CQC;
    c.set(header::OPCODE, opcode::CREATE_CQ);
    c.set(cqc::CQE_SZ.at(base), 0);
    c.set(cqc::CC.at(base), 0);
    c.set(cqc::OI.at(base), 0);
    c.set(
        cqc::LOG_CQ_SIZE.at(base),
        fits(p.log_size.into(), 5, "log_cq_size")?,
    );
    c.set(
        cqc::UAR_PAGE.at(base),
        fits(p.uar_page.into(), 24, "uar_page")?,
    );
    c.set(cqc::C_EQN.at(base), fits(p.eqn.into(), 8, "c_eqn")?);
    c.set(cqc::LOG_PAGE_SIZE.at(base), 0);
    place_dbr(
        &mut c,
        cqc::DBR_UMEM_VALID.at(base),
        cqc::DBR_UMEM_ID.at(base),
        cqc::DBR_ADDR.at(base),
        &p.place,
    )?;
    c.set(create_cq::UMEM_VALID, 1);
    c.set(create_cq::UMEM_ID, u64::from(p.place.umem_id));
    c.set(create_cq::UMEM_OFFSET, p.place.umem_offset);
    Ok(c)
}

/// `CREATE_QP`: RC, its send queue of 2^`log_sq_size` WQEBBs in user memory, no receive
/// queue, every completion to `cqn`.
pub fn create_qp(p: &QpParams) -> Result<Cmd> {
    let mut c = Cmd::new(create_qp::BITS);
    let q = create_qp::QPC;
    c.set(header::OPCODE, opcode::CREATE_QP);
    c.set(qpc::ST.at(q), 0);
    c.set(qpc::PM_STATE.at(q), PM_STATE_MIGRATED);
    c.set(qpc::PD.at(q), fits(p.pdn.into(), 24, "pd")?);
    c.set(
        qpc::UAR_PAGE.at(q),
        fits(p.uar_page.into(), 24, "uar_page")?,
    );
    c.set(
        qpc::LOG_SQ_SIZE.at(q),
        fits(p.log_sq_size.into(), 4, "log_sq_size")?,
    );
    c.set(qpc::LOG_RQ_SIZE.at(q), 0);
    c.set(qpc::RQ_TYPE.at(q), RQ_TYPE_ZERO_SIZE);
    let cqn = fits(p.cqn.into(), 24, "cqn")?;
    c.set(qpc::CQN_SND.at(q), cqn);
    c.set(qpc::CQN_RCV.at(q), cqn);
    place_dbr(
        &mut c,
        qpc::DBR_UMEM_VALID.at(q),
        qpc::DBR_UMEM_ID.at(q),
        qpc::DBR_ADDR.at(q),
        &p.place,
    )?;
    c.set(create_qp::UMEM_VALID, 1);
    c.set(create_qp::UMEM_ID, u64::from(p.place.umem_id));
    c.set(create_qp::UMEM_OFFSET, p.place.umem_offset);
    Ok(c)
}

/// The header of a state transition of QP `qpn`.
fn transition(op: u64, qpn: u32) -> Result<Cmd> {
    let mut c = Cmd::new(create_qp::BITS);
    c.set(header::OPCODE, op);
    c.set(header::QPN, fits(qpn.into(), 24, "qpn")?);
    Ok(c)
}

/// `RST2INIT_QP`: port `port`, remote reads, writes and atomics (up to 64 bits) allowed.
pub fn rst2init(qpn: u32, port: u8) -> Result<Cmd> {
    let mut c = transition(opcode::RST2INIT_QP, qpn)?;
    let q = create_qp::QPC;
    let path = q + qpc::PRIMARY_PATH;
    c.set(qpc::PM_STATE.at(q), PM_STATE_MIGRATED);
    c.set(ads::VHCA_PORT_NUM.at(path), port.into());
    c.set(ads::PKEY_INDEX.at(path), 0);
    c.set(qpc::RRE.at(q), 1);
    c.set(qpc::RWE.at(q), 1);
    c.set(qpc::RAE.at(q), 1);
    c.set(qpc::ATOMIC_MODE.at(q), ATOMIC_MODE_UP_TO_64BIT);
    Ok(c)
}

/// `INIT2RTR_QP`: the remote QP, the path to it, the MTU.
pub fn init2rtr(qpn: u32, p: &RtrParams) -> Result<Cmd> {
    let mut c = transition(opcode::INIT2RTR_QP, qpn)?;
    let q = create_qp::QPC;
    let path = q + qpc::PRIMARY_PATH;
    if !(1..=5).contains(&p.mtu) {
        return Err(Error::Config(format!(
            "path MTU code {} (expected 1..=5)",
            p.mtu
        )));
    }
    c.set(qpc::MTU.at(q), p.mtu.into());
    c.set(
        qpc::LOG_MSG_MAX.at(q),
        fits(p.log_msg_max.into(), 5, "log_msg_max")?,
    );
    c.set(
        qpc::REMOTE_QPN.at(q),
        fits(p.remote_qpn.into(), 24, "remote_qpn")?,
    );
    c.set(
        qpc::LOG_RRA_MAX.at(q),
        fits(p.log_rra_max.into(), 3, "log_rra_max")?,
    );
    c.set(qpc::MIN_RNR_NAK.at(q), MIN_RNR_NAK);
    c.set(qpc::NEXT_RCV_PSN.at(q), 0);
    c.set(ads::VHCA_PORT_NUM.at(path), p.port.into());
    match p.route {
        Route::Ib { lid } => c.set(ads::RLID.at(path), lid.into()),
        Route::Roce {
            gid,
            gid_index,
            mac,
            udp_sport,
        } => {
            c.set(ads::GRH.at(path), 1);
            for (i, b) in gid.iter().enumerate() {
                c.set(
                    Field {
                        off: path + ads::RGID + 8 * i,
                        width: 8,
                    },
                    (*b).into(),
                );
            }
            c.set(ads::SRC_ADDR_INDEX.at(path), gid_index.into());
            c.set(ads::HOP_LIMIT.at(path), HOP_LIMIT);
            c.set(ads::UDP_SPORT.at(path), udp_sport.into());
            c.set(
                ads::RMAC_HI.at(path),
                u64::from(u16::from_be_bytes([mac[0], mac[1]])),
            );
            c.set(
                ads::RMAC_LO.at(path),
                u64::from(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]])),
            );
        }
    }
    Ok(c)
}

/// `RTR2RTS_QP`: send PSN 0, retries and ACK timeout as NVSHMEM sets them.
pub fn rtr2rts(qpn: u32, log_sra_max: u32) -> Result<Cmd> {
    let mut c = transition(opcode::RTR2RTS_QP, qpn)?;
    let q = create_qp::QPC;
    c.set(qpc::LOG_ACK_REQ_FREQ.at(q), 0);
    c.set(
        qpc::LOG_SRA_MAX.at(q),
        fits(log_sra_max.into(), 3, "log_sra_max")?,
    );
    c.set(qpc::RETRY_COUNT.at(q), RETRIES);
    c.set(qpc::RNR_RETRY.at(q), RETRIES);
    c.set(qpc::NEXT_SEND_PSN.at(q), 0);
    c.set(ads::ACK_TIMEOUT.at(q + qpc::PRIMARY_PATH), ACK_TIMEOUT);
    Ok(c)
}
