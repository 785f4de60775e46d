//! Signals: put-with-signal (`shmem_put_signal`), remote signal updates (`signal_op`), and the
//! local `signal_fetch` / `signal_wait_until`. A signal is a `u64` in the symmetric heap; the
//! data of a put-with-signal is visible before its signal update.

use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::segment::Segment;
use crate::wait::{Cmp, Wait};

/// How a signal word is updated (`SHMEM_SIGNAL_SET` / `SHMEM_SIGNAL_ADD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalOp {
    /// Replace the signal with the value.
    Set,
    /// Add the value to the signal (wrapping).
    Add,
}

/// Applies `op` to the signal at `at` of `target` (a SeqCst read-modify-write, which orders
/// the data written before it and pairs with the wake-up protocol), then wakes sleepers.
#[inline]
fn update_signal(target: &Segment, at: usize, value: u64, op: SignalOp) {
    let word: &AtomicU64 = target.mapping().atomic(at);
    match op {
        SignalOp::Set => {
            word.swap(value, Ordering::SeqCst);
        }
        SignalOp::Add => {
            word.fetch_add(value, Ordering::SeqCst);
        }
    }
    target.wake_watchers(at, at + 8);
}

impl DataPlane {
    /// Copies `src` into `dest` on PE `pe`, then updates `sig[0]` there with `op` and `value`
    /// (`shmem_put_signal`). A PE that sees the signal change sees the data.
    pub async fn put_signal<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        src: &[T],
        sig: impl Into<SymSlice<'_, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        self.put_signal_nbi(dest, src, sig, value, op, pe)
    }

    /// Non-blocking form of [`DataPlane::put_signal`] (`shmem_put_signal_nbi`).
    pub fn put_signal_nbi<'d, 'g, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: &[T],
        sig: impl Into<SymSlice<'g, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        let moved = std::mem::size_of_val(src) + 8;
        self.counted(
            Op::PutSignal,
            pe,
            moved,
            || {
                let target = self.segment(pe)?;
                let at = self.locate(dest.into(), src.len(), "put_signal destination")?;
                Ok((target, at, self.locate_atomic(sig.into())?))
            },
            |(target, at, sig_at)| {
                let bytes: &[u8] = bytemuck::cast_slice(src);
                target.mapping().write(at, bytes);
                update_signal(target, sig_at, value, op);
                target.wake_watchers(at, at + bytes.len());
            },
        )
    }

    /// Updates `sig[0]` on PE `pe` with `op` and `value` (`nvshmemx_signal_op`).
    pub async fn signal_op(
        &self,
        sig: impl Into<SymSlice<'_, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        self.counted(
            Op::Signal,
            pe,
            8,
            || {
                let target = self.segment(pe)?;
                Ok((target, self.locate_atomic(sig.into())?))
            },
            |(target, at)| {
                update_signal(target, at, value, op);
            },
        )
    }

    /// Reads this PE's `sig[0]` (`shmem_signal_fetch`).
    pub fn signal_fetch<'s>(&self, sig: impl Into<SymSlice<'s, u64>>) -> Result<u64> {
        let at = self.locate_atomic(sig.into())?;
        Ok(self
            .own_segment()
            .mapping()
            .atomic::<AtomicU64>(at)
            .load(Ordering::Acquire))
    }

    /// Waits until this PE's `sig[0]` satisfies `cmp value`; resolves to the signal's value
    /// (`shmem_signal_wait_until`).
    pub fn signal_wait_until<'s>(
        &self,
        sig: impl Into<SymSlice<'s, u64>>,
        cmp: Cmp,
        value: u64,
    ) -> Wait<'_, impl FnMut() -> Option<u64> + Unpin + Send + '_> {
        self.wait_until(sig, cmp, value)
    }
}
