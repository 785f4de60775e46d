//! The symmetric-heap allocator: deterministic, so that every PE making the same sequence of
//! calls gets the same offsets (which is what makes the heap symmetric).
//!
//! First fit over an ordered free list, with coalescing on free. Offsets are heap-relative.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Smallest alignment and size granule of an allocation (one cache line, so that no two
/// allocations share a line).
pub const MIN_ALIGN: usize = 64;

/// The allocator's state for one heap.
#[derive(Debug, Clone)]
pub struct HeapAllocator {
    size: usize,
    /// The largest alignment an allocation may ask for: what the heap's start is aligned to.
    max_align: usize,
    /// Free ranges: offset → length.
    free: BTreeMap<usize, usize>,
    /// Live allocations: offset → length.
    live: BTreeMap<usize, usize>,
    used: usize,
}

impl HeapAllocator {
    /// An allocator over `size` bytes, all free, of a heap whose start is aligned to
    /// `max_align` bytes (a power of two): offsets aligned to an alignment up to it give
    /// addresses aligned alike.
    pub fn new(size: usize, max_align: usize) -> Self {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        HeapAllocator {
            size,
            max_align,
            free,
            live: BTreeMap::new(),
            used: 0,
        }
    }

    /// Total bytes managed.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes in live allocations.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Length of the largest free range.
    pub fn largest_free(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Allocates `bytes` aligned to `align` (a power of two, at most the heap start's
    /// alignment); returns the offset. Zero bytes still takes one granule, so that every
    /// allocation has a distinct offset.
    pub fn alloc(&mut self, bytes: usize, align: usize) -> Result<usize> {
        if !align.is_power_of_two() {
            return Err(Error::InvalidAlignment(align));
        }
        if align > self.max_align {
            return Err(Error::AlignmentTooLarge {
                align,
                max: self.max_align,
            });
        }
        let align = align.max(MIN_ALIGN);
        let exhausted = |requested| Error::HeapExhausted {
            requested,
            available: self.largest_free(),
            heap_size: self.size,
        };
        let len = bytes
            .max(1)
            .checked_next_multiple_of(MIN_ALIGN)
            .ok_or_else(|| exhausted(bytes))?;
        let found = self.free.iter().find_map(|(&start, &flen)| {
            let aligned = start.checked_next_multiple_of(align)?;
            let end = aligned.checked_add(len)?;
            (end <= start + flen).then_some((start, flen, aligned))
        });
        let (start, flen, aligned) = found.ok_or_else(|| exhausted(len))?;
        self.free.remove(&start);
        if aligned > start {
            self.free.insert(start, aligned - start);
        }
        let end = aligned + len;
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        self.live.insert(aligned, len);
        self.used += len;
        Ok(aligned)
    }

    /// Frees the allocation at `offset`; an offset that is not a live allocation is an error
    /// and changes nothing.
    pub fn free(&mut self, offset: usize) -> Result<()> {
        let len = self.live.remove(&offset).ok_or(Error::NotSymmetric)?;
        self.used -= len;
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&pstart, &plen)) = self.free.range(..offset).next_back() {
            if pstart + plen == offset {
                self.free.remove(&pstart);
                start = pstart;
            }
        }
        if let Some(nlen) = self.free.remove(&end) {
            end += nlen;
        }
        self.free.insert(start, end - start);
        Ok(())
    }

    /// Whether `[offset, offset + len)` lies inside one live allocation.
    pub fn contains(&self, offset: usize, len: usize) -> bool {
        self.live
            .range(..=offset)
            .next_back()
            .is_some_and(|(&s, &l)| offset + len <= s + l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_and_deterministic() {
        let mut a = HeapAllocator::new(1 << 20, 1 << 20);
        let mut b = HeapAllocator::new(1 << 20, 1 << 20);
        let sizes = [1usize, 100, 4096, 7, 0, 65536];
        let xs: Vec<_> = sizes.iter().map(|&s| a.alloc(s, 8).unwrap()).collect();
        let ys: Vec<_> = sizes.iter().map(|&s| b.alloc(s, 8).unwrap()).collect();
        assert_eq!(xs, ys);
        for w in xs.windows(2) {
            assert!(w[0] < w[1]);
        }
        assert!(xs.iter().all(|o| o % MIN_ALIGN == 0));
        let big = a.alloc(10, 1 << 16).unwrap();
        assert_eq!(big % (1 << 16), 0);
    }

    #[test]
    fn free_coalesces_and_reuses() {
        let mut a = HeapAllocator::new(4096, 4096);
        let x = a.alloc(1024, 64).unwrap();
        let y = a.alloc(1024, 64).unwrap();
        let z = a.alloc(2048, 64).unwrap();
        assert!(a.alloc(1, 64).is_err());
        a.free(y).unwrap();
        a.free(x).unwrap();
        a.free(z).unwrap();
        assert_eq!(a.used(), 0);
        assert_eq!(a.largest_free(), 4096);
        assert_eq!(a.alloc(4096, 64).unwrap(), 0);
    }

    #[test]
    fn errors_are_typed_and_change_nothing() {
        let mut a = HeapAllocator::new(4096, 4096);
        assert_eq!(a.alloc(8, 3), Err(Error::InvalidAlignment(3)));
        assert_eq!(a.alloc(8, 0), Err(Error::InvalidAlignment(0)));
        assert_eq!(
            a.alloc(8, 8192),
            Err(Error::AlignmentTooLarge {
                align: 8192,
                max: 4096
            })
        );
        assert_eq!(
            a.alloc(8192, 64),
            Err(Error::HeapExhausted {
                requested: 8192,
                available: 4096,
                heap_size: 4096
            })
        );
        assert!(matches!(
            a.alloc(usize::MAX, 64),
            Err(Error::HeapExhausted { .. })
        ));
        assert_eq!(a.free(128), Err(Error::NotSymmetric));
        assert_eq!(a.used(), 0);
        assert_eq!(a.largest_free(), 4096);
    }
}
