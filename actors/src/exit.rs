//! Ending the process for a global exit ([`crate::Pe::global_exit`]): the flag that tells exit
//! handlers the job is ending, the waits the protocol bounds, and the exit of a PE that did not
//! ask, which must not run the process's exit handlers. Besides `crate::pmix`, the only module
//! of this crate allowed `unsafe` (two C library calls).
//!
//! # Why not `exit`
//! A PE that hears of another's global exit ends its process from a runtime thread while its
//! own threads go on (the main thread may be anywhere in the program). `exit` there would run
//! the program's exit handlers and C++ static destructors under those threads, on a thread
//! whose thread-local data is being torn down, and a second `exit` (the program's own, or an
//! implicit finalize's) could wait for it forever. So such a PE flushes C's stdio buffers, so
//! that what the program printed is not lost, and ends with `_exit`, as a PE stopped by a
//! launcher would; the PE that asked exits with `exit`, on its own thread, as a program that
//! calls `exit` does.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set once a PE of this process has called [`crate::Pe::global_exit`] or heard of another's:
/// the process is about to exit.
static EXITING: AtomicBool = AtomicBool::new(false);

/// How long the root waits, once a PE has asked for a global exit, for the other PEs to leave
/// before it answers that PE (which then exits).
pub(crate) const GLOBAL_EXIT_WAIT: Duration = Duration::from_secs(2);

/// How long [`crate::Pe::global_exit`] and a PE hosting the root wait for the root: its own
/// wait and a second more.
pub(crate) const GLOBAL_EXIT_ANSWER_TIMEOUT: Duration =
    GLOBAL_EXIT_WAIT.saturating_add(Duration::from_secs(1));

/// Whether this process is exiting because a PE ended the job with
/// [`crate::Pe::global_exit`] (its own or another's): exit handlers, such as a C library's
/// implicit finalize, must then leave the job alone.
pub fn exiting() -> bool {
    EXITING.load(Ordering::Acquire)
}

/// Marks this process as exiting for a global exit.
pub(crate) fn begin() {
    EXITING.store(true, Ordering::Release);
}

/// Ends this process now with `status`, without its exit handlers: C's stdio buffers are
/// flushed, then `_exit` (see the module's doc).
pub fn exit_now(status: i32) -> ! {
    begin();
    // SAFETY: `fflush(NULL)` flushes every open C stream and takes no pointer of ours;
    // `_exit` ends the process at once and never returns.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(status)
    }
}
