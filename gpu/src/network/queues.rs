//! The network path's send queues: one RC send queue per peer on another node, in pinned
//! host memory mapped into the GPU (the `cpu` NIC handler's placement: SQ ring, CQ ring,
//! doorbell records and the producer-index cell, laid out by [`QueueLayout`]), and their
//! descriptors (`fsh_qp_t` of `network.cuh`) in GPU memory for the device library, with each
//! queue's result slots and WQE ends.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

use crate::driver::{self, DeviceAlloc, Pinned};
use crate::ibgda::{Consumer, QueueLayout, QueueMemory, Words};
use crate::nic::PeerHeap;

/// WQEBBs per send queue (NVSHMEM's default QP depth).
pub(crate) const NWQES: usize = 1024;
/// CQEs per completion queue (twice the WQEBBs: room to spare).
pub(crate) const NCQES: usize = 2 * NWQES;

/// Bytes of GPU memory each queue's slot arrays take: result slots, WQE ends and holds, one
/// word per WQEBB each (`fsh_qp_t.results`, `.ends`, `.holds`).
pub(crate) const SLOT_BYTES: usize = 3 * NWQES * 8;

/// The addresses of queue `k`'s slot arrays in memory of `SLOT_BYTES` per queue at `base`:
/// (results, ends, holds).
pub(crate) fn slot_arrays(base: u64, k: usize) -> (u64, u64, u64) {
    let results = base + (k * SLOT_BYTES) as u64;
    let word_array = (NWQES * 8) as u64;
    (results, results + word_array, results + 2 * word_array)
}

/// `fsh_qp_t` of `network.cuh`, field for field (the `gpu` handler fills it too).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(crate) struct QpDesc {
    pub(crate) sq: u64,
    pub(crate) cq: u64,
    pub(crate) dbr: u64,
    pub(crate) cq_dbr: u64,
    pub(crate) prod: u64,
    pub(crate) results: u64,
    pub(crate) ends: u64,
    pub(crate) rbase: u64,
    pub(crate) nwqes: u32,
    pub(crate) ncqes: u32,
    pub(crate) qpn: u32,
    pub(crate) rkey: u32,
    pub(crate) lkey: u32,
    pub(crate) poll_lock: u32,
    pub(crate) post_lock: u32,
    pub(crate) error: u32,
    pub(crate) resv: u64,
    pub(crate) ready: u64,
    pub(crate) cons: u64,
    pub(crate) cqes: u64,
    pub(crate) rung: u64,
    /// The NIC's doorbell register mapped into the GPU (`gpu` handler); 0 under `cpu`.
    pub(crate) bf: u64,
    /// The key of the result slots (the `gpu` handler registers them apart from the heap).
    pub(crate) slot_lkey: u32,
    pub(crate) pad: u32,
    /// Per result slot: nonzero while a fetch's thread has not read it (zeroed at set-up).
    pub(crate) holds: u64,
}

/// Pinned host memory as a queue's words.
struct PinnedWords(Pinned);

impl Words for PinnedWords {
    fn words(&self) -> &[AtomicU64] {
        self.0.words()
    }
}

/// Every send queue of a PE, and their descriptors on its GPU.
pub(crate) struct Queues {
    /// Per peer on another node: its number and the handler's side of its queue.
    pub consumers: Vec<(usize, Consumer)>,
    /// The queues' result slots (`fsh_qp_t.results`), [`NWQES`] words per queue in queue
    /// order, in pinned host memory mapped into the GPU: the handler lands a fetched value
    /// there with one store, where a slot in GPU memory would take a copy and its
    /// synchronisation on each fetch.
    pub result_slots: Arc<Pinned>,
    descriptors: DeviceAlloc,
    _slots: DeviceAlloc,
}

impl Queues {
    /// Queues to the PEs for which `remote` is true (`peers`: their heaps as their agents
    /// announced them), made in `ctx`; `lkey` goes into every WQE's local segments.
    pub fn new(
        ctx: &Arc<CudaContext>,
        remote: &[bool],
        peers: &[PeerHeap],
        lkey: u32,
    ) -> Result<Queues> {
        let layout = QueueLayout::new(NWQES, NCQES)
            .map_err(|e| Error::Config(format!("the network path's queue layout: {e}")))?;
        let n_remote = remote.iter().filter(|r| **r).count();
        // Per queue: result slots, WQE ends, holds (which must start at zero).
        let slots = DeviceAlloc::new(ctx, (n_remote * SLOT_BYTES).max(8))?;
        driver::fill(ctx, slots.addr(), 0, n_remote * SLOT_BYTES)?;
        let result_slots = Arc::new(Pinned::new(ctx, (n_remote * NWQES * 8).max(8))?);
        let mut descs = vec![QpDesc::default(); remote.len()];
        let mut consumers = Vec::with_capacity(n_remote);
        for (k, pe) in (0..remote.len()).filter(|pe| remote[*pe]).enumerate() {
            let pinned = Pinned::new(ctx, layout.words() * 8)?;
            let base = pinned.addr();
            let qpn = pe as u32 + 1;
            let memory = QueueMemory::new(layout, qpn, Arc::new(PinnedWords(pinned)))
                .map_err(|e| Error::Config(format!("the send queue to PE {pe}: {e}")))?;
            let control = base + (layout.control_at() * 8) as u64;
            // The device slot arrays' results go unused here: the pinned ones replace them.
            let (_, ends, holds) = slot_arrays(slots.addr(), k);
            let results = result_slots.addr() + (k * NWQES * 8) as u64;
            let peer = peers.get(pe).ok_or(Error::PeOutOfRange {
                pe,
                n_pes: peers.len(),
            })?;
            descs[pe] = QpDesc {
                sq: base,
                cq: base + (layout.cq_at() * 8) as u64,
                dbr: control,
                cq_dbr: control + 8,
                prod: control + 16,
                results,
                ends,
                holds,
                rbase: peer.base,
                nwqes: NWQES as u32,
                ncqes: NCQES as u32,
                qpn,
                rkey: peer.rkey,
                lkey,
                slot_lkey: lkey,
                ..QpDesc::default()
            };
            consumers.push((pe, Consumer::new(memory)));
        }
        let descriptors = DeviceAlloc::new(ctx, std::mem::size_of_val(descs.as_slice()).max(8))?;
        driver::bind(ctx)?;
        driver::copy_from_host(descriptors.addr(), bytemuck::cast_slice(&descs))?;
        Ok(Queues {
            consumers,
            result_slots,
            descriptors,
            _slots: slots,
        })
    }

    /// Where the descriptors lie on the GPU (`fsh_state.net`).
    pub fn device_addr(&self) -> u64 {
        self.descriptors.addr()
    }
}

#[cfg(test)]
mod tests {
    use super::QpDesc;

    #[test]
    fn the_descriptor_is_laid_out_as_the_device_library_declares_it() {
        // network.cuh: seven pointers, rbase, eight u32, five u64, bf, two u32, holds.
        assert_eq!(
            std::mem::size_of::<QpDesc>(),
            7 * 8 + 8 + 8 * 4 + 5 * 8 + 8 + 2 * 4 + 8
        );
        assert_eq!(std::mem::offset_of!(QpDesc, nwqes), 64);
        assert_eq!(std::mem::offset_of!(QpDesc, poll_lock), 84);
        assert_eq!(std::mem::offset_of!(QpDesc, resv), 96);
        assert_eq!(std::mem::offset_of!(QpDesc, rung), 128);
        assert_eq!(std::mem::offset_of!(QpDesc, bf), 136);
        assert_eq!(std::mem::offset_of!(QpDesc, slot_lkey), 144);
        assert_eq!(std::mem::offset_of!(QpDesc, holds), 152);
    }
}
