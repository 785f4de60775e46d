//! [`Pe`]: the handle a program holds for its processing element. Cheap to clone, `Send +
//! Sync`; its futures are `Send`. Data-plane operations (put/get, atomics, signals, waits,
//! barriers) come from [`DataPlane`] through `Deref` and go straight to memory; collective
//! heap management goes through the PE's actor.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use bytemuck::Pod;
use ferroshmem_runtime::heap::AllocRequest;
use ferroshmem_runtime::{Context, ContextOptions, DataPlane, Error, Result, SymBuffer, Teams};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use crate::actor::Command;

/// A processing element: this program's place in the job.
///
/// ```no_run
/// # async fn f(pe: ferroshmem_actors::Pe) -> ferroshmem_runtime::Result<()> {
/// let dest = pe.malloc::<u64>(1).await?;
/// let next = (pe.my_pe() + 1) % pe.n_pes();
/// pe.p(&dest, pe.my_pe() as u64, next).await?;
/// pe.barrier_all().await?;
/// pe.free(dest).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Pe {
    inner: Arc<PeInner>,
}

#[derive(Debug)]
struct PeInner {
    data: Arc<DataPlane>,
    mailbox: UnboundedSender<Command>,
    teams: Teams,
}

/// A failed collective `free`: the error, and the buffer, still allocated and usable
/// (`None` only when the PE shut down during the call).
/// How a symmetric allocation will be used (`shmem_malloc_with_hints`'s hints), combined
/// with `|`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MallocHints(u8);

impl MallocHints {
    /// No hint (`0`).
    pub const NONE: MallocHints = MallocHints(0);
    /// Remote atomics will target it (`SHMEM_MALLOC_ATOMICS_REMOTE`).
    pub const ATOMICS_REMOTE: MallocHints = MallocHints(1);
    /// Signals will target it (`SHMEM_MALLOC_SIGNAL_REMOTE`).
    pub const SIGNAL_REMOTE: MallocHints = MallocHints(2);

    /// Every hint this library knows.
    const KNOWN: MallocHints = MallocHints(Self::ATOMICS_REMOTE.0 | Self::SIGNAL_REMOTE.0);

    /// Whether every hint of `other` is among these.
    pub fn contains(self, other: MallocHints) -> bool {
        self.0 & other.0 == other.0
    }

    /// The hints of OpenSHMEM's bit mask (`SHMEM_MALLOC_*` values or-ed together), or `None`
    /// when it holds a bit that names no hint.
    pub fn from_bits(bits: u64) -> Option<MallocHints> {
        u8::try_from(bits)
            .ok()
            .filter(|b| b & !Self::KNOWN.0 == 0)
            .map(MallocHints)
    }

    /// The hints among `bits` this library knows, the other bits ignored (hints are advisory:
    /// OpenSHMEM lets an implementation pass over the ones it cannot use).
    pub fn from_bits_truncate(bits: u64) -> MallocHints {
        MallocHints(bits as u8 & Self::KNOWN.0)
    }
}

impl std::ops::BitOr for MallocHints {
    type Output = MallocHints;

    fn bitor(self, other: MallocHints) -> MallocHints {
        MallocHints(self.0 | other.0)
    }
}

#[derive(Debug)]
pub struct FreeError<T> {
    /// What went wrong.
    pub error: Error,
    /// The buffer given back untouched.
    pub buffer: Option<SymBuffer<T>>,
}

impl<T> From<FreeError<T>> for Error {
    fn from(e: FreeError<T>) -> Error {
        e.error
    }
}

impl<T> std::fmt::Display for FreeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "free failed: {}", self.error)
    }
}

impl<T: std::fmt::Debug> std::error::Error for FreeError<T> {}

impl Deref for Pe {
    type Target = DataPlane;

    fn deref(&self) -> &DataPlane {
        &self.inner.data
    }
}

impl Pe {
    pub(crate) fn new(
        data: Arc<DataPlane>,
        mailbox: UnboundedSender<Command>,
        dest_ready: bool,
    ) -> Result<Self> {
        let teams = crate::team::predefined(&data, &mailbox, dest_ready)?;
        Ok(Pe {
            inner: Arc::new(PeInner {
                data,
                mailbox,
                teams,
            }),
        })
    }

    /// A new communication context of the world's PEs (`shmem_ctx_create`): its operations
    /// are ordered and completed by its own `fence` and `quiet`, apart from this handle's
    /// (the default context's). See [`Context`].
    pub fn ctx_create(&self, options: ContextOptions) -> Context {
        Context::new(self.inner.data.clone(), options)
    }

    /// This PE's predefined teams.
    pub(crate) fn teams(&self) -> &Teams {
        &self.inner.teams
    }

    async fn ask<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> Command) -> Result<R> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .mailbox
            .send(make(tx))
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)
    }

    async fn allocate<T: Pod>(&self, len: usize, align: usize, zero: bool) -> Result<SymBuffer<T>> {
        let started = Instant::now();
        let alloc = self
            .ask(|reply| Command::Alloc {
                request: AllocRequest::of::<T>(len, align),
                zero,
                reply,
            })
            .await
            .and_then(|allocated| allocated);
        self.meter("malloc", started, alloc.as_ref().err());
        SymBuffer::from_allocation(alloc?, len)
    }

    /// Allocates `len` elements of `T` on every PE (`shmem_malloc`). Collective: every PE
    /// calls it with the same `len`, in the same order; a PE that differs gets, on every PE,
    /// [`Error::CollectiveMismatch`] and nothing is allocated. The contents are unspecified.
    ///
    /// # Errors
    /// Besides the mismatch: [`Error::InvalidArgument`] when `len` elements overflow,
    /// [`Error::HeapExhausted`]. A PE whose own arguments are refused still takes part in
    /// the call, so the others fail with the mismatch rather than wait for it.
    pub async fn malloc<T: Pod>(&self, len: usize) -> Result<SymBuffer<T>> {
        self.allocate(len, std::mem::align_of::<T>(), false).await
    }

    /// As [`Pe::malloc`], with every element zero (`shmem_calloc`).
    pub async fn calloc<T: Pod>(&self, len: usize) -> Result<SymBuffer<T>> {
        self.allocate(len, std::mem::align_of::<T>(), true).await
    }

    /// As [`Pe::malloc`], aligned to `align` bytes (`shmem_align`): 0 or a non-power of two is
    /// [`Error::InvalidAlignment`], one above the heap's own (its size rounded up to a power
    /// of two, at most 1 GiB) [`Error::AlignmentTooLarge`]. A PE refused alone gets its
    /// error, the others the mismatch.
    pub async fn align<T: Pod>(&self, align: usize, len: usize) -> Result<SymBuffer<T>> {
        self.allocate(len, align, false).await
    }

    /// As [`Pe::malloc`], with usage hints (`shmem_malloc_with_hints`). The hints are
    /// advisory: every allocation is placed alike here, so they change nothing; every PE
    /// passes the same ones, as it passes the same length.
    pub async fn malloc_with_hints<T: Pod>(
        &self,
        len: usize,
        hints: MallocHints,
    ) -> Result<SymBuffer<T>> {
        let _ = hints; // advisory: see above
        self.malloc(len).await
    }

    /// Resizes a symmetric buffer on every PE (`shmem_realloc`): a new allocation of `len`
    /// elements starting with this PE's first `min(old, len)` elements, then the old one
    /// freed. Collective, like `malloc` and `free`; the other elements are unspecified.
    ///
    /// # Errors
    /// As [`Pe::malloc`], with the buffer back untouched in the error; then as [`Pe::free`]
    /// of the old buffer, with it back in the error (and the new one freed).
    pub async fn realloc<T: Pod>(
        &self,
        buffer: SymBuffer<T>,
        len: usize,
    ) -> Result<SymBuffer<T>, FreeError<T>> {
        let resized = match self.malloc::<T>(len).await {
            Ok(resized) => resized,
            Err(error) => {
                return Err(FreeError {
                    error,
                    buffer: Some(buffer),
                })
            }
        };
        let keep = buffer.len().min(len);
        let mut kept = vec![T::zeroed(); keep];
        let copied = match self
            .get(&mut kept, buffer.slice(..keep), self.my_pe())
            .await
        {
            Ok(()) => self.put(resized.slice(..keep), &kept, self.my_pe()).await,
            Err(e) => Err(e),
        };
        let freed = match copied {
            Ok(()) => self.free(buffer).await,
            Err(error) => Err(FreeError {
                error,
                buffer: Some(buffer),
            }),
        };
        match freed {
            Ok(()) => Ok(resized),
            Err(failed) => {
                // The new allocation goes; the old one is the caller's again.
                let _ = self.free(resized).await;
                Err(failed)
            }
        }
    }

    /// Frees a symmetric buffer on every PE (`shmem_free`). Collective, like `malloc`; it
    /// completes this PE's operations first (as `quiet`) and synchronizes the PEs, so no PE
    /// frees memory another still uses or writes. On a mismatch the buffer comes back
    /// untouched in the error; so it does when this PE's operations failed to complete
    /// (their error; the free is refused on every PE, the others seeing a mismatch).
    pub async fn free<T: Pod>(&self, buffer: SymBuffer<T>) -> Result<(), FreeError<T>> {
        let started = Instant::now();
        let len = buffer.len();
        let alloc = buffer.into_allocation();
        let (tx, rx) = oneshot::channel();
        let restore = |error, alloc| FreeError {
            error,
            buffer: SymBuffer::from_allocation(alloc, len).ok(),
        };
        // Puts to other nodes land before the memory they target may be freed there.
        let unfinished = self.inner.data.quiet().await.err();
        let free = Command::Free {
            alloc,
            unfinished,
            reply: tx,
        };
        if let Err(tokio::sync::mpsc::error::SendError(Command::Free { alloc, .. })) =
            self.inner.mailbox.send(free)
        {
            return Err(restore(Error::Shutdown, alloc));
        }
        let outcome = match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err((error, alloc))) => Err(restore(error, alloc)),
            Err(_) => Err(FreeError {
                error: Error::Shutdown,
                buffer: None,
            }),
        };
        self.meter("free", started, outcome.as_ref().err().map(|e| &e.error));
        outcome
    }

    /// Counts and times a collective call `op` that started at `started`, or counts its
    /// error.
    fn meter(&self, op: &'static str, started: Instant, failed: Option<&Error>) {
        match failed {
            None => self.metrics().collective(op, started.elapsed()),
            Some(e) => self.metrics().error(e.kind()),
        }
    }

    /// Exchanges bytes among the `size` PEs of control-plane group `group` through the job's
    /// root (an allgather): resolves to every member's payload, in member-index order. This
    /// PE is member `index`. Group 0 is the world (index = `my_pe`, size = `n_pes`); other
    /// groups are the caller's to number (teams, GPU handle exchange). Collective within the
    /// group, in the same order on every member. Slow path: for set-up, never for data.
    pub async fn exchange(
        &self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> Result<Vec<Vec<u8>>> {
        let started = Instant::now();
        let gathered = self
            .ask(|reply| Command::Exchange {
                group,
                index,
                size,
                payload,
                reply,
            })
            .await
            .and_then(|gathered| gathered);
        self.meter("exchange", started, gathered.as_ref().err());
        gathered
    }

    /// This PE's host data plane, shared (for layers built on it, such as GPU PEs).
    pub fn data_plane(&self) -> Arc<DataPlane> {
        self.inner.data.clone()
    }

    /// Bytes of this PE's symmetric heap in use, and its size.
    pub async fn heap_usage(&self) -> Result<(usize, usize)> {
        self.ask(|reply| Command::HeapUsage { reply }).await
    }

    /// Ends the whole job with `status` (`shmem_global_exit`): the root tells every other PE,
    /// whose process then exits with `status` (whatever its threads are doing: C's stdio is
    /// flushed, the exit handlers do not run), and answers this one once they have left, or
    /// after two seconds; then this process exits with `status` too, through `exit`, on the
    /// calling thread. Without an answer from the root (it is gone) this process exits after
    /// three seconds. In a `run_local` job every PE ends with the process. Called on a thread
    /// of a multi-threaded tokio runtime, the wait lets that runtime's other tasks run; on a
    /// current-thread runtime, this PE's actor cannot run during it, so the root never hears
    /// and the others see this PE lost.
    pub fn global_exit(&self, status: i32) -> ! {
        tracing::info!(pe = self.my_pe(), status, "global exit");
        crate::exit::begin();
        let (answered, answer) = std::sync::mpsc::channel();
        let asked = self
            .inner
            .mailbox
            .send(Command::GlobalExit { status, answered });
        if asked.is_ok() {
            let wait = || {
                let limit = crate::exit::GLOBAL_EXIT_ANSWER_TIMEOUT;
                if answer.recv_timeout(limit).is_err() {
                    eprintln!(
                        "ferroshmem: PE {}: global_exit: no answer from the bootstrap root \
                         within {limit:?}; exiting without it",
                        self.my_pe()
                    );
                }
            };
            match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
                _ => wait(),
            }
        }
        std::process::exit(status)
    }

    /// Ends this PE's part in the job: a final `barrier_all`, then the PE leaves the control
    /// plane cleanly (`shmem_finalize`). `run_local` and `run` call it for you.
    ///
    /// From its start, the other PEs' collective calls that wait for a call this PE never
    /// made fail with [`Error::CollectiveMismatch`] instead of waiting for it: team calls,
    /// heap calls (`malloc`, `free`, exchanges), and world barriers past the one this
    /// PE's final barrier met. Afterwards every call on any clone of this handle fails with
    /// [`Error::Shutdown`] (or with the job's failure, if it had failed).
    pub async fn finalize(self) -> Result<()> {
        self.mark_finalizing();
        let result = match self.inner.mailbox.send(Command::Finalizing) {
            Err(_) => Err(Error::Shutdown),
            Ok(()) => match self.barrier_all().await {
                Ok(()) => self
                    .ask(|reply| Command::Finalize { reply })
                    .await
                    .and_then(|r| r),
                Err(e) => Err(e),
            },
        };
        self.shut_down();
        result
    }
}
