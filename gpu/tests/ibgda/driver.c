/* driver.c: runs the device-side mlx5 encoder and CQE parser (src/device/ibgda.cuh) on the
 * host, for tests/ibgda_c.rs to check against the Rust decoder and CQE writer.
 *
 *   driver wqes                 one WQE of each kind, each alone in a 4-WQEBB ring prefilled
 *                               with 0xEE: "wqe <index> <wqebbs> <ring as hex>"
 *   driver cqes FILE NCQES N    parses CQEs 0..N of the CQ ring in FILE: "cqe <index> <valid>
 *                               <opcode> <owner> <wqe_counter> <wqe_opcode> <qpn> <byte_cnt>
 *                               <syndrome> <vendor>"
 * The cases and their order are mirrored in tests/ibgda_c.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibgda.cuh"

#define QPN 0x123456u
#define NWQES 4u
#define LADDR 0x1122334455667788ull
#define LKEY 0x01020304u
#define RADDR 0x8877665544332210ull
#define RKEY 0xa1b2c3d4u

static unsigned char ring[NWQES * 64];

/* The flags of case k: signaled when k is even, fenced when k is a multiple of 3. */
static unsigned flags(unsigned k) {
    return (k % 2 == 0 ? FSH_IBGDA_CQ_UPDATE : 0) | (k % 3 == 0 ? FSH_IBGDA_FENCE : 0);
}

static unsigned inline_case(unsigned idx, unsigned fm, unsigned len) {
    unsigned char data[220];
    unsigned i;
    for (i = 0; i < len; i++) data[i] = (unsigned char)(i * 7 + 1);
    return fsh_ibgda_wqe_inline(ring, NWQES - 1, idx, QPN, fm, data, len, RADDR, RKEY);
}

/* Writes case k at idx; returns its WQEBBs (0: no such case). */
static unsigned encode_case(unsigned k, unsigned idx) {
    unsigned m = NWQES - 1, fm = flags(k);
    static const unsigned inline_lens[] = {1, 12, 13, 60, 220};
    if (k == 0) return fsh_ibgda_wqe_nop(ring, m, idx, QPN, fm);
    if (k == 1)
        return fsh_ibgda_wqe_rdma(ring, m, idx, QPN, fm, FSH_IBGDA_OP_RDMA_WRITE, 0, LADDR, LKEY,
                                  RADDR, RKEY, 4096);
    if (k == 2)
        return fsh_ibgda_wqe_rdma(ring, m, idx, QPN, fm, FSH_IBGDA_OP_RDMA_WRITE_IMM, 0xdeadbeefu,
                                  LADDR, LKEY, RADDR, RKEY, 1);
    if (k == 3)
        return fsh_ibgda_wqe_rdma(ring, m, idx, QPN, fm, FSH_IBGDA_OP_RDMA_READ, 0, LADDR, LKEY,
                                  RADDR, RKEY, 0x7fffffffu);
    if (k < 9) return inline_case(idx, fm, inline_lens[k - 4]);
    if (k == 9)
        return fsh_ibgda_wqe_atomic(ring, m, idx, QPN, fm, FSH_IBGDA_OP_ATOMIC_FA, 8, ~0ull, 0, 0,
                                    0, RADDR, RKEY, LADDR, LKEY);
    if (k == 10)
        return fsh_ibgda_wqe_atomic(ring, m, idx, QPN, fm, FSH_IBGDA_OP_ATOMIC_CS, 8, 1, 2, 0, 0,
                                    RADDR, RKEY, LADDR, LKEY);
    if (k == 11)
        return fsh_ibgda_wqe_atomic(ring, m, idx, QPN, fm, FSH_IBGDA_OP_ATOMIC_MASKED_FA, 4, 5,
                                    0x80808080u, 0, 0, RADDR, RKEY, LADDR, LKEY);
    if (k == 12)
        return fsh_ibgda_wqe_atomic(ring, m, idx, QPN, fm, FSH_IBGDA_OP_ATOMIC_MASKED_FA, 8, 5,
                                    ~0ull, 0, 0, RADDR, RKEY, LADDR, LKEY);
    if (k == 13)
        return fsh_ibgda_wqe_atomic(ring, m, idx, QPN, fm, FSH_IBGDA_OP_ATOMIC_MASKED_CS, 4, 1, 2,
                                    3, 4, RADDR, RKEY, LADDR, LKEY);
    if (k == 14)
        return fsh_ibgda_wqe_atomic(ring, m, idx, QPN, fm, FSH_IBGDA_OP_ATOMIC_MASKED_CS, 8,
                                    0x0102030405060708ull, 9, ~0ull, 0xf0ull, RADDR, RKEY, LADDR,
                                    LKEY);
    if (k < 15 + 32) {
        unsigned family = (k - 15) / 2, width = (k - 15) % 2 ? 8 : 4;
        return fsh_ibgda_wqe_amo(ring, m, idx, QPN, fm, family, width, 0x12345678ull, 0x9abcull,
                                 RADDR, RKEY, LADDR, LKEY);
    }
    return 0;
}

static int wqes(void) {
    unsigned k, i, idx = 0xfffdu, n;
    for (k = 0;; k++) {
        memset(ring, 0xee, sizeof ring);
        n = encode_case(k, idx);
        if (n == 0) return 0;
        printf("wqe %u %u ", idx & 0xffffu, n);
        for (i = 0; i < sizeof ring; i++) printf("%02x", ring[i]);
        printf("\n");
        idx = (idx + n) & 0xffffu;
    }
}

static int cqes(const char *path, unsigned ncqes, unsigned count) {
    /* 64-bit words keep the ring aligned for the parser's 64-bit tail load. */
    unsigned long long *cq = (unsigned long long *)calloc(ncqes * 8, sizeof *cq);
    FILE *f = fopen(path, "rb");
    unsigned i;
    if (!cq || !f || fread(cq, 64, ncqes, f) != ncqes) return 1;
    fclose(f);
    for (i = 0; i < count; i++) {
        fsh_ibgda_cqe_t c;
        int valid = fsh_ibgda_cqe_read(cq, ncqes, i, &c);
        if (!valid) memset(&c, 0, sizeof c);
        printf("cqe %u %d %u %u %u %u %u %u %u %u\n", i, valid, c.opcode, c.owner, c.wqe_counter,
               c.wqe_opcode, c.qpn, c.byte_cnt, c.syndrome, c.vendor_syndrome);
    }
    free(cq);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "wqes") == 0) return wqes();
    if (argc == 5 && strcmp(argv[1], "cqes") == 0)
        return cqes(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
    fprintf(stderr, "usage: driver wqes | driver cqes FILE NCQES N\n");
    return 2;
}
