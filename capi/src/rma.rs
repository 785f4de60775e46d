//! Remote memory access: `put`, `get`, `p`, `g`, `iput`, `iget`, `put_nbi`, `get_nbi` for
//! every type of OpenSHMEM's RMA type table (`shmem_int_put` …), by size (`shmem_put32` …)
//! and by bytes (`shmem_putmem` …).
//!
//! The typed routines are generated, one module per type; each calls the generic body here,
//! which the compiler inlines, so a put to a PE of this node is its copy alone.
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::c_int;

use bytemuck::Pod;
use ferroshmem_runtime::{Error, Result};

use crate::raw;
use crate::state::{ok, shmem};
use crate::types::LongDouble;

/// A C `ptrdiff_t` stride as the runtime's: at least 0.
fn stride(stride: isize, what: &str) -> Result<usize> {
    usize::try_from(stride)
        .map_err(|_| Error::InvalidArgument(format!("a negative {what} stride ({stride})")))
}

/// `put`: `nelems` elements from the local `source` into symmetric `dest` on `pe`.
#[inline(always)]
pub(crate) fn put<T: Pod>(
    routine: &'static str,
    dest: *mut T,
    source: *const T,
    nelems: usize,
    pe: c_int,
) {
    let state = shmem(routine);
    let done = raw::local(source, nelems, "source").and_then(|source| {
        let dest = state.view(dest, nelems)?;
        state.block(state.pe().put(dest, source, state.pe_of(pe)?))
    });
    ok(routine, done)
}

/// `put_nbi`: as `put`, complete at `quiet`.
#[inline(always)]
pub(crate) fn put_nbi<T: Pod>(
    routine: &'static str,
    dest: *mut T,
    source: *const T,
    nelems: usize,
    pe: c_int,
) {
    let state = shmem(routine);
    let done = raw::local(source, nelems, "source").and_then(|source| {
        let dest = state.view(dest, nelems)?;
        state.pe().put_nbi(dest, source, state.pe_of(pe)?)
    });
    ok(routine, done)
}

/// `get`: `nelems` elements of symmetric `source` on `pe` into the local `dest`.
#[inline(always)]
pub(crate) fn get<T: Pod>(
    routine: &'static str,
    dest: *mut T,
    source: *const T,
    nelems: usize,
    pe: c_int,
) {
    let state = shmem(routine);
    let done = raw::local_mut(dest, nelems, "dest").and_then(|dest| {
        let source = state.view(source, nelems)?;
        state.block(state.pe().get(dest, source, state.pe_of(pe)?))
    });
    ok(routine, done)
}

/// `get_nbi`: as `get`, complete at `quiet`; a destination outside the heap is filled
/// before the call returns (OpenSHMEM lets a non-blocking call complete early).
#[inline(always)]
pub(crate) fn get_nbi<T: Pod>(
    routine: &'static str,
    dest: *mut T,
    source: *const T,
    nelems: usize,
    pe: c_int,
) {
    let state = shmem(routine);
    if !state.in_heap(dest.cast()) {
        return get(routine, dest, source, nelems, pe);
    }
    let done = raw::local_mut(dest, nelems, "dest").and_then(|_| {
        let (dest, source) = (state.view(dest, nelems)?, state.view(source, nelems)?);
        state.pe().get_nbi(dest, source, state.pe_of(pe)?)
    });
    ok(routine, done)
}

/// `p`: one element into symmetric `dest` on `pe`.
#[inline(always)]
pub(crate) fn p<T: Pod>(routine: &'static str, dest: *mut T, value: T, pe: c_int) {
    let state = shmem(routine);
    let done = state
        .view(dest, 1)
        .and_then(|dest| state.block(state.pe().p(dest, value, state.pe_of(pe)?)));
    ok(routine, done)
}

/// `g`: one element of symmetric `source` on `pe`.
#[inline(always)]
pub(crate) fn g<T: Pod + Unpin>(routine: &'static str, source: *const T, pe: c_int) -> T {
    let state = shmem(routine);
    let value = state
        .view(source, 1)
        .and_then(|source| state.block(state.pe().g(source, state.pe_of(pe)?)));
    ok(routine, value)
}

/// `iput`: `nelems` elements, every `sst`-th of the local `source`, into every `dst`-th of
/// symmetric `dest` on `pe`.
#[inline(always)]
pub(crate) fn iput<T: Pod>(
    routine: &'static str,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    nelems: usize,
    pe: c_int,
) {
    let state = shmem(routine);
    let done = (|| {
        let (dst, sst) = (stride(dst, "dest")?, stride(sst, "source")?);
        let source = raw::local(source, extent(sst, nelems), "source")?;
        let dest = state.view(dest, extent(dst, nelems))?;
        let pe = state.pe_of(pe)?;
        state.block(state.pe().iput(dest, source, dst, sst, nelems, pe))
    })();
    ok(routine, done)
}

/// `iget`: `nelems` elements, every `sst`-th of symmetric `source` on `pe`, into every
/// `dst`-th of the local `dest`.
#[inline(always)]
pub(crate) fn iget<T: Pod>(
    routine: &'static str,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    nelems: usize,
    pe: c_int,
) {
    let state = shmem(routine);
    let done = (|| {
        let (dst, sst) = (stride(dst, "dest")?, stride(sst, "source")?);
        let dest = raw::local_mut(dest, extent(dst, nelems), "dest")?;
        let source = state.view(source, extent(sst, nelems))?;
        let pe = state.pe_of(pe)?;
        state.block(state.pe().iget(dest, source, dst, sst, nelems, pe))
    })();
    ok(routine, done)
}

/// Elements a strided run of `nelems` spans.
fn extent(stride: usize, nelems: usize) -> usize {
    match nelems {
        0 => 0,
        n => stride.saturating_mul(n - 1).saturating_add(1),
    }
}

/// The typed RMA routines of each `name: type` of the table.
macro_rules! typed_rma {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_*` RMA routines.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_put`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_put")]
            pub extern "C" fn put(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::put(concat!("shmem_", stringify!($name), "_put"), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_put_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_put_nbi")]
            pub extern "C" fn put_nbi(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::put_nbi(concat!("shmem_", stringify!($name), "_put_nbi"), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_get`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_get")]
            pub extern "C" fn get(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::get(concat!("shmem_", stringify!($name), "_get"), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_get_nbi`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_get_nbi")]
            pub extern "C" fn get_nbi(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::get_nbi(concat!("shmem_", stringify!($name), "_get_nbi"), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_iput`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_iput")]
            pub extern "C" fn iput(dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int) {
                super::iput(concat!("shmem_", stringify!($name), "_iput"), (dest, source), (dst, sst), nelems, pe)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_iget`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_iget")]
            pub extern "C" fn iget(dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int) {
                super::iget(concat!("shmem_", stringify!($name), "_iget"), (dest, source), (dst, sst), nelems, pe)
            }
        }
    )*};
}

/// `p` and `g` of each `name: type` (all but `long double`, which C passes by value in a
/// way Rust cannot take: the header gives those two as inline functions over `put`/`get`).
macro_rules! typed_p_g {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_p` and `_g`.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_p`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_p")]
            pub extern "C" fn p(dest: *mut $t, value: $t, pe: c_int) {
                super::super::p(concat!("shmem_", stringify!($name), "_p"), dest, value, pe)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_g`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_g")]
            pub extern "C" fn g(source: *const $t, pe: c_int) -> $t {
                super::super::g(concat!("shmem_", stringify!($name), "_g"), source, pe)
            }
        }
    )*};
}

/// The sized RMA routines (`shmem_put32` …) of each `bits: type`.
macro_rules! sized_rma {
    ($($bits:literal => $module:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_*", stringify!($bits), "` RMA routines.")]
        pub mod $module {
            use super::*;

            #[doc = concat!("`shmem_put", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_put", stringify!($bits))]
            pub extern "C" fn put(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::put(concat!("shmem_put", stringify!($bits)), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_put", stringify!($bits), "_nbi`.")]
            #[export_name = concat!("shmem_put", stringify!($bits), "_nbi")]
            pub extern "C" fn put_nbi(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::put_nbi(concat!("shmem_put", stringify!($bits), "_nbi"), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_get", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_get", stringify!($bits))]
            pub extern "C" fn get(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::get(concat!("shmem_get", stringify!($bits)), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_get", stringify!($bits), "_nbi`.")]
            #[export_name = concat!("shmem_get", stringify!($bits), "_nbi")]
            pub extern "C" fn get_nbi(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
                super::get_nbi(concat!("shmem_get", stringify!($bits), "_nbi"), dest, source, nelems, pe)
            }

            #[doc = concat!("`shmem_iput", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_iput", stringify!($bits))]
            pub extern "C" fn iput(dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int) {
                super::iput(concat!("shmem_iput", stringify!($bits)), (dest, source), (dst, sst), nelems, pe)
            }

            #[doc = concat!("`shmem_iget", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_iget", stringify!($bits))]
            pub extern "C" fn iget(dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int) {
                super::iget(concat!("shmem_iget", stringify!($bits)), (dest, source), (dst, sst), nelems, pe)
            }
        }
    )*};
}

typed_rma!(
    float: f32, double: f64, longdouble: LongDouble, char: i8, schar: i8, short: i16, int: i32,
    long: i64, longlong: i64, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64,
    int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32,
    uint64: u64, size: usize, ptrdiff: isize,
);

/// `p` and `g` by type.
pub mod single {
    use super::*;

    typed_p_g!(
        float: f32, double: f64, char: i8, schar: i8, short: i16, int: i32, long: i64,
        longlong: i64, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8,
        int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64,
        size: usize, ptrdiff: isize,
    );
}

sized_rma!(8 => bits8: u8, 16 => bits16: u16, 32 => bits32: u32, 64 => bits64: u64, 128 => bits128: LongDouble);

/// `shmem_putmem`: `nelems` bytes.
#[no_mangle]
pub extern "C" fn shmem_putmem(dest: *mut u8, source: *const u8, nelems: usize, pe: c_int) {
    put("shmem_putmem", dest, source, nelems, pe)
}

/// `shmem_putmem_nbi`.
#[no_mangle]
pub extern "C" fn shmem_putmem_nbi(dest: *mut u8, source: *const u8, nelems: usize, pe: c_int) {
    put_nbi("shmem_putmem_nbi", dest, source, nelems, pe)
}

/// `shmem_getmem`: `nelems` bytes.
#[no_mangle]
pub extern "C" fn shmem_getmem(dest: *mut u8, source: *const u8, nelems: usize, pe: c_int) {
    get("shmem_getmem", dest, source, nelems, pe)
}

/// `shmem_getmem_nbi`.
#[no_mangle]
pub extern "C" fn shmem_getmem_nbi(dest: *mut u8, source: *const u8, nelems: usize, pe: c_int) {
    get_nbi("shmem_getmem_nbi", dest, source, nelems, pe)
}
