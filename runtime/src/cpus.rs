//! The CPUs a node gives its PEs, and whether the PEs outnumber them (a *crowded* node).
//!
//! Each PE records in its segment header the CPUs it may run on: its affinity mask, and the
//! cap a CPU quota (a cgroup's `cpu.max`) sets below that mask, if any. Every PE of a node
//! reads the same records from the mapped segments, so every PE reaches the same verdict,
//! which matters where the verdict picks a protocol that all of them must run alike (the
//! world barrier's shape, `barrier.rs`). The verdict counts the CPUs of all the masks
//! together: PEs bound to one core each (as `mpirun` binds a few ranks) are not crowded,
//! while PEs that share one core are.
//!
//! [`bind_to_core`] pins a PE's threads to one CPU (`FERROSHMEM_BIND=core`): on a crowded
//! node the PEs that share a CPU then take turns on it instead of being moved between CPUs
//! by the scheduler, which made a 4-PE barrier on 2 CPUs take 2.1 or 4.0 µs from run to run.
//! [`bind_to_share`] gives each PE of a machine that is not crowded its own block of the CPUs
//! (`FERROSHMEM_BIND=share`, the default under `ferroshmem run`): unbound, the scheduler at
//! times ran both PEs of a 2-PE job on one of 2 CPUs, where each wait spins its slice before
//! it yields to the other PE, and a barrier took 5 µs instead of 0.2–0.3.

use bytemuck::{Pod, Zeroable};
use rustix::process::Pid;
use rustix::thread::CpuSet;

use crate::error::{Error, Result};

/// Words of a recorded affinity mask: 1024 CPUs, as `CPU_SETSIZE`.
const MASK_WORDS: usize = 16;

/// The CPUs one PE may run on, as its segment header records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct CpuShare {
    /// The affinity mask, bit `c` of word `c / 64` for CPU `c`.
    mask: [u64; MASK_WORDS],
    /// How many CPUs a quota lets the PE use when that is fewer than its mask holds;
    /// `u64::MAX` when no quota binds.
    quota: u64,
}

impl CpuShare {
    /// The record's size in a segment header.
    pub const BYTES: usize = std::mem::size_of::<CpuShare>();

    /// The share of the calling thread: its affinity mask, and the standard library's
    /// count of usable CPUs (which honours cgroup quotas) where it is below the mask's.
    /// Where the mask cannot be read, every CPU that count allows.
    pub fn of_this_thread() -> CpuShare {
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut share = CpuShare {
            mask: [0; MASK_WORDS],
            quota: u64::MAX,
        };
        match rustix::thread::sched_getaffinity(None) {
            Ok(set) => {
                (0..MASK_WORDS * 64)
                    .filter(|&c| set.is_set(c))
                    .for_each(|c| share.allow(c));
                if usable < share.cpus() {
                    share.quota = usable as u64;
                }
            }
            Err(_) => (0..usable.min(MASK_WORDS * 64)).for_each(|c| share.allow(c)),
        }
        share
    }

    /// The share of a PE that may run on `cpus` (each below 1024), with no quota.
    #[cfg(test)]
    pub(crate) fn of_cpus(cpus: &[usize]) -> CpuShare {
        let mut share = CpuShare {
            mask: [0; MASK_WORDS],
            quota: u64::MAX,
        };
        cpus.iter().for_each(|&c| share.allow(c));
        share
    }

    /// Adds CPU `cpu` (below 1024) to the mask.
    fn allow(&mut self, cpu: usize) {
        self.mask[cpu / 64] |= 1 << (cpu % 64);
    }

    /// The CPUs in the mask.
    fn cpus(&self) -> usize {
        self.mask.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether `node_pes` PEs with these `shares` (one per PE of the node, as their headers
    /// record them) outnumber the CPUs they may use together: the union of their masks,
    /// capped by the tightest quota among them.
    pub fn crowded(node_pes: usize, shares: impl IntoIterator<Item = CpuShare>) -> bool {
        let mut union = [0u64; MASK_WORDS];
        let mut quota = u64::MAX;
        for share in shares {
            for (u, w) in union.iter_mut().zip(share.mask) {
                *u |= w;
            }
            quota = quota.min(share.quota);
        }
        let cpus = CpuShare { mask: union, quota }.cpus() as u64;
        node_pes as u64 > cpus.min(quota).max(1)
    }
}

/// The CPUs the calling thread may run on, in order.
fn allowed_cpus(what: &str) -> Result<Vec<usize>> {
    let allowed = rustix::thread::sched_getaffinity(None).map_err(|e| {
        Error::Config(format!(
            "FERROSHMEM_BIND={what}: reading this PE's CPUs: {e}"
        ))
    })?;
    Ok((0..CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect())
}

/// Pins every thread of this process to one CPU of those the calling thread may run on:
/// the `local_rank`-th of them, in turn (the PEs of a node, numbered from 0 there, are dealt
/// over their CPUs). Threads started later inherit the binding. Returns that CPU.
///
/// # Errors
/// [`Error::Config`] when the calling thread's CPUs cannot be read, or a thread cannot be
/// bound (then some threads may already be).
pub fn bind_to_core(local_rank: usize) -> Result<usize> {
    let cpus = allowed_cpus("core")?;
    let Some(&cpu) = cpus.get(local_rank % cpus.len().max(1)) else {
        return Err(Error::Config(
            "FERROSHMEM_BIND=core: this PE may run on no CPU".into(),
        ));
    };
    bind_threads(&[cpu], "core")?;
    Ok(cpu)
}

/// The share of `cpus` (those the PEs of a machine may run on, in order) of the PE numbered
/// `local_rank` among the machine's `local_pes`: block `local_rank` of `local_pes` contiguous
/// blocks, their sizes differing by one at most. `None` where no binding is due: the PEs outnumber the
/// CPUs (the scheduler balances them, as `mpirun` leaves an oversubscribed job unbound), or
/// one PE would have them all.
pub fn share_of(cpus: &[usize], local_rank: usize, local_pes: usize) -> Option<&[usize]> {
    if local_pes <= 1 || local_pes > cpus.len() {
        return None;
    }
    let block = local_rank % local_pes;
    let edge = |b: usize| b * cpus.len() / local_pes;
    Some(&cpus[edge(block)..edge(block + 1)])
}

/// Pins every thread of this process to the share of the calling thread's CPUs that
/// [`share_of`] gives the PE numbered `local_rank` among the machine's `local_pes`. Returns the
/// CPUs, or `None` where it bound nothing.
///
/// # Errors
/// As [`bind_to_core`].
pub fn bind_to_share(local_rank: usize, local_pes: usize) -> Result<Option<Vec<usize>>> {
    let cpus = in_topology_order(&allowed_cpus("share")?, place_in_sysfs);
    let Some(share) = share_of(&cpus, local_rank, local_pes) else {
        return Ok(None);
    };
    bind_threads(share, "share")?;
    Ok(Some(share.to_vec()))
}

/// `cpus` ordered by package (socket), then core, then number, from `place` (a CPU's package
/// and core, where known; unknown places sort after the known, by number): a block of them
/// then holds whole cores of one package where it can. By number alone, a share could take
/// the hyperthread siblings of another share's cores (Linux numbers the second thread of
/// every core after the first threads of all), or cores of both packages.
fn in_topology_order(cpus: &[usize], place: impl Fn(usize) -> Option<(u32, u32)>) -> Vec<usize> {
    let mut ordered = cpus.to_vec();
    ordered.sort_by_key(|&cpu| (place(cpu).unwrap_or((u32::MAX, u32::MAX)), cpu));
    ordered
}

/// A CPU's package and core, as sysfs gives them.
fn place_in_sysfs(cpu: usize) -> Option<(u32, u32)> {
    let read = |what: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some((read("physical_package_id")?, read("core_id")?))
}

/// Pins every thread of this process to `cpus`.
fn bind_threads(cpus: &[usize], what: &str) -> Result<()> {
    let mut set = CpuSet::new();
    cpus.iter().for_each(|&c| set.set(c));
    let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| {
        Error::Config(format!(
            "FERROSHMEM_BIND={what}: listing this PE's threads: {e}"
        ))
    })?;
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // A thread that ended since the listing is no longer there to bind.
        match rustix::thread::sched_setaffinity(Pid::from_raw(tid), &set) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => {
                return Err(Error::Config(format!(
                    "FERROSHMEM_BIND={what}: binding thread {tid} to CPUs {cpus:?}: {e}"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(cpus: &[usize], quota: u64) -> CpuShare {
        CpuShare {
            quota,
            ..CpuShare::of_cpus(cpus)
        }
    }

    #[test]
    fn pes_sharing_the_same_cpus_are_crowded_once_they_outnumber_them() {
        let both = share(&[0, 1], u64::MAX);
        assert!(!CpuShare::crowded(2, [both; 2]));
        assert!(CpuShare::crowded(4, [both; 4]));
    }

    #[test]
    fn pes_bound_to_a_core_each_are_not_crowded() {
        let bound = [share(&[0], u64::MAX), share(&[1], u64::MAX)];
        assert!(!CpuShare::crowded(2, bound));
        let on_one = [share(&[0], u64::MAX), share(&[0], u64::MAX)];
        assert!(CpuShare::crowded(2, on_one));
        assert!(!CpuShare::crowded(
            2,
            [share(&[63], 9), share(&[64, 900], 9)]
        ));
    }

    #[test]
    fn a_quota_below_the_mask_caps_the_cpus() {
        let wide = share(&(0..64).collect::<Vec<_>>(), 2);
        assert!(!CpuShare::crowded(2, [wide; 2]));
        assert!(CpuShare::crowded(4, [wide; 4]));
    }

    #[test]
    fn a_share_is_one_block_of_the_cpus_per_pe() {
        let two = [0, 1];
        assert_eq!(share_of(&two, 0, 2), Some(&[0][..]));
        assert_eq!(share_of(&two, 1, 2), Some(&[1][..]));
        let sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(share_of(&sixteen, 1, 2), Some(&sixteen[8..]));
        let odd = [2, 3, 5, 7, 11];
        let shares: Vec<&[usize]> = (0..3).map(|r| share_of(&odd, r, 3).unwrap()).collect();
        assert_eq!(shares, [&[2][..], &[3, 5][..], &[7, 11][..]]);
        assert_eq!(share_of(&two, 3, 2), Some(&[1][..]), "ranks wrap");
    }

    #[test]
    fn shares_take_whole_cores_of_one_package() {
        // Two packages of two cores, two threads each: CPU c is thread c / 4 of core
        // (c % 4) % 2 on package (c % 4) / 2, as Linux numbers them.
        let place = |cpu: usize| Some((((cpu % 4) / 2) as u32, ((cpu % 4) % 2) as u32));
        let ordered = in_topology_order(&(0..8).collect::<Vec<_>>(), place);
        assert_eq!(ordered, [0, 4, 1, 5, 2, 6, 3, 7]);
        assert_eq!(
            share_of(&ordered, 1, 4),
            Some(&[1, 5][..]),
            "one whole core"
        );
        assert_eq!(
            share_of(&ordered, 1, 2),
            Some(&[2, 6, 3, 7][..]),
            "one package"
        );
        let unknown = in_topology_order(&[3, 1, 2], |cpu| (cpu != 1).then_some((0, 9)));
        assert_eq!(unknown, [2, 3, 1], "unknown places last");
    }

    #[test]
    fn no_share_is_bound_alone_or_on_a_crowded_node() {
        assert_eq!(share_of(&[0, 1], 0, 1), None, "one PE keeps every CPU");
        assert_eq!(
            share_of(&[0, 1], 2, 4),
            None,
            "crowded: the scheduler balances"
        );
        assert_eq!(share_of(&[], 0, 2), None);
    }

    #[test]
    fn this_thread_has_a_cpu() {
        let mine = CpuShare::of_this_thread();
        assert!(mine.cpus() >= 1);
        assert!(!CpuShare::crowded(1, [mine]));
    }
}
