//! The team pool: the top of every PE's symmetric heap, kept out of the world allocator, from
//! which teams take their control regions (synchronization flags, signal words, eager
//! slots).
//!
//! `malloc` is collective over the world, but a team is created by its parent's members only,
//! possibly while other teams are created on other PEs. So a team's region cannot come from
//! the world allocator. Instead each PE manages its pool range itself, and the members of a
//! new team agree on an offset: they exchange their free lists, every member computes the
//! same first fit in the intersection, each reserves it locally, and a second exchange
//! confirms that every member could (a concurrent creation on another parent may have taken
//! the range meanwhile; then all release and retry). The world and node teams take fixed
//! places at the start of the pool on every PE.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::heap::MIN_ALIGN;

/// The pool is this fraction of the heap (1/16), within the bounds below.
const POOL_DIVISOR: usize = 16;
/// The largest default pool.
const POOL_MAX: usize = 8 << 20;
/// Room the pool keeps beyond the predefined teams' regions, at most (1/16 of the heap when
/// that is less).
const POOL_SPARE: usize = 256 << 10;

/// Where the team pool lies in a PE's heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLayout {
    /// Heap offset of the pool (every byte below it belongs to the world allocator).
    pub offset: usize,
    /// Bytes in the pool.
    pub bytes: usize,
}

impl PoolLayout {
    /// The pool of a heap of `heap_size` bytes whose predefined teams need `predefined`
    /// bytes: 1/16 of the heap, at most 8 MiB, at least the predefined regions plus 256 KiB
    /// (or 1/16 of the heap, when less), at the top of the heap, page-aligned.
    ///
    /// # Errors
    /// [`Error::Config`] when that would take more than half the heap.
    pub fn new(heap_size: usize, predefined: usize) -> Result<Self> {
        let share = heap_size / POOL_DIVISOR;
        let wanted = share
            .min(POOL_MAX)
            .max(predefined.saturating_add(share.min(POOL_SPARE)));
        let bytes = wanted.next_multiple_of(4096);
        if bytes > heap_size / 2 {
            return Err(Error::Config(format!(
                "a symmetric heap of {heap_size} bytes is too small for the teams' {bytes}-byte pool: raise FERROSHMEM_SYMMETRIC_SIZE"
            )));
        }
        Ok(PoolLayout {
            offset: (heap_size - bytes) & !4095,
            bytes,
        })
    }

    /// Bytes left to the world allocator below the pool.
    pub fn user_heap_bytes(&self) -> usize {
        self.offset
    }
}

/// Free ranges of a pool, as `(heap offset, length)` sorted by offset.
pub type FreeList = Vec<(usize, usize)>;

/// One PE's pool: which ranges are free.
#[derive(Debug)]
pub struct TeamPool {
    /// Free ranges: heap offset → length.
    free: BTreeMap<usize, usize>,
}

impl TeamPool {
    /// A pool over `layout`, all free.
    pub fn new(layout: PoolLayout) -> Self {
        let mut free = BTreeMap::new();
        if layout.bytes > 0 {
            free.insert(layout.offset, layout.bytes);
        }
        TeamPool { free }
    }

    /// The free ranges now.
    pub fn free_list(&self) -> FreeList {
        self.free.iter().map(|(&o, &l)| (o, l)).collect()
    }

    /// Reserves exactly `[offset, offset + len)`; `false` (and no change) if any of it is
    /// taken.
    pub fn reserve(&mut self, offset: usize, len: usize) -> bool {
        let Some((&start, &flen)) = self.free.range(..=offset).next_back() else {
            return false;
        };
        let end = offset.saturating_add(len);
        if end > start + flen {
            return false;
        }
        self.free.remove(&start);
        if offset > start {
            self.free.insert(start, offset - start);
        }
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        true
    }

    /// Gives back `[offset, offset + len)`, merging it with its free neighbours.
    pub fn release(&mut self, offset: usize, len: usize) {
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&p, &plen)) = self.free.range(..offset).next_back() {
            if p + plen == offset {
                self.free.remove(&p);
                start = p;
            }
        }
        if let Some(nlen) = self.free.remove(&end) {
            end += nlen;
        }
        self.free.insert(start, end - start);
    }
}

/// The ranges free in both `a` and `b` (each sorted and disjoint).
pub fn intersect(a: &[(usize, usize)], b: &[(usize, usize)]) -> FreeList {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let (sa, ea) = (a[i].0, a[i].0 + a[i].1);
        let (sb, eb) = (b[j].0, b[j].0 + b[j].1);
        let (s, e) = (sa.max(sb), ea.min(eb));
        if s < e {
            out.push((s, e - s));
        }
        if ea <= eb {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The first offset (aligned to [`MIN_ALIGN`]) where `len` bytes fit in `free`.
pub fn first_fit(free: &[(usize, usize)], len: usize) -> Option<usize> {
    free.iter().find_map(|&(s, l)| {
        let at = s.checked_next_multiple_of(MIN_ALIGN)?;
        (at.checked_add(len)? <= s + l).then_some(at)
    })
}

/// The aligned offsets where `len` bytes fit in the free range `(s, l)`: the first one and
/// how many there are, `MIN_ALIGN` apart.
fn fits_in((s, l): (usize, usize), len: usize) -> Option<(usize, usize)> {
    let at = s.checked_next_multiple_of(MIN_ALIGN)?;
    let room = (s + l).checked_sub(at.checked_add(len)?)?;
    Some((at, room / MIN_ALIGN + 1))
}

/// One of all the aligned offsets where `len` bytes fit in `free`, picked by `pick` (the
/// `pick mod count`-th in offset order): creations whose first fits collided use it on their
/// retries, so that each lands elsewhere instead of colliding again.
pub fn picked_fit(free: &[(usize, usize)], len: usize, pick: u64) -> Option<usize> {
    let count: u64 = free
        .iter()
        .filter_map(|&r| fits_in(r, len))
        .map(|(_, k)| k as u64)
        .sum();
    let mut left = pick.checked_rem(count)?;
    free.iter()
        .filter_map(|&r| fits_in(r, len))
        .find_map(|(at, k)| {
            if left < k as u64 {
                Some(at + left as usize * MIN_ALIGN)
            } else {
                left -= k as u64;
                None
            }
        })
}

/// Removes `[offset, offset + len)` from the sorted list `free` (which must contain it).
pub fn carve(free: &mut FreeList, offset: usize, len: usize) {
    let end = offset + len;
    let mut out = Vec::with_capacity(free.len() + 1);
    for &(s, l) in free.iter() {
        let e = s + l;
        if e <= offset || s >= end {
            out.push((s, l));
            continue;
        }
        if s < offset {
            out.push((s, offset - s));
        }
        if end < e {
            out.push((end, e - end));
        }
    }
    *free = out;
}

/// Encodes a free list for an exchange.
pub fn encode_free_list(free: &[(usize, usize)], out: &mut Vec<u8>) {
    out.extend_from_slice(&(free.len() as u64).to_le_bytes());
    for &(s, l) in free {
        out.extend_from_slice(&(s as u64).to_le_bytes());
        out.extend_from_slice(&(l as u64).to_le_bytes());
    }
}

/// Decodes a free list written by [`encode_free_list`] at the start of `bytes`.
pub fn decode_free_list(bytes: &[u8]) -> Option<FreeList> {
    let word = |i: usize| -> Option<usize> {
        let b = bytes.get(i * 8..i * 8 + 8)?;
        usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()
    };
    let n = word(0)?;
    (0..n)
        .map(|k| Some((word(1 + 2 * k)?, word(2 + 2 * k)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_takes_the_top_of_the_heap() {
        let l = PoolLayout::new(64 << 20, 100_000).unwrap();
        assert_eq!(l.bytes, 4 << 20);
        assert_eq!(l.offset + l.bytes, 64 << 20);
        let big = PoolLayout::new(1 << 30, 100_000).unwrap();
        assert_eq!(big.bytes, 8 << 20);
        assert!(matches!(
            PoolLayout::new(1 << 20, 1 << 20),
            Err(Error::Config(_))
        ));
        let small = PoolLayout::new(256 << 10, 8 << 10).unwrap();
        assert_eq!(small.bytes, 24 << 10, "small heaps keep a small pool");
    }

    #[test]
    fn reserve_release_and_agree() {
        let layout = PoolLayout {
            offset: 4096,
            bytes: 4096,
        };
        let mut a = TeamPool::new(layout);
        let mut b = TeamPool::new(layout);
        assert!(a.reserve(4096, 1024));
        assert!(!a.reserve(4096 + 512, 64), "taken");
        assert!(b.reserve(4096 + 2048, 1024));
        let common = intersect(&a.free_list(), &b.free_list());
        assert_eq!(common, vec![(5120, 1024), (7168, 1024)]);
        assert_eq!(first_fit(&common, 1024), Some(5120));
        assert_eq!(first_fit(&common, 2048), None);
        let mut sim = common.clone();
        carve(&mut sim, 5120, 1024);
        assert_eq!(sim, vec![(7168, 1024)]);
        a.release(4096, 1024);
        assert_eq!(a.free_list(), vec![(4096, 4096)]);
        let mut bytes = Vec::new();
        encode_free_list(&common, &mut bytes);
        assert_eq!(decode_free_list(&bytes), Some(common));
        assert_eq!(decode_free_list(&bytes[..12]), None);
    }

    #[test]
    fn picked_fits_cover_every_aligned_place_that_fits() {
        // Fits of 128 bytes: 64 and 128 in the first range, 1024 in the second.
        let free = vec![(10, 246), (1024, 128)];
        let picks: Vec<_> = (0..6).map(|p| picked_fit(&free, 128, p)).collect();
        assert_eq!(
            picks,
            [64, 128, 1024, 64, 128, 1024].map(Some).to_vec(),
            "every fit, in offset order, then round again"
        );
        assert_eq!(picked_fit(&free, 256, 7), None, "nothing fits");
        assert_eq!(picked_fit(&[], 64, 0), None);
    }
}
