//! Passing file descriptors between processes of one node over a Unix socket (`SCM_RIGHTS`),
//! with a small byte payload riding along: the one way symmetric-heap segments (memfds of host
//! PEs, CUDA VMM handles of GPU PEs) reach same-node peers.
//!
//! # Messages
//! [`send_fds`] and [`recv_fds`] move one payload and its descriptors over a connected socket.
//!
//! # Serving a descriptor
//! An [`FdServer`] serves one descriptor, with a payload, on an abstract Unix socket (no file
//! is created, so nothing is left behind however the process ends) to every peer that first
//! presents the server's token, a secret the job's members learned through the control plane;
//! [`fetch_fd`] is the peer's side. A peer with a wrong token gets nothing and the server
//! serves on.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

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

/// How long a server gives a connected peer to present its token.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The abstract socket address called `name`.
fn abstract_address(name: &str) -> Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| Error::os("abstract socket name", e))
}

/// Serves one descriptor and its payload until dropped; see the module documentation.
#[derive(Debug)]
pub struct FdServer {
    task: JoinHandle<()>,
}

impl FdServer {
    /// Starts serving `fd` and `payload` (non-empty) on the abstract socket `name` to peers
    /// that present `token`; `what` names the descriptor in logs. Needs a tokio runtime.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when the name is taken, [`Error::Os`] when the socket fails.
    pub fn start(
        name: &str,
        token: Vec<u8>,
        fd: OwnedFd,
        payload: Vec<u8>,
        what: &'static str,
    ) -> Result<FdServer> {
        let listener = UnixListener::bind_addr(&abstract_address(name)?)
            .map_err(|e| Error::Bootstrap(format!("cannot serve {what} on @{name}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("descriptor server", e))?;
        let listener = tokio::net::UnixListener::from_std(listener)
            .map_err(|e| Error::os("descriptor server", e))?;
        let served = Arc::new((fd, payload, token));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let served = served.clone();
                tokio::task::spawn_blocking(move || {
                    let (fd, payload, token) = &*served;
                    if let Err(e) = serve_one(stream, fd.as_fd(), payload, token) {
                        tracing::warn!("the server of {what} refused a request: {e}");
                    }
                });
            }
        });
        Ok(FdServer { task })
    }
}

impl Drop for FdServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers one peer: its token, then the descriptor if the token is right.
fn serve_one(
    stream: tokio::net::UnixStream,
    fd: BorrowedFd<'_>,
    payload: &[u8],
    token: &[u8],
) -> Result<()> {
    let stream = stream
        .into_std()
        .map_err(|e| Error::os("descriptor server", e))?;
    stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(REQUEST_TIMEOUT)))
        .map_err(|e| Error::os("descriptor server", e))?;
    let mut presented = vec![0u8; token.len()];
    (&stream)
        .read_exact(&mut presented)
        .map_err(|e| Error::os("descriptor request", e))?;
    if presented != token {
        return Err(Error::Bootstrap("a peer presented the wrong token".into()));
    }
    send_fds(&stream, payload, &[fd])
}

/// Fetches the descriptor served on the abstract socket `name`, presenting `token`: returns
/// the payload (at most `max_payload` bytes) and the descriptor. `what` names it in errors;
/// `timeout` bounds the wait for the reply. Runs on tokio's blocking pool.
///
/// # Errors
/// [`Error::Bootstrap`] when nothing serves there, the token is refused, or the reply is
/// malformed or late.
pub async fn fetch_fd(
    name: String,
    token: Vec<u8>,
    max_payload: usize,
    timeout: Duration,
    what: String,
) -> Result<(Vec<u8>, OwnedFd)> {
    tokio::task::spawn_blocking(move || {
        let fail = |e: &dyn std::fmt::Display| {
            Error::Bootstrap(format!("fetching {what} from @{name}: {e}"))
        };
        let stream = UnixStream::connect_addr(&abstract_address(&name)?).map_err(|e| fail(&e))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| fail(&e))?;
        (&stream).write_all(&token).map_err(|e| fail(&e))?;
        let (payload, mut fds) = recv_fds(&stream, max_payload).map_err(|e| fail(&e))?;
        let fd = fds
            .pop()
            .ok_or_else(|| fail(&"no descriptor in the reply"))?;
        Ok((payload, fd))
    })
    .await
    .map_err(|e| Error::Bootstrap(format!("a descriptor fetch task failed: {e}")))?
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

    fn memfd_of(size: u64) -> OwnedFd {
        let file = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&file, size).unwrap();
        file
    }

    #[tokio::test]
    async fn a_server_hands_its_descriptor_to_the_right_token_only() {
        let name = format!("ferroshmem-test-fd-{}", std::process::id());
        let token = b"the job's token".to_vec();
        let server = FdServer::start(
            &name,
            token.clone(),
            memfd_of(4321),
            b"pay".to_vec(),
            "a test fd",
        )
        .unwrap();
        let second = FdServer::start(
            &name,
            token.clone(),
            memfd_of(1),
            b"x".to_vec(),
            "a test fd",
        );
        assert!(matches!(second, Err(Error::Bootstrap(_))), "{second:?}");
        let wait = Duration::from_secs(5);
        let wrong = fetch_fd(
            name.clone(),
            b"not the job's!!".to_vec(),
            8,
            wait,
            "it".into(),
        )
        .await;
        assert!(matches!(wrong, Err(Error::Bootstrap(_))), "{wrong:?}");
        let (payload, fd) = fetch_fd(name.clone(), token.clone(), 8, wait, "it".into())
            .await
            .unwrap();
        assert_eq!(payload, b"pay");
        assert_eq!(rustix::fs::fstat(&fd).unwrap().st_size, 4321);
        drop(server);
        tokio::task::yield_now().await;
        let gone = fetch_fd(name, token, 8, wait, "it".into()).await;
        assert!(matches!(gone, Err(Error::Bootstrap(_))), "{gone:?}");
    }
}
