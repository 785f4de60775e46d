//! Tests of the atomic mapping and semantics, and of the CQE layout, writer and reader.

use std::sync::atomic::{AtomicU64, Ordering};

use super::amo::{AmoFamily, AmoRequest};
use super::cqe::{init_cq, owner_of, read_cqe, write_cqe, Cqe, Syndrome};
use super::wqe::{AtomicOp, Width};

/// A small deterministic generator (xorshift64*).
pub(super) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

const FAMILIES: [AmoFamily; 16] = [
    AmoFamily::Inc,
    AmoFamily::FetchInc,
    AmoFamily::Add,
    AmoFamily::FetchAdd,
    AmoFamily::Set,
    AmoFamily::Swap,
    AmoFamily::SignalSet,
    AmoFamily::SignalAdd,
    AmoFamily::And,
    AmoFamily::FetchAnd,
    AmoFamily::Or,
    AmoFamily::FetchOr,
    AmoFamily::Xor,
    AmoFamily::FetchXor,
    AmoFamily::Fetch,
    AmoFamily::CompareSwap,
];

/// What OpenSHMEM says each family leaves in the target.
fn openshmem(f: AmoFamily, old: u64, v: u64, c: u64, all: u64) -> u64 {
    let new = match f {
        AmoFamily::Inc | AmoFamily::FetchInc => old.wrapping_add(1),
        AmoFamily::Add | AmoFamily::FetchAdd | AmoFamily::SignalAdd => old.wrapping_add(v),
        AmoFamily::Set | AmoFamily::Swap | AmoFamily::SignalSet => v,
        AmoFamily::And | AmoFamily::FetchAnd => old & v,
        AmoFamily::Or | AmoFamily::FetchOr => old | v,
        AmoFamily::Xor | AmoFamily::FetchXor => old ^ v,
        AmoFamily::Fetch => old,
        AmoFamily::CompareSwap => {
            if old == c {
                v
            } else {
                old
            }
        }
    };
    new & all
}

#[test]
fn every_family_does_what_openshmem_says_through_its_mlx5_atomic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for w in [Width::W4, Width::W8] {
        let all = w.mask();
        for round in 0..2000 {
            let old = rng.next() & all;
            let v = rng.next() & all;
            // Every fourth compare-swap compares equal.
            let c = if round % 4 == 0 {
                old
            } else {
                rng.next() & all
            };
            for f in FAMILIES {
                let req = AmoRequest {
                    family: f,
                    width: w,
                    value: v,
                    compare: c,
                };
                let op = req.op().expect("maps");
                assert_eq!(
                    op.apply(old, w),
                    openshmem(f, old, v, c, all),
                    "{f:?} {w:?}"
                );
            }
        }
    }
}

#[test]
fn the_mapping_is_nvshmems() {
    let r = |family, width, value| {
        AmoRequest {
            family,
            width,
            value,
            compare: 9,
        }
        .op()
    };
    let cs = |swap, swap_mask| AtomicOp::MaskedCompareSwap {
        swap,
        compare: 0,
        swap_mask,
        compare_mask: 0,
    };
    assert_eq!(r(AmoFamily::Set, Width::W8, 5), Ok(cs(5, u64::MAX)));
    assert_eq!(r(AmoFamily::And, Width::W4, 5), Ok(cs(5, 0xffff_fffa)));
    assert_eq!(r(AmoFamily::Or, Width::W8, 5), Ok(cs(5, 5)));
    let fa = |add, field_boundary| AtomicOp::MaskedFetchAdd {
        add,
        field_boundary,
    };
    assert_eq!(r(AmoFamily::Xor, Width::W4, 5), Ok(fa(5, 0xffff_ffff)));
    assert_eq!(r(AmoFamily::Fetch, Width::W8, 5), Ok(fa(0, 0)));
    assert_eq!(r(AmoFamily::Inc, Width::W8, 5), Ok(fa(1, 0)));
    assert_eq!(r(AmoFamily::FetchAdd, Width::W4, 5), Ok(fa(5, 0)));
    assert_eq!(
        r(AmoFamily::FetchAdd, Width::W8, 5),
        Ok(AtomicOp::FetchAdd { add: 5 })
    );
    assert_eq!(
        r(AmoFamily::CompareSwap, Width::W8, 5),
        Ok(AtomicOp::CompareSwap {
            compare: 9,
            swap: 5
        })
    );
    assert_eq!(
        r(AmoFamily::CompareSwap, Width::W4, 5),
        Ok(AtomicOp::MaskedCompareSwap {
            swap: 5,
            compare: 9,
            swap_mask: 0xffff_ffff,
            compare_mask: 0xffff_ffff
        })
    );
    assert!(r(AmoFamily::Add, Width::W4, 1 << 32).is_err());
}

/// A bit-serial adder whose carry stops after every boundary bit.
fn serial_masked_add(old: u64, add: u64, boundary: u64, bits: u32) -> u64 {
    let (mut carry, mut out) = (0u64, 0u64);
    for i in 0..bits {
        let (a, b) = ((old >> i) & 1, (add >> i) & 1);
        out |= (a ^ b ^ carry) << i;
        let c = (a & b) | (a & carry) | (b & carry);
        carry = if (boundary >> i) & 1 == 1 { 0 } else { c };
    }
    out
}

#[test]
fn masked_fetch_add_matches_a_bit_serial_adder() {
    let mut rng = Rng(7);
    for (w, bits) in [(Width::W4, 32), (Width::W8, 64)] {
        for _ in 0..5000 {
            let all = w.mask();
            let (old, add) = (rng.next() & all, rng.next() & all);
            let boundary = rng.next() & rng.next() & all;
            let op = AtomicOp::MaskedFetchAdd {
                add,
                field_boundary: boundary,
            };
            let want = serial_masked_add(old, add, boundary, bits);
            assert_eq!(
                op.apply(old, w),
                want,
                "{old:#x} + {add:#x} / {boundary:#x}"
            );
        }
    }
}

#[test]
fn golden_cqes() {
    let mut ok = Cqe::success(0x08, 0x00ab_cdef, 0x1234, 0x100);
    ok.owner = true;
    let mut want = [0u8; 64];
    want[44..48].copy_from_slice(&[0, 0, 1, 0]);
    want[56..64].copy_from_slice(&[0x08, 0xab, 0xcd, 0xef, 0x12, 0x34, 0, 0x01]);
    assert_eq!(ok.to_bytes(), want);
    assert_eq!(Cqe::parse(&want), ok);

    let err = Cqe::error(Syndrome::RemoteAccess, 0x88, 0x12, 0x00ab_cdef, 7);
    let mut want = [0u8; 64];
    want[54] = 0x88;
    want[55] = 0x13;
    want[56..64].copy_from_slice(&[0x12, 0xab, 0xcd, 0xef, 0, 7, 0, 0xd0]);
    assert_eq!(err.to_bytes(), want);
    assert_eq!(Cqe::parse(&want), err);
}

#[test]
fn syndromes_are_rdma_cores() {
    let table = [
        (Syndrome::LocalLength, 0x01),
        (Syndrome::LocalQpOp, 0x02),
        (Syndrome::LocalProt, 0x04),
        (Syndrome::WrFlush, 0x05),
        (Syndrome::RemoteInvalidRequest, 0x12),
        (Syndrome::RemoteAccess, 0x13),
        (Syndrome::RemoteOp, 0x14),
        (Syndrome::TransportRetryExceeded, 0x15),
    ];
    for (s, code) in table {
        assert_eq!((s.code(), Syndrome::from_code(code)), (code, Some(s)));
    }
    assert_eq!(Syndrome::from_code(0x22), None);
    assert_eq!(Syndrome::name(0x05), "WR_FLUSH_ERR");
}

#[test]
fn the_owner_bit_hides_stale_and_unwritten_entries() {
    let ring: Vec<AtomicU64> = (0..4 * 8).map(|_| AtomicU64::new(0)).collect();
    init_cq(&ring);
    assert_eq!(read_cqe(&ring, 0), None);
    // A ring shorter than one CQE holds none: nothing written, nothing read, no panic.
    let short: Vec<AtomicU64> = (0..7).map(|_| AtomicU64::new(u64::MAX)).collect();
    write_cqe(&short, 0, &Cqe::success(0, 1, 0, 8));
    assert!(short.iter().all(|w| w.load(Ordering::Relaxed) == u64::MAX));
    assert_eq!((read_cqe(&short, 0), read_cqe(&[], 3)), (None, None));
    assert!(!owner_of(5, 0));
    for i in 0..4u64 {
        write_cqe(&ring, i, &Cqe::success(0, 1, i as u16, 8));
        let got = read_cqe(&ring, i).expect("written");
        assert_eq!((got.wqe_counter, got.owner), (i as u16, false));
    }
    // Second pass: slot 0 holds pass-one's CQE (owner 0), which index 4 must not accept.
    assert_eq!(read_cqe(&ring, 4), None);
    write_cqe(&ring, 4, &Cqe::success(0, 1, 4, 8));
    assert_eq!(
        read_cqe(&ring, 4).map(|c| (c.wqe_counter, c.owner)),
        Some((4, true))
    );
    assert!(!owner_of(9, 4) && owner_of(13, 4));
}
