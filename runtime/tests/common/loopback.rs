//! Two PEs of one process that reach each other only through the remote transport, as PEs
//! of two nodes do: a transport that applies each operation to the target's segment as it
//! starts, its completion resolving after one yield (`lazy`) or at once; its confirmation
//! of sent puts ([`Remote::settle`]) as [`Settling`] says.
//!
//! A published write ([`RemoteOp::PutPublished`]) lands as it starts, but its flag is raised
//! later, as the fabric's target does on reading the write's notice from its completion
//! queue: a thread of the transport's own (the [`wire`]) reads the write's last word from
//! memory then, behind what landed meanwhile. A job whose operations are in flight
//! ([`nodes_in_flight`]) has the wire carry every operation too: each is applied there, in
//! the order started, a while after it started, as data crossing a link.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use ferroshmem_runtime::route::{Amo, Completion, Remote, RemoteOp, Route};
use ferroshmem_runtime::{DataPlane, DataPlaneParts, Error, Health, HeapId, Segment};

/// How late a put that the transport does not keep in order lands ([`two_nodes_ordered`]):
/// long enough for anything started after it to land first.
pub const LATE: Duration = Duration::from_millis(20);

/// The transport: every PE's segment, reached directly.
#[derive(Debug)]
struct Loopback {
    segments: Vec<Arc<Segment>>,
    lazy: bool,
    settling: Mutex<Settling>,
    /// The longest write it keeps in order ([`Remote::ordered_write_bytes`]); a longer
    /// [`RemoteOp::Put`] lands [`LATE`] after its completion is first polled, behind what
    /// started after it. `None`: no order promised, every write lands as it starts.
    ordered: Option<usize>,
    /// Carries what lands later: published writes' flags, and every operation where they
    /// are in flight.
    wire: Mutex<Sender<Carried>>,
    /// Whether every operation goes by the wire.
    in_flight: bool,
}

/// A published write whose flag is still to raise: the target, and the write's mapping
/// bytes `[at, end)`.
struct Publication {
    target: Arc<Segment>,
    at: usize,
    end: usize,
}

/// What the wire carries.
enum Carried {
    /// A published write's flag, to raise.
    Publication(Publication),
    /// An operation in flight: applied on arrival, what it read sent back.
    Operation {
        target: Arc<Segment>,
        at: usize,
        op: RemoteOp,
        done: oneshot::Sender<Vec<u8>>,
    },
}

/// How long the wire lets what it carries queue before it lands: long enough for a
/// sender's next operations to start meanwhile.
const WIRE_DELAY: Duration = Duration::from_micros(100);

/// The thread that lands what the transport carries, in the order it was started, in
/// batches, each [`WIRE_DELAY`] after its first item: operations first, then the flags of
/// the batch's published writes, each read from the write's last word as it is raised, not
/// when the write landed, so a write that lands in that word meanwhile is what gets
/// published, as on a fabric. It ends when the transport is dropped.
fn wire(queued: Receiver<Carried>) {
    while let Ok(first) = queued.recv() {
        std::thread::sleep(WIRE_DELAY);
        let mut publications = Vec::new();
        for carried in std::iter::once(first).chain(queued.try_iter()) {
            match carried {
                Carried::Publication(publication) => publications.push(publication),
                Carried::Operation {
                    target,
                    at,
                    op,
                    done,
                } => {
                    let (read, publication) = apply(&target, at, op);
                    publications.extend(publication);
                    // The initiator may have dropped its completion: nothing waits for it.
                    let _ = done.send(read);
                }
            }
        }
        for publication in publications {
            publication.raise();
        }
    }
}

impl Publication {
    /// Raises the flag that starts the write's line to the write's last word (a maximum,
    /// as the fabric's target does), then wakes the line's and the data's waiters.
    fn raise(self) {
        let map = self.target.mapping();
        let mut value = [0u8; 8];
        map.read(self.end - 8, &mut value);
        let flag = self.at - self.at % 64;
        map.atomic::<AtomicU64>(flag)
            .fetch_max(u64::from_ne_bytes(value), Ordering::SeqCst);
        self.target.wake_watchers(flag, self.end);
    }
}

/// What the loopback's confirmation of sent puts ([`Remote::settle`]) does.
#[derive(Debug)]
pub enum Settling {
    /// Nothing: its writes land as they start.
    Done,
    /// Never ends, as to a peer that stopped answering.
    Never,
    /// Fails once with this error (a refusal at the target), then is done.
    FailsOnce(Error),
    /// Nothing to confirm, but every sent put fails (its completion says so) and writes
    /// nothing.
    PutsFail,
}

/// Applies `op` to a 64-bit word; the old value.
fn amo64(word: &AtomicU64, op: Amo) -> u64 {
    let any = Ordering::SeqCst;
    match op {
        Amo::Fetch => word.load(any),
        Amo::Swap(v) => word.swap(v, any),
        Amo::CompareSwap(c, v) => word
            .compare_exchange(c, v, any, any)
            .unwrap_or_else(|old| old),
        Amo::Add(v) => word.fetch_add(v, any),
        Amo::And(v) => word.fetch_and(v, any),
        Amo::Or(v) => word.fetch_or(v, any),
        Amo::Xor(v) => word.fetch_xor(v, any),
    }
}

/// Applies `op` to a 32-bit word (the operands' low halves); the old value.
fn amo32(word: &AtomicU32, op: Amo) -> u32 {
    let any = Ordering::SeqCst;
    let low = |v: u64| v as u32;
    match op {
        Amo::Fetch => word.load(any),
        Amo::Swap(v) => word.swap(low(v), any),
        Amo::CompareSwap(c, v) => word
            .compare_exchange(low(c), low(v), any, any)
            .unwrap_or_else(|old| old),
        Amo::Add(v) => word.fetch_add(low(v), any),
        Amo::And(v) => word.fetch_and(low(v), any),
        Amo::Or(v) => word.fetch_or(low(v), any),
        Amo::Xor(v) => word.fetch_xor(low(v), any),
    }
}

/// Runs `op` on `target` at mapping offset `at`; what it read or fetched, and the flag to
/// raise where it is a published write (its data has landed).
fn apply(target: &Arc<Segment>, at: usize, op: RemoteOp) -> (Vec<u8>, Option<Publication>) {
    let map = target.mapping();
    let (read, touched) = match op {
        RemoteOp::Put(data) | RemoteOp::PutSent(data) | RemoteOp::PutFlag(data) => {
            map.write(at, &data);
            (Vec::new(), at..at + data.len())
        }
        RemoteOp::Get(n) => {
            let mut out = vec![0; n];
            map.read(at, &mut out);
            (out, at..at)
        }
        RemoteOp::PutSignal {
            data,
            signal_at,
            signal,
        } => {
            map.write(at, &data);
            fence(Ordering::SeqCst);
            amo64(map.atomic::<AtomicU64>(signal_at), signal);
            (
                Vec::new(),
                at.min(signal_at)..(at + data.len()).max(signal_at + 8),
            )
        }
        RemoteOp::PutPublished(data) => {
            map.write(at, &data);
            let publication = Publication {
                target: target.clone(),
                at,
                end: at + data.len(),
            };
            return (Vec::new(), Some(publication));
        }
        RemoteOp::Amo { op, width: 8 } => {
            let old = amo64(map.atomic::<AtomicU64>(at), op);
            (old.to_ne_bytes().to_vec(), at..at + 8)
        }
        RemoteOp::Amo { op, .. } => {
            let old = amo32(map.atomic::<AtomicU32>(at), op);
            (old.to_ne_bytes().to_vec(), at..at + 4)
        }
    };
    fence(Ordering::SeqCst);
    if !touched.is_empty() {
        target.wake_watchers(touched.start, touched.end);
    }
    (read, None)
}

impl Loopback {
    /// Hands `carried` to the wire.
    fn carry(&self, carried: Carried) {
        let wire = self.wire.lock().expect("the wire");
        wire.send(carried)
            .expect("the wire runs while the transport lives");
    }
}

impl Remote for Loopback {
    fn start(&self, pe: usize, at: usize, op: RemoteOp) -> Completion {
        let refused = matches!(op, RemoteOp::PutSent(_))
            && matches!(*self.settling.lock().expect("settling"), Settling::PutsFail);
        if refused {
            let failed = Error::InvalidArgument("a put refused by the loopback".into());
            return Box::pin(std::future::ready(Err(failed)));
        }
        let target = self.segments[pe].clone();
        if self.in_flight {
            let (done, landed) = oneshot::channel();
            let carried = Carried::Operation {
                target,
                at,
                op,
                done,
            };
            self.carry(carried);
            return Box::pin(async move {
                let stopped = || Error::InvalidArgument("the loopback's wire stopped".into());
                landed.await.map_err(|_| stopped())
            });
        }
        let op = match (op, self.ordered) {
            (RemoteOp::Put(data), Some(max)) if data.len() > max => {
                return Box::pin(async move {
                    tokio::time::sleep(LATE).await;
                    Ok(apply(&target, at, RemoteOp::Put(data)).0)
                });
            }
            (op, _) => op,
        };
        let (read, publication) = apply(&target, at, op);
        if let Some(publication) = publication {
            self.carry(Carried::Publication(publication));
        }
        let lazy = self.lazy;
        Box::pin(async move {
            if lazy {
                tokio::task::yield_now().await;
            }
            Ok(read)
        })
    }

    fn ordered_write_bytes(&self) -> usize {
        self.ordered.unwrap_or(0)
    }

    fn settle(&self) -> Option<Completion> {
        let mut settling = self.settling.lock().expect("settling");
        match std::mem::replace(&mut *settling, Settling::Done) {
            Settling::Done => None,
            Settling::PutsFail => {
                *settling = Settling::PutsFail;
                None
            }
            Settling::Never => {
                *settling = Settling::Never;
                Some(Box::pin(std::future::pending()))
            }
            Settling::FailsOnce(failed) => Some(Box::pin(std::future::ready(Err(failed)))),
        }
    }
}

/// Two PEs, each on a node of its own: each reaches the other through the loopback
/// transport, whose completions resolve after a yield when `lazy`.
pub fn two_nodes(lazy: bool) -> Vec<Arc<DataPlane>> {
    two_nodes_settling(lazy, Settling::Done)
}

/// [`two_nodes`] whose confirmation of sent puts does what `settling` says.
pub fn two_nodes_settling(lazy: bool, settling: Settling) -> Vec<Arc<DataPlane>> {
    over_loopback(lazy, settling, None)
}

/// [`two_nodes`] whose transport keeps writes of up to `ordered` bytes in order, and lands
/// a longer put [`LATE`] after its completion is first polled, behind what started after it.
pub fn two_nodes_ordered(ordered: usize) -> Vec<Arc<DataPlane>> {
    over_loopback(false, Settling::Done, Some(ordered))
}

/// `n` PEs, each on a node of its own, whose transport keeps writes of up to `ordered` bytes
/// in order, as [`two_nodes_ordered`].
pub fn nodes_ordered(n: usize, ordered: usize) -> Vec<Arc<DataPlane>> {
    let nodes: Vec<usize> = (0..n).collect();
    loopback_job(Job::ordered(&nodes, ordered))
}

/// [`nodes_ordered`] whose PEs have heaps of `heap` bytes (1 MiB elsewhere).
pub fn nodes_with_heap(n: usize, ordered: usize, heap: usize) -> Vec<Arc<DataPlane>> {
    let nodes: Vec<usize> = (0..n).collect();
    loopback_job(Job {
        heap,
        ..Job::ordered(&nodes, ordered)
    })
}

/// PEs on nodes as `nodes` says (PE `i` on node `nodes[i]`): each reaches the PEs of its own
/// node over mapped memory and the others through the loopback transport, which keeps writes
/// of up to `ordered` bytes in order, as [`two_nodes_ordered`].
pub fn nodes_laid_out(nodes: &[usize], ordered: usize) -> Vec<Arc<DataPlane>> {
    loopback_job(Job::ordered(nodes, ordered))
}

/// PEs on nodes as `nodes` says, as [`nodes_laid_out`], whose transport keeps every
/// operation in order and applies each a while after it started, from a thread of its own
/// (the [`wire`]), as data in flight on a link: a receiver may see one post of a sender's
/// while the sender's later data has yet to land.
pub fn nodes_in_flight(nodes: &[usize]) -> Vec<Arc<DataPlane>> {
    loopback_job(Job {
        in_flight: true,
        ..Job::ordered(nodes, usize::MAX)
    })
}

fn over_loopback(lazy: bool, settling: Settling, ordered: Option<usize>) -> Vec<Arc<DataPlane>> {
    loopback_job(Job {
        nodes: &[0, 1],
        lazy,
        settling,
        ordered,
        heap: 1 << 20,
        in_flight: false,
    })
}

/// How a loopback job is laid out and how its transport behaves.
struct Job<'a> {
    /// Each PE's node.
    nodes: &'a [usize],
    /// Whether completions resolve after a yield.
    lazy: bool,
    /// What the confirmation of sent puts does.
    settling: Settling,
    /// The longest write kept in order, if the transport says.
    ordered: Option<usize>,
    /// Each PE's heap size.
    heap: usize,
    /// Whether every operation goes by the wire.
    in_flight: bool,
}

impl<'a> Job<'a> {
    fn ordered(nodes: &'a [usize], ordered: usize) -> Job<'a> {
        Job {
            nodes,
            lazy: false,
            settling: Settling::Done,
            ordered: Some(ordered),
            heap: 1 << 20,
            in_flight: false,
        }
    }
}

fn loopback_job(job: Job<'_>) -> Vec<Arc<DataPlane>> {
    let n = job.nodes.len();
    let segments: Vec<Arc<Segment>> = (0..n)
        .map(|pe| Arc::new(Segment::create(pe, job.heap).expect("a segment")))
        .collect();
    let (carrying, queued) = channel();
    std::thread::spawn(move || wire(queued));
    let transport: Arc<dyn Remote> = Arc::new(Loopback {
        segments: segments.clone(),
        lazy: job.lazy,
        settling: Mutex::new(job.settling),
        ordered: job.ordered,
        wire: Mutex::new(carrying),
        in_flight: job.in_flight,
    });
    (0..n)
        .map(|me| {
            let routes = (0..n)
                .map(|pe| match job.nodes[pe] == job.nodes[me] {
                    true => Route::Mapped(segments[pe].clone()),
                    false => Route::Remote,
                })
                .collect();
            let parts = DataPlaneParts {
                my_pe: me,
                heap: HeapId(1),
                routes,
                remote: Some(transport.clone()),
                nodes: job.nodes.to_vec(),
                machine_pes: n,
                health: Arc::new(Health::new()),
                spin: Duration::from_micros(50),
            };
            Arc::new(DataPlane::new(parts).expect("a data plane"))
        })
        .collect()
}
