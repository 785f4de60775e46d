//! The control plane's frame decoder under random and mutated input: no input makes it panic,
//! and what it allocates is bounded by the frame's own length (a length field that claims
//! more than the frame holds never reserves room for it). A counting allocator measures every
//! allocation this test's thread makes while it decodes.

// A counting global allocator is an `unsafe impl` by nature.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ferroshmem_actors::control::wire::{
    read_frame, Contribution, FromPe, Hello, ToPe, Welcome, MAX_FRAME,
};

/// Counts the bytes this thread allocates, and the largest single allocation.
struct Counting;

thread_local! {
    static TOTAL: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: nothing to count while the thread's locals are torn down.
    let _ = TOTAL.try_with(|t| t.set(t.get() + bytes));
    let _ = LARGEST.try_with(|l| l.set(l.get().max(bytes)));
}

// SAFETY: every call is passed on to the system allocator unchanged; counting touches only
// thread-local cells, which neither allocate nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's layout is passed on as it came.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as `dealloc` and `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns what this thread allocated meanwhile: (total, largest).
fn allocations(f: impl FnOnce()) -> (usize, usize) {
    TOTAL.with(|t| t.set(0));
    LARGEST.with(|l| l.set(0));
    f();
    (TOTAL.with(Cell::get), LARGEST.with(Cell::get))
}

/// xorshift64*: a small deterministic generator, so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Valid frames of every message, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let from = [
        FromPe::Hello(Hello {
            secret: vec![7; 32],
            rank: 3,
            size: 8,
            node: "host/boot".into(),
            pid: 42,
        }),
        FromPe::Contribute(Contribution {
            group: 5,
            seq: 9,
            index: 1,
            size: 4,
            payload: vec![1; 40],
        }),
        FromPe::Fail {
            reason: "gone".into(),
        },
        FromPe::Goodbye,
        FromPe::Finalizing {
            next: vec![(0, 3), (7, 1)],
        },
    ];
    let to = [
        ToPe::Welcome(Welcome {
            job: 1,
            nodes: vec!["a".into(), "b".into(), "c".into()],
            pids: vec![1, 2, 3],
        }),
        ToPe::Gathered {
            group: 0,
            seq: 2,
            payloads: vec![vec![1, 2], vec![], vec![3; 9]],
        },
        ToPe::GatherFailed {
            group: 1,
            seq: 1,
            reason: "no".into(),
        },
        ToPe::PeerLost {
            pe: 2,
            reason: "killed".into(),
        },
        ToPe::Refused {
            reason: "late".into(),
        },
    ];
    from.iter()
        .map(FromPe::encode)
        .chain(to.iter().map(ToPe::encode))
        .collect()
}

/// A mutation of `seed`: bytes flipped, a length field inflated, cut short, or extended.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut frame = seed.to_vec();
    for _ in 0..=rng.below(3) {
        match rng.below(4) {
            0 if !frame.is_empty() => {
                let at = rng.below(frame.len());
                frame[at] = rng.next() as u8;
            }
            1 if frame.len() >= 5 => {
                // Any 4 bytes may be a length field: claim up to 4 GiB.
                let at = rng.below(frame.len() - 3);
                frame[at..at + 4].copy_from_slice(&(rng.next() as u32).to_le_bytes());
            }
            2 => frame.truncate(rng.below(frame.len() + 1)),
            _ => {
                let n = rng.below(16);
                frame.extend(rng.bytes(n));
            }
        }
    }
    frame
}

/// The most a frame of `len` bytes may make the decoder allocate, in all and at once: its
/// strings and payloads, and vectors of at most one element per 4 bytes of frame.
fn allowed(len: usize) -> usize {
    16 * len + 256
}

fn decode_within_bounds(frame: &[u8]) {
    let (total, largest) = allocations(|| {
        let _ = FromPe::decode(frame);
        let _ = ToPe::decode(frame);
    });
    assert!(
        total <= allowed(frame.len()) && largest <= allowed(frame.len()),
        "a {}-byte frame made the decoder allocate {total} bytes (largest {largest}): {frame:?}",
        frame.len()
    );
}

#[test]
fn no_frame_makes_the_decoder_panic_or_allocate_beyond_its_length() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let seeds = seeds();
    for round in 0..400_000 {
        let frame = if round % 4 == 0 {
            let len = rng.below(64);
            rng.bytes(len)
        } else {
            let seed = rng.below(seeds.len());
            mutate(&mut rng, &seeds[seed])
        };
        decode_within_bounds(&frame);
    }
    for seed in &seeds {
        decode_within_bounds(seed);
    }
}

#[test]
fn a_frame_longer_than_allowed_is_refused_before_anything_is_allocated_for_it() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for claimed in [4097u32, 1 << 20, MAX_FRAME as u32 + 1, u32::MAX] {
        let mut input = claimed.to_le_bytes().to_vec();
        input.extend_from_slice(&[0; 64]);
        let mut reader = &input[..];
        let mut read = None;
        let (_, largest) = allocations(|| read = Some(rt.block_on(read_frame(&mut reader, 4096))));
        assert!(read.expect("ran").is_err(), "{claimed} bytes accepted");
        assert!(
            largest < 4096,
            "{largest} bytes allocated for a refused frame"
        );
    }
}
