//! Collectives on teams (`shmem_TYPENAME_broadcast`, `_collect`, `_fcollect`, `_alltoall`,
//! `_alltoalls`, their `mem` forms, `shmem_TYPENAME_OP_reduce`) and the deprecated
//! active-set forms (`shmem_broadcast32` …, `shmem_barrier`, `shmem_TYPENAME_OP_to_all`),
//! whose `pSync` and `pWrk` arrays ferroshmem does not need (it keeps its own).
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use ferroshmem_runtime::{
    Collective, Complex32, Complex64, Error, ReduceOp, Reducible, Result, SymSlice, Team,
};

use crate::active_set::{self, ActiveSet};
use crate::state::{ok, shmem, Shmem};
use crate::teams::returned;

/// A C count or root as an index.
fn index(value: c_int, what: &str) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| Error::InvalidArgument(format!("a negative {what} ({value})")))
}

/// `nelems` elements of `source` into `dest` on every member, from member `root`.
fn broadcast<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    root: c_int,
) -> Result<()> {
    let (dest, source, root) = broadcast_arguments(s, team, (dest, source), nelems, root)?;
    s.block(team.broadcast(dest, source, root))
}

/// A broadcast's views and root, refused on `team` where they fail this PE's checks.
fn broadcast_arguments<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    root: c_int,
) -> Result<(SymSlice<'static, T>, SymSlice<'static, T>, usize)> {
    let checks = (|| {
        Ok((
            s.view(dest, nelems)?,
            s.view(source, nelems)?,
            index(root, "PE_root")?,
        ))
    })();
    team.refuse_unless_ok(Collective::Broadcast, checks)
}

/// Every member's `nelems` elements of `source`, in member order, into `dest`.
fn fcollect<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    nelems: usize,
) -> Result<()> {
    let checks = (|| {
        let total = elements(nelems, team.n_pes())?;
        Ok((s.view(dest, total)?, s.view(source, nelems)?))
    })();
    let (dest, source) = team.refuse_unless_ok(Collective::Fcollect, checks)?;
    s.block(team.fcollect(dest, source))
}

/// Every member's `nelems` elements (each its own count), in member order, into `dest`.
fn collect<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    nelems: usize,
) -> Result<()> {
    // The total is learnt in the call: `dest` reaches to the end of the heap, or to `source`
    // where that follows it (a total that would run into it is then too long for `dest`).
    // A `dest` that is not symmetric gets no room: only a call collecting nothing may pass
    // one, and any other fails as not symmetric rather than too short.
    let whole = s.view_to_end(dest);
    let checks = (|| {
        let source = s.view(source, nelems)?;
        let room = match whole {
            Some(whole) => {
                let (at, from) = (whole.span(s.heap())?.offset, source.span(s.heap())?.offset);
                match from >= at && !source.is_empty() {
                    true => ((from - at) / std::mem::size_of::<T>().max(1)).min(whole.len()),
                    false => whole.len(),
                }
            }
            None => 0,
        };
        Ok((s.view(dest, room)?, source))
    })();
    let (dest, source) = team.refuse_unless_ok(Collective::Collect, checks)?;
    let collected = s.block(team.collect(dest, source)).map(drop);
    match collected {
        Err(Error::OutOfBounds { .. }) if whole.is_none() => Err(Error::NotSymmetric),
        other => other,
    }
}

/// Block `j` of `nelems` elements of each member's `source` into block `i` of member `j`'s
/// `dest`, where `i` is the sender.
fn alltoall<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    nelems: usize,
) -> Result<()> {
    let checks = (|| {
        let total = elements(nelems, team.n_pes())?;
        Ok((s.view(dest, total)?, s.view(source, total)?))
    })();
    let (dest, source) = team.refuse_unless_ok(Collective::Alltoall, checks)?;
    s.block(team.alltoall(dest, source, nelems))
}

/// As `alltoall`, the elements `dst` and `sst` apart.
fn alltoalls<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    (dst, sst): (isize, isize),
    nelems: usize,
) -> Result<()> {
    let checks = (|| {
        let (dst, sst) = (stride(dst, "dest")?, stride(sst, "source")?);
        let total = elements(nelems, team.n_pes())?;
        let extent = |stride: usize| match total {
            0 => 0,
            t => stride.saturating_mul(t - 1).saturating_add(1),
        };
        let views = (s.view(dest, extent(dst))?, s.view(source, extent(sst))?);
        Ok((views, (dst, sst)))
    })();
    let ((dest, source), (dst, sst)) = team.refuse_unless_ok(Collective::Alltoalls, checks)?;
    s.block(team.alltoalls(dest, source, dst, sst, nelems))
}

/// A C stride (of `what`) as an element count.
fn stride(v: isize, what: &str) -> Result<usize> {
    usize::try_from(v)
        .map_err(|_| Error::InvalidArgument(format!("a negative {what} stride ({v})")))
}

/// The elements of `nelems` per member of a team of `n_pes`.
fn elements(nelems: usize, n_pes: usize) -> Result<usize> {
    nelems
        .checked_mul(n_pes)
        .ok_or_else(|| Error::InvalidArgument("nelems overflows".into()))
}

/// `broadcast` as the deprecated routine has it: the root's `dest` keeps its contents.
fn broadcast_keeping_root<T: Pod>(
    s: &Shmem,
    team: &Team,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    root: c_int,
) -> Result<()> {
    let (dest, source, root) = broadcast_arguments(s, team, (dest, source), nelems, root)?;
    s.block(team.broadcast_to_others(dest, source, root))
}

/// `op` over every member's `nreduce` elements of `source`, into `dest`.
fn reduce<T: Reducible>(
    s: &Shmem,
    team: &Team,
    op: ReduceOp,
    (dest, source): (*mut T, *const T),
    nreduce: usize,
) -> Result<()> {
    let checks = (|| Ok((s.view(dest, nreduce)?, s.view(source, nreduce)?)))();
    let (dest, source) = team.refuse_unless_ok(Collective::Reduce, checks)?;
    s.block(team.reduce(op, dest, source))
}

/// The sum over the members before this one (and this one, `inclusive`) of `nelems`
/// elements of `source`, into `dest` (OpenSHMEM 1.6's scans).
fn sum_scan<T: Reducible>(
    s: &Shmem,
    team: &Team,
    inclusive: bool,
    (dest, source): (*mut T, *const T),
    nelems: usize,
) -> Result<()> {
    let checks = (|| Ok((s.view(dest, nelems)?, s.view(source, nelems)?)))();
    let (dest, source) = team.refuse_unless_ok(Collective::Scan, checks)?;
    match inclusive {
        true => s.block(team.sum_inscan(dest, source)),
        false => s.block(team.sum_exscan(dest, source)),
    }
}

/// Runs a team collective for C: the team of `handle`, then `run`; 0 or -1.
#[inline]
fn on_team(
    routine: &'static str,
    handle: *mut c_void,
    run: impl FnOnce(&Shmem, &Team) -> Result<()>,
) -> c_int {
    let state = shmem(routine);
    returned(
        routine,
        state.team(handle).and_then(|team| run(state, &team)),
    )
}

/// Runs a deprecated active-set collective for C: on the world team (`on_team`) when the
/// set is the whole job, else `on_set` (see [`crate::active_set`]); a failure ends the job
/// (these routines return nothing).
#[inline]
fn on_active_set(
    routine: &'static str,
    triple: (c_int, c_int, c_int),
    on_team: impl FnOnce(&Shmem, &Team) -> Result<()>,
    on_set: impl FnOnce(&Shmem, &ActiveSet) -> Result<()>,
) {
    let state = shmem(routine);
    let n = state.pe().n_pes();
    // The whole job (the common case) is told apart without building the member list.
    let done = match triple {
        (0, 0, size) if usize::try_from(size) == Ok(n) => on_team(state, state.world()),
        _ => ActiveSet::new(triple, state.me(), n).and_then(|set| match set.is_whole_job(n) {
            true => on_team(state, state.world()),
            false => on_set(state, &set),
        }),
    };
    ok(routine, done)
}

/// The typed team collectives of each `name: type`.
macro_rules! team_collectives {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_*` team collectives.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_broadcast`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_broadcast")]
            pub extern "C" fn broadcast(team: *mut c_void, dest: *mut $t, source: *const $t, nelems: usize, root: c_int) -> c_int {
                on_team(concat!("shmem_", stringify!($name), "_broadcast"), team, |s, t| {
                    super::broadcast(s, t, (dest, source), nelems, root)
                })
            }

            #[doc = concat!("`shmem_", stringify!($name), "_collect`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_collect")]
            pub extern "C" fn collect(team: *mut c_void, dest: *mut $t, source: *const $t, nelems: usize) -> c_int {
                on_team(concat!("shmem_", stringify!($name), "_collect"), team, |s, t| super::collect(s, t, (dest, source), nelems))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_fcollect`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_fcollect")]
            pub extern "C" fn fcollect(team: *mut c_void, dest: *mut $t, source: *const $t, nelems: usize) -> c_int {
                on_team(concat!("shmem_", stringify!($name), "_fcollect"), team, |s, t| super::fcollect(s, t, (dest, source), nelems))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_alltoall`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_alltoall")]
            pub extern "C" fn alltoall(team: *mut c_void, dest: *mut $t, source: *const $t, nelems: usize) -> c_int {
                on_team(concat!("shmem_", stringify!($name), "_alltoall"), team, |s, t| super::alltoall(s, t, (dest, source), nelems))
            }

            #[doc = concat!("`shmem_", stringify!($name), "_alltoalls`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_alltoalls")]
            pub extern "C" fn alltoalls(team: *mut c_void, dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize) -> c_int {
                on_team(concat!("shmem_", stringify!($name), "_alltoalls"), team, |s, t| super::alltoalls(s, t, (dest, source), (dst, sst), nelems))
            }
        }
    )*};
}

/// The team reductions `shmem_TYPENAME_OP_reduce` of one operator over each `name: type`.
macro_rules! team_reductions {
    ($module:ident, $op:ident => $($name:ident: $t:ty),* $(,)?) => {
        #[doc = concat!("`shmem_TYPENAME_", stringify!($module), "_reduce` team reductions.")]
        pub mod $module {
            use super::*;
            $(
                #[doc = concat!("`shmem_", stringify!($name), "_", stringify!($module), "_reduce`.")]
                #[export_name = concat!("shmem_", stringify!($name), "_", stringify!($module), "_reduce")]
                pub extern "C" fn $name(team: *mut c_void, dest: *mut $t, source: *const $t, nreduce: usize) -> c_int {
                    on_team(concat!("shmem_", stringify!($name), "_", stringify!($module), "_reduce"), team, |s, t| {
                        super::reduce(s, t, ReduceOp::$op, (dest, source), nreduce)
                    })
                }
            )*
        }
    };
}

/// OpenSHMEM 1.6's `shmem_TYPENAME_sum_inscan` or `_exscan` (`inclusive`) over each `name:
/// type`, as `shmemx_` routines.
macro_rules! team_scans {
    ($module:ident, $inclusive:expr => $($name:ident: $t:ty),* $(,)?) => {
        #[doc = concat!("`shmemx_TYPENAME_", stringify!($module), "` team scans.")]
        pub mod $module {
            use super::*;
            $(
                #[doc = concat!("`shmemx_", stringify!($name), "_", stringify!($module), "`.")]
                #[export_name = concat!("shmemx_", stringify!($name), "_", stringify!($module))]
                pub extern "C" fn $name(team: *mut c_void, dest: *mut $t, source: *const $t, nelems: usize) -> c_int {
                    on_team(concat!("shmemx_", stringify!($name), "_", stringify!($module)), team, |s, t| {
                        super::sum_scan(s, t, $inclusive, (dest, source), nelems)
                    })
                }
            )*
        }
    };
}

/// The deprecated `shmem_TYPENAME_OP_to_all` of one operator over each `name: type`.
macro_rules! active_set_reductions {
    ($module:ident, $c_op:ident, $op:ident => $($name:ident: $t:ty),* $(,)?) => {
        #[doc = concat!("`shmem_TYPENAME_", stringify!($c_op), "_to_all` (deprecated).")]
        pub mod $module {
            use super::*;
            $(
                #[doc = concat!("`shmem_", stringify!($name), "_", stringify!($c_op), "_to_all`.")]
                #[export_name = concat!("shmem_", stringify!($name), "_", stringify!($c_op), "_to_all")]
                pub extern "C" fn $name(
                    dest: *mut $t, source: *const $t, nreduce: c_int,
                    start: c_int, log_stride: c_int, size: c_int, _work: *mut $t, sync: *mut i64,
                ) {
                    on_active_set(
                        concat!("shmem_", stringify!($name), "_", stringify!($c_op), "_to_all"),
                        (start, log_stride, size),
                        |s, t| super::reduce(s, t, ReduceOp::$op, (dest, source), index(nreduce, "nreduce")?),
                        |s, set| active_set::reduce(s, set, ReduceOp::$op, (dest, source), index(nreduce, "nreduce")?, sync),
                    )
                }
            )*
        }
    };
}

/// The deprecated sized active-set collectives (`shmem_broadcast32` …) of one width.
macro_rules! active_set_collectives {
    ($($bits:literal => $module:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_*", stringify!($bits), "` active-set collectives (deprecated).")]
        pub mod $module {
            use super::*;

            #[doc = concat!("`shmem_broadcast", stringify!($bits), "`: root is a number in the active set.")]
            #[export_name = concat!("shmem_broadcast", stringify!($bits))]
            pub extern "C" fn broadcast(dest: *mut $t, source: *const $t, nelems: usize, root: c_int, start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
                on_active_set(
                    concat!("shmem_broadcast", stringify!($bits)),
                    (start, log_stride, size),
                    |s, t| super::broadcast_keeping_root(s, t, (dest, source), nelems, root),
                    |s, set| active_set::broadcast(s, set, (dest, source), nelems, (index(root, "PE_root")?, sync)),
                )
            }

            #[doc = concat!("`shmem_collect", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_collect", stringify!($bits))]
            pub extern "C" fn collect(dest: *mut $t, source: *const $t, nelems: usize, start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
                on_active_set(
                    concat!("shmem_collect", stringify!($bits)),
                    (start, log_stride, size),
                    |s, t| super::collect(s, t, (dest, source), nelems),
                    |s, set| active_set::collect(s, set, (dest, source), nelems, sync),
                )
            }

            #[doc = concat!("`shmem_fcollect", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_fcollect", stringify!($bits))]
            pub extern "C" fn fcollect(dest: *mut $t, source: *const $t, nelems: usize, start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
                on_active_set(
                    concat!("shmem_fcollect", stringify!($bits)),
                    (start, log_stride, size),
                    |s, t| super::fcollect(s, t, (dest, source), nelems),
                    |s, set| active_set::fcollect(s, set, (dest, source), nelems, sync),
                )
            }

            #[doc = concat!("`shmem_alltoall", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_alltoall", stringify!($bits))]
            pub extern "C" fn alltoall(dest: *mut $t, source: *const $t, nelems: usize, start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
                on_active_set(
                    concat!("shmem_alltoall", stringify!($bits)),
                    (start, log_stride, size),
                    |s, t| super::alltoall(s, t, (dest, source), nelems),
                    |s, set| active_set::alltoalls(s, set, (dest, source), (1, 1, nelems), sync),
                )
            }

            #[doc = concat!("`shmem_alltoalls", stringify!($bits), "`.")]
            #[export_name = concat!("shmem_alltoalls", stringify!($bits))]
            pub extern "C" fn alltoalls(dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
                on_active_set(
                    concat!("shmem_alltoalls", stringify!($bits)),
                    (start, log_stride, size),
                    |s, t| super::alltoalls(s, t, (dest, source), (dst, sst), nelems),
                    |s, set| active_set::alltoalls(s, set, (dest, source), (stride(dst, "dest")?, stride(sst, "source")?, nelems), sync),
                )
            }
        }
    )*};
}

team_collectives!(
    float: f32, double: f64, char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64,
    uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16,
    int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize,
    ptrdiff: isize, longdouble: crate::types::LongDouble,
);

/// The `mem` team collectives (bytes).
pub mod mem {
    use super::*;

    /// `shmem_broadcastmem`.
    #[no_mangle]
    pub extern "C" fn shmem_broadcastmem(
        team: *mut c_void,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
        root: c_int,
    ) -> c_int {
        on_team("shmem_broadcastmem", team, |s, t| {
            broadcast(s, t, (dest, source), nelems, root)
        })
    }

    /// `shmem_collectmem`.
    #[no_mangle]
    pub extern "C" fn shmem_collectmem(
        team: *mut c_void,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
    ) -> c_int {
        on_team("shmem_collectmem", team, |s, t| {
            collect(s, t, (dest, source), nelems)
        })
    }

    /// `shmem_fcollectmem`.
    #[no_mangle]
    pub extern "C" fn shmem_fcollectmem(
        team: *mut c_void,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
    ) -> c_int {
        on_team("shmem_fcollectmem", team, |s, t| {
            fcollect(s, t, (dest, source), nelems)
        })
    }

    /// `shmem_alltoallmem`.
    #[no_mangle]
    pub extern "C" fn shmem_alltoallmem(
        team: *mut c_void,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
    ) -> c_int {
        on_team("shmem_alltoallmem", team, |s, t| {
            alltoall(s, t, (dest, source), nelems)
        })
    }

    /// `shmem_alltoallsmem`.
    #[no_mangle]
    pub extern "C" fn shmem_alltoallsmem(
        team: *mut c_void,
        dest: *mut u8,
        source: *const u8,
        dst: isize,
        sst: isize,
        nelems: usize,
    ) -> c_int {
        on_team("shmem_alltoallsmem", team, |s, t| {
            alltoalls(s, t, (dest, source), (dst, sst), nelems)
        })
    }

    /// `shmem_barrier` (deprecated): completes this PE's operations, then waits for the
    /// active set.
    #[no_mangle]
    pub extern "C" fn shmem_barrier(start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
        on_active_set(
            "shmem_barrier",
            (start, log_stride, size),
            |s, t| s.block(t.barrier()),
            |s, set| active_set::barrier(s, set, sync),
        )
    }

    /// `shmem_sync` (deprecated active-set form): waits for the active set's PEs (here
    /// completing this PE's operations too, as `shmem_barrier` does).
    #[no_mangle]
    pub extern "C" fn shmem_sync(start: c_int, log_stride: c_int, size: c_int, sync: *mut i64) {
        on_active_set(
            "shmem_sync",
            (start, log_stride, size),
            |s, t| s.block(t.sync()),
            |s, set| active_set::barrier(s, set, sync),
        )
    }
}

team_reductions!(and, And => uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize);
team_reductions!(or, Or => uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize);
team_reductions!(xor, Xor => uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize);
team_reductions!(max, Max => char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64);
team_reductions!(min, Min => char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64);
team_reductions!(sum, Sum => char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64, complexf: Complex32, complexd: Complex64);
team_reductions!(prod, Prod => char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64, complexf: Complex32, complexd: Complex64);
team_scans!(sum_inscan, true => char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64, complexf: Complex32, complexd: Complex64);
team_scans!(sum_exscan, false => char: i8, schar: i8, short: i16, int: i32, long: i64, longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: u64, ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64, complexf: Complex32, complexd: Complex64);

/// `long double` reductions: x86-64 only (its x87 arithmetic; see [`LongDouble`]).
#[cfg(target_arch = "x86_64")]
mod long_double {
    use super::*;
    use crate::types::LongDouble;

    team_reductions!(max, Max => longdouble: LongDouble);
    team_reductions!(min, Min => longdouble: LongDouble);
    team_reductions!(sum, Sum => longdouble: LongDouble);
    team_reductions!(prod, Prod => longdouble: LongDouble);
    team_scans!(sum_inscan, true => longdouble: LongDouble);
    team_scans!(sum_exscan, false => longdouble: LongDouble);
    active_set_reductions!(max_to_all, max, Max => longdouble: LongDouble);
    active_set_reductions!(min_to_all, min, Min => longdouble: LongDouble);
    active_set_reductions!(sum_to_all, sum, Sum => longdouble: LongDouble);
    active_set_reductions!(prod_to_all, prod, Prod => longdouble: LongDouble);
}

active_set_collectives!(32 => sized32: u32, 64 => sized64: u64);

active_set_reductions!(and_to_all, and, And => short: i16, int: i32, long: i64, longlong: i64);
active_set_reductions!(or_to_all, or, Or => short: i16, int: i32, long: i64, longlong: i64);
active_set_reductions!(xor_to_all, xor, Xor => short: i16, int: i32, long: i64, longlong: i64);
active_set_reductions!(max_to_all, max, Max => short: i16, int: i32, long: i64, longlong: i64, float: f32, double: f64);
active_set_reductions!(min_to_all, min, Min => short: i16, int: i32, long: i64, longlong: i64, float: f32, double: f64);
active_set_reductions!(sum_to_all, sum, Sum => short: i16, int: i32, long: i64, longlong: i64, float: f32, double: f64, complexf: Complex32, complexd: Complex64);
active_set_reductions!(prod_to_all, prod, Prod => short: i16, int: i32, long: i64, longlong: i64, float: f32, double: f64, complexf: Complex32, complexd: Complex64);
