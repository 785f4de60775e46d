//! Atomic memory operations: `shmem_TYPENAME_atomic_*` for OpenSHMEM's standard, extended
//! and bitwise AMO type tables, their non-blocking fetching forms (`_nbi`: the old value
//! lands in `fetch` by the next `quiet`; here it has landed when the call returns, which
//! OpenSHMEM allows), and the pre-1.4 names (`shmem_int_fadd`, `shmem_long_cswap` …).
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::c_int;

use bytemuck::Pod;
use ferroshmem_runtime::{DataPlane, SymSlice};

use crate::raw;
use crate::state::{ok, shmem};

/// Runs the atomic `op` on the symmetric word at `dest` of `pe` and returns its outcome.
#[inline(always)]
pub(crate) fn amo<T: Pod, R: Pod + Unpin>(
    routine: &'static str,
    dest: *const T,
    pe: c_int,
    op: impl FnOnce(&DataPlane, SymSlice<'static, T>, usize) -> ferroshmem_runtime::landing::Landing<R>,
) -> R {
    let state = shmem(routine);
    let outcome = state.view(dest, 1).and_then(|word| {
        let pe = state.pe_of(pe)?;
        state.block(op(state.pe(), word, pe))
    });
    ok(routine, outcome)
}

/// A fetching atomic's non-blocking form: the old value stored to the caller's `fetch`.
#[inline(always)]
pub(crate) fn into_fetch<T: Pod>(routine: &'static str, fetch: *mut T, old: T) {
    ok(routine, raw::store(fetch, old, "fetch"));
}

/// The standard AMOs (`compare_swap`, `fetch_inc`, `inc`, `fetch_add`, `add`, and the
/// extended ones) of each `name: C type as runtime type`.
macro_rules! standard_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_*`: the standard AMOs.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_compare_swap`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_compare_swap")]
            pub extern "C" fn compare_swap(dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_atomic_compare_swap"), dest, pe, |d, w, pe| d.atomic_compare_swap(w, cond, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_compare_swap_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_compare_swap_nbi")]
            pub extern "C" fn compare_swap_nbi(fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) {
                let routine = concat!("shmem_", stringify!($name), "_atomic_compare_swap_nbi");
                into_fetch(routine, fetch, amo(routine, dest, pe, |d, w, pe| d.atomic_compare_swap(w, cond, value, pe)))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_inc`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_inc")]
            pub extern "C" fn fetch_inc(dest: *mut $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_atomic_fetch_inc"), dest, pe, |d, w, pe| d.atomic_fetch_inc(w, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_inc_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_inc_nbi")]
            pub extern "C" fn fetch_inc_nbi(fetch: *mut $t, dest: *mut $t, pe: c_int) {
                let routine = concat!("shmem_", stringify!($name), "_atomic_fetch_inc_nbi");
                into_fetch(routine, fetch, amo(routine, dest, pe, |d, w, pe| d.atomic_fetch_inc(w, pe)))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_inc`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_inc")]
            pub extern "C" fn inc(dest: *mut $t, pe: c_int) {
                amo(concat!("shmem_", stringify!($name), "_atomic_inc"), dest, pe, |d, w, pe| d.atomic_inc(w, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_add`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_add")]
            pub extern "C" fn fetch_add(dest: *mut $t, value: $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_atomic_fetch_add"), dest, pe, |d, w, pe| d.atomic_fetch_add(w, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_add_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_add_nbi")]
            pub extern "C" fn fetch_add_nbi(fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
                let routine = concat!("shmem_", stringify!($name), "_atomic_fetch_add_nbi");
                into_fetch(routine, fetch, amo(routine, dest, pe, |d, w, pe| d.atomic_fetch_add(w, value, pe)))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_add`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_add")]
            pub extern "C" fn add(dest: *mut $t, value: $t, pe: c_int) {
                amo(concat!("shmem_", stringify!($name), "_atomic_add"), dest, pe, |d, w, pe| d.atomic_add(w, value, pe))
            }
        }
    )*};
}

/// The extended AMOs (`fetch`, `set`, `swap`, with `fetch_nbi` and `swap_nbi`) of each
/// `name: type`.
macro_rules! extended_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_*`: the extended AMOs.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch")]
            pub extern "C" fn fetch(source: *const $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_atomic_fetch"), source, pe, |d, w, pe| d.atomic_fetch(w, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_nbi")]
            pub extern "C" fn fetch_nbi(fetch: *mut $t, source: *const $t, pe: c_int) {
                let routine = concat!("shmem_", stringify!($name), "_atomic_fetch_nbi");
                into_fetch(routine, fetch, amo(routine, source, pe, |d, w, pe| d.atomic_fetch(w, pe)))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_set`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_set")]
            pub extern "C" fn set(dest: *mut $t, value: $t, pe: c_int) {
                amo(concat!("shmem_", stringify!($name), "_atomic_set"), dest, pe, |d, w, pe| d.atomic_set(w, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_swap`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_swap")]
            pub extern "C" fn swap(dest: *mut $t, value: $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_atomic_swap"), dest, pe, |d, w, pe| d.atomic_swap(w, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_atomic_swap_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_atomic_swap_nbi")]
            pub extern "C" fn swap_nbi(fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
                let routine = concat!("shmem_", stringify!($name), "_atomic_swap_nbi");
                into_fetch(routine, fetch, amo(routine, dest, pe, |d, w, pe| d.atomic_swap(w, value, pe)))
            }
        }
    )*};
}

/// The bitwise AMOs of each `name: type`.
macro_rules! bitwise_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_*`: the bitwise AMOs.")]
        pub mod $name {
            use super::*;
            bitwise_amo!($name, $t, fetch_and, fetch_and_nbi, and, atomic_fetch_and, atomic_and, "and");
            bitwise_amo!($name, $t, fetch_or, fetch_or_nbi, or, atomic_fetch_or, atomic_or, "or");
            bitwise_amo!($name, $t, fetch_xor, fetch_xor_nbi, xor, atomic_fetch_xor, atomic_xor, "xor");
        }
    )*};
}

/// One bitwise operator's three routines for one type.
macro_rules! bitwise_amo {
    ($name:ident, $t:ty, $fetch:ident, $fetch_nbi:ident, $plain:ident, $rust_fetch:ident, $rust_plain:ident, $op:literal) => {
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_", $op, "`.")]
        #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_", $op)]
        pub extern "C" fn $fetch(dest: *mut $t, value: $t, pe: c_int) -> $t {
            amo(
                concat!("shmem_", stringify!($name), "_atomic_fetch_", $op),
                dest,
                pe,
                |d, w, pe| d.$rust_fetch(w, value, pe),
            )
        }

        #[doc = concat!("`shmem_", stringify!($name), "_atomic_fetch_", $op, "_nbi`.")]
        #[export_name = concat!("shmem_", stringify!($name), "_atomic_fetch_", $op, "_nbi")]
        pub extern "C" fn $fetch_nbi(fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            let routine = concat!("shmem_", stringify!($name), "_atomic_fetch_", $op, "_nbi");
            into_fetch(
                routine,
                fetch,
                amo(routine, dest, pe, |d, w, pe| d.$rust_fetch(w, value, pe)),
            )
        }

        #[doc = concat!("`shmem_", stringify!($name), "_atomic_", $op, "`.")]
        #[export_name = concat!("shmem_", stringify!($name), "_atomic_", $op)]
        pub extern "C" fn $plain(dest: *mut $t, value: $t, pe: c_int) {
            amo(
                concat!("shmem_", stringify!($name), "_atomic_", $op),
                dest,
                pe,
                |d, w, pe| d.$rust_plain(w, value, pe),
            )
        }
    };
}

/// The standard AMO types (`size_t` and `ptrdiff_t` as the 64-bit words they are).
pub mod standard {
    use super::*;

    standard_amos!(
        int: i32, long: i64, longlong: i64, uint: u32, ulong: u64, ulonglong: u64, int32: i32,
        int64: i64, uint32: u32, uint64: u64, size: u64, ptrdiff: i64,
    );
}

/// The extended AMO types: the standard ones and `float`, `double`.
pub mod extended {
    use super::*;

    extended_amos!(
        int: i32, long: i64, longlong: i64, uint: u32, ulong: u64, ulonglong: u64, int32: i32,
        int64: i64, uint32: u32, uint64: u64, size: u64, ptrdiff: i64, float: f32, double: f64,
    );
}

/// The bitwise AMO types.
pub mod bitwise {
    use super::*;

    bitwise_amos!(uint: u32, ulong: u64, ulonglong: u64, int32: i32, int64: i64, uint32: u32, uint64: u64);
}
