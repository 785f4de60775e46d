//! Handing a VMM allocation's file descriptor to the other PE processes of the node: the
//! owner serves it on an abstract Unix socket (no file is created) to peers that present a
//! one-time random token, which only the job's members learned through the control plane;
//! the descriptor crosses by `SCM_RIGHTS`. The same path works between PEs of one process.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_runtime::fd_passing::{recv_fds, send_fds};
use ferroshmem_runtime::{Error, Result};
use tokio::task::JoinHandle;

/// Length of the token a peer must present.
pub(crate) const TOKEN_LEN: usize = 32;

/// The abstract socket name of a token's server.
fn socket_name(token: &[u8; TOKEN_LEN], pe: usize) -> String {
    let hex: String = token[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("ferroshmem-gpu-{hex}-{pe}")
}

/// Serves one descriptor (with a small payload) until dropped.
#[derive(Debug)]
pub(crate) struct FdServer {
    task: JoinHandle<()>,
}

impl FdServer {
    /// Starts serving `fd` for PE `pe` to peers that present `token`.
    pub fn start(pe: usize, token: [u8; TOKEN_LEN], fd: OwnedFd, payload: Vec<u8>) -> Result<Self> {
        let name = socket_name(&token, pe);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| Error::os("abstract socket name", e))?;
        let listener = UnixListener::bind_addr(&addr)
            .map_err(|e| Error::Bootstrap(format!("PE {pe} cannot listen on @{name}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("GPU handle server", e))?;
        let listener = tokio::net::UnixListener::from_std(listener)
            .map_err(|e| Error::os("GPU handle server", e))?;
        let fd = Arc::new(fd);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (fd, payload) = (fd.clone(), payload.clone());
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = serve_one(stream, &fd, &payload, &token) {
                        tracing::warn!(pe, "GPU handle server refused a request: {e}");
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

fn serve_one(
    stream: tokio::net::UnixStream,
    fd: &OwnedFd,
    payload: &[u8],
    token: &[u8; TOKEN_LEN],
) -> Result<()> {
    let stream = stream
        .into_std()
        .map_err(|e| Error::os("GPU handle server", e))?;
    stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| Error::os("GPU handle server", e))?;
    let mut presented = [0u8; TOKEN_LEN];
    (&stream)
        .read_exact(&mut presented)
        .map_err(|e| Error::os("GPU handle request", e))?;
    if &presented != token {
        return Err(Error::Bootstrap(
            "a peer presented the wrong GPU handle token".into(),
        ));
    }
    send_fds(&stream, payload, &[fd.as_fd()])
}

/// Fetches the descriptor PE `pe` serves under `token`; returns its payload and descriptor.
pub(crate) async fn fetch(
    pe: usize,
    token: [u8; TOKEN_LEN],
    timeout: Duration,
) -> Result<(Vec<u8>, OwnedFd)> {
    let name = socket_name(&token, pe);
    tokio::task::spawn_blocking(move || {
        let fail = |e: &dyn std::fmt::Display| {
            Error::Bootstrap(format!(
                "fetching the GPU heap handle of PE {pe} from @{name}: {e}"
            ))
        };
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| fail(&e))?;
        let stream = UnixStream::connect_addr(&addr).map_err(|e| fail(&e))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| fail(&e))?;
        (&stream).write_all(&token).map_err(|e| fail(&e))?;
        let (payload, mut fds) = recv_fds(&stream, 64)?;
        let fd = fds
            .pop()
            .ok_or_else(|| fail(&"no descriptor in the reply"))?;
        Ok((payload, fd))
    })
    .await
    .map_err(|e| Error::Bootstrap(format!("GPU handle fetch task failed: {e}")))?
}
