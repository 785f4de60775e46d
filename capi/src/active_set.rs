//! The deprecated active-set collectives (`PE_start`, `logPE_stride`, `PE_size`, `pSync`):
//! on the whole job they run on the world team (`pSync` unused); on any other set, which
//! has no team, they run here as direct algorithms over one-sided operations, with `pSync`
//! (symmetric, `SHMEM_*_SYNC_SIZE` longs set to `SHMEM_SYNC_VALUE`, as OpenSHMEM requires)
//! for their synchronization, left as it was found.
//!
//! # Algorithms
//!
//! Every member reads what it needs from the other members' symmetric buffers (gets), between
//! two barriers of the set: the first says every source is ready, the second that nobody
//! reads them any more. A member computes a reduction itself, in member order, so every
//! member gets the same bits. The barrier is linear: each member adds one to the first
//! member's `pSync[0]`, which waits for them all, clears it, then sets each member's
//! `pSync[1]`, which each clears once seen.

use std::ffi::c_int;

use bytemuck::Pod;
use ferroshmem_runtime::{Cmp, Error, ReduceOp, Reducible, Result};

use crate::state::Shmem;

/// `pSync[0]`: arrivals, on the set's first member.
const ARRIVALS: usize = 0;
/// `pSync[1]`: the release, on every member.
const RELEASE: usize = 1;

/// The members of an active set, as world PE numbers, and this PE's place among them.
#[derive(Debug)]
pub(crate) struct ActiveSet {
    members: Vec<usize>,
    me: usize,
}

impl ActiveSet {
    /// The set `start`, `start + 2^log_stride`, … (`size` PEs) of a job of `n` PEs, with
    /// this PE (`me`) in it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a set outside the job or one this PE is not in.
    pub(crate) fn new(
        (start, log_stride, size): (c_int, c_int, c_int),
        me: usize,
        n: usize,
    ) -> Result<ActiveSet> {
        let bad = || {
            Error::InvalidArgument(format!("the active set (PE_start {start}, logPE_stride {log_stride}, PE_size {size}) of a job of {n} PEs"))
        };
        let (start, size) = (
            usize::try_from(start).map_err(|_| bad())?,
            usize::try_from(size).map_err(|_| bad())?,
        );
        let stride = u32::try_from(log_stride)
            .ok()
            .and_then(|l| 1usize.checked_shl(l))
            .ok_or_else(bad)?;
        // The last member first: a set of no members or reaching past the job is refused
        // before any list is made.
        size.checked_sub(1)
            .and_then(|last| stride.checked_mul(last))
            .and_then(|o| o.checked_add(start))
            .filter(|&last| last < n)
            .ok_or_else(bad)?;
        let members: Vec<usize> = (0..size).map(|i| start + stride * i).collect();
        let me = members
            .iter()
            .position(|&pe| pe == me)
            .ok_or_else(|| Error::InvalidArgument(format!("this PE ({me}) is not in {}", bad())))?;
        Ok(ActiveSet { members, me })
    }

    /// Whether the set is the whole job in order (then the world team serves it).
    pub(crate) fn is_whole_job(&self, n: usize) -> bool {
        self.members.len() == n && self.members.iter().enumerate().all(|(i, &pe)| i == pe)
    }

    /// The number of members.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The world number of member `i`.
    fn pe(&self, i: usize) -> Result<usize> {
        self.members.get(i).copied().ok_or_else(|| {
            Error::InvalidArgument(format!("member {i} of a set of {}", self.members.len()))
        })
    }
}

/// Waits for every member of `set` (see the module's docs), through `psync`.
pub(crate) fn barrier(s: &Shmem, set: &ActiveSet, psync: *mut i64) -> Result<()> {
    let dp = s.dp();
    let (arrivals, release) = (
        s.view(psync.wrapping_add(ARRIVALS), 1)?,
        s.view(psync.wrapping_add(RELEASE), 1)?,
    );
    s.block(dp.quiet())?;
    let first = set.pe(0)?;
    if set.me == 0 {
        let others = set.len() as i64 - 1;
        s.block(dp.wait_until(arrivals, Cmp::Ge, others))?;
        s.block(dp.atomic_set(arrivals, 0i64, first))?;
        for i in 1..set.len() {
            s.block(dp.atomic_set(release, 1i64, set.pe(i)?))?;
        }
        return Ok(());
    }
    s.block(dp.atomic_add(arrivals, 1i64, first))?;
    s.block(dp.wait_until(release, Cmp::Ne, 0i64))?;
    s.block(dp.atomic_set(release, 0i64, s.me()))
}

/// Reads `len` elements at symmetric `addr` of member `i` into `out`.
fn read<T: Pod>(
    s: &Shmem,
    set: &ActiveSet,
    (addr, i): (*const T, usize),
    out: &mut [T],
) -> Result<()> {
    let pe = set.pe(i)?;
    s.block(s.dp().get(out, s.view(addr, out.len())?, pe))
}

/// Writes `data` to this PE's symmetric `addr`.
fn write<T: Pod>(s: &Shmem, addr: *mut T, data: &[T]) -> Result<()> {
    s.block(s.dp().put(s.view(addr, data.len())?, data, s.me()))
}

/// `broadcast`: member `root`'s `nelems` elements of `source` into every other member's
/// `dest` (the root's `dest` untouched, as the deprecated routine has it).
pub(crate) fn broadcast<T: Pod>(
    s: &Shmem,
    set: &ActiveSet,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    (root, psync): (usize, *mut i64),
) -> Result<()> {
    set.pe(root)?;
    s.view_within(source, nelems)?;
    s.view_within(dest.cast_const(), nelems)?;
    barrier(s, set, psync)?;
    let mut data = vec![T::zeroed(); nelems];
    if set.me != root {
        read(s, set, (source, root), &mut data)?;
    }
    barrier(s, set, psync)?;
    match set.me == root {
        true => Ok(()),
        false => write(s, dest, &data),
    }
}

/// `fcollect`: every member's `nelems` elements, in member order, into every `dest`.
pub(crate) fn fcollect<T: Pod>(
    s: &Shmem,
    set: &ActiveSet,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    psync: *mut i64,
) -> Result<()> {
    let total = elements(nelems, set.len())?;
    s.view_within(source, nelems)?;
    s.view_within(dest.cast_const(), total)?;
    barrier(s, set, psync)?;
    let mut data = vec![T::zeroed(); total];
    for (i, block) in data.chunks_mut(nelems.max(1)).enumerate().take(set.len()) {
        read(s, set, (source, i), &mut block[..nelems])?;
    }
    barrier(s, set, psync)?;
    write(s, dest, &data)
}

/// `collect`: every member's own count of elements, in member order, into every `dest`.
/// The counts travel in `pSync[2]`, restored to `SHMEM_SYNC_VALUE` at the end.
pub(crate) fn collect<T: Pod>(
    s: &Shmem,
    set: &ActiveSet,
    (dest, source): (*mut T, *const T),
    nelems: usize,
    psync: *mut i64,
) -> Result<()> {
    let count = psync.wrapping_add(2);
    s.view_within(source, nelems)?;
    let own = i64::try_from(nelems)
        .map_err(|_| Error::InvalidArgument(format!("{nelems} elements to collect")))?;
    write(s, count, &[own])?;
    barrier(s, set, psync)?;
    let mut counts = Vec::with_capacity(set.len());
    for i in 0..set.len() {
        let mut theirs = [0i64];
        read(s, set, (count.cast_const(), i), &mut theirs)?;
        counts.push(usize::try_from(theirs[0]).unwrap_or(0));
    }
    let total = counts
        .iter()
        .try_fold(0usize, |sum, &c| sum.checked_add(c))
        .ok_or_else(|| Error::InvalidArgument("the members' counts overflow".into()))?;
    s.view_within(dest.cast_const(), total)?;
    let mut data = vec![T::zeroed(); total];
    let mut at = 0;
    for (i, &c) in counts.iter().enumerate() {
        read(s, set, (source, i), &mut data[at..at + c])?;
        at += c;
    }
    barrier(s, set, psync)?;
    write(s, count, &[0])?;
    write(s, dest, &data)
}

/// `alltoalls` (`alltoall`: strides 1): block `me` of each member's `source` into block
/// `i` (the sender) of this member's `dest`, elements `sst` and `dst` apart.
pub(crate) fn alltoalls<T: Pod>(
    s: &Shmem,
    set: &ActiveSet,
    (dest, source): (*mut T, *const T),
    (dst, sst, nelems): (usize, usize, usize),
    psync: *mut i64,
) -> Result<()> {
    let n = set.len();
    let total = elements(nelems, n)?;
    s.view_within(source, strided_extent(sst, total)?)?;
    s.view_within(dest.cast_const(), strided_extent(dst, total)?)?;
    barrier(s, set, psync)?;
    let mut received = vec![T::zeroed(); total];
    for (i, block) in received.chunks_mut(nelems.max(1)).enumerate().take(n) {
        // Within the extent checked above.
        let first = source.wrapping_add(sst * set.me * nelems);
        match sst {
            1 => read(s, set, (first, i), &mut block[..nelems])?,
            _ => block[..nelems]
                .iter_mut()
                .enumerate()
                .try_for_each(|(k, value)| {
                    read(
                        s,
                        set,
                        (first.wrapping_add(sst * k), i),
                        std::slice::from_mut(value),
                    )
                })?,
        }
    }
    barrier(s, set, psync)?;
    match dst {
        1 => write(s, dest, &received),
        _ => received.iter().enumerate().try_for_each(|(j, value)| {
            write(s, dest.wrapping_add(dst * j), std::slice::from_ref(value))
        }),
    }
}

/// `op` over every member's `nreduce` elements of `source`, in member order, into `dest`.
pub(crate) fn reduce<T: Reducible>(
    s: &Shmem,
    set: &ActiveSet,
    op: ReduceOp,
    (dest, source): (*mut T, *const T),
    nreduce: usize,
    psync: *mut i64,
) -> Result<()> {
    s.view_within(source, nreduce)?;
    s.view_within(dest.cast_const(), nreduce)?;
    barrier(s, set, psync)?;
    let mut acc = vec![T::zeroed(); nreduce];
    read(s, set, (source, 0), &mut acc)?;
    let mut theirs = vec![T::zeroed(); nreduce];
    for i in 1..set.len() {
        read(s, set, (source, i), &mut theirs)?;
        T::combine(op, &mut acc, &theirs);
    }
    barrier(s, set, psync)?;
    write(s, dest, &acc)
}

/// The elements of `blocks` blocks of `nelems` each.
fn elements(nelems: usize, blocks: usize) -> Result<usize> {
    nelems.checked_mul(blocks).ok_or_else(|| {
        Error::InvalidArgument(format!("{blocks} blocks of {nelems} elements overflow"))
    })
}

/// How many elements `count` elements `stride` apart span (none for none).
fn strided_extent(stride: usize, count: usize) -> Result<usize> {
    match count.checked_sub(1) {
        None => Ok(0),
        Some(last) => stride
            .checked_mul(last)
            .and_then(|span| span.checked_add(1))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{count} elements {stride} apart overflow"))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_checked_against_the_job_and_this_pe() {
        let set = ActiveSet::new((1, 1, 3), 3, 8).expect("PEs 1, 3, 5");
        assert_eq!((set.members.clone(), set.me), (vec![1, 3, 5], 1));
        assert!(!set.is_whole_job(8));
        assert!(ActiveSet::new((0, 0, 4), 2, 4)
            .expect("the job")
            .is_whole_job(4));
        assert!(
            ActiveSet::new((1, 1, 5), 1, 8).is_err(),
            "PE 9 is not in a job of 8"
        );
        assert!(
            ActiveSet::new((0, 1, 2), 1, 4).is_err(),
            "PE 1 is not in 0, 2"
        );
        assert!(ActiveSet::new((-1, 0, 2), 0, 4).is_err());
        assert!(ActiveSet::new((0, 70, 2), 0, 4).is_err());
        assert!(ActiveSet::new((0, 0, 0), 0, 4).is_err());
        assert!(ActiveSet::new((0, 0, c_int::MAX), 0, 4).is_err());
        assert!(ActiveSet::new((0, 30, c_int::MAX), 0, 4).is_err());
    }

    #[test]
    fn buffer_sizes_are_checked_for_overflow() {
        assert_eq!(elements(3, 4).unwrap(), 12);
        assert!(elements(usize::MAX, 2).is_err());
        assert_eq!(strided_extent(3, 0).unwrap(), 0);
        assert_eq!(strided_extent(3, 4).unwrap(), 10);
        assert!(strided_extent(usize::MAX / 2, 4).is_err());
    }
}
