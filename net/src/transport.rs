//! [`Fabric`]: one PE's endpoint, its registered segment, and the progress thread that ends
//! its operations and hands on the data of peers' writes (or stands aside while a waiting
//! task does, see [`crate::progress`]).
//!
//! # Metrics
//! Once given the PE's fabric traffic block ([`Fabric::record_into`]), the endpoint names its
//! provider there and whoever reads the completion queue keeps
//! `ferroshmem_cq_depth{transport="fabric"}`: the number of entries its latest read of the
//! completion queue found (its operations' completions and peers' notices; a read takes at
//! most 32, so 32 means at least as many were waiting), 0 once a read found none (the
//! progress thread's waits last up to [`PROGRESS_WAIT_MS`](crate::progress::PROGRESS_WAIT_MS)). It is stored only when
//! it changes: one relaxed store per read at most, none per operation.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use ferroshmem_observability::Traffic;
use ferroshmem_runtime::{Error, Result, Segment};
use tokio::sync::oneshot;

use crate::ffi::types::{FI_MR_PROV_KEY, FI_MR_VIRT_ADDR};
use crate::ffi::{Domain, Endpoint, Hints, Info, Library, MemoryRegion, Operation, Refused};
use crate::progress::{progress_loop, Core, Driver};
use crate::room::Deferred;

/// Where and how a PE's fabric endpoint is opened.
#[derive(Debug, Clone, Default)]
pub struct FabricOptions {
    /// The provider (`tcp;ofi_rxm`, …); `None`: the first libfabric offers.
    pub provider: Option<String>,
    /// The local address the endpoint binds to (an IP address of this host), if any.
    pub node: Option<String>,
}

/// A peer's endpoint, as this PE's address vector names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(u64);

/// A registered segment: what a peer needs to reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// The key peers present.
    pub key: u64,
    /// The address peers add offsets to (0 for providers that take offsets).
    pub base: u64,
}

/// One PE's fabric endpoint; see the crate documentation.
pub struct Fabric {
    /// The endpoint and what its progress thread shares with driving tasks.
    core: Arc<Core>,
    domain: Arc<Domain>,
    regions: std::sync::Mutex<Vec<MemoryRegion>>,
    progress: Option<JoinHandle<()>>,
    /// See [`Fabric::ordered_write_bytes`].
    ordered_write_bytes: usize,
}

/// The smallest size up to which the provider must place writes to a PE in order: a barrier
/// flag's, whose successive values must not land out of order (`runtime::barrier`).
pub const ORDERED_FLAG_BYTES: usize = 8;

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("provider", &self.provider())
            .finish_non_exhaustive()
    }
}

impl Fabric {
    /// Loads libfabric, opens an endpoint as `options` say, and starts its progress thread,
    /// which calls `on_data` with the data of every peer's write that carries some.
    ///
    /// # Errors
    /// [`Error::Config`] when libfabric is missing or no provider offers what is needed.
    pub fn open(
        options: &FabricOptions,
        on_data: impl Fn(u64) + Send + Sync + 'static,
    ) -> Result<Fabric> {
        let lib = Arc::new(Library::load()?);
        let hints = Hints {
            provider: options.provider.clone(),
            node: options.node.clone(),
            domain: None,
        };
        let info = Info::get(&lib, &hints)?;
        let ordered_write_bytes = info.ordered_write_bytes(&hints)?;
        if ordered_write_bytes < ORDERED_FLAG_BYTES {
            return Err(Error::Config(format!(
                "fabric provider {} may place writes to a PE out of order \
                 (max_order_waw_size {ordered_write_bytes}), and ferroshmem's barriers need \
                 writes of {ORDERED_FLAG_BYTES} bytes to land in order: pick another with \
                 FERROSHMEM_FABRIC_PROVIDER (e.g. 'tcp;ofi_rxm', 'verbs;ofi_rxm')",
                info.provider()
            )));
        }
        let domain = Domain::open(&lib, info)?;
        let endpoint = Arc::new(Endpoint::open(&domain)?);
        let core = Arc::new(Core::new(endpoint, Box::new(on_data)));
        let progress = std::thread::Builder::new()
            .name("fsh-fabric".into())
            .spawn({
                let core = core.clone();
                move || progress_loop(&core)
            })
            .map_err(|e| Error::os("starting the fabric progress thread", e))?;
        Ok(Fabric {
            core,
            domain,
            regions: Default::default(),
            progress: Some(progress),
            ordered_write_bytes,
        })
    }

    /// The largest write the provider places at a peer in posting order, behind the writes
    /// posted before it: a write up to this size may complete once sent and be confirmed by
    /// a later write; a longer one must complete once placed.
    pub fn ordered_write_bytes(&self) -> usize {
        self.ordered_write_bytes
    }

    /// Records this endpoint's metrics into `traffic`, the PE's fabric traffic block: names
    /// the provider (`ferroshmem_transport_info`) and keeps the CQ depth (see the module
    /// documentation). The first block given is kept; a disabled one records nothing.
    pub fn record_into(&self, traffic: &Traffic) {
        if traffic.is_enabled() && self.core.traffic.set(traffic.clone()).is_ok() {
            traffic.set_provider(&self.provider());
        }
    }

    /// The provider in use.
    pub fn provider(&self) -> String {
        self.domain.info().provider()
    }

    /// This endpoint's address, for peers' [`Fabric::connect`].
    pub fn name(&self) -> Result<Vec<u8>> {
        self.core.endpoint.name()
    }

    /// Registers `segment` for peers' reads, writes and atomics, under `key` where the
    /// provider lets the application choose keys (keys must differ per segment).
    pub fn register(&self, segment: Arc<Segment>, key: u64) -> Result<Registered> {
        let base = segment.mapping().base_addr() as u64;
        let region = self.domain.register(segment, key)?;
        region.bind(&self.core.endpoint)?;
        let mode = self.domain.info().mr_mode();
        let registered = Registered {
            key: if mode & FI_MR_PROV_KEY != 0 {
                region.key()
            } else {
                key
            },
            base: if mode & FI_MR_VIRT_ADDR != 0 { base } else { 0 },
        };
        self.regions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(region);
        Ok(registered)
    }

    /// Inserts peers' addresses; returns their handles in order.
    pub fn connect(&self, names: &[Vec<u8>]) -> Result<Vec<Peer>> {
        Ok(self
            .core
            .endpoint
            .insert(names)?
            .into_iter()
            .map(Peer)
            .collect())
    }

    /// Whether the provider carries atomic `op` (see [`crate::atomic`]) on words of `width`
    /// bytes, fetching or not, or compare-and-swap when `op` is `None`.
    pub fn supports(&self, op: Option<std::ffi::c_int>, width: usize, fetching: bool) -> bool {
        let op = op.unwrap_or(crate::ffi::types::FI_CSWAP);
        self.core.endpoint.atomic_valid(op, width, fetching)
    }

    /// Runs `op` on `peer`'s segment registered as `target`, at byte `offset` of it;
    /// resolves to what it read or fetched (empty for writes and plain atomics) once the
    /// provider reports it complete.
    ///
    /// # Errors
    /// [`Error::Os`] when the provider refuses or fails the operation, had no room for it
    /// for [`ROOM_DEADLINE`](crate::ROOM_DEADLINE), or the endpoint closes with it in
    /// flight; [`Error::Shutdown`] when the endpoint closes before the provider took it.
    ///
    /// # Cancel safety
    /// Dropping the future does not recall the operation: it completes (or fails) on its
    /// own, and the buffers it uses are its own until then.
    pub async fn run(
        &self,
        op: Operation,
        peer: Peer,
        target: Registered,
        offset: u64,
    ) -> Result<Vec<u8>> {
        self.start(op, peer, target, offset).await
    }

    /// Posts `op` as [`Fabric::run`] does, but before it returns (or, where the provider
    /// has no room for it yet, as soon as it has, whether or not the future is polled): the
    /// future only waits for the completion.
    pub fn start(
        &self,
        op: Operation,
        peer: Peer,
        target: Registered,
        offset: u64,
    ) -> impl std::future::Future<Output = Result<Vec<u8>>> + Send + 'static {
        self.start_then(op, peer, target, offset, Hooks::default())
    }

    /// [`Fabric::start`], calling `hooks.posted` once the provider took the operation (or
    /// refused it for good) and `hooks.ended` when it ends (completes, fails or is never
    /// posted), whether or not anyone awaits it.
    pub fn start_then(
        &self,
        mut op: Operation,
        peer: Peer,
        target: Registered,
        offset: u64,
        hooks: Hooks,
    ) -> impl std::future::Future<Output = Result<Vec<u8>>> + Send + 'static {
        let Hooks {
            posted: left_queue,
            ended,
        } = hooks;
        let (tx, rx) = oneshot::channel();
        // Run when the operation ends, or dropped with the operation if it is never posted.
        let mut ended = OnDrop {
            f: ended,
            dropped: Ended::Failed,
        };
        let mut left_queue = OnDrop {
            f: left_queue.map(|f| move |()| f()),
            dropped: (),
        };
        let done: crate::ffi::Done = Box::new(move |outcome: Result<Vec<u8>>| {
            let how = match outcome {
                Ok(_) => Ended::Completed,
                Err(_) => Ended::Failed,
            };
            // The hooks first: a lane learns of a failure before anyone awaiting the
            // operation (a confirmation's task among them) can run on.
            ended.run(how);
            let _ = tx.send(outcome);
        });
        let to = (peer.0, target.base + offset, target.key);
        let core = &self.core;
        // Behind the operations to the same peer that wait for room, so that none overtakes
        // an earlier one.
        let first = match core.room.holds_for(to.0) {
            false => core.endpoint.post(&mut op, to.0, to.1, to.2, done),
            true => Err(Refused::Full(done)),
        };
        match first {
            Ok(()) => left_queue.run(()),
            Err(Refused::Failed(e, done)) => {
                left_queue.run(());
                if let Some(done) = done {
                    done(Err(e));
                }
            }
            // Posted by the next reader of the queue (see `crate::room`).
            Err(Refused::Full(done)) => core.defer(Deferred {
                op,
                to,
                done,
                posted: Box::new(move || left_queue.run(())),
                since: Instant::now(),
            }),
        }
        async move { rx.await.unwrap_or(Err(Error::Shutdown)) }
    }

    /// How many operations are in flight.
    pub fn in_flight(&self) -> usize {
        self.core.endpoint.in_flight()
    }

    /// How long a driving task keeps reading the completion queue on its own core after the
    /// last arrival before it sleeps until the next: arrivals that follow each other closely
    /// (a peer's stream of atomics, each answered before the next comes) are then read
    /// without a thread wake-up each. Zero (the default): it sleeps at once.
    pub fn set_spin(&self, spin: std::time::Duration) {
        self.core.set_spin(spin);
    }

    /// The drive of this endpoint's completion queue for the calling task, while it waits
    /// for what the fabric brings (see the crate's documentation): `None` off a tokio runtime,
    /// where the provider's queue has no wait object, or while another task drives.
    pub fn drive(&self) -> Option<Driver> {
        self.core.drive()
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        self.core.stop.store(true, Ordering::Release);
        self.core.endpoint.interrupt();
        // The last holder may be the progress thread itself (a hook it ran held the
        // fabric): it ends on its own at its next look at `stop`.
        if let Some(t) = self.progress.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        // What still waits for room will never be posted: its owners learn so.
        self.core.room.drop_all();
    }
}

/// What [`Fabric::start_then`] tells of an operation's progress.
#[derive(Default)]
pub struct Hooks {
    /// Called once the provider took the operation, or refused it for good.
    pub posted: Option<Box<dyn FnOnce() + Send>>,
    /// Called once the operation ended, with how.
    pub ended: Option<Box<dyn FnOnce(Ended) + Send>>,
}

/// How an operation ended, as [`Hooks::ended`] is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The provider reported it complete: at the target, it was applied (for a write sent
    /// with inject completion, [`Operation::WriteSent`]: its bytes are on their way).
    Completed,
    /// It failed, or was never posted.
    Failed,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks").finish_non_exhaustive()
    }
}

/// Runs its function once: with the argument given when asked, or with `dropped` when
/// dropped first.
struct OnDrop<A: Copy, F: FnOnce(A)> {
    f: Option<F>,
    dropped: A,
}

impl<A: Copy, F: FnOnce(A)> OnDrop<A, F> {
    fn run(&mut self, argument: A) {
        if let Some(f) = self.f.take() {
            f(argument);
        }
    }
}

impl<A: Copy, F: FnOnce(A)> Drop for OnDrop<A, F> {
    fn drop(&mut self) {
        self.run(self.dropped);
    }
}
