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

/// The elements `nblocks` blocks of `bsize` reach at `stride` apart (the runtime checks the
/// strides against the blocks).
fn reach(stride: isize, (bsize, nblocks): (usize, usize)) -> Result<(usize, usize)> {
    let stride = usize::try_from(stride)
        .map_err(|_| Error::InvalidArgument(format!("a negative block stride ({stride})")))?;
    let extent = match nblocks {
        0 => Some(0),
        n => (n - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(bsize)),
    };
    extent
        .map(|e| (stride, e))
        .ok_or_else(|| Error::InvalidArgument(format!("block stride {stride} overflows")))
}

/// `ibput` (`put`) or `ibget`: `nblocks` blocks of `bsize` elements, block `i` from
/// `source + i·sst` to `dest + i·dst` ([`ferroshmem_runtime::DataPlane::ibput`]).
fn blocked<T: Pod>(
    routine: &'static str,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    blocks: (usize, usize),
    pe: c_int,
    put: bool,
) {
    let s = shmem(routine);
    let done = (|| {
        let ((dst, dest_len), (sst, src_len)) = (reach(dst, blocks)?, reach(sst, blocks)?);
        let pe = s.pe_of(pe)?;
        match put {
            true => {
                let (to, from) = (
                    s.view(dest, dest_len)?,
                    raw::local(source, src_len, "source")?,
                );
                s.block(s.dp().ibput(to, from, (dst, sst), blocks, pe))
            }
            false => {
                let (to, from) = (
                    raw::local_mut(dest, dest_len, "dest")?,
                    s.view(source, src_len)?,
                );
                s.block(s.dp().ibget(to, from, (dst, sst), blocks, pe))
            }
        }
    })();
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
