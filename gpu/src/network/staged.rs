//! [`Staged`]: copies between host bytes and GPU memory on a stream of their own, through
//! pinned staging memory.
//!
//! Pageable host memory would make the driver stage the bytes itself, at a fraction of the
//! copy engines' speed (on the H200 machine, 512 KiB from the device took about three times
//! as long into pageable memory as into pinned). Copies are also batched: writes deferred
//! until a [`Staged::drain`] and the spans of [`Staged::to_host_many`] go as runs of
//! adjacent addresses, one copy per run (a kernel's blocks putting adjacent chunks make one
//! copy, not one each: each copy is a driver call, which under MPS costs tens of
//! microseconds), and a batch waits for the GPU once. A run that is one aligned 4- or 8-byte
//! word is written by a stream memory operation instead, all of a batch's in one call.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};
use ferroshmem_runtime::{Error, Result};

use super::coalesce::{runs_of, Pending, Run};
use crate::driver::{self, Pinned};

/// The pinned bytes copies go through; a larger copy goes a piece of this size at a time.
const STAGING_BYTES: usize = 1 << 20;

/// A run of one aligned 4- or 8-byte word (an 8-byte `p`, a signal set) as a stream memory
/// write: all such runs of a batch go in one driver call, where each would be a copy of its
/// own, and no copy engine is set to work for them. The runs of a batch are disjoint, so
/// their order among the copies does not matter.
fn word_write(addr: u64, bytes: &[u8]) -> Option<driver::MemOp> {
    let value = driver::Word::from_bytes(bytes)?;
    (addr % value.size() == 0).then_some(driver::MemOp::WriteWord { addr, value })
}

/// The staging memory and what uses it.
struct Staging {
    /// Deferred writes' bytes, at their staging offsets; reads' bytes.
    pinned: Pinned,
    /// Runs of adjacent deferred writes, packed for one copy each.
    packed: Pinned,
    /// Bytes from the start of `pinned` in use (writes waiting, copies queued).
    used: usize,
    /// Bytes from the start of `packed` in use by copies queued.
    packed_used: usize,
    /// Deferred writes not yet queued as copies.
    pending: Pending,
    /// Whether copies were queued and not yet waited for.
    queued: bool,
    /// Why deferred writes could not be queued: every later wait fails with it (those
    /// writes are lost; their requests must not be answered as done).
    failed: Option<Error>,
}

/// Copies between host bytes and GPU memory, one caller at a time.
pub(crate) struct Staged {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    staging: Mutex<Staging>,
}

/// A read queued into the staging memory: the run, and where its bytes land there.
type QueuedRead = (Run, Result<usize>);

impl Staged {
    /// Copies on a new stream of `ctx`, for `whom` (named in errors).
    pub fn new(ctx: &Arc<CudaContext>, whom: &str) -> Result<Self> {
        driver::bind(ctx)?;
        let stream = ctx
            .new_stream()
            .map_err(|e| Error::cuda(format!("creating {whom} stream: {e}")))?;
        Ok(Staged {
            ctx: ctx.clone(),
            stream,
            staging: Mutex::new(Staging {
                pinned: Pinned::new(ctx, STAGING_BYTES)?,
                packed: Pinned::new(ctx, STAGING_BYTES)?,
                used: 0,
                packed_used: 0,
                pending: Pending::default(),
                queued: false,
                failed: None,
            }),
        })
    }

    /// The stream the copies run on (other work queued there runs after them).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The staging memory, every deferred write done, with the context bound.
    fn idle(&self) -> Result<MutexGuard<'_, Staging>> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        self.wait(&mut staging)?;
        Ok(staging)
    }

    /// Queues the deferred writes and waits for every copy queued; all of the staging
    /// memory is free again.
    fn wait(&self, staging: &mut Staging) -> Result<()> {
        let issued = self.issue_pending(staging);
        staging.used = 0;
        staging.packed_used = 0;
        if std::mem::take(&mut staging.queued) {
            driver::stream_synchronize(self.stream.cu_stream())?;
        }
        issued
    }

    /// Queues the deferred writes ([`Staged::queue_runs`]); a failure is kept, so that every
    /// later wait reports it.
    fn issue_pending(&self, staging: &mut Staging) -> Result<()> {
        if let Some(failed) = &staging.failed {
            return Err(failed.clone());
        }
        let queued = self.queue_runs(staging);
        if let Err(e) = &queued {
            staging.failed = Some(e.clone());
        }
        queued
    }

    /// Queues the deferred writes, a copy per run of adjacent destinations (a run of several
    /// packed together first); their bytes stay in use until the next wait.
    fn queue_runs(&self, staging: &mut Staging) -> Result<()> {
        let mut packed_at = staging.packed_used;
        let mut words = Vec::new();
        for run in staging.pending.take_runs() {
            staging.queued = true;
            let stream = self.stream.cu_stream();
            if let [(at, len)] = run.parts[..] {
                match word_write(run.addr, &staging.pinned.bytes()[at..at + len]) {
                    Some(write) => words.push(write),
                    None => driver::copy_pinned_to_device_queued(
                        run.addr,
                        &staging.pinned,
                        at,
                        len,
                        stream,
                    )?,
                }
                continue;
            }
            let start = packed_at;
            for &(at, len) in &run.parts {
                // The copies in flight read `pinned` (as this does) and other bytes of
                // `packed` (those before `packed_at`).
                let bytes = &staging.pinned.bytes()[at..at + len];
                staging.packed.write_at(packed_at, bytes);
                packed_at += len;
            }
            staging.packed_used = packed_at;
            let len = packed_at - start;
            driver::copy_pinned_to_device_queued(run.addr, &staging.packed, start, len, stream)?;
        }
        if words.is_empty() {
            return Ok(());
        }
        driver::batch_mem_ops(self.stream.cu_stream(), &words)
    }

    /// Copies the GPU bytes at `addr` into `out`, done when this returns.
    pub fn to_host(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let mut staging = self.idle()?;
        self.to_host_idle(&mut staging, addr, out)
    }

    /// [`Staged::to_host`] with the staging memory already idle.
    fn to_host_idle(&self, staging: &mut Staging, addr: u64, out: &mut [u8]) -> Result<()> {
        for (i, piece) in out.chunks_mut(STAGING_BYTES).enumerate() {
            let from = addr + (i * STAGING_BYTES) as u64;
            self.queue_to_host(staging, from, piece.len())?;
            self.wait(staging)?;
            piece.copy_from_slice(&staging.pinned.bytes()[..piece.len()]);
        }
        Ok(())
    }

    /// The GPU bytes of each `(addr, len)` span, each with its own outcome: adjacent spans
    /// read by one copy, and as many as the staging memory holds waited for together.
    pub fn to_host_many(&self, spans: &[(u64, usize)]) -> Vec<Result<Vec<u8>>> {
        if spans.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<Option<Result<Vec<u8>>>> = vec![None; spans.len()];
        match self.idle() {
            Ok(mut staging) => self.read_runs(&mut staging, spans, &mut out),
            Err(e) => out.iter_mut().for_each(|o| *o = Some(Err(e.clone()))),
        }
        out.into_iter()
            .map(|o| o.unwrap_or(Err(Error::Shutdown)))
            .collect()
    }

    /// Reads `spans` into `out` (by index), run by run.
    fn read_runs(
        &self,
        staging: &mut Staging,
        spans: &[(u64, usize)],
        out: &mut [Option<Result<Vec<u8>>>],
    ) {
        let mut group: Vec<QueuedRead> = Vec::new();
        // A run longer than the staging memory goes span by span.
        let (long, runs): (Vec<Run>, Vec<Run>) = runs_of(spans)
            .into_iter()
            .partition(|r| r.len() > STAGING_BYTES);
        for run in long {
            for (index, len) in run.parts {
                let mut bytes = vec![0; len];
                let read = self.to_host_idle(staging, spans[index].0, &mut bytes);
                out[index] = Some(read.map(|()| bytes));
            }
        }
        for run in runs {
            if staging.used + run.len() > STAGING_BYTES {
                self.finish(staging, &mut group, out);
            }
            let at = staging.used;
            let queued = self.queue_to_host(staging, run.addr, run.len());
            group.push((run, queued.map(|()| at)));
        }
        self.finish(staging, &mut group, out);
    }

    /// Queues a copy of `len` GPU bytes at `addr` after what `staging` already uses.
    fn queue_to_host(&self, staging: &mut Staging, addr: u64, len: usize) -> Result<()> {
        let at = staging.used;
        staging.queued = true;
        driver::copy_device_to_pinned_queued(
            &staging.pinned,
            at,
            len,
            addr,
            self.stream.cu_stream(),
        )?;
        staging.used = at + len;
        Ok(())
    }

    /// Waits for the runs of `group` and hands each span its bytes (or the error).
    fn finish(
        &self,
        staging: &mut Staging,
        group: &mut Vec<QueuedRead>,
        out: &mut [Option<Result<Vec<u8>>>],
    ) {
        let waited = self.wait(staging);
        for (run, queued) in group.drain(..) {
            let mut at = match (&waited, &queued) {
                (Err(e), _) | (_, Err(e)) => {
                    for (index, _) in run.parts {
                        out[index] = Some(Err(e.clone()));
                    }
                    continue;
                }
                (Ok(()), Ok(at)) => *at,
            };
            for (index, len) in run.parts {
                out[index] = Some(Ok(staging.pinned.bytes()[at..at + len].to_vec()));
                at += len;
            }
        }
    }

    /// Copies `data` to the GPU bytes at `addr`, done when this returns.
    pub fn to_device(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.to_device_deferred(addr, data)?;
        self.drain()
    }

    /// Starts copying `data` to the GPU bytes at `addr`: done once [`Staged::drain`]
    /// returns, or any other copy through this staging memory; `data` is the caller's again
    /// at once. Deferred writes that overlap land in the order they were made: the writes
    /// waiting before one that overlaps them are queued first (the stream keeps the order).
    pub fn to_device_deferred(&self, addr: u64, data: &[u8]) -> Result<()> {
        let mut copy = |offset: usize, out: &mut [u8]| {
            out.copy_from_slice(&data[offset..offset + out.len()]);
            Ok(())
        };
        self.to_device_deferred_from(addr, data.len(), &mut copy)
    }

    /// [`Staged::to_device_deferred`] of `len` bytes that `fill(offset, out)` writes
    /// straight into the staging memory, a piece at a time (bytes `offset..offset +
    /// out.len()` of them).
    ///
    /// # Errors
    /// As [`Staged::to_device_deferred`], and `fill`'s (the pieces before are written).
    pub fn to_device_deferred_from(
        &self,
        addr: u64,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        for offset in (0..len).step_by(STAGING_BYTES) {
            let piece = (len - offset).min(STAGING_BYTES);
            let to = addr + offset as u64;
            if staging.used + piece > STAGING_BYTES {
                self.wait(&mut staging)?;
            } else if staging.pending.overlaps(to, piece) {
                self.issue_pending(&mut staging)?;
            }
            let at = staging.used;
            staging.pinned.fill_at(at, piece, |out| fill(offset, out))?;
            staging.pending.insert(to, at, piece);
            staging.used = at + piece;
        }
        Ok(())
    }

    /// [`Staged::to_device_deferred`] of the `len` bytes at `host`, host memory registered
    /// with the driver ([`driver::HostRegistration`]): copied from there by the copy engines,
    /// with no staging. The caller keeps those bytes as they are until the next wait
    /// ([`Staged::drain`]).
    ///
    /// # Errors
    /// As [`Staged::to_device_deferred`].
    pub fn to_device_deferred_from_host(&self, addr: u64, host: u64, len: usize) -> Result<()> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        if staging.pending.overlaps(addr, len) {
            // The writes deferred before it land first, as the stream keeps the order.
            self.issue_pending(&mut staging)?;
        }
        staging.queued = true;
        driver::copy_async(addr, host, len, self.stream.cu_stream())
    }

    /// As [`Staged::to_device_deferred`], but the copy lands after every write deferred
    /// before it: those are queued first (the stream keeps the order), not merged with it.
    pub fn to_device_after(&self, addr: u64, data: &[u8]) -> Result<()> {
        {
            driver::bind(&self.ctx)?;
            let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
            self.issue_pending(&mut staging)?;
        }
        self.to_device_deferred(addr, data)
    }

    /// Waits until every copy queued and every deferred write is done.
    pub fn drain(&self) -> Result<()> {
        self.idle().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::word_write;
    use crate::driver::{MemOp, Word};

    fn written(addr: u64, bytes: &[u8]) -> Option<(u64, Word)> {
        word_write(addr, bytes).map(|MemOp::WriteWord { addr, value }| (addr, value))
    }

    #[test]
    fn only_aligned_words_become_stream_writes() {
        let eight = 0x0102_0304_0506_0708u64.to_ne_bytes();
        assert_eq!(
            written(0x1000, &eight),
            Some((0x1000, Word::U64(0x0102_0304_0506_0708)))
        );
        assert_eq!(
            written(0x1004, &eight[..4]),
            Some((0x1004, Word::U32(u32::from_ne_bytes([8, 7, 6, 5]))))
        );
        assert_eq!(
            written(0x1004, &eight),
            None,
            "8 bytes at a 4-byte boundary"
        );
        assert_eq!(
            written(0x1002, &eight[..4]),
            None,
            "4 bytes off their boundary"
        );
        assert_eq!(written(0x1000, &eight[..6]), None, "neither 4 nor 8 bytes");
        assert_eq!(written(0x1000, &[]), None);
    }
}
