//! Sharing symmetric-heap segments among the PE processes of a node: each PE serves its
//! segment's memfd on an abstract Unix socket (no file is created), peers present the job's
//! secret, and receive the descriptor over `SCM_RIGHTS`
//! (through [`ferroshmem_runtime::fd_passing`], which GPU PEs' heap handles take too).

use std::sync::Arc;
use std::time::Duration;

use ferroshmem_runtime::fd_passing::{fetch_fd, FdServer};
use ferroshmem_runtime::{Error, Result, Segment};

fn socket_name(job: u64, rank: usize) -> String {
    format!("ferroshmem-{job:016x}-{rank}")
}

/// Serves one segment to authenticated same-node peers until dropped.
#[derive(Debug)]
pub struct SegmentServer {
    _server: FdServer,
}

impl SegmentServer {
    /// Starts serving `segment` of PE `rank` of job `job`.
    pub fn start(job: u64, rank: usize, segment: Arc<Segment>, secret: Vec<u8>) -> Result<Self> {
        let fd = segment
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Error::os("duplicating the segment's descriptor", e))?;
        let size = (segment.heap_size() as u64).to_le_bytes().to_vec();
        let server = FdServer::start(&socket_name(job, rank), secret, fd, size, "a segment")?;
        Ok(SegmentServer { _server: server })
    }
}

/// Fetches and maps the segment of same-node PE `rank`.
pub async fn fetch(
    job: u64,
    rank: usize,
    secret: Vec<u8>,
    heap_size: usize,
    timeout: Duration,
) -> Result<Segment> {
    let what = format!("the segment of PE {rank}");
    let (payload, fd) = fetch_fd(socket_name(job, rank), secret, 8, timeout, what).await?;
    let size = payload
        .try_into()
        .map(u64::from_le_bytes)
        .map_err(|_| Error::Bootstrap(format!("malformed segment reply from PE {rank}")))?;
    if size as usize != heap_size {
        return Err(Error::Bootstrap(format!(
            "PE {rank} has a symmetric heap of {size} bytes, this PE {heap_size}: set the same FERROSHMEM_SYMMETRIC_SIZE everywhere"
        )));
    }
    Segment::import(fd, heap_size)
}
