//! The one audited layer through which ferroshmem touches memory shared with other processes:
//! a mapping of a shared-memory file, read and written by raw copies and atomic instructions.
//!
//! Rules this module keeps, so that the rest of the crate needs no `unsafe`:
//! - No Rust reference (`&T`/`&mut T`) to plain shared bytes is ever created: other processes
//!   may write them at any time, so they are only copied in and out through raw pointers.
//!   The element types moved this way are [`bytemuck::Pod`]: every bit pattern is a valid
//!   value, so a torn read under a racing write yields a valid (if unspecified) value.
//! - References are created only to atomic types, at offsets checked for bounds and alignment.
//! - Every offset is checked against the mapping's length here, even when the caller checked.

// The audited layer of shared memory: the only module of this crate allowed `unsafe`.
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI16, AtomicI32, AtomicI64, AtomicU16, AtomicU32, AtomicU64};

use crate::cpus::LastLevelCache;
use crate::error::{Error, Result};

/// Atomic types that may be placed in shared memory (lock-free, address-free on Linux).
pub trait SharedAtomic: private::Sealed + Sync {}

mod private {
    pub trait Sealed {}
}

macro_rules! shared_atomic {
    ($($t:ty),*) => {$(
        impl private::Sealed for $t {}
        impl SharedAtomic for $t {}
    )*};
}
shared_atomic!(AtomicU16, AtomicI16, AtomicU32, AtomicU64, AtomicI32, AtomicI64);

/// The size of this machine's memory pages: the unit [`SharedMapping::alias_fixed`] maps in.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// A read-write shared mapping of a whole file (a memfd) into this process.
#[derive(Debug)]
pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain process memory that lives until `drop`; all access goes through
// raw-pointer copies and atomics (see the module rules), which are valid from any thread.
unsafe impl Send for SharedMapping {}
// SAFETY: as above; `&SharedMapping` hands out no references to non-atomic shared bytes.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps `len` bytes of `fd` shared and read-write.
    pub fn map(fd: impl AsFd, len: usize) -> Result<Self> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        if len == 0 {
            return Err(Error::Config("cannot map an empty segment".into()));
        }
        // SAFETY: a fresh mapping chosen by the kernel (null hint) overlaps nothing that Rust
        // owns; the file descriptor is valid for the call; the result is checked below.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| Error::os("mmap of a symmetric segment", e))?;
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| Error::os("mmap of a symmetric segment", "returned null"))?;
        Ok(SharedMapping { base, len })
    }

    /// Maps `len` bytes of `fd` shared and read-write, placed so that byte `at` of the
    /// mapping lies at an address that is a multiple of `align` (a power of two): an address
    /// range of `len + align` bytes is reserved (inaccessible, backed by nothing), the file
    /// mapped over the aligned part of it, and the rest given back.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `align` is not a power of two, `at` is past `len`, or
    /// `align` is larger than a page and `at` not at a page boundary; [`Error::Config`] when
    /// `len + align` overflows; the OS error of a reservation or mapping that fails (nothing
    /// left mapped then).
    pub fn map_aligned(fd: impl AsFd, len: usize, align: usize, at: usize) -> Result<Self> {
        use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
        let page = page_size();
        if !align.is_power_of_two() || at > len {
            return Err(Error::InvalidArgument(format!(
                "mapping {len} bytes with byte {at} aligned to {align}: not a power of two, or \
                 past the end"
            )));
        }
        if align <= page && at % align == 0 {
            return Self::map(fd, len);
        }
        if at % page != 0 {
            return Err(Error::InvalidArgument(format!(
                "mapping {len} bytes with byte {at} aligned to {align}: byte {at} is not at a \
                 boundary of the {page}-byte pages"
            )));
        }
        // The kernel maps whole pages: the file's mapping takes `pages` bytes.
        let too_large = || Error::Config(format!("a mapping of {len} bytes is too large"));
        let pages = len.checked_next_multiple_of(page).ok_or_else(too_large)?;
        let span = pages.checked_add(align).ok_or_else(too_large)?;
        // SAFETY: a fresh inaccessible reservation chosen by the kernel (null hint) overlaps
        // nothing that Rust owns; the result is checked.
        let reserved = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                span,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| Error::os("reserving addresses for a symmetric segment", e))?;
        let start = reserved as usize;
        let base = (start + at).next_multiple_of(align) - at;
        // SAFETY: `base..base + len` lies inside the reservation made above, which nothing
        // else uses; the file is `len` long.
        let mapped = unsafe { map_fixed(fd, 0, base, len) };
        let unused = match mapped {
            Ok(_) => [
                (start, base - start),
                (base + pages, start + span - (base + pages)),
            ],
            Err(_) => [(start, span), (start, 0)],
        };
        for (addr, bytes) in unused.into_iter().filter(|&(_, bytes)| bytes > 0) {
            // SAFETY: a part of this call's own reservation that the file's mapping does not
            // cover (all of it when the mapping failed); nothing refers to it.
            if let Err(e) = unsafe { munmap(addr as *mut std::ffi::c_void, bytes) } {
                tracing::warn!("giving back addresses around a symmetric segment failed: {e}");
            }
        }
        mapped.map_err(|e| Error::os("mmap of a symmetric segment", e))?;
        let base = NonNull::new(base as *mut u8)
            .ok_or_else(|| Error::os("mmap of a symmetric segment", "returned null"))?;
        Ok(SharedMapping { base, len })
    }

    /// Maps `len` bytes of `fd` from `file_offset` over this process's memory at `addr`
    /// (shared, read-write, replacing what was mapped there), after copying what was there
    /// into the file: the bytes at `addr` stay as they were, and from then on are the file's
    /// (how a C program's static data joins the symmetric heap). Never unmapped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `addr`, `len` or `file_offset` is not page-aligned or
    /// `len` is 0; the copy's or the mapping's OS error (nothing replaced then).
    ///
    /// # Safety
    /// `[addr, addr + len)` must be memory of this process that nothing else (no other
    /// thread, no Rust reference) reads or writes during the call, and whose contents may be
    /// shared with other processes from then on (the program's own data, not the allocator's
    /// or the runtime's); `fd` must be a file at least `file_offset + len` bytes long.
    pub unsafe fn alias_fixed(
        fd: impl AsFd,
        file_offset: u64,
        addr: usize,
        len: usize,
    ) -> Result<()> {
        let page = page_size();
        let aligned = addr % page == 0 && len % page == 0 && file_offset % page as u64 == 0;
        if !aligned || len == 0 {
            return Err(Error::InvalidArgument(format!(
                "aliasing {len} bytes at {addr:#x} to file offset {file_offset}: not whole pages"
            )));
        }
        // SAFETY: `addr..addr + len` is readable process memory nothing else touches during
        // the call (the caller's promise); the slice lives only for this copy.
        let contents = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        rustix::io::pwrite(fd.as_fd(), contents, file_offset)
            .map_err(|e| Error::os("copying data into a symmetric segment", e))
            .and_then(|written| match written == len {
                true => Ok(()),
                false => Err(Error::os(
                    "copying data into a symmetric segment",
                    "short write",
                )),
            })?;
        // SAFETY: the caller's range, which it promised nothing else uses during the call and
        // whose contents the file now holds; the file is long enough.
        unsafe { map_fixed(fd, file_offset, addr, len) }
            .map_err(|e| Error::os("mmap of static data over a symmetric segment", e))?;
        Ok(())
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never true for a live mapping).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping's base address, for registering it with a device or a NIC.
    pub fn base_addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    #[inline(always)]
    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "shared-memory access [{offset}, +{len}) outside a mapping of {} bytes",
            self.len
        );
    }

    /// Copies from the mapping at `offset` into `dst` and returns `true`, or returns `false`
    /// having copied nothing where the range lies outside the mapping: for a fast path whose
    /// caller has a checked path to fall back on (no panic, so no message built inline).
    #[inline(always)]
    pub fn try_read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the source range lies inside the mapping (checked above) and `dst` is an
        // exclusive Rust slice distinct from shared memory, so the ranges do not overlap.
        unsafe {
            copy_nonoverlapping_bytes(self.base.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        }
        true
    }

    /// Copies `src` into the mapping at `offset`. Copies larger than half the last-level
    /// cache use streaming (non-temporal) stores, which do not evict the writer's cache for
    /// data only the target will read.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: the destination range lies inside the mapping (checked above), the source is
        // a distinct Rust slice (shared memory is never borrowed as a slice), so they cannot
        // overlap; raw copies of bytes are valid under concurrent access by other processes.
        unsafe {
            let dst = self.base.as_ptr().add(offset);
            if src.len() >= MIN_STREAMED_WRITE && src.len() >= streaming_threshold() {
                streaming_copy(src.as_ptr(), dst, src.len());
            } else {
                copy_nonoverlapping_bytes(src.as_ptr(), dst, src.len());
            }
        }
    }

    /// Copies from the mapping at `offset` into `dst`.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: the source range lies inside the mapping (checked above) and `dst` is an
        // exclusive Rust slice distinct from shared memory, so the ranges do not overlap.
        unsafe {
            copy_nonoverlapping_bytes(self.base.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        }
    }

    /// Copies `len` bytes from `src` at `src_offset` into this mapping at `dst_offset`; the two
    /// ranges may overlap (same mapping). With [`Caching::Stream`], a copy of at least
    /// [`MIN_STREAMED_COPY`] bytes between ranges that do not overlap uses streaming stores.
    pub fn copy_from(
        &self,
        dst_offset: usize,
        src: &SharedMapping,
        src_offset: usize,
        len: usize,
        caching: Caching,
    ) {
        self.check(dst_offset, len);
        src.check(src_offset, len);
        let apart = || {
            let from_address = src.base.as_ptr() as usize + src_offset;
            let to_address = self.base.as_ptr() as usize + dst_offset;
            from_address + len <= to_address || to_address + len <= from_address
        };
        let stream = caching == Caching::Stream && len >= MIN_STREAMED_COPY && apart();
        // SAFETY: both ranges lie inside live mappings (checked above); `copy` allows overlap,
        // and the streaming copy runs only on ranges that do not overlap (`apart`).
        unsafe {
            let (from, to) = (
                src.base.as_ptr().add(src_offset),
                self.base.as_ptr().add(dst_offset),
            );
            if stream {
                streaming_copy(from, to, len);
            } else {
                std::ptr::copy(from, to, len);
            }
        }
    }

    /// Fills `len` bytes at `offset` with zero.
    pub fn zero(&self, offset: usize, len: usize) {
        self.check(offset, len);
        // SAFETY: the range lies inside the mapping (checked above); zero bytes are a valid
        // value of every Pod type stored there.
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(offset), 0, len) }
    }

    /// Asks this core to take the cache lines of the `len` bytes at `offset` for writing
    /// (`prefetchw` on x86-64 CPUs that have it; nothing elsewhere). A hint only: nothing is
    /// read or written, and the lines may be taken back before the writes come. A writer that
    /// issues it before work it must do anyway overlaps the lines' trips from the other
    /// cores that hold them with that work. Lines outside the mapping are left alone.
    #[inline]
    pub fn prefetch_for_write(&self, offset: usize, len: usize) {
        if !prefetch::for_write_available() {
            return;
        }
        let end = offset.saturating_add(len).min(self.len);
        let mut at = offset - offset % prefetch::LINE;
        while at < end {
            prefetch::line_for_write(self.base.as_ptr().wrapping_add(at));
            at += prefetch::LINE;
        }
    }

    /// The atomic of type `A` at `offset`.
    ///
    /// Panics if the offset is misaligned or out of bounds: callers check both first and report
    /// a typed error.
    #[inline(always)]
    pub fn atomic<A: SharedAtomic>(&self, offset: usize) -> &A {
        let size = std::mem::size_of::<A>();
        self.check(offset, size);
        assert!(
            offset % std::mem::align_of::<A>() == 0,
            "misaligned atomic at offset {offset}"
        );
        // SAFETY: in bounds and aligned (checked above; the base is page-aligned); the memory
        // lives as long as `self`, which the returned reference borrows; atomics allow
        // concurrent access from any thread and, being lock-free, from any process.
        unsafe { &*self.base.as_ptr().add(offset).cast::<A>() }
    }
}

/// Prefetching cache lines for writing, where the CPU can.
mod prefetch {
    /// The cache line size the prefetches step by (64 bytes on every x86-64 CPU).
    pub const LINE: usize = 64;

    #[cfg(target_arch = "x86_64")]
    mod arch {
        use std::sync::atomic::{AtomicU8, Ordering};

        /// Whether `prefetchw` is known to exist: 0 not asked yet, 1 yes, 2 no.
        static PREFETCHW: AtomicU8 = AtomicU8::new(0);

        /// Whether this CPU has `prefetchw` (CPUID leaf 0x8000_0001, ECX bit 8: PRFCHW, also
        /// named 3DNowPrefetch); asked once.
        #[inline]
        pub fn for_write_available() -> bool {
            match PREFETCHW.load(Ordering::Relaxed) {
                0 => ask(),
                known => known == 1,
            }
        }

        #[cold]
        fn ask() -> bool {
            let extended = std::arch::x86_64::__cpuid(0x8000_0000).eax >= 0x8000_0001;
            let has = extended && std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0;
            PREFETCHW.store(if has { 1 } else { 2 }, Ordering::Relaxed);
            has
        }

        /// Prefetches the line holding `at` for writing.
        #[inline(always)]
        pub fn line_for_write(at: *const u8) {
            // SAFETY: `prefetchw` neither reads nor writes memory as far as the program can
            // tell and never faults, whatever the address; callers checked (via
            // `for_write_available`) that the CPU has the instruction, so it cannot trap as
            // undefined. It touches no stack and no flags.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{at}]",
                    at = in(reg) at,
                    options(nostack, preserves_flags, readonly)
                )
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    mod arch {
        /// No prefetch for writing is issued on this architecture.
        #[inline]
        pub fn for_write_available() -> bool {
            false
        }

        /// Never called: [`for_write_available`] says no.
        #[inline]
        pub fn line_for_write(_at: *const u8) {}
    }

    pub use arch::{for_write_available, line_for_write};
}

/// Copies `len` bytes between ranges that do not overlap. A word (4 or 8 bytes, what one
/// element of most operations is) moves as one load and one store: where the length is known
/// only at run time (the C ABI's calls) this skips a call into `memcpy`; where it is a
/// constant the branch folds away.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the two ranges must
/// not overlap.
#[inline(always)]
unsafe fn copy_nonoverlapping_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, for every arm; the word arms read and write exactly
    // `len` bytes, unaligned.
    unsafe {
        match len {
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// The smallest [`streaming_threshold`]: smaller writes skip asking it.
const MIN_STREAMED_WRITE: usize = 1 << 20;

/// Writes at least this large use streaming stores: half the last-level cache, at least
/// [`MIN_STREAMED_WRITE`].
fn streaming_threshold() -> usize {
    (LastLevelCache::of_this_machine().bytes / 2).max(MIN_STREAMED_WRITE)
}

/// What a copy between mappings ([`SharedMapping::copy_from`]) does with the caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caching {
    /// Ordinary stores: the copied lines stay in cache for whoever reads them next.
    Keep,
    /// Streaming (non-temporal) stores for copies of at least [`MIN_STREAMED_COPY`] bytes,
    /// for copies among buffers that together exceed the last-level cache: ordinary stores
    /// would first read every destination line from memory and evict lines still to be used,
    /// where streaming ones write the lines to memory directly.
    Stream,
}

/// The smallest copy that [`Caching::Stream`] streams: below it, the partial lines at its
/// ends and the fence cost more than the stores save.
pub const MIN_STREAMED_COPY: usize = 64 << 10;

/// Copies `len` bytes from `src` to `dst` with non-temporal 16-byte stores from the first
/// 64-byte line of `dst` on (the bytes before it and after the last whole group of 64 by
/// ordinary copies), then fences them.
///
/// # Safety
/// `src` must be valid for `len` bytes of reads, `dst` for `len` bytes of writes, and the
/// two ranges must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn streaming_copy(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = dst.align_offset(64).min(len);
    // SAFETY: (this block and its loop) every access stays within `src` and `dst[..len]`,
    // which the caller guarantees valid and disjoint; stores go to 16-byte aligned addresses
    // (`head` aligns them to 64), loads are unaligned loads; SSE2 is part of x86_64.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut at = head;
        while at + 64 <= len {
            let s = src.add(at).cast::<__m128i>();
            let d = dst.add(at).cast::<__m128i>();
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            at += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at);
        _mm_sfence();
    }
}

/// Plain copy where streaming stores are not implemented.
///
/// # Safety
/// As the x86-64 version's.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn streaming_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// Maps `len` bytes of `fd` from `file_offset`, shared and read-write, at `addr` exactly
/// (`MAP_FIXED`: whatever was mapped there is replaced).
///
/// # Safety
/// `[addr, addr + len)` must be this process's memory that no Rust reference and no other
/// thread uses, and `fd` a file at least `file_offset + len` bytes long.
unsafe fn map_fixed(
    fd: impl AsFd,
    file_offset: u64,
    addr: usize,
    len: usize,
) -> rustix::io::Result<*mut std::ffi::c_void> {
    use rustix::mm::{mmap, MapFlags, ProtFlags};
    // SAFETY: the caller's contract above.
    unsafe {
        mmap(
            addr as *mut std::ffi::c_void,
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED | MapFlags::FIXED,
            fd,
            file_offset,
        )
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe a mapping created by `map` or `map_aligned` and not
        // unmapped since;
        // no reference into it outlives `self` (atomics borrow `self`).
        if let Err(e) = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) } {
            tracing::warn!("munmap of a symmetric segment failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(len: usize) -> SharedMapping {
        let fd = rustix::fs::memfd_create("test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, len as u64).unwrap();
        SharedMapping::map(&fd, len).unwrap()
    }

    #[test]
    fn aligned_mappings_put_the_byte_asked_on_the_boundary() {
        let page = page_size();
        let len = 5 * page + 100;
        let fd = rustix::fs::memfd_create("test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, len as u64).unwrap();
        for (align, at) in [(1 << 21, page), (1 << 21, 0), (page, 0), (64, 0)] {
            let map = SharedMapping::map_aligned(&fd, len, align, at).unwrap();
            assert_eq!((map.base_addr() + at) % align, 0, "{align} at {at}");
            map.write(len - 8, &[5; 8]);
            let mut back = [0; 8];
            map.read(len - 8, &mut back);
            assert_eq!(back, [5; 8]);
        }
        for (align, at) in [(3, 0), (1 << 21, len + 1), (1 << 21, page + 64)] {
            assert!(matches!(
                SharedMapping::map_aligned(&fd, len, align, at),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn write_read_and_atomics() {
        let m = mapping(4096);
        m.write(8, &[1, 2, 3, 4]);
        let mut out = [0u8; 4];
        m.read(8, &mut out);
        assert_eq!(out, [1, 2, 3, 4]);
        let a: &AtomicU64 = m.atomic(64);
        a.fetch_add(5, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(a.load(std::sync::atomic::Ordering::SeqCst), 5);
        m.copy_from(128, &m, 8, 4, Caching::Keep);
        m.read(128, &mut out);
        assert_eq!(out, [1, 2, 3, 4]);
    }

    #[test]
    fn streaming_writes_copy_every_byte_at_any_alignment() {
        let len = streaming_threshold() + 1000;
        let m = mapping(len + 64);
        for shift in [0usize, 1, 13] {
            let src: Vec<u8> = (0..len - shift).map(|i| (i * 7 + shift) as u8).collect();
            m.write(shift, &src);
            let mut out = vec![0u8; src.len()];
            m.read(shift, &mut out);
            assert!(out == src, "streaming copy at offset {shift}");
        }
    }

    /// Bytes that do not repeat with any short period.
    fn pattern(len: usize, salt: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((i ^ salt).wrapping_mul(0x9e37_79b9) >> 13) as u8)
            .collect()
    }

    #[test]
    fn streamed_copies_between_mappings_copy_every_byte_and_nothing_past_them() {
        let len = MIN_STREAMED_COPY + 1000;
        let (from, to) = (mapping(len + 256), mapping(len + 256));
        for (src_at, dst_at) in [(0usize, 0usize), (1, 0), (0, 5), (13, 5), (0, 64)] {
            let guard = pattern(len + 256, 7);
            to.write(0, &guard);
            let data = pattern(len, src_at * 131 + dst_at);
            from.write(src_at, &data);
            to.copy_from(dst_at, &from, src_at, len, Caching::Stream);
            let mut out = vec![0u8; len + 256];
            to.read(0, &mut out);
            let place = format!("streamed copy from {src_at} to {dst_at}");
            assert!(out[dst_at..dst_at + len] == data[..], "{place}");
            assert!(out[..dst_at] == guard[..dst_at], "{place}: before it");
            assert!(
                out[dst_at + len..] == guard[dst_at + len..],
                "{place}: after it"
            );
        }
        // Overlapping ranges of one mapping move as `memmove` does, never by streaming.
        let data = pattern(len, 3);
        from.write(0, &data);
        from.copy_from(40, &from, 0, len, Caching::Stream);
        let mut out = vec![0u8; len];
        from.read(40, &mut out);
        assert!(out == data, "overlapping copy");
    }

    #[test]
    fn the_streaming_copy_is_exact_at_short_lengths_and_any_alignment() {
        let data = pattern(400, 11);
        for len in [0usize, 1, 15, 63, 64, 65, 127, 128, 200] {
            for shift in [0usize, 1, 16, 63] {
                let mut out = vec![0xa5u8; 400 + 128];
                let at = out.as_ptr().align_offset(64) + shift;
                let dst = out[at..].as_mut_ptr();
                // SAFETY: `data` holds 400 >= `len` bytes; `out` holds 528 >= `at + len`
                // (`at` < 128), so `dst` is valid for `len` writes; distinct allocations.
                unsafe { streaming_copy(data.as_ptr(), dst, len) };
                let place = format!("{len} bytes {shift} past a line");
                assert!(out[at..at + len] == data[..len], "{place}");
                assert!(out[..at].iter().all(|&b| b == 0xa5), "before {place}");
                assert!(out[at + len..].iter().all(|&b| b == 0xa5), "after {place}");
            }
        }
    }

    #[test]
    fn prefetch_for_write_changes_nothing_at_any_range() {
        let m = mapping(4096);
        let pattern: Vec<u8> = (0..4096).map(|i| (i * 31 + 7) as u8).collect();
        m.write(0, &pattern);
        let ranges = [
            (0, 0),
            (0, 4096),
            (63, 2),
            (4000, 1000),
            (4096, 64),
            (usize::MAX - 10, 100),
            (5, usize::MAX),
        ];
        for (offset, len) in ranges {
            m.prefetch_for_write(offset, len);
        }
        let mut out = vec![0u8; 4096];
        m.read(0, &mut out);
        assert!(out == pattern, "a prefetch changed the mapping's contents");
    }

    #[test]
    fn a_fallible_read_outside_the_mapping_copies_nothing() {
        let m = mapping(4096);
        m.write(4088, &[9; 8]);
        let mut out = [1u8; 8];
        assert!(m.try_read(4088, &mut out));
        assert_eq!(out, [9; 8]);
        for at in [4089, 4096, usize::MAX - 3] {
            let mut out = [1u8; 8];
            assert!(!m.try_read(at, &mut out), "a read of 8 bytes at {at}");
            assert_eq!(out, [1; 8], "a refused read at {at} copied");
        }
    }

    #[test]
    #[should_panic(expected = "outside a mapping")]
    fn out_of_bounds_access_is_caught() {
        mapping(4096).write(4095, &[0, 0]);
    }
}
