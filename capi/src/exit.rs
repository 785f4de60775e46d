//! The implicit `shmem_finalize` at a normal exit: a program that returns from `main` (or
//! calls `exit(0)`) without `shmem_finalize`, as programs written for `start_pes` do, leaves
//! the job as if it had called it, so that a PE that ends first does not take its memory
//! away from PEs still at work.
//!
//! The hook runs only for an exit of status 0 of the process that joined (not of a child it
//! forked), and only while the PE is still in the job and no global exit is under way: a
//! failing PE (a non-zero status, or the end of the job after an error, which exits with 1)
//! leaves at once, so that the others learn of its loss instead of waiting for its final
//! barrier. It needs glibc's `on_exit`, which tells the hook the exit status: the module
//! exists only with glibc, and elsewhere there is no implicit finalize.
#![allow(unsafe_code)] // one call to the C library's `on_exit`

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::state::Shmem;

/// The process that joined the job: a child it forks inherits the hook, but not the runtime's
/// threads, and must leave the job alone.
static JOINED_BY: OnceLock<u32> = OnceLock::new();

/// Arranges for [`finalize_at_exit`] to run when this process exits. Call once per process.
pub(crate) fn finalize_at_exit_hook() {
    extern "C" {
        fn on_exit(hook: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
    }
    extern "C" fn hook(status: c_int, _arg: *mut c_void) {
        let joined_here = JOINED_BY.get() == Some(&std::process::id());
        if status == 0 && joined_here {
            if let Some(state) = crate::state::initialized() {
                finalize_at_exit(state);
            }
        }
    }
    JOINED_BY.get_or_init(std::process::id);
    // SAFETY: `hook` is a plain function that lives as long as the process and ignores its
    // argument, which may thus be null.
    if unsafe { on_exit(hook, std::ptr::null_mut()) } != 0 {
        eprintln!("ferroshmem: no implicit shmem_finalize at exit: on_exit failed");
    }
}

/// `shmem_finalize` for a process exiting with status 0, unless the PE already left the job
/// or a global exit is ending it. It runs as a task of the runtime: the exiting thread's
/// thread-local data (the runtime's context among them) is already gone. A failure is
/// printed, and the process ends with status 1 instead of 0, as after a failed explicit
/// `shmem_finalize`.
fn finalize_at_exit(state: &Shmem) {
    let pe = state.pe();
    if pe.is_shut_down() || ferroshmem_actors::exiting() {
        return;
    }
    if let Err(e) = state
        .block_outside(pe.clone().finalize())
        .and_then(|done| done)
    {
        eprintln!("ferroshmem: PE {}: shmem_finalize at exit: {e}", state.me());
        ferroshmem_actors::exit_now(1)
    }
}
