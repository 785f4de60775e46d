//! The rest of the C API: `shmemx.h`'s OpenSHMEM 1.6 routines (`shmemx_TYPENAME_ibput` and
//! `_ibget`, `shmemx_pe_quiet`). (The deprecated
//! cache routines, which have nothing to do on cache-coherent machines, are inline in
//! `shmem.h`.)
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::c_int;

use bytemuck::Pod;
use ferroshmem_runtime::{Error, Result};

use crate::raw;
use crate::state::{ok, shmem};
use crate::types::LongDouble;

/// The element offset of block `i` at `stride` elements apart.
fn block(i: usize, stride: isize) -> Result<usize> {
    usize::try_from(stride)
        .ok()
        .and_then(|s| s.checked_mul(i))
        .ok_or_else(|| {
            Error::InvalidArgument(format!("a negative or overflowing block stride ({stride})"))
        })
}

/// `ibput` (`put`) or `ibget`: `nblocks` blocks of `bsize` elements, block `i` from
/// `source + i·sst` to `dest + i·dst`.
fn blocked<T: Pod>(
    routine: &'static str,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    (bsize, nblocks): (usize, usize),
    pe: c_int,
    put: bool,
) {
    let s = shmem(routine);
    let done = (0..nblocks).try_for_each(|i| {
        let (to, from) = (
            dest.wrapping_add(block(i, dst)?),
            source.wrapping_add(block(i, sst)?),
        );
        let pe = s.pe_of(pe)?;
        match put {
            true => s.block(
                s.dp()
                    .put(s.view(to, bsize)?, raw::local(from, bsize, "source")?, pe),
            ),
            false => s.block(s.dp().get(
                raw::local_mut(to, bsize, "dest")?,
                s.view(from, bsize)?,
                pe,
            )),
        }
    });
    ok(routine, done)
}

/// `shmemx_TYPENAME_ibput` and `_ibget` of each `name: type`.
macro_rules! blocked_strided {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmemx_", stringify!($name), "_ibput` and `_ibget`.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmemx_", stringify!($name), "_ibput`.")]
            #[export_name = concat!("shmemx_", stringify!($name), "_ibput")]
            pub extern "C" fn ibput(dest: *mut $t, source: *const $t, dst: isize, sst: isize, bsize: usize, nblocks: usize, pe: c_int) {
                blocked(concat!("shmemx_", stringify!($name), "_ibput"), (dest, source), (dst, sst), (bsize, nblocks), pe, true)
            }

            #[doc = concat!("`shmemx_", stringify!($name), "_ibget`.")]
            #[export_name = concat!("shmemx_", stringify!($name), "_ibget")]
            pub extern "C" fn ibget(dest: *mut $t, source: *const $t, dst: isize, sst: isize, bsize: usize, nblocks: usize, pe: c_int) {
                blocked(concat!("shmemx_", stringify!($name), "_ibget"), (dest, source.cast_mut()), (dst, sst), (bsize, nblocks), pe, false)
            }
        }
    )*};
}

/// The blocked strided routines by type.
pub mod ib {
    use super::*;

    blocked_strided!(
        float: f32, double: f64, longdouble: LongDouble, char: i8, schar: i8, short: i16, int: i32,
        long: i64, longlong: i64, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64,
        int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32,
        uint64: u64, size: usize, ptrdiff: isize,
    );
}

/// `shmemx_pe_quiet`: completes this PE's operations to the given PEs (here: all of them,
/// which OpenSHMEM 1.6's `shmem_pe_quiet` allows).
#[no_mangle]
pub extern "C" fn shmemx_pe_quiet(target_pes: *const c_int, npes: usize) {
    let s = shmem("shmemx_pe_quiet");
    let done = raw::local(target_pes, npes, "target_pes").and_then(|pes| {
        pes.iter().try_for_each(|&pe| s.pe_of(pe).map(drop))?;
        s.block(s.dp().quiet())
    });
    ok("shmemx_pe_quiet", done)
}
