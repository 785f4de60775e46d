//! Signals: put-with-signal for every RMA type, size and bytes (`shmem_TYPENAME_put_signal`,
//! `_nbi`), `shmem_signal_fetch`, `shmem_signal_wait_until`, and OpenSHMEM 1.6's
//! `shmem_signal_add` and `shmem_signal_set` (also as `shmemx_*`).
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use ferroshmem_runtime::{Error, Result, SignalOp};

use crate::raw;
use crate::state::{ok, shmem, DEFAULT_CONTEXT};
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

/// `put_signal` (`nbi`: complete at the context's `quiet`): `nelems` elements into `dest`
/// on `pe`, then the signal updated there, ordered after the data.
#[inline(always)]
pub(crate) fn put_signal<T: Pod>(
    (routine, ctx): (&'static str, usize),
    (dest, source, nelems): (*mut T, *const T, usize),
    (sig, signal, code): (*mut u64, u64, c_int),
    pe: c_int,
    nbi: bool,
) {
    let s = shmem(routine);
    let done = raw::local(source, nelems, "source").and_then(|source| {
        let (dest, sig) = (s.view(dest, nelems)?, s.view(sig, 1)?);
        let (op, pe) = (signal_op(code)?, s.pe_of(pe)?);
        match (s.context(ctx)?, nbi) {
            (None, true) => s.dp().put_signal_nbi(dest, source, sig, signal, op, pe),
            (None, false) => s.block(s.dp().put_signal(dest, source, sig, signal, op, pe)),
            (Some(c), true) => c.put_signal_nbi(dest, source, (sig, signal, op), pe),
            (Some(c), false) => s.block(c.put_signal(dest, source, (sig, signal, op), pe)),
        }
    });
    ok(routine, done)
}

/// The put-with-signal routines of each `module, "name": type` (`shmem_NAME`,
/// `shmem_NAME_nbi` and their `shmem_ctx_` forms).
macro_rules! put_signals {
    ($($module:ident, $rest:literal: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", $rest, "` and its `_nbi` and `shmem_ctx_` forms.")]
        pub mod $module {
            use super::*;
            put_signal_routine!(put_signal, ctx_put_signal, $rest, "", $t, false);
            put_signal_routine!(put_signal_nbi, ctx_put_signal_nbi, $rest, "_nbi", $t, true);
        }
    )*};
}

/// One put-with-signal routine in its plain and `shmem_ctx_` forms.
macro_rules! put_signal_routine {
    ($fn:ident, $ctx_fn:ident, $rest:literal, $nbi:literal, $t:ty, $is_nbi:expr) => {
        #[doc = concat!("`shmem_", $rest, $nbi, "`.")]
        #[export_name = concat!("shmem_", $rest, $nbi)]
        pub extern "C" fn $fn(
            dest: *mut $t,
            source: *const $t,
            nelems: usize,
            sig: *mut u64,
            signal: u64,
            op: c_int,
            pe: c_int,
        ) {
            let routine = concat!("shmem_", $rest, $nbi);
            super::put_signal(
                (routine, DEFAULT_CONTEXT),
                (dest, source, nelems),
                (sig, signal, op),
                pe,
                $is_nbi,
            )
        }

        #[doc = concat!("`shmem_ctx_", $rest, $nbi, "`.")]
        #[export_name = concat!("shmem_ctx_", $rest, $nbi)]
        pub extern "C" fn $ctx_fn(
            ctx: *mut c_void,
            dest: *mut $t,
            source: *const $t,
            nelems: usize,
            sig: *mut u64,
            signal: u64,
            op: c_int,
            pe: c_int,
        ) {
            let routine = concat!("shmem_ctx_", $rest, $nbi);
            super::put_signal(
                (routine, ctx as usize),
                (dest, source, nelems),
                (sig, signal, op),
                pe,
                $is_nbi,
            )
        }
    };
}

put_signals!(
    float, "float_put_signal": f32, double, "double_put_signal": f64,
    longdouble, "longdouble_put_signal": LongDouble, char, "char_put_signal": i8,
    schar, "schar_put_signal": i8, short, "short_put_signal": i16,
    int, "int_put_signal": i32, long, "long_put_signal": i64,
    longlong, "longlong_put_signal": i64, uchar, "uchar_put_signal": u8,
    ushort, "ushort_put_signal": u16, uint, "uint_put_signal": u32,
    ulong, "ulong_put_signal": u64, ulonglong, "ulonglong_put_signal": u64,
    int8, "int8_put_signal": i8, int16, "int16_put_signal": i16,
    int32, "int32_put_signal": i32, int64, "int64_put_signal": i64,
    uint8, "uint8_put_signal": u8, uint16, "uint16_put_signal": u16,
    uint32, "uint32_put_signal": u32, uint64, "uint64_put_signal": u64,
    size, "size_put_signal": usize, ptrdiff, "ptrdiff_put_signal": isize,
    bits8, "put8_signal": u8, bits16, "put16_signal": u16,
    bits32, "put32_signal": u32, bits64, "put64_signal": u64,
    bits128, "put128_signal": LongDouble, mem, "putmem_signal": u8,
);

/// `shmem_signal_fetch`: this PE's signal word, read atomically.
#[no_mangle]
pub extern "C" fn shmem_signal_fetch(sig: *const u64) -> u64 {
    let s = shmem("shmem_signal_fetch");
    ok(
        "shmem_signal_fetch",
        s.view(sig, 1).and_then(|v| s.dp().signal_fetch(v)),
    )
}

/// `shmem_signal_wait_until`: blocks until `*sig cmp value`; returns the signal then.
#[no_mangle]
pub extern "C" fn shmem_signal_wait_until(sig: *mut u64, code: c_int, value: u64) -> u64 {
    let s = shmem("shmem_signal_wait_until");
    let seen = s
        .view(sig, 1)
        .and_then(|v| s.block(s.dp().signal_wait_until(v, cmp(code)?, value)));
    ok("shmem_signal_wait_until", seen)
}

/// Updates the signal word `sig` on `pe` by `op`.
fn signal(routine: &'static str, sig: *mut u64, value: u64, op: SignalOp, pe: c_int) {
    let s = shmem(routine);
    let done = s
        .view(sig, 1)
        .and_then(|v| s.block(s.dp().signal_op(v, value, op, s.pe_of(pe)?)));
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
