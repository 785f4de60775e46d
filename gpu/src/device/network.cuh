// network.cuh: the device library's network path (IBGDA), appended to ferroshmem_device.cuh.
// A peer on another node has no mapping here: each operation on it becomes an mlx5 WQE in
// that peer's RC send queue (ibgda.cuh writes the bytes), the producer index goes to the
// doorbell record and to the cell the NIC handler watches, and completions come back as CQEs
// (one per WQE: every WQE asks for a CQ update). ferroshmem fills one fsh_qp_t per peer
// (gpu/src/nic/queues.rs); mapped peers' entries have no send queue.
//
// One thread at a time works a queue (a lock per queue, in GPU memory): it reserves WQEBBs,
// writes the WQE, publishes the producer index, and consumes CQEs, advancing the CQ doorbell
// record so the handler never overruns the CQ. Fetching operations and blocking forms wait
// for their own CQE; `_nbi` forms are completed by fsh_quiet. An error CQE is written to the
// debug report (GpuModule::check turns it into a typed error) and the queue stays in error:
// the handler flushes what follows, so no wait on it hangs.

struct fsh_qp_t {
    void* sq;              // send queue ring (pinned host memory mapped into the GPU); 0: mapped peer
    const void* cq;        // completion queue ring (pinned host memory)
    fsh_u32* dbr;          // send doorbell record: [0] receive, [1] send producer index (be32)
    fsh_u32* cq_dbr;       // CQ doorbell record: consumer index (be32, 24 bits)
    fsh_u64* prod;         // the producer-index cell the handler watches
    fsh_u64* results;      // fetched values, one word per WQEBB slot (GPU memory)
    volatile fsh_u64* ends; // per posted WQE (mod nwqes): the WQEBB index after it (GPU memory)
    fsh_u64 rbase;         // the peer's heap base as its agent announced it
    fsh_u32 nwqes, ncqes, qpn, rkey;
    fsh_u32 lkey, lock;
    volatile fsh_u32 error, pad;
    // Below: the queue's state, read and written by whichever thread holds the lock, through
    // volatile accesses (to the GPU's L2, never a stale line of another SM's L1).
    volatile fsh_u64 pi;   // next WQEBB index
    volatile fsh_u64 wqes; // WQEs posted
    volatile fsh_u64 cqes; // CQEs consumed
    volatile fsh_u64 ci;   // WQEBBs the consumed CQEs free
};

// The send queue of PE `pe`, or 0 for a mapped peer.
__device__ __forceinline__ fsh_qp_t* fsh__qp(int pe) {
    if (fsh_state.net == 0 || pe < 0 || pe >= fsh_state.n_pes) return 0;
    fsh_qp_t* q = (fsh_qp_t*)fsh_state.net + pe;
    return q->sq ? q : 0;
}

__device__ __forceinline__ void fsh__qp_lock(fsh_qp_t* q) {
    while (fsh__atom_cas(&q->lock, 0u, 1u) != 0u) {}
    fsh__fence_gpu();
}
__device__ __forceinline__ void fsh__qp_unlock(fsh_qp_t* q) {
    fsh__fence_gpu();
    fsh__atom_exch(&q->lock, 0u);
}

// The remote address of this PE's symmetric address `p` on the queue's peer.
__device__ __forceinline__ fsh_u64 fsh__raddr(fsh_qp_t* q, const void* p) {
    return q->rbase + ((fsh_u64)p - fsh__local_base());
}

// Consumes the CQEs the handler has written (lock held); the first error goes to the report.
__device__ __noinline__ void fsh__qp_poll(fsh_qp_t* q, int pe) {
    fsh_ibgda_cqe_t c;
    fsh_u64 seen = q->cqes;
    while (q->cqes < q->wqes && fsh_ibgda_cqe_read(q->cq, q->ncqes, q->cqes, &c)) {
        if (c.opcode == FSH_IBGDA_CQE_REQ_ERR && q->error == 0) {
            q->error = c.syndrome ? c.syndrome : 0xffu;
            fsh__report(FSH_OP_NETWORK, pe, 0, c.syndrome);
        }
        q->ci = q->ends[q->cqes & (q->nwqes - 1)];
        q->cqes += 1;
    }
    if (q->cqes != seen) {
        *(volatile fsh_u32*)q->cq_dbr = fsh_ibgda_bswap32((fsh_u32)q->cqes & 0xffffffu);
        fsh__fence_sys();
    }
}

// Room for `nbb` WQEBBs (lock held): waits for the handler to free them. Returns the index.
__device__ __forceinline__ fsh_u32 fsh__qp_reserve(fsh_qp_t* q, int pe, fsh_u32 nbb) {
    while (q->pi + nbb - q->ci > q->nwqes || q->wqes - q->cqes >= q->nwqes) fsh__qp_poll(q, pe);
    return (fsh_u32)q->pi;
}

// Publishes the WQE just written at the reserved index (lock held); returns its number + 1.
__device__ __forceinline__ fsh_u64 fsh__qp_submit(fsh_qp_t* q, fsh_u32 nbb) {
    q->ends[q->wqes & (q->nwqes - 1)] = q->pi + nbb;
    q->pi += nbb;
    q->wqes += 1;
    fsh__fence_sys(); // the WQE's bytes before the indices that announce it
    *(volatile fsh_u32*)(q->dbr + 1) = fsh_ibgda_dbr_value((fsh_u32)q->pi);
    *(volatile fsh_u64*)q->prod = q->pi;
    fsh__fence_sys();
    return q->wqes;
}

// Waits (lock held) until WQE number `upto` (1-based) and all before it have completed.
__device__ __forceinline__ void fsh__qp_wait(fsh_qp_t* q, int pe, fsh_u64 upto) {
    while (q->cqes < upto) fsh__qp_poll(q, pe);
}

// An RDMA write of `bytes` from `src` (inline when small), or a read into `dst`.
__device__ __noinline__ void fsh__net_rdma(int pe, bool write, void* local, const void* remote, fsh_size_t bytes, bool wait) {
    fsh_qp_t* q = fsh__qp(pe);
    if (bytes == 0) return;
    fsh__qp_lock(q);
    fsh_u32 at;
    fsh_u64 raddr = fsh__raddr(q, remote);
    if (write && bytes <= 64) {
        fsh_u32 nbb = (2 + (4 + (fsh_u32)bytes + 15) / 16 + 3) / 4;
        at = fsh__qp_reserve(q, pe, nbb);
        fsh_ibgda_wqe_inline(q->sq, q->nwqes - 1, at, q->qpn, FSH_IBGDA_CQ_UPDATE, local, (fsh_u32)bytes, raddr, q->rkey);
        fsh_u64 n = fsh__qp_submit(q, nbb);
        if (wait) fsh__qp_wait(q, pe, n);
    } else {
        fsh_u32 op = write ? FSH_IBGDA_OP_RDMA_WRITE : FSH_IBGDA_OP_RDMA_READ;
        at = fsh__qp_reserve(q, pe, 1);
        fsh_ibgda_wqe_rdma(q->sq, q->nwqes - 1, at, q->qpn, FSH_IBGDA_CQ_UPDATE, op, 0, (fsh_u64)local, q->lkey, raddr, q->rkey, (fsh_u32)bytes);
        fsh_u64 n = fsh__qp_submit(q, 1);
        if (wait) fsh__qp_wait(q, pe, n);
    }
    fsh__qp_unlock(q);
}

// Reads the `bytes` (at most 8) at symmetric `remote` on `pe` into a result slot and returns
// them (fsh_g): an RDMA read, waited for.
__device__ __noinline__ fsh_u64 fsh__net_g(int pe, const void* remote, fsh_u32 bytes) {
    fsh_qp_t* q = fsh__qp(pe);
    fsh__qp_lock(q);
    fsh_u32 at = fsh__qp_reserve(q, pe, 1);
    fsh_u64* slot = q->results + (at & (q->nwqes - 1));
    *(volatile fsh_u64*)slot = 0;
    fsh_ibgda_wqe_rdma(q->sq, q->nwqes - 1, at, q->qpn, FSH_IBGDA_CQ_UPDATE, FSH_IBGDA_OP_RDMA_READ, 0,
                       (fsh_u64)slot, q->lkey, fsh__raddr(q, remote), q->rkey, bytes);
    fsh__qp_wait(q, pe, fsh__qp_submit(q, 1));
    fsh__fence_sys();
    fsh_u64 v = *(volatile fsh_u64*)slot;
    fsh__qp_unlock(q);
    return v;
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
    fsh__qp_lock(q);
    fsh_u32 nbb = fsh__amo_wqebbs(family, width);
    fsh_u32 at = fsh__qp_reserve(q, pe, nbb);
    fsh_u64* slot = q->results + (at & (q->nwqes - 1));
    fsh_ibgda_wqe_amo(q->sq, q->nwqes - 1, at, q->qpn, FSH_IBGDA_CQ_UPDATE, family, width, value, compare,
                      fsh__raddr(q, remote), q->rkey, (fsh_u64)slot, q->lkey);
    fsh_u64 n = fsh__qp_submit(q, nbb);
    fsh_u64 old = 0;
    if (fetch) {
        fsh__qp_wait(q, pe, n);
        fsh__fence_sys();
        old = *(volatile fsh_u64*)slot;
        if (width == 4) old &= 0xffffffffull;
    }
    fsh__qp_unlock(q);
    return old;
}

// Completes every operation posted to peers on other nodes (part of fsh_quiet).
__device__ __noinline__ void fsh__net_quiet() {
    if (fsh_state.net == 0) return;
    for (int pe = 0; pe < fsh_state.n_pes; ++pe) {
        fsh_qp_t* q = fsh__qp(pe);
        if (!q) continue;
        fsh__qp_lock(q);
        fsh__qp_wait(q, pe, q->wqes);
        fsh__qp_unlock(q);
    }
}

// A value as the bits of its word (an atomic's operand).
template <typename T> __device__ __forceinline__ fsh_u64 fsh__net_word(T v) {
    typedef typename fsh__bits_of<T>::U U;
    return (fsh_u64)fsh__bitcast<U>(v);
}
