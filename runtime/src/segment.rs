//! One PE's symmetric-heap segment in host memory: an anonymous shared-memory file (memfd)
//! with a small control header followed by the heap proper.
//!
//! A memfd has no name in any filesystem, so nothing is left in `/dev/shm` whatever way the
//! job ends, SIGKILL included: the memory goes away with the last process that maps it or
//! holds its descriptor. Peers on the node receive the descriptor over a Unix socket
//! ([`crate::fd_passing`]). The file's mode is set to 0600.
//!
//! Header layout (each word on its own cache line, so that writers from different PEs do not
//! share lines): magic, owner pid, the wake sequence (a futex word), the sleeper count, then
//! one flag per dissemination-barrier round.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::shared_memory::SharedMapping;

/// Bytes reserved in front of the heap for control words.
pub const HEADER_SIZE: usize = 16 * 1024;
const CACHE_LINE: usize = 64;
const MAGIC: u64 = 0x6665_7272_6f73_686d; // "ferroshm"
const MAGIC_OFFSET: usize = 0;
const PID_OFFSET: usize = 8;
const WAKE_SEQ_OFFSET: usize = CACHE_LINE;
const SLEEPERS_OFFSET: usize = 2 * CACHE_LINE;
const BARRIER_FLAGS_OFFSET: usize = 4 * CACHE_LINE;
/// Number of dissemination-barrier rounds the header has flags for (2^64 PEs).
pub const BARRIER_ROUNDS: usize = 64;

/// A mapped segment: the memfd and its mapping.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    map: SharedMapping,
    heap_size: usize,
}

impl Segment {
    /// Creates the segment of `pe` with `heap_size` usable bytes (zero-filled, sparse).
    pub fn create(pe: usize, heap_size: usize) -> Result<Self> {
        use rustix::fs::{fchmod, ftruncate, memfd_create, MemfdFlags, Mode};
        let total = HEADER_SIZE
            .checked_add(heap_size)
            .ok_or_else(|| Error::Config(format!("symmetric size {heap_size} is too large")))?;
        let fd = memfd_create(format!("ferroshmem-pe{pe}"), MemfdFlags::CLOEXEC)
            .map_err(|e| Error::os("memfd_create for the symmetric heap", e))?;
        fchmod(&fd, Mode::RUSR | Mode::WUSR).map_err(|e| Error::os("fchmod 0600", e))?;
        ftruncate(&fd, total as u64)
            .map_err(|e| Error::os("sizing the symmetric heap (ftruncate)", e))?;
        let map = SharedMapping::map(&fd, total)?;
        map.write(PID_OFFSET, &std::process::id().to_ne_bytes());
        map.atomic::<AtomicU64>(MAGIC_OFFSET)
            .store(MAGIC, Ordering::Release);
        Ok(Segment { fd, map, heap_size })
    }

    /// Maps a peer's segment from the descriptor it sent, checking its size and header.
    pub fn import(fd: OwnedFd, heap_size: usize) -> Result<Self> {
        let total = HEADER_SIZE + heap_size;
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::os("fstat of a peer segment", e))?;
        if stat.st_size as usize != total {
            return Err(Error::Bootstrap(format!(
                "peer segment is {} bytes, expected {total}: PEs disagree on the symmetric size",
                stat.st_size
            )));
        }
        let map = SharedMapping::map(&fd, total)?;
        if map
            .atomic::<AtomicU64>(MAGIC_OFFSET)
            .load(Ordering::Acquire)
            != MAGIC
        {
            return Err(Error::Bootstrap(
                "peer segment does not carry ferroshmem's header".into(),
            ));
        }
        Ok(Segment { fd, map, heap_size })
    }

    /// The memfd, to send to peers.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Usable heap bytes.
    pub fn heap_size(&self) -> usize {
        self.heap_size
    }

    /// The whole mapping (header included); heap offset `o` is mapping offset `HEADER_SIZE + o`.
    pub fn mapping(&self) -> &SharedMapping {
        &self.map
    }

    /// The pid of the process that created the segment.
    pub fn owner_pid(&self) -> u32 {
        let mut b = [0u8; 4];
        self.map.read(PID_OFFSET, &mut b);
        u32::from_ne_bytes(b)
    }

    /// The futex word bumped by writers when the owner has sleeping waiters.
    pub fn wake_seq(&self) -> &AtomicU32 {
        self.map.atomic(WAKE_SEQ_OFFSET)
    }

    /// Number of the owner's waiters that sleep and want a wake-up on any write.
    pub fn sleepers(&self) -> &AtomicU32 {
        self.map.atomic(SLEEPERS_OFFSET)
    }

    /// The counter signalled in dissemination-barrier round `round`.
    pub fn barrier_flag(&self, round: usize) -> &AtomicU64 {
        assert!(round < BARRIER_ROUNDS);
        self.map.atomic(BARRIER_FLAGS_OFFSET + round * CACHE_LINE)
    }

    /// After a write into this segment: wakes its owner's sleeping waiters, if any.
    ///
    /// The caller must have made its write visible first with a SeqCst operation (an atomic
    /// read-modify-write or a SeqCst fence): that pairs with the waiter's SeqCst increment of
    /// the sleeper count, so either the writer sees the sleeper or the waiter sees the data.
    #[inline]
    pub fn wake_if_sleeping(&self) {
        if self.sleepers().load(Ordering::SeqCst) != 0 {
            self.ring();
        }
    }

    /// Bumps the wake sequence and wakes every thread sleeping on it.
    pub fn ring(&self) {
        let seq = self.wake_seq();
        seq.fetch_add(1, Ordering::SeqCst);
        if let Err(e) =
            rustix::thread::futex::wake(seq, rustix::thread::futex::Flags::empty(), u32::MAX)
        {
            tracing::warn!("futex wake failed: {e}");
        }
    }
}

const _: () = assert!(BARRIER_FLAGS_OFFSET + BARRIER_ROUNDS * CACHE_LINE <= HEADER_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_import_share_memory() {
        let seg = Segment::create(0, 1 << 20).unwrap();
        let dup = seg.fd().try_clone_to_owned().unwrap();
        let peer = Segment::import(dup, 1 << 20).unwrap();
        seg.mapping().write(HEADER_SIZE, &[7; 8]);
        let mut out = [0u8; 8];
        peer.mapping().read(HEADER_SIZE, &mut out);
        assert_eq!(out, [7; 8]);
        assert_eq!(peer.owner_pid(), std::process::id());
        peer.barrier_flag(3).fetch_add(1, Ordering::SeqCst);
        assert_eq!(seg.barrier_flag(3).load(Ordering::SeqCst), 1);
    }

    #[test]
    fn import_rejects_a_size_mismatch() {
        let seg = Segment::create(0, 1 << 20).unwrap();
        let dup = seg.fd().try_clone_to_owned().unwrap();
        assert!(matches!(
            Segment::import(dup, 2 << 20),
            Err(Error::Bootstrap(_))
        ));
    }
}
