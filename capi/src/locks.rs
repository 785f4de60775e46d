//! Distributed locks on a symmetric `long`: `shmem_set_lock`, `shmem_test_lock`,
//! `shmem_clear_lock` (the lock word must be zero on every PE before first use).
#![allow(unsafe_code)] // `#[no_mangle]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_long};

use crate::state::{ok, shmem};

/// `shmem_set_lock`: blocks until this PE holds the lock.
#[no_mangle]
pub extern "C" fn shmem_set_lock(lock: *mut c_long) {
    let s = shmem("shmem_set_lock");
    let held = s
        .view(lock.cast::<u64>(), 1)
        .and_then(|l| s.block(s.dp().set_lock(l)));
    ok("shmem_set_lock", held)
}

/// `shmem_test_lock`: takes the lock if it is free (0), else returns 1 at once.
#[no_mangle]
pub extern "C" fn shmem_test_lock(lock: *mut c_long) -> c_int {
    let s = shmem("shmem_test_lock");
    let taken = s
        .view(lock.cast::<u64>(), 1)
        .and_then(|l| s.block(s.dp().test_lock(l)));
    c_int::from(!ok("shmem_test_lock", taken))
}

/// `shmem_clear_lock`: completes this PE's operations, then releases the lock.
#[no_mangle]
pub extern "C" fn shmem_clear_lock(lock: *mut c_long) {
    let s = shmem("shmem_clear_lock");
    let released = s
        .view(lock.cast::<u64>(), 1)
        .and_then(|l| s.block(s.dp().clear_lock(l)));
    ok("shmem_clear_lock", released)
}
