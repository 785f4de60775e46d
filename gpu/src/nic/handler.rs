//! [`Handler`], the `cpu` NIC handler: one thread per PE that notices the producer indices
//! posted to its send queues (by its GPU's kernels, or any producer), decodes each WQE byte
//! for byte ([`Consumer::pending`]), performs it through the NIC [`Agent`] (the peer's own
//! agent lands it in the peer's heap, over the fabric for a peer on another host), and writes
//! its CQE in order — an error CQE for a WQE that does not decode or that the target refused
//! (a bad key, an address outside its heap), then WR-flush CQEs for the rest; a lost peer
//! fails its queue the same way, so no producer waits on it for ever. The WQEs' local
//! buffers are read and written through [`LocalMemory`].
//!
//! Each queue keeps up to [`IN_FLIGHT`] requests going at once; their replies are taken in
//! order (the agent runs one peer's requests in order, as an RC queue does). What one look
//! finds goes in groups of up to a MiB of sources: a group's local sources are read at once
//! ([`LocalMemory::read_many`]) and its requests leave in one message
//! ([`Agent::submit_many`]) before the next group is read, so the fabric carries one group
//! while the next is read; the replies found are landed (deferred writes, one flush) before
//! their CQEs are written. Noticing: a
//! producer's doorbell record is memory that nothing signals, so the thread polls it: at
//! once again while work comes, yielding its core for [`SPIN_AFTER_WORK`] after the last
//! work (the next WQE of a kernel that waits for a CQE, or a reply, comes then: seen without
//! a thread wake-up), and backing off to sleeps of at most [`MAX_NAP`] after that. While
//! requests are in flight it sleeps until one's reply wakes it (or [`MAX_NAP`] passes, to look
//! at the doorbells): a reply is never left waiting for a nap to end.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use ferroshmem_runtime::{Error, Result};

use super::{Agent, AmoOp, Reply, Request, Status};
use crate::ibgda::{
    AtomicOp, Completion, Consumer, DecodedWqe, Fence, Pending, Syndrome, WorkRequest,
};

/// The initiator's side of the WQEs' local buffers: a write's source, read before the
/// request leaves, and a read's or an atomic's destination, written when the reply lands.
pub trait LocalMemory: Send + Sync + 'static {
    /// The `len` bytes at local address `addr`.
    ///
    /// # Errors
    /// Whatever the memory reports; the WQE then completes with `LOCAL_PROT_ERR`.
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>>;
    /// The bytes of each `(addr, len)` span, as [`LocalMemory::read`] gives them, each with
    /// its own outcome: the handler reads the sources of the WQEs it took at once together,
    /// so that a GPU's memory is waited for once per batch. The default reads one by one.
    fn read_many(&self, spans: &[(u64, usize)]) -> Vec<Result<Vec<u8>>> {
        spans
            .iter()
            .map(|&(addr, len)| self.read(addr, len))
            .collect()
    }
    /// Writes `data` at local address `addr`, done when this returns.
    ///
    /// # Errors
    /// As [`LocalMemory::read`].
    fn write(&self, addr: u64, data: &[u8]) -> Result<()>;
    /// Starts writing `data` at local address `addr`: done once [`LocalMemory::flush`]
    /// returns (the handler lands the replies it found together, then writes their CQEs).
    /// `data` is the caller's again at once. The default writes at once.
    ///
    /// # Errors
    /// As [`LocalMemory::read`].
    fn write_deferred(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.write(addr, data)
    }
    /// Waits for every deferred write.
    ///
    /// # Errors
    /// As [`LocalMemory::read`]; the WQEs whose bytes it was landing then complete with
    /// `LOCAL_PROT_ERR`.
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// Requests one queue keeps going at once.
const IN_FLIGHT: usize = 64;
/// The longest sleep between looks at the queues when nothing happens.
const MAX_NAP: Duration = Duration::from_micros(50);
/// How long after its last work the thread keeps looking at the queues without sleeping.
const SPIN_AFTER_WORK: Duration = Duration::from_micros(200);

type ReplyFuture = Pin<Box<dyn Future<Output = Result<Reply>> + Send>>;

/// Where a reply's bytes go on this PE.
enum Landing {
    /// Nowhere (a write, a NOP).
    Nothing,
    /// A read's bytes, this many to this address.
    Bytes(u64, usize),
    /// An atomic's old value, `width` bytes to this address.
    Word(u64, usize),
}

/// A WQE between its decoding and its CQE.
enum Working {
    /// Sent to the agent.
    Sent(u16, ReplyFuture, Landing),
    /// Refused before it left (a WQE that did not decode, a local copy that failed).
    Refused(u16, Syndrome),
}

/// One peer's queue on the handler's side.
struct PeerQueue {
    peer: usize,
    consumer: Consumer,
    working: VecDeque<Working>,
}

/// The first failure the handler met, for the host's next synchronization.
pub type Failure = Arc<Mutex<Option<Error>>>;

/// The handler thread; stops and is joined on drop.
pub struct Handler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The timers of the agent's request timeouts, which the handler's polls check (one
    /// worker, parked on its driver: the handler thread never blocks it).
    timers: Option<tokio::runtime::Runtime>,
}

impl Handler {
    /// Starts PE `pe`'s handler of `consumers` (each a peer and the queue to it) with
    /// `agent`, reaching local buffers through `local`; failures are kept in `failure`.
    ///
    /// # Errors
    /// [`Error::Os`] when the thread cannot start.
    pub fn start(
        pe: usize,
        consumers: Vec<(usize, Consumer)>,
        agent: Arc<Agent>,
        local: Arc<dyn LocalMemory>,
        failure: Failure,
    ) -> Result<Handler> {
        let stop = Arc::new(AtomicBool::new(false));
        let timers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("fsh-nic-timers-{pe}"))
            .enable_time()
            .build()
            .map_err(|e| Error::os("starting the NIC handler's timers", e))?;
        let handle = timers.handle().clone();
        let queues = consumers
            .into_iter()
            .map(|(peer, consumer)| PeerQueue {
                peer,
                consumer,
                working: VecDeque::new(),
            })
            .collect();
        let thread = std::thread::Builder::new()
            .name(format!("fsh-nic-{pe}"))
            .spawn({
                let stop = stop.clone();
                move || {
                    let _timers = handle.enter();
                    serve(queues, &agent, &*local, &failure, &stop);
                }
            })
            .map_err(|e| Error::os("starting the NIC handler thread", e))?;
        Ok(Handler {
            stop,
            thread: Some(thread),
            timers: Some(timers),
        })
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Without waiting: a handler may be dropped on an async worker.
        if let Some(timers) = self.timers.take() {
            timers.shutdown_background();
        }
    }
}

/// Wakes the handler thread when a reply it polled comes.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The handler's loop: take new WQEs, finish what came back; when nothing moved, look again
/// (yielding) for a while after the last work, then sleep until a reply comes if requests
/// are in flight, else nap.
fn serve(
    mut queues: Vec<PeerQueue>,
    agent: &Agent,
    copies: &dyn LocalMemory,
    failure: &Failure,
    stop: &AtomicBool,
) {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut nap = Duration::ZERO;
    let mut worked = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let mut moved = false;
        for q in &mut queues {
            moved |= take_new(q, agent, copies, failure);
            moved |= finish_done(q, copies, failure, &mut cx);
        }
        if moved {
            nap = Duration::ZERO;
            worked = Instant::now();
        } else if worked.elapsed() < SPIN_AFTER_WORK {
            // A reply or the next WQE soon: seen without a thread wake-up.
            std::thread::yield_now();
        } else if queues.iter().any(|q| !q.working.is_empty()) {
            // A reply unparks the thread (a wake-up since the last poll returns at once).
            std::thread::park_timeout(MAX_NAP);
        } else {
            nap = (nap * 2).clamp(Duration::from_micros(1), MAX_NAP);
            std::thread::sleep(nap);
        }
    }
}

/// Keeps the failure (the first one).
fn remember(failure: &Failure, e: Error) {
    tracing::debug!(error = %e, "the NIC handler failed a WQE");
    let mut slot = failure.lock().unwrap_or_else(PoisonError::into_inner);
    slot.get_or_insert(e);
}

/// Decodes and sends the WQEs posted since the last look (up to [`IN_FLIGHT`] in flight),
/// in groups whose local sources are read together (see [`groups`]): each group leaves as
/// soon as its sources are read, so the fabric carries one group while the next is read.
fn take_new(q: &mut PeerQueue, agent: &Agent, copies: &dyn LocalMemory, failure: &Failure) -> bool {
    let mut taken = Vec::new();
    while q.working.len() + taken.len() < IN_FLIGHT {
        match q.consumer.pending() {
            Ok(Some(wqe)) => taken.push(wqe),
            Ok(None) => break,
            Err(e) => {
                remember(
                    failure,
                    Error::Config(format!("the send queue to PE {}: {e}", q.peer)),
                );
                break;
            }
        }
    }
    if taken.is_empty() {
        return false;
    }
    for group in groups(taken) {
        send_group(q, agent, copies, group);
    }
    true
}

/// The source bytes a group of WQEs reads at most (unless one WQE reads more): the pinned
/// memory a batch of the handler's copies goes through.
const GROUP_BYTES: usize = 1 << 20;

/// `taken` cut, in order, into groups whose sources add up to at most [`GROUP_BYTES`] (a
/// WQE that reads more is a group of its own).
fn groups(taken: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut out: Vec<Vec<Pending>> = Vec::new();
    let mut bytes = 0;
    for wqe in taken {
        let len = source_span(&wqe.1).map_or(0, |(_, len)| len);
        match out.last_mut() {
            Some(group) if bytes + len <= GROUP_BYTES => {
                bytes += len;
                group.push(wqe);
            }
            _ => {
                bytes = len;
                out.push(vec![wqe]);
            }
        }
    }
    out
}

/// Reads the sources of `group`'s WQEs together and sends their requests in one message
/// (where credit allows); a WQE that did not decode, or whose source could not be read, is
/// refused.
fn send_group(q: &mut PeerQueue, agent: &Agent, copies: &dyn LocalMemory, group: Vec<Pending>) {
    let spans: Vec<(u64, usize)> = group
        .iter()
        .filter_map(|(_, decoded)| source_span(decoded))
        .collect();
    let mut sources = copies.read_many(&spans).into_iter();
    let mut requests = Vec::new();
    let mut planned = Vec::with_capacity(group.len());
    for (index, decoded) in group {
        tracing::trace!(peer = q.peer, index, ?decoded, "WQE taken");
        let source = source_span(&decoded).and_then(|_| sources.next());
        let request = decoded
            .map_err(|e| e.syndrome())
            .and_then(|wqe| request_of(wqe, source));
        planned.push(match request {
            Ok((request, landing)) => {
                requests.push(request);
                Ok((index, landing))
            }
            Err(syndrome) => Err((index, syndrome)),
        });
    }
    let mut replies = agent.submit_many(q.peer, requests).into_iter();
    for plan in planned {
        let working = match plan {
            Ok((index, landing)) => match replies.next() {
                Some(reply) => Working::Sent(index, Box::pin(reply), landing),
                None => Working::Refused(index, Syndrome::WrFlush),
            },
            Err((index, syndrome)) => Working::Refused(index, syndrome),
        };
        q.working.push_back(working);
    }
}

/// Where a WQE's data is read from on this PE, if it carries local data to write.
fn source_span<E>(decoded: &std::result::Result<DecodedWqe, E>) -> Option<(u64, usize)> {
    match decoded.as_ref().ok()?.request {
        WorkRequest::Write { local, len, .. } | WorkRequest::WriteImm { local, len, .. } => {
            Some((local, len as usize))
        }
        _ => None,
    }
}

/// The agent's request of a decoded WQE and where its reply lands; `source`: a write's
/// local bytes, read. A write whose source could not be read is refused. A write with a
/// fence is an ordered write: the target shows it only after the writes before it (the
/// device library fences a signal set, which announces the data before it).
fn request_of(
    wqe: DecodedWqe,
    source: Option<Result<Vec<u8>>>,
) -> std::result::Result<(Request, Landing), Syndrome> {
    let write = |addr, rkey, data| match wqe.flags.fence {
        Fence::None => Request::Write { addr, rkey, data },
        _ => Request::OrderedWrite { addr, rkey, data },
    };
    Ok(match wqe.request {
        WorkRequest::Nop => (Request::Nop, Landing::Nothing),
        WorkRequest::Write { remote, rkey, .. } | WorkRequest::WriteImm { remote, rkey, .. } => {
            match source {
                Some(Ok(data)) => (write(remote, rkey, data), Landing::Nothing),
                _ => return Err(Syndrome::LocalProt),
            }
        }
        WorkRequest::WriteInline { data, remote, rkey } => {
            (write(remote, rkey, data), Landing::Nothing)
        }
        WorkRequest::Read {
            local,
            remote,
            rkey,
            len,
            ..
        } => (
            Request::Read {
                addr: remote,
                rkey,
                len: len as usize,
            },
            Landing::Bytes(local, len as usize),
        ),
        WorkRequest::Atomic {
            op,
            width,
            remote,
            rkey,
            result,
            ..
        } => (
            Request::Atomic {
                addr: remote,
                rkey,
                width,
                op: amo_of(op),
            },
            Landing::Word(result, width.bytes() as usize),
        ),
    })
}

/// The agent's form of an mlx5 atomic (the same semantics, field for field).
fn amo_of(op: AtomicOp) -> AmoOp {
    match op {
        AtomicOp::FetchAdd { add } => AmoOp::FetchAdd(add),
        AtomicOp::CompareSwap { compare, swap } => AmoOp::CompareSwap { compare, swap },
        AtomicOp::MaskedFetchAdd {
            add,
            field_boundary,
        } => AmoOp::MaskedFetchAdd {
            add,
            boundary: field_boundary,
        },
        AtomicOp::MaskedCompareSwap {
            swap,
            compare,
            swap_mask,
            compare_mask,
        } => AmoOp::MaskedCompareSwap {
            compare,
            compare_mask,
            swap,
            swap_mask,
        },
    }
}

/// Writes the CQEs of the oldest WQEs whose replies came back, in order, once the bytes
/// their replies brought have landed (together); the first reply still awaited wakes `cx`
/// when it comes.
fn finish_done(
    q: &mut PeerQueue,
    copies: &dyn LocalMemory,
    failure: &Failure,
    cx: &mut Context<'_>,
) -> bool {
    // Each WQE ended: its index, its completion, and whether it awaits the flush.
    let mut ended = Vec::new();
    while let Some(front) = q.working.front_mut() {
        let entry = match front {
            Working::Refused(index, syndrome) => (*index, Completion::Error(*syndrome, 0), false),
            Working::Sent(index, reply, landing) => match reply.as_mut().poll(cx) {
                Poll::Pending => break,
                Poll::Ready(reply) => {
                    let deferred = matches!(landing, Landing::Bytes(..));
                    (
                        *index,
                        land(q.peer, reply, landing, copies, failure),
                        deferred,
                    )
                }
            },
        };
        q.working.pop_front();
        ended.push(entry);
    }
    if ended.is_empty() {
        return false;
    }
    let deferred = ended.iter().any(|&(_, _, deferred)| deferred);
    let flushed = if deferred { copies.flush() } else { Ok(()) };
    if let Err(e) = &flushed {
        remember(failure, e.clone());
    }
    for (index, completion, deferred) in ended {
        let completion = match completion {
            Completion::Success if deferred && flushed.is_err() => {
                Completion::Error(Syndrome::LocalProt, 0)
            }
            completion => completion,
        };
        if let Err(e) = q.consumer.complete(index, completion) {
            remember(
                failure,
                Error::Config(format!("the send queue to PE {}: {e}", q.peer)),
            );
            q.working.clear();
            return true;
        }
    }
    true
}

/// Lands a reply's bytes where the WQE said, and says how the WQE ended.
fn land(
    peer: usize,
    reply: Result<Reply>,
    landing: &Landing,
    copies: &dyn LocalMemory,
    failure: &Failure,
) -> Completion {
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            let syndrome = match e {
                Error::PeerLost { .. } => Syndrome::TransportRetryExceeded,
                _ => Syndrome::WrFlush,
            };
            remember(failure, e);
            return Completion::Error(syndrome, 0);
        }
    };
    if let Some(code) = reply.status.syndrome() {
        let syndrome = Syndrome::from_code(code).unwrap_or(Syndrome::RemoteOp);
        remember(failure, refused(peer, reply.status));
        return Completion::Error(syndrome, 0);
    }
    let landed = match landing {
        Landing::Nothing => Ok(()),
        // Never more than the WQE's buffer holds.
        Landing::Bytes(_, len) if reply.data.len() != *len => {
            return Completion::Error(Syndrome::LocalLength, 0);
        }
        Landing::Bytes(at, _) => copies.write_deferred(*at, &reply.data),
        Landing::Word(at, width) => copies.write(*at, &reply.value.to_le_bytes()[..*width]),
    };
    match landed {
        Ok(()) => Completion::Success,
        Err(e) => {
            remember(failure, e);
            Completion::Error(Syndrome::LocalProt, 0)
        }
    }
}

/// The typed error of a request PE `peer` refused.
fn refused(peer: usize, status: Status) -> Error {
    Error::Gpu(ferroshmem_runtime::GpuError::DeviceCheck(format!(
        "a network operation to PE {peer} was refused there: {status:?} (a key that is not the PE's or an address outside its GPU heap)"
    )))
}

#[cfg(test)]
mod tests {
    use super::{groups, Pending, GROUP_BYTES};
    use crate::ibgda::{DecodedWqe, WorkRequest, WqeFlags};

    /// WQE `index`: a write of `len` source bytes, or a NOP (no source) for 0.
    fn wqe(index: u16, len: u32) -> Pending {
        let request = match len {
            0 => WorkRequest::Nop,
            len => WorkRequest::Write {
                local: 0x1000,
                lkey: 1,
                remote: 0x2000,
                rkey: 2,
                len,
            },
        };
        let decoded = DecodedWqe {
            index,
            opcode: 0,
            ds: 0,
            wqebbs: 1,
            flags: WqeFlags::SIGNALED,
            request,
        };
        (index, Ok(decoded))
    }

    fn shape(lens: &[u32]) -> Vec<Vec<u16>> {
        let taken = lens.iter().enumerate().map(|(i, &l)| wqe(i as u16, l));
        groups(taken.collect())
            .into_iter()
            .map(|g| g.into_iter().map(|(index, _)| index).collect())
            .collect()
    }

    #[test]
    fn groups_keep_the_order_and_read_at_most_a_mib_unless_one_wqe_reads_more() {
        let half = (GROUP_BYTES / 2) as u32;
        assert_eq!(shape(&[half, half, half]), vec![vec![0, 1], vec![2]]);
        assert_eq!(
            shape(&[half, 0, half, 0, 1]),
            vec![vec![0, 1, 2, 3], vec![4]]
        );
        assert_eq!(
            shape(&[4 * half, 8, 8]),
            vec![vec![0], vec![1, 2]],
            "a WQE larger than a group is one alone"
        );
        assert_eq!(shape(&[0, 0, 0]), vec![vec![0, 1, 2]]);
        assert!(shape(&[]).is_empty());
    }
}
