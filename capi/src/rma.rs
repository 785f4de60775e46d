//! Remote memory access: `put`, `get`, `p`, `g`, `iput`, `iget`, `put_nbi`, `get_nbi` for
//! every type of OpenSHMEM's RMA type table (`shmem_int_put` …), by size (`shmem_put32` …)
//! and by bytes (`shmem_putmem` …).
//!
//! The typed routines are generated, one module per type; each calls the generic body here,
//! which the compiler inlines, so a put to a PE of this node is its copy alone.
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use ferroshmem_runtime::{Error, Result};

use crate::raw;
use crate::state::{ok, shmem, Shmem, DEFAULT_CONTEXT};
use crate::types::LongDouble;

/// A C `ptrdiff_t` stride as the runtime's: at least 0.
fn stride(stride: isize, what: &str) -> Result<usize> {
    usize::try_from(stride)
        .map_err(|_| Error::InvalidArgument(format!("a negative {what} stride ({stride})")))
}

/// The operations of the context of C handle `ctx` (`None`: the default context's).
type Ctx = Option<std::sync::Arc<ferroshmem_runtime::Context>>;

/// `put`: `nelems` elements from the local `source` into symmetric `dest` on `pe`.
#[inline(always)]
pub(crate) fn put<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
) {
    if !put_at_once(shmem(routine), ctx, (dest, source), nelems, pe) {
        put_checked(routine, ctx, (dest, source), nelems, pe, Finish::Now)
    }
}

/// When a put that took the checked path completes.
#[derive(Debug, Clone, Copy)]
enum Finish {
    /// Before the routine returns (`put`, `p`): the source is free again, the bytes landed
    /// on this node or on their way to another (landed at `quiet`).
    Now,
    /// At the context's `quiet` (`put_nbi`).
    AtQuiet,
}

/// The fast path of every put on the default context: `true` once `nelems` elements of
/// `source` are in `dest` on a mapped `pe` (a put there completes at once, `_nbi` or not);
/// `false`, with nothing written, where the checked path must run.
#[inline(always)]
fn put_at_once<T: Pod>(
    s: &Shmem,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
) -> bool {
    if ctx != DEFAULT_CONTEXT {
        return false;
    }
    match (
        raw::try_local(source, nelems),
        s.try_view(dest, nelems),
        s.try_pe(pe),
    ) {
        (Some(from), Some(to), Some(p)) => s.dp().put_mapped(to, from, p),
        _ => false,
    }
}

/// `put`, `p` or `put_nbi` on a context, to another node or with an argument to refuse (checked
/// and reported): out of line, as [`get_checked`].
#[cold]
#[inline(never)]
fn put_checked<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
    finish: Finish,
) {
    let s = shmem(routine);
    let done = raw::local(source, nelems, "source").and_then(|source| {
        let (dest, pe) = (s.view(dest, nelems)?, s.pe_of(pe)?);
        match (s.context(ctx)?, finish) {
            (None, Finish::Now) => s.block(s.dp().put(dest, source, pe)),
            (None, Finish::AtQuiet) => s.dp().put_nbi(dest, source, pe),
            (Some(c), Finish::Now) => s.block(c.put(dest, source, pe)),
            (Some(c), Finish::AtQuiet) => c.put_nbi(dest, source, pe),
        }
    });
    ok(routine, done)
}

/// `put_nbi`: as `put`, complete at the context's `quiet`.
#[inline(always)]
pub(crate) fn put_nbi<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
) {
    if !put_at_once(shmem(routine), ctx, (dest, source), nelems, pe) {
        put_checked(routine, ctx, (dest, source), nelems, pe, Finish::AtQuiet)
    }
}

/// `get`: `nelems` elements of symmetric `source` on `pe` into the local `dest`.
#[inline(always)]
pub(crate) fn get<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
) {
    let s = shmem(routine);
    if ctx == DEFAULT_CONTEXT {
        if let (Some(to), Some(at), Some(p)) = (
            raw::try_local_mut(dest, nelems),
            s.offset_of(source),
            s.try_pe(pe),
        ) {
            if s.dp().get_mapped_at(bytemuck::cast_slice_mut(to), at, p) {
                return;
            }
        }
    }
    get_checked(routine, ctx, (dest, source), nelems, pe)
}

/// `get` on a context, to another node or with an argument to refuse (checked and
/// reported): out of line, so that the fast path's frame stays small.
#[cold]
#[inline(never)]
fn get_checked<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
) {
    let s = shmem(routine);
    let done = raw::local_mut(dest, nelems, "dest").and_then(|dest| {
        let (source, pe) = (s.view(source, nelems)?, s.pe_of(pe)?);
        match s.context(ctx)? {
            None => s.block(s.dp().get(dest, source, pe)),
            Some(c) => s.block(c.get(dest, source, pe)),
        }
    });
    ok(routine, done)
}

/// `get_nbi`: as `get`, complete at the context's `quiet`; a destination outside the heap
/// is filled before the call returns (OpenSHMEM lets a non-blocking call complete early).
#[inline(always)]
pub(crate) fn get_nbi<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    pe: c_int,
) {
    let s = shmem(routine);
    if !s.in_heap(dest.cast()) {
        return get(routine, ctx, (dest, source), nelems, pe);
    }
    let done = raw::local_mut(dest, nelems, "dest").and_then(|_| {
        let (dest, source, pe) = (s.view(dest, nelems)?, s.view(source, nelems)?, s.pe_of(pe)?);
        match s.context(ctx)? {
            None => s.dp().get_nbi(dest, source, pe),
            Some(c) => c.get_nbi(dest, source, pe),
        }
    });
    ok(routine, done)
}

/// `p`: one element into symmetric `dest` on `pe`.
#[inline(always)]
pub(crate) fn p<T: Pod>(routine: &'static str, ctx: usize, dest: *mut T, value: T, pe: c_int) {
    if !put_at_once(shmem(routine), ctx, (dest, &value), 1, pe) {
        put_checked(routine, ctx, (dest, &value), 1, pe, Finish::Now)
    }
}

/// `g`: one element of symmetric `source` on `pe`.
#[inline(always)]
pub(crate) fn g<T: Pod + Unpin>(
    routine: &'static str,
    ctx: usize,
    source: *const T,
    pe: c_int,
) -> T {
    let s = shmem(routine);
    if ctx == DEFAULT_CONTEXT {
        if let (Some(from), Some(p)) = (s.try_view(source, 1), s.try_pe(pe)) {
            let landing = s.dp().g(from, p);
            return match landing.succeeded_at_once() {
                Some(value) => value,
                None => ok(routine, s.block(landing)),
            };
        }
    }
    let value = s.view(source, 1).and_then(|source| {
        let pe = s.pe_of(pe)?;
        match s.context(ctx)? {
            None => s.block(s.dp().g(source, pe)),
            Some(c) => s.block(c.g(source, pe)),
        }
    });
    ok(routine, value)
}

/// Completes a context's operations before a strided transfer on it, which the runtime
/// runs on the data plane: so it is ordered after them, as the context's fence would.
fn strided_on(s: &crate::state::Shmem, ctx: usize) -> Result<()> {
    let context: Ctx = s.context(ctx)?;
    match context {
        None => Ok(()),
        Some(c) => s.block(c.quiet()),
    }
}

/// `iput`: `nelems` elements, every `sst`-th of the local `source`, into every `dst`-th of
/// symmetric `dest` on `pe`.
#[inline(always)]
pub(crate) fn iput<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    (nelems, pe): (usize, c_int),
) {
    let s = shmem(routine);
    let done = (|| {
        let (dst, sst) = (stride(dst, "dest")?, stride(sst, "source")?);
        let source = raw::local(source, extent(sst, nelems), "source")?;
        let dest = s.view(dest, extent(dst, nelems))?;
        let pe = s.pe_of(pe)?;
        strided_on(s, ctx)?;
        s.block(s.dp().iput(dest, source, dst, sst, nelems, pe))
    })();
    ok(routine, done)
}

/// `iget`: `nelems` elements, every `sst`-th of symmetric `source` on `pe`, into every
/// `dst`-th of the local `dest`.
#[inline(always)]
pub(crate) fn iget<T: Pod>(
    routine: &'static str,
    ctx: usize,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    (nelems, pe): (usize, c_int),
) {
    let s = shmem(routine);
    let done = (|| {
        let (dst, sst) = (stride(dst, "dest")?, stride(sst, "source")?);
        let dest = raw::local_mut(dest, extent(dst, nelems), "dest")?;
        let source = s.view(source, extent(sst, nelems))?;
        let pe = s.pe_of(pe)?;
        strided_on(s, ctx)?;
        s.block(s.dp().iget(dest, source, dst, sst, nelems, pe))
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

/// One RMA routine in its plain and `shmem_ctx_` forms: `$plain` and `$ctx` are the two
/// C names, `$body` the generic body, called with the context's handle.
macro_rules! with_ctx {
    ($fn:ident, $ctx_fn:ident, $plain:expr, $ctx:expr, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?, $body:ident($($call:tt)*)) => {
        #[doc = concat!("`", $plain, "`.")]
        #[export_name = $plain]
        pub extern "C" fn $fn($($arg: $ty),*) $(-> $ret)? {
            super::$body($plain, DEFAULT_CONTEXT, $($call)*)
        }

        #[doc = concat!("`", $ctx, "`.")]
        #[export_name = $ctx]
        pub extern "C" fn $ctx_fn(ctx: *mut c_void, $($arg: $ty),*) $(-> $ret)? {
            super::$body($ctx, ctx as usize, $($call)*)
        }
    };
}

/// The RMA routines of one element type, named `shmem_$prefix…` and `shmem_ctx_$prefix…`
/// (`$prefix` "int_" for the typed ones, "" for the sized and `mem` ones, which name
/// `$suffix` after the verb: "32", "mem").
macro_rules! rma_routines {
    ($module:ident, $t:ty, $prefix:expr, $suffix:expr, strided: $strided:tt) => {
        #[doc = concat!("`shmem_", $prefix, "put", $suffix, "` and the rest of its RMA routines.")]
        pub mod $module {
            use super::*;

            with_ctx!(put, ctx_put, concat!("shmem_", $prefix, "put", $suffix), concat!("shmem_ctx_", $prefix, "put", $suffix),
                (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int), put((dest, source), nelems, pe));
            with_ctx!(put_nbi, ctx_put_nbi, concat!("shmem_", $prefix, "put", $suffix, "_nbi"), concat!("shmem_ctx_", $prefix, "put", $suffix, "_nbi"),
                (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int), put_nbi((dest, source), nelems, pe));
            with_ctx!(get, ctx_get, concat!("shmem_", $prefix, "get", $suffix), concat!("shmem_ctx_", $prefix, "get", $suffix),
                (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int), get((dest, source), nelems, pe));
            with_ctx!(get_nbi, ctx_get_nbi, concat!("shmem_", $prefix, "get", $suffix, "_nbi"), concat!("shmem_ctx_", $prefix, "get", $suffix, "_nbi"),
                (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int), get_nbi((dest, source), nelems, pe));
            strided_routines!($strided, $t, $prefix, $suffix);
        }
    };
}

/// `iput` and `iget` of one element type (none for `mem`).
macro_rules! strided_routines {
    (false, $t:ty, $prefix:expr, $suffix:expr) => {};
    (true, $t:ty, $prefix:expr, $suffix:expr) => {
        with_ctx!(iput, ctx_iput, concat!("shmem_", $prefix, "iput", $suffix), concat!("shmem_ctx_", $prefix, "iput", $suffix),
            (dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int), iput((dest, source), (dst, sst), (nelems, pe)));
        with_ctx!(iget, ctx_iget, concat!("shmem_", $prefix, "iget", $suffix), concat!("shmem_ctx_", $prefix, "iget", $suffix),
            (dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int), iget((dest, source), (dst, sst), (nelems, pe)));
    };
}

/// The typed RMA routines of each `name: type` of the table.
macro_rules! typed_rma {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        rma_routines!($name, $t, concat!(stringify!($name), "_"), "", strided: true);
    )*};
}

/// `p` and `g` of each `name: type` (all but `long double`, which C passes by value in a
/// way Rust cannot take: the header gives those two as inline functions over `put`/`get`).
macro_rules! typed_p_g {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_p` and `_g`.")]
        pub mod $name {
            use super::*;

            with_ctx!(p, ctx_p, concat!("shmem_", stringify!($name), "_p"), concat!("shmem_ctx_", stringify!($name), "_p"),
                (dest: *mut $t, value: $t, pe: c_int), p(dest, value, pe));
            with_ctx!(g, ctx_g, concat!("shmem_", stringify!($name), "_g"), concat!("shmem_ctx_", stringify!($name), "_g"),
                (source: *const $t, pe: c_int) -> $t, g(source, pe));
        }
    )*};
}

typed_rma!(
    float: f32, double: f64, longdouble: LongDouble, char: i8, schar: i8, short: i16, int: i32,
    long: i64, longlong: i64, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64,
    int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32,
    uint64: u64, size: usize, ptrdiff: isize,
);

rma_routines!(bits8, u8, "", "8", strided: true);
rma_routines!(bits16, u16, "", "16", strided: true);
rma_routines!(bits32, u32, "", "32", strided: true);
rma_routines!(bits64, u64, "", "64", strided: true);
rma_routines!(bits128, LongDouble, "", "128", strided: true);
rma_routines!(mem, u8, "", "mem", strided: false);

/// `p` and `g` by type.
pub mod single {
    use super::*;

    /// The bodies, for the generated modules (which call `super::` of theirs).
    mod bodies {
        pub(crate) use super::super::{g, p};
    }
    use bodies::{g, p};

    typed_p_g!(
        float: f32, double: f64, char: i8, schar: i8, short: i16, int: i32, long: i64,
        longlong: i64, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8,
        int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64,
        size: usize, ptrdiff: isize,
    );
}
