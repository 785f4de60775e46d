//! The `cpu` NIC handler's remote agent: RDMA-style operations on a peer PE's heap (the GPU
//! heap, which the fabric cannot register), performed by the peer itself, as requests over
//! the host data plane.
//!
//! Every PE creates an [`Agent`] collectively. An initiator [`Agent::submit`]s a
//! [`Request`] (a write, a read, an atomic, as a decoded mlx5 WQE gives it, with the remote
//! address and key) to a peer: it travels as a record in that pair's request ring in the
//! host symmetric heap (the private `wire` module has the layout), in one message: over the
//! fabric a single write, which the peer's write counter counts in the ring's signal word
//! once it has landed (see [`ferroshmem_runtime::landed`]); to a mapped peer a
//! put-with-signal adding the same count. The peer's service thread wakes on the signal (a
//! wait on its signal words, woken by the write: no core spins once idle), checks the key
//! and bounds, performs the request on its [`HeapMemory`], and writes the [`Reply`] (a status
//! a handler maps to a CQE syndrome, a fetched value, read bytes) into the initiator's reply
//! ring the same way. The code is the same on every route: mapped peers of this node and
//! peers on other hosts over the fabric.
//!
//! Guarantees: requests to one peer execute in submission order (an RC queue's order: a put
//! then a signal land in that order); credit in both rings means no record is ever lost or
//! overwritten, however many are in flight (the rest wait in the initiator's queue); large
//! writes and reads go in chunks of [`AgentConfig::max_chunk`], in order; a lost peer (the
//! job's failure) fails every waiting request with [`Error::PeerLost`] at once, and an
//! optional timeout bounds each request; shutdown ends the service without waiting on any
//! peer.

mod handler;
mod initiator;
mod memory;
mod request;
mod target;
mod wire;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferroshmem_runtime::{DataPlane, Error, Exchange, Health, Result, SymBuffer, WriteCounter};
use tokio::sync::oneshot;

pub use handler::{Failure, Handler, LocalMemory};
pub use memory::{HeapMemory, HostMemory};
pub use request::{AmoOp, Reply, Request, Status, Width};

use initiator::{Link, Queued};
use wire::{chunks, record_blocks, Layout};

/// The control-plane group of the agents' set-up exchange.
const NIC_GROUP: u64 = 0x4E49_4341_0000_0001;

/// Rings hold fewer blocks than this: a write of a whole ring must be shorter than the
/// longest length a fabric write's notice can say (`2^24 - 1` bytes), or it is not counted.
const MAX_RING_BLOCKS: usize = (1 << 24) / wire::BLOCK;

/// How an agent is sized; every PE must use the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// Blocks of 64 bytes in each ring (one request and one reply ring per pair of PEs); a
    /// ring holds less than 16 MiB (a write's notice must say its length).
    pub ring_blocks: usize,
    /// The largest chunk of a write or read, in bytes; a record of it must fit in half a
    /// ring.
    pub max_chunk: usize,
    /// How long a request may wait for its reply before it fails with [`Error::Timeout`]
    /// (`None`: until it comes, or the job fails). Needs a tokio runtime with timers where
    /// the request's future is polled.
    pub timeout: Option<Duration>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            ring_blocks: 4096,
            max_chunk: 64 * 1024,
            timeout: None,
        }
    }
}

impl AgentConfig {
    /// The `u64` words of the symmetric buffer an agent of `n_pes` PEs needs.
    pub fn ring_words(&self, n_pes: usize) -> usize {
        Layout {
            n: n_pes,
            blocks: self.ring_blocks,
        }
        .words()
    }

    /// Checks that a chunk's record fits in half a ring, and a ring in what a write's notice
    /// can count.
    ///
    /// # Errors
    /// [`Error::Config`] saying what does not fit.
    pub fn check(&self) -> Result<()> {
        let fits = self.max_chunk >= 8
            && self.max_chunk <= u32::MAX as usize
            && record_blocks(self.max_chunk) * 2 <= self.ring_blocks
            && self.ring_blocks < MAX_RING_BLOCKS;
        if fits {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "a NIC agent's chunk of {} bytes must be 8 bytes or more and its record fit in half a ring of {} blocks (fewer than {MAX_RING_BLOCKS})",
                self.max_chunk, self.ring_blocks
            )))
        }
    }
}

/// A PE's heap as its agent announced it: what an initiator puts in its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHeap {
    /// The heap's first address.
    pub base: u64,
    /// Its size in bytes.
    pub size: usize,
    /// The key requests to it must carry.
    pub rkey: u32,
}

/// What the agent's threads and handles share.
pub(crate) struct Shared {
    dp: Arc<DataPlane>,
    me: usize,
    rings: SymBuffer<u64>,
    layout: Layout,
    config: AgentConfig,
    memory: Arc<dyn HeapMemory>,
    rkey: u32,
    peers: Vec<PeerHeap>,
    links: Vec<Mutex<Link>>,
    /// The counters of peers' writes into this PE's rings, in their signal words.
    _counters: Vec<WriteCounter>,
    stop: AtomicBool,
    /// The service thread's runtime.
    runtime: tokio::runtime::Handle,
}

impl Shared {
    fn link(&self, peer: usize) -> MutexGuard<'_, Link> {
        self.links[peer]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `request`'s chunks to `peer` and places what the credit allows; returns where
    /// each chunk's outcome will come.
    fn enqueue_many(
        &self,
        peer: usize,
        requests: Vec<Request>,
    ) -> Result<Vec<Vec<oneshot::Receiver<Result<Reply>>>>> {
        if peer >= self.layout.n {
            return Err(Error::PeOutOfRange {
                pe: peer,
                n_pes: self.layout.n,
            });
        }
        self.dp.health().check()?;
        // A work request's length is 32 bits: a longer read comes from no WQE, and would be
        // split into as many chunks as its length allows.
        if let Some(len) = requests.iter().find_map(|r| match r {
            Request::Read { len, .. } if *len > u32::MAX as usize => Some(*len),
            _ => None,
        }) {
            return Err(Error::InvalidArgument(format!(
                "a read of {len} bytes: at most {} (a work request's length)",
                u32::MAX
            )));
        }
        let mut all = Vec::with_capacity(requests.len());
        let mut queued = Vec::new();
        for request in requests {
            let mut receivers = Vec::new();
            for chunk in chunks(request, self.config.max_chunk) {
                let (done, receiver) = oneshot::channel();
                receivers.push(receiver);
                queued.push(Queued { chunk, done });
            }
            all.push(receivers);
        }
        let mut link = self.link(peer);
        if let Some(error) = &link.closed {
            return Err(error.clone());
        }
        link.queue(queued);
        self.pump(peer, &mut link);
        Ok(all)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("my_pe", &self.me)
            .field("n_pes", &self.layout.n)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A PE's agent: it performs peers' requests on this PE's [`HeapMemory`] and carries this
/// PE's requests to them. See the module documentation.
#[derive(Debug)]
pub struct Agent {
    shared: Arc<Shared>,
    service: Option<Service>,
}

/// The service thread, and the word that it has ended.
#[derive(Debug)]
struct Service {
    thread: std::thread::JoinHandle<()>,
    ended: oneshot::Receiver<()>,
}

impl Agent {
    /// Creates this PE's agent. Collective: every PE of the job calls it, with the same
    /// `config` and the same symmetric buffer `rings` of [`AgentConfig::ring_words`] words
    /// (its contents do not matter), after which the agents exchange their heaps' bases,
    /// sizes and keys (a random key per PE) through `exchange`. `memory` is this PE's heap.
    ///
    /// # Errors
    /// [`Error::Config`] for a config whose chunk does not fit its rings;
    /// [`Error::OutOfBounds`] when `rings` is too small; [`Error::CollectiveMismatch`] when
    /// the PEs' configs or buffers differ; the exchange's errors; [`Error::Os`] when the
    /// service thread cannot start.
    pub async fn new(
        dp: Arc<DataPlane>,
        exchange: Arc<dyn Exchange>,
        rings: SymBuffer<u64>,
        memory: Arc<dyn HeapMemory>,
        config: AgentConfig,
    ) -> Result<Agent> {
        config.check()?;
        let (me, n) = (dp.my_pe(), dp.n_pes());
        let layout = Layout {
            n,
            blocks: config.ring_blocks,
        };
        if rings.len() < layout.words() {
            return Err(Error::OutOfBounds {
                what: "NIC agent rings",
                needed: layout.words(),
                available: rings.len(),
            });
        }
        // Zeroed before the exchange, which no peer passes before this PE has joined it:
        // so no request lands before.
        dp.zero_local(rings.offset(), 16 * n)?;
        let counters = count_writes(&dp, &rings, layout)?;
        let mut key = [0; 4];
        getrandom::fill(&mut key).map_err(|e| Error::os("random NIC agent key", e))?;
        let rkey = u32::from_le_bytes(key) | 1;
        let mine = announce(&memory, rkey, &config, rings.offset());
        let all = exchange.exchange(NIC_GROUP, me, n, mine.clone()).await?;
        let peers = peers(&all, &mine)?;
        let (runtime, starter) = Starter::new(me)?;
        let shared = Arc::new(Shared {
            dp,
            me,
            rings,
            layout,
            config,
            memory,
            rkey,
            peers,
            links: (0..n).map(|_| Mutex::default()).collect(),
            _counters: counters,
            stop: AtomicBool::new(false),
            runtime,
        });
        Ok(Agent {
            service: Some(starter.start(shared.clone())),
            shared,
        })
    }

    /// Sends `request` to PE `peer` (this PE included) and resolves to its reply. The
    /// request is queued when this is called, so requests to one peer execute in the order
    /// of the calls, awaited or not; the future needs no polling to make progress.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`]; [`Error::InvalidArgument`] for a read longer than
    /// `u32::MAX` bytes; the job's failure ([`Error::PeerLost`]) as soon as it is
    /// known; [`Error::Timeout`] past [`AgentConfig::timeout`]; [`Error::Shutdown`] once
    /// the agent has stopped. A request the target refused is no error: its reply's status
    /// says why.
    pub fn submit(
        &self,
        peer: usize,
        request: Request,
    ) -> impl Future<Output = Result<Reply>> + Send + 'static {
        let receivers = self
            .shared
            .enqueue_many(peer, vec![request])
            .map(|all| all.into_iter().next().unwrap_or_default());
        self.replied(receivers)
    }

    /// [`Agent::submit`] of each of `requests`, in order, placed together: as many of them as
    /// the rings' credit allows go out in one message (the cpu NIC handler submits the WQEs
    /// it took at once this way). One future per request, in the same order.
    ///
    /// # Errors
    /// Each future as [`Agent::submit`]'s.
    pub fn submit_many(
        &self,
        peer: usize,
        requests: Vec<Request>,
    ) -> Vec<impl Future<Output = Result<Reply>> + Send + 'static> {
        let n = requests.len();
        match self.shared.enqueue_many(peer, requests) {
            Ok(all) => all.into_iter().map(|r| self.replied(Ok(r))).collect(),
            Err(e) => (0..n).map(|_| self.replied(Err(e.clone()))).collect(),
        }
    }

    /// The reply to a request whose chunks' outcomes come through `receivers`.
    fn replied(
        &self,
        receivers: Result<Vec<oneshot::Receiver<Result<Reply>>>>,
    ) -> impl Future<Output = Result<Reply>> + Send + 'static {
        let health = self.shared.dp.health().clone();
        let timeout = self.shared.config.timeout;
        async move {
            let gathered = gather(receivers?, health);
            match timeout {
                None => gathered.await,
                Some(after) => {
                    tokio::time::timeout(after, gathered)
                        .await
                        .unwrap_or(Err(Error::Timeout {
                            operation: "NIC agent request",
                            after,
                        }))
                }
            }
        }
    }

    /// This PE's heap as the peers see it (its key included).
    pub fn heap(&self) -> PeerHeap {
        self.shared.peers[self.shared.me]
    }

    /// PE `pe`'s heap as its agent announced it.
    pub fn peer(&self, pe: usize) -> Option<PeerHeap> {
        self.shared.peers.get(pe).copied()
    }

    /// The number of PEs.
    pub fn n_pes(&self) -> usize {
        self.shared.layout.n
    }

    /// Stops this PE's agent: its service ends, this PE's waiting requests fail with
    /// [`Error::Shutdown`], and requests peers send later are not served (stop the agents
    /// once the PEs are done with them, after a barrier, say). Returns the rings' buffer
    /// for a collective `free` (`None` if a request of this PE still holds the agent).
    pub async fn shutdown(mut self) -> Option<SymBuffer<u64>> {
        let service = self.service.take()?;
        self.stop();
        let _ = service.ended.await;
        let _ = service.thread.join();
        let shared = self.shared.clone();
        drop(self);
        Arc::try_unwrap(shared).ok().map(|s| s.rings)
    }

    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.dp.wake_local_waiters();
    }
}

impl Drop for Agent {
    /// Stops the service (without waiting for its thread).
    fn drop(&mut self) {
        if self.service.is_some() {
            self.stop();
        }
    }
}

/// Counts peers' writes into each ring of `rings` in the ring's signal word, in blocks.
fn count_writes(
    dp: &DataPlane,
    rings: &SymBuffer<u64>,
    layout: Layout,
) -> Result<Vec<WriteCounter>> {
    let bytes = rings.all().as_bytes();
    let ring = layout.blocks * wire::BLOCK;
    (0..layout.n)
        .flat_map(|pe| {
            [
                (layout.request_byte(pe, 0), layout.request_signal(pe)),
                (layout.reply_byte(pe, 0), layout.reply_signal(pe)),
            ]
        })
        .map(|(at, signal)| {
            dp.count_writes(bytes.slice(at..at + ring), rings.at(signal), wire::BLOCK)
        })
        .collect()
}

/// This PE's part of the set-up exchange: its heap and key, then what must agree.
fn announce(
    memory: &Arc<dyn HeapMemory>,
    rkey: u32,
    config: &AgentConfig,
    rings: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(ANNOUNCED);
    out.extend_from_slice(&memory.base().to_le_bytes());
    out.extend_from_slice(&(memory.size() as u64).to_le_bytes());
    out.extend_from_slice(&rkey.to_le_bytes());
    for agreed in [config.ring_blocks, config.max_chunk, rings] {
        out.extend_from_slice(&(agreed as u64).to_le_bytes());
    }
    out
}

/// The bytes of an announcement, and where its agreed part begins.
const ANNOUNCED: usize = 44;
const AGREED: usize = 20;

/// Every PE's heap from the exchange, checked to agree with this PE's announcement.
fn peers(all: &[Vec<u8>], mine: &[u8]) -> Result<Vec<PeerHeap>> {
    let word = |b: &[u8], at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    all.iter()
        .enumerate()
        .map(|(pe, b)| {
            if b.len() != ANNOUNCED || b[AGREED..] != mine[AGREED..] {
                return Err(Error::CollectiveMismatch {
                    operation: "NIC agent creation",
                    detail: format!(
                        "PE {pe} created its agent with another config or rings buffer"
                    ),
                });
            }
            let mut key = [0; 4];
            key.copy_from_slice(&b[16..20]);
            Ok(PeerHeap {
                base: word(b, 0),
                size: word(b, 8) as usize,
                rkey: u32::from_le_bytes(key),
            })
        })
        .collect()
}

/// The outcome of a request from its chunks' replies: the first failed status, else `Ok`,
/// with the last value and the bytes read.
async fn gather(
    receivers: Vec<oneshot::Receiver<Result<Reply>>>,
    health: Arc<Health>,
) -> Result<Reply> {
    let mut reply = Reply {
        status: Status::Ok,
        value: 0,
        data: Vec::new(),
    };
    for receiver in receivers {
        let part = tokio::select! {
            biased;
            part = receiver => part.unwrap_or_else(|_| Err(health.check().err().unwrap_or(Error::Shutdown))),
            failed = health.failed() => Err(failed),
        };
        let part = match part {
            Err(e @ Error::Os { .. }) => Err(loss_or(e, &health).await),
            other => other,
        }?;
        if reply.status == Status::Ok {
            reply.status = part.status;
        }
        reply.value = part.value;
        reply.data.extend_from_slice(&part.data);
    }
    if reply.status != Status::Ok {
        reply.data.clear();
    }
    Ok(reply)
}

/// How long a request that failed on the fabric (a connection reset: its peer died) waits
/// for the job to learn of the loss, so that it fails with the peer's loss.
const LOSS_GRACE: Duration = Duration::from_secs(2);

/// The job's failure if it comes within [`LOSS_GRACE`] of the fabric error `error` (the
/// peer's process died, and the bootstrap root is about to say so), else `error`.
async fn loss_or(error: Error, health: &Health) -> Error {
    tokio::time::timeout(LOSS_GRACE, health.failed())
        .await
        .unwrap_or(error)
}

/// The service thread, started before the agent's shared state exists (that holds the
/// thread's runtime) and handed it once it does.
struct Starter {
    thread: std::thread::JoinHandle<()>,
    shared: std::sync::mpsc::Sender<Arc<Shared>>,
    ended: oneshot::Receiver<()>,
}

impl Starter {
    /// Starts PE `me`'s service thread and its runtime.
    fn new(me: usize) -> Result<(tokio::runtime::Handle, Starter)> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (shared_tx, shared_rx) = std::sync::mpsc::channel::<Arc<Shared>>();
        let (ended_tx, ended_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("fsh-nic-{me}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = handle_tx.send(Err(Error::os("NIC agent runtime", e)));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                if let Ok(shared) = shared_rx.recv() {
                    runtime.block_on(shared.serve());
                }
                drop(runtime);
                let _ = ended_tx.send(());
            })
            .map_err(|e| Error::os("NIC agent service thread", e))?;
        let handle = handle_rx
            .recv()
            .map_err(|e| Error::os("NIC agent service thread", e))??;
        Ok((
            handle,
            Starter {
                thread,
                shared: shared_tx,
                ended: ended_rx,
            },
        ))
    }

    /// Hands the service its shared state: it starts serving.
    fn start(self, shared: Arc<Shared>) -> Service {
        let _ = self.shared.send(shared);
        Service {
            thread: self.thread,
            ended: self.ended,
        }
    }
}
