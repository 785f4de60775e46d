//! The CPUs a node gives its PEs, and whether the PEs outnumber them (a *crowded* node), or
//! the PEs of several nodes of one machine (namespace hosts, containers) outnumber its CPUs.
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
//! [`bind_to_share`] gives each PE of a machine its own block of the CPUs
//! (`FERROSHMEM_BIND=share`, the default under `ferroshmem run`): unbound, the scheduler at
//! times ran both PEs of a 2-PE job on one of 2 CPUs, where each wait spins its slice before
//! it yields to the other PE, and a barrier took 5 µs instead of 0.2–0.3. Where the PEs
//! outnumber the machine's CPUs it deals the CPUs over them, one each, in number order as
//! [`bind_to_core`] does: unbound, a short job's 4 PEs on 2 CPUs often started 3 on one CPU
//! and stayed so, and a 4-byte `alltoall` took 4–5 µs in most runs; dealt, 2.4 µs.
//!
//! [`LastLevelCache`] tells how large the CPUs' last-level caches are and how many the
//! machine has: large writes (`shared_memory.rs`) and the block moves of collectives
//! (`Team::block_caching`, `collectives/mod.rs`) use streaming stores past them.

use bytemuck::{Pod, Zeroable};
use rustix::process::Pid;
use rustix::thread::CpuSet;
use std::sync::OnceLock;

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
        let usable = usable_cpus();
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

/// Whether the `machine_pes` PEs of the job on this machine (one kernel), of which
/// `node_pes` are on this PE's node, outnumber the machine's CPUs ([`machine_cpus`]) where
/// the node's alone would not: nodes that are network namespaces or containers of one
/// kernel run on the same CPUs, so a wait that spins there holds a CPU that a PE of
/// another node may need in order to send what the wait is for. (4 PEs on 2 namespace
/// hosts of 2 CPUs, 2 per host: a `barrier_all` whose waits spun their slices before they
/// yielded took 21–29 µs in most runs, 13.5 in some; yielding after each round of checks,
/// 10–13.)
pub fn machine_crowded(node_pes: usize, machine_pes: usize) -> bool {
    machine_pes > node_pes && machine_pes > machine_cpus()
}

/// The machine's online CPUs (`/sys/devices/system/cpu/online`), whatever this process's
/// affinity or cgroup allows it; where that file cannot be read, the CPUs this process may
/// use at the first call. A PE calls it before it binds its threads, so that it is alike
/// for every PE of the machine either way (the predefined teams' configuration depends on
/// it: PEs that saw different counts would pick different algorithms and wait for each
/// other forever).
pub fn machine_cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|list| count_cpu_list(list.trim()))
            .unwrap_or_else(usable_cpus)
    })
}

/// CPU 0's last-level cache, as sysfs describes it: the cache of the highest level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastLevelCache {
    /// Its size in bytes.
    pub bytes: usize,
    /// How many caches like it the machine has: its online CPUs over the CPUs that share it,
    /// rounded up.
    pub count: usize,
}

impl LastLevelCache {
    /// This machine's, read once from sysfs (one cache of 32 MiB where sysfs does not say).
    pub fn of_this_machine() -> LastLevelCache {
        static LLC: OnceLock<LastLevelCache> = OnceLock::new();
        *LLC.get_or_init(|| LastLevelCache::described(cache_file, machine_cpus()))
    }

    /// The cache that `file(index, name)` describes (the files of CPU 0's cache `index`, such
    /// as `level`, `size` and `shared_cpu_list`) on a machine of `online` CPUs.
    fn described(file: impl Fn(usize, &str) -> Option<String>, online: usize) -> LastLevelCache {
        let level = |i: usize| file(i, "level")?.parse::<u32>().ok();
        let last = (0..8).filter_map(|i| Some((level(i)?, i))).max();
        let bytes = last
            .and_then(|(_, i)| crate::config::parse_size(&file(i, "size")?).ok())
            .filter(|&bytes| bytes > 0);
        let sharing = last
            .and_then(|(_, i)| count_cpu_list(&file(i, "shared_cpu_list")?))
            .filter(|&cpus| cpus > 0);
        match bytes {
            Some(bytes) => LastLevelCache {
                bytes,
                count: sharing.map_or(1, |cpus| online.div_ceil(cpus).max(1)),
            },
            None => LastLevelCache {
                bytes: 32 << 20,
                count: 1,
            },
        }
    }

    /// The most that `pes` PEs can hold in these caches: one cache each, as far as there
    /// are caches.
    pub fn held_by(&self, pes: usize) -> usize {
        self.bytes.saturating_mul(pes.min(self.count).max(1))
    }
}

/// A file of CPU 0's cache `index` in sysfs, trimmed.
fn cache_file(index: usize, name: &str) -> Option<String> {
    let path = format!("/sys/devices/system/cpu/cpu0/cache/index{index}/{name}");
    Some(std::fs::read_to_string(path).ok()?.trim().to_owned())
}

/// The standard library's count of the CPUs this thread may use (its affinity mask, capped
/// by a cgroup quota), at least 1.
fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The number of CPUs in a kernel CPU list such as `0-15,32-47` (`None` if malformed).
fn count_cpu_list(list: &str) -> Option<usize> {
    list.split(',').try_fold(0usize, |total, part| {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?),
            None => {
                let one = part.parse::<usize>().ok()?;
                (one, one)
            }
        };
        total.checked_add(hi.checked_sub(lo)?)?.checked_add(1)
    })
}

/// The CPUs the calling thread may run on: as a set, and in order.
fn allowed_cpus(what: &str) -> Result<(CpuSet, Vec<usize>)> {
    let allowed = rustix::thread::sched_getaffinity(None).map_err(|e| {
        Error::Config(format!(
            "FERROSHMEM_BIND={what}: reading this PE's CPUs: {e}"
        ))
    })?;
    let cpus = (0..CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect();
    Ok((allowed, cpus))
}

/// The one CPU the calling thread may run on, where its affinity holds exactly one (a PE
/// bound by [`bind_to_core`], dealt one CPU by [`bind_to_share`], or placed on one by
/// `taskset` or its launcher); `None` otherwise or where the affinity cannot be read.
pub fn the_one_cpu() -> Option<usize> {
    let allowed = rustix::thread::sched_getaffinity(None).ok()?;
    let mut cpus = (0..CpuSet::MAX_CPU).filter(|&c| allowed.is_set(c));
    let cpu = cpus.next()?;
    cpus.next().is_none().then_some(cpu)
}

/// Pins every thread of this process to one CPU of those the calling thread may run on:
/// the `local_rank`-th of them, in turn (the PEs of a node, numbered from 0 there, are dealt
/// over their CPUs). Threads started later inherit the binding. Returns that CPU.
///
/// # Errors
/// [`Error::Config`] when the calling thread's CPUs cannot be read, or a thread cannot be
/// bound (the threads bound already are put back where they were).
pub fn bind_to_core(local_rank: usize) -> Result<usize> {
    let (before, cpus) = allowed_cpus("core")?;
    let Some(&cpu) = cpus.get(local_rank % cpus.len().max(1)) else {
        return Err(Error::Config(
            "FERROSHMEM_BIND=core: this PE may run on no CPU".into(),
        ));
    };
    bind_threads(&[cpu], &before, "core")?;
    Ok(cpu)
}

/// A PE's place among the job's PEs on its machine: its number there, and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachinePlace {
    /// This PE's number among them, in rank order.
    pub rank: usize,
    /// How many PEs of the job run on the machine.
    pub pes: usize,
    /// How many nodes those PEs make: more than one where nodes of their own (network
    /// namespaces, containers) share the machine's kernel.
    pub nodes: usize,
}

/// The share of `cpus` (those the PEs of a machine may run on, in topology order) of the PE
/// at `place`: block `place.rank` of `place.pes` contiguous blocks, their sizes differing by
/// one at most. `None` where no block is due: the PEs outnumber the CPUs, or `usable` (a
/// quota's cap), or one PE would have them all.
fn share_of(cpus: &[usize], place: MachinePlace, usable: usize) -> Option<&[usize]> {
    if !share_fits(place, cpus.len(), usable) {
        return None;
    }
    let block = place.rank % place.pes;
    let edge = |b: usize| b * cpus.len() / place.pes;
    Some(&cpus[edge(block)..edge(block + 1)])
}

/// Whether the PEs of `place`'s machine can each have a CPU of their own out of `cpus`
/// (capped at `usable`), and are more than one.
fn share_fits(place: MachinePlace, cpus: usize, usable: usize) -> bool {
    place.pes > 1 && place.pes <= cpus.min(usable)
}

/// The one CPU of `cpus` (in number order) of the PE at `place` where the machine's PEs
/// outnumber them: the CPUs dealt over the PEs in rank order, as [`bind_to_core`] deals a
/// node's CPUs over its PEs. `None` where the PEs do not outnumber the CPUs.
fn dealt_cpu(cpus: &[usize], place: MachinePlace) -> Option<usize> {
    if place.pes <= cpus.len() || cpus.is_empty() {
        return None;
    }
    Some(cpus[place.rank % place.pes % cpus.len()])
}

/// Pins every thread of this process to its share of the machine's CPUs as the PE at
/// `place`: a block of the calling thread's CPUs in topology order (`share_of`), or, where
/// the machine's PEs outnumber those CPUs, one of them (`dealt_cpu`). Unless
/// `FERROSHMEM_BIND=share` was `asked` for, it binds nothing
/// - where the PE's CPUs are fewer than the machine's (a launcher, `taskset` or a cpuset
///   placed it already): PEs placed on different CPU sets would split each their own by one
///   count, and could end up crowded where their records say they are not;
/// - where the machine's PEs make several nodes (`default_share_due`).
///
/// Even when asked, it deals CPUs only where the PE may run on every CPU of the machine and
/// the machine is one node: PEs that `mpirun` placed on CPU sets of their own (a package
/// each, say) would each deal their own set and leave some CPUs idle, two PEs on each used
/// one. Returns the CPUs, or `None` where it bound nothing.
///
/// # Errors
/// As [`bind_to_core`].
pub fn bind_to_share(place: MachinePlace, asked: bool) -> Result<Option<Vec<usize>>> {
    let (before, allowed) = allowed_cpus("share")?;
    let whole_machine = default_share_due(place, allowed.len(), machine_cpus());
    if !asked && !whole_machine {
        return Ok(None);
    }
    let share = if place.pes > allowed.len() {
        match dealt_cpu(&allowed, place) {
            Some(cpu) if whole_machine => vec![cpu],
            _ => return Ok(None),
        }
    } else {
        let cpus = in_topology_order(&allowed, place_in_sysfs);
        match share_of(&cpus, place, usable_cpus()) {
            Some(share) => share.to_vec(),
            None => return Ok(None),
        }
    };
    bind_threads(&share, &before, "share")?;
    Ok(Some(share))
}

/// Whether the default binds the PE at `place`, which may use `allowed` of the machine's
/// `machine` CPUs: not where it was placed already (by a launcher, `taskset` or a cpuset: it
/// may use fewer than all), nor where the machine's PEs make several nodes (namespace
/// "hosts", containers of one kernel): their traffic crosses the kernel's network stack,
/// whose work a share does not leave CPUs for (two namespace hosts of one PE each on 2 CPUs,
/// one CPU each: a 4 KiB put stream across them fell from 0.46–0.53 to 0.40–0.43 GB/s).
fn default_share_due(place: MachinePlace, allowed: usize, machine: usize) -> bool {
    allowed >= machine && place.nodes <= 1
}

/// Where a CPU sits: its package (socket), die and core, as sysfs numbers them.
type CpuPlace = (u32, u32, u32);

/// `cpus` ordered by package, die, core, then number, from `place` (unknown places sort after
/// the known, by number): a block of them then keeps hyperthread siblings together and stays
/// on one package where the counts allow. By number alone, a share could take the siblings
/// of another share's cores (Linux numbers every core's second thread after the first
/// threads of all), or cores of two packages.
fn in_topology_order(cpus: &[usize], place: impl Fn(usize) -> Option<CpuPlace>) -> Vec<usize> {
    let mut ordered = cpus.to_vec();
    ordered.sort_by_cached_key(|&cpu| (place(cpu).unwrap_or((u32::MAX, u32::MAX, u32::MAX)), cpu));
    ordered
}

/// A CPU's place as sysfs gives it (a die of 0 where sysfs has no `die_id`).
fn place_in_sysfs(cpu: usize) -> Option<CpuPlace> {
    let read = |what: &str| -> Option<u32> {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    let die = read("die_id").unwrap_or(0);
    Some((read("physical_package_id")?, die, read("core_id")?))
}

/// Pins every thread of this process to `cpus`: the threads listed, then any started in the
/// meantime, until a listing finds none new. On a failure, the threads bound so far get the
/// CPUs they had (`before`) back, as far as they can, before the error returns.
fn bind_threads(cpus: &[usize], before: &CpuSet, what: &str) -> Result<()> {
    // The machine's CPU count, on which the teams' algorithms depend, is fixed before any
    // binding could change its fallback (the CPUs this PE may use).
    machine_cpus();
    let mut set = CpuSet::new();
    cpus.iter().for_each(|&c| set.set(c));
    let mut bound = std::collections::HashSet::new();
    loop {
        let listed = thread_ids().map_err(|e| {
            Error::Config(format!(
                "FERROSHMEM_BIND={what}: listing this PE's threads: {e}"
            ))
        })?;
        let new: Vec<i32> = listed.into_iter().filter(|t| !bound.contains(t)).collect();
        if new.is_empty() {
            return Ok(());
        }
        for tid in new {
            // A thread that ended since the listing is no longer there to bind.
            match rustix::thread::sched_setaffinity(Pid::from_raw(tid), &set) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => bound.insert(tid),
                Err(e) => {
                    for &back in &bound {
                        let _ = rustix::thread::sched_setaffinity(Pid::from_raw(back), before);
                    }
                    return Err(Error::Config(format!(
                        "FERROSHMEM_BIND={what}: binding thread {tid} to CPUs {cpus:?}: {e}"
                    )));
                }
            };
        }
    }
}

/// The ids of this process's threads.
fn thread_ids() -> std::io::Result<Vec<i32>> {
    Ok(std::fs::read_dir("/proc/self/task")?
        .flatten()
        .filter_map(|task| task.file_name().to_str().and_then(|t| t.parse().ok()))
        .collect())
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
    fn nodes_of_one_machine_crowd_it_together() {
        let cpus = machine_cpus();
        assert!(machine_crowded(cpus / 2 + 1, 2 * (cpus / 2 + 1)));
        if cpus >= 2 {
            assert!(
                !machine_crowded(1, cpus),
                "as many PEs as CPUs, on two nodes"
            );
        }
        assert!(
            !machine_crowded(cpus + 1, cpus + 1),
            "one node: its own verdict"
        );
    }

    fn at(rank: usize, pes: usize) -> MachinePlace {
        MachinePlace {
            rank,
            pes,
            nodes: 1,
        }
    }

    #[test]
    fn a_share_is_one_block_of_the_cpus_per_pe() {
        let two = [0, 1];
        assert_eq!(share_of(&two, at(0, 2), 2), Some(&[0][..]));
        assert_eq!(share_of(&two, at(1, 2), 2), Some(&[1][..]));
        let sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(share_of(&sixteen, at(1, 2), 16), Some(&sixteen[8..]));
        let odd = [2, 3, 5, 7, 11];
        let shares: Vec<&[usize]> = (0..3)
            .map(|r| share_of(&odd, at(r, 3), 5).unwrap())
            .collect();
        assert_eq!(shares, [&[2][..], &[3, 5][..], &[7, 11][..]]);
        assert_eq!(share_of(&two, at(3, 2), 2), Some(&[1][..]), "ranks wrap");
    }

    #[test]
    fn shares_keep_siblings_together_on_one_package() {
        // Two packages of two cores, two threads each: CPU c is thread c / 4 of core
        // (c % 4) % 2 on package (c % 4) / 2, as Linux numbers them.
        let place = |cpu: usize| Some((((cpu % 4) / 2) as u32, 0, ((cpu % 4) % 2) as u32));
        let ordered = in_topology_order(&(0..8).collect::<Vec<_>>(), place);
        assert_eq!(ordered, [0, 4, 1, 5, 2, 6, 3, 7]);
        assert_eq!(
            share_of(&ordered, at(1, 4), 8),
            Some(&[1, 5][..]),
            "one core"
        );
        let package = share_of(&ordered, at(1, 2), 8);
        assert_eq!(package, Some(&[2, 6, 3, 7][..]), "one package");
        let dies = |cpu: usize| Some((0, (cpu % 2) as u32, 0));
        assert_eq!(
            in_topology_order(&[0, 1, 2, 3], dies),
            [0, 2, 1, 3],
            "by die"
        );
        let unknown = in_topology_order(&[3, 1, 2], |cpu| (cpu != 1).then_some((0, 0, 9)));
        assert_eq!(unknown, [2, 3, 1], "unknown places last");
    }

    #[test]
    fn this_machine_s_cpus_have_places() {
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/topology/core_id").exists() {
            assert!(place_in_sysfs(0).is_some());
        }
        let (_, allowed) = allowed_cpus("share").expect("this thread's CPUs");
        assert!(
            machine_cpus() >= allowed.len(),
            "the machine has every CPU this thread may use"
        );
    }

    #[test]
    fn pes_that_outnumber_the_cpus_get_one_each_dealt_in_rank_order() {
        let four_on_two: Vec<Option<usize>> =
            (0..4).map(|r| dealt_cpu(&[0, 1], at(r, 4))).collect();
        assert_eq!(four_on_two, [Some(0), Some(1), Some(0), Some(1)]);
        let five_on_two: Vec<Option<usize>> =
            (0..5).map(|r| dealt_cpu(&[6, 9], at(r, 5))).collect();
        assert_eq!(five_on_two, [Some(6), Some(9), Some(6), Some(9), Some(6)]);
        assert_eq!(dealt_cpu(&[0, 1, 2], at(8, 7)), Some(1), "ranks wrap");
        assert_eq!(dealt_cpu(&[0, 1], at(0, 2)), None, "not outnumbered");
        assert_eq!(dealt_cpu(&[], at(0, 2)), None);
    }

    #[test]
    fn no_block_is_due_alone_on_a_crowded_machine_or_under_a_quota() {
        assert_eq!(
            share_of(&[0, 1], at(0, 1), 2),
            None,
            "one PE keeps every CPU"
        );
        assert_eq!(
            share_of(&[0, 1], at(2, 4), 2),
            None,
            "crowded: CPUs are dealt instead"
        );
        assert_eq!(
            share_of(&[0, 1, 2, 3], at(0, 4), 2),
            None,
            "crowded under a quota"
        );
        assert_eq!(share_of(&[], at(0, 2), 2), None);
    }

    #[test]
    fn the_default_leaves_placed_pes_and_machines_of_several_nodes_alone() {
        assert!(default_share_due(at(0, 2), 16, 16));
        assert!(!default_share_due(at(0, 2), 2, 16), "placed already");
        let namespaces = MachinePlace {
            nodes: 2,
            ..at(0, 2)
        };
        assert!(
            !default_share_due(namespaces, 16, 16),
            "nodes sharing the kernel"
        );
    }

    #[test]
    fn cpu_lists_count_or_fail() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-15"), Some(16));
        assert_eq!(count_cpu_list("0-15,32-47,64"), Some(33));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("a-b"), None);
        assert_eq!(count_cpu_list(""), None);
    }

    #[test]
    fn the_last_level_cache_is_the_highest_level_counted_over_the_cpus_sharing_it() {
        let epyc = |index: usize, name: &str| -> Option<String> {
            let text = match (index, name) {
                (0 | 1, "level") => "1",
                (2, "level") => "2",
                (3, "level") => "3",
                (0 | 1, "size") => "32K",
                (2, "size") => "1024K",
                (3, "size") => "32768K",
                (0..=2, "shared_cpu_list") => "0,64",
                (3, "shared_cpu_list") => "0-7,64-71",
                _ => return None,
            };
            Some(text.to_owned())
        };
        let llc = LastLevelCache::described(epyc, 128);
        assert_eq!(
            llc,
            LastLevelCache {
                bytes: 32 << 20,
                count: 8
            }
        );
        assert_eq!(llc.held_by(0), 32 << 20);
        assert_eq!(llc.held_by(4), 128 << 20);
        assert_eq!(llc.held_by(64), 256 << 20);
        // A second package partly offline still has its cache.
        assert_eq!(LastLevelCache::described(epyc, 100).count, 7);
        let unknown = LastLevelCache::described(|_, _| None, 128);
        assert_eq!(
            unknown,
            LastLevelCache {
                bytes: 32 << 20,
                count: 1
            }
        );
        let no_list = |index: usize, name: &str| match name {
            "shared_cpu_list" => None,
            _ => epyc(index, name),
        };
        assert_eq!(LastLevelCache::described(no_list, 128).count, 1);
        // A cache count of 0, which only a hand-made value has, counts as one.
        assert_eq!(LastLevelCache { bytes: 8, count: 0 }.held_by(3), 8);
        assert!(LastLevelCache::of_this_machine().bytes > 0);
    }

    #[test]
    fn this_thread_has_a_cpu() {
        let mine = CpuShare::of_this_thread();
        assert!(mine.cpus() >= 1);
        assert!(!CpuShare::crowded(1, [mine]));
    }

    #[test]
    fn a_thread_bound_to_one_cpu_names_it() {
        let allowed = rustix::thread::sched_getaffinity(None).expect("affinity");
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
            .filter(|&c| allowed.is_set(c))
            .collect();
        let expected_now = (cpus.len() == 1).then(|| cpus[0]);
        assert_eq!(the_one_cpu(), expected_now);
        let last = *cpus.last().expect("a CPU");
        let bound = std::thread::spawn(move || {
            let mut one = CpuSet::new();
            one.set(last);
            match rustix::thread::sched_setaffinity(None, &one) {
                Ok(()) => Some(the_one_cpu()),
                Err(e) => {
                    eprintln!("skipping the bound thread: binding it failed here ({e})");
                    None
                }
            }
        });
        if let Some(named) = bound.join().expect("thread") {
            assert_eq!(named, Some(last));
        }
    }
}
