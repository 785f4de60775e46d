//! Host-initiated GPU operations on PEs of other nodes (`put`, `get`, `p`, `g` and the
//! `_nbi` forms): the same calls as on mapped peers, carried by the NIC agent instead of a
//! copy engine. The local side moves through this PE's copy stream; the peer's agent lands
//! the bytes in its heap. An `_nbi` request is queued to the agent at once (requests to one
//! peer run in order) and kept as a [`Pending`] until `quiet` awaits its reply (and, for a
//! get, copies the bytes into the local destination).

use std::future::Future;
use std::pin::Pin;

use bytemuck::Pod;
use ferroshmem_runtime::{Error, GpuError, Result, SymSlice};

use crate::buffers::LocalMem;
use crate::driver;
use crate::heap::GPU_HEADER;
use crate::nic::{Reply, Request, Status};
use crate::GpuPe;

impl GpuPe {
    /// The network path, which remote PE `pe` needs.
    fn network_to(&self, pe: usize) -> Result<&super::Network> {
        self.inner.network.get().ok_or_else(|| {
            Error::Config(format!(
                "PE {pe} lives on another node and this PE's GPU has no network path"
            ))
        })
    }

    /// The agent's address and key of `view` on remote PE `pe`, which must hold `needed`
    /// elements.
    fn remote_span<T: Pod>(
        &self,
        view: SymSlice<'_, T>,
        needed: usize,
        what: &'static str,
        pe: usize,
    ) -> Result<(u64, u32)> {
        let network = self.network_to(pe)?;
        let offset = self.heap_offset(view, needed, what)?;
        let peer = network.agent().peer(pe).ok_or(Error::PeOutOfRange {
            pe,
            n_pes: self.n_pes(),
        })?;
        Ok((peer.base + (GPU_HEADER + offset) as u64, peer.rkey))
    }

    /// Sends `request` to remote PE `pe` and waits for its reply, a refusal being an error.
    async fn remote(&self, pe: usize, request: Request) -> Result<Reply> {
        let network = self.network_to(pe)?;
        accepted(pe, network.agent().submit(pe, request).await)
    }

    /// Queues `request` to remote PE `pe`; `quiet` completes it (a read's bytes landing at
    /// local address `read_into`).
    fn remote_nbi(&self, pe: usize, request: Request, read_into: Option<u64>) -> Result<()> {
        let network = self.network_to(pe)?;
        let len = match &request {
            Request::Read { len, .. } => *len,
            _ => 0,
        };
        let reply = Box::pin(network.agent().submit(pe, request));
        network.defer(Pending {
            pe,
            reply,
            read_into: read_into.map(|at| (at, len)),
        });
        Ok(())
    }

    /// `put_nbi` to a PE of another node: the source is read now, the write completes at
    /// `quiet`.
    pub(crate) fn remote_put_nbi<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        pe: usize,
    ) -> Result<()> {
        let bytes = src.len().saturating_mul(std::mem::size_of::<T>());
        let (addr, rkey) = self.remote_span(dest, src.len(), "put_nbi destination", pe)?;
        let from = self.locate(src, src.len(), "put_nbi source", self.my_pe())?;
        let mut data = vec![0u8; bytes];
        self.bind()?;
        driver::copy_to_host_on(&mut data, from, self.copy_stream_raw())?;
        self.remote_nbi(pe, Request::Write { addr, rkey, data }, None)
    }

    /// `get_nbi` from a PE of another node: the bytes land in `dest` at `quiet`.
    pub(crate) fn remote_get_nbi<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        pe: usize,
    ) -> Result<()> {
        let len = dest.len().saturating_mul(std::mem::size_of::<T>());
        let to = self.locate(dest, dest.len(), "get_nbi destination", self.my_pe())?;
        let (addr, rkey) = self.remote_span(src, dest.len(), "get_nbi source", pe)?;
        self.remote_nbi(pe, Request::Read { addr, rkey, len }, Some(to))
    }

    /// Completes every `_nbi` operation on remote PEs started before the call: awaits each
    /// reply (all of them, even past a failure) and lands what reads brought. Returns the
    /// first error.
    pub(crate) async fn quiet_remote(&self) -> Result<()> {
        let Some(network) = self.inner.network.get() else {
            return Ok(());
        };
        let mut first = Ok(());
        for op in network.take_pending() {
            let landed = match accepted(op.pe, op.reply.await) {
                Ok(reply) => match op.read_into {
                    Some((at, len)) => self.land(&reply, at, len, op.pe),
                    None => Ok(()),
                },
                Err(e) => Err(e),
            };
            if first.is_ok() {
                first = landed;
            }
        }
        first
    }

    /// Copies a read's reply into local GPU memory at `at`.
    fn land(&self, reply: &Reply, at: u64, len: usize, pe: usize) -> Result<()> {
        let data = reply_bytes(reply, len, pe)?;
        self.bind()?;
        driver::copy_from_host_async(at, data, self.copy_stream_raw())?;
        driver::stream_synchronize(self.copy_stream_raw())
    }

    /// `put` to a PE of another node.
    pub(crate) async fn remote_put<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: &impl LocalMem<T>,
        pe: usize,
    ) -> Result<()> {
        let bytes = src.len().saturating_mul(std::mem::size_of::<T>());
        let (addr, rkey) = self.remote_span(dest, src.len(), "put destination", pe)?;
        let mut data = vec![0u8; bytes];
        self.bind()?;
        driver::copy_to_host_on(&mut data, src.addr(), self.copy_stream_raw())?;
        self.remote(pe, Request::Write { addr, rkey, data })
            .await
            .map(drop)
    }

    /// `get` from a PE of another node.
    pub(crate) async fn remote_get<T: Pod>(
        &self,
        dest: &mut impl LocalMem<T>,
        src: SymSlice<'_, T>,
        pe: usize,
    ) -> Result<()> {
        let len = dest.len().saturating_mul(std::mem::size_of::<T>());
        let (addr, rkey) = self.remote_span(src, dest.len(), "get source", pe)?;
        let reply = self.remote(pe, Request::Read { addr, rkey, len }).await?;
        let data = reply_bytes(&reply, len, pe)?;
        self.bind()?;
        driver::copy_from_host_async(dest.addr(), data, self.copy_stream_raw())?;
        driver::stream_synchronize(self.copy_stream_raw())
    }

    /// `p` to a PE of another node.
    pub(crate) async fn remote_p<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        let (addr, rkey) = self.remote_span(dest, 1, "p destination", pe)?;
        let data = bytemuck::bytes_of(&value).to_vec();
        self.remote(pe, Request::Write { addr, rkey, data })
            .await
            .map(drop)
    }

    /// `g` from a PE of another node.
    pub(crate) async fn remote_g<T: Pod>(&self, src: SymSlice<'_, T>, pe: usize) -> Result<T> {
        let (addr, rkey) = self.remote_span(src, 1, "g source", pe)?;
        let len = std::mem::size_of::<T>();
        let reply = self.remote(pe, Request::Read { addr, rkey, len }).await?;
        let bytes = reply_bytes(&reply, len, pe)?;
        let mut v = T::zeroed();
        bytemuck::bytes_of_mut(&mut v).copy_from_slice(bytes);
        Ok(v)
    }
}

/// A reply that is not yet awaited.
type ReplyFuture = Pin<Box<dyn Future<Output = Result<Reply>> + Send>>;

/// A host-initiated `_nbi` operation on a remote PE, queued to its agent.
pub(crate) struct Pending {
    pe: usize,
    reply: ReplyFuture,
    /// A read's local destination and length.
    read_into: Option<(u64, usize)>,
}

/// `reply` from PE `pe`, a refusal being an error.
fn accepted(pe: usize, reply: Result<Reply>) -> Result<Reply> {
    let reply = reply?;
    match reply.status {
        Status::Ok => Ok(reply),
        refused => Err(Error::Gpu(GpuError::DeviceCheck(format!(
            "PE {pe} refused a host-initiated operation: {refused:?}"
        )))),
    }
}

/// A read's `len` bytes in `reply` from PE `pe`, or a typed error for a reply of another
/// length (never copied past the destination).
fn reply_bytes(reply: &Reply, len: usize, pe: usize) -> Result<&[u8]> {
    match reply.data.len() == len {
        true => Ok(&reply.data),
        false => Err(Error::Bootstrap(format!(
            "PE {pe} answered a read of {len} bytes with {}",
            reply.data.len()
        ))),
    }
}
