//! The pre-1.4 names of the atomics, still in wide use: `shmem_TYPE_fadd`, `_finc`, `_add`,
//! `_inc`, `_cswap` (int, long, long long), `_swap`, `_fetch`, `_set` (and float, double),
//! and `shmem_swap` on a `long`.
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_long};

use crate::amo::amo;
use crate::state::DEFAULT_CONTEXT;

/// The deprecated integer AMOs of each `name: type`.
macro_rules! integer_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_*`: the pre-1.4 integer atomics.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_fadd`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_fadd")]
            pub extern "C" fn fadd(dest: *mut $t, value: $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_fadd"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_fetch_add(w, value, pe), |c, w, pe| c.atomic_fetch_add(w, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_finc`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_finc")]
            pub extern "C" fn finc(dest: *mut $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_finc"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_fetch_inc(w, pe), |c, w, pe| c.atomic_fetch_inc(w, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_add`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_add")]
            pub extern "C" fn add(dest: *mut $t, value: $t, pe: c_int) {
                amo(concat!("shmem_", stringify!($name), "_add"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_add(w, value, pe), |c, w, pe| c.atomic_add(w, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_inc`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_inc")]
            pub extern "C" fn inc(dest: *mut $t, pe: c_int) {
                amo(concat!("shmem_", stringify!($name), "_inc"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_inc(w, pe), |c, w, pe| c.atomic_inc(w, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_cswap`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_cswap")]
            pub extern "C" fn cswap(dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_cswap"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_compare_swap(w, cond, value, pe), |c, w, pe| c.atomic_compare_swap(w, cond, value, pe))
            }
        }
    )*};
}

/// The deprecated `swap`, `fetch` and `set` of each `name: type`.
macro_rules! word_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_swap`, `_fetch`, `_set` (pre-1.4).")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_swap`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_swap")]
            pub extern "C" fn swap(dest: *mut $t, value: $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_swap"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_swap(w, value, pe), |c, w, pe| c.atomic_swap(w, value, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_fetch`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_fetch")]
            pub extern "C" fn fetch(source: *const $t, pe: c_int) -> $t {
                amo(concat!("shmem_", stringify!($name), "_fetch"), (DEFAULT_CONTEXT, source, pe), |d, w, pe| d.atomic_fetch(w, pe), |c, w, pe| c.atomic_fetch(w, pe))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_set`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_set")]
            pub extern "C" fn set(dest: *mut $t, value: $t, pe: c_int) {
                amo(concat!("shmem_", stringify!($name), "_set"), (DEFAULT_CONTEXT, dest, pe), |d, w, pe| d.atomic_set(w, value, pe), |c, w, pe| c.atomic_set(w, value, pe))
            }
        }
    )*};
}

/// The deprecated integer atomics.
pub mod integer {
    use super::*;

    integer_amos!(int: i32, long: i64, longlong: i64);
}

/// The deprecated word atomics.
pub mod word {
    use super::*;

    word_amos!(int: i32, long: i64, longlong: i64, float: f32, double: f64);
}

/// `shmem_swap` (pre-1.4): a swap on a `long`.
#[no_mangle]
pub extern "C" fn shmem_swap(dest: *mut c_long, value: c_long, pe: c_int) -> c_long {
    amo(
        "shmem_swap",
        (DEFAULT_CONTEXT, dest, pe),
        |d, w, pe| d.atomic_swap(w, value, pe),
        |c, w, pe| c.atomic_swap(w, value, pe),
    )
}
