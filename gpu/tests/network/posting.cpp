/* The device library's send-queue posting (src/device/network.cuh) run on the host: threads
 * stand in for GPU threads and post at once to one small send queue (inline writes,
 * fetch-adds, two-WQEBB masked swaps that straddle the ring's end), while a consumer thread
 * stands in for the NIC handler: it follows the producer index, checks each WQE's index,
 * performs it on a pretend peer and writes one CQE per WQE, never overrunning the CQ.
 *
 *   posting THREADS ITERATIONS NWQES
 *
 * Prints "ok WQES" when every write arrived exactly once, every fetch-add's old value is
 * distinct (a permutation), and nothing stalled; else the first fault, exit status 1.
 * tests/network_host.rs builds and runs it. */
#include "host_shim.h"
#include "../../src/device/network.cuh"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

fsh_host_state_t fsh_state;
static std::atomic<int> reports{0};

void fsh__report(int, int, const void *, fsh_size_t) { reports.fetch_add(1); }

namespace {

const fsh_u32 QPN = 0x4242;

fsh_u32 be32(const unsigned char *p) {
    return ((fsh_u32)p[0] << 24) | ((fsh_u32)p[1] << 16) | ((fsh_u32)p[2] << 8) | p[3];
}

struct Peer {
    fsh_qp_t *q;
    unsigned char *sq;
    unsigned char *cq;
    std::vector<std::atomic<int>> *writes;
    fsh_u64 adds = 0;
    fsh_u64 cqes = 0;
    fsh_u64 ci = 0;
    int fault = 0;
};

/* The 16-byte segment `seg` of the WQE at WQEBB `idx`. */
const unsigned char *segment(const Peer &p, fsh_u64 idx, fsh_u32 seg) {
    fsh_u64 bb = (idx + seg / 4) & (p.q->nwqes - 1);
    return p.sq + bb * 64 + (seg % 4) * 16;
}

void complete(Peer &p, fsh_u64 idx, fsh_u32 opcode) {
    fsh_u32 used;
    do {
        fsh_u32 consumed = fsh_ibgda_bswap32(*(volatile fsh_u32 *)p.q->cq_dbr) & 0xffffffu;
        used = ((fsh_u32)p.cqes - consumed) & 0xffffffu;
    } while (used >= p.q->ncqes);
    unsigned char *e = p.cq + (p.cqes & (p.q->ncqes - 1)) * 64;
    memset(e, 0, 56);
    fsh_u64 owner = (p.cqes / p.q->ncqes) & 1;
    fsh_u64 sop = fsh_ibgda_bswap32((opcode << 24) | QPN);
    fsh_u64 counter = fsh_ibgda_bswap16((fsh_ibgda_u16)idx);
    fsh_u64 tail = sop | (counter << 32) | ((fsh_u64)((0u << 4) | owner) << 56);
    __atomic_store_n((fsh_u64 *)(e + 56), tail, __ATOMIC_RELEASE);
    p.cqes += 1;
}

/* Performs the WQE at `p.ci`; returns its WQEBBs, 0 on a fault. */
fsh_u32 perform(Peer &p) {
    const unsigned char *ctrl = segment(p, p.ci, 0);
    fsh_u32 w0 = be32(ctrl), w1 = be32(ctrl + 4);
    fsh_u32 opcode = w0 & 0xff, ds = w1 & 0x3f;
    if (((w0 >> 8) & 0xffff) != (p.ci & 0xffff) || (w1 >> 8) != QPN || ds < 2) {
        std::fprintf(stderr, "WQE at %llu: index %u, qpn %#x, ds %u\n", p.ci, (w0 >> 8) & 0xffff, w1 >> 8, ds);
        return 0;
    }
    if (opcode == FSH_IBGDA_OP_RDMA_WRITE) {
        const unsigned char *inl = segment(p, p.ci, 2);
        fsh_u32 tag;
        memcpy(&tag, inl + 4, 4);
        if ((be32(inl) & 0x7fffffffu) != 4 || tag >= p.writes->size()) return 0;
        (*p.writes)[tag].fetch_add(1);
    } else {
        const unsigned char *data = segment(p, p.ci, ds - 1);
        fsh_u64 laddr = ((fsh_u64)be32(data + 8) << 32) | be32(data + 12);
        fsh_u64 old = opcode == FSH_IBGDA_OP_ATOMIC_FA ? p.adds++ : ~0ull;
        *(volatile fsh_u64 *)laddr = old;
    }
    complete(p, p.ci, opcode);
    return (ds + 3) / 4;
}

void consume(Peer &p, std::atomic<bool> &stop) {
    while (!stop.load()) {
        fsh_u64 prod = __atomic_load_n(p.q->prod, __ATOMIC_ACQUIRE);
        while (p.ci < prod) {
            fsh_u32 n = perform(p);
            if (n == 0) {
                p.fault = 1;
                stop.store(true);
                return;
            }
            p.ci += n;
        }
        std::this_thread::yield();
    }
}

void post(int t, int iterations, std::vector<fsh_u64> *olds) {
    static fsh_u64 word = 0, sig = 0;
    for (int i = 0; i < iterations; ++i) {
        fsh_u32 tag = (fsh_u32)(t * iterations + i);
        fsh__net_rdma(1, true, &tag, (void *)64, 4, false);
        (*olds)[tag] = fsh__net_amo(1, &word, FSH_IBGDA_AMO_FETCH_ADD, 8, 1, 0, true);
        if (i % 5 == 0) fsh__net_amo(1, &sig, FSH_IBGDA_AMO_SIGNAL_SET, 8, tag, 0, false);
    }
    fsh__net_quiet();
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int threads = atoi(argv[1]), iterations = atoi(argv[2]);
    fsh_u32 nwqes = (fsh_u32)atoi(argv[3]), ncqes = 2 * nwqes;
    std::vector<unsigned char> sq(nwqes * 64), cq(ncqes * 64, 0xff);
    std::vector<fsh_u64> results(nwqes), ends(nwqes), holds(nwqes), control(4);
    std::vector<fsh_qp_t> qps(2);
    memset(qps.data(), 0, sizeof(fsh_qp_t) * 2);
    fsh_qp_t *q = &qps[1];
    q->sq = sq.data();
    q->cq = cq.data();
    q->dbr = (fsh_u32 *)&control[0];
    q->cq_dbr = (fsh_u32 *)&control[1];
    q->prod = &control[2];
    q->results = results.data();
    q->ends = ends.data();
    q->holds = holds.data();
    q->nwqes = nwqes;
    q->ncqes = ncqes;
    q->qpn = QPN;
    q->slot_lkey = q->lkey = 1;
    fsh_state.net = (fsh_u64)qps.data();
    fsh_state.n_pes = 2;

    size_t total = (size_t)threads * iterations;
    std::vector<std::atomic<int>> writes(total);
    std::vector<fsh_u64> olds(total, ~0ull);
    Peer peer{q, sq.data(), cq.data(), &writes};
    std::atomic<bool> stop{false};
    std::thread consumer(consume, std::ref(peer), std::ref(stop));
    std::vector<std::thread> posters;
    for (int t = 0; t < threads; ++t) posters.emplace_back(post, t, iterations, &olds);
    std::atomic<int> done{0};
    std::thread watchdog([&] {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (done.load() == 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (done.load() == 0) {
            std::fprintf(stderr,
                         "stalled: resv %llu ready %llu rung %llu cons %llu cqes %llu, handler at %llu "
                         "with %llu CQEs written\n",
                         q->resv, q->ready, (fsh_u64)q->rung, (fsh_u64)q->cons, (fsh_u64)q->cqes, peer.ci,
                         peer.cqes);
            std::_Exit(1);
        }
    });
    for (auto &p : posters) p.join();
    done.store(1);
    stop.store(true);
    consumer.join();
    watchdog.join();
    if (peer.fault) return 1;
    for (size_t k = 0; k < total; ++k) {
        if (writes[k].load() != 1) {
            std::fprintf(stderr, "write %zu arrived %d times\n", k, writes[k].load());
            return 1;
        }
    }
    std::vector<char> seen(total, 0);
    for (size_t k = 0; k < total; ++k) {
        if (olds[k] >= total || seen[olds[k]]) {
            std::fprintf(stderr, "fetch-add %zu got %llu (duplicate or out of range)\n", k, olds[k]);
            return 1;
        }
        seen[olds[k]] = 1;
    }
    if (reports.load() != 0) {
        std::fprintf(stderr, "%d error CQEs reported\n", reports.load());
        return 1;
    }
    std::printf("ok %llu\n", peer.cqes);
    return 0;
}
