//! Setup, query and ordering routines: `shmem_init` … `shmem_finalize`, `shmem_global_exit`,
//! the PE numbers, `shmem_info_*`, accessibility and `shmem_ptr`, thread levels,
//! `shmem_pcontrol`, and the whole-job `shmem_barrier_all`, `shmem_sync_all`, `shmem_quiet`,
//! `shmem_fence`, with the deprecated names (`start_pes`, `_my_pe`, `_num_pes`).
#![allow(unsafe_code)] // `#[no_mangle]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_char, c_int, c_void};

use ferroshmem_actors::ThreadLevel;
use ferroshmem_runtime::{Error, LIBRARY_NAME, SPEC_VERSION};

use crate::raw;
use crate::state::{self, fail, ok, shmem};

/// `SHMEM_MAX_NAME_LEN`: the bytes `shmem_info_get_name` may write, NUL included.
pub const MAX_NAME_LEN: usize = 256;

/// A C thread level (`SHMEM_THREAD_SINGLE` = 0 … `SHMEM_THREAD_MULTIPLE` = 3).
fn thread_level(level: c_int) -> Option<ThreadLevel> {
    match level {
        0 => Some(ThreadLevel::Single),
        1 => Some(ThreadLevel::Funneled),
        2 => Some(ThreadLevel::Serialized),
        3 => Some(ThreadLevel::Multiple),
        _ => None,
    }
}

/// The C code of a thread level.
fn thread_level_code(level: ThreadLevel) -> c_int {
    match level {
        ThreadLevel::Single => 0,
        ThreadLevel::Funneled => 1,
        ThreadLevel::Serialized => 2,
        ThreadLevel::Multiple => 3,
    }
}

/// `shmem_init`: joins the job this process was launched into.
#[no_mangle]
pub extern "C" fn shmem_init() {
    state::init("shmem_init", None);
}

/// `start_pes` (deprecated): `shmem_init`; the argument is ignored, as the spec says.
#[no_mangle]
pub extern "C" fn start_pes(_npes: c_int) {
    state::init("start_pes", None);
}

/// `shmem_init_thread`: joins the job, providing the level `requested` (all are supported); 0
/// on success.
#[no_mangle]
pub extern "C" fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    let Some(level) = thread_level(requested) else {
        fail(
            "shmem_init_thread",
            &Error::InvalidArgument(format!("{requested} is not a SHMEM_THREAD_* level")),
        )
    };
    let state = state::init("shmem_init_thread", Some(level));
    if !provided.is_null() {
        let code = thread_level_code(state.level());
        ok("shmem_init_thread", raw::store(provided, code, "provided"));
    }
    0
}

/// `shmem_query_thread`: the thread level provided.
#[no_mangle]
pub extern "C" fn shmem_query_thread(provided: *mut c_int) {
    let code = thread_level_code(shmem("shmem_query_thread").level());
    ok("shmem_query_thread", raw::store(provided, code, "provided"));
}

/// `shmem_finalize`: a final barrier, then this PE leaves the job. A second call does
/// nothing.
#[no_mangle]
pub extern "C" fn shmem_finalize() {
    let state = shmem("shmem_finalize");
    if state.pe().is_shut_down() {
        return;
    }
    ok("shmem_finalize", state.block(state.pe().clone().finalize()));
}

/// `shmem_global_exit`: ends the job with `status`: every PE's process exits with it
/// ([`ferroshmem_actors::Pe::global_exit`]).
#[no_mangle]
pub extern "C" fn shmem_global_exit(status: c_int) {
    match state::initialized() {
        Some(state) => state.pe().global_exit(status),
        None => std::process::exit(status),
    }
}

/// `shmem_my_pe`.
#[no_mangle]
pub extern "C" fn shmem_my_pe() -> c_int {
    shmem("shmem_my_pe").me() as c_int
}

/// `_my_pe` (deprecated).
#[no_mangle]
pub extern "C" fn _my_pe() -> c_int {
    shmem("_my_pe").me() as c_int
}

/// `shmem_n_pes`.
#[no_mangle]
pub extern "C" fn shmem_n_pes() -> c_int {
    shmem("shmem_n_pes").pe().n_pes() as c_int
}

/// `_num_pes` (deprecated).
#[no_mangle]
pub extern "C" fn _num_pes() -> c_int {
    shmem("_num_pes").pe().n_pes() as c_int
}

/// `shmem_info_get_version`.
#[no_mangle]
pub extern "C" fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    ok(
        "shmem_info_get_version",
        raw::store(major, SPEC_VERSION.0 as c_int, "major")
            .and_then(|()| raw::store(minor, SPEC_VERSION.1 as c_int, "minor")),
    );
}

/// `shmem_info_get_name`: the library's name into `name` (`SHMEM_MAX_NAME_LEN` bytes).
#[no_mangle]
pub extern "C" fn shmem_info_get_name(name: *mut c_char) {
    ok(
        "shmem_info_get_name",
        raw::store_c_string(name, MAX_NAME_LEN, LIBRARY_NAME),
    );
}

/// `shmem_pe_accessible`: 1 when `pe` can be reached.
#[no_mangle]
pub extern "C" fn shmem_pe_accessible(pe: c_int) -> c_int {
    let state = shmem("shmem_pe_accessible");
    state
        .pe_of(pe)
        .is_ok_and(|pe| state.pe().pe_accessible(pe))
        .into()
}

/// `shmem_addr_accessible`: 1 when `addr` is symmetric (in the heap or the program's static
/// data) and `pe` can be reached.
#[no_mangle]
pub extern "C" fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int {
    let state = shmem("shmem_addr_accessible");
    let symmetric = state.in_heap(addr.cast());
    state
        .pe_of(pe)
        .is_ok_and(|pe| symmetric && state.pe().pe_accessible(pe))
        .into()
}

/// `shmem_ptr`: the address of `dest` on `pe` for loads and stores here, or null where
/// only the operations reach it (another node, an address outside the heap).
#[no_mangle]
pub extern "C" fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    let state = shmem("shmem_ptr");
    let found = state.pe_of(pe).and_then(|pe| {
        let view = state.view(dest.cast::<u8>(), 1)?;
        match pe == state.me() {
            // This PE's own: the address itself (static data lives at its own address).
            true => Ok(Some(dest.cast_mut().cast())),
            false => state.pe().ptr(view, pe),
        }
    });
    match found {
        Ok(Some(address)) => address.cast(),
        _ => std::ptr::null_mut(),
    }
}

/// `shmem_pcontrol`: profiling levels; ferroshmem's traffic is always counted (its metrics),
/// so the level changes nothing.
#[no_mangle]
pub extern "C" fn shmem_pcontrol(level: c_int) {
    if let Some(state) = state::initialized() {
        tracing::debug!(pe = state.me(), level, "shmem_pcontrol");
    }
}

/// `shmem_barrier_all`: completes this PE's operations, then waits for every PE.
#[no_mangle]
pub extern "C" fn shmem_barrier_all() {
    let state = shmem("shmem_barrier_all");
    ok("shmem_barrier_all", state.block(state.pe().barrier_all()));
}

/// `shmem_sync_all`: waits for every PE (no completion).
#[no_mangle]
pub extern "C" fn shmem_sync_all() {
    let state = shmem("shmem_sync_all");
    ok("shmem_sync_all", state.block(state.pe().sync_all()));
}

/// `shmem_quiet`: completes every operation this PE issued.
#[no_mangle]
pub extern "C" fn shmem_quiet() {
    let state = shmem("shmem_quiet");
    let landing = state.dp().quiet();
    if landing.succeeded_at_once().is_none() {
        ok("shmem_quiet", state.block(landing));
    }
}

/// `shmem_fence`: orders this PE's operations to each PE.
#[no_mangle]
pub extern "C" fn shmem_fence() {
    shmem("shmem_fence").pe().fence();
}
