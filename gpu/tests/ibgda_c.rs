//! The device-side encoder (`src/device/ibgda.cuh`) run on the host: a C driver
//! (`tests/ibgda/driver.c`) writes one WQE of each kind and parses CQEs; the Rust decoder must
//! read exactly the requests the driver meant, byte for byte what the Rust encoder writes, and
//! the C CQE parser must agree with the Rust CQE writer. The header is compiled as C and, where
//! a C++ compiler exists, as C++ too (NVRTC compiles it as C++). Without a C compiler the test
//! says so and skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicU64;

use ferroshmem_gpu::ibgda::cqe::{init_cq, read_cqe, write_cqe};
use ferroshmem_gpu::ibgda::{
    decode, encode, AmoFamily, AmoRequest, AtomicOp, Cqe, Fence, Syndrome, Width, WorkRequest,
    WqeFlags,
};

const QPN: u32 = 0x12_3456;
const NWQES: usize = 4;
const LADDR: u64 = 0x1122_3344_5566_7788;
const LKEY: u32 = 0x0102_0304;
const RADDR: u64 = 0x8877_6655_4433_2210;
const RKEY: u32 = 0xa1b2_c3d4;

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

/// Case `k`'s flags, as the driver sets them.
fn flags(k: usize) -> WqeFlags {
    WqeFlags {
        signaled: k % 2 == 0,
        fence: if k % 3 == 0 {
            Fence::FenceAndInitiatorSmall
        } else {
            Fence::None
        },
    }
}

fn atomic(op: AtomicOp, width: Width) -> WorkRequest {
    WorkRequest::Atomic {
        op,
        width,
        remote: RADDR,
        rkey: RKEY,
        result: LADDR,
        lkey: LKEY,
    }
}

/// The request the driver's case `k` means (0..=8: NOP, RDMA and inline; the rest atomics).
fn case(k: usize) -> WorkRequest {
    let (local, lkey, remote, rkey) = (LADDR, LKEY, RADDR, RKEY);
    match k {
        0 => WorkRequest::Nop,
        1 => WorkRequest::Write {
            local,
            lkey,
            remote,
            rkey,
            len: 4096,
        },
        2 => WorkRequest::WriteImm {
            local,
            lkey,
            remote,
            rkey,
            len: 1,
            imm: 0xdead_beef,
        },
        3 => WorkRequest::Read {
            local,
            lkey,
            remote,
            rkey,
            len: 0x7fff_ffff,
        },
        4..=8 => {
            let len = [1usize, 12, 13, 60, 220][k - 4];
            let data = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            WorkRequest::WriteInline { data, remote, rkey }
        }
        _ => atomic_case(k),
    }
}

/// The atomic of case `k` (9..=14: each mlx5 atomic; then every AMO family at 4 and 8 bytes).
fn atomic_case(k: usize) -> WorkRequest {
    let (op, width) = match k {
        9 => (AtomicOp::FetchAdd { add: u64::MAX }, Width::W8),
        10 => (
            AtomicOp::CompareSwap {
                compare: 2,
                swap: 1,
            },
            Width::W8,
        ),
        11 => (
            AtomicOp::MaskedFetchAdd {
                add: 5,
                field_boundary: 0x8080_8080,
            },
            Width::W4,
        ),
        12 => (
            AtomicOp::MaskedFetchAdd {
                add: 5,
                field_boundary: u64::MAX,
            },
            Width::W8,
        ),
        13 => (
            AtomicOp::MaskedCompareSwap {
                swap: 1,
                compare: 2,
                swap_mask: 3,
                compare_mask: 4,
            },
            Width::W4,
        ),
        14 => (
            AtomicOp::MaskedCompareSwap {
                swap: 0x0102_0304_0506_0708,
                compare: 9,
                swap_mask: u64::MAX,
                compare_mask: 0xf0,
            },
            Width::W8,
        ),
        _ => {
            let width = if (k - 15) % 2 == 1 {
                Width::W8
            } else {
                Width::W4
            };
            let amo = AmoRequest {
                family: FAMILIES[(k - 15) / 2],
                width,
                value: 0x1234_5678,
                compare: 0x9abc,
            };
            (amo.op().expect("maps"), width)
        }
    };
    atomic(op, width)
}

/// Compiles the driver with `compiler` (as `lang`), or `None` when there is no such compiler.
fn build(compiler: &str, lang: &str, out: &Path) -> Option<PathBuf> {
    let there = Command::new(compiler).arg("--version").output();
    if !there.map(|o| o.status.success()).unwrap_or(false) {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = out.join(format!("ibgda_driver_{lang}"));
    let mut cmd = Command::new(compiler);
    cmd.args(["-x", lang, "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(dir.join("src/device"))
        .arg(dir.join("tests/ibgda/driver.c"))
        .arg("-o")
        .arg(&exe);
    if lang == "c" {
        cmd.args(["-std=c99", "-pedantic"]);
    }
    let built = cmd.output().expect("the compiler runs");
    assert!(
        built.status.success(),
        "{compiler} failed on ibgda.cuh:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}

fn run(exe: &Path, args: &[&str]) -> String {
    let out = Command::new(exe)
        .args(args)
        .output()
        .expect("the driver runs");
    assert!(out.status.success(), "driver {args:?} failed");
    String::from_utf8(out.stdout).expect("text")
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// Checks every WQE line against the Rust decoder and encoder; returns how many.
fn check_wqes(out: &str) -> usize {
    let mut n = 0;
    for (k, line) in out.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "wqe");
        let index: u16 = f[1].parse().expect("index");
        let wqebbs: usize = f[2].parse().expect("wqebbs");
        let ring = unhex(f[3]);
        let want = case(k);
        let d = decode(ring.as_slice(), index, QPN)
            .unwrap_or_else(|e| panic!("case {k} ({want:?}) does not decode: {e}"));
        assert_eq!(
            (&d.request, d.flags, d.wqebbs),
            (&want, flags(k), wqebbs),
            "case {k}"
        );
        let mut mine = vec![0xeeu8; NWQES * 64];
        assert_eq!(encode(&want, flags(k), index, QPN, &mut mine), Ok(wqebbs));
        for s in 0..usize::from(d.ds) {
            let at = ((usize::from(index) + s / 4) % NWQES) * 64 + (s % 4) * 16;
            assert_eq!(ring[at..at + 16], mine[at..at + 16], "case {k} segment {s}");
        }
        n += 1;
    }
    n
}

/// The CQE the test writes as number `i`.
fn cqe_for(i: u64) -> Cqe {
    let counter = 0xfff0u16.wrapping_add(i as u16);
    match i % 4 {
        0 => Cqe::success(0x08, QPN, counter, 4096 + i as u32),
        1 => Cqe::error(Syndrome::RemoteAccess, 0x51, 0x12, QPN, counter),
        2 => Cqe::error(Syndrome::WrFlush, 0, 0x14, QPN, counter),
        _ => Cqe::success(0x10, QPN, counter, 8),
    }
}

/// Writes 12 CQEs into an 8-entry CQ (the last 4 on its second pass), lets the C parser read
/// indices 0..16 and compares with the Rust reader; returns how many were valid.
fn check_cqes(exe: &Path) -> usize {
    const NCQES: usize = 8;
    let ring: Vec<AtomicU64> = (0..NCQES * 8).map(|_| AtomicU64::new(0)).collect();
    init_cq(&ring);
    for i in 0..12 {
        write_cqe(&ring, i, &cqe_for(i));
    }
    let bytes: Vec<u8> = ring
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    let mut file = exe.to_path_buf();
    file.set_extension("cq");
    std::fs::write(&file, bytes).expect("writes the CQ");
    let text = run(exe, &["cqes", file.to_str().expect("utf-8"), "8", "16"]);
    let mut valid = 0;
    for (i, line) in text.lines().enumerate() {
        let v: Vec<u64> = line
            .split(' ')
            .skip(1)
            .map(|x| x.parse().expect("number"))
            .collect();
        assert_eq!(v[0], i as u64);
        let want = read_cqe(&ring, i as u64).map(|c| {
            let fields = [c.opcode as u64, c.owner as u64, c.wqe_counter as u64];
            let more = [c.wqe_opcode as u64, c.qpn as u64, c.byte_cnt as u64];
            let err = [c.syndrome as u64, c.vendor_syndrome as u64];
            [&fields[..], &more[..], &err[..]].concat()
        });
        match want {
            None => assert_eq!(v[1], 0, "CQE {i} is not valid on this pass"),
            Some(w) => {
                assert_eq!((v[1], &v[2..]), (1, &w[..]), "CQE {i}");
                valid += 1;
            }
        }
    }
    valid
}

#[test]
fn the_c_encoder_and_cqe_parser_match_the_rust_ones_byte_for_byte() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let Some(c) = build("cc", "c", out) else {
        eprintln!("skipping: no C compiler (cc) to build the device encoder for the host");
        return;
    };
    let wqes = run(&c, &["wqes"]);
    assert_eq!(check_wqes(&wqes), 15 + 32, "one line per case");
    assert_eq!(check_cqes(&c), 8, "CQEs 3..=10 are valid");
    match build("c++", "c++", out) {
        Some(cpp) => {
            assert_eq!(run(&cpp, &["wqes"]), wqes, "C and C++ builds disagree");
            assert_eq!(check_cqes(&cpp), 8);
        }
        None => eprintln!("no C++ compiler: the header was checked as C only"),
    }
}
