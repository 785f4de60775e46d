//! The `gpu` handler's NIC, without CUDA: [`probe`] opens the first mlx5 device with DevX
//! (or the one `FERROSHMEM_IBGDA_HCA` names), reads its capabilities, picks its first active
//! port, and makes the PD, the doorbell page and the EQ number every queue shares;
//! [`Nic::create_queue`] makes one RC QP and its CQ over user memory laid out by
//! [`NicLayout`]; [`NicQueue::connect`] takes the QP through INIT, RTR and RTS to its peer.

use std::sync::Arc;

use ferroshmem_runtime::{Error, Result};

use super::commands::{self, CqParams, QpParams, Route, RtrParams, UmemPlace};
use super::prm::{self, HcaCaps};
use crate::verbs::types::{
    IbvPortAttr, LIMIT_ATOMIC_CAP, LIMIT_MAX_QP_RD_ATOM, LINK_LAYER_ETHERNET, PORT_ACTIVE,
};
use crate::verbs::{open_mlx5, Context, Obj, Pd, Uar, Verbs};

/// The variable naming the mlx5 device to use (`mlx5_0`, …); unset: the first usable one.
pub const HCA_VAR: &str = "FERROSHMEM_IBGDA_HCA";
/// The variable naming the GID index RoCE ports use (default 0).
pub const GID_INDEX_VAR: &str = "FERROSHMEM_IBGDA_GID_INDEX";
/// NVSHMEM's `IBGDA_LOG_MAX_MSG_SIZE` ("30 is max allowed on IB QPs").
const LOG_MAX_MSG: u32 = 30;

/// Where one queue's parts lie in its user memory: the send queue ring first, the CQ ring,
/// the QP's doorbell record (receive and send words), the CQ's (consumer index and arm), and
/// the producer-index cell the device library also writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicLayout {
    /// WQEBBs of the send queue (a power of two).
    pub nwqes: usize,
    /// CQEs of the CQ (a power of two).
    pub ncqes: usize,
}

/// The alignment of each queue's memory (a dmabuf covers whole host pages).
pub const NIC_ALIGN: usize = 64 * 1024;

impl NicLayout {
    /// The send queue ring's offset.
    pub fn sq_at(&self) -> usize {
        0
    }
    /// The CQ ring's offset.
    pub fn cq_at(&self) -> usize {
        self.nwqes * 64
    }
    /// The QP doorbell record's offset (word 1 is the send producer index).
    pub fn qp_dbr_at(&self) -> usize {
        self.cq_at() + self.ncqes * 64
    }
    /// The CQ doorbell record's offset (word 0 is the consumer index).
    pub fn cq_dbr_at(&self) -> usize {
        self.qp_dbr_at() + 8
    }
    /// The producer-index cell's offset.
    pub fn prod_at(&self) -> usize {
        self.cq_dbr_at() + 8
    }
    /// The bytes one queue takes, rounded up to [`NIC_ALIGN`].
    pub fn bytes(&self) -> usize {
        (self.prod_at() + 8).div_ceil(NIC_ALIGN) * NIC_ALIGN
    }
}

/// How a peer's QP reaches this NIC's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Endpoint {
    /// The port's LID (InfiniBand).
    pub lid: u16,
    /// Whether the port is Ethernet (RoCE).
    pub ethernet: bool,
    /// The port's GID at the chosen index.
    pub gid: [u8; 16],
    /// The port's MAC address (RoCE; zero on InfiniBand).
    pub mac: [u8; 6],
}

/// An mlx5 device opened with DevX, and what every queue on it shares.
pub struct Nic {
    ctx: Arc<Context>,
    pd: Arc<Pd>,
    uar: Uar,
    pdn: u32,
    eqn: u32,
    port: u8,
    mtu: u32,
    log_rd_atomic: u32,
    gid_index: u8,
    caps: HcaCaps,
    local: Endpoint,
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic")
            .field("device", &self.ctx.name())
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// The first active port of `ctx` among its `ports`.
fn active_port(ctx: &Context, ports: u8) -> Result<(u8, IbvPortAttr)> {
    for port in 1..=ports {
        let attr = ctx.query_port(port)?;
        if attr.state == PORT_ACTIVE {
            return Ok((port, attr));
        }
    }
    Err(Error::Config(format!(
        "{}: none of its {ports} ports is active (the gpu NIC handler needs a linked port)",
        ctx.name()
    )))
}

/// The MAC address of the network device behind GID `index` of `port` (sysfs), if any.
fn port_mac(device: &str, port: u8, index: u8) -> Option<[u8; 6]> {
    let ndev = std::fs::read_to_string(format!(
        "/sys/class/infiniband/{device}/ports/{port}/gid_attrs/ndevs/{index}"
    ))
    .ok()?;
    let text = std::fs::read_to_string(format!("/sys/class/net/{}/address", ndev.trim())).ok()?;
    parse_mac(text.trim())
}

/// `aa:bb:cc:dd:ee:ff` as bytes.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).ok())
        .collect::<Option<_>>()?;
    bytes.try_into().ok()
}

/// log2 of `n`, rounded down, at most 7 (a 3-bit field); 0 for 0.
fn log2_capped(n: i32) -> u32 {
    if n <= 1 {
        0
    } else {
        (31 - (n as u32).leading_zeros()).min(7)
    }
}

/// Opens the `gpu` handler's NIC (see the module documentation).
///
/// # Errors
/// [`Error::Config`] saying what is missing: rdma-core, an mlx5 device, DevX, an active port,
/// RC QPs or atomics, queues as deep as `layout`.
pub fn probe(layout: NicLayout) -> Result<Nic> {
    let verbs = Arc::new(Verbs::load()?);
    let wanted = std::env::var(HCA_VAR).ok().filter(|v| !v.is_empty());
    let ctx = open_mlx5(verbs, wanted.as_deref())?;
    let out = ctx.general_cmd(
        "QUERY_HCA_CAP",
        prm::query_hca_cap().bytes(),
        prm::QUERY_HCA_CAP_OUT_BYTES,
    )?;
    let caps = prm::parse_hca_caps(&out)?;
    let need = |ok: bool, what: &str| {
        ok.then_some(())
            .ok_or_else(|| Error::Config(format!("{}: {what}", ctx.name())))
    };
    need(caps.rc, "no RC QPs")?;
    need(caps.atomic, "no atomics")?;
    need(
        1 << caps.log_max_qp_sz >= layout.nwqes,
        "send queues shallower than the device library's",
    )?;
    need(
        1 << caps.log_max_cq_sz >= layout.ncqes,
        "CQs smaller than the device library's",
    )?;
    let attr = ctx.query_device()?;
    need(
        attr.limits[LIMIT_ATOMIC_CAP] != 0,
        "no atomics (ibv_device_attr.atomic_cap)",
    )?;
    let (port, port_attr) = active_port(&ctx, attr.phys_port_cnt)?;
    let gid_index: u8 = match std::env::var(GID_INDEX_VAR) {
        Ok(v) => v
            .parse()
            .map_err(|_| Error::Config(format!("{GID_INDEX_VAR}={v}: expected 0..=255")))?,
        Err(_) => 0,
    };
    let ethernet = port_attr.link_layer == LINK_LAYER_ETHERNET;
    let local = Endpoint {
        lid: port_attr.lid,
        ethernet,
        gid: ctx.query_gid(port, gid_index.into())?.raw,
        mac: if ethernet {
            port_mac(ctx.name(), port, gid_index).unwrap_or_default()
        } else {
            [0; 6]
        },
    };
    let pd = ctx.alloc_pd()?;
    let pdn = pd.pdn()?;
    let uar = ctx.alloc_uar()?;
    let eqn = ctx.query_eqn()?;
    let max_rd_atom = attr.limits[LIMIT_MAX_QP_RD_ATOM];
    tracing::info!(
        device = ctx.name(),
        port,
        ethernet,
        "gpu NIC handler: mlx5 device opened with DevX"
    );
    Ok(Nic {
        pd,
        uar,
        pdn,
        eqn,
        port,
        mtu: port_attr.active_mtu as u32,
        log_rd_atomic: log2_capped(max_rd_atom),
        gid_index,
        caps,
        local,
        ctx,
    })
}

/// One RC QP and its CQ.
pub struct NicQueue {
    // Field order is drop order: the QP before the CQ it reports to.
    qp: Obj,
    _cq: Obj,
    qpn: u32,
}

impl Nic {
    /// The device context (user memory is registered through it).
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The PD (memory regions are registered in it).
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The doorbell page every queue rings.
    pub fn uar(&self) -> &Uar {
        &self.uar
    }

    /// How peers reach this NIC.
    pub fn endpoint(&self) -> Endpoint {
        self.local
    }

    /// An RC QP and its CQ over `umem_id`, laid out by `layout` from `offset` on.
    pub fn create_queue(&self, umem_id: u32, offset: u64, layout: NicLayout) -> Result<NicQueue> {
        let place = |ring: usize, dbr: usize| UmemPlace {
            umem_id,
            umem_offset: offset + ring as u64,
            dbr_umem_id: umem_id,
            dbr_offset: offset + dbr as u64,
        };
        let cq_params = CqParams {
            log_size: layout.ncqes.trailing_zeros(),
            uar_page: self.uar.page_id(),
            eqn: self.eqn,
            place: place(layout.cq_at(), layout.cq_dbr_at()),
        };
        let (cq, out) = self.ctx.obj_create(
            "CREATE_CQ",
            commands::create_cq(&cq_params)?.bytes(),
            prm::OUT_BYTES,
        )?;
        let cqn = prm::created_id(&out, "CREATE_CQ")?;
        let qp_params = QpParams {
            pdn: self.pdn,
            log_sq_size: layout.nwqes.trailing_zeros(),
            uar_page: self.uar.page_id(),
            cqn,
            place: place(layout.sq_at(), layout.qp_dbr_at()),
        };
        let (qp, out) = self.ctx.obj_create(
            "CREATE_QP",
            commands::create_qp(&qp_params)?.bytes(),
            prm::OUT_BYTES,
        )?;
        let qpn = prm::created_id(&out, "CREATE_QP")?;
        Ok(NicQueue { qp, _cq: cq, qpn })
    }
}

impl NicQueue {
    /// The QP's number (what the peer's QP names as its remote).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Takes the QP through INIT, RTR and RTS to QP `remote_qpn` at `remote`; `flow` varies
    /// the RoCE v2 UDP source port between queues.
    pub fn connect(&self, nic: &Nic, remote: &Endpoint, remote_qpn: u32, flow: u16) -> Result<()> {
        let run = |what: &str, cmd: prm::Cmd| -> Result<()> {
            let out = self.qp.modify(what, cmd.bytes(), prm::OUT_BYTES)?;
            prm::check(&out, what)
        };
        run("RST2INIT_QP", commands::rst2init(self.qpn, nic.port)?)?;
        let route = if nic.local.ethernet {
            Route::Roce {
                gid: remote.gid,
                gid_index: nic.gid_index,
                mac: remote.mac,
                udp_sport: 0xc000 | (flow & 0x3fff),
            }
        } else {
            Route::Ib { lid: remote.lid }
        };
        let rtr = RtrParams {
            mtu: nic.mtu,
            log_msg_max: LOG_MAX_MSG.min(nic.caps.log_max_msg),
            remote_qpn,
            log_rra_max: nic.log_rd_atomic,
            port: nic.port,
            route,
        };
        run("INIT2RTR_QP", commands::init2rtr(self.qpn, &rtr)?)?;
        run(
            "RTR2RTS_QP",
            commands::rtr2rts(self.qpn, nic.log_rd_atomic)?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_s_parts_do_not_overlap_and_fill_whole_pages() {
        let l = NicLayout {
            nwqes: 1024,
            ncqes: 2048,
        };
        assert_eq!(l.cq_at(), 64 * 1024);
        assert_eq!(l.qp_dbr_at(), 64 * 1024 + 128 * 1024);
        assert_eq!(l.cq_dbr_at(), l.qp_dbr_at() + 8);
        assert_eq!(l.prod_at(), l.cq_dbr_at() + 8);
        assert_eq!(l.bytes(), 4 * NIC_ALIGN);
    }

    #[test]
    fn macs_and_logs_parse_without_panicking() {
        assert_eq!(
            parse_mac("02:11:22:33:44:5f"),
            Some([2, 0x11, 0x22, 0x33, 0x44, 0x5f])
        );
        assert_eq!(parse_mac("02:11:22"), None);
        assert_eq!(parse_mac("zz:11:22:33:44:55"), None);
        assert_eq!(
            (
                log2_capped(0),
                log2_capped(16),
                log2_capped(17),
                log2_capped(1 << 20)
            ),
            (0, 4, 4, 7)
        );
    }
}
