//! The library's one PE: the job this process joined at `shmem_init`, the runtime its futures
//! run on, the allocations `shmem_malloc` handed out, and the translation of the C caller's
//! pointers into symmetric views.
//!
//! # Blocking
//!
//! OpenSHMEM's C calls block. `Shmem::block` polls an operation's future once: on a mapped
//! route (a PE of this node) it is done by then, and the call costs its loads and stores
//! alone, with no allocation and no runtime entered. Only an operation still in flight (a
//! PE on another node, a collective, a wait) blocks the calling thread on the runtime, which
//! any number of threads may do at once (`SHMEM_THREAD_MULTIPLE`).
//!
//! # Errors
//!
//! Where OpenSHMEM leaves an outcome undefined (an address outside the heap, a PE out of
//! range, a lost peer), the call prints the routine, the error and the PE, then ends this
//! process with a non-zero status, which ends the job (`fail`). Nothing goes on silently.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::os::raw::c_int;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytemuck::Pod;
use ferroshmem_actors::{Pe, ThreadLevel};
use ferroshmem_runtime::{Context, DataPlane, Error, HeapId, Result, SymBuffer, SymSlice, Team};
use futures::FutureExt;

use crate::static_data::{self, StaticData};

/// This process's PE, once `shmem_init` made it.
static STATE: OnceLock<Shmem> = OnceLock::new();

/// Serialises the calls that make the state, so that two threads calling `shmem_init` at
/// once join the job once.
static INIT: Mutex<()> = Mutex::new(());

/// The first handle of a team made by a split; below it, the predefined teams.
pub(crate) const FIRST_TEAM_HANDLE: usize = 3;

/// `SHMEM_CTX_DEFAULT`'s handle: the data plane's own operations.
pub(crate) const DEFAULT_CONTEXT: usize = 1;

/// The first handle of a context made by `shmem_ctx_create`.
pub(crate) const FIRST_CONTEXT_HANDLE: usize = 2;

/// A team made for C by a split, with the contexts its configuration asked for.
pub(crate) struct MadeTeam {
    /// The team.
    pub team: Team,
    /// `shmem_team_config_t::num_contexts` as given to the split (0 when not given).
    pub num_contexts: c_int,
}

/// A context made for C, with the handle of the team it was made from.
pub(crate) struct MadeContext {
    /// The context.
    pub context: Arc<Context>,
    /// The C handle of its team (`SHMEM_TEAM_WORLD` for `shmem_ctx_create`'s).
    pub team: usize,
}

/// What the library holds for the life of the process.
pub(crate) struct Shmem {
    runtime: tokio::runtime::Runtime,
    pe: Pe,
    /// The PE's data plane, held directly: one indirection less on every operation.
    dp: Arc<DataPlane>,
    /// The world team.
    world: Team,
    me: usize,
    n_pes: usize,
    heap: HeapId,
    heap_base: usize,
    heap_bytes: usize,
    level: ThreadLevel,
    /// The program's static data, made symmetric at `shmem_init` (held for its buffer).
    _static_data: Option<StaticData>,
    /// Where the static data lies, read by every operation on a static variable.
    static_range: StaticRange,
    /// `shmem_malloc`'s allocations by heap offset, for `shmem_free` and `shmem_realloc`.
    allocations: Mutex<HashMap<usize, SymBuffer<u8>>>,
    /// Teams made by splits, by handle − [`FIRST_TEAM_HANDLE`]; `None` once destroyed.
    teams: Mutex<Vec<Option<MadeTeam>>>,
    /// Contexts made by `shmem_ctx_create`, by handle − [`FIRST_CONTEXT_HANDLE`]; `None`
    /// once destroyed.
    contexts: Mutex<Vec<Option<MadeContext>>>,
}

/// The program's static data as addresses: `[start, start + len)` lies at heap offset
/// `offset` (`len` 0 without static data).
#[derive(Debug, Clone, Copy, Default)]
struct StaticRange {
    start: usize,
    len: usize,
    offset: usize,
}

impl StaticRange {
    fn of(data: Option<&StaticData>) -> Self {
        data.map_or_else(Self::default, |data| Self {
            start: data.start,
            len: data.len,
            offset: data.buffer.offset(),
        })
    }

    /// The heap offset of static address `addr`, if it lies in the static data.
    #[inline(always)]
    fn offset_of(self, addr: usize) -> Option<usize> {
        match addr.checked_sub(self.start) {
            Some(within) if within < self.len => Some(self.offset + within),
            _ => None,
        }
    }
}

/// [`Error::NotSymmetric`], built only on the failing path.
#[cold]
fn not_symmetric() -> Error {
    Error::NotSymmetric
}

/// Joins the job (once per process) and returns the state; `requested` is the thread level
/// asked for (`shmem_init_thread`), or `None` (`shmem_init`).
pub(crate) fn init(routine: &'static str, requested: Option<ThreadLevel>) -> &'static Shmem {
    let _once = INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(state) = STATE.get() {
        return state;
    }
    let state = join(requested).unwrap_or_else(|e| fail(routine, &e));
    let state = STATE.get_or_init(|| state);
    #[cfg(target_env = "gnu")]
    crate::exit::finalize_at_exit_hook();
    state
}

/// Starts the runtime and joins the launched job, or where no launcher started this process,
/// a job of this one process. The thread level provided is the one
/// requested, when one was: every level is supported, and programs written for Sandia
/// OpenSHMEM, which answers so, compare the two (its performance suite does nothing when they
/// differ); without a request, the runtime's own (`SHMEM_THREAD_MULTIPLE`).
fn join(requested: Option<ThreadLevel>) -> Result<Shmem> {
    // `RUST_LOG` for C programs too (where a PE serves its metrics, for one).
    ferroshmem_observability::init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("ferroshmem")
        .enable_all()
        .build()
        .map_err(|e| Error::os("starting the runtime", e))?;
    let asked = requested.unwrap_or(ThreadLevel::Single);
    // A program started without a launcher is a job of one PE, as OpenSHMEM's run directly.
    let launched = ferroshmem_actors::launch_env::LaunchEnv::detect()?.is_some();
    // OpenSHMEM makes callers ready every `dest` before a collective: the teams may write
    // into it as soon as a member calls (`TeamConfig::dest_ready`).
    let options = ferroshmem_actors::JoinOptions::openshmem();
    let (pe, supported) = runtime.block_on(async {
        let pe = match launched {
            true => ferroshmem_actors::init_with(options).await?,
            false => ferroshmem_actors::init_alone_with(options).await?,
        };
        let level = pe.query_thread().max(asked);
        Ok::<_, Error>((pe, level))
    })?;
    let level = requested.unwrap_or(supported);
    let own_static = std::ptr::addr_of!(STATE) as usize;
    let static_data = runtime.block_on(async {
        let data = static_data::make_symmetric(&pe, own_static).await?;
        // No PE reaches another's static data before that PE has mapped it.
        pe.barrier_all().await?;
        Ok::<_, Error>(data)
    })?;
    Ok(Shmem {
        me: pe.my_pe(),
        n_pes: pe.n_pes(),
        dp: pe.data_plane(),
        world: pe.team_world(),
        heap: pe.heap_id(),
        heap_base: pe.heap_base(),
        heap_bytes: pe.user_heap_bytes(),
        runtime,
        pe,
        level,
        static_range: StaticRange::of(static_data.as_ref()),
        _static_data: static_data,
        allocations: Mutex::new(HashMap::new()),
        teams: Mutex::new(Vec::new()),
        contexts: Mutex::new(Vec::new()),
    })
}

/// The state, or the end of the job when `routine` was called before `shmem_init`.
#[inline(always)]
pub(crate) fn shmem(routine: &'static str) -> &'static Shmem {
    match STATE.get() {
        Some(state) => state,
        None => not_initialized(routine),
    }
}

/// The end of the job for `routine` called before `shmem_init`, out of line so that the
/// routines' fast paths need no stack frame for it.
#[cold]
#[inline(never)]
fn not_initialized(routine: &'static str) -> ! {
    fail(
        routine,
        &Error::InvalidArgument("called before shmem_init".into()),
    )
}

/// The state, if `shmem_init` ran.
pub(crate) fn initialized() -> Option<&'static Shmem> {
    STATE.get()
}

/// Prints `routine`'s failure with this PE's number, then ends the process (and so the job)
/// with status 1.
#[cold]
pub(crate) fn fail(routine: &str, error: &Error) -> ! {
    report(routine, error);
    std::process::exit(1)
}

/// Prints `routine`'s failure with this PE's number (once `shmem_init` has given one).
#[cold]
pub(crate) fn report(routine: &str, error: &Error) {
    match STATE.get() {
        Some(state) => eprintln!("ferroshmem: PE {}: {routine}: {error}", state.me),
        None => eprintln!("ferroshmem: {routine}: {error}"),
    }
}

/// `result`'s value, or the end of the job naming `routine`.
#[inline(always)]
pub(crate) fn ok<T>(routine: &'static str, result: Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => fail(routine, &e),
    }
}

/// A C `int` PE number as an index.
#[inline(always)]
pub(crate) fn pe_index(pe: c_int, n_pes: usize) -> Result<usize> {
    usize::try_from(pe)
        .ok()
        .filter(|&p| p < n_pes)
        .ok_or_else(|| Error::PeOutOfRange {
            pe: usize::try_from(pe).unwrap_or(usize::MAX),
            n_pes,
        })
}

impl Shmem {
    /// This PE.
    #[inline(always)]
    pub(crate) fn pe(&self) -> &Pe {
        &self.pe
    }

    /// The world team (`SHMEM_TEAM_WORLD`), held for the collectives.
    pub(crate) fn world(&self) -> &Team {
        &self.world
    }

    /// This PE's data plane: the one-sided operations.
    #[inline(always)]
    pub(crate) fn dp(&self) -> &DataPlane {
        &self.dp
    }

    /// This PE's heap.
    pub(crate) fn heap(&self) -> HeapId {
        self.heap
    }

    /// This PE's number.
    pub(crate) fn me(&self) -> usize {
        self.me
    }

    /// The thread level provided.
    pub(crate) fn level(&self) -> ThreadLevel {
        self.level
    }

    /// Runs `operation` to its end: at once when its first poll finishes it (a mapped
    /// route), else on the runtime, blocking this thread.
    #[inline(always)]
    pub(crate) fn block<F: IntoFuture>(&self, operation: F) -> F::Output {
        let mut operation = pin!(operation.into_future());
        match operation.as_mut().now_or_never() {
            Some(outcome) => outcome,
            None => self.runtime.block_on(operation),
        }
    }

    /// Runs `operation` to its end as a task of the runtime, this thread waiting for it
    /// without entering the runtime: for a thread whose thread-local data may be gone (an
    /// exit hook). Never from a thread of the runtime.
    pub(crate) fn block_outside<F>(&self, operation: F) -> Result<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (done, outcome) = std::sync::mpsc::channel();
        self.runtime.spawn(async move {
            let _ = done.send(operation.await);
        });
        outcome.recv().map_err(|_| Error::Shutdown)
    }

    /// The symmetric view of `len` elements at the C caller's address `addr`, in this PE's
    /// heap or its static data; for `len` 0, an empty view whatever `addr` is (OpenSHMEM
    /// calls that move nothing may pass any pointer, null included).
    ///
    /// # Errors
    /// [`Error::NotSymmetric`] when `addr` is neither and `len` is not 0; the operations check
    /// the rest.
    #[inline(always)]
    pub(crate) fn view<T: Pod>(&self, addr: *const T, len: usize) -> Result<SymSlice<'static, T>> {
        self.try_view(addr, len).ok_or_else(not_symmetric)
    }

    /// [`Shmem::view`], checking also that all `len` elements lie in the symmetric memory:
    /// for a routine that sizes a buffer of its own by `len` before any operation would
    /// check the view.
    pub(crate) fn view_within<T: Pod>(
        &self,
        addr: *const T,
        len: usize,
    ) -> Result<SymSlice<'static, T>> {
        let room = self.view_to_end(addr).ok_or_else(not_symmetric)?;
        if len > room.len() {
            return Err(Error::OutOfBounds {
                what: "a symmetric buffer of the call",
                needed: len,
                available: room.len(),
            });
        }
        self.view(addr, len)
    }

    /// The symmetric view from the C caller's address `addr` to the end of the user heap
    /// (where a collective's output length is known only to the call); `None` for an `addr`
    /// that is not symmetric.
    pub(crate) fn view_to_end<T: Pod>(&self, addr: *const T) -> Option<SymSlice<'static, T>> {
        let offset = self.offset_of(addr)?;
        let len = self.heap_bytes.saturating_sub(offset) / std::mem::size_of::<T>().max(1);
        Some(SymSlice::in_user_heap(self.heap, offset, len))
    }

    /// The user-heap offset of the C caller's address `addr`, in this PE's heap or its
    /// static data; `None` when it is neither.
    #[inline(always)]
    pub(crate) fn offset_of<T>(&self, addr: *const T) -> Option<usize> {
        let addr = addr as usize;
        match addr.checked_sub(self.heap_base) {
            Some(offset) if offset < self.heap_bytes => Some(offset),
            _ => self.static_range.offset_of(addr),
        }
    }

    /// [`Shmem::view`] for the fast paths: `None` for an address that is not symmetric.
    #[inline(always)]
    pub(crate) fn try_view<T: Pod>(
        &self,
        addr: *const T,
        len: usize,
    ) -> Option<SymSlice<'static, T>> {
        let offset = match self.offset_of(addr) {
            Some(offset) => offset,
            None if len == 0 => 0,
            None => return None,
        };
        Some(SymSlice::in_user_heap(self.heap, offset, len))
    }

    /// [`Shmem::pe_of`] for the fast paths.
    #[inline(always)]
    pub(crate) fn try_pe(&self, pe: c_int) -> Option<usize> {
        usize::try_from(pe).ok().filter(|&p| p < self.n_pes)
    }

    /// Whether `addr` lies in this PE's symmetric heap.
    pub(crate) fn in_heap(&self, addr: *const u8) -> bool {
        self.offset_of(addr).is_some()
    }

    /// The C caller's pointer to heap offset `offset`.
    pub(crate) fn address(&self, offset: usize) -> *mut u8 {
        (self.heap_base + offset) as *mut u8
    }

    /// A C `int` PE number of the world team as an index.
    #[inline(always)]
    pub(crate) fn pe_of(&self, pe: c_int) -> Result<usize> {
        pe_index(pe, self.n_pes)
    }

    /// The allocations `shmem_malloc` handed out.
    pub(crate) fn allocations(&self) -> MutexGuard<'_, HashMap<usize, SymBuffer<u8>>> {
        self.allocations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The contexts made for C.
    pub(crate) fn made_contexts(&self) -> MutexGuard<'_, Vec<Option<MadeContext>>> {
        self.contexts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The context of C handle `handle`: `None` for `SHMEM_CTX_DEFAULT` (the data plane's
    /// own operations).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `SHMEM_CTX_INVALID`, a destroyed context or a handle
    /// never given out.
    #[inline(always)]
    pub(crate) fn context(&self, handle: usize) -> Result<Option<Arc<Context>>> {
        if handle == DEFAULT_CONTEXT {
            return Ok(None);
        }
        let contexts = self.made_contexts();
        match handle
            .checked_sub(FIRST_CONTEXT_HANDLE)
            .and_then(|i| contexts.get(i))
        {
            Some(Some(made)) => Ok(Some(made.context.clone())),
            Some(None) => Err(Error::InvalidArgument("a destroyed context".into())),
            None => Err(Error::InvalidArgument(format!(
                "{handle:#x} is not a context handle (SHMEM_CTX_INVALID?)"
            ))),
        }
    }

    /// The teams made by splits.
    pub(crate) fn split_teams(&self) -> MutexGuard<'_, Vec<Option<MadeTeam>>> {
        self.teams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
