//! Distributed locks (`shmem_set_lock`, `shmem_test_lock`, `shmem_clear_lock`) on a
//! symmetric `u64` lock word, zero when free: an MCS queue lock built from atomics, so
//! waiters are served in arrival order and each spins (then sleeps) on its own word only.
//!
//! The lock word's low half, on the lock's home PE (chosen from the word's offset, to spread
//! locks over PEs), holds the queue's tail: the last PE to ask, plus one. Its high half, on
//! every PE, is that PE's queue node: the next PE in line (plus one), a "queued" bit and a
//! "granted" bit. A PE that asks swaps itself into the tail; if there was a predecessor, it
//! writes itself into the predecessor's node and waits for the "granted" bit in its own.
//! Releasing hands the lock to the successor by setting that bit, or swings the tail back to
//! zero when nobody waits. Every write is an atomic that rings the target's doorbell, and
//! every wait is the data plane's wait engine, so no wake-up is lost.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::segment::HEADER_SIZE;
use crate::wait::Cmp;

/// The node's "granted" bit: this PE holds the lock.
const GRANTED: u32 = 1 << 31;
/// The node's "queued" bit: this PE has asked for the lock.
const QUEUED: u32 = 1 << 30;
/// The node's successor field: the next PE in line, plus one.
const NEXT: u32 = QUEUED - 1;

/// A checked lock word: its two halves and its home PE.
struct Lock<'a> {
    tail: SymSlice<'a, u32>,
    node: SymSlice<'a, u32>,
    home: usize,
}

impl DataPlane {
    fn lock_word<'a>(&self, lock: SymSlice<'a, u64>) -> Result<Lock<'a>> {
        let offset = self.locate_atomic(lock)? - HEADER_SIZE;
        if self.n_pes() > NEXT as usize {
            return Err(Error::InvalidArgument(format!(
                "locks support at most {NEXT} PEs"
            )));
        }
        let bytes = lock.as_bytes();
        Ok(Lock {
            tail: bytes.slice(0..4).cast::<u32>(),
            node: bytes.slice(4..8).cast::<u32>(),
            home: (offset / 8) % self.n_pes(),
        })
    }

    /// Marks this PE's node queued, refusing a lock it already holds or waits for.
    fn enqueue_node(&self, lock: &Lock<'_>) -> Result<()> {
        let at = self.locate_atomic(lock.node)?;
        let node: &AtomicU32 = self.own_segment().mapping().atomic(at);
        node.compare_exchange(0, QUEUED, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| ())
            .map_err(|_| Error::LockHeld)
    }

    /// Acquires the lock `lock[0]` (`shmem_set_lock`), waiting in line behind the PEs that
    /// asked before. The lock word must be symmetric, zero initially, and used only through
    /// these calls.
    ///
    /// ```no_run
    /// # async fn f(pe: &ferroshmem_runtime::DataPlane, lock: &ferroshmem_runtime::SymBuffer<u64>) -> ferroshmem_runtime::Result<()> {
    /// pe.set_lock(lock).await?;
    /// // ... the critical section ...
    /// pe.clear_lock(lock).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LockHeld`] when this PE already holds the lock or waits for it (from another
    /// task); the view errors of atomics.
    ///
    /// Cancel safety: not cancel safe: once in line, dropping the future leaves the lock to
    /// this PE when its turn comes, and it is never released.
    pub async fn set_lock<'a>(&self, lock: impl Into<SymSlice<'a, u64>>) -> Result<()> {
        let lock = self.lock_word(lock.into())?;
        self.enqueue_node(&lock)?;
        let me = self.my_pe() as u32 + 1;
        let pred = self.atomic_swap(lock.tail, me, lock.home).await?;
        if pred == 0 {
            self.atomic_or(lock.node, GRANTED, self.my_pe()).await?;
            return Ok(());
        }
        self.atomic_or(lock.node, me, pred as usize - 1).await?;
        self.wait_until(lock.node, Cmp::Ge, GRANTED).await?;
        Ok(())
    }

    /// Acquires the lock if it is free (`shmem_test_lock`); resolves to whether it did.
    /// Never waits.
    ///
    /// # Errors
    /// [`Error::LockHeld`] when this PE already holds the lock or waits for it; the view
    /// errors of atomics.
    ///
    /// Cancel safety: cancel safe where the lock's home PE is on this node (every step
    /// completes as it is made, so the future is never dropped between two of them). Where
    /// the home PE is on another node, not cancel safe: dropped while its compare-and-swap
    /// travels, it may leave the lock taken by this PE, and never released.
    pub async fn test_lock<'a>(&self, lock: impl Into<SymSlice<'a, u64>>) -> Result<bool> {
        let lock = self.lock_word(lock.into())?;
        self.enqueue_node(&lock)?;
        let me = self.my_pe() as u32 + 1;
        if self
            .atomic_compare_swap(lock.tail, 0, me, lock.home)
            .await?
            == 0
        {
            self.atomic_or(lock.node, GRANTED, self.my_pe()).await?;
            return Ok(true);
        }
        self.atomic_set(lock.node, 0, self.my_pe()).await?;
        Ok(false)
    }

    /// Releases the lock (`shmem_clear_lock`) after completing this PE's outstanding
    /// operations (as `quiet`), handing it to the next PE in line.
    ///
    /// # Errors
    /// [`Error::LockNotHeld`] when this PE does not hold the lock; the completion's error
    /// (`quiet`'s), reported once the lock was released all the same.
    ///
    /// Cancel safety: not cancel safe: dropped while it waits for a successor to finish
    /// joining the line, it leaves the lock held.
    pub async fn clear_lock<'a>(&self, lock: impl Into<SymSlice<'a, u64>>) -> Result<()> {
        let lock = self.lock_word(lock.into())?;
        let me_pe = self.my_pe();
        let node = self.atomic_fetch(lock.node, me_pe).await?;
        if node & GRANTED == 0 {
            return Err(Error::LockNotHeld);
        }
        // A failed completion is reported once the lock is released: the PEs waiting for it
        // must not wait forever.
        let quieted = self.quiet().await;
        let released = self.release_lock(&lock, node, me_pe).await;
        quieted.and(released)
    }

    /// The release part of [`DataPlane::clear_lock`]: hands the lock at `lock` (whose node
    /// word read `node`) to the successor, or leaves it free.
    async fn release_lock(&self, lock: &Lock<'_>, node: u32, me_pe: usize) -> Result<()> {
        let me = me_pe as u32 + 1;
        let mut next = node & NEXT;
        if next == 0 {
            if self
                .atomic_compare_swap(lock.tail, me, 0, lock.home)
                .await?
                == me
            {
                self.atomic_set(lock.node, 0, me_pe).await?;
                return Ok(());
            }
            // A successor swapped itself in and is about to link itself to this node.
            let linked = self
                .wait_until(lock.node, Cmp::Gt, GRANTED | QUEUED)
                .await?;
            next = linked & NEXT;
        }
        self.atomic_set(lock.node, 0, me_pe).await?;
        self.atomic_or(lock.node, GRANTED, next as usize - 1).await
    }
}
