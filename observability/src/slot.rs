//! Counting slots: which shard of every traffic block the calling thread writes.
//!
//! The process has [`SHARDS`] slots. A thread takes a free one the first time it counts and
//! keeps it until it exits; the slot then numbers the thread's shard in every
//! [`Traffic`](crate::Traffic) block at once, so that finding where to count is one
//! thread-local load, with no per-block owner to check. A thread that finds every slot taken
//! (or counts while it is being torn down) gets [`OVERFLOW`] for good and counts with atomic
//! adds in the blocks' overflow shard.
//!
//! A slot has one live holder at a time. Giving it back (a release clear of its bit) and
//! taking it (an acquire set of the bit) order the old holder's last counts before the new
//! holder's first, so the plain load-and-store counting of a shard stays exact across holders.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots in the process: how many threads count without atomic adds at once.
pub const SHARDS: usize = 16;

/// The slot of threads that count in the overflow shard: [`SHARDS`].
pub(crate) const OVERFLOW: usize = SHARDS;

/// A thread's slot before it first counts.
const UNCLAIMED: usize = usize::MAX;

/// Bit `i` is set while a live thread holds slot `i`.
static TAKEN: AtomicU64 = AtomicU64::new(0);

const _: () = assert!(SHARDS <= 64, "TAKEN has one bit per slot");

thread_local! {
    /// This thread's slot, read on every count; [`UNCLAIMED`] until it first counts.
    static SLOT: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// Gives this thread's slot back when the thread exits (a separate key so that reading
    /// [`SLOT`] never checks for a destructor).
    static LEASE: Lease = const { Lease(Cell::new(OVERFLOW)) };
}

/// The slot a thread holds, given back when the thread's locals are torn down.
struct Lease(Cell<usize>);

impl Drop for Lease {
    fn drop(&mut self) {
        let slot = self.0.get();
        if slot < SHARDS {
            // Counts this thread makes from now on (other locals' destructors) are atomic.
            let _ = SLOT.try_with(|s| s.set(OVERFLOW));
            TAKEN.fetch_and(!(1 << slot), Ordering::Release);
        }
    }
}

/// The calling thread's slot as last set: below [`SHARDS`] a shard of its own, [`OVERFLOW`],
/// or something larger before the thread first counts — then call [`claim`].
#[inline(always)]
pub(crate) fn current() -> usize {
    SLOT.try_with(Cell::get).unwrap_or(OVERFLOW)
}

/// The calling thread's slot (below [`SHARDS`], or [`OVERFLOW`]), claimed if it has none.
#[inline]
pub(crate) fn this_thread() -> usize {
    match current() {
        held @ 0..=OVERFLOW => held,
        _ => claim(),
    }
}

/// Gives the calling thread a slot if it has none: a free one, else [`OVERFLOW`]. Returns
/// the thread's slot.
#[cold]
#[inline(never)]
pub(crate) fn claim() -> usize {
    let held = current();
    if held <= OVERFLOW {
        return held;
    }
    let slot = LEASE
        .try_with(|lease| {
            let mut taken = TAKEN.load(Ordering::Relaxed);
            loop {
                let free = (!taken).trailing_zeros() as usize;
                if free >= SHARDS {
                    return OVERFLOW;
                }
                match TAKEN.compare_exchange_weak(
                    taken,
                    taken | 1 << free,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        lease.0.set(free);
                        return free;
                    }
                    Err(now) => taken = now,
                }
            }
        })
        .unwrap_or(OVERFLOW);
    let _ = SLOT.try_with(|s| s.set(slot));
    slot
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, so that no other test of this process holds slots meanwhile.
    #[test]
    fn threads_keep_their_slot_give_it_back_at_exit_and_overflow_past_the_slots() {
        let first = std::thread::spawn(|| {
            let slot = claim();
            assert_eq!(claim(), slot, "a second claim keeps the slot");
            assert_eq!(current(), slot);
            slot
        })
        .join()
        .unwrap();
        assert!(first < SHARDS);

        // Every slot is free again: SHARDS threads at once get one each, two more overflow.
        let barrier = std::sync::Barrier::new(SHARDS + 2);
        let mut slots: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..SHARDS + 2)
                .map(|_| {
                    s.spawn(|| {
                        let slot = claim();
                        barrier.wait();
                        slot
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        slots.sort_unstable();
        let expected: Vec<usize> = (0..SHARDS).chain([OVERFLOW, OVERFLOW]).collect();
        assert_eq!(slots, expected);
    }
}
