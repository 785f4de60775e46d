//! How a PE reaches each peer ([`Route`]), and the transport for peers it cannot reach with
//! loads and stores ([`Remote`], with its operations as data, [`RemoteOp`]).
//!
//! # Routes
//! A PE's route to a peer is fixed when the job forms, from where the two live: `Mapped` on
//! the same node (the peer's segment is mapped here, and operations are loads, stores and
//! atomic instructions, inline), `Remote` on another node (operations go to the [`Remote`]
//! transport, which `ferroshmem-net` implements over the fabric). The data plane validates
//! an operation once, then matches on the route: the mapped arm is the same inline code as
//! before routes existed, with no call through a vtable.
//!
//! # The remote contract
//! A [`Remote`] addresses a peer's segment by mapping offset, as the data plane computed it
//! (header words included, for barriers). An operation's future resolves once the operation
//! is complete at the target: written data and atomic updates are visible there, and the
//! target's waiters sleeping on the bytes it changed have been woken. Two kinds of write are
//! the exception, [`RemoteOp::PutSent`] and [`RemoteOp::PutFlag`]: theirs may resolve once
//! the bytes are on their way (the source no longer needed), landing in order behind the
//! writes before them to that PE and before its later operations there (a transport
//! whose provider does not keep a write that long in order completes it once landed);
//! [`Remote::settle`] confirms that they have landed. A [`RemoteOp::PutPublished`]'s flag is
//! raised by the target once it reads the write's notice, which may be after the write's
//! future resolved: its reader learns of it from the flag, not from the writer. Dropping
//! the future does not recall
//! the operation. A transport may let a task that waits for what peers bring (a wait, an
//! awaited operation) drive its progress on the task's own thread
//! ([`Remote::drive`]), so that an arrival wakes that thread and no other.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ferroshmem_observability::Traffic;

use crate::error::{Error, Result};
use crate::segment::Segment;

/// How this PE reaches one peer.
#[derive(Debug, Clone)]
pub enum Route {
    /// The peer's segment, mapped in this process (same node).
    Mapped(Arc<Segment>),
    /// Through the job's remote transport (another node).
    Remote,
}

/// An atomic operation on a remote word, by kind; operands travel as the low bytes of a
/// `u64` (sign-extension does not matter: only the word's width is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amo {
    /// Read the word.
    Fetch,
    /// Replace the word; the old value comes back.
    Swap(u64),
    /// Replace the word if it equals the first operand; the old value comes back.
    CompareSwap(u64, u64),
    /// Add (wrapping).
    Add(u64),
    /// Bitwise and.
    And(u64),
    /// Bitwise or.
    Or(u64),
    /// Bitwise xor.
    Xor(u64),
}

/// A remote operation, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteOp {
    /// Write these bytes.
    Put(Vec<u8>),
    /// Write these bytes of the application's data (a `put`'s): complete once sent, landed
    /// once [`Remote::settle`] confirms it.
    PutSent(Vec<u8>),
    /// Write these bytes, a flag whose reader waits for its value (a barrier's signal):
    /// complete once sent, and not confirmed by [`Remote::settle`] (its reader learns of it
    /// from its value).
    PutFlag(Vec<u8>),
    /// Read this many bytes.
    Get(usize),
    /// Write `data`, then apply `signal` to the 64-bit word at mapping offset `signal_at`:
    /// whoever sees the signal's update sees the data (the transport orders the two).
    PutSignal {
        /// The bytes to write.
        data: Vec<u8>,
        /// Where the signal word is.
        signal_at: usize,
        /// What to do to it ([`Amo::Swap`] or [`Amo::Add`]).
        signal: Amo,
    },
    /// Write `data`, whose last 8 bytes are a value to publish; once the whole write is
    /// placed, the target itself raises the first word of the 64-byte line (of the
    /// segment's mapping) that the write starts in, which the write must not start at, to
    /// that value (an atomic maximum: for flags that only grow, which the target may be
    /// handed out of order): whoever sees the word's new value sees the data. A flag and
    /// the words of its line (or a message that follows its flag) go out as one write this
    /// way, where a write and then an atomic would wait a round trip between the two on
    /// transports that do not order the two classes. The value's own 8 bytes land after the
    /// data too.
    PutPublished(Vec<u8>),
    /// An atomic on a word of `width` bytes (4 or 8); resolves to the old value's bytes.
    Amo {
        /// What to do.
        op: Amo,
        /// The word's width in bytes.
        width: usize,
    },
}

/// The completion of a remote operation: what it read or fetched (empty for puts).
pub type Completion = Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send>>;

/// The transport to PEs on other nodes; see the module documentation for its contract.
pub trait Remote: Send + Sync + std::fmt::Debug {
    /// Starts `op` on PE `pe`'s segment at mapping offset `at`, before it returns (so that an
    /// `_nbi` caller never has to poll it to make progress), and returns its completion.
    fn start(&self, pe: usize, at: usize, op: RemoteOp) -> Completion;

    /// The name of the transport, for metrics (`fabric`).
    fn name(&self) -> &'static str {
        "fabric"
    }

    /// Takes this PE's traffic block for the transport, handed over once when the data plane
    /// is built (the data plane counts the operations; the transport keeps the gauges only it
    /// can see: operations in flight, CQ depth, its provider). Does nothing by default.
    fn record_into(&self, traffic: &Traffic) {
        let _ = traffic;
    }

    /// Confirms the [`RemoteOp::PutSent`] writes started so far: resolves once they have
    /// landed at their targets, with the first error (of theirs, of another operation's
    /// failure that may have lost them, or of an earlier confirmation not yet reported), or
    /// `None` when there is nothing to confirm or report.
    /// `None` by default (a transport whose writes complete once they have landed).
    fn settle(&self) -> Option<Completion> {
        None
    }

    /// The longest write that lands at its PE in order: behind the writes started to that
    /// PE before it, where they are no longer than this either. A write up to this long
    /// and then a [`RemoteOp::PutPublished`] to the same PE may be started one behind the
    /// other: whoever sees the published value sees both writes' data. 0 by default (no
    /// order promised: wait for the first write's completion).
    fn ordered_write_bytes(&self) -> usize {
        0
    }

    /// How long a task driving the transport's progress keeps reading it after an arrival
    /// before it sleeps until the next (zero: at once), told once when the data plane is
    /// built. Ignored by default.
    fn set_spin(&self, spin: Duration) {
        let _ = spin;
    }

    /// The drive of the transport's progress for a task that waits for what peers bring
    /// (see [`Drive`]), where the transport lets tasks drive it: then an arrival wakes the
    /// waiting task's own thread, with no hop through a progress thread. `None` by default,
    /// and whenever the transport cannot give it (another task drives).
    fn drive(&self) -> Option<Box<dyn Drive>> {
        None
    }
}

/// A task's hold on its remote transport's progress while it waits (see [`Remote::drive`]);
/// released when dropped.
pub trait Drive: Send + Sync {
    /// Hands on what has arrived from peers (their writes wake the waiters sleeping on them,
    /// the operations they complete end) and arranges for `cx` to be woken when more may
    /// have.
    fn poll_drive(&mut self, cx: &mut Context<'_>);

    /// Reads what has arrived now, whether or not the event loop has seen it yet: for a task
    /// that spins, whose thread does not go back to the event loop meanwhile.
    fn progress_now(&mut self);
}

/// A completion whose awaiting task drives the transport's progress (see
/// [`Remotes::driven`]): for its first `spin` it reads the transport's queue itself, a short
/// slice per poll, so that an answer that comes soon is seen without a thread wake-up; then
/// it sleeps until an arrival wakes it.
struct Driven {
    completion: Completion,
    transport: Arc<dyn Remote>,
    driver: Option<Box<dyn Drive>>,
    spin: Duration,
    /// When the spinning ends (set at the first poll).
    spin_until: Option<Instant>,
}

impl Driven {
    /// Reads the queue through `driver` for one slice or until the completion is ready.
    fn spin_slice(
        completion: &mut Completion,
        driver: &mut Box<dyn Drive>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Vec<u8>>> {
        let slice_end = Instant::now() + crate::wait::SPIN_SLICE;
        loop {
            driver.progress_now();
            if let Poll::Ready(outcome) = completion.as_mut().poll(cx) {
                return Poll::Ready(outcome);
            }
            if Instant::now() >= slice_end {
                // Let another thread (perhaps the PE the answer needs) have the CPU.
                std::thread::yield_now();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            std::hint::spin_loop();
        }
    }
}

impl Future for Driven {
    type Output = Result<Vec<u8>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Vec<u8>>> {
        let this = self.get_mut();
        if let Poll::Ready(outcome) = this.completion.as_mut().poll(cx) {
            return Poll::Ready(outcome);
        }
        if this.driver.is_none() {
            this.driver = this.transport.drive();
        }
        let Some(driver) = this.driver.as_mut() else {
            return Poll::Pending;
        };
        let now = Instant::now();
        if now < *this.spin_until.get_or_insert(now + this.spin) {
            return Driven::spin_slice(&mut this.completion, driver, cx);
        }
        // What the drive reads may end this operation: look again.
        driver.poll_drive(cx);
        this.completion.as_mut().poll(cx)
    }
}

/// How many deferred completions make the first pruning.
const PRUNE_FIRST: usize = 64;

/// The completions of `_nbi` remote operations not yet awaited.
struct Deferred {
    pending: Vec<Completion>,
    /// Pruned again once `pending` holds this many.
    prune_at: usize,
}

impl Deferred {
    fn take(&mut self) -> Vec<Completion> {
        self.prune_at = PRUNE_FIRST;
        std::mem::take(&mut self.pending)
    }

    /// Drops the completions that have ended, keeping the first error among them as a
    /// completion of its own; prunes next when the survivors have doubled.
    fn prune(&mut self) {
        if let Some(e) = self.failure() {
            self.pending.insert(0, Box::pin(std::future::ready(Err(e))));
        }
    }

    /// Keeps `completion`, pruning the ended ones from time to time.
    fn keep(&mut self, completion: Completion) {
        self.pending.push(completion);
        if self.pending.len() >= self.prune_at {
            self.prune();
        }
    }

    /// Drops the completions that have ended; returns the first error among them, if any.
    fn failure(&mut self) -> Option<Error> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut failed = None;
        self.pending.retain_mut(|c| match c.as_mut().poll(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Ok(_)) => false,
            Poll::Ready(Err(e)) => {
                failed.get_or_insert(e);
                false
            }
        });
        self.prune_at = (2 * self.pending.len()).max(PRUNE_FIRST);
        failed
    }
}

/// The outcome of `completion`, if there is one; nothing to wait for is a success.
async fn ended(completion: Option<Completion>) -> Result<Vec<u8>> {
    match completion {
        Some(completion) => completion.await,
        None => Ok(Vec::new()),
    }
}

/// The completion of every one of `pending`: it ends once all have, with the first error.
fn all_of(pending: Vec<Completion>) -> Completion {
    Box::pin(async move {
        let mut first = Ok(Vec::new());
        for completion in pending {
            if let (Err(e), Ok(_)) = (completion.await, &first) {
                first = Err(e);
            }
        }
        first
    })
}

/// An ordering domain of remote operations (a communication context's): the completions of
/// its `_nbi` operations that its `quiet` has not yet awaited, and whether a `fence` asks its
/// next operation to start only once those before it have completed. The default context's
/// lives in [`Remotes`]; each [`crate::Context`] has its own, so that its `quiet` and `fence`
/// concern its operations alone.
pub(crate) struct Domain {
    deferred: Mutex<Deferred>,
    fenced: AtomicBool,
}

impl Default for Domain {
    fn default() -> Self {
        Domain {
            deferred: Mutex::new(Deferred {
                pending: Vec::new(),
                prune_at: PRUNE_FIRST,
            }),
            fenced: AtomicBool::new(false),
        }
    }
}

impl Domain {
    fn lock(&self) -> std::sync::MutexGuard<'_, Deferred> {
        self.deferred.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Orders the operations started after it after those started before.
    pub fn fence(&self) {
        self.fenced.store(true, Ordering::Release);
    }

    /// Keeps the completion of an `_nbi` operation for the next `quiet`. Completions that
    /// have ended are dropped from time to time (the first error kept), so that a caller
    /// that rarely calls `quiet` does not hoard them.
    pub fn defer(&self, completion: Completion) {
        self.lock().keep(completion);
    }

    /// The completion of every operation deferred so far (taken now), or `None` when there
    /// are none: it ends once all have, with the first error, if any.
    pub fn quiet(&self) -> Option<Completion> {
        let pending = self.lock().take();
        (!pending.is_empty()).then(|| all_of(pending))
    }

    /// Whether a fence waits for the next operation started: that one will then be posted
    /// only once the operations before the fence have completed.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// The operations a fence since the last start asks the next one to wait for.
    fn fenced_before(&self) -> Vec<Completion> {
        match self.fenced.swap(false, Ordering::AcqRel) {
            true => self.lock().take(),
            false => Vec::new(),
        }
    }
}

/// A data plane's remote transport, its traffic, the completions of its `_nbi`
/// operations that `quiet` has not yet awaited, and those of its world barriers' signals.
pub(crate) struct Remotes {
    transport: Arc<dyn Remote>,
    /// The runtime the data plane was built on, if any: it posts fenced operations for
    /// callers outside any runtime (the C library's).
    runtime: Option<tokio::runtime::Handle>,
    pub traffic: Traffic,
    /// How long a task awaiting a completion reads the queue before it sleeps.
    spin: Duration,
    /// The default context's ordering domain.
    default: Domain,
    /// The world barriers' remote signals: a barrier does not wait for its signals to be
    /// acknowledged (its peers' own signals tell it all it needs), so their completions are
    /// kept here, their errors reported by a later barrier.
    signals: Mutex<Deferred>,
}

impl std::fmt::Debug for Remotes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remotes")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Remotes {
    /// The remote side of a data plane over `transport`, counting into `traffic`; a task
    /// awaiting a completion, or driving the transport after an arrival, reads its queue for
    /// `spin` before it sleeps (see [`Remotes::driven`], [`Remote::set_spin`]).
    pub fn new(transport: Arc<dyn Remote>, traffic: Traffic, spin: Duration) -> Remotes {
        transport.record_into(&traffic);
        transport.set_spin(spin);
        Remotes {
            transport,
            runtime: tokio::runtime::Handle::try_current().ok(),
            traffic,
            spin,
            default: Domain::default(),
            signals: Mutex::new(Deferred {
                pending: Vec::new(),
                prune_at: PRUNE_FIRST,
            }),
        }
    }

    /// See [`Remote::ordered_write_bytes`].
    pub fn ordered_write_bytes(&self) -> usize {
        self.transport.ordered_write_bytes()
    }

    /// The drive of the transport's progress, if it gives it (see [`Remote::drive`]).
    pub fn drive(&self) -> Option<Box<dyn Drive>> {
        self.transport.drive()
    }

    /// `completion`, for a task that awaits it: while it is pending, the task drives the
    /// transport's progress if it can (see [`Remote::drive`]), reading the queue itself for
    /// the first part of it (the spin given to [`Remotes::new`]) before it sleeps until an
    /// arrival wakes it. Completions that are kept (`_nbi`, barrier signals) are not wrapped:
    /// a check of them now and then must not hold the drive.
    pub fn driven(&self, completion: Completion) -> Completion {
        Box::pin(Driven {
            completion,
            transport: self.transport.clone(),
            driver: None,
            spin: self.spin,
            spin_until: None,
        })
    }

    /// Starts `op` in `domain`; after a fence there with operations outstanding, only once
    /// they all ended (its own completion then drives it, as `quiet` or its caller polls it).
    /// Their first error stays `quiet`'s, not the fenced operation's, where a runtime posts
    /// it.
    pub fn start_in(&self, domain: &Domain, pe: usize, at: usize, op: RemoteOp) -> Completion {
        {
            let before = domain.fenced_before();
            if !before.is_empty() {
                let transport = self.transport.clone();
                // On a runtime (the caller's, or for a caller outside any, the one the data
                // plane was built on) it is posted as soon as the earlier ones ended, whether
                // or not anyone polls its completion (an `_nbi` one's waits for `quiet`).
                let runtime = tokio::runtime::Handle::try_current().ok();
                return match runtime.or_else(|| self.runtime.clone()) {
                    Some(runtime) => {
                        let (told, earlier) = tokio::sync::oneshot::channel();
                        domain.defer(Box::pin(
                            async move { earlier.await.unwrap_or(Ok(Vec::new())) },
                        ));
                        let after_them = async move {
                            let _ = told.send(all_of(before).await);
                            transport.start(pe, at, op).await
                        };
                        let task = runtime.spawn(after_them);
                        Box::pin(async move {
                            task.await
                                .unwrap_or_else(|e| Err(Error::os("a fenced operation's task", e)))
                        })
                    }
                    // Nothing posts it but its own completion: it reports theirs too.
                    None => Box::pin(async move {
                        all_of(before).await?;
                        transport.start(pe, at, op).await
                    }),
                };
            }
        }
        self.transport.start(pe, at, op)
    }

    /// The transport's confirmation of its sent writes (see [`Remote::settle`]).
    pub fn settle(&self) -> Option<Completion> {
        self.transport.settle()
    }

    /// `quiet`'s completion: `pending` (the `_nbi` operations of a domain, if any) and the
    /// confirmation of the sent writes, asked for at once and again once `pending` has ended
    /// (so that it covers what a fence held back until then); the first error of any. `None`
    /// when there is nothing to wait for.
    pub fn quiet(&self, pending: Option<Completion>) -> Option<Completion> {
        // Asked for at once too, so that the confirmation follows the writes on the wire
        // without waiting for their completions.
        let early = self.settle();
        let Some(pending) = pending else {
            return early;
        };
        let transport = self.transport.clone();
        Some(Box::pin(async move {
            let first = pending.await;
            let early = ended(early).await;
            let settled = ended(transport.settle()).await;
            first.and(early).and(settled)
        }))
    }

    /// The default context's ordering domain.
    pub fn default_domain(&self) -> &Domain {
        &self.default
    }

    fn signals(&self) -> std::sync::MutexGuard<'_, Deferred> {
        self.signals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the completion of a world barrier's signal.
    pub fn keep_signal(&self, completion: Completion) {
        self.signals().keep(completion);
    }

    /// The first error of the world barriers' signals that have ended since the last call.
    pub fn signal_failure(&self) -> Option<Error> {
        self.signals().failure()
    }

    /// The completion of every world barrier signal kept (taken now), or `None`.
    pub fn signals_landed(&self) -> Option<Completion> {
        let pending = self.signals().take();
        (!pending.is_empty()).then(|| all_of(pending))
    }
}

#[cfg(test)]
mod tests;
