//! Signals: put-with-signal (`shmem_put_signal`), remote signal updates (`signal_op`), and the
//! local `signal_fetch` / `signal_wait_until`. A signal is a `u64` in the symmetric heap; the
//! data of a put-with-signal is visible before its signal update.

use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::landing::{nothing, Landing};
use crate::route::{Amo, Completion, Domain, RemoteOp, Route};
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

impl SignalOp {
    /// The atomic that applies this update with `value`.
    fn amo(self, value: u64) -> Amo {
        match self {
            SignalOp::Set => Amo::Swap(value),
            SignalOp::Add => Amo::Add(value),
        }
    }
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
    #[inline(always)]
    pub fn put_signal<'d, 'g, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: &[T],
        sig: impl Into<SymSlice<'g, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Landing<()> {
        match self.start_put_signal(dest.into(), src, (sig.into(), value, op), pe, None) {
            Ok(None) => Landing::ready(Ok(())),
            Ok(Some(remote)) => Landing::remote(self.awaited(remote), nothing),
            Err(e) => Landing::ready(Err(e)),
        }
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
        if let Some(remote) =
            self.start_put_signal(dest.into(), src, (sig.into(), value, op), pe, None)?
        {
            self.defer(remote);
        }
        Ok(())
    }

    /// Validates a put-with-signal and does it on a mapped route, or starts it on the remote
    /// one and returns its completion.
    #[inline(always)]
    pub(crate) fn start_put_signal<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: &[T],
        (sig, value, op): (SymSlice<'_, u64>, u64, SignalOp),
        pe: usize,
        domain: Option<&Domain>,
    ) -> Result<Option<Completion>> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let moved = bytes.len() + 8;
        let (route, (at, sig_at)) = self.validate(pe, || {
            let at = self.locate(dest, src.len(), "put_signal destination")?;
            Ok((at, self.locate_atomic(sig)?))
        })?;
        Ok(match route {
            Route::Mapped(target) => {
                self.mapped(Op::PutSignal, pe, moved, || {
                    target.mapping().write(at, bytes);
                    update_signal(target, sig_at, value, op);
                    target.wake_watchers(at, at + bytes.len());
                });
                None
            }
            Route::Remote => {
                let remote = || RemoteOp::PutSignal {
                    data: bytes.to_vec(),
                    signal_at: sig_at,
                    signal: op.amo(value),
                };
                Some(self.remote_in(domain, Op::PutSignal, pe, (moved, at), remote))
            }
        })
    }

    /// Updates `sig[0]` on PE `pe` with `op` and `value` (`nvshmemx_signal_op`).
    #[inline(always)]
    pub fn signal_op<'s>(
        &self,
        sig: impl Into<SymSlice<'s, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Landing<()> {
        self.signal_op_in(None, sig.into(), (value, op), pe)
    }

    /// [`DataPlane::signal_op`] in ordering domain `domain` (`None`: the default context's).
    #[inline(always)]
    pub(crate) fn signal_op_in(
        &self,
        domain: Option<&Domain>,
        sig: SymSlice<'_, u64>,
        (value, op): (u64, SignalOp),
        pe: usize,
    ) -> Landing<()> {
        let (route, at) = match self.validate(pe, || self.locate_atomic(sig)) {
            Ok(valid) => valid,
            Err(e) => return Landing::ready(Err(e)),
        };
        match route {
            Route::Mapped(target) => {
                self.mapped(Op::Signal, pe, 8, || update_signal(target, at, value, op));
                Landing::ready(Ok(()))
            }
            Route::Remote => {
                let remote = || RemoteOp::Amo {
                    op: op.amo(value),
                    width: 8,
                };
                Landing::remote(
                    self.awaited(self.remote_in(domain, Op::Signal, pe, (8, at), remote)),
                    nothing,
                )
            }
        }
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
