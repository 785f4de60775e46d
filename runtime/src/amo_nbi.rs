//! Non-blocking fetching atomics (OpenSHMEM 1.5's `shmem_atomic_fetch_nbi`,
//! `_swap_nbi`, `_compare_swap_nbi`, `_fetch_inc_nbi`, `_fetch_add_nbi`, `_fetch_and_nbi`,
//! `_fetch_or_nbi`, `_fetch_xor_nbi`): the call returns once the atomic has started; its old
//! value lands in this PE's symmetric `fetch[0]` by the next [`DataPlane::quiet`] (at once on
//! a mapped route), and this PE's waiters on `fetch` are woken then.

use crate::amo::{as_ints, AtomicInt, AtomicWord};
use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::heap::SymSlice;
use crate::landing::land;
use crate::rma::publish;
use crate::route::Amo;

impl DataPlane {
    /// Runs `op` on `dest[0]` of PE `pe`; the old value lands in this PE's `fetch[0]`.
    fn amo_nbi<T: AtomicInt>(
        &self,
        fetch: SymSlice<'_, T>,
        dest: SymSlice<'_, T>,
        pe: usize,
        op: Amo,
    ) -> Result<()> {
        let width = std::mem::size_of::<T>();
        let at = self.locate_atomic(fetch)?;
        match self.start_amo(dest, pe, op, None)? {
            Ok(old) => {
                let own = self.own_segment();
                own.mapping().write(at, bytemuck::bytes_of(&old));
                publish(own, at, at + width);
            }
            Err(remote) => {
                let own = self.own_handle();
                self.defer(Box::pin(async move {
                    let mut old = vec![0u8; width];
                    land(&mut old, remote.await?)?;
                    own.mapping().write(at, &old);
                    publish(&own, at, at + width);
                    Ok(Vec::new())
                }));
            }
        }
        Ok(())
    }

    /// Atomically reads `dest[0]` on PE `pe` into this PE's `fetch[0]` by the next `quiet`
    /// (`shmem_atomic_fetch_nbi`; integers, `f32`, `f64`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch`], for `fetch` (this PE's) and `dest`; a remote failure
    /// comes at `quiet`.
    pub fn atomic_fetch_nbi<'f, 's, T: AtomicWord>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> Result<()> {
        self.amo_nbi(as_ints(fetch.into()), as_ints(dest.into()), pe, Amo::Fetch)
    }

    /// Atomically replaces `dest[0]` on PE `pe` with `value`; the old value lands in this
    /// PE's `fetch[0]` by the next `quiet` (`shmem_atomic_swap_nbi`; integers, `f32`, `f64`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_swap_nbi<'f, 's, T: AtomicWord>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        let op = Amo::Swap(value.into_int().to_bits());
        self.amo_nbi(as_ints(fetch.into()), as_ints(dest.into()), pe, op)
    }

    /// Atomically sets `dest[0]` on PE `pe` to `value` if it equals `cond`; the old value
    /// lands in this PE's `fetch[0]` by the next `quiet` (`shmem_atomic_compare_swap_nbi`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_compare_swap_nbi<'f, 's, T: AtomicInt>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        (cond, value): (T, T),
        pe: usize,
    ) -> Result<()> {
        let op = Amo::CompareSwap(cond.to_bits(), value.to_bits());
        self.amo_nbi(fetch.into(), dest.into(), pe, op)
    }

    /// Atomically increments `dest[0]` on PE `pe`; the old value lands in this PE's
    /// `fetch[0]` by the next `quiet` (`shmem_atomic_fetch_inc_nbi`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_fetch_inc_nbi<'f, 's, T: AtomicInt>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> Result<()> {
        self.amo_nbi(fetch.into(), dest.into(), pe, Amo::Add(T::ONE.to_bits()))
    }

    /// Atomically adds `value` (wrapping) to `dest[0]` on PE `pe`; the old value lands in
    /// this PE's `fetch[0]` by the next `quiet` (`shmem_atomic_fetch_add_nbi`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_fetch_add_nbi<'f, 's, T: AtomicInt>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        self.amo_nbi(fetch.into(), dest.into(), pe, Amo::Add(value.to_bits()))
    }

    /// Atomically ands `value` into `dest[0]` on PE `pe`; the old value lands in this PE's
    /// `fetch[0]` by the next `quiet` (`shmem_atomic_fetch_and_nbi`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_fetch_and_nbi<'f, 's, T: AtomicInt>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        self.amo_nbi(fetch.into(), dest.into(), pe, Amo::And(value.to_bits()))
    }

    /// Atomically ors `value` into `dest[0]` on PE `pe`; the old value lands in this PE's
    /// `fetch[0]` by the next `quiet` (`shmem_atomic_fetch_or_nbi`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_fetch_or_nbi<'f, 's, T: AtomicInt>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        self.amo_nbi(fetch.into(), dest.into(), pe, Amo::Or(value.to_bits()))
    }

    /// Atomically xors `value` into `dest[0]` on PE `pe`; the old value lands in this PE's
    /// `fetch[0]` by the next `quiet` (`shmem_atomic_fetch_xor_nbi`).
    ///
    /// # Errors
    /// As [`DataPlane::atomic_fetch_nbi`].
    pub fn atomic_fetch_xor_nbi<'f, 's, T: AtomicInt>(
        &self,
        fetch: impl Into<SymSlice<'f, T>>,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        self.amo_nbi(fetch.into(), dest.into(), pe, Amo::Xor(value.to_bits()))
    }
}
