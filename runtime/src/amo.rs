//! Atomic memory operations on 32- and 64-bit integers in any PE's segment: fetch, set, swap,
//! compare-swap, add/inc, and the bitwise and/or/xor, each with its fetching form.
//!
//! To a mapped peer they are CPU atomic instructions on the shared mapping, so they are
//! atomic with respect to every PE of the node, in every process; to a peer on another node
//! they are the remote transport's atomics (descriptors of kind [`Amo`]), atomic with
//! respect to every PE that reaches that word through the same transport.

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering::SeqCst};

use bytemuck::Pod;
use ferroshmem_observability::Op as OpKind;

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::landing::{land, nothing, Landing};
use crate::route::{Amo, Completion, Domain, RemoteOp, Route};
use crate::shared_memory::{SharedAtomic, SharedMapping};

/// Integer types the atomic operations (and waits) work on: `i32`, `u32`, `i64`, `u64`.
pub trait AtomicInt:
    AtomicWord<Int = Self> + Eq + Ord + Send + Sync + Unpin + std::fmt::Debug + private::Sealed
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
    /// The value's bits in the low bytes of a `u64` (as remote operands travel).
    fn to_bits(self) -> u64;
    /// The value of the low bytes of `bits`.
    fn from_bits(bits: u64) -> Self;
}

/// A type the fetch, set and swap atomics take (`shmem_atomic_fetch/set/swap`'s types):
/// every [`AtomicInt`], and `f32` and `f64`, which move as the integer of their width (their
/// bits, unchanged). Sealed.
pub trait AtomicWord: Pod + Send + Sync + Unpin + std::fmt::Debug + private::Sealed {
    /// The integer of the same width the atomic runs on.
    type Int: AtomicInt;
    /// The value's bits as that integer.
    fn into_int(self) -> Self::Int;
    /// The value whose bits `int` holds.
    fn from_int(int: Self::Int) -> Self;
}

mod private {
    pub trait Sealed {}
}

impl private::Sealed for f32 {}
impl AtomicWord for f32 {
    type Int = u32;
    fn into_int(self) -> u32 {
        self.to_bits()
    }
    fn from_int(int: u32) -> f32 {
        f32::from_bits(int)
    }
}

impl private::Sealed for f64 {}
impl AtomicWord for f64 {
    type Int = u64;
    fn into_int(self) -> u64 {
        self.to_bits()
    }
    fn from_int(int: u64) -> f64 {
        f64::from_bits(int)
    }
}

/// A view of words as the integers their atomics run on (the same view for integers).
#[inline(always)]
pub(crate) fn as_ints<T: AtomicWord>(view: SymSlice<'_, T>) -> SymSlice<'_, T::Int> {
    view.as_bytes().cast()
}

macro_rules! atomic_int {
    ($($t:ty => $a:ty, $u:ty),*) => {$(
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
            #[inline] fn to_bits(self) -> u64 { self as $u as u64 }
            #[inline] fn from_bits(bits: u64) -> Self { bits as $u as $t }
        }
        impl AtomicWord for $t {
            type Int = $t;
            #[inline(always)] fn into_int(self) -> $t { self }
            #[inline(always)] fn from_int(int: $t) -> $t { int }
        }
    )*};
}
atomic_int!(i32 => AtomicI32, u32, u32 => AtomicU32, u32, i64 => AtomicI64, u64, u64 => AtomicU64, u64);

/// Defines, for each read-modify-write [`Amo`] `op`, the fetching method (returns the old
/// value) and the plain one.
macro_rules! binary_amos {
    ($(
        $(#[$fetch_doc:meta])* $fetch:ident,
        $(#[$plain_doc:meta])* $plain:ident => $op:ident;
    )*) => {$(
        $(#[$fetch_doc])*
        #[inline(always)]
        pub fn $fetch<'s, T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            value: T,
            pe: usize,
        ) -> Landing<T> {
            self.amo(dest.into(), pe, Amo::$op(value.to_bits()), |old| old, old_value)
        }

        $(#[$plain_doc])*
        #[inline(always)]
        pub fn $plain<'s, T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            value: T,
            pe: usize,
        ) -> Landing<()> {
            self.amo(dest.into(), pe, Amo::$op(value.to_bits()), drop, nothing)
        }
    )*};
}

/// The old value of a remote atomic, from the bytes it fetched.
pub(crate) fn old_value<T: Pod>(bytes: Vec<u8>) -> Result<T> {
    let mut old = T::zeroed();
    land(bytemuck::bytes_of_mut(&mut old), bytes)?;
    Ok(old)
}

/// How an atomic's outcome is made: from the word's old value on a mapped route, from the
/// bytes the remote transport fetched on the other.
pub(crate) type Outcome<T, R> = (fn(T) -> R, fn(Vec<u8>) -> Result<R>);

impl DataPlane {
    /// Runs `op` on the atomic `dest[0]` of PE `pe`; the outcome is `keep` of the word's old
    /// value (on a mapped route) or `decode` of the bytes the remote transport fetched.
    #[inline(always)]
    fn amo<T: AtomicInt, R: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        pe: usize,
        op: Amo,
        keep: fn(T) -> R,
        decode: fn(Vec<u8>) -> Result<R>,
    ) -> Landing<R> {
        self.amo_in(None, dest, pe, op, (keep, decode))
    }

    /// [`DataPlane::amo`] in ordering domain `domain` (`None`: the default context's).
    #[inline(always)]
    pub(crate) fn amo_in<T: AtomicInt, R: Pod>(
        &self,
        domain: Option<&Domain>,
        dest: SymSlice<'_, T>,
        pe: usize,
        op: Amo,
        (keep, decode): Outcome<T, R>,
    ) -> Landing<R> {
        match self.start_amo(dest, pe, op, domain) {
            Ok(Ok(old)) => Landing::ready(Ok(keep(old))),
            Ok(Err(remote)) => Landing::remote(self.awaited(remote), decode),
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Validates `op` on the atomic `dest[0]` of PE `pe` and runs it on a mapped route
    /// (there every op is a SeqCst read-modify-write, or a load, which the wake-up protocol
    /// relies on, and a writing one wakes that PE's sleepers on the word: `Ok` of the old
    /// value), or starts it on the remote one (where the transport does both: `Err` of its
    /// completion).
    #[inline(always)]
    pub(crate) fn start_amo<T: AtomicInt>(
        &self,
        dest: SymSlice<'_, T>,
        pe: usize,
        op: Amo,
        domain: Option<&Domain>,
    ) -> Result<std::result::Result<T, Completion>> {
        let width = std::mem::size_of::<T>();
        let (route, at) = self.validate(pe, || self.locate_atomic(dest))?;
        Ok(match route {
            // Inlined into each caller (each exported atomic of the C ABI among them), where
            // `op` is known and the match folds to one instruction.
            Route::Mapped(target) => Ok(self.mapped(
                OpKind::Amo,
                pe,
                width,
                #[inline(always)]
                || {
                    let a = T::at(target.mapping(), at);
                    let old = match op {
                        Amo::Fetch => T::load(a),
                        Amo::Swap(v) => T::swap(a, T::from_bits(v)),
                        Amo::CompareSwap(cond, v) => {
                            T::compare_swap(a, T::from_bits(cond), T::from_bits(v))
                        }
                        Amo::Add(v) => T::fetch_add(a, T::from_bits(v)),
                        Amo::And(v) => T::fetch_and(a, T::from_bits(v)),
                        Amo::Or(v) => T::fetch_or(a, T::from_bits(v)),
                        Amo::Xor(v) => T::fetch_xor(a, T::from_bits(v)),
                    };
                    if op != Amo::Fetch {
                        target.wake_watchers(at, at + width);
                    }
                    old
                },
            )),
            Route::Remote => {
                let remote = || RemoteOp::Amo { op, width };
                Err(self.remote_in(domain, OpKind::Amo, pe, (width, at), remote))
            }
        })
    }
}

/// The named atomics (`atomic_fetch` … `atomic_xor`) as methods of a type with an `amo`
/// method of [`DataPlane::amo`]'s shape: the data plane's (the default context's) and each
/// [`crate::Context`]'s. A macro, not a trait, so that callers need no trait in scope.
macro_rules! named_atomics {
    () => {
        /// Atomically reads `dest[0]` on PE `pe` (`shmem_atomic_fetch`; integers, `f32`, `f64`).
        #[inline(always)]
        pub fn atomic_fetch<'s, T: AtomicWord>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            pe: usize,
        ) -> Landing<T> {
            self.amo(as_ints(dest.into()), pe, Amo::Fetch, T::from_int, old_value)
        }

        /// Atomically writes `value` to `dest[0]` on PE `pe` (`shmem_atomic_set`; integers,
        /// `f32`, `f64`).
        #[inline(always)]
        pub fn atomic_set<'s, T: AtomicWord>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            value: T,
            pe: usize,
        ) -> Landing<()> {
            // A swap, not a store: the wake-up protocol needs a read-modify-write.
            let op = Amo::Swap(value.into_int().to_bits());
            self.amo(as_ints(dest.into()), pe, op, drop, nothing)
        }

        /// Atomically replaces `dest[0]` on PE `pe` with `value`, returning the old value
        /// (`shmem_atomic_swap`; integers, `f32`, `f64`).
        #[inline(always)]
        pub fn atomic_swap<'s, T: AtomicWord>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            value: T,
            pe: usize,
        ) -> Landing<T> {
            let op = Amo::Swap(value.into_int().to_bits());
            self.amo(as_ints(dest.into()), pe, op, T::from_int, old_value)
        }

        /// Atomically sets `dest[0]` on PE `pe` to `value` if it equals `cond`; returns the old
        /// value (`shmem_atomic_compare_swap`).
        #[inline(always)]
        pub fn atomic_compare_swap<'s, T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            cond: T,
            value: T,
            pe: usize,
        ) -> Landing<T> {
            let op = Amo::CompareSwap(cond.to_bits(), value.to_bits());
            self.amo(dest.into(), pe, op, |old| old, old_value)
        }

        /// Atomically increments `dest[0]` on PE `pe`, returning the old value.
        #[inline(always)]
        pub fn atomic_fetch_inc<'s, T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            pe: usize,
        ) -> Landing<T> {
            self.amo(
                dest.into(),
                pe,
                Amo::Add(T::ONE.to_bits()),
                |old| old,
                old_value,
            )
        }

        /// Atomically increments `dest[0]` on PE `pe`.
        #[inline(always)]
        pub fn atomic_inc<'s, T: AtomicInt>(
            &self,
            dest: impl Into<SymSlice<'s, T>>,
            pe: usize,
        ) -> Landing<()> {
            self.amo(dest.into(), pe, Amo::Add(T::ONE.to_bits()), drop, nothing)
        }

        binary_amos! {
            /// Atomically adds `value` (wrapping) to `dest[0]` on PE `pe`, returning the old
            /// value (`shmem_atomic_fetch_add`).
            atomic_fetch_add,
            /// Atomically adds `value` (wrapping) to `dest[0]` on PE `pe` (`shmem_atomic_add`).
            atomic_add => Add;
            /// Atomically ands `value` into `dest[0]` on PE `pe`, returning the old value
            /// (`shmem_atomic_fetch_and`).
            atomic_fetch_and,
            /// Atomically ands `value` into `dest[0]` on PE `pe` (`shmem_atomic_and`).
            atomic_and => And;
            /// Atomically ors `value` into `dest[0]` on PE `pe`, returning the old value
            /// (`shmem_atomic_fetch_or`).
            atomic_fetch_or,
            /// Atomically ors `value` into `dest[0]` on PE `pe` (`shmem_atomic_or`).
            atomic_or => Or;
            /// Atomically xors `value` into `dest[0]` on PE `pe`, returning the old value
            /// (`shmem_atomic_fetch_xor`).
            atomic_fetch_xor,
            /// Atomically xors `value` into `dest[0]` on PE `pe` (`shmem_atomic_xor`).
            atomic_xor => Xor;
        }
    };
}
pub(crate) use {binary_amos, named_atomics};

impl DataPlane {
    named_atomics!();
}
