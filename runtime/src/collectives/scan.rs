//! Prefix sums over a team (OpenSHMEM 1.6's `shmem_sum_inscan` and `shmem_sum_exscan`):
//! member `i` gets, element-wise, the sum of the `source` of members `0..=i` (inclusive) or
//! `0..i` (exclusive; member 0 gets zeros).
//!
//! One algorithm, flat: a sync (every `source` is ready), each member reads the sources of
//! the members before it (and its own) and sums them in member order into memory of its
//! own, block by block, a sync (nobody reads a `source` any more), then each writes its
//! `dest`. So `dest` may be `source` itself, and every member's sums are the same bits as a
//! sequential sum in member order. Reads of a member on another node overlap.

use super::reduce_ops::{ReduceOp, Reducible};
use super::{bytes_of, disjoint, holds, Descriptor, Kind};
use crate::error::Result;
use crate::heap::SymSlice;
use crate::team::{Op, Team};

/// Bytes summed at a time.
const BLOCK_BYTES: usize = 64 << 10;

impl Team {
    /// Stores in `dest` on member `i` the element-wise sum of `source` on members `0..=i`
    /// (`shmem_sum_inscan`, OpenSHMEM 1.6); `source.len()` elements. Collective; every
    /// member passes the same type and length. `dest` may be `source` (not a partial
    /// overlap).
    ///
    /// ```no_run
    /// # async fn f(team: ferroshmem_runtime::Team, x: ferroshmem_runtime::SymBuffer<u64>) -> ferroshmem_runtime::Result<()> {
    /// team.sum_inscan(&x, &x).await?; // member i now holds x[0] + … + x[i]
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) for a short `dest`,
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for partly overlapping
    /// buffers, [`Error::CollectiveMismatch`](crate::Error::CollectiveMismatch) when members
    /// passed different types, lengths or scans.
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn sum_inscan<'d, 's, T: Reducible>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
    ) -> Result<()> {
        self.scan(dest.into(), source.into(), true).await
    }

    /// Stores in `dest` on member `i` the element-wise sum of `source` on members `0..i`,
    /// zeros on member 0 (`shmem_sum_exscan`, OpenSHMEM 1.6); otherwise as
    /// [`Team::sum_inscan`].
    ///
    /// # Errors
    /// As [`Team::sum_inscan`].
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable.
    pub async fn sum_exscan<'d, 's, T: Reducible>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        source: impl Into<SymSlice<'s, T>>,
    ) -> Result<()> {
        self.scan(dest.into(), source.into(), false).await
    }

    async fn scan<T: Reducible>(
        &self,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        inclusive: bool,
    ) -> Result<()> {
        let nelems = source.len();
        let checks = (|| {
            holds(self.dp(), source, nelems, "scan source")?;
            holds(self.dp(), dest, nelems, "scan destination")?;
            let dest = dest.slice(..nelems);
            disjoint(self.dp(), dest, source, true)?;
            Ok(dest)
        })();
        let dest = self.refuse_on(Kind::Scan, checks)?;
        let detail = u64::from(inclusive) | T::TAG << 1;
        let desc = Descriptor::of(Kind::Scan, detail, bytes_of::<T>(nelems) as u64);
        let mut op = self.begin(desc)?;
        let outcome = self.scan_in(&mut op, dest, source, inclusive, desc).await;
        op.settle(outcome)
    }

    async fn scan_in<T: Reducible>(
        &self,
        op: &mut Op<'_>,
        dest: SymSlice<'_, T>,
        source: SymSlice<'_, T>,
        inclusive: bool,
        desc: u64,
    ) -> Result<()> {
        let me = self.my_pe();
        let count = if inclusive { me + 1 } else { me };
        if self.n_pes() > 1 {
            self.sync_in(op, desc).await?;
            if op.rejected() {
                return Ok(());
            }
        }
        let sums = self.prefix_sum(source, count).await?;
        if self.n_pes() > 1 {
            self.sync_in(op, Descriptor::END).await?;
        }
        self.dp().put(dest, &sums, self.dp().my_pe()).await
    }

    /// The element-wise sum of `source` on members `0..count`, in member order, in memory
    /// of this PE's own (zeros when `count` is 0).
    async fn prefix_sum<T: Reducible>(
        &self,
        source: SymSlice<'_, T>,
        count: usize,
    ) -> Result<Vec<T>> {
        let len = source.len();
        if count == 0 {
            return Ok(vec![T::zeroed(); len]);
        }
        let block = (BLOCK_BYTES / std::mem::size_of::<T>().max(1)).max(1);
        let input = |j: usize| (source, self.pe(j));
        let mut sums = Vec::with_capacity(len);
        for start in (0..len).step_by(block) {
            let part = start..(start + block).min(len);
            let summed = self.combine_overlapped(ReduceOp::Sum, count, part, &input);
            sums.extend_from_slice(&Box::pin(summed).await?);
        }
        Ok(sums)
    }
}
