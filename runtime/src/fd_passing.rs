//! Passing file descriptors between processes of one node over a Unix socket (`SCM_RIGHTS`),
//! with a small byte payload riding along. Used to share symmetric-heap segments (memfds here,
//! CUDA VMM handles in the GPU crate) with same-node peers.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::error::{Error, Result};

/// Most descriptors sent in one message.
pub const MAX_FDS: usize = 16;

/// Sends `payload` (non-empty) and `fds` in one message.
pub fn send_fds(stream: &UnixStream, payload: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    if payload.is_empty() || fds.len() > MAX_FDS {
        return Err(Error::Config(format!(
            "send_fds needs a payload and at most {MAX_FDS} descriptors"
        )));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Error::os("send_fds", "control buffer too small"));
    }
    let sent = sendmsg(
        stream,
        &[IoSlice::new(payload)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .map_err(|e| Error::os("sending descriptors (sendmsg)", e))?;
    if sent != payload.len() {
        return Err(Error::os("sending descriptors (sendmsg)", "short write"));
    }
    Ok(())
}

/// Receives one message: its payload (at most `max_payload` bytes) and its descriptors.
pub fn recv_fds(stream: &UnixStream, max_payload: usize) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut payload = vec![0u8; max_payload];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut payload)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| Error::os("receiving descriptors (recvmsg)", e))?;
    if msg.bytes == 0 {
        return Err(Error::os("receiving descriptors", "peer closed the socket"));
    }
    payload.truncate(msg.bytes);
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    Ok((payload, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_and_payload_cross_a_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&file, 12345).unwrap();
        send_fds(&a, b"hello", &[file.as_fd()]).unwrap();
        let (payload, fds) = recv_fds(&b, 64).unwrap();
        assert_eq!(payload, b"hello");
        assert_eq!(fds.len(), 1);
        assert_eq!(rustix::fs::fstat(&fds[0]).unwrap().st_size, 12345);
    }
}
