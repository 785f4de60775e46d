//! Typed handles to symmetric memory: [`SymBuffer`] owns one collective allocation (the same
//! offset on every PE), [`SymSlice`] is a borrowed view of part of it.
//!
//! A handle names memory on every PE; which PE's copy an operation touches is the operation's
//! `pe` argument. Views are checked when an operation uses them: a view past the end of its
//! allocation, or a handle from another job, gives a typed error, never a panic.
//!
//! Handles can be built from an [`Allocation`] made by hand, so the data plane never trusts
//! one: it checks every view against the part of the heap its allocation claims to belong to
//! ([`Area`]). A hand-made allocation always claims the user heap, which ends where the team
//! pool begins, so no handle made outside this crate reaches the pool's control words or
//! past the end of a segment.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use bytemuck::Pod;

use crate::error::{Error, Result};

/// Identity of one job's symmetric heap: the same random value on every PE of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeapId(pub u64);

/// The part of a symmetric heap an allocation lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Area {
    /// What `malloc` hands out: the heap below the team pool.
    User = 0,
    /// The team pool at the top of the heap (teams' control regions); only this crate makes
    /// allocations there.
    TeamPool = 1,
}

/// One collective allocation, untyped: what the allocator hands out and takes back.
#[derive(Debug, PartialEq, Eq)]
pub struct Allocation {
    heap: HeapId,
    offset: usize,
    bytes: usize,
    area: Area,
}

impl Allocation {
    /// Records an allocation made by the heap `heap` at `offset` of `bytes` bytes, in its
    /// user area. Nothing is trusted: operations check its range against the heap.
    pub fn new(heap: HeapId, offset: usize, bytes: usize) -> Self {
        Allocation {
            heap,
            offset,
            bytes,
            area: Area::User,
        }
    }

    /// A team's control region in the team pool.
    pub(crate) fn in_team_pool(heap: HeapId, offset: usize, bytes: usize) -> Self {
        Allocation {
            area: Area::TeamPool,
            ..Allocation::new(heap, offset, bytes)
        }
    }

    /// Heap-relative byte offset.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The heap it belongs to.
    pub fn heap(&self) -> HeapId {
        self.heap
    }
}

/// A symmetric array of `len` elements of `T`: the same offset on every PE.
///
/// Returned by the collective `malloc`/`calloc`/`align`; give it back with the collective
/// `free`, which consumes it. Dropping it without `free` leaks the heap range (as forgetting
/// `shmem_free` does), and the debug log says so.
#[derive(Debug)]
pub struct SymBuffer<T> {
    alloc: Option<Allocation>,
    len: usize,
    _type: PhantomData<fn() -> T>,
}

impl<T: Pod> SymBuffer<T> {
    /// Types an allocation as `len` elements of `T`; the allocation must hold them.
    pub fn from_allocation(alloc: Allocation, len: usize) -> Result<Self> {
        let needed = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("{len} elements overflow")))?;
        if needed > alloc.bytes {
            return Err(Error::OutOfBounds {
                what: "allocation",
                needed,
                available: alloc.bytes,
            });
        }
        Ok(SymBuffer {
            alloc: Some(alloc),
            len,
            _type: PhantomData,
        })
    }

    /// Gives the allocation back, for `free`.
    pub fn into_allocation(mut self) -> Allocation {
        self.alloc
            .take()
            .expect("a live SymBuffer holds its allocation")
    }

    fn allocation(&self) -> &Allocation {
        self.alloc
            .as_ref()
            .expect("a live SymBuffer holds its allocation")
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap-relative byte offset (the same on every PE).
    pub fn offset(&self) -> usize {
        self.allocation().offset
    }

    /// A view of the whole buffer.
    pub fn all(&self) -> SymSlice<'_, T> {
        let alloc = self.allocation();
        SymSlice {
            heap: alloc.heap,
            area: alloc.area,
            base: alloc.offset,
            start: 0,
            len: self.len,
            limit: self.len,
            _borrow: PhantomData,
        }
    }

    /// A view of `range` (checked when used).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> SymSlice<'_, T> {
        self.all().slice(range)
    }

    /// A view of element `index` alone (checked when used): the operand of atomics, `p`, `g`,
    /// signals and waits.
    pub fn at(&self, index: usize) -> SymSlice<'_, T> {
        self.all().at(index)
    }
}

impl<T> Drop for SymBuffer<T> {
    fn drop(&mut self) {
        if let Some(a) = &self.alloc {
            tracing::debug!(
                offset = a.offset,
                bytes = a.bytes,
                "SymBuffer dropped without free: its heap range stays allocated"
            );
        }
    }
}

/// What a view borrows: the buffer's lifetime, and `T` without owning one (so that views are
/// `Send + Sync` whatever `T` is).
type Borrowed<'a, T> = (&'a (), fn() -> T);

/// A view of part of a symmetric allocation (copyable; borrows the [`SymBuffer`]).
#[derive(Debug)]
pub struct SymSlice<'a, T> {
    heap: HeapId,
    /// The part of the heap the allocation claims.
    area: Area,
    /// Heap-relative byte offset of element 0 of the underlying allocation.
    base: usize,
    /// First element of the view.
    start: usize,
    /// Elements in the view.
    len: usize,
    /// Elements in the underlying allocation (views beyond it fail when used).
    limit: usize,
    _borrow: PhantomData<Borrowed<'a, T>>,
}

impl<T> Clone for SymSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SymSlice<'_, T> {}

impl<'a, T: Pod> From<&'a SymBuffer<T>> for SymSlice<'a, T> {
    fn from(b: &'a SymBuffer<T>) -> Self {
        b.all()
    }
}

impl<'a, T: Pod> From<&SymSlice<'a, T>> for SymSlice<'a, T> {
    fn from(s: &SymSlice<'a, T>) -> Self {
        *s
    }
}

/// Where an operand lives, after checking: heap-relative byte offset and element count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Heap-relative byte offset of the first element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl<'a, T: Pod> SymSlice<'a, T> {
    /// Number of elements in the view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A sub-view of `range`, relative to this view (checked when used).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> SymSlice<'a, T> {
        let from = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        SymSlice {
            start: self.start.saturating_add(from),
            len: to.saturating_sub(from),
            // A sub-view may not reach past its parent view.
            limit: if to > self.len || from > to {
                0
            } else {
                self.limit
            },
            ..*self
        }
    }

    /// The view of `len` elements from this view's first one, which may reach past this view
    /// (up to the end of its allocation; checked when used): how a collective names a
    /// peer's block of another length at the same symmetric address.
    pub(crate) fn resized(&self, len: usize) -> SymSlice<'a, T> {
        SymSlice { len, ..*self }
    }

    /// The view of element `index` alone.
    pub fn at(&self, index: usize) -> SymSlice<'a, T> {
        self.slice(index..index.saturating_add(1))
    }

    /// The same bytes seen as `u8`.
    pub fn as_bytes(&self) -> SymSlice<'a, u8> {
        let size = std::mem::size_of::<T>();
        SymSlice {
            heap: self.heap,
            area: self.area,
            base: self.base,
            start: self.start.saturating_mul(size),
            len: self.len.saturating_mul(size),
            limit: self.limit.saturating_mul(size),
            _borrow: PhantomData,
        }
    }

    /// Checks the view against heap `heap` and returns its span.
    #[inline(always)]
    pub fn span(&self, heap: HeapId) -> Result<Span> {
        if heap != self.heap {
            return Err(Error::NotSymmetric);
        }
        let end = self.start.checked_add(self.len);
        if end.is_none_or(|e| e > self.limit) {
            return Err(Error::OutOfBounds {
                what: "symmetric view",
                needed: end.unwrap_or(usize::MAX),
                available: self.limit,
            });
        }
        // A hand-made allocation may sit anywhere: its offsets must not wrap. (No `ok_or`:
        // an error built eagerly is dropped by a call on every successful operation.)
        let start = self.start.checked_mul(std::mem::size_of::<T>());
        let Some(offset) = start.and_then(|bytes| self.base.checked_add(bytes)) else {
            return Err(Error::NotSymmetric);
        };
        Ok(Span {
            offset,
            len: self.len,
        })
    }

    /// The part of the heap this view's allocation claims, and the heap offset one past the
    /// last byte that this view, or any view derived from it, may reach: what the data plane
    /// checks against the heap before it trusts the view. Saturating, so that an allocation
    /// made by hand at the end of the address space fails that check instead of wrapping.
    #[inline(always)]
    pub fn reach(&self) -> (Area, usize) {
        let end = self
            .base
            .saturating_add(self.limit.saturating_mul(std::mem::size_of::<T>()));
        (self.area, end)
    }
}

impl<T: Pod> SymSlice<'static, T> {
    /// A view of `len` elements at heap-relative byte `offset` of heap `heap`'s user area,
    /// borrowing no buffer: how an address handed over by a foreign caller (the C ABI's
    /// pointers) is named. Nothing is trusted: every operation checks it against the heap,
    /// as it checks any view.
    pub fn in_user_heap(heap: HeapId, offset: usize, len: usize) -> Self {
        SymSlice {
            heap,
            area: Area::User,
            base: offset,
            start: 0,
            len,
            limit: len,
            _borrow: PhantomData,
        }
    }
}

impl<'a> SymSlice<'a, u8> {
    /// Reinterprets these bytes as elements of `U` (as many as fit). The offset is kept as it
    /// is: atomics on a misaligned result report [`Error::MisalignedAtomic`].
    pub fn cast<U: Pod>(&self) -> SymSlice<'a, U> {
        let size = std::mem::size_of::<U>().max(1);
        let inside = self
            .start
            .checked_add(self.len)
            .is_some_and(|end| end <= self.limit);
        SymSlice {
            heap: self.heap,
            area: self.area,
            // A view past the allocation keeps the old base and no room, so that it fails
            // when used; within it the base saturates only for a hand-made allocation at the
            // end of the address space, which the data plane refuses by its reach.
            base: if inside {
                self.base.saturating_add(self.start)
            } else {
                self.base
            },
            start: 0,
            len: self.len / size,
            limit: if inside { self.len / size } else { 0 },
            _borrow: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(len: usize) -> SymBuffer<u64> {
        SymBuffer::from_allocation(Allocation::new(HeapId(7), 128, len * 8), len).unwrap()
    }

    #[test]
    fn casts_of_views_that_wrap_around_fail_typed() {
        let b =
            SymBuffer::<u8>::from_allocation(Allocation::new(HeapId(7), 4096, 4096), 4096).unwrap();
        let to = 0usize.wrapping_sub(100);
        let wrapped = b.all().slice(100..).slice(to - 4096..to).cast::<u8>();
        assert!(matches!(
            wrapped.span(HeapId(7)),
            Err(Error::OutOfBounds { .. })
        ));
        let huge = b.slice(usize::MAX - 8..).cast::<u64>();
        assert!(matches!(
            huge.span(HeapId(7)),
            Err(Error::OutOfBounds { .. }) | Ok(Span { len: 0, .. })
        ));
        assert_eq!(
            b.slice(8..24).cast::<u64>().span(HeapId(7)).unwrap(),
            Span {
                offset: 4104,
                len: 2
            }
        );
    }

    #[test]
    fn a_view_whose_start_overflows_in_bytes_fails_typed() {
        let view = SymSlice::<u64>::in_user_heap(HeapId(7), 0, usize::MAX);
        let far = view.slice(usize::MAX / 4..usize::MAX / 4 + 1);
        assert!(matches!(far.span(HeapId(7)), Err(Error::NotSymmetric)));
    }

    #[test]
    fn views_resolve_or_fail_typed() {
        let b = buf(10);
        let reversed = (5, 3);
        assert_eq!(
            b.all().span(HeapId(7)).unwrap(),
            Span {
                offset: 128,
                len: 10
            }
        );
        assert_eq!(
            b.slice(2..5).span(HeapId(7)).unwrap(),
            Span {
                offset: 144,
                len: 3
            }
        );
        assert_eq!(
            b.at(9).span(HeapId(7)).unwrap(),
            Span {
                offset: 200,
                len: 1
            }
        );
        assert!(matches!(
            b.at(10).span(HeapId(7)),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            b.slice(reversed.0..reversed.1).span(HeapId(7)),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            b.slice(2..5).slice(0..4).span(HeapId(7)),
            Err(Error::OutOfBounds { .. })
        ));
        assert_eq!(b.all().span(HeapId(8)), Err(Error::NotSymmetric));
        let word = b.all().as_bytes().slice(4..12).cast::<u64>();
        assert_eq!(
            word.span(HeapId(7)).unwrap(),
            Span {
                offset: 132,
                len: 1
            }
        );
        std::mem::forget(b);
    }

    #[test]
    fn typing_an_allocation_checks_its_size() {
        let a = Allocation::new(HeapId(1), 0, 16);
        assert!(matches!(
            SymBuffer::<u64>::from_allocation(a, 3),
            Err(Error::OutOfBounds { .. })
        ));
    }
}
