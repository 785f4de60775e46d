//! Tests of the WQE encoder and decoder: golden bytes laid out by hand from the mlx5 segment
//! definitions (as `mlx5dv_set_ctrl_seg` / `mlx5dv_set_data_seg` fill them), round trips at
//! every slot including the ring's end and the 16-bit index wrap, and every refusal.

use super::decode::{decode, WqeError};
use super::wqe::{encode, encode_linear, AtomicOp, Fence, Width, WorkRequest, WqeFlags};
use super::wqe::{MAX_INLINE, MAX_LEN};
use super::WQEBB;

const QPN: u32 = 0x00ab_cdef;

fn ring(nwqes: usize) -> Vec<u8> {
    vec![0u8; nwqes * WQEBB]
}

/// The first `len` bytes of `req` encoded alone at `index`.
fn bytes(req: &WorkRequest, flags: WqeFlags, index: u16) -> Vec<u8> {
    let e = encode_linear(req, flags, index, QPN).expect("encodes");
    e.bytes[..e.wqebbs * WQEBB].to_vec()
}

/// A control segment laid out by hand.
fn ctrl(opmod: u8, index: u16, opcode: u8, ds: u8, fm_ce_se: u8, imm: [u8; 4]) -> Vec<u8> {
    let i = index.to_be_bytes();
    let mut v = vec![
        opmod, i[0], i[1], opcode, 0xab, 0xcd, 0xef, ds, 0, 0, 0, fm_ce_se,
    ];
    v.extend_from_slice(&imm);
    v
}

const RADDR: [u8; 16] = [
    0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x10, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0,
];

fn data(bc: [u8; 4]) -> Vec<u8> {
    let mut v = bc.to_vec();
    v.extend_from_slice(&[0x01, 0x02, 0x03, 0x04]);
    v.extend_from_slice(&[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    v
}

fn pad(mut v: Vec<u8>, to: usize) -> Vec<u8> {
    v.resize(to, 0);
    v
}

const REMOTE: u64 = 0x8877_6655_4433_2210;
const RKEY: u32 = 0xa1b2_c3d4;
const LOCAL: u64 = 0x1122_3344_5566_7788;
const LKEY: u32 = 0x0102_0304;

fn write() -> WorkRequest {
    WorkRequest::Write {
        local: LOCAL,
        lkey: LKEY,
        remote: REMOTE,
        rkey: RKEY,
        len: 0x100,
    }
}

fn atomic(op: AtomicOp, width: Width) -> WorkRequest {
    WorkRequest::Atomic {
        op,
        width,
        remote: REMOTE,
        rkey: RKEY,
        result: LOCAL,
        lkey: LKEY,
    }
}

#[test]
fn golden_rdma_write_signaled() {
    let mut want = ctrl(0, 0x1234, 0x08, 3, 0x08, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend(data([0, 0, 1, 0]));
    assert_eq!(bytes(&write(), WqeFlags::SIGNALED, 0x1234), pad(want, 64));
}

#[test]
fn golden_read_write_imm_and_fences() {
    let read = WorkRequest::Read {
        local: LOCAL,
        lkey: LKEY,
        remote: REMOTE,
        rkey: RKEY,
        len: 8,
    };
    let fence = WqeFlags {
        signaled: false,
        fence: Fence::FenceAndInitiatorSmall,
    };
    let mut want = ctrl(0, 7, 0x10, 3, 0x80, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend(data([0, 0, 0, 8]));
    assert_eq!(bytes(&read, fence, 7), pad(want, 64));

    let imm = WorkRequest::WriteImm {
        local: LOCAL,
        lkey: LKEY,
        remote: REMOTE,
        rkey: RKEY,
        len: 3,
        imm: 0xdead_beef,
    };
    let small = WqeFlags {
        signaled: true,
        fence: Fence::InitiatorSmall,
    };
    let mut want = ctrl(0, 0xffff, 0x09, 3, 0x28, [0xde, 0xad, 0xbe, 0xef]);
    want.extend_from_slice(&RADDR);
    want.extend(data([0, 0, 0, 3]));
    assert_eq!(bytes(&imm, small, 0xffff), pad(want, 64));
}

#[test]
fn golden_inline_nop_and_two_wqebb_inline() {
    let inl = WorkRequest::WriteInline {
        data: b"hello".to_vec(),
        remote: REMOTE,
        rkey: RKEY,
    };
    let mut want = ctrl(0, 2, 0x08, 3, 0, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[0x80, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']);
    assert_eq!(bytes(&inl, WqeFlags::default(), 2), pad(want, 64));

    // 40 bytes: header + data = 44 → 3 segments, ds 5, two WQEBBs.
    let long: Vec<u8> = (0..40).collect();
    let inl = WorkRequest::WriteInline {
        data: long.clone(),
        remote: REMOTE,
        rkey: RKEY,
    };
    let mut want = ctrl(0, 2, 0x08, 5, 0, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[0x80, 0, 0, 40]);
    want.extend(long);
    assert_eq!(bytes(&inl, WqeFlags::default(), 2), pad(want, 128));

    let want = ctrl(0, 9, 0x00, 2, 0x08, [0; 4]);
    assert_eq!(
        bytes(&WorkRequest::Nop, WqeFlags::SIGNALED, 9),
        pad(want, 64)
    );
}

#[test]
fn golden_base_atomics() {
    let fa = atomic(AtomicOp::FetchAdd { add: 0x0102 }, Width::W8);
    let mut want = ctrl(0, 1, 0x12, 4, 0x08, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend(data([0, 0, 0, 8]));
    assert_eq!(bytes(&fa, WqeFlags::SIGNALED, 1), want);

    let cs = atomic(
        AtomicOp::CompareSwap {
            compare: 0x0a0b,
            swap: 0x0c0d,
        },
        Width::W8,
    );
    let mut want = ctrl(0, 1, 0x11, 4, 0, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x0c, 0x0d, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b]);
    want.extend(data([0, 0, 0, 8]));
    assert_eq!(bytes(&cs, WqeFlags::default(), 1), want);
}

#[test]
fn golden_masked_atomics() {
    let fa4 = atomic(
        AtomicOp::MaskedFetchAdd {
            add: 0x0102_0304,
            field_boundary: 0xffff_ffff,
        },
        Width::W4,
    );
    let mut want = ctrl(0x08, 3, 0x15, 4, 0, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend(data([0, 0, 0, 4]));
    assert_eq!(bytes(&fa4, WqeFlags::default(), 3), want);

    let cs4 = atomic(
        AtomicOp::MaskedCompareSwap {
            swap: 0x11,
            compare: 0x22,
            swap_mask: 0x33,
            compare_mask: 0x44,
        },
        Width::W4,
    );
    let mut want = ctrl(0x08, 3, 0x14, 4, 0, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[0, 0, 0, 0x11, 0, 0, 0, 0x22, 0, 0, 0, 0x33, 0, 0, 0, 0x44]);
    want.extend(data([0, 0, 0, 4]));
    assert_eq!(bytes(&cs4, WqeFlags::default(), 3), want);

    let cs8 = atomic(
        AtomicOp::MaskedCompareSwap {
            swap: 0x11,
            compare: 0x22,
            swap_mask: u64::MAX,
            compare_mask: 0,
        },
        Width::W8,
    );
    let mut want = ctrl(0x09, 3, 0x14, 5, 0x08, [0; 4]);
    want.extend_from_slice(&RADDR);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0x22]);
    want.extend_from_slice(&[0xff; 8]);
    want.extend_from_slice(&[0; 8]);
    want.extend(data([0, 0, 0, 8]));
    assert_eq!(bytes(&cs8, WqeFlags::SIGNALED, 3), pad(want, 128));
}

/// Every request shape this module encodes.
pub(super) fn all_requests() -> Vec<WorkRequest> {
    let mut v = vec![WorkRequest::Nop, write()];
    v.push(WorkRequest::Read {
        local: 8,
        lkey: 1,
        remote: 16,
        rkey: 2,
        len: MAX_LEN,
    });
    v.push(WorkRequest::WriteImm {
        local: 8,
        lkey: 1,
        remote: 16,
        rkey: 2,
        len: 1,
        imm: 77,
    });
    for len in [1, 12, 13, 28, 29, 92, 93, MAX_INLINE] {
        v.push(WorkRequest::WriteInline {
            data: (0..len).map(|i| (i * 7 + 1) as u8).collect(),
            remote: 0x1000,
            rkey: 3,
        });
    }
    v.push(atomic(AtomicOp::FetchAdd { add: u64::MAX }, Width::W8));
    v.push(atomic(
        AtomicOp::CompareSwap {
            compare: 1,
            swap: 2,
        },
        Width::W8,
    ));
    for w in [Width::W4, Width::W8] {
        let m = w.mask();
        v.push(atomic(
            AtomicOp::MaskedFetchAdd {
                add: 5 & m,
                field_boundary: 0x8080_8080 & m,
            },
            w,
        ));
        v.push(atomic(
            AtomicOp::MaskedCompareSwap {
                swap: m,
                compare: 3,
                swap_mask: 0xf0f0_f0f0 & m,
                compare_mask: 0,
            },
            w,
        ));
    }
    v
}

#[test]
fn round_trips_at_every_slot_across_the_ring_end_and_the_16_bit_wrap() {
    let flags = [
        WqeFlags::default(),
        WqeFlags::SIGNALED,
        WqeFlags {
            signaled: true,
            fence: Fence::StrongOrdering,
        },
    ];
    let mut r = ring(8);
    for req in all_requests() {
        for index in (0u16..20).chain(0xfff0..=0xffff) {
            for f in flags {
                r.fill(0xee);
                let n = encode(&req, f, index, QPN, &mut r).expect("encodes");
                let d = decode(r.as_slice(), index, QPN).expect("decodes");
                assert_eq!((d.request.clone(), d.flags, d.wqebbs), (req.clone(), f, n));
                assert_eq!(d.index, index);
            }
        }
    }
}

#[test]
fn a_wqe_wrapping_the_ring_end_lands_in_the_first_slot() {
    let mut r = ring(8);
    let req = atomic(
        AtomicOp::MaskedCompareSwap {
            swap: 1,
            compare: 2,
            swap_mask: 3,
            compare_mask: 4,
        },
        Width::W8,
    );
    // Index 0x0007 (and 0xffff) sit in the last slot: the mask segment's WQEBB is slot 0.
    for index in [7u16, 0xffff] {
        r.fill(0);
        assert_eq!(encode(&req, WqeFlags::default(), index, QPN, &mut r), Ok(2));
        let e = encode_linear(&req, WqeFlags::default(), index, QPN).expect("encodes");
        assert_eq!(&r[7 * WQEBB..], &e.bytes[..WQEBB]);
        assert_eq!(&r[..WQEBB], &e.bytes[WQEBB..2 * WQEBB]);
        assert_eq!(
            decode(r.as_slice(), index, QPN).map(|d| d.request),
            Ok(req.clone())
        );
    }
}

/// Encodes `req` at index 5 of an 8-slot ring, lets `mutate` corrupt it, and decodes.
fn corrupted(req: &WorkRequest, mutate: impl FnOnce(&mut [u8])) -> Result<(), WqeError> {
    let mut r = ring(8);
    encode(req, WqeFlags::default(), 5, QPN, &mut r).expect("encodes");
    mutate(&mut r[5 * WQEBB..]);
    decode(r.as_slice(), 5, QPN).map(|_| ())
}

#[test]
fn every_control_field_is_checked() {
    let w = write();
    assert_eq!(
        decode(ring(8).as_slice(), 5, QPN).map(|_| ()),
        Err(WqeError::IndexMismatch {
            expected: 5,
            found: 0
        })
    );
    let qpn = corrupted(&w, |b| b[6] ^= 1);
    assert_eq!(
        qpn,
        Err(WqeError::QpnMismatch {
            expected: QPN,
            found: QPN ^ 1
        })
    );
    assert_eq!(
        corrupted(&w, |b| b[3] = 0x0a),
        Err(WqeError::UnknownOpcode { opcode: 0x0a })
    );
    assert_eq!(
        corrupted(&w, |b| b[0] = 0x08),
        Err(WqeError::BadOpmod {
            opcode: 0x08,
            opmod: 0x08
        })
    );
    assert_eq!(
        corrupted(&w, |b| b[7] = 4),
        Err(WqeError::BadDs { opcode: 8, ds: 4 })
    );
    assert_eq!(
        corrupted(&w, |b| b[7] = 0x43),
        Err(WqeError::BadDs {
            opcode: 8,
            ds: 0x43
        })
    );
    for (byte, off) in [(8usize, 8usize), (9, 9), (10, 10), (12, 12), (15, 15)] {
        assert_eq!(
            corrupted(&w, |b| b[byte] = 1),
            Err(WqeError::Reserved { offset: off })
        );
    }
    for bad in [0x01u8, 0x02, 0x04, 0x0c, 0x10, 0xa0, 0xe0] {
        assert_eq!(
            corrupted(&w, |b| b[11] = bad),
            Err(WqeError::BadFlags { fm_ce_se: bad })
        );
    }
}

#[test]
fn every_segment_field_is_checked() {
    let w = write();
    assert_eq!(
        corrupted(&w, |b| b[31] = 1),
        Err(WqeError::Reserved { offset: 31 })
    );
    assert_eq!(
        corrupted(&w, |b| b[32] |= 0x80),
        Err(WqeError::BadInlineLength { len: 0x100 })
    );
    let read = WorkRequest::Read {
        local: 0,
        lkey: 0,
        remote: 0,
        rkey: 0,
        len: 4,
    };
    assert_eq!(
        corrupted(&read, |b| b[32] |= 0x80),
        Err(WqeError::InlineBit { offset: 32 })
    );
    assert_eq!(
        corrupted(&read, |b| b[35] = 0),
        Err(WqeError::BadLength { len: 0 })
    );
    let inl = WorkRequest::WriteInline {
        data: vec![1, 2, 3],
        remote: 0,
        rkey: 0,
    };
    assert_eq!(
        corrupted(&inl, |b| b[39] = 9),
        Err(WqeError::Reserved { offset: 39 })
    );
    assert_eq!(
        corrupted(&inl, |b| b[35] = 0),
        Err(WqeError::BadInlineLength { len: 0 })
    );
    assert_eq!(
        corrupted(&inl, |b| b[35] = 13),
        Err(WqeError::BadDs { opcode: 8, ds: 3 })
    );
}

#[test]
fn every_atomic_field_is_checked() {
    let fa = atomic(AtomicOp::FetchAdd { add: 1 }, Width::W8);
    assert_eq!(
        corrupted(&fa, |b| b[47] = 1),
        Err(WqeError::Reserved { offset: 47 })
    );
    assert_eq!(
        corrupted(&fa, |b| b[51] = 4),
        Err(WqeError::BadLength { len: 4 })
    );
    assert_eq!(
        corrupted(&fa, |b| b[23] = 0x14),
        Err(WqeError::MisalignedAtomic { remote: REMOTE | 4 })
    );
    assert_eq!(
        corrupted(&fa, |b| b[0] = 0x09),
        Err(WqeError::BadOpmod {
            opcode: 0x12,
            opmod: 0x09
        })
    );
    let fa4 = atomic(
        AtomicOp::MaskedFetchAdd {
            add: 1,
            field_boundary: 0,
        },
        Width::W4,
    );
    assert_eq!(
        corrupted(&fa4, |b| b[40] = 1),
        Err(WqeError::Reserved { offset: 40 })
    );
    assert_eq!(
        corrupted(&fa4, |b| b[0] = 0x0a),
        Err(WqeError::BadOpmod {
            opcode: 0x15,
            opmod: 0x0a
        })
    );
    let cs4 = atomic(
        AtomicOp::MaskedCompareSwap {
            swap: 1,
            compare: 0,
            swap_mask: 1,
            compare_mask: 0,
        },
        Width::W4,
    );
    // Promoting a 4-byte masked CS to 8 bytes changes its shape: ds 4 is then wrong.
    assert_eq!(
        corrupted(&cs4, |b| b[0] = 0x09),
        Err(WqeError::BadDs {
            opcode: 0x14,
            ds: 4
        })
    );
}

#[test]
fn the_encoder_refuses_what_mlx5_cannot_carry() {
    let mut r = ring(8);
    let e = |req: &WorkRequest, qpn: u32| {
        encode(req, WqeFlags::default(), 0, qpn, &mut ring(8)).map(|_| ())
    };
    assert_eq!(
        e(&write(), 0x0100_0000),
        Err(WqeError::QpnTooLarge { qpn: 0x0100_0000 })
    );
    for len in [0, MAX_LEN + 1] {
        let req = WorkRequest::Write {
            local: 0,
            lkey: 0,
            remote: 0,
            rkey: 0,
            len,
        };
        assert_eq!(e(&req, QPN), Err(WqeError::BadLength { len }));
    }
    for len in [0, MAX_INLINE + 1] {
        let req = WorkRequest::WriteInline {
            data: vec![0; len],
            remote: 0,
            rkey: 0,
        };
        assert_eq!(e(&req, QPN), Err(WqeError::BadInlineLength { len }));
    }
    let fa4 = atomic(AtomicOp::FetchAdd { add: 1 }, Width::W4);
    assert_eq!(e(&fa4, QPN), Err(WqeError::UnsupportedWidth));
    let wide = atomic(
        AtomicOp::MaskedFetchAdd {
            add: 1 << 32,
            field_boundary: 0,
        },
        Width::W4,
    );
    assert_eq!(
        e(&wide, QPN),
        Err(WqeError::OperandTooWide { value: 1 << 32 })
    );
    let mut odd = atomic(AtomicOp::FetchAdd { add: 1 }, Width::W8);
    if let WorkRequest::Atomic { remote, .. } = &mut odd {
        *remote = 4;
    }
    assert_eq!(e(&odd, QPN), Err(WqeError::MisalignedAtomic { remote: 4 }));
    assert_eq!(
        encode(&write(), WqeFlags::default(), 0, QPN, &mut r[..3 * WQEBB]),
        Err(WqeError::BadRing { bytes: 3 * WQEBB })
    );
    assert_eq!(
        decode(&r[..3 * WQEBB], 0, QPN).map(|_| ()),
        Err(WqeError::BadRing { bytes: 3 * WQEBB })
    );
}
