//! [`Staged`]: copies between host bytes and GPU memory on a stream of their own, through
//! pinned staging memory.
//!
//! Pageable host memory would make the driver stage the bytes itself, at a fraction of the
//! copy engines' speed (on the H200 machine, 512 KiB from the device took about three times
//! as long into pageable memory as into pinned). Copies can also be queued: writes deferred
//! until a [`Staged::drain`], reads of many spans waited for together, so that a batch of
//! small copies costs one synchronisation, not one each.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};
use ferroshmem_runtime::{Error, Result};

use crate::driver::{self, Pinned};

/// The pinned bytes copies go through; a larger copy goes a piece of this size at a time.
const STAGING_BYTES: usize = 1 << 20;

/// The staging memory and how much of it queued copies still use.
struct Staging {
    pinned: Pinned,
    /// Bytes from the start in use by copies queued and not yet waited for.
    queued: usize,
}

/// Copies between host bytes and GPU memory, one caller at a time.
pub(crate) struct Staged {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    staging: Mutex<Staging>,
}

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
                queued: 0,
            }),
        })
    }

    /// The stream the copies run on (other work queued there runs after them).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The staging memory, every copy queued from it done, with the context bound.
    fn idle(&self) -> Result<MutexGuard<'_, Staging>> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        self.wait(&mut staging)?;
        Ok(staging)
    }

    /// Waits for the copies queued from `staging`; all of it is free again.
    fn wait(&self, staging: &mut Staging) -> Result<()> {
        if staging.queued > 0 {
            staging.queued = 0;
            driver::stream_synchronize(self.stream.cu_stream())?;
        }
        Ok(())
    }

    /// Copies the GPU bytes at `addr` into `out`, done when this returns.
    pub fn to_host(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let mut staging = self.idle()?;
        for (i, piece) in out.chunks_mut(STAGING_BYTES).enumerate() {
            let from = addr + (i * STAGING_BYTES) as u64;
            self.queue_to_host(&mut staging, from, piece.len())?;
            self.wait(&mut staging)?;
            piece.copy_from_slice(&staging.pinned.bytes()[..piece.len()]);
        }
        Ok(())
    }

    /// The GPU bytes of each `(addr, len)` span, each with its own outcome, waited for
    /// together as far as the staging memory holds them.
    pub fn to_host_many(&self, spans: &[(u64, usize)]) -> Vec<Result<Vec<u8>>> {
        let mut out = Vec::with_capacity(spans.len());
        let mut staging = match self.idle() {
            Ok(staging) => staging,
            Err(e) => return spans.iter().map(|_| Err(e.clone())).collect(),
        };
        // Spans queued since the last wait: their place in the staging memory, or the error
        // that kept them from being queued.
        let mut group: Vec<Result<(usize, usize)>> = Vec::new();
        for &(addr, len) in spans {
            if len > STAGING_BYTES || staging.queued + len > STAGING_BYTES {
                self.finish(&mut staging, &mut group, &mut out);
            }
            if len > STAGING_BYTES {
                drop(staging);
                let mut bytes = vec![0; len];
                out.push(self.to_host(addr, &mut bytes).map(|()| bytes));
                staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            let at = staging.queued;
            group.push(
                self.queue_to_host(&mut staging, addr, len)
                    .map(|()| (at, len)),
            );
        }
        self.finish(&mut staging, &mut group, &mut out);
        out
    }

    /// Queues a copy of `len` GPU bytes at `addr` after those already queued in `staging`.
    fn queue_to_host(&self, staging: &mut Staging, addr: u64, len: usize) -> Result<()> {
        let at = staging.queued;
        driver::copy_device_to_pinned_queued(
            &staging.pinned,
            at,
            len,
            addr,
            self.stream.cu_stream(),
        )?;
        staging.queued = at + len;
        Ok(())
    }

    /// Waits for the spans of `group` and moves their bytes (or the error) into `out`.
    fn finish(
        &self,
        staging: &mut Staging,
        group: &mut Vec<Result<(usize, usize)>>,
        out: &mut Vec<Result<Vec<u8>>>,
    ) {
        let waited = self.wait(staging);
        for queued in group.drain(..) {
            out.push(match (&waited, &queued) {
                (Err(e), _) | (_, Err(e)) => Err(e.clone()),
                (Ok(()), Ok((at, len))) => Ok(staging.pinned.bytes()[*at..at + len].to_vec()),
            });
        }
    }

    /// Copies `data` to the GPU bytes at `addr`, done when this returns.
    pub fn to_device(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.to_device_deferred(addr, data)?;
        self.drain()
    }

    /// Starts copying `data` to the GPU bytes at `addr`: done once [`Staged::drain`]
    /// returns, or any other copy through this staging memory; `data` is the caller's again
    /// at once. Copies land in the order they were queued.
    pub fn to_device_deferred(&self, addr: u64, data: &[u8]) -> Result<()> {
        driver::bind(&self.ctx)?;
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, piece) in data.chunks(STAGING_BYTES).enumerate() {
            if staging.queued + piece.len() > STAGING_BYTES {
                self.wait(&mut staging)?;
            }
            let at = staging.queued;
            staging.pinned.write_at(at, piece);
            let to = addr + (i * STAGING_BYTES) as u64;
            driver::copy_pinned_to_device_queued(
                to,
                &staging.pinned,
                at,
                piece.len(),
                self.stream.cu_stream(),
            )?;
            staging.queued = at + piece.len();
        }
        Ok(())
    }

    /// Waits until every copy queued is done.
    pub fn drain(&self) -> Result<()> {
        self.idle().map(drop)
    }
}
