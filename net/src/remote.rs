//! [`FabricRemote`]: the runtime's [`Remote`] transport over a [`Fabric`], and the notices
//! that wake a target's sleeping waiters.
//!
//! # Operations
//! Each [`RemoteOp`] is posted before [`Remote::start`] returns:
//!
//! | op | posted as |
//! |----|-----------|
//! | `Put` | one write with data: the data is a notice of the bytes written |
//! | `PutSent`, `PutFlag` | the same, complete once sent (inject completion); the lane confirms it (see [`crate::lane`]); a `PutSent` longer than the provider places in order ([`Fabric::ordered_write_bytes`]) as a `Put` |
//! | `Get` | one read |
//! | `Amo` | one fetching atomic (fetching, so that its completion means it was applied), then, once it was, a notice if it writes |
//! | `PutSignal` | a write with its notice, then (ordered after it) the signal's fetching atomic and its notice |
//! | `PutPublished` | one write with data: a notice that also tells the target to publish the write's last word into its line's first word |
//!
//! # Notices
//! A peer's write changes this PE's memory without this PE's code running, so its sleeping
//! waiters would not notice before the doorbell's next tick. A write with data delivers a
//! 64-bit notice to the target's completion queue, which its progress thread hands to
//! [`wake_on_notice`]: the low 39 bits are the mapping offset written, the next whether to
//! publish, the high 24 its length (all ones: up to the end of the segment). To a waiter a
//! notice is a hint: a lost one would cost latency, never a wrong value, because waiters
//! always re-read the memory. A write counter ([`Segment::count_writes`]) counts them
//! instead: it relies on the endpoint reporting every write's notice once its data is
//! placed, in the order of one peer's writes (an atomic's notice names its word: one into a
//! counted range counts as a write of 8 bytes).
//!
//! # Publishing
//! A `PutPublished` write ends with the value of the flag word that starts the 64-byte line
//! the write starts in: the target's progress thread, handed the notice once the provider
//! placed the whole write, raises the flag to that value (an atomic maximum, SeqCst, as a
//! local writer's publication: flags only grow, and notices handed on by two readers of the
//! queue may come out of order) and then wakes the flag's and the data's waiters. The
//! initiator posts one operation, not a write, a round trip, and an atomic. A notice whose
//! write starts at a line's start (no flag before it) or ends outside the segment publishes
//! nothing (it wakes only): a peer cannot make the target fault.
//!
//! # Ordering
//! Every operation is started when [`Remote::start`] is called, in program order per peer:
//! the provider keeps RMA operations in order among themselves and atomics among themselves,
//! and a [`Lane`] per peer holds an operation of one class until those of the other class
//! posted before it have completed at the target (the endpoint completes an operation only
//! once the target placed it; a write sent with inject completion is confirmed first, see
//! [`crate::lane`]). [`Remote::settle`] confirms the sent writes of every lane data was
//! sent through ([`crate::unsettled`]). So a put-with-signal's signal follows its data, and
//! a later signal to the same word follows the earlier one. An atomic's notice is posted
//! once the atomic was applied.
//!
//! # Metrics
//! The data plane counts the operations (`ferroshmem_ops_total{transport="fabric"}`). Given
//! the PE's fabric traffic block ([`Remote::record_into`]), this transport keeps
//! `ferroshmem_ops_in_flight{transport="fabric"}`: each operation counts from [`Remote::start`]
//! until every fabric operation it posted has ended (completed or failed; for an atomic,
//! until it was applied and its notice posted), whether or not its future is awaited, so an
//! `_nbi` operation counts until it completes, not until `quiet`. The endpoint names its
//! provider and keeps the CQ depth ([`Fabric::record_into`]). With metrics off, recording
//! costs one load per operation.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ferroshmem_observability::Traffic;
use ferroshmem_runtime::route::{Amo, Completion, Drive, Remote, RemoteOp};
use ferroshmem_runtime::{Error, Segment};

use crate::atomic;
use crate::lane::{Kind, Lane};
use crate::unsettled::Unsettled;
use crate::{Ended, Fabric, Hooks, Operation, Peer, Registered};

/// Bits of a notice below its length: the mapping offset, and the publish bit above it.
const OFFSET_BITS: u32 = 40;
/// The bit of a notice that asks the target to publish the write's last word.
const PUBLISH: u64 = 1 << (OFFSET_BITS - 1);
/// The bits of a notice that hold the mapping offset (offsets below 512 GiB).
const OFFSET_MASK: u64 = PUBLISH - 1;
/// The lines whose first word a published write sets.
const LINE: usize = 64;
/// The length field of a notice that means "to the end of the segment".
const LENGTH_ALL: u64 = (1 << (64 - OFFSET_BITS)) - 1;

/// The notice announcing a write of `len` bytes at mapping offset `at`.
pub fn notice(at: usize, len: usize) -> u64 {
    let at = (at as u64) & OFFSET_MASK;
    let len = (len as u64).min(LENGTH_ALL);
    at | (len << OFFSET_BITS)
}

/// The notice of a `PutPublished` write of `len` bytes at `at`; `None` when the write does
/// not fit a notice exactly (a publication needs the write's exact place and end).
fn publishing_notice(at: usize, len: usize) -> Option<u64> {
    let fits = (len as u64) < LENGTH_ALL && (at as u64) <= OFFSET_MASK;
    fits.then(|| notice(at, len) | PUBLISH)
}

/// Hands the write a peer's `notice` announces to `segment` ([`Segment::landed`]): its last
/// word published first if the notice asks (see the module documentation), then counted
/// where a write counter watches it, and its sleeping waiters woken.
pub fn wake_on_notice(segment: &Segment, notice: u64) {
    let at = (notice & OFFSET_MASK) as usize;
    let len = notice >> OFFSET_BITS;
    let end = if len == LENGTH_ALL {
        usize::MAX
    } else {
        at + len as usize
    };
    // The provider placed the data before it queued the notice; this fence pairs with the
    // waiters' SeqCst registration, as a local writer's does.
    fence(Ordering::SeqCst);
    match (notice & PUBLISH != 0).then(|| publish(segment, at, end)) {
        Some(Some(flag)) => segment.landed(flag, end),
        _ => segment.landed(at, end),
    }
}

/// Raises the first word of the line the write `[at, end)` starts in to the write's last
/// word, if the write does not start at that word and ends in `segment`'s mapping; the
/// flag's offset, if it did. A maximum, not a swap: two threads may read the completion
/// queue at once (a driving task and the progress thread), so one peer's notices to a flag
/// can be handed on out of order, and a flag must never go back.
fn publish(segment: &Segment, at: usize, end: usize) -> Option<usize> {
    let mapping = segment.mapping();
    let flag = at - at % LINE;
    let fits = flag < at && end >= at + 8 && end <= mapping.len();
    if fits {
        let mut value = [0u8; 8];
        mapping.read(end - 8, &mut value);
        mapping
            .atomic::<AtomicU64>(flag)
            .fetch_max(u64::from_ne_bytes(value), Ordering::SeqCst);
    }
    fits.then_some(flag)
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
/// through it (`None` for the PEs mapped here), and the lane that orders this PE's
/// operations to it.
#[derive(Debug)]
pub struct FabricRemote {
    fabric: Arc<Fabric>,
    targets: Vec<Option<(Target, Lane)>>,
    /// The lanes data was sent through and not yet found settled: what `quiet` visits.
    unsettled: Unsettled,
    /// The PE's fabric traffic block, once given, if metrics are on.
    traffic: OnceLock<Traffic>,
}

/// One operation counted in `ferroshmem_ops_in_flight` until dropped: moved into the hooks
/// that run when its fabric operations end (or are dropped unposted).
struct InFlight(Traffic);

impl InFlight {
    fn start(traffic: &Traffic) -> InFlight {
        traffic.in_flight(1);
        InFlight(traffic.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight(-1);
    }
}

impl FabricRemote {
    /// The transport to `targets` (indexed by PE) through `fabric`; made on a tokio runtime,
    /// it orders the operations of callers outside any runtime on that one.
    pub fn new(fabric: Arc<Fabric>, targets: Vec<Option<Target>>) -> FabricRemote {
        // Operations started outside any runtime (by the C library's callers) are ordered
        // by tasks on the runtime the transport is made on.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let targets = targets
            .into_iter()
            .map(|t| {
                t.map(|t| {
                    let confirm = confirmation(Arc::downgrade(&fabric), t);
                    (t, Lane::new(runtime.clone(), confirm))
                })
            })
            .collect::<Vec<_>>();
        FabricRemote {
            fabric,
            unsettled: Unsettled::new(targets.len()),
            targets,
            traffic: OnceLock::new(),
        }
    }

    /// The fabric it posts to.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Posts `op` at mapping offset `at` of `target` through `lane`, as an operation of
    /// `kind`; `then` runs when it has ended, told how (after the lane's own bookkeeping).
    fn post(
        &self,
        (target, lane): &(Target, Lane),
        kind: Kind,
        at: usize,
        op: Operation,
        then: impl FnOnce(Ended) + Send + 'static,
    ) -> Completion {
        let fabric = self.fabric.clone();
        let target = *target;
        lane.start(
            kind,
            Box::new(move |hooks: Hooks| {
                let lane_ended = hooks.ended;
                let ended: Box<dyn FnOnce(Ended) + Send> = Box::new(move |how| {
                    if let Some(f) = lane_ended {
                        f(how);
                    }
                    then(how);
                });
                let hooks = Hooks {
                    posted: hooks.posted,
                    ended: Some(ended),
                };
                Box::pin(fabric.start_then(op, target.peer, target.registered, at as u64, hooks))
            }),
        )
    }

    /// Posts atomic `op` on the word of `width` bytes at `at`; once it was applied, the
    /// notice of its write, if it writes (one that failed wrote nothing); then runs `then`.
    fn atomic(
        &self,
        peer: &(Target, Lane),
        at: usize,
        op: Amo,
        width: usize,
        then: impl FnOnce(Ended) + Send + 'static,
    ) -> Completion {
        let fabric = Arc::downgrade(&self.fabric);
        let target = peer.0;
        self.post(peer, Kind::Atomic, at, fetching(op, width), move |how| {
            let wrote = op != Amo::Fetch && how == Ended::Completed;
            if let (true, Some(fabric)) = (wrote, fabric.upgrade()) {
                announce(&fabric, target, at, width);
            }
            then(how);
        })
    }
}

/// Posts the notice of a write of `len` bytes at `at`, whose completion nobody awaits.
fn announce(fabric: &Fabric, target: Target, at: usize, len: usize) {
    drop(fabric.start(
        Operation::WriteData(Vec::new(), notice(at, len)),
        target.peer,
        target.registered,
        at as u64,
    ));
}

/// Builds the confirmation of the writes sent to `target` (see [`crate::lane`]): a write of
/// nothing that completes once placed. Once the fabric has closed, one that fails.
fn confirmation(fabric: std::sync::Weak<Fabric>, target: Target) -> crate::lane::Confirm {
    Arc::new(move || {
        let fabric = fabric.clone();
        Box::new(move |hooks: Hooks| match fabric.upgrade() {
            Some(fabric) => Box::pin(fabric.start_then(
                Operation::Confirm,
                target.peer,
                target.registered,
                0,
                hooks,
            )),
            None => Box::pin(std::future::ready(Err(Error::Shutdown))),
        })
    })
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

/// The write of `data` at `at` for a `PutFlag` (`flag`) or `PutSent`: complete once sent,
/// unless it is application data longer than the provider places in order (`ordered`
/// bytes), which a later confirmation would not cover: that one completes once placed.
fn sent_write(data: Vec<u8>, at: usize, flag: bool, ordered: usize) -> (Kind, Operation) {
    debug_assert!(
        !flag || data.len() <= ordered,
        "a flag longer than the provider keeps in order (refused at init for 8 bytes)"
    );
    let notice = notice(at, data.len());
    match (flag, data.len() <= ordered) {
        (true, _) => (Kind::Flag, Operation::WriteSent(data, notice)),
        (false, true) => (Kind::Sent, Operation::WriteSent(data, notice)),
        (false, false) => (Kind::Rma, Operation::WriteData(data, notice)),
    }
}

impl Remote for FabricRemote {
    fn start(&self, pe: usize, at: usize, op: RemoteOp) -> Completion {
        let Some(peer) = self.targets.get(pe).and_then(Option::as_ref) else {
            return Box::pin(std::future::ready(Err(Error::NotMapped { pe })));
        };
        // Counted until the hooks holding it run: when the operation has ended.
        let in_flight = self.traffic.get().map(InFlight::start);
        let ended = move |_| drop(in_flight);
        let flag = matches!(op, RemoteOp::PutFlag(_));
        match op {
            RemoteOp::Put(data) => {
                let len = data.len();
                let write = Operation::WriteData(data, notice(at, len));
                self.post(peer, Kind::Rma, at, write, ended)
            }
            RemoteOp::PutSent(data) | RemoteOp::PutFlag(data) => {
                let (kind, write) = sent_write(data, at, flag, self.fabric.ordered_write_bytes());
                let sent = self.post(peer, kind, at, write, ended);
                if kind == Kind::Sent {
                    // After the lane counted it (see `crate::unsettled`).
                    self.unsettled.list(pe);
                }
                sent
            }
            RemoteOp::PutPublished(data) => {
                let Some(publishing) = publishing_notice(at, data.len()) else {
                    return Box::pin(std::future::ready(Err(Error::InvalidArgument(format!(
                        "a published write of {} bytes at offset {at}: too long for a notice",
                        data.len()
                    )))));
                };
                let write = Operation::WriteData(data, publishing);
                self.post(peer, Kind::Rma, at, write, ended)
            }
            RemoteOp::Get(len) => self.post(peer, Kind::Rma, at, Operation::Read(len), ended),
            RemoteOp::Amo { op, width } => self.atomic(peer, at, op, width, ended),
            RemoteOp::PutSignal {
                data,
                signal_at,
                signal,
            } => {
                let len = data.len();
                let write = Operation::WriteData(data, notice(at, len));
                // It has ended once both its parts have (the last of them drops `ended`).
                let ended = Arc::new(ended);
                let data_ended = ended.clone();
                let written = self.post(peer, Kind::Rma, at, write, move |_| drop(data_ended));
                let signalled = self.atomic(peer, signal_at, signal, 8, move |_| drop(ended));
                Box::pin(async move {
                    let (written, signalled) = futures::join!(written, signalled);
                    written?;
                    signalled?;
                    Ok(Vec::new())
                })
            }
        }
    }

    fn settle(&self) -> Option<Completion> {
        let lane = |pe: usize| self.targets[pe].as_ref().map(|(_, lane)| lane);
        let unsettled = self
            .unsettled
            .visit(|pe| lane(pe).is_none_or(Lane::is_settled));
        let settles: Vec<Completion> = unsettled
            .into_iter()
            .filter_map(|pe| lane(pe)?.settle())
            .collect();
        (!settles.is_empty()).then(|| {
            Box::pin(async move {
                let mut first = Ok(Vec::new());
                for settled in futures::future::join_all(settles).await {
                    first = first.and(settled);
                }
                first
            }) as Completion
        })
    }

    fn record_into(&self, traffic: &Traffic) {
        if traffic.is_enabled() {
            let _ = self.traffic.set(traffic.clone());
        }
        self.fabric.record_into(traffic);
    }

    fn ordered_write_bytes(&self) -> usize {
        self.fabric.ordered_write_bytes()
    }

    fn set_spin(&self, spin: std::time::Duration) {
        self.fabric.set_spin(spin);
    }

    fn drive(&self) -> Option<Box<dyn Drive>> {
        self.fabric
            .drive()
            .map(|driver| Box::new(driver) as Box<dyn Drive>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_data_the_provider_places_in_order_completes_once_sent() {
        let write = |len, flag, ordered| sent_write(vec![0; len], 64, flag, ordered);
        assert_eq!(write(8, true, 8).0, Kind::Flag);
        assert_eq!(write(4096, false, usize::MAX).0, Kind::Sent);
        assert_eq!(write(4096, false, 4096).0, Kind::Sent);
        assert!(matches!(
            write(4096, false, 4096).1,
            Operation::WriteSent(_, _)
        ));
        let (kind, beyond) = write(4097, false, 4096);
        assert_eq!(kind, Kind::Rma);
        assert!(matches!(beyond, Operation::WriteData(_, _)));
    }
}
