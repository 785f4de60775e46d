//! Teams (OpenSHMEM 1.5 `shmem_team_*`): ordered subsets of the job's PEs on which
//! collectives run. Every PE has the predefined world and node teams ([`Teams`]); new teams
//! are split from existing ones ([`Team::split_strided`], [`Team::split_2d`]) and given back
//! with [`Team::destroy`].
//!
//! A [`Team`] is this PE's handle: its members (as world PE numbers), its index among them,
//! its [`TeamConfig`], and its control region in symmetric memory (laid out in `region.rs`).
//! Collectives on it live in [`crate::collectives`]. One collective runs at a time per team
//! and PE; a collective future dropped midway leaves the team unusable (its later calls
//! fail) rather than letting it silently disagree with its peers, and the members that wait
//! for it fail too (each member keeps records of its calls that the others read while they
//! wait: `calls.rs`).

mod calls;
mod create;
mod pool;
pub(crate) mod region;
mod remote_records;
pub(crate) mod shape;

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::collectives::plan::Plan;
use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::exchange::Exchange;
use crate::heap::{Allocation, SymBuffer};

pub use calls::MISMATCH_GRACE;
pub use pool::PoolLayout;
use pool::TeamPool;
use region::Layout;
pub use region::MAX_TEAM_PES;

/// How a team picks its collective algorithms. Every member of a team uses the same
/// configuration: it is fixed when the team is created (and checked then across members).
///
/// ```
/// use ferroshmem_runtime::TeamConfig;
/// // Trees and rings even in small teams, and no eager (copy-through-scratch) path.
/// let config = TeamConfig { eager_bytes: 0, flat_max_pes: 1, ..TeamConfig::default() };
/// assert_eq!(config.large_bytes, TeamConfig::default().large_bytes);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TeamConfig {
    /// Reductions of up to this many bytes go through each receiver's scratch slots, so that
    /// senders never wait for receivers: one one-way latency per collective. Teams of at
    /// most [`flat_max_pes`](Self::flat_max_pes) members reserve two slots of this size per
    /// member. 0 turns the eager algorithms off. Default 4 KiB.
    pub eager_bytes: usize,
    /// The same limit for the collectives that only move data (broadcast, fcollect,
    /// collect, alltoall), at most `eager_bytes`: above it, reading the sender's buffer in
    /// place (one copy, not two) beats the synchronization that eager messages save.
    /// Default 1 KiB; the predefined teams of a job whose PEs outnumber the machine's online
    /// CPUs take 4 KiB, since there every synchronization costs a trip through the scheduler.
    /// Teams that span nodes move data eagerly up to `eager_bytes` whatever this says:
    /// there reading in place is a fabric round trip.
    pub eager_copy_bytes: usize,
    /// The same limit for a broadcast within one node, at most `eager_copy_bytes`: above
    /// it members read the root's buffer in place, one copy where eager messages take two
    /// and occupy a line more per 64 bytes, but the root then waits for its members' reads.
    /// Default 256 bytes (at 2 PEs an eager broadcast of 256 bytes took 0.90 of the time of
    /// one read in place); an oversubscribed job's predefined teams take 4 KiB, as for
    /// `eager_copy_bytes`. Across nodes, where reading in place is a fabric round
    /// trip, broadcasts are eager up to `eager_bytes`, as the other data moves.
    pub eager_broadcast_bytes: usize,
    /// Teams of up to this many members use flat algorithms (each PE talks to every other
    /// directly); larger teams use binomial trees and rings for small messages. Default 8.
    pub flat_max_pes: usize,
    /// Messages of at least this many bytes use the bandwidth algorithms: reductions split
    /// the work among all members (reduce-scatter, then allgather), large teams gather along
    /// a ring and broadcast flat. On a team that spans nodes: a node's members share the
    /// combining of its partial in a reduction where its leader would otherwise read more
    /// than this many bytes of theirs; reductions of this many bytes are split among the node
    /// leaders on teams of more nodes than `flat_max_pes` too; broadcasts of this many bytes
    /// on three nodes or more are scattered among the node leaders. Default 64 KiB.
    pub large_bytes: usize,
    /// Broadcasts scattered among the node leaders (see `large_bytes`) move each leader's
    /// part in blocks of about this many bytes, and a leader passes each block on to the
    /// other leaders as it comes, while the next is on its way: at 3 nodes a large
    /// message's last part then lands about one message's time on a link after the first
    /// byte leaves the root, not one and a half. Each block costs a put, a post and a
    /// wake-up, so smaller blocks pay where the links are slow and cost where the CPUs are
    /// the limit (see `broadcast_scatter.rs` for figures, measured on links of 1 Gbit/s
    /// only). Where the transport does not keep a block's write and its post in order
    /// (`Remote::ordered_write_bytes` below the block), each block's post waits for the
    /// block to land, and a leader waits for that before it passes on the next block.
    /// 0: each part moves whole; else at least [`MIN_PIPELINE_BYTES`]. Every member passes
    /// the same (a team's creation checks it; the predefined teams' is the job's default).
    /// Default 256 KiB.
    pub pipeline_bytes: usize,
    /// On a team of one node that syncs flat (up to four members), `alltoall` blocks of up
    /// to this many bytes move pairwise, but for those of up to 1 KiB that the eager
    /// algorithm takes (where the team has eager slots and `eager_copy_bytes` allows them):
    /// of each pair of members, the one that claims the pair second moves both blocks, so
    /// every block is copied once and a member waits once, only for the pairs whose other
    /// member entered after it. It takes such blocks from the eager algorithm too (whose two
    /// copies cost more there than its one wait saves). Above it, the flat algorithm, where
    /// both members of a pair copy at once (or the eager one, where `eager_copy_bytes` is
    /// larger). 0 turns it off. Default 4 KiB (at 2 PEs on 2 CPUs, 4 KiB took 0.85 of the
    /// flat algorithm's time, 8 KiB 1.2).
    pub pairwise_bytes: usize,
    /// Whether the members' callers keep OpenSHMEM's contract for `fcollect` and `alltoall`:
    /// every member's `dest` is ready to be written before any member makes the call
    /// (OpenSHMEM 1.5 makes that the caller's duty, with a barrier or other buffers between
    /// a `dest`'s last read and the next call into it). Blocks above the eager sizes then go
    /// straight from each sender into its receivers' `dest`, with no entry sync: each member
    /// writes its blocks, then the members sync once (strided `alltoalls` keep their
    /// algorithms). Where PEs outnumber CPUs, a running member then does all its work
    /// without waiting for members that are not running.
    ///
    /// The price, as in OpenSHMEM: calls are checked against each other only at that sync,
    /// after the blocks were written. Members that pass different sizes (or one that
    /// refused its own arguments, or called another collective) fail with
    /// [`Error::CollectiveMismatch`], but the others' blocks may already have been written
    /// at the offsets their own sizes give, past a shorter `dest`. The C library's teams keep
    /// the contract (its callers follow OpenSHMEM). Default false: a member's `dest` is
    /// written only once it has made the call, and a mismatch writes nothing.
    pub dest_ready: bool,
}

/// The largest [`TeamConfig::eager_bytes`] a team may ask for: each member of a flat team
/// keeps two slots of it per member.
pub const MAX_EAGER_BYTES: usize = 1 << 20;

/// The smallest nonzero [`TeamConfig::pipeline_bytes`] a team may ask for: every block costs
/// a put and a post, each with its completion to keep.
pub const MIN_PIPELINE_BYTES: usize = 64;

impl Default for TeamConfig {
    fn default() -> Self {
        TeamConfig {
            eager_bytes: 4096,
            eager_copy_bytes: 1024,
            eager_broadcast_bytes: 256,
            flat_max_pes: 8,
            large_bytes: 64 << 10,
            pipeline_bytes: 256 << 10,
            pairwise_bytes: 4096,
            dest_ready: false,
        }
    }
}

impl TeamConfig {
    /// The configuration of the predefined teams of a job whose PEs live on `nodes` (each
    /// PE's node, as [`crate::DataPlane::nodes`] gives them) with heaps of `heap_size` bytes:
    /// the default, with `eager_copy_bytes` and `eager_broadcast_bytes` raised to
    /// `eager_bytes` when the job lives on one node and its PEs outnumber the machine's
    /// online CPUs, and without eager slots when the heap is too small to spare them (the
    /// two predefined teams' regions would take more than 1/16 of it).
    ///
    /// Every PE of the job computes it alone, so it depends only on what all of them see
    /// alike: the machine's online CPUs, not the CPUs this process may run on (PEs pinned to
    /// different CPU sets would otherwise pick different algorithms and wait for each other
    /// forever), and those only on one node: the machines of a job that spans nodes may
    /// have different numbers of CPUs.
    pub fn for_job(nodes: &[usize], heap_size: usize) -> TeamConfig {
        let one_node = nodes.windows(2).all(|pair| pair[0] == pair[1]);
        let config = TeamConfig::sized_for(nodes.len(), heap_size);
        if one_node && nodes.len() > crate::cpus::machine_cpus() {
            let eager = TeamConfig::default().eager_bytes;
            return TeamConfig {
                eager_copy_bytes: eager,
                eager_broadcast_bytes: eager,
                ..config
            };
        }
        config
    }

    /// The default configuration for a team of `n_pes` members with heaps of `heap_size`
    /// bytes, without eager slots where the heap is too small to spare them (see
    /// [`TeamConfig::for_job`]); what lays out the team pool.
    fn sized_for(n_pes: usize, heap_size: usize) -> TeamConfig {
        let mut config = TeamConfig::default();
        if 2 * Layout::new(n_pes, &config).bytes > heap_size / 16 {
            config.eager_bytes = 0;
        }
        config
    }

    /// Refuses a configuration whose regions could not be laid out, or whose broadcasts
    /// would move in blocks smaller than [`MIN_PIPELINE_BYTES`].
    pub(crate) fn check(&self) -> Result<()> {
        if self.eager_bytes > MAX_EAGER_BYTES {
            return Err(Error::InvalidArgument(format!(
                "a team's eager_bytes of {} is above the largest supported ({MAX_EAGER_BYTES})",
                self.eager_bytes
            )));
        }
        if (1..MIN_PIPELINE_BYTES).contains(&self.pipeline_bytes) {
            return Err(Error::InvalidArgument(format!(
                "a team's pipeline_bytes of {} is below the smallest supported \
                 ({MIN_PIPELINE_BYTES}; 0 moves parts whole)",
                self.pipeline_bytes
            )));
        }
        Ok(())
    }

    /// Eight little-endian words, one a field (a team creation's arguments hold them).
    fn encode(&self, out: &mut Vec<u8>) {
        for v in [
            self.eager_bytes,
            self.eager_copy_bytes,
            self.eager_broadcast_bytes,
            self.flat_max_pes,
            self.large_bytes,
            self.pipeline_bytes,
            self.pairwise_bytes,
            usize::from(self.dest_ready),
        ] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
    }
}

/// Per-PE counters of a team's collectives; every member updates its own copy the same way.
/// Only the collective that holds the team (its status `BUSY`) touches them, so relaxed
/// atomics suffice: the status's acquire and release order one collective after the other.
#[derive(Debug)]
struct Counters {
    /// Collectives called on the team, so far (every one, whatever its algorithm).
    calls: AtomicU64,
    /// Collectives that used signal values, so far.
    seq: AtomicU64,
    /// Syncs run on the team.
    sync_epoch: AtomicU64,
    /// Eager messages sent to each member.
    sent: Box<[AtomicU64]>,
    /// Eager messages received from each member.
    recvd: Box<[AtomicU64]>,
    /// Eager messages each member is known to have consumed from this one.
    credit: Box<[AtomicU64]>,
}

/// Adds one to `counter` and returns the new value: a load and a store, no read-modify-write
/// (whose lock would also wait for every store before it, such as a message just written
/// into a peer's slot), as only the collective that holds the team touches its counters.
fn bump(counter: &AtomicU64) -> u64 {
    let next = counter.load(Ordering::Relaxed) + 1;
    counter.store(next, Ordering::Relaxed);
    next
}

/// Values of a team's status.
const IDLE: u8 = 0;
const BUSY: u8 = 1;
const CANCELLED: u8 = 2;
const DESTROYED: u8 = 3;

/// What all of one PE's teams share: its data plane, its control plane and its team pool.
#[derive(Debug)]
pub(crate) struct TeamHome {
    pub dp: Arc<DataPlane>,
    pub control: Arc<dyn Exchange>,
    pub pool: Mutex<TeamPool>,
}

#[derive(Debug)]
pub(crate) struct TeamInner {
    pub home: Arc<TeamHome>,
    pub id: u64,
    /// World PE of each member, ascending.
    pub members: Box<[usize]>,
    /// This PE's index among the members.
    pub me: usize,
    pub config: TeamConfig,
    pub layout: Layout,
    /// The algorithms its collectives run, from its shape.
    pub plan: Plan,
    /// Heap offset of the control region.
    pub base: usize,
    /// The control region (never freed through `free`: it belongs to the team pool).
    pub region: ManuallyDrop<SymBuffer<u8>>,
    /// `Some(name)` for the predefined teams, which cannot be destroyed.
    pub predefined: Option<&'static str>,
    /// Teams split from this one so far.
    pub splits: AtomicU64,
    /// Set once the members have agreed to destroy the team: from then on members hand their
    /// regions back, so their call records are no longer read.
    pub leaving: AtomicBool,
    /// The latest call records read from members on other nodes.
    remote_records: remote_records::RemoteRecords,
    /// `IDLE`, `BUSY` (a collective runs), `CANCELLED` (one was dropped midway) or
    /// `DESTROYED`.
    status: AtomicU8,
    counters: Counters,
}

/// This PE's handle to a team. Cheap to clone; `Send + Sync`.
///
/// ```no_run
/// # async fn f(world: ferroshmem_runtime::Team) -> ferroshmem_runtime::Result<()> {
/// // The even-numbered PEs of the world form a team; the others get `None`.
/// if let Some(evens) = world.split_strided(0, 2, world.n_pes().div_ceil(2)).await? {
///     evens.sync().await?;
///     evens.destroy().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Team {
    pub(crate) inner: Arc<TeamInner>,
}

/// A collective in progress: it holds the team (and its counters) until it finishes.
/// Dropped unfinished (an error midway, or a cancelled future), it leaves the team unusable.
pub(crate) struct Op<'t> {
    team: &'t Team,
    /// The call's number among the team's calls.
    call: u64,
    /// The error every member reaches alike (they disagree, a buffer is too short), found
    /// while the protocol still runs to its end.
    verdict: Option<Error>,
    finished: bool,
}

/// Reads and writes one of the per-member counters.
macro_rules! per_member {
    ($get:ident, $set:ident, $field:ident, $what:literal) => {
        #[doc = concat!("Eager messages ", $what, " member `j`.")]
        #[inline]
        pub fn $get(&self, j: usize) -> u64 {
            self.counters().$field[j].load(Ordering::Relaxed)
        }

        #[doc = concat!("Sets the count of eager messages ", $what, " member `j`.")]
        #[inline]
        pub fn $set(&self, j: usize, v: u64) {
            self.counters().$field[j].store(v, Ordering::Relaxed)
        }
    };
}

impl Op<'_> {
    fn counters(&self) -> &Counters {
        &self.team.inner.counters
    }

    /// Numbers a new collective that uses signal values; returns its number.
    pub fn next_seq(&self) -> u64 {
        bump(&self.counters().seq)
    }

    /// Numbers a new sync; returns its epoch.
    pub fn next_epoch(&self) -> u64 {
        bump(&self.counters().sync_epoch)
    }

    per_member!(sent, set_sent, sent, "sent to");
    per_member!(recvd, set_recvd, recvd, "received from");
    per_member!(credit, set_credit, credit, "known to be consumed by");

    /// Gives the team back: the collective completed on this PE.
    pub fn finish(mut self) {
        self.finished = true;
        self.team.inner.status.store(IDLE, Ordering::Release);
    }

    /// Records `error` as the collective's result (the first one recorded wins); the
    /// protocol goes on to its end so that no member is left waiting.
    pub fn reject(&mut self, error: Error) {
        self.verdict.get_or_insert(error);
    }

    /// Whether an error has been recorded.
    pub fn rejected(&self) -> bool {
        self.verdict.is_some()
    }

    /// Records the call given up now, ahead of its end: for a protocol whose failure path
    /// waits for other members, so that they learn of the failure meanwhile (dropping the
    /// call unfinished records it again).
    pub fn record_given_up(&self) {
        self.team.record_gave_up(self.call);
    }

    /// Ends the collective. A protocol that ran to its end (`Ok`) keeps the team usable and
    /// yields the recorded error, if any; a failure midway (`Err`: a lost peer, a timeout)
    /// leaves the members out of step, so the team becomes unusable.
    pub fn settle<R>(mut self, outcome: Result<R>) -> Result<R> {
        let r = outcome?;
        let verdict = self.verdict.take();
        self.finish();
        verdict.map_or(Ok(r), Err)
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.team.dp().note_if_panicking();
            self.team.record_gave_up(self.call);
            self.team.inner.status.store(CANCELLED, Ordering::Release);
        }
    }
}

impl Team {
    pub(crate) fn new(
        home: Arc<TeamHome>,
        id: u64,
        members: Box<[usize]>,
        me: usize,
        config: TeamConfig,
        base: usize,
        predefined: Option<&'static str>,
    ) -> Result<Team> {
        let n = members.len();
        let layout = Layout::new(n, &config);
        let region = SymBuffer::from_allocation(
            Allocation::in_team_pool(home.dp.heap_id(), base, layout.bytes),
            layout.bytes,
        )?;
        let nodes: Vec<usize> = members.iter().map(|&pe| home.dp.nodes()[pe]).collect();
        let plan = Plan::new(&nodes, config, layout.eager_bytes > 0);
        Ok(Team {
            inner: Arc::new(TeamInner {
                home,
                id,
                members,
                me,
                config,
                layout,
                plan,
                base,
                region: ManuallyDrop::new(region),
                predefined,
                splits: AtomicU64::new(0),
                leaving: AtomicBool::new(false),
                remote_records: remote_records::RemoteRecords::new(n),
                status: AtomicU8::new(IDLE),
                counters: Counters {
                    calls: AtomicU64::new(0),
                    seq: AtomicU64::new(0),
                    sync_epoch: AtomicU64::new(0),
                    sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
                    recvd: (0..n).map(|_| AtomicU64::new(0)).collect(),
                    credit: (0..n).map(|_| AtomicU64::new(0)).collect(),
                },
            }),
        })
    }

    /// Starts a collective of descriptor `desc`: takes the team and records the call (see
    /// `calls.rs`), or says why it cannot run one.
    pub(crate) fn begin(&self, desc: u64) -> Result<Op<'_>> {
        self.begin_recorded(desc, false)
    }

    /// [`Team::begin`], recording the call as refused when `refused`.
    pub(crate) fn begin_recorded(&self, desc: u64, refused: bool) -> Result<Op<'_>> {
        match self
            .inner
            .status
            .compare_exchange(IDLE, BUSY, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => Ok(Op {
                call: self.record_call(desc, refused),
                team: self,
                verdict: None,
                finished: false,
            }),
            Err(BUSY) => Err(Error::TeamBusy),
            Err(DESTROYED) => Err(Error::TeamDestroyed),
            Err(_) => Err(Error::Desynchronized { what: "this team" }),
        }
    }

    /// This PE's number in the team (`shmem_team_my_pe`).
    pub fn my_pe(&self) -> usize {
        self.inner.me
    }

    /// The number of PEs in the team (`shmem_team_n_pes`).
    pub fn n_pes(&self) -> usize {
        self.inner.members.len()
    }

    /// The world PE number of team member `pe`, if there is one.
    pub fn world_pe(&self, pe: usize) -> Option<usize> {
        self.inner.members.get(pe).copied()
    }

    /// The team member that world PE `world_pe` is, if it belongs to the team.
    pub fn team_pe(&self, world_pe: usize) -> Option<usize> {
        // Members run upwards, or downwards in a team split with a negative stride.
        let members = &self.inner.members;
        match members.first() > members.last() {
            true => members.binary_search_by(|probe| world_pe.cmp(probe)).ok(),
            false => members.binary_search(&world_pe).ok(),
        }
    }

    /// The configuration the team's collectives use.
    pub fn config(&self) -> TeamConfig {
        self.inner.config
    }

    /// The detail of this team's `fcollect` and `alltoall` descriptors: 1 where its callers
    /// make every `dest` ready ([`TeamConfig::dest_ready`]), so that members that disagree
    /// on the contract (their predefined teams made with other [`TeamConfig`]s) fail with
    /// [`Error::CollectiveMismatch`] instead of running algorithms that never meet.
    pub(crate) fn contract_detail(&self) -> u64 {
        u64::from(self.inner.config.dest_ready)
    }

    /// Whether the team has been destroyed on this PE.
    pub fn is_destroyed(&self) -> bool {
        self.inner.status.load(Ordering::Acquire) == DESTROYED
    }

    /// Translates member `pe` of this team into its number in `dest` (`shmem_team_translate_pe`):
    /// `None` when that PE is not a member of `dest`.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] when `pe` is not a member of this team; [`Error::TeamDestroyed`]
    /// when either team has been destroyed.
    pub fn translate_pe(&self, pe: usize, dest: &Team) -> Result<Option<usize>> {
        if self.is_destroyed() || dest.is_destroyed() {
            return Err(Error::TeamDestroyed);
        }
        let world = self.world_pe(pe).ok_or(Error::PeOutOfRange {
            pe,
            n_pes: self.n_pes(),
        })?;
        Ok(dest.team_pe(world))
    }

    /// The world PE of member `pe` (which the caller has checked).
    #[inline]
    pub(crate) fn pe(&self, member: usize) -> usize {
        self.inner.members[member]
    }

    /// Ends collective `op` by destroying the team on this PE.
    pub(crate) fn mark_destroyed(&self, mut op: Op<'_>) {
        op.finished = true;
        self.inner.status.store(DESTROYED, Ordering::Release);
    }
}

/// One PE's predefined teams and what its other teams are made from.
#[derive(Debug)]
pub struct Teams {
    world: Team,
    node: Team,
}

/// Team ids of the predefined teams.
const WORLD_ID: u64 = 1;
const NODE_ID: u64 = 2;

impl Teams {
    /// Where the team pool of a job of `n_pes` PEs with `heap_size`-byte heaps lies; the
    /// world allocator must keep below [`PoolLayout::offset`].
    pub fn pool_layout(heap_size: usize, n_pes: usize) -> Result<PoolLayout> {
        let region = Layout::new(n_pes, &TeamConfig::sized_for(n_pes, heap_size)).bytes;
        PoolLayout::new(heap_size, 2 * region)
    }

    /// The predefined teams of the PE of `dp`: the world, and the node (the PEs whose memory
    /// this PE reaches by loads and stores: NVSHMEM's `TEAM_SHARED`). `control` carries the
    /// exchanges of later team creations.
    pub fn new(dp: Arc<DataPlane>, control: Arc<dyn Exchange>) -> Result<Teams> {
        let config = TeamConfig::for_job(dp.nodes(), dp.heap_size());
        Teams::with_config(dp, control, config)
    }

    /// [`Teams::new`] with `config` for both teams, which every PE of the job passes alike
    /// (as [`TeamConfig::for_job`] computes it, with [`TeamConfig::dest_ready`] where the
    /// program's callers keep OpenSHMEM's contract).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a `config` whose regions cannot be laid out;
    /// [`Error::Config`] when the team pool cannot hold the teams of `config`.
    pub fn with_config(
        dp: Arc<DataPlane>,
        control: Arc<dyn Exchange>,
        config: TeamConfig,
    ) -> Result<Teams> {
        config.check()?;
        let n = dp.n_pes();
        let me = dp.my_pe();
        let layout = Self::pool_layout(dp.heap_size(), n)?;
        let world_bytes = Layout::new(n, &config).bytes;
        let node_members: Box<[usize]> = (0..n).filter(|&p| dp.is_mapped(p)).collect();
        let node_bytes = Layout::new(node_members.len(), &config).bytes;
        let mut pool = TeamPool::new(layout);
        let world_at = layout.offset;
        let node_at = (world_at + world_bytes).next_multiple_of(region::LINE);
        if !pool.reserve(world_at, world_bytes) || !pool.reserve(node_at, node_bytes) {
            return Err(Error::Config(
                "the team pool cannot hold the predefined teams".into(),
            ));
        }
        let home = Arc::new(TeamHome {
            dp,
            control,
            pool: Mutex::new(pool),
        });
        let node_me = node_members
            .binary_search(&me)
            .map_err(|_| Error::Config("this PE cannot reach its own memory".into()))?;
        Ok(Teams {
            world: Team::new(
                home.clone(),
                WORLD_ID,
                (0..n).collect(),
                me,
                config,
                world_at,
                Some("world"),
            )?,
            node: Team::new(
                home,
                NODE_ID,
                node_members,
                node_me,
                config,
                node_at,
                Some("node"),
            )?,
        })
    }

    /// The world team (`SHMEM_TEAM_WORLD`): every PE of the job, numbered as in the job.
    pub fn world(&self) -> &Team {
        &self.world
    }

    /// The node team (`SHMEM_TEAM_SHARED`, `NVSHMEMX_TEAM_NODE`): the PEs that share memory
    /// with this one, those of its node (every PE of a job that runs on one node).
    pub fn node(&self) -> &Team {
        &self.node
    }
}

#[cfg(test)]
mod tests {
    use super::TeamConfig;

    #[test]
    fn only_a_crowded_job_of_one_node_raises_its_copy_sizes() {
        let (cpus, heap) = (crate::cpus::machine_cpus(), 1 << 30);
        let default = TeamConfig::default();
        let crowded = TeamConfig::for_job(&vec![0; cpus + 1], heap);
        assert_eq!(
            (crowded.eager_copy_bytes, crowded.eager_broadcast_bytes),
            (default.eager_bytes, default.eager_bytes)
        );
        assert_eq!(TeamConfig::for_job(&vec![0; cpus], heap), default);
        // Two nodes, whose machines may have other numbers of CPUs than this one.
        let two_nodes: Vec<usize> = (0..cpus + 1).map(|pe| pe % 2).collect();
        assert_eq!(TeamConfig::for_job(&two_nodes, heap), default);
        assert_eq!(TeamConfig::for_job(&[0, 0], 1 << 12).eager_bytes, 0);
    }
}
