//! Sharing symmetric-heap segments among the PE processes of a node: each PE serves its
//! segment's memfd on an abstract Unix socket (no file is created), peers present the job's
//! secret and their rank, and receive the descriptor over `SCM_RIGHTS`.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_runtime::fd_passing::{recv_fds, send_fds};
use ferroshmem_runtime::{Error, Result, Segment};
use tokio::task::JoinHandle;

fn socket_name(job: u64, rank: usize) -> String {
    format!("ferroshmem-{job:016x}-{rank}")
}

/// Serves one segment to authenticated same-node peers until dropped.
#[derive(Debug)]
pub struct SegmentServer {
    task: JoinHandle<()>,
}

impl SegmentServer {
    /// Starts serving `segment` of PE `rank` of job `job`.
    pub fn start(job: u64, rank: usize, segment: Arc<Segment>, secret: Vec<u8>) -> Result<Self> {
        let name = socket_name(job, rank);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| Error::os("abstract socket name", e))?;
        let listener = UnixListener::bind_addr(&addr)
            .map_err(|e| Error::Bootstrap(format!("PE {rank} cannot listen on @{name}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("segment server", e))?;
        let listener = tokio::net::UnixListener::from_std(listener)
            .map_err(|e| Error::os("segment server", e))?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let segment = segment.clone();
                let secret = secret.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = serve_one(stream, &segment, &secret) {
                        tracing::warn!(rank, "segment server refused a request: {e}");
                    }
                });
            }
        });
        Ok(SegmentServer { task })
    }
}

impl Drop for SegmentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn serve_one(stream: tokio::net::UnixStream, segment: &Segment, secret: &[u8]) -> Result<()> {
    let stream = stream
        .into_std()
        .map_err(|e| Error::os("segment server", e))?;
    stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| Error::os("segment server", e))?;
    let mut request = vec![0u8; secret.len()];
    (&stream)
        .read_exact(&mut request)
        .map_err(|e| Error::os("segment request", e))?;
    if request != secret {
        return Err(Error::Bootstrap(
            "a peer presented the wrong job secret".into(),
        ));
    }
    send_fds(
        &stream,
        &(segment.heap_size() as u64).to_le_bytes(),
        &[segment.fd()],
    )
}

/// Fetches and maps the segment of same-node PE `rank`.
pub async fn fetch(
    job: u64,
    rank: usize,
    secret: Vec<u8>,
    heap_size: usize,
    timeout: Duration,
) -> Result<Segment> {
    let name = socket_name(job, rank);
    tokio::task::spawn_blocking(move || {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| Error::os("abstract socket name", e))?;
        let fail = |e: &dyn std::fmt::Display| {
            Error::Bootstrap(format!("fetching the segment of PE {rank} from @{name}: {e}"))
        };
        let stream = UnixStream::connect_addr(&addr).map_err(|e| fail(&e))?;
        stream.set_read_timeout(Some(timeout)).map_err(|e| fail(&e))?;
        (&stream).write_all(&secret).map_err(|e| fail(&e))?;
        let (payload, mut fds) = recv_fds(&stream, 8).map_err(|e| fail(&e))?;
        let size = payload
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| fail(&"malformed reply"))?;
        if size as usize != heap_size {
            return Err(Error::Bootstrap(format!(
                "PE {rank} has a symmetric heap of {size} bytes, this PE {heap_size}: set the same FERROSHMEM_SYMMETRIC_SIZE everywhere"
            )));
        }
        let fd = fds.pop().ok_or_else(|| fail(&"no descriptor in the reply"))?;
        Segment::import(fd, heap_size)
    })
    .await
    .map_err(|e| Error::Bootstrap(format!("segment fetch task failed: {e}")))?
}
