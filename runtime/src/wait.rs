//! Point-to-point synchronization: `wait_until` and its `_all`/`_any`/`_some` forms, the
//! `test` forms, and the wait engine that signals and barriers share.
//!
//! A wait spins on the variable for a while (`FERROSHMEM_SPIN_US`, yielding to the executor
//! and the OS every few microseconds, or after every round of checks when the PEs of this
//! node outnumber the CPUs they may use, or the PEs of its machine the machine's,
//! [`crate::cpus`]), then sleeps until a writer rings
//! the PE's doorbell ([`crate::doorbell`]), so an idle waiter holds no core. A wait returns
//! early with the job's failure (a peer lost) and, given [`Wait::timeout`], with
//! [`Error::Timeout`]. While it sleeps, the timeout and the job's health are checked at
//! least every 10 ms.

use std::future::{Future, IntoFuture};
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::futures::Notified;

use crate::amo::AtomicInt;
use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::route::Drive;
use crate::segment::Watch;
use crate::shared_memory::SharedMapping;

/// How long one poll of a spinning wait (or of a task awaiting a remote completion) may spin
/// before yielding (to the executor, and its thread to the OS).
pub(crate) const SPIN_SLICE: Duration = Duration::from_micros(4);
/// The same on a crowded node (its PEs outnumber the CPUs they may use, or its machine's PEs
/// the machine's CPUs: [`DataPlane::crowded`]): one round of
/// checks.
const CROWDED_SPIN_SLICE: Duration = Duration::ZERO;

/// Checks of a spinning wait between two readings of the clock (each a few tens of
/// nanoseconds) for the end of its slice, on a node that is not crowded.
const CHECKS_PER_CLOCK_READ: usize = 32;
/// Checks of a wait's one round on a crowded node, before it yields. Rounds of 8 checks
/// took the small 4-PE collectives on 2 CPUs of an Intel Xeon (family 6, model 207), the
/// PEs bound two to a CPU, 0.80-0.88 of the time rounds of 32 took (a hint after each
/// check, as below; barrier 1.96 against 2.26 µs, fcollect 4 B 2.19 against 2.58, alltoall
/// 4 B 2.21 against 2.73, reduce 4 B 2.24 against 2.57; rounds of 1, 2 or 4 within the
/// swing of 8): the writer a wait is for often shares its CPU, and a yield there costs
/// less than 0.2 µs. Unbound, runs spread too widely to tell.
const CROWDED_CHECKS_PER_ROUND: usize = 8;
const _: () = assert!(CROWDED_CHECKS_PER_ROUND >= CROWDED_CHECKS_PER_PAUSE);
/// Checks of a spinning wait between two spin-loop hints (`pause` on x86, which lets an SMT
/// sibling run): a write that lands during a hint is seen only after it, so a hint after
/// every check made the 2-PE ping-pong of `benches/host_pt2pt.rs` 1.2x slower on an AMD
/// Zen 4 than a hint every eighth check.
const CHECKS_PER_PAUSE: usize = 8;
/// The same on a crowded node, where the writer may not be running at all and a wait's one
/// round of checks is its turn before it yields: a hint after every check. (Rounds of 32
/// checks with a hint every eighth, a few times shorter than with a hint after each, made
/// the 4-PE barrier on 2 CPUs of an earlier VM, its PEs unbound, 1.2-1.5x slower: more
/// turns through the scheduler. Bound two to a CPU on a later one, shorter rounds of
/// checks, each still with its hint, were the faster: `CROWDED_CHECKS_PER_ROUND`.)
const CROWDED_CHECKS_PER_PAUSE: usize = 1;

/// Checks between two readings of the clock on a crowded node (one round: its slice is
/// none) or not.
fn checks_per_round(crowded: bool) -> usize {
    match crowded {
        true => CROWDED_CHECKS_PER_ROUND,
        false => CHECKS_PER_CLOCK_READ,
    }
}

/// Checks between two spin-loop hints on a crowded node or not.
fn checks_per_pause(crowded: bool) -> usize {
    match crowded {
        true => CROWDED_CHECKS_PER_PAUSE,
        false => CHECKS_PER_PAUSE,
    }
}

/// The spin slice of a PE on a crowded node or not (see [`DataPlane::crowded`]).
fn spin_slice(crowded: bool) -> Duration {
    match crowded {
        true => CROWDED_SPIN_SLICE,
        false => SPIN_SLICE,
    }
}

/// How long a task awaiting a remote operation's completion reads the transport's queue
/// itself before it sleeps, on a node that is `crowded` or not, whose waits spin for
/// `spin`: that spin, none where the node is crowded (the spinning task would keep the CPU
/// from the PE the answer needs).
pub(crate) fn completion_spin(crowded: bool, spin: Duration) -> Duration {
    match crowded {
        true => Duration::ZERO,
        false => spin,
    }
}

/// A comparison of a waited-on variable with a value (`SHMEM_CMP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
}

impl Cmp {
    /// Whether `lhs <cmp> rhs` holds.
    #[inline]
    pub fn holds<T: Ord>(self, lhs: T, rhs: T) -> bool {
        match self {
            Cmp::Eq => lhs == rhs,
            Cmp::Ne => lhs != rhs,
            Cmp::Gt => lhs > rhs,
            Cmp::Ge => lhs >= rhs,
            Cmp::Lt => lhs < rhs,
            Cmp::Le => lhs <= rhs,
        }
    }
}

/// A wait that has not started: await it, optionally after setting a timeout.
///
/// ```no_run
/// # async fn f(pe: &ferroshmem_runtime::DataPlane, flag: &ferroshmem_runtime::SymBuffer<u64>) -> ferroshmem_runtime::Result<()> {
/// use std::time::Duration;
/// use ferroshmem_runtime::Cmp;
/// pe.wait_until(flag, Cmp::Eq, 1).timeout(Duration::from_secs(5)).await?;
/// # Ok(()) }
/// ```
///
/// Cancel safety: cancel safe; dropping the future stops the wait and changes nothing.
#[must_use = "a wait does nothing unless awaited"]
pub struct Wait<'a, C> {
    dp: &'a DataPlane,
    operation: &'static str,
    watched: Range<usize>,
    timeout: Option<Duration>,
    check: Result<C>,
    stalled: Option<StallCheck<'a>>,
}

/// A check that a sleeping wait runs each time it wakes: an error ends the wait with it.
pub(crate) type StallCheck<'a> = &'a mut (dyn FnMut() -> Result<()> + Send);

impl<'a, C, R> Wait<'a, C>
where
    C: FnMut() -> Option<R> + Unpin,
{
    /// A wait on `check`, which returns `Some` once the awaited condition holds; only writes
    /// to the `watched` bytes of this PE's segment (mapping offsets) can make it hold.
    pub fn new(
        dp: &'a DataPlane,
        operation: &'static str,
        watched: Range<usize>,
        check: Result<C>,
    ) -> Self {
        Wait {
            dp,
            operation,
            watched,
            timeout: None,
            check,
            stalled: None,
        }
    }

    /// Runs `stalled` whenever the wait has gone to sleep and each time it wakes without its
    /// condition holding (at least every 10 ms); an error from it ends the wait.
    pub(crate) fn on_stall(mut self, stalled: StallCheck<'a>) -> Self {
        self.stalled = Some(stalled);
        self
    }

    /// Gives up with [`Error::Timeout`] after `after`.
    pub fn timeout(mut self, after: Duration) -> Self {
        self.timeout = Some(after);
        self
    }
}

impl<'a, C, R> IntoFuture for Wait<'a, C>
where
    C: FnMut() -> Option<R> + Unpin,
{
    type Output = Result<R>;
    type IntoFuture = WaitFuture<'a, C>;

    fn into_future(self) -> WaitFuture<'a, C> {
        WaitFuture {
            dp: self.dp,
            operation: self.operation,
            watched: self.watched,
            timeout: self.timeout,
            check: Some(self.check),
            stalled: self.stalled,
            started: None,
            sleeping: None,
            driver: None,
        }
    }
}

/// The future of a [`Wait`].
#[must_use = "futures do nothing unless polled"]
pub struct WaitFuture<'a, C> {
    dp: &'a DataPlane,
    operation: &'static str,
    watched: Range<usize>,
    timeout: Option<Duration>,
    check: Option<Result<C>>,
    stalled: Option<StallCheck<'a>>,
    started: Option<Instant>,
    sleeping: Option<Sleeping<'a>>,
    /// The drive of the remote transport's progress, while the wait can hold it: a peer's
    /// write that arrives over the fabric is then read by this task's own thread, whether the
    /// wait spins or sleeps (see [`crate::route::Remote::drive`]).
    driver: Option<Box<dyn Drive>>,
}

/// Drives `dp`'s remote transport's progress through `driver`, taking the drive first if it
/// is free: reads the transport now while the wait spins (`cx` is `None`: its thread does
/// not return to the event loop meanwhile), or as the event loop reports arrivals to `cx`.
fn drive(dp: &DataPlane, driver: &mut Option<Box<dyn Drive>>, cx: Option<&mut Context<'_>>) {
    if driver.is_none() {
        *driver = dp.drive();
    }
    match (driver.as_mut(), cx) {
        (Some(driver), Some(cx)) => driver.poll_drive(cx),
        (Some(driver), None) => driver.progress_now(),
        (None, _) => {}
    }
}

/// A waiter registered as a sleeper on its watched bytes, with an armed doorbell notification.
struct Sleeping<'a> {
    notified: Pin<Box<Notified<'a>>>,
    dp: &'a DataPlane,
    watch: Watch,
}

impl<'a> Sleeping<'a> {
    fn enter(dp: &'a DataPlane, watched: &Range<usize>) -> Self {
        let mut notified = Box::pin(dp.doorbell.notified());
        notified.as_mut().enable();
        let watch = dp.own_segment().watch(watched.start, watched.end);
        Sleeping {
            notified,
            dp,
            watch,
        }
    }

    fn rearm(&mut self, dp: &'a DataPlane) {
        self.notified.set(dp.doorbell.notified());
        self.notified.as_mut().enable();
    }
}

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        self.dp.own_segment().unwatch(self.watch);
    }
}

/// [`Error::Timeout`] for a wait of `operation` with `timeout` that has waited `waited`,
/// if it has a timeout and has waited that long.
#[inline(never)]
fn timed_out(
    timeout: Option<Duration>,
    operation: &'static str,
    waited: Duration,
) -> Option<Error> {
    let limit = timeout.filter(|&limit| waited >= limit)?;
    Some(Error::Timeout {
        operation,
        after: limit,
    })
}

/// Checks `check` over and over for one spin slice from `now` (of a node that is `crowded`
/// or not), with a spin-loop hint between batches of checks; what the check returned, or
/// `None` when the slice ran out first. Out of line, as [`timed_out`]: inlined into every
/// wait's `poll` (and so into the futures that hold a wait) the two made the mapped 8-byte
/// `get` of `benches/host_pt2pt.rs` 1.10x slower, and out of line its ping-pong takes 0.90x
/// the time it took with this loop written inside `poll`.
#[inline(never)]
fn spin_one_slice<R>(
    check: &mut impl FnMut() -> Option<R>,
    crowded: bool,
    now: Instant,
) -> Option<R> {
    let slice_end = now + spin_slice(crowded);
    let per_pause = checks_per_pause(crowded);
    let pauses = checks_per_round(crowded) / per_pause;
    loop {
        for _ in 0..pauses {
            for _ in 0..per_pause {
                if let Some(r) = check() {
                    return Some(r);
                }
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= slice_end {
            return None;
        }
    }
}

/// Spins on `check` for one slice as an uncrowded wait does, without yielding, and says
/// whether it came to hold: before a crowded wait whose writers all run on other CPUs, where
/// a yield hands the CPU to a PE that owes the wait nothing directly (README: Benchmarks).
pub(crate) fn spin_a_slice(mut check: impl FnMut() -> bool) -> bool {
    spin_one_slice(&mut || check().then_some(()), false, Instant::now()).is_some()
}

impl<C, R> Future for WaitFuture<'_, C>
where
    C: FnMut() -> Option<R> + Unpin,
{
    type Output = Result<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<R>> {
        let this = self.get_mut();
        let check = match this.check.as_mut() {
            Some(Ok(c)) => c,
            Some(Err(_)) => {
                let err = this
                    .check
                    .take()
                    .and_then(|r| r.err())
                    .unwrap_or(Error::Shutdown);
                return Poll::Ready(Err(err));
            }
            None => return Poll::Ready(Err(Error::Shutdown)),
        };
        if let Some(r) = check() {
            return Poll::Ready(Ok(r));
        }
        let now = Instant::now();
        let started = *this.started.get_or_insert(now);
        if let Err(e) = this.dp.health.check() {
            return Poll::Ready(Err(e));
        }
        if let Some(e) = timed_out(this.timeout, this.operation, now.duration_since(started)) {
            return Poll::Ready(Err(e));
        }
        if this.sleeping.is_none() {
            if now.duration_since(started) < this.dp.spin {
                drive(this.dp, &mut this.driver, None);
                if let Some(r) = spin_one_slice(check, this.dp.crowded(), now) {
                    return Poll::Ready(Ok(r));
                }
                // Let another thread (perhaps the PE this wait depends on) have the CPU.
                std::thread::yield_now();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.sleeping = Some(Sleeping::enter(this.dp, &this.watched));
            if let Some(r) = check() {
                return Poll::Ready(Ok(r));
            }
            if let Some(Err(e)) = this.stalled.as_mut().map(|stalled| stalled()) {
                return Poll::Ready(Err(this.dp.blame(e)));
            }
        }
        // What the drive hands on (a peer's write) rings the notification polled next.
        drive(this.dp, &mut this.driver, Some(cx));
        let sleeping = this.sleeping.as_mut().expect("entered above");
        while sleeping.notified.as_mut().poll(cx).is_ready() {
            sleeping.rearm(this.dp);
            if let Some(r) = check() {
                return Poll::Ready(Ok(r));
            }
            if let Err(e) = this.dp.health.check() {
                return Poll::Ready(Err(e));
            }
            if let Some(Err(e)) = this.stalled.as_mut().map(|stalled| stalled()) {
                return Poll::Ready(Err(this.dp.blame(e)));
            }
            if let Some(e) = timed_out(this.timeout, this.operation, started.elapsed()) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Pending
    }
}

/// A checked set of waited-on variables in this PE's segment.
/// A type the waits and tests take (`shmem_wait_until`'s and `shmem_test`'s types): every
/// [`AtomicInt`], and 16-bit integers, which only waits and tests take (OpenSHMEM has no
/// 16-bit atomics). Sealed.
pub trait WaitWord:
    bytemuck::Pod + Ord + Send + Sync + Unpin + std::fmt::Debug + sealed::Sealed
{
    /// Atomic load of the word at mapping offset `offset` (aligned: checked by the caller).
    fn load_at(map: &SharedMapping, offset: usize) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

impl<T: AtomicInt> sealed::Sealed for T {}
impl<T: AtomicInt> WaitWord for T {
    #[inline(always)]
    fn load_at(map: &SharedMapping, offset: usize) -> T {
        T::load(T::at(map, offset))
    }
}

impl sealed::Sealed for i16 {}
impl WaitWord for i16 {
    #[inline(always)]
    fn load_at(map: &SharedMapping, offset: usize) -> i16 {
        map.atomic::<std::sync::atomic::AtomicI16>(offset)
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl sealed::Sealed for u16 {}
impl WaitWord for u16 {
    #[inline(always)]
    fn load_at(map: &SharedMapping, offset: usize) -> u16 {
        map.atomic::<std::sync::atomic::AtomicU16>(offset)
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub(crate) struct Ivars<'a, T> {
    map: &'a SharedMapping,
    /// Mapping offset of the first variable.
    offset: usize,
    len: usize,
    exclude: Option<&'a [bool]>,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<'a, T: WaitWord> Ivars<'a, T> {
    pub(crate) fn bytes(&self) -> Range<usize> {
        self.offset..self.offset + self.len * std::mem::size_of::<T>()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = (usize, T)> + '_ {
        self.values_from(0)
    }

    /// Whether every variable `i` not excluded satisfies `cmp value_of(i)`.
    pub(crate) fn all(&self, cmp: Cmp, value_of: impl Fn(usize) -> T) -> bool {
        self.values().all(|(i, v)| cmp.holds(v, value_of(i)))
    }

    /// The first variable `i` not excluded, from index `start % len` round, that satisfies
    /// `cmp value_of(i)`.
    pub(crate) fn first_from(
        &self,
        start: usize,
        cmp: Cmp,
        value_of: impl Fn(usize) -> T,
    ) -> Option<usize> {
        self.values_from(start)
            .find(|&(i, v)| cmp.holds(v, value_of(i)))
            .map(|(i, _)| i)
    }

    /// The indices of the variables `i` not excluded that satisfy `cmp value_of(i)`.
    pub(crate) fn satisfied(&self, cmp: Cmp, value_of: impl Fn(usize) -> T) -> Vec<usize> {
        self.values()
            .filter(|&(i, v)| cmp.holds(v, value_of(i)))
            .map(|(i, _)| i)
            .collect()
    }

    /// The values not excluded, from index `start % len` round to the one before it.
    pub(crate) fn values_from(&self, start: usize) -> impl Iterator<Item = (usize, T)> + '_ {
        let size = std::mem::size_of::<T>();
        let start = start.checked_rem(self.len).unwrap_or(0);
        (start..self.len)
            .chain(0..start)
            .filter(|&i| !self.exclude.is_some_and(|ex| ex[i]))
            .map(move |i| (i, T::load_at(self.map, self.offset + i * size)))
    }
}

impl DataPlane {
    pub(crate) fn ivars<'a, T: WaitWord>(
        &'a self,
        ivars: SymSlice<'_, T>,
        exclude: Option<&'a [bool]>,
    ) -> Result<Ivars<'a, T>> {
        let offset = self.locate(ivars, ivars.len(), "wait variables")?;
        if !ivars.is_empty() {
            self.locate_atomic(ivars.at(0))?;
        }
        if let Some(ex) = exclude {
            if ex.len() != ivars.len() {
                return Err(Error::InvalidArgument(format!(
                    "exclude mask has {} entries for {} variables",
                    ex.len(),
                    ivars.len()
                )));
            }
        }
        Ok(Ivars {
            map: self.own_segment().mapping(),
            offset,
            len: ivars.len(),
            exclude,
            _type: std::marker::PhantomData,
        })
    }

    /// Waits until `ivar[0]` in this PE's segment satisfies `cmp value`
    /// (`shmem_wait_until`); resolves to the value that satisfied it.
    pub fn wait_until<'s, T: WaitWord>(
        &self,
        ivar: impl Into<SymSlice<'s, T>>,
        cmp: Cmp,
        value: T,
    ) -> Wait<'_, impl FnMut() -> Option<T> + Unpin + Send + '_> {
        let located = self.locate_atomic(ivar.into());
        let watched = located
            .as_ref()
            .map_or(0..0, |&at| at..at + std::mem::size_of::<T>());
        let check = located.map(|at| {
            let map = self.own_segment().mapping();
            move || {
                let v = T::load_at(map, at);
                cmp.holds(v, value).then_some(v)
            }
        });
        Wait::new(self, "wait_until", watched, check)
    }

    /// Waits until every variable of `ivars` not excluded satisfies `cmp value`
    /// (`shmem_wait_until_all`). `exclude[i] == true` leaves out `ivars[i]`.
    pub fn wait_until_all<'a, T: WaitWord>(
        &'a self,
        ivars: impl Into<SymSlice<'a, T>>,
        exclude: Option<&'a [bool]>,
        cmp: Cmp,
        value: T,
    ) -> Wait<'a, impl FnMut() -> Option<()> + Unpin + Send + 'a> {
        let set = self.ivars(ivars.into(), exclude);
        self.wait_all_of(set, cmp, move |_| value, "wait_until_all")
    }

    /// Waits until some variable of `ivars` not excluded satisfies `cmp value` and resolves
    /// to its index (`shmem_wait_until_any`); `None` at once if every variable is excluded.
    pub fn wait_until_any<'a, T: WaitWord>(
        &'a self,
        ivars: impl Into<SymSlice<'a, T>>,
        exclude: Option<&'a [bool]>,
        cmp: Cmp,
        value: T,
    ) -> Wait<'a, impl FnMut() -> Option<Option<usize>> + Unpin + Send + 'a> {
        let set = self.ivars(ivars.into(), exclude);
        self.wait_any_of(set, cmp, move |_| value, "wait_until_any")
    }

    /// Waits until at least one variable of `ivars` not excluded satisfies `cmp value` and
    /// resolves to the indices of all that do (`shmem_wait_until_some`); empty at once if
    /// every variable is excluded.
    pub fn wait_until_some<'a, T: WaitWord>(
        &'a self,
        ivars: impl Into<SymSlice<'a, T>>,
        exclude: Option<&'a [bool]>,
        cmp: Cmp,
        value: T,
    ) -> Wait<'a, impl FnMut() -> Option<Vec<usize>> + Unpin + Send + 'a> {
        let set = self.ivars(ivars.into(), exclude);
        self.wait_some_of(set, cmp, move |_| value, "wait_until_some")
    }

    /// A wait until every variable `i` of `set` satisfies `cmp value_of(i)`.
    pub(crate) fn wait_all_of<'a, T: WaitWord>(
        &'a self,
        set: Result<Ivars<'a, T>>,
        cmp: Cmp,
        value_of: impl Fn(usize) -> T + Unpin + Send + 'a,
        operation: &'static str,
    ) -> Wait<'a, impl FnMut() -> Option<()> + Unpin + Send + 'a> {
        let watched = set.as_ref().map_or(0..0, |s| s.bytes());
        let check = set.map(|set| move || set.all(cmp, &value_of).then_some(()));
        Wait::new(self, operation, watched, check)
    }

    /// A wait until some variable `i` of `set` satisfies `cmp value_of(i)`, resolving to its
    /// index (`None` at once for an empty set); each such wait starts one index further.
    pub(crate) fn wait_any_of<'a, T: WaitWord>(
        &'a self,
        set: Result<Ivars<'a, T>>,
        cmp: Cmp,
        value_of: impl Fn(usize) -> T + Unpin + Send + 'a,
        operation: &'static str,
    ) -> Wait<'a, impl FnMut() -> Option<Option<usize>> + Unpin + Send + 'a> {
        let watched = set.as_ref().map_or(0..0, |s| s.bytes());
        let start = self.any_calls.fetch_add(1, Ordering::Relaxed);
        let check = set.map(|set| {
            move || match set.values().next() {
                None => Some(None),
                Some(_) => set.first_from(start, cmp, &value_of).map(Some),
            }
        });
        Wait::new(self, operation, watched, check)
    }

    /// A wait until at least one variable `i` of `set` satisfies `cmp value_of(i)`,
    /// resolving to the indices of all that do (empty at once for an empty set).
    pub(crate) fn wait_some_of<'a, T: WaitWord>(
        &'a self,
        set: Result<Ivars<'a, T>>,
        cmp: Cmp,
        value_of: impl Fn(usize) -> T + Unpin + Send + 'a,
        operation: &'static str,
    ) -> Wait<'a, impl FnMut() -> Option<Vec<usize>> + Unpin + Send + 'a> {
        let watched = set.as_ref().map_or(0..0, |s| s.bytes());
        let check = set.map(|set| {
            move || {
                if set.values().next().is_none() {
                    return Some(Vec::new());
                }
                let hits = set.satisfied(cmp, &value_of);
                (!hits.is_empty()).then_some(hits)
            }
        });
        Wait::new(self, operation, watched, check)
    }

    /// Whether `ivar[0]` in this PE's segment satisfies `cmp value` now (`shmem_test`).
    pub fn test<'s, T: WaitWord>(
        &self,
        ivar: impl Into<SymSlice<'s, T>>,
        cmp: Cmp,
        value: T,
    ) -> Result<bool> {
        let at = self.locate_atomic(ivar.into())?;
        Ok(cmp.holds(T::load_at(self.own_segment().mapping(), at), value))
    }

    /// Whether every variable not excluded satisfies `cmp value` now (`shmem_test_all`).
    pub fn test_all<'s, T: WaitWord>(
        &self,
        ivars: impl Into<SymSlice<'s, T>>,
        exclude: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<bool> {
        Ok(self.ivars(ivars.into(), exclude)?.all(cmp, |_| value))
    }

    /// The index of a variable not excluded that satisfies `cmp value` now, if any
    /// (`shmem_test_any`). Each call starts its search one index further than the last
    /// (`wait_until_any` too), so a series of calls returns every satisfied index in turn,
    /// as OpenSHMEM asks: a loop that does not exclude what it handled still sees the rest.
    pub fn test_any<'s, T: WaitWord>(
        &self,
        ivars: impl Into<SymSlice<'s, T>>,
        exclude: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>> {
        let set = self.ivars(ivars.into(), exclude)?;
        let start = self.any_calls.fetch_add(1, Ordering::Relaxed);
        Ok(set.first_from(start, cmp, |_| value))
    }

    /// The indices of all variables not excluded that satisfy `cmp value` now
    /// (`shmem_test_some`).
    pub fn test_some<'s, T: WaitWord>(
        &self,
        ivars: impl Into<SymSlice<'s, T>>,
        exclude: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>> {
        Ok(self.ivars(ivars.into(), exclude)?.satisfied(cmp, |_| value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_spins_until_its_check_holds_or_its_time_is_up() {
        let mut checks = 0;
        assert!(spin_a_slice(|| {
            checks += 1;
            checks == 3
        }));
        let started = Instant::now();
        assert!(!spin_a_slice(|| false));
        assert!(started.elapsed() >= SPIN_SLICE, "a whole slice first");
    }
}
