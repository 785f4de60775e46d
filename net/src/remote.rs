//! [`FabricRemote`]: the runtime's [`Remote`] transport over a [`Fabric`], and the notices
//! that wake a target's sleeping waiters.
//!
//! # Operations
//! Each [`RemoteOp`] is posted before [`Remote::start`] returns:
//!
//! | op | posted as |
//! |----|-----------|
//! | `Put` | one write with data: the data is a notice of the bytes written |
//! | `Get` | one read |
//! | `Amo` | one fetching atomic (fetching, so that its completion means it was applied), then a notice if it writes |
//! | `PutSignal` | a write with its notice; once it completed, the signal's fetching atomic and its notice |
//!
//! # Notices
//! A peer's write changes this PE's memory without this PE's code running, so its sleeping
//! waiters would not notice before the doorbell's next tick. A write with data delivers a
//! 64-bit notice to the target's completion queue, which its progress thread hands to
//! [`wake_on_notice`]: the low 40 bits are the mapping offset written, the high 24 its length
//! (all ones: up to the end of the segment). A notice is a hint: a lost one costs latency,
//! never a wrong value, because waiters always re-read the memory.
//!
//! # Ordering
//! The provider is asked to keep RMA operations in order among themselves and atomics among
//! themselves, and to complete an operation only once the target has placed it. Nothing
//! orders an atomic after a write, so a put-with-signal posts its signal only after its data
//! completed.

use std::future::Future;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use ferroshmem_runtime::route::{Amo, Completion, Remote, RemoteOp};
use ferroshmem_runtime::{Error, Result, Segment};

use crate::atomic;
use crate::{Fabric, Operation, Peer, Registered};

/// Bits of a notice that hold the mapping offset.
const OFFSET_BITS: u32 = 40;
/// The length field of a notice that means "to the end of the segment".
const LENGTH_ALL: u64 = (1 << (64 - OFFSET_BITS)) - 1;

/// The notice announcing a write of `len` bytes at mapping offset `at`.
pub fn notice(at: usize, len: usize) -> u64 {
    let at = (at as u64) & ((1 << OFFSET_BITS) - 1);
    let len = (len as u64).min(LENGTH_ALL);
    at | (len << OFFSET_BITS)
}

/// Wakes `segment`'s waiters sleeping on the bytes a peer's `notice` announces.
pub fn wake_on_notice(segment: &Segment, notice: u64) {
    let at = (notice & ((1 << OFFSET_BITS) - 1)) as usize;
    let len = notice >> OFFSET_BITS;
    let end = if len == LENGTH_ALL {
        usize::MAX
    } else {
        at + len as usize
    };
    // The provider placed the data before it queued the notice; this fence pairs with the
    // waiters' SeqCst registration, as a local writer's does.
    fence(Ordering::SeqCst);
    segment.wake_watchers(at, end);
}

/// Where one peer's segment is on the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The peer's endpoint.
    pub peer: Peer,
    /// Its registered segment.
    pub registered: Registered,
}

/// The runtime's remote transport over one PE's [`Fabric`]: a [`Target`] per PE reached
/// through it (`None` for the PEs mapped here).
#[derive(Debug)]
pub struct FabricRemote {
    fabric: Arc<Fabric>,
    targets: Vec<Option<Target>>,
}

impl FabricRemote {
    /// The transport to `targets` (indexed by PE) through `fabric`.
    pub fn new(fabric: Arc<Fabric>, targets: Vec<Option<Target>>) -> FabricRemote {
        FabricRemote { fabric, targets }
    }

    /// The fabric it posts to.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }
}

/// Posts `op` at mapping offset `at` of `target`'s segment.
fn post(
    fabric: &Fabric,
    target: Target,
    at: usize,
    op: Operation,
) -> impl Future<Output = Result<Vec<u8>>> + Send + 'static {
    fabric.start(op, target.peer, target.registered, at as u64)
}

/// Posts the notice of a write of `len` bytes at `at`, whose completion nobody awaits.
fn announce(fabric: &Fabric, target: Target, at: usize, len: usize) {
    drop(post(
        fabric,
        target,
        at,
        Operation::WriteData(Vec::new(), notice(at, len)),
    ));
}

/// Posts atomic `op` on the word of `width` bytes at `at`, then its notice if it writes.
fn atomic(
    fabric: &Fabric,
    target: Target,
    at: usize,
    op: Amo,
    width: usize,
) -> impl Future<Output = Result<Vec<u8>>> + Send + 'static {
    let fetched = post(fabric, target, at, fetching(op, width));
    if op != Amo::Fetch {
        announce(fabric, target, at, width);
    }
    fetched
}

/// The fetching form of `op` on a word of `width` bytes.
fn fetching(op: Amo, width: usize) -> Operation {
    let (op, operand) = match op {
        Amo::Fetch => (atomic::READ, 0),
        Amo::Swap(v) => (atomic::WRITE, v),
        Amo::CompareSwap(compare, value) => {
            return Operation::CompareSwap {
                compare,
                value,
                width,
            }
        }
        Amo::Add(v) => (atomic::SUM, v),
        Amo::And(v) => (atomic::AND, v),
        Amo::Or(v) => (atomic::OR, v),
        Amo::Xor(v) => (atomic::XOR, v),
    };
    Operation::FetchAtomic { op, operand, width }
}

impl Remote for FabricRemote {
    fn start(&self, pe: usize, at: usize, op: RemoteOp) -> Completion {
        let Some(target) = self.targets.get(pe).copied().flatten() else {
            return Box::pin(std::future::ready(Err(Error::NotMapped { pe })));
        };
        let fabric = &*self.fabric;
        match op {
            RemoteOp::Put(data) => {
                let len = data.len();
                Box::pin(post(
                    fabric,
                    target,
                    at,
                    Operation::WriteData(data, notice(at, len)),
                ))
            }
            RemoteOp::Get(len) => Box::pin(post(fabric, target, at, Operation::Read(len))),
            RemoteOp::Amo { op, width } => Box::pin(atomic(fabric, target, at, op, width)),
            RemoteOp::PutSignal {
                data,
                signal_at,
                signal,
            } => {
                let len = data.len();
                let written = post(
                    fabric,
                    target,
                    at,
                    Operation::WriteData(data, notice(at, len)),
                );
                let fabric = self.fabric.clone();
                Box::pin(async move {
                    written.await?;
                    atomic(&fabric, target, signal_at, signal, 8).await?;
                    Ok(Vec::new())
                })
            }
        }
    }
}
