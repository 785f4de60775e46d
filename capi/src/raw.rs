//! The C caller's local buffers as Rust slices: the one place this crate reads and writes
//! memory through raw pointers.
//!
//! OpenSHMEM's contract is that a routine's local source and destination point to as many
//! elements as the call names, valid for its duration (and, for `_nbi` calls, until the
//! next `quiet`). The C caller keeps it; these functions check what can be checked (null,
//! alignment, a length that fits the address space) and refuse the rest as typed errors
//! rather than touching the memory.
#![allow(unsafe_code)]

use std::ffi::c_char;

use ferroshmem_runtime::{Error, Result};

/// Checks that `len` elements of `T` at `ptr` can be a slice.
fn check<T>(ptr: *const T, len: usize, what: &'static str) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::InvalidArgument(format!("{what} is a null pointer")));
    }
    if (ptr as usize) % std::mem::align_of::<T>() != 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} is not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    match len.checked_mul(std::mem::size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{what}: {len} elements overflow the address space"
        ))),
    }
}

/// Whether `len` elements of `T` at `ptr` can be a slice (the checks of [`check`], with no
/// error built: the fast paths' form).
#[inline(always)]
fn fits<T>(ptr: *const T, len: usize) -> bool {
    !ptr.is_null()
        && (ptr as usize) % std::mem::align_of::<T>() == 0
        && len
            .checked_mul(std::mem::size_of::<T>())
            .is_some_and(|b| b <= isize::MAX as usize)
}

/// [`local`] for the fast paths: `None` where `local` would refuse.
#[inline(always)]
pub(crate) fn try_local<'a, T>(ptr: *const T, len: usize) -> Option<&'a [T]> {
    if len == 0 {
        return Some(&[]);
    }
    if !fits(ptr, len) {
        return None;
    }
    // SAFETY: as `local` (the same checks passed).
    Some(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// [`local_mut`] for the fast paths: `None` where `local_mut` would refuse.
#[inline(always)]
pub(crate) fn try_local_mut<'a, T>(ptr: *mut T, len: usize) -> Option<&'a mut [T]> {
    if len == 0 {
        return Some(&mut []);
    }
    if !fits(ptr, len) {
        return None;
    }
    // SAFETY: as `local_mut` (the same checks passed).
    Some(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The caller's `len` elements at `ptr`, read-only (empty for `len` 0, whatever `ptr` is).
pub(crate) fn local<'a, T>(ptr: *const T, len: usize, what: &'static str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    check(ptr, len, what)?;
    // SAFETY: non-null, aligned and within the address space (checked); OpenSHMEM's caller
    // guarantees `len` readable elements at `ptr` for the call's duration.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The caller's `len` elements at `ptr`, to write (empty for `len` 0).
pub(crate) fn local_mut<'a, T>(ptr: *mut T, len: usize, what: &'static str) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    check(ptr, len, what)?;
    // SAFETY: as `local`, with `len` writable elements that nothing else accesses during the
    // call (OpenSHMEM: a local destination is the caller's alone until the call returns).
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Writes `value` to the caller's `*ptr` (an out-parameter).
pub(crate) fn store<T>(ptr: *mut T, value: T, what: &'static str) -> Result<()> {
    let slot = local_mut(ptr, 1, what)?;
    slot[0] = value;
    Ok(())
}

/// Copies `text` and a terminating NUL into the caller's buffer of `capacity` bytes
/// (`SHMEM_MAX_NAME_LEN` for `shmem_info_get_name`), truncating if needed.
pub(crate) fn store_c_string(ptr: *mut c_char, capacity: usize, text: &str) -> Result<()> {
    let out = local_mut(ptr.cast::<u8>(), capacity, "name buffer")?;
    let len = text.len().min(capacity.saturating_sub(1));
    out[..len].copy_from_slice(&text.as_bytes()[..len]);
    if let Some(end) = out.get_mut(len) {
        *end = 0;
    }
    Ok(())
}

/// Maps the heap file's `file_offset..+len` over the program's static data at `start`
/// (its bytes copied in first): see [`crate::static_data`].
pub(crate) fn alias_static_data(
    fd: std::os::fd::BorrowedFd<'_>,
    file_offset: u64,
    start: usize,
    len: usize,
) -> Result<()> {
    // SAFETY: `start..start + len` is the executable's own writable data (not this
    // library's, which the caller checked lies elsewhere), which no other thread of this
    // library touches during `shmem_init`; OpenSHMEM makes it symmetric, i.e. shared with
    // the other PEs from then on. The heap allocation behind `file_offset` is this PE's,
    // fresh, and at least `len` bytes long (checked by `DataPlane::heap_file`).
    unsafe {
        ferroshmem_runtime::shared_memory::SharedMapping::alias_fixed(fd, file_offset, start, len)
    }
}
