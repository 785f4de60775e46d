//! Writes that complete once sent: `fi_writemsg` with inject completion, which the endpoint's
//! default (delivery completion) does not give.

use std::ffi::c_void;

use ferroshmem_runtime::Result;

use super::objects::entry;
use super::types::*;

/// Posts a write of `len` bytes at `buf`, delivering `data` with the target's completion of
/// it, that completes once the provider took the bytes (`FI_INJECT_COMPLETE`), not once the
/// target placed them: [`super::Operation::WriteSent`].
///
/// # Safety
/// `ep` is live and `rma` its RMA operations; `buf` holds `len` bytes and `ctx` is a live
/// record, until the write completes.
pub(super) unsafe fn write_sent(
    rma: &FiOpsRma,
    ep: *mut FidEp,
    (buf, len): (*mut c_void, usize),
    (peer, remote, key): (FiAddr, u64, u64),
    ctx: *mut c_void,
    data: u64,
) -> Result<isize> {
    let iov = IoVec { base: buf, len };
    let rma_iov = FiRmaIov {
        addr: remote,
        len,
        key,
    };
    let msg = FiMsgRma {
        msg_iov: &iov,
        desc: std::ptr::null_mut(),
        iov_count: 1,
        addr: peer,
        rma_iov: &rma_iov,
        rma_iov_count: 1,
        context: ctx,
        data,
    };
    let flags = FI_INJECT_COMPLETE | FI_COMPLETION | FI_REMOTE_CQ_DATA;
    // SAFETY: the caller's contract; `msg` and what it points to live through the call,
    // which copies what it keeps.
    Ok(unsafe { entry(rma.writemsg, "RMA write messages")?(ep, &msg, flags) })
}
