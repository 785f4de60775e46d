//! Handing a VMM allocation's file descriptor to the other PE processes of the node, through
//! the runtime's descriptor server ([`ferroshmem_runtime::fd_passing`]): the owner serves it
//! on an abstract Unix socket to peers that present a one-time random token, which only the
//! job's members learned through the control plane. The same path works between PEs of one
//! process.

use std::os::fd::OwnedFd;
use std::time::Duration;

use ferroshmem_runtime::fd_passing::{fetch_fd, FdServer};
use ferroshmem_runtime::Result;

/// Length of the token a peer must present.
pub(crate) const TOKEN_LEN: usize = 32;

/// Most payload bytes a handle's reply carries.
const MAX_PAYLOAD: usize = 64;

/// The abstract socket name of a token's server.
fn socket_name(token: &[u8; TOKEN_LEN], pe: usize) -> String {
    let hex: String = token[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("ferroshmem-gpu-{hex}-{pe}")
}

/// Starts serving `fd` (with `payload`) for PE `pe` to peers that present `token`; serves
/// until the server is dropped.
pub(crate) fn serve(
    pe: usize,
    token: [u8; TOKEN_LEN],
    fd: OwnedFd,
    payload: Vec<u8>,
) -> Result<FdServer> {
    let name = socket_name(&token, pe);
    FdServer::start(&name, token.to_vec(), fd, payload, "a GPU heap handle")
}

/// Fetches the descriptor PE `pe` serves under `token`; returns its payload and descriptor.
pub(crate) async fn fetch(
    pe: usize,
    token: [u8; TOKEN_LEN],
    timeout: Duration,
) -> Result<(Vec<u8>, OwnedFd)> {
    let what = format!("the GPU heap handle of PE {pe}");
    fetch_fd(
        socket_name(&token, pe),
        token.to_vec(),
        MAX_PAYLOAD,
        timeout,
        what,
    )
    .await
}
