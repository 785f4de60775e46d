//! [`Context`]: a communication context (`shmem_ctx_create`, `shmem_team_create_ctx`), an
//! independent stream of one-sided operations whose ordering and completion are its own.
//!
//! # Ordering and completion
//!
//! Operations on a context are ordered by its [`fence`](Context::fence) and completed by its
//! [`quiet`](Context::quiet) only: a context's `quiet` does not wait for the default
//! context's `_nbi` operations, nor for another context's, and theirs do not wait for it
//! (the confirmation that puts to other nodes have landed is the one exception: it covers
//! every put of the PE, which a context's `quiet` may so wait for). On a mapped route (a PE of this node) every operation is complete when its call returns, so
//! the distinction is felt where operations travel: to PEs of other nodes, where each
//! context keeps its own list of `_nbi` completions and its own fence.
//!
//! # Teams
//!
//! A context made from a team ([`Context::for_team`]) numbers PEs as that team does; the
//! others number them as the world does.
//!
//! # Options
//!
//! [`ContextOptions`] are OpenSHMEM's `SHMEM_CTX_PRIVATE`, `SHMEM_CTX_SERIALIZED` and
//! `SHMEM_CTX_NOSTORE`: promises of the caller that let an implementation skip work. Every
//! context here is safe to share between threads, so they change nothing but are kept.

use std::sync::Arc;

use bytemuck::Pod;

use crate::amo::{as_ints, binary_amos, named_atomics, old_value, AtomicInt, AtomicWord};
use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::landing::{nothing, GetLanding, Landing};
use crate::route::{Amo, Domain};
use crate::shared_memory::Caching;
use crate::signal::SignalOp;
use crate::team::Team;

/// A context's creation options (`SHMEM_CTX_*`), combined with `|`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextOptions(u8);

impl ContextOptions {
    /// No option (`0`).
    pub const NONE: ContextOptions = ContextOptions(0);
    /// Only the creating thread uses it (`SHMEM_CTX_PRIVATE`).
    pub const PRIVATE: ContextOptions = ContextOptions(1);
    /// One thread at a time uses it (`SHMEM_CTX_SERIALIZED`).
    pub const SERIALIZED: ContextOptions = ContextOptions(2);
    /// No store operations go through it (`SHMEM_CTX_NOSTORE`).
    pub const NOSTORE: ContextOptions = ContextOptions(4);

    /// The options of OpenSHMEM's bit mask, or `None` when it holds a bit that names none.
    pub fn from_bits(bits: u64) -> Option<ContextOptions> {
        u8::try_from(bits)
            .ok()
            .filter(|b| b & !7 == 0)
            .map(ContextOptions)
    }

    /// Whether every option of `other` is among these.
    pub fn contains(self, other: ContextOptions) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ContextOptions {
    type Output = ContextOptions;

    fn bitor(self, other: ContextOptions) -> ContextOptions {
        ContextOptions(self.0 | other.0)
    }
}

/// A communication context: the data plane's one-sided operations, ordered and completed
/// apart from every other context's (see the module's docs). Dropping it drops nothing in
/// flight: its `_nbi` operations and its puts to other nodes still complete, unobserved;
/// call [`Context::quiet`] first to learn their outcome (`shmem_ctx_destroy` does).
#[derive(Debug)]
pub struct Context {
    dp: Arc<DataPlane>,
    team: Option<Team>,
    options: ContextOptions,
    domain: Domain,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain").finish_non_exhaustive()
    }
}

impl Context {
    /// A new context of the world's PEs (`shmem_ctx_create`).
    pub fn new(dp: Arc<DataPlane>, options: ContextOptions) -> Context {
        Context {
            dp,
            team: None,
            options,
            domain: Domain::default(),
        }
    }

    /// A new context whose PE numbers are `team`'s (`shmem_team_create_ctx`).
    ///
    /// # Errors
    /// [`Error::TeamDestroyed`].
    pub fn for_team(team: &Team, options: ContextOptions) -> Result<Context> {
        if team.is_destroyed() {
            return Err(Error::TeamDestroyed);
        }
        Ok(Context {
            dp: team.inner.home.dp.clone(),
            team: Some(team.clone()),
            options,
            domain: Domain::default(),
        })
    }

    /// The team whose PE numbers this context uses (`shmem_ctx_get_team`); `None`: the
    /// world's.
    pub fn team(&self) -> Option<&Team> {
        self.team.as_ref()
    }

    /// The options it was made with.
    pub fn options(&self) -> ContextOptions {
        self.options
    }

    /// The world number of this context's PE `pe`.
    #[inline(always)]
    fn world(&self, pe: usize) -> Result<usize> {
        match &self.team {
            None => Ok(pe),
            Some(team) => team.world_pe(pe).ok_or(Error::PeOutOfRange {
                pe,
                n_pes: team.n_pes(),
            }),
        }
    }

    /// `put` on this context (`shmem_ctx_put`); as [`DataPlane::put`].
    #[inline(always)]
    pub fn put<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        src: &[T],
        pe: usize,
    ) -> Landing<()> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let wait = self.dp.put_waits(Some(&self.domain), bytes.len());
        let started = self.world(pe).and_then(|pe| {
            self.dp
                .start_put(dest.into(), bytes, src.len(), pe, Some(&self.domain))
        });
        // As the default context's put: on its way, its completion this context's `quiet`'s
        // (awaited where `put_waits` says so).
        match wait {
            true => self.landing(started),
            false => Landing::ready(started.map(|remote| self.keep(remote))),
        }
    }

    /// `put_nbi` on this context (`shmem_ctx_put_nbi`): complete at this context's `quiet`.
    #[inline(always)]
    pub fn put_nbi<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        src: &[T],
        pe: usize,
    ) -> Result<()> {
        let pe = self.world(pe)?;
        let bytes = bytemuck::cast_slice(src);
        let started = self
            .dp
            .start_put(dest.into(), bytes, src.len(), pe, Some(&self.domain))?;
        self.keep(started);
        Ok(())
    }

    /// `p` on this context (`shmem_ctx_p`).
    #[inline(always)]
    pub fn p<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Landing<()> {
        self.put(dest, std::slice::from_ref(&value), pe)
    }

    /// `get` on this context (`shmem_ctx_get`); as [`DataPlane::get`].
    #[inline(always)]
    pub fn get<'a, 's, T: Pod>(
        &self,
        dest: &'a mut [T],
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> GetLanding<'a> {
        let dest: &'a mut [u8] = bytemuck::cast_slice_mut(dest);
        let started = self
            .world(pe)
            .and_then(|pe| self.dp.start_get(dest, src.into(), pe, Some(&self.domain)));
        match started {
            Ok(None) => GetLanding::ready(Ok(())),
            Ok(Some(remote)) => GetLanding::remote(self.dp.awaited(remote), dest),
            Err(e) => GetLanding::ready(Err(e)),
        }
    }

    /// `g` on this context (`shmem_ctx_g`).
    #[inline(always)]
    pub fn g<'s, T: Pod + Unpin>(&self, src: impl Into<SymSlice<'s, T>>, pe: usize) -> Landing<T> {
        let mut v = T::zeroed();
        let started = self.world(pe).and_then(|pe| {
            self.dp.start_get(
                bytemuck::bytes_of_mut(&mut v),
                src.into(),
                pe,
                Some(&self.domain),
            )
        });
        match started {
            Ok(None) => Landing::ready(Ok(v)),
            Ok(Some(remote)) => Landing::remote(self.dp.awaited(remote), old_value),
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// `get_nbi` on this context (`shmem_ctx_get_nbi`), into this PE's symmetric `dest`.
    pub fn get_nbi<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> Result<()> {
        let pe = self.world(pe)?;
        let started = self.dp.start_get_into(
            dest.into(),
            src.into(),
            pe,
            Some(&self.domain),
            Caching::Keep,
        )?;
        self.keep(started);
        Ok(())
    }

    /// `put_signal` on this context (`shmem_ctx_put_signal`).
    pub fn put_signal<'d, 'g, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: &[T],
        (sig, value, op): (impl Into<SymSlice<'g, u64>>, u64, SignalOp),
        pe: usize,
    ) -> Landing<()> {
        let started = self.world(pe).and_then(|pe| {
            let signal = (sig.into(), value, op);
            self.dp
                .start_put_signal(dest.into(), src, signal, pe, Some(&self.domain))
        });
        self.landing(started)
    }

    /// `put_signal_nbi` on this context (`shmem_ctx_put_signal_nbi`).
    pub fn put_signal_nbi<'d, 'g, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: &[T],
        (sig, value, op): (impl Into<SymSlice<'g, u64>>, u64, SignalOp),
        pe: usize,
    ) -> Result<()> {
        let pe = self.world(pe)?;
        let signal = (sig.into(), value, op);
        let started = self
            .dp
            .start_put_signal(dest.into(), src, signal, pe, Some(&self.domain))?;
        self.keep(started);
        Ok(())
    }

    /// `signal_op` on this context (`shmem_ctx_signal_op`).
    pub fn signal_op<'s>(
        &self,
        sig: impl Into<SymSlice<'s, u64>>,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Landing<()> {
        match self.world(pe) {
            Ok(pe) => self
                .dp
                .signal_op_in(Some(&self.domain), sig.into(), (value, op), pe),
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Orders this context's operations to each PE (`shmem_ctx_fence`).
    pub fn fence(&self) {
        self.dp.fence_in(Some(&self.domain));
    }

    /// Completes this context's operations (`shmem_ctx_quiet`), and only them.
    ///
    /// # Errors
    /// As [`DataPlane::quiet`], for this context's operations.
    pub fn quiet(&self) -> Landing<()> {
        self.dp.quiet_in(Some(&self.domain))
    }

    /// The atomic `op` on this context, for the named atomics.
    #[inline(always)]
    fn amo<T: AtomicInt, R: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        pe: usize,
        op: Amo,
        keep: fn(T) -> R,
        decode: fn(Vec<u8>) -> Result<R>,
    ) -> Landing<R> {
        match self.world(pe) {
            Ok(pe) => self
                .dp
                .amo_in(Some(&self.domain), dest, pe, op, (keep, decode)),
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// A started operation's future: ready for a mapped route or a refusal, else awaiting
    /// the remote completion.
    #[inline(always)]
    fn landing(&self, started: Result<Option<crate::route::Completion>>) -> Landing<()> {
        match started {
            Ok(None) => Landing::ready(Ok(())),
            Ok(Some(remote)) => Landing::remote(self.dp.awaited(remote), nothing),
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Keeps a started `_nbi` operation's completion for this context's `quiet`.
    fn keep(&self, started: Option<crate::route::Completion>) {
        if let Some(remote) = started {
            self.dp.defer_in(Some(&self.domain), remote);
        }
    }
}

impl Context {
    named_atomics!();
}
