//! Collectives on teams (OpenSHMEM 1.5 §9.9): `sync`, `barrier`, `broadcast`, `fcollect`,
//! `collect`, `alltoall`, `alltoalls`, reductions, `reducescatter` and 1.6's sum scans, each
//! an awaited future on a [`Team`].
//!
//! They are built from the data plane's own operations on symmetric memory (puts, gets,
//! signals, waits), never from a second transport, so the same algorithms serve any PE the
//! data plane reaches. Each picks its algorithm from the message size, the team's shape
//! (its size, and how its members are spread over nodes) and [`TeamConfig`](crate::TeamConfig),
//! in one place (`plan.rs`). On one node, or with one member per node:
//!
//! | collective | small messages | medium | large (≥ `large_bytes`) |
//! |---|---|---|---|
//! | `broadcast` | eager: the root writes into every member's slot and returns (on a team that spans nodes with several members on some node, by node: into its own node's members' slots and the other nodes' leaders', who pass it on to their members) | flat: members read the root's source; in teams above `flat_max_pes`, a binomial tree, each member reading from its parent (from another node, the parent pushes the data into it once it has entered) | flat |
//! | `fcollect`, `collect` | eager: each member writes its block into every other's slot (an `fcollect` whose whole result fits a slot, on a team that spans nodes with several members on some node: by node, through the leaders) | flat: enter, read every other block, sync | flat; a ring in teams above `flat_max_pes` |
//! | `alltoall` | eager (on a team of one node that syncs flat, only up to 1 KiB; on a team that spans nodes with several members on some node, where a member's blocks and a pair of nodes' blocks fit a slot, by node, through the leaders) | on such a team, pairwise up to [`TeamConfig::pairwise_bytes`](crate::TeamConfig::pairwise_bytes) (of each pair of members, the one that claims the pair second moves both blocks, and the first waits for it), then flat (on teams that span nodes, push) | flat, or push across nodes (pairwise where `pairwise_bytes` reaches it) |
//! | `alltoalls` | eager | flat | flat |
//! | reductions | eager: each member receives every contribution and combines them in member order (on a team that spans nodes with several members on some node, by node: members to their leader, leaders among themselves, back to the members) | a tree up into member 0's `dest`, then down: a star, or binomial in teams above `flat_max_pes` (on a team that spans up to `flat_max_pes` nodes with several members on some node, at every size above the eager one: through the leaders, which split the combining among themselves, `reduce_nodes.rs`) | reduce-scatter, then allgather (each part read once its member has entered the sync after its combine) |
//! | `reducescatter` | eager | flat: sync, combine this member's block from every source, sync | flat |
//! | `sum_inscan`, `sum_exscan` | flat: sync, sum the sources of the members before (and of this one) into private memory, sync, write | flat | flat |
//!
//! Where the callers make every `dest` ready before a call ([`TeamConfig::dest_ready`](crate::TeamConfig::dest_ready),
//! OpenSHMEM's contract), `fcollect` and contiguous `alltoall` blocks that the eager form
//! does not take go straight into their receivers' `dest`, followed by one sync
//! (`push.rs`), on any team.
//!
//! "Small" is up to [`TeamConfig::eager_copy_bytes`](crate::TeamConfig::eager_copy_bytes)
//! for the collectives that move data (for a broadcast within one node, up to
//! [`TeamConfig::eager_broadcast_bytes`](crate::TeamConfig::eager_broadcast_bytes)), up to
//! [`TeamConfig::eager_bytes`](crate::TeamConfig::eager_bytes) for reductions, and only in
//! teams of at most `flat_max_pes` members (the others have no eager slots). Eager messages
//! go through the receivers' scratch slots (two per sender, with credits so that a sender
//! never overwrites an unread message), so no member waits for another to arrive before it
//! can send: one one-way latency per collective. The other algorithms read peers' buffers in
//! place (on one node; across nodes, see below) and synchronize before and after, but for the pairwise `alltoall`, which enters,
//! then moves each pair's blocks by the member that claims the pair second and marks it
//! done for the other (see `pairwise.rs`). "Enter" is the sync before, taken member by
//! member: in a team that syncs flat (up to four members, one node or one member per
//! node), a member reads another's buffers as soon as that one has entered the call, not
//! once the last has, so members that are running work on while one that is not (PEs
//! outnumbering CPUs) has yet to arrive; a member never touches another's buffers before
//! that one has entered the call with the same descriptor.
//!
//! Every algorithm ends only when no other member will touch this PE's buffers again for
//! this collective, so the same buffers may be used by the next collective at once. Syncs
//! also check that every member called the same collective with the same sizes and root:
//! when they did not, every member gets [`Error::CollectiveMismatch`]. (A flat call that
//! enters member by member may by then have moved blocks between members whose calls
//! matched, within the buffers those calls named; the `dest` of a failed call holds no
//! result.)
//!
//! Eager messages carry their call's descriptor and its number among the team's calls,
//! which every member counts alike. A member that receives a message of its own call with
//! another descriptor gets `CollectiveMismatch`, and the team stays usable. A member that
//! receives a message of another call (one that a mismatched call left unconsumed, which
//! would otherwise pass for the next call's) gets `CollectiveMismatch`, and the team
//! becomes unusable on it, as after a cancelled call: the members' message counts no longer
//! agree, and no member can mend that alone. So a mismatch among eager calls is caught by
//! the members that receive a wrong message, in that call or in their next call that
//! receives from the member at fault, never passed off as data; a broadcast's root, which
//! receives nothing, catches only the messages that have already reached it (see
//! [`Team::broadcast`]).
//!
//! Teams that span nodes with several members on some node sync by node (each node's members
//! through their leader, the leaders among themselves), run broadcasts above the eager sizes
//! down a two-level tree whose only fabric edges join the root to the other nodes' leaders
//! (from `large_bytes` up on three nodes or more, scattered among the leaders instead:
//! `broadcast_scatter.rs`), and reductions above the eager sizes through the leaders, which scatter the combining among
//! themselves (`reduce_nodes.rs`). Across the fabric, data goes by pushes with a post behind
//! them (a read is a round trip): a tree's parent puts the data into a child on another node
//! once that child has entered the call, a node leader puts its combined part of a reduction
//! into the other leaders', `alltoall` puts each block for another node into its receiver, and
//! `fcollect` does too, or, where the nodes' members are consecutive, sends each node's blocks
//! whole from its leader to the other leaders, and a scattered broadcast's root puts a part
//! into each other node's leader, which puts it into the other leaders' (see `plan.rs`,
//! `posted.rs`, `broadcast_tree.rs`, `broadcast_scatter.rs`, `push.rs` and `gather_push.rs`). Some steps read across the fabric instead: the combining
//! steps of reductions read the parts they combine (a tree's parent its children's, a
//! reduce-scatter's member its part of every `source`, a node leader its part of every leader's
//! partial), the allgather that ends a reduce-scatter reads the others' parts, the sum scans
//! read the `source` of every member before them, `collect` reads each block (and each member's
//! count) it does not receive eagerly, and a strided `alltoalls` reads every block with strided
//! gets. Syncs and trees carry descriptors through the leaders, so mismatches are found as on
//! one node.
//!
//! Calls whose algorithms never meet (an eager reduction against a reduce-scatter, two roots
//! of a tree broadcast) and members waiting for one that gave the team up are caught by the
//! members' call records, which every sleeping wait checks: every member fails with
//! `CollectiveMismatch` instead of waiting forever (see `team/calls.rs`). So are eager calls
//! by node against flat eager ones on a team that spans nodes with several members on some
//! node (a `reduce` against a `reducescatter`, an `fcollect` against a `collect`, an
//! `alltoall` against an `alltoalls`, or sizes on either side of the limit of a form by
//! node), which meet only in part: the messages they leave unconsumed then make the team
//! unusable, as above.
//!
//! Eager collectives by node (small reductions, and `fcollect` and `alltoall` whose messages
//! fit the slots, on such teams) take three hops instead of one: members to their leader,
//! leaders among themselves, leaders back to their members; a small broadcast takes two on
//! the nodes other than the root's (the root to their leaders, the leaders to their
//! members). A leader waits for the messages it combines or passes on; no member waits for
//! another to arrive before it sends.

mod alltoall;
mod alltoall_nodes;
mod broadcast;
mod broadcast_nodes;
mod broadcast_scatter;
mod broadcast_tree;
mod eager;
mod gather;
mod gather_nodes;
mod gather_push;
mod long_double;
mod pairwise;
pub(crate) mod plan;
mod posted;
mod push;
mod reduce;
mod reduce_nodes;
mod reduce_ops;
mod scan;
mod scratch;
mod shapes;
mod sync;

use bytemuck::Pod;

use crate::cpus::LastLevelCache;
use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::shared_memory::{Caching, MIN_STREAMED_COPY};
use crate::team::Team;

pub use long_double::LongDouble;
pub use reduce_ops::{BitwiseReducible, Complex32, Complex64, ReduceOp, Reducible};

/// What a member called, packed in a word so that members can compare calls cheaply: the
/// collective (4 bits), a detail such as the root or the reduction (20 bits), and a size in
/// bytes (40 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Descriptor;

impl Descriptor {
    pub const SYNC: u64 = Self::of(Kind::Sync, 0, 0);
    pub const DESTROY: u64 = Self::of(Kind::Destroy, 0, 0);
    pub const SPLIT: u64 = Self::of(Kind::Split, 0, 0);
    /// The sync that ends a collective: it checks nothing more.
    pub const END: u64 = Self::of(Kind::End, 0, 0);

    /// The descriptor of `kind` with `detail` and `bytes`.
    pub const fn of(kind: Kind, detail: u64, bytes: u64) -> u64 {
        (kind as u64) << 60 | (detail & 0xf_ffff) << 40 | (bytes & 0xff_ffff_ffff)
    }

    /// Describes a descriptor for an error message.
    pub fn describe(d: u64) -> String {
        let kind = match d >> 60 {
            1 => "sync/barrier",
            2 => "destroy",
            3 => "the end of a collective",
            4 => "broadcast",
            5 => "fcollect",
            6 => "collect",
            7 => "alltoall",
            8 => "alltoalls",
            9 => "a reduction",
            10 => "reducescatter",
            11 => "a team split",
            12 => "a scan",
            _ => "an unknown collective",
        };
        format!(
            "{kind} (detail {}, {} bytes)",
            (d >> 40) & 0xf_ffff,
            d & 0xff_ffff_ffff
        )
    }
}

/// The collectives, as descriptors name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Sync = 1,
    Destroy = 2,
    End = 3,
    Broadcast = 4,
    Fcollect = 5,
    Collect = 6,
    Alltoall = 7,
    Alltoalls = 8,
    Reduce = 9,
    Reducescatter = 10,
    Split = 11,
    Scan = 12,
}

/// A team collective, as [`Team::refuse_unless_ok`](crate::Team::refuse_unless_ok) names the one its caller
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Collective {
    /// [`Team::broadcast`](crate::Team::broadcast) and its `broadcast_to_others` form.
    Broadcast,
    /// [`Team::fcollect`](crate::Team::fcollect).
    Fcollect,
    /// [`Team::collect`](crate::Team::collect).
    Collect,
    /// [`Team::alltoall`](crate::Team::alltoall).
    Alltoall,
    /// [`Team::alltoalls`](crate::Team::alltoalls).
    Alltoalls,
    /// [`Team::reduce`](crate::Team::reduce).
    Reduce,
    /// [`Team::reducescatter`](crate::Team::reducescatter).
    Reducescatter,
    /// [`Team::sum_inscan`](crate::Team::sum_inscan) and
    /// [`Team::sum_exscan`](crate::Team::sum_exscan).
    Scan,
}

impl Collective {
    /// The kind its descriptors name.
    pub(crate) fn kind(self) -> Kind {
        match self {
            Collective::Broadcast => Kind::Broadcast,
            Collective::Fcollect => Kind::Fcollect,
            Collective::Collect => Kind::Collect,
            Collective::Alltoall => Kind::Alltoall,
            Collective::Alltoalls => Kind::Alltoalls,
            Collective::Reduce => Kind::Reduce,
            Collective::Reducescatter => Kind::Reducescatter,
            Collective::Scan => Kind::Scan,
        }
    }
}

/// The heap byte range of a view, checked against this PE's heap.
pub(crate) fn byte_span<T: Pod>(dp: &DataPlane, view: SymSlice<'_, T>) -> Result<(usize, usize)> {
    let span = dp.span_of(view)?;
    Ok((
        span.offset,
        span.offset + span.len * std::mem::size_of::<T>(),
    ))
}

/// Checks that `view` holds at least `needed` elements.
pub(crate) fn holds<T: Pod>(
    dp: &DataPlane,
    view: SymSlice<'_, T>,
    needed: usize,
    what: &'static str,
) -> Result<()> {
    dp.span_of(view)?;
    if view.len() < needed {
        return Err(Error::OutOfBounds {
            what,
            needed,
            available: view.len(),
        });
    }
    Ok(())
}

/// Refuses a destination that overlaps a source (unless `same_ok` and they are the same
/// range): a collective would read what it had already overwritten.
pub(crate) fn disjoint<T: Pod>(
    dp: &DataPlane,
    dest: SymSlice<'_, T>,
    source: SymSlice<'_, T>,
    same_ok: bool,
) -> Result<()> {
    let (d0, d1) = byte_span(dp, dest)?;
    let (s0, s1) = byte_span(dp, source)?;
    let same = d0 == s0 && dest.len() == source.len();
    if d0 < s1 && s0 < d1 && !(same_ok && same) {
        return Err(Error::InvalidArgument(format!(
            "the destination (heap bytes {d0}..{d1}) overlaps the source ({s0}..{s1})"
        )));
    }
    Ok(())
}

/// Bytes of `n` elements of `T`.
pub(crate) fn bytes_of<T>(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<T>())
}

impl Team {
    /// Whether collectives that only move data take the eager path for `bytes` bytes per
    /// destination.
    pub(crate) fn eager_copy(&self, bytes: usize) -> bool {
        self.inner.plan.eager_copy(bytes)
    }

    /// Whether the team is small enough for flat algorithms.
    pub(crate) fn flat(&self) -> bool {
        self.inner.plan.flat()
    }

    /// Whether `bytes` is a large message for this team.
    pub(crate) fn large(&self, bytes: usize) -> bool {
        self.inner.plan.large(bytes)
    }

    /// How a call that moves blocks between members copies them on this node, given the
    /// `bytes` of its `source` and `dest` together on each member: with streaming stores
    /// where those of this node's members exceed what they can hold in the last-level caches
    /// (one cache each, as far as the machine has caches: their blocks could not stay there,
    /// and ordinary stores would first read every destination line from memory), else with
    /// ordinary ones. Only this member's copies follow it: members need not agree.
    pub(crate) fn block_caching(&self, bytes: usize) -> Caching {
        if bytes < MIN_STREAMED_COPY {
            // No block of the call is long enough to stream.
            return Caching::Keep;
        }
        let nodes = &self.inner.plan.nodes;
        let here = nodes.members(nodes.group_of(self.my_pe())).len();
        match here.saturating_mul(bytes) > LastLevelCache::of_this_machine().held_by(here) {
            true => Caching::Stream,
            false => Caching::Keep,
        }
    }
}
