//! The data plane of one PE: its route to every peer (the peer's segment mapped here, or the
//! remote transport; see [`crate::route`]), and the operations that go straight from the
//! caller to a peer's memory (RMA, atomics, signals, waits, barriers) without passing through
//! any actor's mailbox. The operations themselves live in sibling modules ([`crate::rma`],
//! [`crate::amo`], [`crate::signal`], [`crate::wait`], [`crate::barrier`]).

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytemuck::Pod;
use ferroshmem_observability::{Op, PeMetrics, Traffic};

use crate::config::MAX_SPIN;
use crate::cpus::CpuShare;
use crate::doorbell::Doorbell;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::heap::{Area, HeapId, Span, SymSlice};
use crate::route::{Completion, Domain, Remote, RemoteOp, Remotes, Route};
use crate::segment::{Segment, HEADER_SIZE};
use crate::team::shape::NodeShape;
use crate::team::Teams;

/// What a PE's data plane is built from.
#[derive(Debug)]
pub struct DataPlaneParts {
    /// This PE's number.
    pub my_pe: usize,
    /// The job's heap identity.
    pub heap: HeapId,
    /// The route to every PE, indexed by PE; this PE's own is `Mapped` to its segment.
    pub routes: Vec<Route>,
    /// The transport of the `Remote` routes (`None` when every PE is mapped).
    pub remote: Option<Arc<dyn Remote>>,
    /// The node of every PE, indexed by PE: a number every PE of the job gives alike to the
    /// PEs of one node (the first node of the job's PE order is 0, the next new one 1, …).
    /// The PEs whose route is `Mapped` are exactly those on this PE's node.
    pub nodes: Vec<usize>,
    /// How many of the job's PEs run on this PE's machine (one kernel), this PE's node's
    /// included: nodes that are network namespaces or containers of one kernel share its
    /// CPUs.
    pub machine_pes: usize,
    /// The job's failure state as this PE sees it.
    pub health: Arc<Health>,
    /// How long waits spin before sleeping.
    pub spin: Duration,
}

/// One PE's view of the job's memory, and the operations on it.
#[derive(Debug)]
pub struct DataPlane {
    pub(crate) my_pe: usize,
    pub(crate) heap: HeapId,
    /// The heap id that views must carry: the job's while the PE is open, its complement
    /// once it has shut down, so that the check every operation makes of its views' heap
    /// also refuses every operation after `finalize`, at no cost before.
    open_heap: AtomicU64,
    /// Where each [`Area`] of the heap ends (heap offsets): the user heap below the team
    /// pool, the pool at the end of the heap.
    area_ends: [usize; 2],
    pub(crate) routes: Vec<Route>,
    /// The node of every PE (see [`DataPlaneParts::nodes`]).
    nodes: Box<[usize]>,
    /// Whether this PE's waits share a CPU with other PEs' (they yield after every round of
    /// checks): the PEs of its node outnumber the CPUs they may use ([`CpuShare`]), or the
    /// PEs of its machine the machine's CPUs ([`crate::cpus::machine_crowded`]). Alike on
    /// every PE of the node.
    crowded: bool,
    /// The job's PEs grouped by node, when the world barrier syncs by node (the job spans
    /// nodes and some node holds more than one PE, or this PE's node is crowded: a gather
    /// at one PE and its release take fewer trips through the scheduler than the
    /// dissemination's rounds); `None` for the flat dissemination.
    pub(crate) world_nodes: Option<NodeShape>,
    /// This PE's own segment (also its own route).
    own: Arc<Segment>,
    /// The transport of the `Remote` routes, if any.
    pub(crate) remotes: Option<Remotes>,
    pub(crate) doorbell: Doorbell,
    pub(crate) health: Arc<Health>,
    pub(crate) spin: Duration,
    pub(crate) barrier_epoch: AtomicU64,
    /// The error a world barrier of this PE failed with midway, which every later one
    /// returns.
    pub(crate) barrier_failure: Mutex<Option<Error>>,
    pub(crate) metrics: PeMetrics,
    /// This PE's traffic over shared memory (every peer of a host-memory job).
    pub(crate) traffic: Traffic,
    /// Calls of `test_any` and `wait_until_any` so far: each starts its search one index
    /// further, so that a series of calls returns every satisfied index in turn.
    pub(crate) any_calls: AtomicUsize,
}

impl DataPlane {
    /// Builds the data plane and starts the PE's doorbell thread.
    ///
    /// # Errors
    /// [`Error::Config`] when this PE's own route is not its mapped segment, or a route is
    /// `Remote` without a transport.
    pub fn new(parts: DataPlaneParts) -> Result<Self> {
        let n_pes = parts.routes.len();
        let own = match parts.routes.get(parts.my_pe) {
            Some(Route::Mapped(own)) => own.clone(),
            Some(Route::Remote) => {
                return Err(Error::Config(
                    "a PE's own route must be its mapped segment".into(),
                ))
            }
            None => {
                return Err(Error::PeOutOfRange {
                    pe: parts.my_pe,
                    n_pes,
                })
            }
        };
        check_nodes(parts.my_pe, &parts.routes, &parts.nodes)?;
        if parts.spin > MAX_SPIN {
            return Err(Error::Config(format!(
                "a spin of {:?}: waits spin at most {MAX_SPIN:?}, since a wait checks its \
                 peers' calls only once it sleeps",
                parts.spin
            )));
        }
        let remote_routes = parts.routes.iter().any(|r| matches!(r, Route::Remote));
        if remote_routes && parts.remote.is_none() {
            return Err(Error::Config(
                "PEs on other nodes need a remote transport".into(),
            ));
        }
        let metrics = PeMetrics::new(parts.my_pe, parts.heap.0);
        let traffic = metrics.traffic("shm", n_pes);
        let node_pes = parts
            .nodes
            .iter()
            .filter(|&&node| Some(&node) == parts.nodes.get(parts.my_pe))
            .count();
        let node_shares = parts.routes.iter().filter_map(|route| match route {
            Route::Mapped(segment) => Some(segment.cpu_share()),
            Route::Remote => None,
        });
        let node_crowded = CpuShare::crowded(node_pes, node_shares);
        let crowded = node_crowded || crate::cpus::machine_crowded(node_pes, parts.machine_pes);
        // Awaited fabric completions spin before they sleep unless the node itself is
        // crowded: where only the machine is (namespace hosts), spinning was the faster (4
        // PEs on 2 hosts of 2 CPUs: reduce, fcollect and alltoall of 4 B 15-20% faster).
        let remote_spin = crate::wait::completion_spin(node_crowded, parts.spin);
        let remotes = parts
            .remote
            .map(|t| Remotes::new(t.clone(), metrics.traffic(t.name(), n_pes), remote_spin));
        let heap_size = own.heap_size();
        let pool = Teams::pool_layout(heap_size, n_pes)?;
        Ok(DataPlane {
            my_pe: parts.my_pe,
            heap: parts.heap,
            open_heap: AtomicU64::new(parts.heap.0),
            area_ends: [pool.user_heap_bytes(), heap_size],
            doorbell: Doorbell::start(parts.my_pe, own.clone())?,
            routes: parts.routes,
            crowded,
            world_nodes: Some(NodeShape::new(&parts.nodes))
                .filter(|shape| shape.layered() || node_crowded),
            nodes: parts.nodes.into_boxed_slice(),
            own,
            remotes,
            health: parts.health,
            spin: parts.spin,
            barrier_epoch: AtomicU64::new(0),
            barrier_failure: Mutex::new(None),
            metrics,
            traffic,
            any_calls: AtomicUsize::new(0),
        })
    }

    /// This PE's number (`shmem_my_pe`).
    pub fn my_pe(&self) -> usize {
        self.my_pe
    }

    /// The number of PEs in the job (`shmem_n_pes`).
    pub fn n_pes(&self) -> usize {
        self.routes.len()
    }

    /// The job's heap identity.
    pub fn heap_id(&self) -> HeapId {
        self.heap
    }

    /// Usable symmetric heap bytes per PE.
    pub fn heap_size(&self) -> usize {
        self.own.heap_size()
    }

    /// The bytes at the start of the heap that `malloc` may hand out (the team pool takes
    /// the rest).
    pub fn user_heap_bytes(&self) -> usize {
        self.area_ends[Area::User as usize]
    }

    /// The address, in this process, of heap offset 0 of this PE's own copy (the start of
    /// the user heap): a local pointer into the heap minus it is the symmetric offset that
    /// names the same object on every PE.
    pub fn heap_base(&self) -> usize {
        self.own.mapping().base_addr() + HEADER_SIZE
    }

    /// What [`DataPlane::heap_base`] is aligned to, alike on every PE: the largest alignment
    /// an allocation in the heap can be given.
    pub fn heap_alignment(&self) -> usize {
        crate::segment::heap_alignment(self.heap_size())
    }

    /// The file behind this PE's heap and the file offset of heap bytes
    /// `offset..offset + len` of the user heap: what
    /// [`SharedMapping::alias_fixed`](crate::shared_memory::SharedMapping::alias_fixed) maps
    /// to make a C program's static data symmetric.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range passes the user heap.
    pub fn heap_file(&self, offset: usize, len: usize) -> Result<(BorrowedFd<'_>, u64)> {
        if !self.in_user_heap(offset, len) {
            return Err(Error::OutOfBounds {
                what: "heap file range",
                needed: offset.saturating_add(len),
                available: self.user_heap_bytes(),
            });
        }
        Ok((self.own.fd(), (HEADER_SIZE + offset) as u64))
    }

    /// Whether user-heap bytes `offset..offset + len` lie in the user heap (an offset from
    /// its start, the same on every PE).
    #[inline(always)]
    pub(crate) fn in_user_heap(&self, offset: usize, len: usize) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.user_heap_bytes())
    }

    /// Shuts this PE's data plane down, once it has finalized: from then on every operation
    /// of every handle to it fails with [`Error::Shutdown`] (or with the job's failure, if it
    /// had failed before), and its waits end.
    pub fn shut_down(&self) {
        self.open_heap.store(!self.heap.0, Ordering::Relaxed);
        self.health.fail(Error::Shutdown);
        self.wake_local_waiters();
    }

    /// Whether [`DataPlane::shut_down`] has run.
    #[inline]
    pub fn is_shut_down(&self) -> bool {
        self.open_heap.load(Ordering::Relaxed) != self.heap.0
    }

    /// The job's failure state as this PE sees it.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// This PE's metrics (recording nothing unless the exporter was installed before the PE
    /// was created); other layers add their own traffic blocks with [`PeMetrics::traffic`].
    pub fn metrics(&self) -> &PeMetrics {
        &self.metrics
    }

    /// Records, when this PE gives a collective call up while its thread unwinds from a
    /// panic, that this PE itself is lost: the PEs that see the call given up then report
    /// the loss (see [`DataPlane::blame`]), not a mismatch.
    pub(crate) fn note_if_panicking(&self) {
        if std::thread::panicking() {
            self.record_lost_peer(self.my_pe);
        }
    }

    /// Records that `pe` was lost, where the other PEs can read it, before this PE's calls
    /// fail because of it (see [`DataPlane::blame`]).
    fn record_lost_peer(&self, pe: usize) {
        let _ = self.own_segment().lost_peer().compare_exchange(
            0,
            pe as u64 + 1,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// The cause of `error`, an error a wait concluded from the state of other PEs (a call
    /// or a barrier given up): when this PE, or any PE whose memory it maps, has learned
    /// that a PE was lost, that PE is the cause, and the error is [`Error::PeerLost`]. A
    /// survivor gives its calls up once it learns of a loss, and its peers may read that
    /// before they learn of the loss themselves.
    #[cold]
    pub(crate) fn blame(&self, error: Error) -> Error {
        if !matches!(error, Error::CollectiveMismatch { .. }) {
            return error;
        }
        if let Err(lost @ Error::PeerLost { .. }) = self.health.check() {
            return lost;
        }
        match self.known_loss() {
            Some((pe, by)) => Error::PeerLost {
                pe,
                reason: format!(
                    "PE {by} learned it was lost, and gave up the call this one waited in ({error})"
                ),
            },
            None => error,
        }
    }

    /// The first lost PE recorded in the header of this PE or of a PE it maps, and who
    /// recorded it.
    fn known_loss(&self) -> Option<(usize, usize)> {
        self.routes
            .iter()
            .enumerate()
            .find_map(|(by, route)| match route {
                Route::Mapped(s) => match s.lost_peer().load(Ordering::Acquire) {
                    0 => None,
                    lost => Some((lost as usize - 1, by)),
                },
                Route::Remote => None,
            })
    }

    /// The error of this PE's job when it learns that `pe` was lost for `reason`: that
    /// loss, unless a PE it maps had recorded another one before (then that one came first:
    /// the PE hosting the root, say, exited because of it, and the root's notice of the
    /// first loss may have gone with it). Records the loss for the other PEs.
    pub fn loss(&self, pe: usize, reason: String) -> Error {
        let error = match self.known_loss() {
            Some((first, by)) if first != pe => Error::PeerLost {
                pe: first,
                reason: format!("PE {by} learned it was lost, before PE {pe} was lost ({reason})"),
            },
            _ => Error::PeerLost { pe, reason },
        };
        if let Error::PeerLost { pe, .. } = &error {
            self.record_lost_peer(*pe);
        }
        error
    }

    /// Wakes this PE's local waiters so that they re-check the job's health.
    pub fn wake_local_waiters(&self) {
        self.doorbell.ring_local();
    }

    /// Zeroes `bytes` bytes of this PE's user heap at heap offset `offset` (for `calloc`).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the bytes reach past the user heap (into the team pool or
    /// beyond the heap).
    pub fn zero_local(&self, offset: usize, bytes: usize) -> Result<()> {
        let user = self.user_heap_bytes();
        match offset.checked_add(bytes) {
            Some(end) if end <= user => {
                self.zero_own(offset, bytes);
                Ok(())
            }
            _ => Err(Error::OutOfBounds {
                what: "bytes to zero",
                needed: offset.saturating_add(bytes),
                available: user,
            }),
        }
    }

    /// Zeroes `bytes` bytes of this PE's heap at heap offset `offset`, which the caller
    /// has checked lie in the heap (the team pool's regions).
    pub(crate) fn zero_own(&self, offset: usize, bytes: usize) {
        self.own_segment()
            .mapping()
            .zero(HEADER_SIZE + offset, bytes);
    }

    /// Whether `pe` can be reached by loads and stores (`shmem_ptr` would be non-null): the
    /// PEs of this node.
    pub fn is_mapped(&self, pe: usize) -> bool {
        matches!(self.routes.get(pe), Some(Route::Mapped(_)))
    }

    /// Whether the PEs of this PE's node outnumber the CPUs they may use, or the PEs of its
    /// machine the machine's, so that the PE a wait depends on may need this PE's CPU to
    /// make progress.
    pub(crate) fn crowded(&self) -> bool {
        self.crowded
    }

    /// Whether PE `pe` runs on another CPU than this PE: both share the node, and each
    /// recorded the one CPU it is bound to (`Segment::record_bound_cpu`), and those differ.
    /// `false` where either is unbound, unrecorded, or `pe` is on another node.
    pub(crate) fn runs_on_another_cpu(&self, pe: usize) -> bool {
        let Some(mine) = self.own.bound_cpu() else {
            return false;
        };
        match self.routes.get(pe) {
            Some(Route::Mapped(peer)) => peer.bound_cpu().is_some_and(|theirs| theirs != mine),
            _ => false,
        }
    }

    /// The node of every PE, indexed by PE: equal numbers for the PEs of one node, alike
    /// on every PE of the job.
    pub fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    /// The route to `pe`, or a typed error.
    #[inline(always)]
    pub(crate) fn route(&self, pe: usize) -> Result<&Route> {
        // A match, not `ok_or`: an error built eagerly on the hot path must be dropped, and
        // that drop is not always inlined away.
        match self.routes.get(pe) {
            Some(route) => Ok(route),
            None => Err(Error::PeOutOfRange {
                pe,
                n_pes: self.routes.len(),
            }),
        }
    }

    /// This PE's own segment.
    #[inline(always)]
    pub(crate) fn own_segment(&self) -> &Segment {
        &self.own
    }

    /// Validates an operation on PE `pe`: its route, then `check`. A failure counts as an
    /// error of its kind, never as an operation.
    #[inline(always)]
    pub(crate) fn validate<C>(
        &self,
        pe: usize,
        check: impl FnOnce() -> Result<C>,
    ) -> Result<(&Route, C)> {
        match self.route(pe).and_then(|route| Ok((route, check()?))) {
            Ok(valid) => Ok(valid),
            Err(error) => Err(self.traffic.failed(error)),
        }
    }

    /// Runs `body`, which moves the data of one operation `op` of `bytes` payload bytes on a
    /// mapped route and cannot fail, counted in the shared-memory traffic. One operation in
    /// [`ferroshmem_observability::names::OP_SAMPLE_EVERY`] per `[op][target]` is timed.
    #[inline(always)]
    pub(crate) fn mapped<R>(&self, op: Op, pe: usize, bytes: usize, body: impl FnOnce() -> R) -> R {
        let timer = self.traffic.count_timed(op, pe, bytes);
        let value = body();
        self.traffic.finish(op, timer);
        value
    }

    /// Starts `remote` at mapping offset `at` of PE `pe` on the remote transport, counted
    /// there as one operation `op` of `bytes` payload bytes. After a `fence` with `_nbi`
    /// operations outstanding, it starts once those have completed. Its completion fails
    /// with the job's failure (a peer lost) if that comes first. Never inlined, and the
    /// operation is built here, so that the mapped arm beside it stays small.
    #[inline(never)]
    pub(crate) fn remote(
        &self,
        op: Op,
        pe: usize,
        bytes: usize,
        at: usize,
        remote: impl FnOnce() -> RemoteOp,
    ) -> Completion {
        self.remote_in(None, op, pe, (bytes, at), remote)
    }

    /// [`DataPlane::remote`] in ordering domain `domain` (a context's; `None`: the default
    /// context's).
    pub(crate) fn remote_in(
        &self,
        domain: Option<&Domain>,
        op: Op,
        pe: usize,
        (bytes, at): (usize, usize),
        remote: impl FnOnce() -> RemoteOp,
    ) -> Completion {
        match &self.remotes {
            Some(r) => {
                if let Err(failed) = self.health.check() {
                    return Box::pin(std::future::ready(Err(failed)));
                }
                r.traffic.count(op, pe, bytes);
                let domain = domain.unwrap_or(r.default_domain());
                let completion = r.start_in(domain, pe, at, remote());
                // A peer lost (or the job failed otherwise) ends the operations still in
                // flight, which the fabric might never complete.
                let health = self.health.clone();
                Box::pin(async move {
                    tokio::select! {
                        biased;
                        done = completion => done,
                        failed = health.failed() => Err(failed),
                    }
                })
            }
            // `new` refuses remote routes without a transport.
            None => Box::pin(std::future::ready(Err(Error::NotMapped { pe }))),
        }
    }

    /// The longest write to another node that lands there behind the writes before it
    /// (see [`crate::route::Remote::ordered_write_bytes`]); 0 without a remote transport.
    pub(crate) fn ordered_write_bytes(&self) -> usize {
        self.remotes
            .as_ref()
            .map_or(0, Remotes::ordered_write_bytes)
    }

    /// The drive of the remote transport's progress for a waiting task, if the transport
    /// gives it (see [`crate::route::Remote::drive`]).
    pub(crate) fn drive(&self) -> Option<Box<dyn crate::route::Drive>> {
        self.remotes.as_ref().and_then(Remotes::drive)
    }

    /// `completion`, for the task that awaits it: it drives the remote transport's progress
    /// meanwhile (see [`Remotes::driven`]). Never inlined, so that the mapped arm of an
    /// operation that may await a remote one stays small.
    #[inline(never)]
    pub(crate) fn awaited(&self, completion: Completion) -> Completion {
        match &self.remotes {
            Some(r) => r.driven(completion),
            None => completion,
        }
    }

    /// Keeps the completion of an `_nbi` remote operation for the next `quiet`.
    pub(crate) fn defer(&self, completion: Completion) {
        self.defer_in(None, completion);
    }

    /// Keeps the completion of an `_nbi` remote operation for the next `quiet` of `domain`
    /// (`None`: the default context's).
    pub(crate) fn defer_in(&self, domain: Option<&Domain>, completion: Completion) {
        if let Some(r) = &self.remotes {
            domain.unwrap_or(r.default_domain()).defer(completion);
        }
    }

    /// The completion of every `_nbi` remote operation of `domain` (`None`: the default
    /// context's) not yet awaited, then the confirmation that this PE's puts to other nodes
    /// have landed, if there is anything to wait for (see `Remotes::quiet`).
    #[inline]
    pub(crate) fn remote_pending(&self, domain: Option<&Domain>) -> Option<Completion> {
        let r = self.remotes.as_ref()?;
        let quiet = r.quiet(domain.unwrap_or(r.default_domain()).quiet())?;
        // A peer lost (or the job failed otherwise) ends the wait: a confirmation to a peer
        // cut off might never complete.
        let health = self.health.clone();
        Some(Box::pin(async move {
            tokio::select! {
                biased;
                done = quiet => done,
                failed = health.failed() => Err(failed),
            }
        }))
    }

    /// A handle to this PE's own segment, for remote completions that write into it later.
    pub(crate) fn own_handle(&self) -> Arc<Segment> {
        self.own.clone()
    }

    /// Checks a view that must hold `needed` elements and returns the mapping offset of its
    /// first element.
    #[inline(always)]
    pub(crate) fn locate<T: Pod>(
        &self,
        view: SymSlice<'_, T>,
        needed: usize,
        what: &'static str,
    ) -> Result<usize> {
        let span = self.span_of(view)?;
        if needed > span.len {
            return Err(Error::OutOfBounds {
                what,
                needed,
                available: span.len,
            });
        }
        Ok(HEADER_SIZE + span.offset)
    }

    /// [`DataPlane::locate`]'s offset when the view passes its checks, else `None`, with no
    /// error made (for fast paths that fall back to the full operation, which reports it).
    #[inline(always)]
    pub(crate) fn offset_if_valid<T: Pod>(
        &self,
        view: SymSlice<'_, T>,
        needed: usize,
    ) -> Option<usize> {
        let span = self.open_span(view).ok()?;
        (needed <= span.len && self.in_claimed_area(view)).then(|| HEADER_SIZE + span.offset)
    }

    /// Checks that a view belongs to this PE's open heap and lies inside the area of the
    /// heap its allocation claims (a handle made by hand may claim any range), and returns
    /// its span. Every operation's view passes here before any memory is touched.
    #[inline(always)]
    pub(crate) fn span_of<T: Pod>(&self, view: SymSlice<'_, T>) -> Result<Span> {
        let span = match self.open_span(view) {
            Ok(span) => span,
            Err(e) => return Err(self.refusal(e)),
        };
        if !self.in_claimed_area(view) {
            return Err(Error::NotSymmetric);
        }
        Ok(span)
    }

    /// A view's span in this PE's open heap (the view's own checks).
    #[inline(always)]
    fn open_span<T: Pod>(&self, view: SymSlice<'_, T>) -> Result<Span> {
        view.span(HeapId(self.open_heap.load(Ordering::Relaxed)))
    }

    /// Whether a view, and whatever may be derived from it, stays inside the area of the
    /// heap its allocation claims. [`DataPlane::span_of`] and
    /// [`DataPlane::offset_if_valid`] share it with [`DataPlane::open_span`], as early
    /// returns: a `Result<Option<Span>>` of the two checks together cost `put` 8 B + `quiet`
    /// about 2 % (`scripts/compare-revisions`).
    #[inline(always)]
    fn in_claimed_area<T: Pod>(&self, view: SymSlice<'_, T>) -> bool {
        let (area, reach) = view.reach();
        reach <= self.area_ends[area as usize]
    }

    /// The error of a view that failed its check: [`Error::Shutdown`] once the PE has shut
    /// down (every view fails then), else the check's own.
    #[cold]
    fn refusal(&self, error: Error) -> Error {
        if self.is_shut_down() {
            Error::Shutdown
        } else {
            error
        }
    }

    /// Asks this core to take the cache lines of `view` on PE `pe` for writing, ahead of
    /// writes to come: a hint (see [`SharedMapping::prefetch_for_write`]), which does
    /// nothing for a PE on another node or a view that fails its checks.
    ///
    /// [`SharedMapping::prefetch_for_write`]: crate::shared_memory::SharedMapping::prefetch_for_write
    #[inline]
    pub(crate) fn prefetch_for_write<T: Pod>(&self, pe: usize, view: SymSlice<'_, T>) {
        if let Some(Route::Mapped(target)) = self.routes.get(pe) {
            if let Some(at) = self.offset_if_valid(view, view.len()) {
                let bytes = view.len() * std::mem::size_of::<T>();
                target.mapping().prefetch_for_write(at, bytes);
            }
        }
    }

    /// Checks a one-element view used atomically and returns its mapping offset.
    #[inline(always)]
    pub(crate) fn locate_atomic<T: Pod>(&self, view: SymSlice<'_, T>) -> Result<usize> {
        let offset = self.locate(view, 1, "atomic operand")?;
        let align = std::mem::size_of::<T>();
        if offset % align != 0 {
            return Err(Error::MisalignedAtomic {
                offset: offset - HEADER_SIZE,
                align,
            });
        }
        Ok(offset)
    }
}

/// Checks that `nodes` names a node for every PE and agrees with the routes: the PEs on this
/// PE's node are exactly the mapped ones.
fn check_nodes(my_pe: usize, routes: &[Route], nodes: &[usize]) -> Result<()> {
    if nodes.len() != routes.len() {
        return Err(Error::Config(format!(
            "{} node numbers for {} PEs",
            nodes.len(),
            routes.len()
        )));
    }
    let mine = nodes[my_pe];
    match routes
        .iter()
        .zip(nodes)
        .position(|(route, &node)| matches!(route, Route::Mapped(_)) != (node == mine))
    {
        Some(pe) => Err(Error::Config(format!(
            "PE {pe} is said to be on node {} (this PE's is {mine}) but its route disagrees",
            nodes[pe]
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
