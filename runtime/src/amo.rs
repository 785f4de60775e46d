//! Atomic memory operations on 32- and 64-bit integers in any PE's segment: fetch, set, swap,
//! compare-swap, add/inc, and the bitwise and/or/xor, each with its fetching form.
//!
//! They are CPU atomic instructions on the shared mapping, so they are atomic with respect to
//! every PE of the node, in every process.

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering::SeqCst};

use bytemuck::Pod;
use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::shared_memory::{SharedAtomic, SharedMapping};

/// Integer types the atomic operations (and waits) work on: `i32`, `u32`, `i64`, `u64`.
pub trait AtomicInt:
    Pod + Eq + Ord + Send + Sync + Unpin + std::fmt::Debug + private::Sealed
{
    /// The matching atomic type.
    type Atomic: SharedAtomic;
    /// One, for `inc`.
    const ONE: Self;
    /// The atomic at `offset` of `map`.
    #[inline(always)]
    fn at(map: &SharedMapping, offset: usize) -> &Self::Atomic {
        map.atomic(offset)
    }
    /// Atomic load.
    fn load(a: &Self::Atomic) -> Self;
    /// Atomic store.
    fn store(a: &Self::Atomic, v: Self);
    /// Atomic swap.
    fn swap(a: &Self::Atomic, v: Self) -> Self;
    /// Atomic compare-and-swap; returns the previous value.
    fn compare_swap(a: &Self::Atomic, cond: Self, v: Self) -> Self;
    /// Atomic wrapping add; returns the previous value.
    fn fetch_add(a: &Self::Atomic, v: Self) -> Self;
    /// Atomic and; returns the previous value.
    fn fetch_and(a: &Self::Atomic, v: Self) -> Self;
    /// Atomic or; returns the previous value.
    fn fetch_or(a: &Self::Atomic, v: Self) -> Self;
    /// Atomic xor; returns the previous value.
    fn fetch_xor(a: &Self::Atomic, v: Self) -> Self;
}

mod private {
    pub trait Sealed {}
}

macro_rules! atomic_int {
    ($($t:ty => $a:ty),*) => {$(
        impl private::Sealed for $t {}
        impl AtomicInt for $t {
            type Atomic = $a;
            const ONE: Self = 1;
            #[inline] fn load(a: &$a) -> Self { a.load(SeqCst) }
            #[inline] fn store(a: &$a, v: Self) { a.store(v, SeqCst) }
            #[inline] fn swap(a: &$a, v: Self) -> Self { a.swap(v, SeqCst) }
            #[inline] fn compare_swap(a: &$a, cond: Self, v: Self) -> Self {
                match a.compare_exchange(cond, v, SeqCst, SeqCst) { Ok(x) | Err(x) => x }
            }
            #[inline] fn fetch_add(a: &$a, v: Self) -> Self { a.fetch_add(v, SeqCst) }
            #[inline] fn fetch_and(a: &$a, v: Self) -> Self { a.fetch_and(v, SeqCst) }
            #[inline] fn fetch_or(a: &$a, v: Self) -> Self { a.fetch_or(v, SeqCst) }
            #[inline] fn fetch_xor(a: &$a, v: Self) -> Self { a.fetch_xor(v, SeqCst) }
        }
    )*};
}
atomic_int!(i32 => AtomicI32, u32 => AtomicU32, i64 => AtomicI64, u64 => AtomicU64);

/// Defines, for each read-modify-write `op` of [`AtomicInt`], the fetching method (returns the
/// old value) and the plain one.
macro_rules! binary_amos {
    ($(
        $(#[$fetch_doc:meta])* $fetch:ident,
        $(#[$plain_doc:meta])* $plain:ident => $op:ident;
    )*) => {$(
        $(#[$fetch_doc])*
        pub async fn $fetch<T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'_, T>>,
            value: T,
            pe: usize,
        ) -> Result<T> {
            self.amo(dest.into(), pe, true, |a| T::$op(a, value))
        }

        $(#[$plain_doc])*
        pub async fn $plain<T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'_, T>>,
            value: T,
            pe: usize,
        ) -> Result<()> {
            self.amo(dest.into(), pe, true, |a| {
                T::$op(a, value);
            })
        }
    )*};
}

impl DataPlane {
    /// Runs `op` on the atomic `dest[0]` of PE `pe`, then wakes that PE's sleepers. Every op is
    /// a SeqCst read-modify-write (or load), which the wake-up protocol relies on.
    #[inline]
    fn amo<T: AtomicInt, R>(
        &self,
        dest: SymSlice<'_, T>,
        pe: usize,
        writes: bool,
        op: impl FnOnce(&T::Atomic) -> R,
    ) -> Result<R> {
        let moved = std::mem::size_of::<T>();
        self.counted(
            Op::Amo,
            pe,
            moved,
            || {
                let target = self.segment(pe)?;
                Ok((target, self.locate_atomic(dest)?))
            },
            |(target, at)| {
                let r = op(T::at(target.mapping(), at));
                if writes {
                    target.wake_watchers(at, at + moved);
                }
                r
            },
        )
    }

    /// Atomically reads `dest[0]` on PE `pe` (`shmem_atomic_fetch`).
    pub async fn atomic_fetch<T: AtomicInt>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        pe: usize,
    ) -> Result<T> {
        self.amo(dest.into(), pe, false, T::load)
    }

    /// Atomically writes `value` to `dest[0]` on PE `pe` (`shmem_atomic_set`).
    pub async fn atomic_set<T: AtomicInt>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        // A swap, not a store: the wake-up protocol needs a read-modify-write.
        self.amo(dest.into(), pe, true, |a| {
            T::swap(a, value);
        })
    }

    /// Atomically replaces `dest[0]` on PE `pe` with `value`, returning the old value.
    pub async fn atomic_swap<T: AtomicInt>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        value: T,
        pe: usize,
    ) -> Result<T> {
        self.amo(dest.into(), pe, true, |a| T::swap(a, value))
    }

    /// Atomically sets `dest[0]` on PE `pe` to `value` if it equals `cond`; returns the old
    /// value (`shmem_atomic_compare_swap`).
    pub async fn atomic_compare_swap<T: AtomicInt>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        cond: T,
        value: T,
        pe: usize,
    ) -> Result<T> {
        self.amo(dest.into(), pe, true, |a| T::compare_swap(a, cond, value))
    }

    /// Atomically increments `dest[0]` on PE `pe`, returning the old value.
    pub async fn atomic_fetch_inc<T: AtomicInt>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        pe: usize,
    ) -> Result<T> {
        self.amo(dest.into(), pe, true, |a| T::fetch_add(a, T::ONE))
    }

    /// Atomically increments `dest[0]` on PE `pe`.
    pub async fn atomic_inc<T: AtomicInt>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        pe: usize,
    ) -> Result<()> {
        self.amo(dest.into(), pe, true, |a| {
            T::fetch_add(a, T::ONE);
        })
    }

    binary_amos! {
        /// Atomically adds `value` (wrapping) to `dest[0]` on PE `pe`, returning the old
        /// value (`shmem_atomic_fetch_add`).
        atomic_fetch_add,
        /// Atomically adds `value` (wrapping) to `dest[0]` on PE `pe` (`shmem_atomic_add`).
        atomic_add => fetch_add;
        /// Atomically ands `value` into `dest[0]` on PE `pe`, returning the old value
        /// (`shmem_atomic_fetch_and`).
        atomic_fetch_and,
        /// Atomically ands `value` into `dest[0]` on PE `pe` (`shmem_atomic_and`).
        atomic_and => fetch_and;
        /// Atomically ors `value` into `dest[0]` on PE `pe`, returning the old value
        /// (`shmem_atomic_fetch_or`).
        atomic_fetch_or,
        /// Atomically ors `value` into `dest[0]` on PE `pe` (`shmem_atomic_or`).
        atomic_or => fetch_or;
        /// Atomically xors `value` into `dest[0]` on PE `pe`, returning the old value
        /// (`shmem_atomic_fetch_xor`).
        atomic_fetch_xor,
        /// Atomically xors `value` into `dest[0]` on PE `pe` (`shmem_atomic_xor`).
        atomic_xor => fetch_xor;
    }
}
