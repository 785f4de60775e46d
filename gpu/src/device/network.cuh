// network.cuh: the device library's network path (IBGDA), appended to ferroshmem_device.cuh
// and atomics.cuh. A peer on another node has no mapping here: each operation on it becomes
// an mlx5 WQE in that peer's RC send queue (ibgda.cuh writes the bytes), the producer index
// goes to the doorbell record and to the cell the NIC handler watches, and completions come
// back as CQEs (one per WQE: every WQE asks for a CQ update). ferroshmem fills one fsh_qp_t
// per peer (gpu/src/nic/queues.rs); mapped peers' entries have no send queue.
//
// Thousands of threads post to one queue at once, NVSHMEM's way: a thread reserves its WQEBBs
// with an atomic add on `resv`, waits for ring space, writes its WQE, then advances `ready` in
// reservation order (a compare-and-swap from its first WQEBB to its end). The doorbell is
// batched: a thread rings it (DBR and the producer cell, under a short lock so the index only
// grows) only if nobody reserved after it, or if the doorbell lags its WQE by FSH_RING_BATCH
// WQEBBs (threads that post without pause would otherwise always leave a later reserver to
// ring, and the handler would see nothing until the ring filled); a later reserver rings for
// both. CQEs (one per WQE:
// every WQE asks for a CQ update) are consumed by whichever waiting thread takes the poll lock;
// the others watch `cons`. Each CQE's wqe_counter names its WQE's first WQEBB, whose end the
// poster left in `ends`. Fetching operations and blocking forms wait for their own WQE's end;
// `_nbi` forms are completed by fsh_quiet. An error CQE is written to the debug report
// (GpuModule::check turns it into a typed error) and the queue stays in error: the handler
// flushes what was posted, so no wait on it hangs, and later operations on the queue return
// at once (fetching ones with 0) without posting.

// WQEBBs the doorbell may lag a submitted WQE before its poster rings anyway.
#define FSH_RING_BATCH 32

struct fsh_qp_t {
    void* sq;              // send queue ring (pinned host memory mapped into the GPU); 0: mapped peer
    const void* cq;        // completion queue ring (pinned host memory)
    fsh_u32* dbr;          // send doorbell record: [0] receive, [1] send producer index (be32)
    fsh_u32* cq_dbr;       // CQ doorbell record: consumer index (be32, 24 bits)
    fsh_u64* prod;         // the producer-index cell the handler watches
    fsh_u64* results;      // fetched values, one word per WQEBB slot (GPU memory; pinned host memory under the cpu handler)
    volatile fsh_u64* ends; // per WQEBB slot a WQE starts at: the WQEBB index after it (GPU memory)
    fsh_u64 rbase;         // the peer's heap base as its agent announced it
    fsh_u32 nwqes, ncqes, qpn, rkey;
    fsh_u32 lkey;
    fsh_u32 poll_lock;     // held by the thread consuming CQEs
    fsh_u32 post_lock;     // held by the thread ringing the doorbell
    volatile fsh_u32 error;
    fsh_u64 resv;          // WQEBBs reserved (atomic add)
    fsh_u64 ready;         // WQEBBs written, in order (compare-and-swap chain)
    volatile fsh_u64 cons; // WQEBBs completed (written by the poll lock's holder)
    volatile fsh_u64 cqes; // CQEs consumed (poll lock)
    volatile fsh_u64 rung; // the producer index last rung (post lock)
    fsh_u64* bf;           // the NIC's doorbell register (`gpu` handler); 0: the cpu handler's cell
    fsh_u32 slot_lkey;     // the key of `results` (fetched values)
    fsh_u32 pad;
    volatile fsh_u64* holds; // per result slot: nonzero while a fetch's owner has not read it (GPU memory)
};

// The send queue of PE `pe`, or 0 for a mapped peer (always 0 where the network path is not
// compiled in: every network branch then folds away).
__device__ __forceinline__ fsh_qp_t* fsh__qp(int pe) {
    if (!FSH_NETWORK || fsh_state.net == 0 || pe < 0 || pe >= fsh_state.n_pes) return 0;
    fsh_qp_t* q = (fsh_qp_t*)fsh_state.net + pe;
    return q->sq ? q : 0;
}

// The remote address of this PE's symmetric address `p` on the queue's peer.
__device__ __forceinline__ fsh_u64 fsh__raddr(fsh_qp_t* q, const void* p) {
    return q->rbase + ((fsh_u64)p - fsh__local_base());
}

// Consumes the CQEs the handler has written, if no other thread is doing so; the first error
// goes to the report.
__device__ __noinline__ void fsh__qp_poll(fsh_qp_t* q, int pe) {
    if (fsh__atom_cas(&q->poll_lock, 0u, 1u) != 0u) return;
    fsh__fence_gpu();
    fsh_ibgda_cqe_t c;
    fsh_u64 seen = q->cqes;
    fsh_u64 cons = q->cons;
    while (fsh_ibgda_cqe_read(q->cq, q->ncqes, q->cqes, &c)) {
        if (c.opcode == FSH_IBGDA_CQE_REQ_ERR && q->error == 0) {
            q->error = c.syndrome ? c.syndrome : 0xffu;
            fsh__report(FSH_OP_NETWORK, pe, 0, c.syndrome);
        }
        fsh_u64 start = cons + (fsh_u64)(fsh_ibgda_u16)(c.wqe_counter - (fsh_ibgda_u16)cons);
        cons = q->ends[start & (q->nwqes - 1)];
        q->cqes = q->cqes + 1;
    }
    if (q->cqes != seen) {
        q->cons = cons;
        *(volatile fsh_u32*)q->cq_dbr = fsh_ibgda_bswap32((fsh_u32)q->cqes & 0xffffffu);
        fsh__fence_sys();
    }
    fsh__fence_gpu();
    fsh__atom_exch(&q->poll_lock, 0u);
}

// Rings the doorbell up to `end` at least, unless a later ring already did (the index only
// grows): the lock's holder rings everything published so far (`ready`), and a thread waiting
// for the lock gives up waiting once the doorbell has passed its `end`, so that the many
// threads that post or wait at once do not queue for the lock one after another.
__device__ __noinline__ void fsh__qp_ring(fsh_qp_t* q, fsh_u64 end) {
    while (fsh__atom_cas(&q->post_lock, 0u, 1u) != 0u) {
        if (q->rung >= end) return;
        fsh__spin();
    }
    fsh__fence_gpu();
    fsh_u64 ready = *(volatile fsh_u64*)&q->ready;
    if (ready > end) end = ready;
    if (end > q->rung) {
        q->rung = end;
        *(volatile fsh_u32*)(q->dbr + 1) = fsh_ibgda_dbr_value((fsh_u32)end);
        fsh__fence_sys();
        if (q->bf) {
            // The first 8 bytes of a control segment (NVSHMEM's doorbell): the producer
            // index and the QP number, each big-endian.
            fsh_u64 ring = (fsh_u64)fsh_ibgda_bswap32(((fsh_u32)end & 0xffffu) << 8) |
                           ((fsh_u64)fsh_ibgda_bswap32(q->qpn << 8) << 32);
            *(volatile fsh_u64*)q->bf = ring;
        } else {
            *(volatile fsh_u64*)q->prod = end;
        }
        fsh__fence_sys();
    }
    fsh__atom_exch(&q->post_lock, 0u);
}

// Waits until the WQEs up to WQEBB index `end` have completed. A waiter rings for what is
// ready and not rung yet: a poster skips the doorbell when someone reserved after it, and
// that one may itself be waiting (for ring space), so whoever waits makes sure it was rung.
__device__ __forceinline__ void fsh__qp_wait(fsh_qp_t* q, int pe, fsh_u64 end) {
    while (q->cons < end) {
        fsh_u64 ready = *(volatile fsh_u64*)&q->ready;
        if (ready > q->rung) fsh__qp_ring(q, ready);
        fsh__qp_poll(q, pe);
        fsh__spin();
    }
    fsh__fence_sys(); // what the completed WQEs wrote (fetched values) after their CQEs
}

// Reserves `nbb` WQEBBs and waits for the handler to free them. Returns the first's index.
__device__ __forceinline__ fsh_u64 fsh__qp_reserve(fsh_qp_t* q, int pe, fsh_u32 nbb) {
    fsh_u64 at = fsh__atom_add(&q->resv, (fsh_u64)nbb);
    if (at + nbb > q->nwqes) fsh__qp_wait(q, pe, at + nbb - q->nwqes);
    return at;
}

// Publishes the WQE just written at `at` (`nbb` WQEBBs), in reservation order; returns its end.
__device__ __forceinline__ fsh_u64 fsh__qp_submit(fsh_qp_t* q, fsh_u64 at, fsh_u32 nbb) {
    fsh_u64 end = at + nbb;
    q->ends[at & (q->nwqes - 1)] = end;
    fsh__fence_sys(); // the WQE's bytes and its end before the index that announces them
    while (fsh__atom_cas(&q->ready, at, end) != at) fsh__spin();
    // The last reserver rings; so does one whose WQEs the doorbell lags by a batch, so that
    // threads posting without pause (a reserver always behind them) are not left unseen
    // until the ring is full.
    if (*(volatile fsh_u64*)&q->resv == end || end - *(volatile fsh_u64*)&q->rung >= FSH_RING_BATCH)
        fsh__qp_ring(q, end);
    return end;
}

// The result slot of the WQE reserved at `at` (a read's or an atomic's local segment). A
// slot comes round again after a lap of the ring, possibly before the previous lap's fetch
// was read by its thread (its completion is what freed the ring space): whoever writes into
// the slot waits until that read is done, and a fetch (`hold`) marks the slot until its own.
__device__ __forceinline__ fsh_u64* fsh__qp_slot(fsh_qp_t* q, fsh_u64 at, bool hold) {
    volatile fsh_u64* h = q->holds + (at & (q->nwqes - 1));
    while (*h != 0) fsh__spin();
    if (hold) *h = at + 1;
    return q->results + (at & (q->nwqes - 1));
}

// Reads a fetch's value from its slot and lets the slot go.
__device__ __forceinline__ fsh_u64 fsh__qp_take(fsh_qp_t* q, fsh_u64 at, fsh_u64* slot) {
    fsh_u64 v = *(volatile fsh_u64*)slot;
    fsh__fence_gpu();
    q->holds[at & (q->nwqes - 1)] = 0;
    return v;
}

// An RDMA write of `bytes` from `src` (inline when small), or a read into `dst`. A queue in
// error takes nothing more (its failure is in the debug report already): the operations of a
// kernel on a lost peer end at once instead of each waiting for its flush.
__device__ __noinline__ void fsh__net_rdma(int pe, bool write, void* local, const void* remote, fsh_size_t bytes, bool wait) {
    fsh_qp_t* q = fsh__qp(pe);
    if (bytes == 0 || q->error) return;
    fsh_u64 raddr = fsh__raddr(q, remote);
    fsh_u64 end;
    if (write && bytes <= 64) {
        fsh_u32 nbb = (2 + (4 + (fsh_u32)bytes + 15) / 16 + 3) / 4;
        fsh_u64 at = fsh__qp_reserve(q, pe, nbb);
        fsh_ibgda_wqe_inline(q->sq, q->nwqes - 1, (fsh_u32)at, q->qpn, FSH_IBGDA_CQ_UPDATE, local, (fsh_u32)bytes, raddr, q->rkey);
        end = fsh__qp_submit(q, at, nbb);
    } else {
        fsh_u32 op = write ? FSH_IBGDA_OP_RDMA_WRITE : FSH_IBGDA_OP_RDMA_READ;
        fsh_u64 at = fsh__qp_reserve(q, pe, 1);
        fsh_ibgda_wqe_rdma(q->sq, q->nwqes - 1, (fsh_u32)at, q->qpn, FSH_IBGDA_CQ_UPDATE, op, 0, (fsh_u64)local, q->lkey, raddr, q->rkey, (fsh_u32)bytes);
        end = fsh__qp_submit(q, at, 1);
    }
    if (wait) fsh__qp_wait(q, pe, end);
}

// Sets the word at symmetric `remote` on `pe` to `value` (a signal set, a barrier flag): an
// 8-byte inline RDMA write with a fence, which the target shows only after the writes posted
// before it on the queue (the data the signal announces). Completed by fsh_quiet.
__device__ __noinline__ void fsh__net_set(int pe, const void* remote, fsh_u64 value) {
    fsh_qp_t* q = fsh__qp(pe);
    if (q->error) return;
    fsh_u32 nbb = (2 + (4 + 8 + 15) / 16 + 3) / 4;
    fsh_u64 at = fsh__qp_reserve(q, pe, nbb);
    fsh_ibgda_wqe_inline(q->sq, q->nwqes - 1, (fsh_u32)at, q->qpn, FSH_IBGDA_CQ_UPDATE | FSH_IBGDA_FENCE, &value, 8,
                         fsh__raddr(q, remote), q->rkey);
    fsh__qp_submit(q, at, nbb);
}

// Reads the `bytes` (at most 8) at symmetric `remote` on `pe` into a result slot and returns
// them (fsh_g): an RDMA read, waited for.
__device__ __noinline__ fsh_u64 fsh__net_g(int pe, const void* remote, fsh_u32 bytes) {
    fsh_qp_t* q = fsh__qp(pe);
    if (q->error) return 0;
    fsh_u64 at = fsh__qp_reserve(q, pe, 1);
    fsh_u64* slot = fsh__qp_slot(q, at, true);
    *(volatile fsh_u64*)slot = 0;
    fsh_ibgda_wqe_rdma(q->sq, q->nwqes - 1, (fsh_u32)at, q->qpn, FSH_IBGDA_CQ_UPDATE, FSH_IBGDA_OP_RDMA_READ, 0,
                       (fsh_u64)slot, q->slot_lkey, fsh__raddr(q, remote), q->rkey, bytes);
    fsh__qp_wait(q, pe, fsh__qp_submit(q, at, 1));
    return fsh__qp_take(q, at, slot);
}

// WQEBBs of an atomic of `family`: an 8-byte masked compare-and-swap (set, swap, and, or)
// takes two, everything else one (ibgda.cuh's fsh_ibgda_wqe_amo).
__device__ __forceinline__ fsh_u32 fsh__amo_wqebbs(fsh_u32 family, fsh_u32 width) {
    if (width != 8) return 1;
    switch (family) {
    case FSH_IBGDA_AMO_SET: case FSH_IBGDA_AMO_SWAP: case FSH_IBGDA_AMO_SIGNAL_SET:
    case FSH_IBGDA_AMO_AND: case FSH_IBGDA_AMO_FETCH_AND: case FSH_IBGDA_AMO_OR: case FSH_IBGDA_AMO_FETCH_OR:
        return 2;
    default:
        return 1;
    }
}

// An atomic of `family` (FSH_IBGDA_AMO_*) on the `width`-byte word at symmetric `remote`;
// returns the old value when `fetch` (waiting for it), else 0 (completed by fsh_quiet).
__device__ __noinline__ fsh_u64 fsh__net_amo(int pe, const void* remote, fsh_u32 family, fsh_u32 width, fsh_u64 value, fsh_u64 compare, bool fetch) {
    fsh_qp_t* q = fsh__qp(pe);
    if (q->error) return 0;
    fsh_u32 nbb = fsh__amo_wqebbs(family, width);
    fsh_u64 at = fsh__qp_reserve(q, pe, nbb);
    fsh_u64* slot = fsh__qp_slot(q, at, fetch);
    fsh_ibgda_wqe_amo(q->sq, q->nwqes - 1, (fsh_u32)at, q->qpn, FSH_IBGDA_CQ_UPDATE, family, width, value, compare,
                      fsh__raddr(q, remote), q->rkey, (fsh_u64)slot, q->slot_lkey);
    fsh_u64 end = fsh__qp_submit(q, at, nbb);
    if (!fetch) return 0;
    fsh__qp_wait(q, pe, end);
    fsh_u64 old = fsh__qp_take(q, at, slot);
    return width == 4 ? old & 0xffffffffull : old;
}

// Completes every operation posted to peers on other nodes (part of fsh_quiet).
__device__ __noinline__ void fsh__net_quiet() {
    if (fsh_state.net == 0) return;
    for (int pe = 0; pe < fsh_state.n_pes; ++pe) {
        fsh_qp_t* q = fsh__qp(pe);
        if (q) fsh__qp_wait(q, pe, *(volatile fsh_u64*)&q->ready);
    }
}

// A value as the bits of its word (an atomic's operand).
template <typename T> __device__ __forceinline__ fsh_u64 fsh__net_word(T v) {
    typedef typename fsh__bits_of<T>::U U;
    return (fsh_u64)fsh__bitcast<U>(v);
}
