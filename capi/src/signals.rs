//! Signals: put-with-signal for every RMA type, size and bytes (`shmem_TYPENAME_put_signal`,
//! `_nbi`), `shmem_signal_fetch`, `shmem_signal_wait_until`, and OpenSHMEM 1.6's
//! `shmem_signal_add` and `shmem_signal_set` (also as `shmemx_*`).
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::c_int;

use bytemuck::Pod;
use ferroshmem_runtime::{Error, Result, SignalOp};

use crate::raw;
use crate::state::{ok, shmem};
use crate::types::LongDouble;
use crate::waits::cmp;

/// A C `SHMEM_SIGNAL_*` code.
fn signal_op(code: c_int) -> Result<SignalOp> {
    match code {
        0 => Ok(SignalOp::Set),
        1 => Ok(SignalOp::Add),
        _ => Err(Error::InvalidArgument(format!(
            "{code} is not a SHMEM_SIGNAL_* code"
        ))),
    }
}

/// `put_signal` (`nbi`: complete at `quiet`): `nelems` elements into `dest` on `pe`, then
/// the signal updated there, ordered after the data.
#[inline(always)]
pub(crate) fn put_signal<T: Pod>(
    routine: &'static str,
    (dest, source, nelems): (*mut T, *const T, usize),
    (sig, signal, code): (*mut u64, u64, c_int),
    pe: c_int,
    nbi: bool,
) {
    let s = shmem(routine);
    let done = raw::local(source, nelems, "source").and_then(|source| {
        let (dest, sig) = (s.view(dest, nelems)?, s.view(sig, 1)?);
        let (op, pe) = (signal_op(code)?, s.pe_of(pe)?);
        match nbi {
            true => s.pe().put_signal_nbi(dest, source, sig, signal, op, pe),
            false => s.block(s.pe().put_signal(dest, source, sig, signal, op, pe)),
        }
    });
    ok(routine, done)
}

/// The put-with-signal routines of each `name: type`, and of each size.
macro_rules! put_signals {
    ($($name:ident, $routine:literal: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`", $routine, "` and its `_nbi` form.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`", $routine, "`.")]
            #[export_name = $routine]
            pub extern "C" fn put_signal(dest: *mut $t, source: *const $t, nelems: usize, sig: *mut u64, signal: u64, op: c_int, pe: c_int) {
                super::put_signal($routine, (dest, source, nelems), (sig, signal, op), pe, false)
            }

            #[doc = concat!("`", $routine, "_nbi`.")]
            #[export_name = concat!($routine, "_nbi")]
            pub extern "C" fn put_signal_nbi(dest: *mut $t, source: *const $t, nelems: usize, sig: *mut u64, signal: u64, op: c_int, pe: c_int) {
                super::put_signal(concat!($routine, "_nbi"), (dest, source, nelems), (sig, signal, op), pe, true)
            }
        }
    )*};
}

put_signals!(
    float, "shmem_float_put_signal": f32, double, "shmem_double_put_signal": f64,
    longdouble, "shmem_longdouble_put_signal": LongDouble, char, "shmem_char_put_signal": i8,
    schar, "shmem_schar_put_signal": i8, short, "shmem_short_put_signal": i16,
    int, "shmem_int_put_signal": i32, long, "shmem_long_put_signal": i64,
    longlong, "shmem_longlong_put_signal": i64, uchar, "shmem_uchar_put_signal": u8,
    ushort, "shmem_ushort_put_signal": u16, uint, "shmem_uint_put_signal": u32,
    ulong, "shmem_ulong_put_signal": u64, ulonglong, "shmem_ulonglong_put_signal": u64,
    int8, "shmem_int8_put_signal": i8, int16, "shmem_int16_put_signal": i16,
    int32, "shmem_int32_put_signal": i32, int64, "shmem_int64_put_signal": i64,
    uint8, "shmem_uint8_put_signal": u8, uint16, "shmem_uint16_put_signal": u16,
    uint32, "shmem_uint32_put_signal": u32, uint64, "shmem_uint64_put_signal": u64,
    size, "shmem_size_put_signal": usize, ptrdiff, "shmem_ptrdiff_put_signal": isize,
    bits8, "shmem_put8_signal": u8, bits16, "shmem_put16_signal": u16,
    bits32, "shmem_put32_signal": u32, bits64, "shmem_put64_signal": u64,
    bits128, "shmem_put128_signal": LongDouble, mem, "shmem_putmem_signal": u8,
);

/// `shmem_signal_fetch`: this PE's signal word, read atomically.
#[no_mangle]
pub extern "C" fn shmem_signal_fetch(sig: *const u64) -> u64 {
    let s = shmem("shmem_signal_fetch");
    ok(
        "shmem_signal_fetch",
        s.view(sig, 1).and_then(|v| s.pe().signal_fetch(v)),
    )
}

/// `shmem_signal_wait_until`: blocks until `*sig cmp value`; returns the signal then.
#[no_mangle]
pub extern "C" fn shmem_signal_wait_until(sig: *mut u64, code: c_int, value: u64) -> u64 {
    let s = shmem("shmem_signal_wait_until");
    let seen = s
        .view(sig, 1)
        .and_then(|v| s.block(s.pe().signal_wait_until(v, cmp(code)?, value)));
    ok("shmem_signal_wait_until", seen)
}

/// Updates the signal word `sig` on `pe` by `op`.
fn signal(routine: &'static str, sig: *mut u64, value: u64, op: SignalOp, pe: c_int) {
    let s = shmem(routine);
    let done = s
        .view(sig, 1)
        .and_then(|v| s.block(s.pe().signal_op(v, value, op, s.pe_of(pe)?)));
    ok(routine, done)
}

/// `shmem_signal_add` (OpenSHMEM 1.6): adds `value` to the signal word on `pe`.
#[no_mangle]
pub extern "C" fn shmem_signal_add(sig: *mut u64, value: u64, pe: c_int) {
    signal("shmem_signal_add", sig, value, SignalOp::Add, pe)
}

/// `shmem_signal_set` (OpenSHMEM 1.6): sets the signal word on `pe` to `value`.
#[no_mangle]
pub extern "C" fn shmem_signal_set(sig: *mut u64, value: u64, pe: c_int) {
    signal("shmem_signal_set", sig, value, SignalOp::Set, pe)
}

/// `shmemx_signal_add`: `shmem_signal_add` under `shmemx.h`'s name.
#[no_mangle]
pub extern "C" fn shmemx_signal_add(sig: *mut u64, value: u64, pe: c_int) {
    signal("shmemx_signal_add", sig, value, SignalOp::Add, pe)
}

/// `shmemx_signal_set`: `shmem_signal_set` under `shmemx.h`'s name.
#[no_mangle]
pub extern "C" fn shmemx_signal_set(sig: *mut u64, value: u64, pe: c_int) {
    signal("shmemx_signal_set", sig, value, SignalOp::Set, pe)
}
