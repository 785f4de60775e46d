//! Atomic memory operations: `shmem_TYPENAME_atomic_*` for OpenSHMEM's standard, extended
//! and bitwise AMO type tables, their non-blocking fetching forms (`_nbi`: the old value
//! lands in `fetch` by the next `quiet`; here it has landed when the call returns, which
//! OpenSHMEM allows), and the pre-1.4 names (`shmem_int_fadd`, `shmem_long_cswap` …).
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use ferroshmem_runtime::landing::Landing;
use ferroshmem_runtime::{Context, DataPlane, SymSlice};

use crate::raw;
use crate::state::{ok, shmem, DEFAULT_CONTEXT};

/// Runs an atomic on the symmetric word at `dest` of `pe` in the context of C handle `ctx`
/// (`on_default` on the data plane for `SHMEM_CTX_DEFAULT`, `on_context` on a made one) and
/// returns its outcome.
#[inline(always)]
pub(crate) fn amo<T: Pod, R: Pod + Unpin>(
    routine: &'static str,
    (ctx, dest, pe): (usize, *const T, c_int),
    on_default: impl FnOnce(&DataPlane, SymSlice<'static, T>, usize) -> Landing<R>,
    on_context: impl FnOnce(&Context, SymSlice<'static, T>, usize) -> Landing<R>,
) -> R {
    let state = shmem(routine);
    if ctx == DEFAULT_CONTEXT {
        if let (Some(word), Some(p)) = (state.try_view(dest, 1), state.try_pe(pe)) {
            let landing = on_default(state.dp(), word, p);
            return match landing.succeeded_at_once() {
                Some(value) => value,
                None => ok(routine, state.block(landing)),
            };
        }
    }
    let outcome = state.view(dest, 1).and_then(|word| {
        let pe = state.pe_of(pe)?;
        match state.context(ctx)? {
            None => state.block(on_default(state.dp(), word, pe)),
            Some(c) => state.block(on_context(&c, word, pe)),
        }
    });
    ok(routine, outcome)
}

/// A fetching atomic's non-blocking form: the old value stored to the caller's `fetch`.
#[inline(always)]
pub(crate) fn into_fetch<T: Pod>(routine: &'static str, fetch: *mut T, old: T) {
    ok(routine, raw::store(fetch, old, "fetch"));
}

/// One atomic of one type, `shmem_TYPE_atomic_OP` and `shmem_ctx_TYPE_atomic_OP`, running
/// `$method` of the data plane or the context with `$call` then the PE; `nbi` forms store
/// the old value to their leading `fetch` argument.
macro_rules! atomic {
    ($fn:ident, $ctx_fn:ident, $name:ident, $t:ty, $op:literal, ($($arg:ident: $ty:ty),*) -> $ret:ty, $method:ident($($call:ident),*)) => {
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_", $op, "`.")]
        #[export_name = concat!("shmem_", stringify!($name), "_atomic_", $op)]
        pub extern "C" fn $fn(dest: *mut $t, $($arg: $ty,)* pe: c_int) -> $ret {
            let routine = concat!("shmem_", stringify!($name), "_atomic_", $op);
            amo(routine, (DEFAULT_CONTEXT, dest, pe), #[inline(always)] |d, w, pe| d.$method(w, $($call,)* pe), |c, w, pe| c.$method(w, $($call,)* pe))
        }

        #[doc = concat!("`shmem_ctx_", stringify!($name), "_atomic_", $op, "`.")]
        #[export_name = concat!("shmem_ctx_", stringify!($name), "_atomic_", $op)]
        pub extern "C" fn $ctx_fn(ctx: *mut c_void, dest: *mut $t, $($arg: $ty,)* pe: c_int) -> $ret {
            let routine = concat!("shmem_ctx_", stringify!($name), "_atomic_", $op);
            amo(routine, (ctx as usize, dest, pe), #[inline(always)] |d, w, pe| d.$method(w, $($call,)* pe), |c, w, pe| c.$method(w, $($call,)* pe))
        }
    };
    (nbi $fn:ident, $ctx_fn:ident, $name:ident, $t:ty, $op:literal, ($($arg:ident: $ty:ty),*), $method:ident($($call:ident),*)) => {
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_", $op, "_nbi`.")]
        #[export_name = concat!("shmem_", stringify!($name), "_atomic_", $op, "_nbi")]
        pub extern "C" fn $fn(fetch: *mut $t, dest: *mut $t, $($arg: $ty,)* pe: c_int) {
            let routine = concat!("shmem_", stringify!($name), "_atomic_", $op, "_nbi");
            into_fetch(routine, fetch, amo(routine, (DEFAULT_CONTEXT, dest, pe), #[inline(always)] |d, w, pe| d.$method(w, $($call,)* pe), |c, w, pe| c.$method(w, $($call,)* pe)))
        }

        #[doc = concat!("`shmem_ctx_", stringify!($name), "_atomic_", $op, "_nbi`.")]
        #[export_name = concat!("shmem_ctx_", stringify!($name), "_atomic_", $op, "_nbi")]
        pub extern "C" fn $ctx_fn(ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, $($arg: $ty,)* pe: c_int) {
            let routine = concat!("shmem_ctx_", stringify!($name), "_atomic_", $op, "_nbi");
            into_fetch(routine, fetch, amo(routine, (ctx as usize, dest, pe), #[inline(always)] |d, w, pe| d.$method(w, $($call,)* pe), |c, w, pe| c.$method(w, $($call,)* pe)))
        }
    };
}

/// The standard AMOs (`compare_swap`, `fetch_inc`, `inc`, `fetch_add`, `add`, with their
/// `_nbi` fetching forms) of each `name: type`.
macro_rules! standard_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_*`: the standard AMOs.")]
        pub mod $name {
            use super::*;
            atomic!(compare_swap, ctx_compare_swap, $name, $t, "compare_swap", (cond: $t, value: $t) -> $t, atomic_compare_swap(cond, value));
            atomic!(nbi compare_swap_nbi, ctx_compare_swap_nbi, $name, $t, "compare_swap", (cond: $t, value: $t), atomic_compare_swap(cond, value));
            atomic!(fetch_inc, ctx_fetch_inc, $name, $t, "fetch_inc", () -> $t, atomic_fetch_inc());
            atomic!(nbi fetch_inc_nbi, ctx_fetch_inc_nbi, $name, $t, "fetch_inc", (), atomic_fetch_inc());
            atomic!(inc, ctx_inc, $name, $t, "inc", () -> (), atomic_inc());
            atomic!(fetch_add, ctx_fetch_add, $name, $t, "fetch_add", (value: $t) -> $t, atomic_fetch_add(value));
            atomic!(nbi fetch_add_nbi, ctx_fetch_add_nbi, $name, $t, "fetch_add", (value: $t), atomic_fetch_add(value));
            atomic!(add, ctx_add, $name, $t, "add", (value: $t) -> (), atomic_add(value));
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
            atomic!(fetch, ctx_fetch, $name, $t, "fetch", () -> $t, atomic_fetch());
            atomic!(nbi fetch_nbi, ctx_fetch_nbi, $name, $t, "fetch", (), atomic_fetch());
            atomic!(set, ctx_set, $name, $t, "set", (value: $t) -> (), atomic_set(value));
            atomic!(swap, ctx_swap, $name, $t, "swap", (value: $t) -> $t, atomic_swap(value));
            atomic!(nbi swap_nbi, ctx_swap_nbi, $name, $t, "swap", (value: $t), atomic_swap(value));
        }
    )*};
}

/// The bitwise AMOs of each `name: type`.
macro_rules! bitwise_amos {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_atomic_*`: the bitwise AMOs.")]
        pub mod $name {
            use super::*;
            atomic!(fetch_and, ctx_fetch_and, $name, $t, "fetch_and", (value: $t) -> $t, atomic_fetch_and(value));
            atomic!(nbi fetch_and_nbi, ctx_fetch_and_nbi, $name, $t, "fetch_and", (value: $t), atomic_fetch_and(value));
            atomic!(and, ctx_and, $name, $t, "and", (value: $t) -> (), atomic_and(value));
            atomic!(fetch_or, ctx_fetch_or, $name, $t, "fetch_or", (value: $t) -> $t, atomic_fetch_or(value));
            atomic!(nbi fetch_or_nbi, ctx_fetch_or_nbi, $name, $t, "fetch_or", (value: $t), atomic_fetch_or(value));
            atomic!(or, ctx_or, $name, $t, "or", (value: $t) -> (), atomic_or(value));
            atomic!(fetch_xor, ctx_fetch_xor, $name, $t, "fetch_xor", (value: $t) -> $t, atomic_fetch_xor(value));
            atomic!(nbi fetch_xor_nbi, ctx_fetch_xor_nbi, $name, $t, "fetch_xor", (value: $t), atomic_fetch_xor(value));
            atomic!(xor, ctx_xor, $name, $t, "xor", (value: $t) -> (), atomic_xor(value));
        }
    )*};
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
