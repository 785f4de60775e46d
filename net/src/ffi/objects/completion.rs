//! Reading an endpoint's completion queue: waiting on it (the progress thread), reading it
//! without waiting (a task that drives progress), and its wait object, which an event loop
//! can watch instead of a thread blocking in the queue.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use ferroshmem_runtime::Result;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::{check, entry, Endpoint, Pending};
use crate::ffi::types::*;

/// What a read of the completion queue found besides the operations it ended: the data that
/// peers' writes delivered.
#[derive(Debug, Default)]
pub struct Completions {
    /// Operations ended (successfully or not).
    pub ended: usize,
    /// The remote CQ data of peers' writes that arrived, in order.
    pub remote: Vec<u64>,
}

/// A completion queue's wait object, holding its endpoint (and so the descriptor) open.
pub struct WaitObject {
    /// Never read: held so that the descriptor outlives the registration.
    _endpoint: Arc<Endpoint>,
    fd: RawFd,
}

impl AsRawFd for WaitObject {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl std::fmt::Debug for WaitObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitObject").field("fd", &self.fd).finish()
    }
}

/// Room for one read of the completion queue.
const BATCH: usize = 32;

impl Endpoint {
    /// Reads the completion queue, waiting up to `timeout_ms` for an entry (not at all when
    /// 0: then it only drives the provider's progress and reads what is there), and ends
    /// the operations it reports.
    pub fn progress(&self, timeout_ms: i32) -> Result<Completions> {
        let mut entries = [FiCqDataEntry {
            op_context: std::ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: std::ptr::null_mut(),
            data: 0,
        }; BATCH];
        let mut found = Completions::default();
        let buf = entries.as_mut_ptr().cast();
        // SAFETY: the CQ is live; `entries` has room for `BATCH` entries of the format the
        // CQ was opened with.
        let (rc, what) = unsafe {
            let ops = &*(*self.cq).ops;
            if timeout_ms == 0 {
                let read = entry(ops.read, "reading a completion queue")?;
                (read(self.cq, buf, BATCH), "fi_cq_read")
            } else {
                let sread = entry(ops.sread, "waiting on a completion queue")?;
                let rc = sread(self.cq, buf, BATCH, std::ptr::null(), timeout_ms);
                (rc, "fi_cq_sread")
            }
        };
        // Nothing read: none there, the wait's time ran out, or `interrupt` cut it short.
        if rc == -FI_EAGAIN || rc == -FI_ETIMEDOUT || rc == -FI_ECANCELED {
            return Ok(found);
        }
        if rc == -FI_EAVAIL {
            found.ended = usize::from(self.fail_one()?);
            return Ok(found);
        }
        check(&self.domain.lib, what, rc)?;
        // At most the batch asked for, whatever the provider says it wrote.
        for e in entries.iter().take(rc as usize) {
            if e.flags & FI_REMOTE_CQ_DATA != 0 && e.op_context.is_null() {
                found.remote.push(e.data);
                continue;
            }
            if e.op_context.is_null() {
                continue;
            }
            // SAFETY: a non-null context is the address of a record this endpoint posted,
            // still in its table (only its completion takes it out).
            let slot = unsafe { (*e.op_context.cast::<Pending>()).slot };
            self.end(slot, Ok(()));
            found.ended += 1;
        }
        Ok(found)
    }

    /// Reads one error completion and fails its operation; false when there was none left
    /// (another thread reading the queue took it first).
    fn fail_one(&self) -> Result<bool> {
        // SAFETY: the CQ is live; the error entry is a zeroed C structure the call fills.
        let (rc, entry_read, message) = unsafe {
            let ops = &*(*self.cq).ops;
            let mut err: FiCqErrEntry = std::mem::zeroed();
            let rc = entry(ops.readerr, "reading completion errors")?(self.cq, &mut err, 0);
            let message = match ops.strerror {
                Some(text) if rc > 0 => crate::ffi::c_text(text(
                    self.cq,
                    err.prov_errno,
                    err.err_data,
                    std::ptr::null_mut(),
                    0,
                )),
                _ => String::new(),
            };
            (rc, err, message)
        };
        if rc == -FI_EAGAIN {
            return Ok(false);
        }
        check(&self.domain.lib, "fi_cq_readerr", rc)?;
        let why = format!(
            "{} ({message})",
            self.domain.lib.strerror(entry_read.err as isize)
        );
        if !entry_read.op_context.is_null() {
            // SAFETY: as in `progress`.
            let slot = unsafe { (*entry_read.op_context.cast::<Pending>()).slot };
            self.end(slot, Err(why));
        }
        Ok(true)
    }

    /// Wakes a thread waiting in [`Endpoint::progress`].
    pub fn interrupt(&self) {
        // SAFETY: the CQ is live; `signal` only wakes its waiters.
        unsafe {
            if let Some(signal) = (*(*self.cq).ops).signal {
                signal(self.cq);
            }
        }
    }

    /// The completion queue's wait object, registered for readability with the current
    /// tokio runtime's reactor, where the provider offers a descriptor: it becomes readable
    /// when the queue may have entries or the provider progress to make. `None` off a
    /// runtime or where the provider has none.
    pub fn watch(self: &Arc<Endpoint>) -> Option<AsyncFd<WaitObject>> {
        tokio::runtime::Handle::try_current().ok()?;
        let object = WaitObject {
            _endpoint: self.clone(),
            fd: self.wait_fd()?,
        };
        // SAFETY: the descriptor is the CQ's wait object, closed only with the CQ when the
        // endpoint drops, and the object holds the endpoint: it stays open, the same file,
        // for the whole life of the registration.
        unsafe { AsyncFd::register_with_interest(object, Interest::READABLE) }.ok()
    }

    /// The file descriptor of the completion queue's wait object, if it has one.
    fn wait_fd(&self) -> Option<RawFd> {
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: the CQ is live; FI_GETWAIT on a queue whose wait object is a descriptor
        // writes one `int` to its argument.
        let rc = unsafe {
            let fid = &mut (*self.cq).fid;
            let control = (*fid.ops).control?;
            control(fid, FI_GETWAIT, (&mut fd as *mut std::ffi::c_int).cast())
        };
        (rc == 0 && fd >= 0).then_some(fd)
    }

    /// Whether the caller may now wait on [`Endpoint::wait_fd`] without missing an entry
    /// (`fi_trywait`): false when the queue must be read first.
    pub fn try_wait(&self) -> bool {
        let fabric = self.domain.fabric;
        let mut fids = [self.cq.cast::<Fid>()];
        // SAFETY: the fabric and the CQ are live; `fids` holds one object of this fabric.
        unsafe {
            let ops = &*(*fabric).ops;
            if ops.size < std::mem::offset_of!(FiOpsFabric, domain2) {
                return false;
            }
            match ops.trywait {
                Some(trywait) => trywait(fabric, fids.as_mut_ptr(), 1) == 0,
                None => false,
            }
        }
    }
}
