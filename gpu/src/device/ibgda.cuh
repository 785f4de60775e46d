// ibgda.cuh: mlx5 send WQE segments and CQE parsing in portable C, the device side of
// ferroshmem's GPU-initiated networking (gpu::ibgda in Rust holds the same layouts, the
// decoder and the tests that prove this file byte-exact to them).
//
// Self-contained: no #include. Every function is marked FSH_IBGDA_FN, which the NVRTC side
// defines as `__device__ __forceinline__` before including this file; a host compile gets
// `static inline`. Stores go through volatile pointers, 32 bits at a time (as NVSHMEM's
// ibgda_store_relaxed); byte swaps are written with shifts. Memory is little-endian (every
// CUDA GPU, x86-64 and arm64 Linux): a big-endian field is stored as the byte swap of its value.
//
// A send queue is `nwqes` 64-byte WQEBBs at `sq`, `mask = nwqes - 1`; a WQE's segment `s`
// (16 bytes each) lies in WQEBB `(idx + s / 4) & mask`, so WQEs wrap around the ring's end.
#ifndef FSH_IBGDA_CUH
#define FSH_IBGDA_CUH

#ifndef FSH_IBGDA_FN
#define FSH_IBGDA_FN static inline
#endif
// Ordering after a CQE's last 8 bytes were seen valid (the device side: a fence).
#ifndef FSH_IBGDA_ACQUIRE
#define FSH_IBGDA_ACQUIRE()
#endif

typedef unsigned char fsh_ibgda_u8;
typedef unsigned short fsh_ibgda_u16;
typedef unsigned int fsh_ibgda_u32;
typedef unsigned long long fsh_ibgda_u64;

// Send opcodes (MLX5_OPCODE_*), control flags (MLX5_WQE_CTRL_*) and sizes.
enum {
    FSH_IBGDA_OP_NOP = 0x00,
    FSH_IBGDA_OP_RDMA_WRITE = 0x08,
    FSH_IBGDA_OP_RDMA_WRITE_IMM = 0x09,
    FSH_IBGDA_OP_RDMA_READ = 0x10,
    FSH_IBGDA_OP_ATOMIC_CS = 0x11,
    FSH_IBGDA_OP_ATOMIC_FA = 0x12,
    FSH_IBGDA_OP_ATOMIC_MASKED_CS = 0x14,
    FSH_IBGDA_OP_ATOMIC_MASKED_FA = 0x15,
    FSH_IBGDA_CQ_UPDATE = 0x08,
    FSH_IBGDA_FENCE = 0x80,
    FSH_IBGDA_EXT_AMO_OPMOD_4 = 0x08,
    FSH_IBGDA_EXT_AMO_OPMOD_8 = 0x09,
    FSH_IBGDA_WQEBB = 64,
    FSH_IBGDA_CQE_REQ = 0,
    FSH_IBGDA_CQE_REQ_ERR = 13,
    FSH_IBGDA_CQE_INVALID = 15
};

// OpenSHMEM atomic families, in gpu::ibgda::AmoFamily's order.
enum {
    FSH_IBGDA_AMO_INC, FSH_IBGDA_AMO_FETCH_INC, FSH_IBGDA_AMO_ADD, FSH_IBGDA_AMO_FETCH_ADD,
    FSH_IBGDA_AMO_SET, FSH_IBGDA_AMO_SWAP, FSH_IBGDA_AMO_SIGNAL_SET, FSH_IBGDA_AMO_SIGNAL_ADD,
    FSH_IBGDA_AMO_AND, FSH_IBGDA_AMO_FETCH_AND, FSH_IBGDA_AMO_OR, FSH_IBGDA_AMO_FETCH_OR,
    FSH_IBGDA_AMO_XOR, FSH_IBGDA_AMO_FETCH_XOR, FSH_IBGDA_AMO_FETCH, FSH_IBGDA_AMO_COMPARE_SWAP
};

FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_bswap32(fsh_ibgda_u32 v) {
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

FSH_IBGDA_FN fsh_ibgda_u16 fsh_ibgda_bswap16(fsh_ibgda_u16 v) {
    return (fsh_ibgda_u16)((v >> 8) | (v << 8));
}

// Segment `seg` of WQE `idx`, as four 32-bit words.
FSH_IBGDA_FN volatile fsh_ibgda_u32 *fsh_ibgda_seg(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                                   fsh_ibgda_u32 seg) {
    fsh_ibgda_u32 bb = (idx + seg / 4) & mask;
    return (volatile fsh_ibgda_u32 *)((fsh_ibgda_u8 *)sq + bb * FSH_IBGDA_WQEBB + (seg % 4) * 16);
}

// One 16-byte segment from four big-endian 32-bit fields.
FSH_IBGDA_FN void fsh_ibgda_seg_be32(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                     fsh_ibgda_u32 seg, fsh_ibgda_u32 a, fsh_ibgda_u32 b,
                                     fsh_ibgda_u32 c, fsh_ibgda_u32 d) {
    volatile fsh_ibgda_u32 *p = fsh_ibgda_seg(sq, mask, idx, seg);
    p[0] = fsh_ibgda_bswap32(a);
    p[1] = fsh_ibgda_bswap32(b);
    p[2] = fsh_ibgda_bswap32(c);
    p[3] = fsh_ibgda_bswap32(d);
}

// One 16-byte segment from two big-endian 64-bit fields.
FSH_IBGDA_FN void fsh_ibgda_seg_be64(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                     fsh_ibgda_u32 seg, fsh_ibgda_u64 a, fsh_ibgda_u64 b) {
    fsh_ibgda_seg_be32(sq, mask, idx, seg, (fsh_ibgda_u32)(a >> 32), (fsh_ibgda_u32)a,
                       (fsh_ibgda_u32)(b >> 32), (fsh_ibgda_u32)b);
}

// mlx5_wqe_ctrl_seg: opmod_idx_opcode, qpn_ds, signature = 0, dci_stream_channel_id = 0,
// fm_ce_se, imm.
FSH_IBGDA_FN void fsh_ibgda_ctrl(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                 fsh_ibgda_u32 opmod, fsh_ibgda_u32 opcode, fsh_ibgda_u32 qpn,
                                 fsh_ibgda_u32 ds, fsh_ibgda_u32 fm_ce_se, fsh_ibgda_u32 imm) {
    fsh_ibgda_seg_be32(sq, mask, idx, 0, (opmod << 24) | ((idx & 0xffffu) << 8) | opcode,
                       (qpn << 8) | ds, fm_ce_se & 0xffu, imm);
}

// mlx5_wqe_raddr_seg: raddr, rkey, reserved.
FSH_IBGDA_FN void fsh_ibgda_raddr(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                  fsh_ibgda_u32 seg, fsh_ibgda_u64 raddr, fsh_ibgda_u32 rkey) {
    fsh_ibgda_seg_be32(sq, mask, idx, seg, (fsh_ibgda_u32)(raddr >> 32), (fsh_ibgda_u32)raddr,
                       rkey, 0);
}

// mlx5_wqe_data_seg: byte_count, lkey, addr.
FSH_IBGDA_FN void fsh_ibgda_data(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                 fsh_ibgda_u32 seg, fsh_ibgda_u32 byte_count, fsh_ibgda_u32 lkey,
                                 fsh_ibgda_u64 addr) {
    fsh_ibgda_seg_be32(sq, mask, idx, seg, byte_count, lkey, (fsh_ibgda_u32)(addr >> 32),
                       (fsh_ibgda_u32)addr);
}

// mlx5_wqe_inl_data_seg at segment `seg`: byte_count | MLX5_INLINE_SEG, the bytes, zero
// padding to 16. Returns the segments it takes.
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_inline(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                            fsh_ibgda_u32 seg, const void *data,
                                            fsh_ibgda_u32 len) {
    const fsh_ibgda_u8 *src = (const fsh_ibgda_u8 *)data;
    fsh_ibgda_u32 segs = (4 + len + 15) / 16;
    fsh_ibgda_u32 s, w;
    for (s = 0; s < segs; s++) {
        volatile fsh_ibgda_u32 *p = fsh_ibgda_seg(sq, mask, idx, seg + s);
        for (w = 0; w < 4; w++) {
            fsh_ibgda_u32 word = 0, k;
            for (k = 0; k < 4; k++) {
                fsh_ibgda_u32 at = s * 16 + w * 4 + k; // byte of the segment run
                fsh_ibgda_u32 b = 0;
                if (at < 4) b = ((len | 0x80000000u) >> (8 * (3 - at))) & 0xffu;
                else if (at - 4 < len) b = src[at - 4];
                word |= b << (8 * k);
            }
            p[w] = word;
        }
    }
    return segs;
}

// A NOP (ds 2, its second segment zero, as NVSHMEM's ibgda_write_nop_wqe). Returns WQEBBs.
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_wqe_nop(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                             fsh_ibgda_u32 qpn, fsh_ibgda_u32 fm_ce_se) {
    fsh_ibgda_ctrl(sq, mask, idx, 0, FSH_IBGDA_OP_NOP, qpn, 2, fm_ce_se, 0);
    fsh_ibgda_seg_be32(sq, mask, idx, 1, 0, 0, 0, 0);
    return 1;
}

// RDMA_WRITE, RDMA_WRITE_IMM (imm) or RDMA_READ of `len` bytes: ctrl + raddr + data (ds 3).
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_wqe_rdma(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                              fsh_ibgda_u32 qpn, fsh_ibgda_u32 fm_ce_se,
                                              fsh_ibgda_u32 opcode, fsh_ibgda_u32 imm,
                                              fsh_ibgda_u64 laddr, fsh_ibgda_u32 lkey,
                                              fsh_ibgda_u64 raddr, fsh_ibgda_u32 rkey,
                                              fsh_ibgda_u32 len) {
    fsh_ibgda_u32 i = opcode == FSH_IBGDA_OP_RDMA_WRITE_IMM ? imm : 0;
    fsh_ibgda_ctrl(sq, mask, idx, 0, opcode, qpn, 3, fm_ce_se, i);
    fsh_ibgda_raddr(sq, mask, idx, 1, raddr, rkey);
    fsh_ibgda_data(sq, mask, idx, 2, len, lkey, laddr);
    return 1;
}

// An inline RDMA_WRITE of `len` (1..=220) bytes: ctrl + raddr + inline. Returns WQEBBs.
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_wqe_inline(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                                fsh_ibgda_u32 qpn, fsh_ibgda_u32 fm_ce_se,
                                                const void *data, fsh_ibgda_u32 len,
                                                fsh_ibgda_u64 raddr, fsh_ibgda_u32 rkey) {
    fsh_ibgda_u32 ds = 2 + (4 + len + 15) / 16;
    fsh_ibgda_ctrl(sq, mask, idx, 0, FSH_IBGDA_OP_RDMA_WRITE, qpn, ds, fm_ce_se, 0);
    fsh_ibgda_raddr(sq, mask, idx, 1, raddr, rkey);
    fsh_ibgda_inline(sq, mask, idx, 2, data, len);
    return (ds + 3) / 4;
}

// An atomic: ctrl + raddr + operand segment(s) + data (the old value's local buffer).
// Operands by opcode: ATOMIC_FA a = add; ATOMIC_CS a = swap, b = compare; ATOMIC_MASKED_FA
// a = add, b = field boundary; ATOMIC_MASKED_CS a = swap, b = compare, c = swap mask,
// d = compare mask. `width` is 4 or 8 (the unmasked opcodes take 8 only). Returns WQEBBs.
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_wqe_atomic(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                                fsh_ibgda_u32 qpn, fsh_ibgda_u32 fm_ce_se,
                                                fsh_ibgda_u32 opcode, fsh_ibgda_u32 width,
                                                fsh_ibgda_u64 a, fsh_ibgda_u64 b,
                                                fsh_ibgda_u64 c, fsh_ibgda_u64 d,
                                                fsh_ibgda_u64 raddr, fsh_ibgda_u32 rkey,
                                                fsh_ibgda_u64 laddr, fsh_ibgda_u32 lkey) {
    int masked = opcode == FSH_IBGDA_OP_ATOMIC_MASKED_CS || opcode == FSH_IBGDA_OP_ATOMIC_MASKED_FA;
    fsh_ibgda_u32 opmod = !masked ? 0
                          : (width == 4 ? FSH_IBGDA_EXT_AMO_OPMOD_4 : FSH_IBGDA_EXT_AMO_OPMOD_8);
    int two = opcode == FSH_IBGDA_OP_ATOMIC_MASKED_CS && width == 8;
    fsh_ibgda_u32 ds = two ? 5 : 4;
    fsh_ibgda_ctrl(sq, mask, idx, opmod, opcode, qpn, ds, fm_ce_se, 0);
    fsh_ibgda_raddr(sq, mask, idx, 1, raddr, rkey);
    if (two) {
        fsh_ibgda_seg_be64(sq, mask, idx, 2, a, b);
        fsh_ibgda_seg_be64(sq, mask, idx, 3, c, d);
        fsh_ibgda_data(sq, mask, idx, 4, width, lkey, laddr);
        return 2;
    }
    if (!masked) {
        fsh_ibgda_seg_be64(sq, mask, idx, 2, a, opcode == FSH_IBGDA_OP_ATOMIC_CS ? b : 0);
    } else if (width == 8) {
        fsh_ibgda_seg_be64(sq, mask, idx, 2, a, b);
    } else if (opcode == FSH_IBGDA_OP_ATOMIC_MASKED_FA) {
        fsh_ibgda_seg_be32(sq, mask, idx, 2, (fsh_ibgda_u32)a, (fsh_ibgda_u32)b, 0, 0);
    } else {
        fsh_ibgda_seg_be32(sq, mask, idx, 2, (fsh_ibgda_u32)a, (fsh_ibgda_u32)b, (fsh_ibgda_u32)c,
                           (fsh_ibgda_u32)d);
    }
    fsh_ibgda_data(sq, mask, idx, 3, width, lkey, laddr);
    return 1;
}

// An OpenSHMEM atomic of `family` as NVSHMEM's IBGDA posts it (see gpu::ibgda::amo): masked
// FA for inc/add/fetch/xor (xor: boundary all ones), masked CS with compare mask 0 for
// set/swap/and/or, ATOMIC_FA / ATOMIC_CS for 8-byte fetch-add / compare-swap. Returns WQEBBs.
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_wqe_amo(void *sq, fsh_ibgda_u32 mask, fsh_ibgda_u32 idx,
                                             fsh_ibgda_u32 qpn, fsh_ibgda_u32 fm_ce_se,
                                             fsh_ibgda_u32 family, fsh_ibgda_u32 width,
                                             fsh_ibgda_u64 value, fsh_ibgda_u64 compare,
                                             fsh_ibgda_u64 raddr, fsh_ibgda_u32 rkey,
                                             fsh_ibgda_u64 laddr, fsh_ibgda_u32 lkey) {
    fsh_ibgda_u64 all = width == 4 ? 0xffffffffull : ~0ull;
    fsh_ibgda_u32 op = FSH_IBGDA_OP_ATOMIC_MASKED_FA;
    fsh_ibgda_u64 a = value, b = 0, c = 0, d = 0;
    switch (family) {
    case FSH_IBGDA_AMO_INC: case FSH_IBGDA_AMO_FETCH_INC: a = 1; break;
    case FSH_IBGDA_AMO_FETCH: a = 0; break;
    case FSH_IBGDA_AMO_XOR: case FSH_IBGDA_AMO_FETCH_XOR: b = all; break;
    case FSH_IBGDA_AMO_SET: case FSH_IBGDA_AMO_SWAP: case FSH_IBGDA_AMO_SIGNAL_SET:
        op = FSH_IBGDA_OP_ATOMIC_MASKED_CS; c = all; break;
    case FSH_IBGDA_AMO_AND: case FSH_IBGDA_AMO_FETCH_AND:
        op = FSH_IBGDA_OP_ATOMIC_MASKED_CS; c = ~value & all; break;
    case FSH_IBGDA_AMO_OR: case FSH_IBGDA_AMO_FETCH_OR:
        op = FSH_IBGDA_OP_ATOMIC_MASKED_CS; c = value; break;
    case FSH_IBGDA_AMO_FETCH_ADD:
        if (width == 8) op = FSH_IBGDA_OP_ATOMIC_FA;
        break;
    case FSH_IBGDA_AMO_COMPARE_SWAP:
        op = width == 8 ? FSH_IBGDA_OP_ATOMIC_CS : FSH_IBGDA_OP_ATOMIC_MASKED_CS;
        b = compare; c = all; d = all; break;
    default: break; // add, signal add: a masked FA of `value`
    }
    return fsh_ibgda_wqe_atomic(sq, mask, idx, qpn, fm_ce_se, op, width, a, b, c, d, raddr, rkey,
                                laddr, lkey);
}

// The send doorbell record's value for producer index `prod`: be32(prod & 0xffff).
FSH_IBGDA_FN fsh_ibgda_u32 fsh_ibgda_dbr_value(fsh_ibgda_u32 prod) {
    return fsh_ibgda_bswap32(prod & 0xffffu);
}

// A requester CQE's fields (mlx5_cqe64 / mlx5_err_cqe).
typedef struct {
    fsh_ibgda_u8 opcode;          // op_own >> 4
    fsh_ibgda_u8 owner;           // op_own & 1
    fsh_ibgda_u8 wqe_opcode;      // sop_drop_qpn >> 24
    fsh_ibgda_u8 syndrome;        // byte 55 (error CQEs)
    fsh_ibgda_u8 vendor_syndrome; // byte 54 (error CQEs)
    fsh_ibgda_u16 wqe_counter;    // be16 at 60
    fsh_ibgda_u32 qpn;            // sop_drop_qpn & 0xffffff
    fsh_ibgda_u32 byte_cnt;       // be32 at 44
} fsh_ibgda_cqe_t;

// Reads CQE number `index` of a CQ of `ncqes` (a power of two) entries: 1 and `out` filled
// when it is valid on this pass (opcode not INVALID, owner bit == (index / ncqes) & 1), else 0.
// The last 8 bytes are read first, in one 64-bit load, then the body.
FSH_IBGDA_FN int fsh_ibgda_cqe_read(const void *cq, fsh_ibgda_u32 ncqes, fsh_ibgda_u64 index,
                                    fsh_ibgda_cqe_t *out) {
    const volatile fsh_ibgda_u8 *e =
        (const volatile fsh_ibgda_u8 *)cq + (index & (ncqes - 1)) * 64;
    fsh_ibgda_u64 tail = *(const volatile fsh_ibgda_u64 *)(e + 56);
    fsh_ibgda_u32 op_own = (fsh_ibgda_u32)(tail >> 56) & 0xffu;
    fsh_ibgda_u32 pass = (fsh_ibgda_u32)((index / ncqes) & 1);
    fsh_ibgda_u32 sop = fsh_ibgda_bswap32((fsh_ibgda_u32)tail);
    if ((op_own >> 4) == FSH_IBGDA_CQE_INVALID || (op_own & 1) != pass) return 0;
    FSH_IBGDA_ACQUIRE();
    out->opcode = (fsh_ibgda_u8)(op_own >> 4);
    out->owner = (fsh_ibgda_u8)(op_own & 1);
    out->wqe_opcode = (fsh_ibgda_u8)(sop >> 24);
    out->qpn = sop & 0xffffffu;
    out->wqe_counter = fsh_ibgda_bswap16((fsh_ibgda_u16)(tail >> 32));
    out->byte_cnt = ((fsh_ibgda_u32)e[44] << 24) | ((fsh_ibgda_u32)e[45] << 16) |
                    ((fsh_ibgda_u32)e[46] << 8) | e[47];
    out->syndrome = out->opcode == FSH_IBGDA_CQE_REQ_ERR ? e[55] : 0;
    out->vendor_syndrome = out->opcode == FSH_IBGDA_CQE_REQ_ERR ? e[54] : 0;
    return 1;
}

#endif
