//! The symmetric heap's allocation routines: `shmem_malloc`, `shmem_calloc`, `shmem_align`,
//! `shmem_malloc_with_hints`, `shmem_realloc`, `shmem_free`, and their names before 1.2
//! (`shmalloc`, `shfree`, `shrealloc`, `shmemalign`). Collective, as in OpenSHMEM; every
//! allocation is aligned to at least 64 bytes.
#![allow(unsafe_code)] // `#[no_mangle]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_long, c_void};

use ferroshmem_actors::MallocHints;
use ferroshmem_runtime::{Error, Result, SymBuffer};

use crate::state::{fail, ok, shmem, Shmem};

/// Records `buffer` as one of `shmem_malloc`'s and returns its address.
fn hand_out(state: &Shmem, buffer: SymBuffer<u8>) -> *mut c_void {
    let offset = buffer.offset();
    state.allocations().insert(offset, buffer);
    state.address(offset).cast()
}

/// An allocation's outcome for C: its address, or null when the heap is exhausted or cannot
/// give the alignment asked, a power of two (on every PE alike, as the call is collective);
/// any other error (an alignment that is no power of two among them) ends the job.
fn allocated(routine: &'static str, state: &Shmem, result: Result<SymBuffer<u8>>) -> *mut c_void {
    match result {
        Ok(buffer) => hand_out(state, buffer),
        Err(Error::HeapExhausted { .. }) => std::ptr::null_mut(),
        Err(Error::AlignmentTooLarge { .. }) => std::ptr::null_mut(),
        Err(e) => fail(routine, &e),
    }
}

/// The allocation `shmem_malloc` handed out at `ptr`, taken out of the records.
fn take(routine: &'static str, state: &Shmem, ptr: *mut c_void) -> SymBuffer<u8> {
    let offset = state.offset_of(ptr).ok_or(Error::NotSymmetric);
    let found = offset.and_then(|offset| {
        state.allocations().remove(&offset).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{ptr:p} is not an address shmem_malloc returned (or it was freed)"
            ))
        })
    });
    ok(routine, found)
}

/// `shmem_malloc`: `size` bytes on every PE; null for 0 bytes or an exhausted heap.
#[no_mangle]
pub extern "C" fn shmem_malloc(size: usize) -> *mut c_void {
    let state = shmem("shmem_malloc");
    if size == 0 {
        return std::ptr::null_mut();
    }
    let result = state.block(state.pe().malloc::<u8>(size));
    allocated("shmem_malloc", state, result)
}

/// `shmem_malloc_with_hints`: as `shmem_malloc`; the hints (`SHMEM_MALLOC_*`) are advisory.
#[no_mangle]
pub extern "C" fn shmem_malloc_with_hints(size: usize, hints: c_long) -> *mut c_void {
    let state = shmem("shmem_malloc_with_hints");
    if size == 0 {
        return std::ptr::null_mut();
    }
    // Bits of no SHMEM_MALLOC_* hint are passed over, as the hints this library cannot use.
    let hints = MallocHints::from_bits_truncate(hints as u64);
    let result = state.block(state.pe().malloc_with_hints::<u8>(size, hints));
    allocated("shmem_malloc_with_hints", state, result)
}

/// `shmem_calloc`: `count` × `size` zeroed bytes on every PE; null for 0 bytes, an
/// overflow or an exhausted heap.
#[no_mangle]
pub extern "C" fn shmem_calloc(count: usize, size: usize) -> *mut c_void {
    let state = shmem("shmem_calloc");
    match count.checked_mul(size) {
        Some(0) => std::ptr::null_mut(),
        Some(bytes) => {
            let result = state.block(state.pe().calloc::<u8>(bytes));
            allocated("shmem_calloc", state, result)
        }
        None => std::ptr::null_mut(),
    }
}

/// `shmem_align`: `size` bytes aligned to `alignment` (a power of two) on every PE.
#[no_mangle]
pub extern "C" fn shmem_align(alignment: usize, size: usize) -> *mut c_void {
    let state = shmem("shmem_align");
    if size == 0 {
        return std::ptr::null_mut();
    }
    let result = state.block(state.pe().align::<u8>(alignment, size));
    allocated("shmem_align", state, result)
}

/// `shmem_free`: frees an allocation on every PE; null does nothing.
#[no_mangle]
pub extern "C" fn shmem_free(ptr: *mut c_void) {
    let state = shmem("shmem_free");
    if ptr.is_null() {
        return;
    }
    let buffer = take("shmem_free", state, ptr);
    if let Err(failed) = state.block(state.pe().free(buffer)) {
        fail("shmem_free", &failed.error)
    }
}

/// `shmem_realloc`: a new allocation of `size` bytes holding the old one's first bytes,
/// the old one freed; null `ptr` allocates, size 0 frees. Null when the heap is exhausted
/// (the old allocation then stays).
#[no_mangle]
pub extern "C" fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return shmem_malloc(size);
    }
    if size == 0 {
        shmem_free(ptr);
        return std::ptr::null_mut();
    }
    let state = shmem("shmem_realloc");
    let buffer = take("shmem_realloc", state, ptr);
    match state.block(state.pe().realloc(buffer, size)) {
        Ok(resized) => hand_out(state, resized),
        Err(failed) => {
            if let Some(buffer) = failed.buffer {
                hand_out(state, buffer);
            }
            match failed.error {
                Error::HeapExhausted { .. } => std::ptr::null_mut(),
                e => fail("shmem_realloc", &e),
            }
        }
    }
}

/// `shmalloc` (deprecated before OpenSHMEM 1.2): [`shmem_malloc`].
#[no_mangle]
pub extern "C" fn shmalloc(size: usize) -> *mut c_void {
    shmem_malloc(size)
}

/// `shfree` (deprecated before OpenSHMEM 1.2): [`shmem_free`].
#[no_mangle]
pub extern "C" fn shfree(ptr: *mut c_void) {
    shmem_free(ptr)
}

/// `shrealloc` (deprecated before OpenSHMEM 1.2): [`shmem_realloc`].
#[no_mangle]
pub extern "C" fn shrealloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    shmem_realloc(ptr, size)
}

/// `shmemalign` (deprecated before OpenSHMEM 1.2): [`shmem_align`].
#[no_mangle]
pub extern "C" fn shmemalign(alignment: usize, size: usize) -> *mut c_void {
    shmem_align(alignment, size)
}
