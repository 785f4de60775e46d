//! The `gpu` NIC handler's queues: per peer on another node, an RC QP and its CQ whose send
//! queue, CQ ring and doorbell records lie in GPU memory (`cuMemAlloc`, handed to the NIC as
//! DevX user memory through a dmabuf, or through nvidia-peermem where dmabuf is refused);
//! the GPU heap and the fetch-result slots registered with the NIC; the QPs connected by
//! exchanging QP numbers, addresses, the heap's base and key over the control plane; the
//! NIC's doorbell page mapped into the GPU; and `fsh_qp_t` filled so that kernels post to
//! the NIC directly, as NVSHMEM's IBGDA transport does (`ibgda.cpp`).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Exchange, Result};

use super::queues::{slot_arrays, QpDesc, NCQES, NWQES, SLOT_BYTES};
use crate::devx::handles::{self, Announce};
use crate::devx::setup::{self, Nic, NicLayout, NicQueue, NIC_ALIGN};
use crate::driver::{self, DeviceAlloc, IoMapping};
use crate::verbs::types::{
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use crate::verbs::{Mr, Umem};

/// The control-plane group of the handlers' announcements.
const ANNOUNCE_GROUP: u64 = 0x4E49_4347_0000_0001;
/// Every access a heap or a queue grants the NIC.
const ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
/// The size of the doorbell page mapped into the GPU.
const UAR_PAGE: u64 = 4096;

/// The queue layout the device library's descriptors imply.
pub(crate) fn layout() -> NicLayout {
    NicLayout {
        nwqes: NWQES,
        ncqes: NCQES,
    }
}

/// Opens the NIC for the `gpu` handler, or says why it cannot run here.
pub(crate) fn probe() -> Result<Nic> {
    setup::probe(layout())
}

/// GPU memory the NIC reads and writes, aligned for a dmabuf.
struct NicMemory {
    _alloc: DeviceAlloc,
    base: u64,
    bytes: usize,
}

impl NicMemory {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<NicMemory> {
        let bytes = bytes.div_ceil(NIC_ALIGN) * NIC_ALIGN;
        let alloc = DeviceAlloc::new(ctx, bytes + NIC_ALIGN)?;
        let base = alloc.addr().div_ceil(NIC_ALIGN as u64) * NIC_ALIGN as u64;
        driver::fill(ctx, base, 0, bytes)?;
        Ok(NicMemory {
            _alloc: alloc,
            base,
            bytes,
        })
    }
}

/// Registers `bytes` of GPU memory at `base` in the NIC's PD: through a dmabuf, else
/// through nvidia-peermem.
fn register(ctx: &CudaContext, nic: &Nic, base: u64, bytes: usize) -> Result<Mr> {
    let dmabuf = driver::dmabuf_fd(ctx, base, bytes).and_then(|fd| {
        nic.pd()
            .reg_dmabuf_mr(fd.as_raw_fd(), 0, bytes, base, ACCESS)
    });
    dmabuf.or_else(|first| {
        nic.pd().reg_mr(base, bytes, ACCESS).map_err(|second| {
            Error::Config(format!(
                "registering GPU memory with the NIC failed through a dmabuf ({first}) and through nvidia-peermem ({second})"
            ))
        })
    })
}

/// The same as DevX user memory (the queues' rings and doorbell records).
fn register_umem(ctx: &CudaContext, nic: &Nic, m: &NicMemory) -> Result<Umem> {
    let dmabuf = driver::dmabuf_fd(ctx, m.base, m.bytes).and_then(|fd| {
        nic.context()
            .umem_reg_dmabuf(fd.as_raw_fd(), 0, m.bytes, ACCESS_LOCAL_WRITE)
    });
    dmabuf.or_else(|first| {
        nic.context().umem_reg(m.base, m.bytes, ACCESS_LOCAL_WRITE).map_err(|second| {
            Error::Config(format!(
                "registering queue memory with the NIC failed through a dmabuf ({first}) and through nvidia-peermem ({second})"
            ))
        })
    })
}

/// One peer's queue: its memory, its user-memory registration, its QP and CQ.
struct PeerQueue {
    // Field order is drop order: the QP and CQ, then their umem, then the memory.
    queue: NicQueue,
    _umem: Umem,
    memory: NicMemory,
}

/// The `gpu` handler's queues; see the module documentation.
pub(crate) struct NicQueues {
    // Field order is drop order: descriptors, queues, registrations, doorbell, the NIC.
    descriptors: DeviceAlloc,
    _queues: Vec<(usize, PeerQueue)>,
    _slots_mr: Mr,
    _slots: NicMemory,
    _heap_mr: Mr,
    _doorbell: IoMapping,
    _nic: Nic,
}

/// The local keys and the doorbell register every descriptor carries.
#[derive(Debug, Clone, Copy)]
struct Keys {
    /// The heap's key (local segments of puts and gets).
    heap: u32,
    /// The result slots' key (fetched values).
    slots: u32,
    /// The NIC's doorbell register in the GPU's view.
    register: u64,
}

/// What the set-up needs of the PE.
pub(crate) struct NicParts<'a> {
    /// The PE's context.
    pub ctx: &'a Arc<CudaContext>,
    /// Per PE: whether it lives on another node.
    pub remote: &'a [bool],
    /// The PE's GPU heap.
    pub heap_base: u64,
    /// Its size.
    pub heap_size: usize,
    /// The control plane.
    pub exchange: &'a dyn Exchange,
    /// This PE.
    pub me: usize,
}

impl NicQueues {
    /// Sets the queues up; collective over the PEs of the job (they exchange announcements).
    pub async fn new(nic: Nic, parts: NicParts<'_>) -> Result<NicQueues> {
        let ctx = parts.ctx;
        let heap_mr = register(ctx, &nic, parts.heap_base, parts.heap_size)?;
        let n_remote = parts.remote.iter().filter(|r| **r).count();
        // Per queue: result slots, WQE ends, holds (which must start at zero).
        let slots = NicMemory::new(ctx, (n_remote * SLOT_BYTES).max(8))?;
        driver::fill(ctx, slots.base, 0, n_remote * SLOT_BYTES)?;
        let slots_mr = register(ctx, &nic, slots.base, slots.bytes)?;
        let mut queues = Vec::with_capacity(n_remote);
        for pe in (0..parts.remote.len()).filter(|pe| parts.remote[*pe]) {
            queues.push((pe, Self::queue(ctx, &nic)?));
        }
        let mut qpns = vec![0; parts.remote.len()];
        for (pe, q) in &queues {
            qpns[*pe] = q.queue.qpn();
        }
        let mine = Announce {
            endpoint: nic.endpoint(),
            rkey: heap_mr.rkey(),
            base: parts.heap_base,
            qpns,
        };
        let n = parts.remote.len();
        let all = parts
            .exchange
            .exchange(ANNOUNCE_GROUP, parts.me, n, handles::encode(&mine))
            .await?;
        let mut peers = Vec::with_capacity(queues.len());
        for (pe, q) in &queues {
            let peer = handles::decode(*pe, all.get(*pe).map_or(&[][..], Vec::as_slice))?;
            let remote_qpn = *peer.qpns.get(parts.me).ok_or_else(|| {
                Error::Config(format!(
                    "PE {pe} announced QPs for {} PEs, not {n}",
                    peer.qpns.len()
                ))
            })?;
            q.queue
                .connect(&nic, &peer.endpoint, remote_qpn, (parts.me * n + pe) as u16)?;
            peers.push(peer);
        }
        let doorbell = Self::map_doorbell(ctx, &nic)?;
        let register = doorbell.device_addr() + (nic.uar().reg_addr() & (UAR_PAGE - 1));
        tracing::debug!(
            pe = parts.me,
            register,
            "gpu NIC handler: doorbell register mapped for the GPU"
        );
        let keys = Keys {
            heap: heap_mr.lkey(),
            slots: slots_mr.lkey(),
            register,
        };
        let descs = Self::descriptors(&queues, &peers, &slots, keys, n);
        let descriptors = DeviceAlloc::new(ctx, std::mem::size_of_val(descs.as_slice()).max(8))?;
        driver::bind(ctx)?;
        driver::copy_from_host(descriptors.addr(), bytemuck::cast_slice(&descs))?;
        tracing::info!(
            pe = parts.me,
            queues = queues.len(),
            "gpu NIC handler: queues connected"
        );
        Ok(NicQueues {
            descriptors,
            _queues: queues,
            _slots_mr: slots_mr,
            _slots: slots,
            _heap_mr: heap_mr,
            _doorbell: doorbell,
            _nic: nic,
        })
    }

    /// One peer's queue: GPU memory (CQEs marked invalid), its umem, its QP and CQ.
    fn queue(ctx: &Arc<CudaContext>, nic: &Nic) -> Result<PeerQueue> {
        let l = layout();
        let memory = NicMemory::new(ctx, l.bytes())?;
        driver::fill(ctx, memory.base + l.cq_at() as u64, 0xff, l.ncqes * 64)?;
        let umem = register_umem(ctx, nic, &memory)?;
        let queue = nic.create_queue(umem.id(), 0, l)?;
        Ok(PeerQueue {
            queue,
            _umem: umem,
            memory,
        })
    }

    /// The doorbell page mapped into the GPU.
    fn map_doorbell(ctx: &Arc<CudaContext>, nic: &Nic) -> Result<IoMapping> {
        let page = nic.uar().base_addr() & !(UAR_PAGE - 1);
        IoMapping::new(ctx, page, UAR_PAGE as usize)
    }

    /// `fsh_qp_t` per PE: filled for the peers with a queue, empty for the others.
    fn descriptors(
        queues: &[(usize, PeerQueue)],
        peers: &[Announce],
        slots: &NicMemory,
        keys: Keys,
        n: usize,
    ) -> Vec<QpDesc> {
        let l = layout();
        let mut descs = vec![QpDesc::default(); n];
        for (k, ((pe, q), peer)) in queues.iter().zip(peers).enumerate() {
            let base = q.memory.base;
            let (results, ends, holds) = slot_arrays(slots.base, k);
            descs[*pe] = QpDesc {
                sq: base + l.sq_at() as u64,
                cq: base + l.cq_at() as u64,
                dbr: base + l.qp_dbr_at() as u64,
                cq_dbr: base + l.cq_dbr_at() as u64,
                prod: base + l.prod_at() as u64,
                results,
                ends,
                holds,
                rbase: peer.base,
                nwqes: NWQES as u32,
                ncqes: NCQES as u32,
                qpn: q.queue.qpn(),
                rkey: peer.rkey,
                lkey: keys.heap,
                bf: keys.register,
                slot_lkey: keys.slots,
                ..QpDesc::default()
            };
        }
        descs
    }

    /// Where the queues' descriptors lie on the GPU (`fsh_state.net`).
    pub fn device_addr(&self) -> u64 {
        self.descriptors.addr()
    }
}
