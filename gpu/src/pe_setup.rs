//! The messages of [`GpuPe`](super::GpuPe)'s collective set-up: what each PE announces of its
//! GPU and heap allocation (or why it has none), how the others read it, and the round that
//! tells every PE whether all of them mapped the heap.

use ferroshmem_runtime::{Error, Result};

use crate::context::GpuDevice;
use crate::driver::{self, Physical};
use crate::fd_share::{serve, TOKEN_LEN};
use crate::heap::GPU_HEADER;
use ferroshmem_runtime::fd_passing::FdServer;

/// What a PE prepares for the heap before set-up's second round: its device, the
/// allocation's granularity and size (`stride`), the allocation itself, and the server
/// that hands its handle to the other PEs of the node.
pub(super) struct Prepared {
    /// The PE's GPU, bound to this thread.
    pub device: GpuDevice,
    /// The device's allocation granularity.
    pub granularity: usize,
    /// The allocation's size: the heap and its header, rounded up to the granularity.
    pub stride: usize,
    /// The physical allocation.
    pub physical: Physical,
    /// The server handing the allocation's handle to the PEs that ask with its token.
    pub server: FdServer,
    /// The token the other PEs of the node present to the server.
    token: [u8; TOKEN_LEN],
}

impl Prepared {
    /// Creates PE `my_pe`'s allocation of `heap_size` bytes (and header) on `device` and
    /// starts serving its handle.
    pub fn new(device: GpuDevice, my_pe: usize, heap_size: usize) -> Result<Prepared> {
        device.bind()?;
        let granularity = driver::granularity(device.ordinal())?;
        let stride = (heap_size + GPU_HEADER).next_multiple_of(granularity);
        let physical = Physical::create(device.ordinal(), stride)?;
        let fd = physical.export_fd()?;
        let token: [u8; TOKEN_LEN] = random_token()?;
        let server = serve(my_pe, token, fd, stride.to_le_bytes().to_vec())?;
        Ok(Prepared {
            device,
            granularity,
            stride,
            physical,
            server,
            token,
        })
    }

    /// This PE's message of set-up's second round: its GPU's uuid, allocation size, handle
    /// token and process id (read by [`read_peers`]), or why it has no heap.
    pub fn announcement(prepared: &Result<Prepared>) -> Vec<u8> {
        let mut msg = Vec::new();
        match prepared {
            Ok(p) => {
                msg.push(1);
                put_bytes(&mut msg, &p.device.uuid());
                put_bytes(&mut msg, &(p.stride as u64).to_le_bytes());
                put_bytes(&mut msg, &p.token);
                put_bytes(&mut msg, &std::process::id().to_le_bytes());
            }
            Err(e) => {
                msg.push(0);
                put_bytes(&mut msg, e.to_string().as_bytes());
            }
        }
        msg
    }
}

/// This PE's message of set-up's third round: whether it mapped every PE's heap.
pub(super) fn mapped_status<T>(mapped: &Result<T>) -> Vec<u8> {
    match mapped {
        Ok(_) => b"mapped".to_vec(),
        Err(e) => format!("failed: {e}").into_bytes(),
    }
}

/// Reads every PE's message of the third round: the first PE that could not map the heap
/// fails set-up here too.
pub(super) fn check_all_mapped(all: &[Vec<u8>]) -> Result<()> {
    match all
        .iter()
        .enumerate()
        .find(|(_, m)| m.as_slice() != b"mapped")
    {
        Some((pe, why)) => Err(Error::Bootstrap(format!(
            "PE {pe} could not map the GPU heap: {}",
            String::from_utf8_lossy(why)
        ))),
        None => Ok(()),
    }
}

/// Encodes fields for the set-up exchange.
pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Decodes what [`put_bytes`] wrote.
pub(super) fn take_bytes<'a>(input: &mut &'a [u8]) -> Result<&'a [u8]> {
    let bad = || Error::Bootstrap("malformed GPU set-up message".into());
    if input.len() < 4 {
        return Err(bad());
    }
    let n = u32::from_le_bytes(input[..4].try_into().expect("4 bytes")) as usize;
    if input.len() < 4 + n {
        return Err(bad());
    }
    let (field, rest) = input[4..].split_at(n);
    *input = rest;
    Ok(field)
}

/// A peer's GPU as set-up's second round gives it: its uuid and handle token, where it is
/// mapped here (on this node); `None` for a PE of another node.
pub(super) type PeerGpu = Option<([u8; 16], [u8; TOKEN_LEN])>;

/// Another PE on this PE's GPU, and whether it is of this process.
pub(super) type SameGpu = (usize, bool);

/// Reads every PE's message of set-up's second round (`all`; `nodes`: each PE's node): each
/// PE's [`PeerGpu`], and the other PEs on this PE's GPU (`my_uuid`), each with whether it
/// is of this process. A PE without a GPU, a malformed message or another heap size is an
/// error.
pub(super) fn read_peers(
    all: &[Vec<u8>],
    nodes: &[usize],
    my_pe: usize,
    my_uuid: [u8; 16],
    stride: usize,
) -> Result<(Vec<PeerGpu>, Vec<SameGpu>)> {
    let mut peers = Vec::with_capacity(all.len());
    // The other PEs on this GPU, and whether each is of this process (then they share
    // its context).
    let mut same_gpu = Vec::new();
    for (pe, m) in all.iter().enumerate() {
        let (ok, mut rest) = m
            .split_first()
            .ok_or_else(|| Error::Bootstrap("empty GPU set-up message".into()))?;
        if *ok == 0 {
            let why = String::from_utf8_lossy(take_bytes(&mut rest)?).into_owned();
            return Err(Error::no_gpu(format!("PE {pe} has no usable GPU: {why}")));
        }
        let uuid: [u8; 16] = take_bytes(&mut rest)?
            .try_into()
            .map_err(|_| Error::Bootstrap("malformed GPU uuid".into()))?;
        let their_stride = u64::from_le_bytes(
            take_bytes(&mut rest)?
                .try_into()
                .map_err(|_| Error::Bootstrap("malformed GPU heap size".into()))?,
        ) as usize;
        let token: [u8; TOKEN_LEN] = take_bytes(&mut rest)?
            .try_into()
            .map_err(|_| Error::Bootstrap("malformed GPU handle token".into()))?;
        if their_stride != stride {
            return Err(Error::Bootstrap(format!(
                "PE {pe} has a GPU heap of {their_stride} bytes, PE {my_pe} {stride}: set the same FERROSHMEM_SYMMETRIC_SIZE everywhere"
            )));
        }
        let pid = take_bytes(&mut rest)?;
        // PEs of other nodes are reached through the NIC handler, not mapped.
        let mapped = nodes.get(pe) == nodes.get(my_pe);
        if pe != my_pe && uuid == my_uuid && mapped {
            same_gpu.push((pe, pid == std::process::id().to_le_bytes()));
        }
        peers.push(mapped.then_some((uuid, token)));
    }
    Ok((peers, same_gpu))
}

/// From the first set-up round (each PE's node key and process id): this PE's node-local
/// rank, and the node-local ranks of the other PEs of this process.
pub(super) fn node_ranks(all: &[Vec<u8>], my_pe: usize, key: &[u8]) -> Result<(usize, Vec<usize>)> {
    let pid = std::process::id().to_le_bytes();
    let (mut local_rank, mut in_process, mut rank) = (0, Vec::new(), 0);
    for (pe, m) in all.iter().enumerate() {
        let mut rest = m.as_slice();
        if take_bytes(&mut rest)? != key {
            continue;
        }
        if pe == my_pe {
            local_rank = rank;
        } else if take_bytes(&mut rest)? == pid {
            in_process.push(rank);
        }
        rank += 1;
    }
    Ok((local_rank, in_process))
}

/// A fresh random token for this PE's handle server.
fn random_token() -> Result<[u8; TOKEN_LEN]> {
    let mut t = [0u8; TOKEN_LEN];
    getrandom::fill(&mut t).map_err(|e| Error::os("random GPU handle token", e))?;
    Ok(t)
}
