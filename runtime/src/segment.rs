//! One PE's symmetric-heap segment in host memory: an anonymous shared-memory file (memfd)
//! with a small control header followed by the heap proper.
//!
//! A memfd has no name in any filesystem, so nothing is left in `/dev/shm` whatever way the
//! job ends, SIGKILL included: the memory goes away with the last process that maps it or
//! holds its descriptor. Peers on the node receive the descriptor over a Unix socket
//! ([`crate::fd_passing`]). The file's mode is set to 0600.
//!
//! Header layout (each word that peers write on its own cache line, so that writers from
//! different PEs do not share lines): a first line that only the owner writes (magic, owner
//! pid, whether one of its world barriers broke, how many it has begun, the number of its
//! final barrier once it has begun to finalize, the first peer it learned was lost), the
//! wake sequence (a futex word), the watcher mask (which watch slots are in
//! use), the count of sleepers that watch everything, one flag per dissemination-barrier
//! round, and the watch slots: the byte range each sleeping waiter watches, so that a write
//! rings the doorbell only when it lands on memory somebody sleeps on, and costs one load
//! when nobody sleeps; then the owner's records of its CPUs: those it may run on, as at the
//! segment's creation, and the one it is bound to, once bound.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use bytemuck::Zeroable;

use crate::cpus::CpuShare;
use crate::error::{Error, Result};
use crate::landed::WriteCounters;
use crate::shared_memory::SharedMapping;

/// Bytes reserved in front of the heap for control words.
pub const HEADER_SIZE: usize = 16 * 1024;
/// The largest alignment a PE's own heap start is placed at (see [`heap_alignment`]).
pub const MAX_HEAP_ALIGN: usize = 1 << 30;
const CACHE_LINE: usize = 64;
const MAGIC: u64 = 0x6665_7272_6f73_686d; // "ferroshm"
const MAGIC_OFFSET: usize = 0;
const PID_OFFSET: usize = 8;
const BARRIER_BROKEN_OFFSET: usize = 16;
const BARRIERS_BEGUN_OFFSET: usize = 24;
const FINALIZING_OFFSET: usize = BARRIERS_BEGUN_OFFSET + 8;
const LOST_PEER_OFFSET: usize = 40;
const WAKE_SEQ_OFFSET: usize = CACHE_LINE;
const WATCHERS_OFFSET: usize = 2 * CACHE_LINE;
const WILDCARD_OFFSET: usize = 3 * CACHE_LINE;
const BARRIER_FLAGS_OFFSET: usize = 4 * CACHE_LINE;
/// Number of dissemination-barrier rounds the header has flags for (2^64 PEs).
pub const BARRIER_ROUNDS: usize = 64;
const WATCH_SLOTS_OFFSET: usize = BARRIER_FLAGS_OFFSET + BARRIER_ROUNDS * CACHE_LINE;
/// Number of sleepers whose watched range the header can hold; more watch everything.
pub const WATCH_SLOTS: usize = 63;
/// Where the owner records the CPUs it may run on ([`CpuShare`]), on a line of its own.
const CPU_SHARE_OFFSET: usize =
    (WATCH_SLOTS_OFFSET + WATCH_SLOTS * 16).next_multiple_of(CACHE_LINE);
/// Where the owner records the one CPU it is bound to, plus one (0: none, or not recorded),
/// once its binding is done: on a line of its own after the CPU share.
const BOUND_CPU_OFFSET: usize = (CPU_SHARE_OFFSET + CpuShare::BYTES).next_multiple_of(CACHE_LINE);
/// The watcher-mask bit set once a sleeper has had to watch everything. It is never cleared:
/// clearing it when the wildcard count drops to zero would race with a new wildcard sleeper
/// that has counted itself but not yet set the bit, whose wake-ups writers would then skip.
const OVERFLOW: u64 = 1 << 63;
/// A slot's end while its start is being written: writers treat it as a match.
const SLOT_CLAIMED: u64 = u64::MAX;

/// How a sleeping waiter is registered in its segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Watching one byte range, in watch slot `i`.
    Slot(usize),
    /// Watching every write (no slot was free).
    Everything,
}

/// A mapped segment: the memfd and its mapping.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    map: SharedMapping,
    heap_size: usize,
    /// The owner's in-process bell, once its doorbell has started (on the owner's own
    /// segment object only): what the doorbell thread notifies, for [`Segment::wake_here`].
    bell: OnceLock<Arc<Notify>>,
    /// Whether the owner's doorbell thread may be asleep without a tick (true until it says
    /// otherwise): only then must a first sleeper ring it (see [`Segment::watch`]).
    dozing: AtomicBool,
    /// The counters of peers' writes (on the owner's segment object, see [`crate::landed`]).
    pub(crate) counters: WriteCounters,
}

/// The alignment of the start of a PE's own heap of `heap_size` bytes, in its process: the
/// size rounded up to a power of two, between a page and [`MAX_HEAP_ALIGN`]; with pages
/// larger than [`HEADER_SIZE`] (64 KiB pages), what the header's size leaves, as the heap
/// starts that far past a page boundary. The same on every PE (they share one heap size and
/// one kind of machine), so that heap offsets aligned to it or less give addresses aligned
/// alike on every PE (`shmem_align`).
pub fn heap_alignment(heap_size: usize) -> usize {
    let page = crate::shared_memory::page_size();
    if HEADER_SIZE % page != 0 {
        return 1 << HEADER_SIZE.trailing_zeros();
    }
    heap_size
        .checked_next_power_of_two()
        .unwrap_or(MAX_HEAP_ALIGN)
        .clamp(page, MAX_HEAP_ALIGN)
}

impl Segment {
    /// Mapping offset of the count of world barriers begun, which the word of
    /// [`Segment::finalizing`] follows, for peers that read both remotely.
    pub const BARRIERS_BEGUN_OFFSET: usize = BARRIERS_BEGUN_OFFSET;
    /// Mapping offset of the word of [`Segment::barrier_broken`], for peers that read it
    /// remotely.
    pub const BARRIER_BROKEN_OFFSET: usize = BARRIER_BROKEN_OFFSET;
    /// Mapping offset of the word of [`Segment::finalizing`], for peers that read it
    /// remotely.
    pub const FINALIZING_OFFSET: usize = FINALIZING_OFFSET;

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
        let map = SharedMapping::map_aligned(&fd, total, heap_alignment(heap_size), HEADER_SIZE)?;
        map.write(PID_OFFSET, &std::process::id().to_ne_bytes());
        map.write(
            CPU_SHARE_OFFSET,
            bytemuck::bytes_of(&CpuShare::of_this_thread()),
        );
        map.atomic::<AtomicU64>(MAGIC_OFFSET)
            .store(MAGIC, Ordering::Release);
        Ok(Segment::mapped(fd, map, heap_size))
    }

    /// A segment over `map` of `fd`, with no doorbell yet and no write counters.
    fn mapped(fd: OwnedFd, map: SharedMapping, heap_size: usize) -> Segment {
        Segment {
            fd,
            map,
            heap_size,
            bell: OnceLock::new(),
            dozing: AtomicBool::new(true),
            counters: WriteCounters::default(),
        }
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
        Ok(Segment::mapped(fd, map, heap_size))
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

    /// The CPUs the owner may run on, as it recorded them when it created the segment.
    pub fn cpu_share(&self) -> CpuShare {
        let mut share = CpuShare::zeroed();
        self.map
            .read(CPU_SHARE_OFFSET, bytemuck::bytes_of_mut(&mut share));
        share
    }

    /// Records `cpu` as the one CPU the owner is bound to (`None`: several, or unknown), for
    /// the PEs that share its node to read (`Segment::bound_cpu`, within the runtime).
    pub fn record_bound_cpu(&self, cpu: Option<usize>) {
        let word = cpu.map_or(0, |c| c as u64 + 1);
        self.map
            .atomic::<AtomicU64>(BOUND_CPU_OFFSET)
            .store(word, Ordering::Release);
    }

    /// The one CPU the owner recorded as bound to, if it did.
    pub(crate) fn bound_cpu(&self) -> Option<usize> {
        let word = self
            .map
            .atomic::<AtomicU64>(BOUND_CPU_OFFSET)
            .load(Ordering::Acquire);
        word.checked_sub(1).map(|c| c as usize)
    }

    /// Records `share` as the owner's CPUs (as `create` does), for tests that play PEs
    /// placed otherwise.
    #[cfg(test)]
    pub(crate) fn record_cpu_share(&self, share: &CpuShare) {
        self.map.write(CPU_SHARE_OFFSET, bytemuck::bytes_of(share));
    }

    /// The futex word bumped by writers when the owner has sleeping waiters.
    pub fn wake_seq(&self) -> &AtomicU32 {
        self.map.atomic(WAKE_SEQ_OFFSET)
    }

    /// Bit `i` set: watch slot `i` holds a sleeper's range; bit 63: some sleeper may watch
    /// everything (see the wildcard count).
    #[inline]
    fn watchers(&self) -> &AtomicU64 {
        self.map.atomic(WATCHERS_OFFSET)
    }

    #[inline]
    fn wildcards(&self) -> &AtomicU32 {
        self.map.atomic(WILDCARD_OFFSET)
    }

    /// Whether any of the owner's waiters sleeps.
    pub fn has_sleepers(&self) -> bool {
        let mask = self.watchers().load(Ordering::SeqCst);
        mask & !OVERFLOW != 0
            || (mask & OVERFLOW != 0 && self.wildcards().load(Ordering::SeqCst) != 0)
    }

    /// Set by the owner once one of its world barriers was left unfinished: from then on it
    /// signals no barrier again, so peers waiting for its signal stop waiting.
    pub fn barrier_broken(&self) -> &AtomicU64 {
        self.map.atomic(BARRIER_BROKEN_OFFSET)
    }

    /// How many world barriers the owner has begun, for peers that check the order of their
    /// world collectives against it.
    pub fn barriers_begun(&self) -> &AtomicU64 {
        self.map.atomic(BARRIERS_BEGUN_OFFSET)
    }

    /// Set by the owner once it has begun to finalize, to the number of its final world
    /// barrier: it makes no other collective call any more.
    pub fn finalizing(&self) -> &AtomicU64 {
        self.map.atomic(FINALIZING_OFFSET)
    }

    /// Set by the owner to 1 + the first PE it learned was lost (0 while it knows of none),
    /// before its own calls fail — or to 1 + its own number when it gives a call up while
    /// it panics: a peer that sees one of those calls given up can tell a lost PE from a
    /// mismatch.
    pub fn lost_peer(&self) -> &AtomicU64 {
        self.map.atomic(LOST_PEER_OFFSET)
    }

    /// The counter signalled in dissemination-barrier round `round`.
    pub fn barrier_flag(&self, round: usize) -> &AtomicU64 {
        assert!(round < BARRIER_ROUNDS);
        self.map.atomic(Self::barrier_flag_offset(round))
    }

    #[inline]
    fn slot(&self, i: usize) -> (&AtomicU64, &AtomicU64) {
        let at = WATCH_SLOTS_OFFSET + i * 16;
        (self.map.atomic(at), self.map.atomic(at + 8))
    }

    /// Registers a waiter about to sleep on mapping bytes `[start, end)`. The waiter must
    /// re-check its condition after this and before it sleeps.
    pub fn watch(&self, start: usize, end: usize) -> Watch {
        let (start, end) = (start as u64, (end as u64).max(start as u64 + 1));
        let free = (0..WATCH_SLOTS).find(|&i| {
            self.slot(i)
                .1
                .compare_exchange(0, SLOT_CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        let (watch, before) = match free {
            Some(i) => {
                let (slot_start, slot_end) = self.slot(i);
                slot_start.store(start, Ordering::Relaxed);
                slot_end.store(end, Ordering::Relaxed);
                // SeqCst: publishes the range and pairs with the writers' SeqCst fence.
                (
                    Watch::Slot(i),
                    self.watchers().fetch_or(1 << i, Ordering::SeqCst),
                )
            }
            None => {
                self.wildcards().fetch_add(1, Ordering::SeqCst);
                (
                    Watch::Everything,
                    self.watchers().fetch_or(OVERFLOW, Ordering::SeqCst),
                )
            }
        };
        if before & !OVERFLOW == 0 && self.dozing.load(Ordering::SeqCst) {
            // Tell the doorbell thread that someone sleeps, so that it ticks for timeouts. It
            // sleeps without a tick only after it set `dozing` and then `has_sleepers` found
            // no slot in use (both SeqCst): every registration is a SeqCst update of the mask
            // before its SeqCst load of `dozing`, so either the thread sees the sleeper and
            // ticks, or the first registration after its check sees `dozing` and rings. The
            // overflow bit says nothing here: it stays set once any sleeper has watched
            // everything, sleepers or not.
            self.ring();
        }
        watch
    }

    /// Undoes [`Segment::watch`].
    pub fn unwatch(&self, watch: Watch) {
        match watch {
            Watch::Slot(i) => {
                self.watchers().fetch_and(!(1 << i), Ordering::SeqCst);
                self.slot(i).1.store(0, Ordering::Release);
            }
            Watch::Everything => {
                // The overflow bit stays set: writers then also read the wildcard count.
                self.wildcards().fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// After a write of mapping bytes `[start, end)`: wakes the owner's waiters if one sleeps
    /// on them. Costs one load when nobody sleeps.
    ///
    /// The caller must have made its write visible first with a SeqCst operation (an atomic
    /// read-modify-write or a SeqCst fence): that pairs with the waiter's SeqCst update of the
    /// watcher mask in [`Segment::watch`], so either the writer sees the watcher (and its
    /// range) or the waiter sees the data.
    #[inline]
    pub fn wake_watchers(&self, start: usize, end: usize) {
        let mask = self.watchers().load(Ordering::SeqCst);
        if mask != 0 && self.watched(mask, start as u64, end as u64) {
            self.ring();
        }
    }

    /// [`Segment::wake_watchers`] for a write that the owner's own process learned of (a
    /// fabric peer's write, handed on by the owner's endpoint), called on the owner's segment:
    /// notifies the waiters through the doorbell's bell directly, one thread wake-up fewer
    /// than through the doorbell thread. It still counts as a ring (the wake sequence moves),
    /// but wakes no thread sleeping on the futex. Rings as `wake_watchers` does before the
    /// doorbell has started. The same ordering contract holds.
    pub fn wake_here(&self, start: usize, end: usize) {
        let mask = self.watchers().load(Ordering::SeqCst);
        if mask != 0 && self.watched(mask, start as u64, end as u64) {
            match self.bell.get() {
                Some(bell) => {
                    self.wake_seq().fetch_add(1, Ordering::SeqCst);
                    bell.notify_waiters();
                }
                None => self.ring(),
            }
        }
    }

    /// Called by the owner's doorbell thread before it sleeps: `true` before a sleep without
    /// a tick (then it checks [`Segment::has_sleepers`] again), `false` before ticking ones.
    pub(crate) fn set_dozing(&self, dozing: bool) {
        self.dozing.store(dozing, Ordering::SeqCst);
    }

    /// Gives the owner's segment the bell its doorbell thread notifies; the first is kept.
    pub(crate) fn set_bell(&self, bell: Arc<Notify>) {
        let _ = self.bell.set(bell);
    }

    fn watched(&self, mask: u64, start: u64, end: u64) -> bool {
        if mask & OVERFLOW != 0 && self.wildcards().load(Ordering::SeqCst) != 0 {
            return true;
        }
        let mut slots = mask & !OVERFLOW;
        while slots != 0 {
            let i = slots.trailing_zeros() as usize;
            slots &= slots - 1;
            let (slot_start, slot_end) = self.slot(i);
            let hit = match slot_end.load(Ordering::Acquire) {
                0 => false,
                SLOT_CLAIMED => true,
                e => slot_start.load(Ordering::Relaxed) < end && start < e,
            };
            if hit {
                return true;
            }
        }
        false
    }

    /// Mapping offset of the barrier flag of `round`.
    pub fn barrier_flag_offset(round: usize) -> usize {
        BARRIER_FLAGS_OFFSET + round * CACHE_LINE
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

const _: () = assert!(BOUND_CPU_OFFSET + 8 <= HEADER_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_starts_at_its_alignment() {
        if HEADER_SIZE % crate::shared_memory::page_size() == 0 {
            assert_eq!(heap_alignment(0), crate::shared_memory::page_size());
            assert_eq!(heap_alignment(3 << 20), 4 << 20);
            assert_eq!(heap_alignment(1 << 30), 1 << 30);
            assert_eq!(heap_alignment(64 << 30), MAX_HEAP_ALIGN);
        }
        for size in [1 << 20, 3 << 20, 64 << 20, 1_000_000] {
            let segs: Vec<_> = (0..4)
                .map(|pe| Segment::create(pe, size).unwrap())
                .collect();
            for seg in &segs {
                let start = seg.mapping().base_addr() + HEADER_SIZE;
                assert_eq!(
                    start % heap_alignment(size),
                    0,
                    "heap of {size} bytes at {start:#x}"
                );
            }
        }
    }

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
        assert_eq!(peer.cpu_share(), CpuShare::of_this_thread());
        assert_eq!(peer.bound_cpu(), None, "nothing recorded yet");
        seg.record_bound_cpu(Some(0));
        assert_eq!(peer.bound_cpu(), Some(0));
        seg.record_bound_cpu(None);
        assert_eq!(peer.bound_cpu(), None);
        peer.barrier_flag(3).fetch_add(1, Ordering::SeqCst);
        assert_eq!(seg.barrier_flag(3).load(Ordering::SeqCst), 1);
    }

    #[test]
    fn only_writes_to_watched_bytes_ring() {
        let seg = Segment::create(0, 1 << 20).unwrap();
        let rings = || seg.wake_seq().load(Ordering::SeqCst);
        let w = seg.watch(HEADER_SIZE + 64, HEADER_SIZE + 72);
        assert!(matches!(w, Watch::Slot(_)));
        let before = rings();
        seg.wake_watchers(HEADER_SIZE, HEADER_SIZE + 64);
        assert_eq!(rings(), before, "a write next to the watched word");
        seg.wake_watchers(HEADER_SIZE + 68, HEADER_SIZE + 69);
        assert_eq!(rings(), before + 1, "a write inside it");
        seg.unwatch(w);
        seg.wake_watchers(HEADER_SIZE + 64, HEADER_SIZE + 72);
        assert_eq!(rings(), before + 1, "nobody sleeps any more");
        let slots: Vec<Watch> = (0..WATCH_SLOTS + 1)
            .map(|i| seg.watch(i * 8, i * 8 + 8))
            .collect();
        assert_eq!(slots[WATCH_SLOTS], Watch::Everything);
        let before = rings();
        seg.wake_watchers(HEADER_SIZE + 4096, HEADER_SIZE + 4100);
        assert_eq!(
            rings(),
            before + 1,
            "an overflowing sleeper watches everything"
        );
        slots.into_iter().for_each(|w| seg.unwatch(w));
        assert!(!seg.has_sleepers());
    }

    #[test]
    fn the_first_sleeper_after_an_overflow_rings() {
        let seg = Segment::create(0, 1 << 20).unwrap();
        let rings = || seg.wake_seq().load(Ordering::SeqCst);
        let overflowed: Vec<Watch> = (0..WATCH_SLOTS + 1)
            .map(|i| seg.watch(i * 8, i * 8 + 8))
            .collect();
        overflowed.into_iter().for_each(|w| seg.unwatch(w));
        assert!(!seg.has_sleepers());
        let before = rings();
        let w = seg.watch(HEADER_SIZE, HEADER_SIZE + 8);
        assert!(seg.has_sleepers());
        assert_eq!(rings(), before + 1, "the doorbell must learn to tick again");
        seg.unwatch(w);
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
