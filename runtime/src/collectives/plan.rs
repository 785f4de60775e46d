//! Which algorithm each collective runs on a team: picked in one place, from the team's
//! shape (its members grouped by node, `team/shape.rs`), the message size and the team's
//! [`TeamConfig`], as data that the collectives match on.
//!
//! # One node, or one member per node
//! Today's algorithms: eager messages for small sizes, flat (every member reads every other
//! in place) in small teams, trees and rings in large ones, reduce-scatter then allgather for
//! large reductions; on one node, `alltoall` blocks between the eager and the flat sizes
//! move pairwise (`pairwise.rs`).
//!
//! # Teams that span nodes with several members on a node
//! - `sync`/`barrier` (and the syncs inside the flat algorithms): each node's members report
//!   to their leader over mapped memory, the leaders exchange over the fabric (flat, or by
//!   dissemination among many nodes), and each leader releases its node.
//! - `broadcast` above the eager sizes runs down a two-level tree: the root has its own
//!   node's members and the other nodes' leaders as children, each leader its node's
//!   members. One transfer crosses the fabric per node, not one per member. From
//!   `large_bytes` up on three nodes or more, the root instead pushes one part to each
//!   other node's leader, which pushes it on to the other leaders (`broadcast_scatter.rs`):
//!   the root's link carries the message once, not once per other node. So do teams of one
//!   member per node.
//! - Reductions above the eager sizes go through the leaders: each node's contributions are
//!   combined into its leader's `dest` (by its members, each a part of the elements, where
//!   the leader alone would read more than `large_bytes` of theirs), the leaders
//!   split the elements among themselves (each combines its part from every leader's
//!   partial and puts the result into the others'), and each leader hands the result to its
//!   members (`reduce_nodes.rs`). Every leader's link carries 2(L − 1)/L of the elements
//!   each way, all leaders at once, where a tree carried all of them through member 0's, up
//!   then down. A team with more nodes than its flat limit keeps the tree, rooted at
//!   member 0, for reductions below `large_bytes` only: the tree by node is a star of the
//!   nodes' heads under member 0, whose link then carries (L − 1) times the elements each
//!   way, and which sends and receives as many messages as each leader does when they
//!   split the elements (L − 1 partials in, L − 1 results out), so splitting costs the
//!   leaders no more messages each, only a connection to every other leader. On 3
//!   namespace hosts (2 + 1 + 1 PEs, `host_collectives --flat-max-pes 2`) whose links were
//!   each held to 1 Gbit/s, split: 1.06, 1.80 and 1.63 times the tree's bandwidth at 64 KiB,
//!   1 MiB and 8 MiB; unshaped, where every link is the same two CPUs copying the same bytes
//!   in all: 0.60, 0.94 and 0.82.
//! - Eager sizes go through the eager slots by node: a broadcast's root writes to its own
//!   node's members and the other nodes' leaders, who pass the message on to their members;
//!   reductions, and `fcollect` and `alltoall` whose messages fit a slot, go from the
//!   members to their leader, among the leaders, and back. At most one message per pair of
//!   nodes crosses the fabric (a broadcast: one to each node other than the root's), and
//!   nobody waits for a receiver to arrive. Collectives that only move data are eager up
//!   to the slots' size (`TeamConfig::eager_bytes`) on any team that spans nodes, past
//!   `eager_copy_bytes`; `collect`, `alltoalls`, `reducescatter`, and `fcollect` and
//!   `alltoall` blocks too big for the form by node, stay flat eager.
//!
//! # Teams that span nodes
//! - `fcollect` and `alltoall` above the eager sizes push each block for another node into
//!   its receiver with its signal posted behind it, after a sync, rather than reading it
//!   with a fabric get (`push.rs`); blocks of the same node are read in place, and a sync of
//!   each node ends the call. Where some node holds several members and every node's
//!   members are consecutive (and the callers do not keep `dest_ready`), `fcollect` goes by
//!   node instead: each leader gathers its node's blocks and puts them whole into the other
//!   leaders' `dest`, one message per pair of leaders (`gather_push.rs`).
//! - `collect`, `alltoalls` and `reducescatter` keep their flat forms above the eager sizes.

use crate::team::region::FLAT_SYNC_MAX;
use crate::team::shape::NodeShape;
use crate::team::TeamConfig;

use super::shapes::Shape;

/// `alltoall` blocks of up to this many bytes stay eager where the team has eager slots and
/// `eager_copy_bytes` allows them, ahead of the pairwise algorithm: at 2 PEs a pairwise call
/// of 4 bytes took twice the time of an eager one (a claim and a mark after the entry,
/// against one one-way message).
const EAGER_BEFORE_PAIRWISE: usize = 1024;

/// Broadcasts of `large_bytes` and more are scattered among the node heads from this many
/// nodes: at 2, the root's link carries the message once either way, and the tree by node
/// moves it in one hop where scattering takes two.
const SCATTERED_BROADCAST_MIN_NODES: usize = 3;

/// How a team syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncAlgorithm {
    /// Every member tells every other; one wait.
    Flat,
    /// ⌈log₂ n⌉ rounds.
    Dissemination,
    /// Gather at each node's leader, leaders among themselves, release each node.
    Nodes,
}

/// How a broadcast runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BroadcastAlgorithm {
    /// The root writes into every member's eager slot.
    Eager,
    /// Through the eager slots by node: the root writes into its own node's members' slots
    /// and the other nodes' leaders', and each of those leaders into its node's members'.
    EagerByNode,
    /// Down a tree: members on their parent's node read its buffer, members on another
    /// node have the data pushed into theirs (`broadcast_tree.rs`).
    Tree(Shape),
    /// A part pushed to each other node's head, which pushes it on to the other heads;
    /// each node's members read the whole from their head (`broadcast_scatter.rs`).
    ScatteredByNode,
}

/// How a reduction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduceAlgorithm {
    /// Every member sends its contribution to every other.
    Eager,
    /// Through the eager slots by node: members to their leader, leaders among themselves,
    /// leaders back to their members.
    EagerByNode,
    /// Up a tree into member 0, then down.
    Tree(Shape),
    /// Reduce-scatter, then allgather.
    ScatterGather,
    /// Members to their node's leader; the leaders reduce-scatter and allgather among
    /// themselves over the fabric; leaders back to their members (`reduce_nodes.rs`).
    ScatteredByNode,
}

/// How a collective that moves blocks (fcollect, alltoall, reducescatter) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MoveAlgorithm {
    /// Through the receivers' eager slots.
    Eager,
    /// Through the eager slots by node (`fcollect` and contiguous `alltoall` blocks whose
    /// messages fit a slot): members to their leader, leaders among themselves, leaders
    /// back to their members.
    EagerByNode,
    /// Sync, read every other member's block in place, sync.
    Flat,
    /// Along a ring (fcollect of large blocks in large teams).
    Ring,
    /// Sync, put each block for another node into its receiver with a signal, read this
    /// node's blocks in place, sync (`push.rs`).
    Push,
    /// Sync; each node's blocks gathered at its leader, put whole into the other leaders'
    /// `dest`, and read there by the members; sync of each node (`gather_push.rs`;
    /// `fcollect` on a layered team whose nodes' members are consecutive).
    PushByNode,
    /// Each pair of members moves both its blocks by the one that claims the pair second
    /// (`pairwise.rs`; `alltoall` on one node).
    Pairwise,
    /// Put each block into its receiver's `dest`, then sync: no entry sync, the callers
    /// having made every `dest` ready (`TeamConfig::dest_ready`, `push.rs`).
    IntoReady,
}

/// A team's choices, fixed at its creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    n: usize,
    config: TeamConfig,
    /// Whether the team has eager slots.
    slots: bool,
    /// The members grouped by node.
    pub nodes: NodeShape,
}

impl Plan {
    /// The plan of a team of `nodes.len()` members, member `m` on node `nodes[m]`, with
    /// `config`; `slots` says whether its region has eager slots.
    pub fn new(nodes: &[usize], config: TeamConfig, slots: bool) -> Plan {
        Plan {
            n: nodes.len(),
            config,
            slots,
            nodes: NodeShape::new(nodes),
        }
    }

    /// Whether reductions of `bytes` bytes go through the eager slots.
    pub fn eager(&self, bytes: usize) -> bool {
        self.slots && bytes <= self.config.eager_bytes
    }

    /// Whether collectives that only move data go through the eager slots for `bytes`: up
    /// to `eager_copy_bytes` on one node, where reading a block in place costs one copy
    /// where eager messages take two; up to the slots' size across nodes, where reading in
    /// place is a fabric round trip and moving a block otherwise takes syncs around it (a
    /// 4-PE `alltoall` of 4 KiB on 2 namespace hosts: 190–220 µs pushed between two syncs,
    /// 4 B eager 30 µs).
    pub fn eager_copy(&self, bytes: usize) -> bool {
        self.eager(bytes) && (self.nodes.nodes() > 1 || bytes <= self.config.eager_copy_bytes)
    }

    /// Whether a broadcast of `bytes` goes through the eager slots: up to
    /// `eager_broadcast_bytes` on one node, where members read the root's buffer in place
    /// cheaply, as the other data moves across nodes ([`Plan::eager_copy`]).
    fn eager_broadcast(&self, bytes: usize) -> bool {
        let on_one_node = self.nodes.nodes() == 1;
        self.eager_copy(bytes) && (!on_one_node || bytes <= self.config.eager_broadcast_bytes)
    }

    /// Whether the team is small enough for flat algorithms.
    pub fn flat(&self) -> bool {
        self.n <= self.config.flat_max_pes
    }

    /// Whether `bytes` is a large message.
    pub fn large(&self, bytes: usize) -> bool {
        bytes >= self.config.large_bytes
    }

    /// Whether the `members` of a node share the combining of its partial in a reduction of
    /// `bytes` scattered by node, each a part of the elements: where its leader alone would
    /// read more than `large_bytes` of its node-mates' contributions. Below that, the
    /// members' wake-ups to combine would cost about what they save: with the combining
    /// always shared, at 2 + 1 PEs on two UTS hosts of 2 CPUs, a 64 KiB sum had 0.95 of the
    /// leader-alone bandwidth, 1 MiB 1.09 and 8 MiB 1.06 (paired, six rounds). The limit's
    /// growth with the members (m − 1 contributions read) is reasoned, not measured: no
    /// machine here had the cores for nodes of three PEs or more.
    pub fn node_combine_shared(&self, bytes: usize, members: usize) -> bool {
        bytes.saturating_mul(members.saturating_sub(1)) > self.config.large_bytes
    }

    /// The team's sync.
    pub fn sync(&self) -> SyncAlgorithm {
        if self.nodes.layered() {
            SyncAlgorithm::Nodes
        } else if self.n <= FLAT_SYNC_MAX {
            SyncAlgorithm::Flat
        } else {
            SyncAlgorithm::Dissemination
        }
    }

    /// A broadcast of `bytes` bytes.
    pub fn broadcast(&self, bytes: usize) -> BroadcastAlgorithm {
        if self.eager_broadcast(bytes) && self.nodes.layered() {
            BroadcastAlgorithm::EagerByNode
        } else if self.eager_broadcast(bytes) {
            BroadcastAlgorithm::Eager
        } else if self.nodes.nodes() >= SCATTERED_BROADCAST_MIN_NODES && self.large(bytes) {
            BroadcastAlgorithm::ScatteredByNode
        } else if self.nodes.layered() {
            BroadcastAlgorithm::Tree(Shape::Nodes)
        } else if self.flat() || self.large(bytes) {
            BroadcastAlgorithm::Tree(Shape::Star)
        } else {
            BroadcastAlgorithm::Tree(Shape::Binomial)
        }
    }

    /// A reduction of `bytes` bytes.
    pub fn reduce(&self, bytes: usize) -> ReduceAlgorithm {
        if self.eager(bytes) && self.nodes.layered() {
            ReduceAlgorithm::EagerByNode
        } else if self.eager(bytes) {
            ReduceAlgorithm::Eager
        } else if self.nodes.layered()
            && (self.nodes.nodes() <= self.config.flat_max_pes || self.large(bytes))
        {
            ReduceAlgorithm::ScatteredByNode
        } else if self.nodes.layered() {
            ReduceAlgorithm::Tree(Shape::Nodes)
        } else if self.large(bytes) {
            ReduceAlgorithm::ScatterGather
        } else if self.flat() {
            ReduceAlgorithm::Tree(Shape::Star)
        } else {
            ReduceAlgorithm::Tree(Shape::Binomial)
        }
    }

    /// An fcollect of `bytes` bytes per member.
    pub fn fcollect(&self, bytes: usize) -> MoveAlgorithm {
        if self.eager_copy(bytes) && self.nodes.layered() && self.eager(bytes * self.n) {
            MoveAlgorithm::EagerByNode
        } else if self.eager_copy(bytes) {
            MoveAlgorithm::Eager
        } else if self.config.dest_ready {
            MoveAlgorithm::IntoReady
        } else if self.nodes.layered() && self.nodes.consecutive() {
            MoveAlgorithm::PushByNode
        } else if self.nodes.nodes() > 1 {
            MoveAlgorithm::Push
        } else if !self.flat() && self.large(bytes) {
            MoveAlgorithm::Ring
        } else {
            MoveAlgorithm::Flat
        }
    }

    /// An alltoall of `bytes` bytes per block (contiguous: `alltoalls` never pushes, its
    /// strided blocks would cross the fabric element by element, and keeps the flat form on
    /// one node). Where the callers make every `dest` ready, blocks that the eager form
    /// does not take go straight into their receivers' `dest`.
    pub fn alltoall(&self, bytes: usize, strided: bool) -> MoveAlgorithm {
        let pairwise = self.nodes.nodes() == 1
            && self.sync() == SyncAlgorithm::Flat
            && !strided
            && bytes <= self.config.pairwise_bytes;
        let eager = self.eager_copy(bytes) && !(pairwise && bytes > EAGER_BEFORE_PAIRWISE);
        let widest = self.nodes.widest();
        let packs_fit = || self.eager(bytes * self.n) && self.eager(bytes * widest * widest);
        if eager && !strided && self.nodes.layered() && packs_fit() {
            MoveAlgorithm::EagerByNode
        } else if eager {
            MoveAlgorithm::Eager
        } else if self.config.dest_ready && !strided {
            MoveAlgorithm::IntoReady
        } else if pairwise {
            MoveAlgorithm::Pairwise
        } else if self.nodes.nodes() > 1 && !strided {
            MoveAlgorithm::Push
        } else {
            MoveAlgorithm::Flat
        }
    }

    /// A reducescatter of `bytes` bytes per block.
    pub fn reducescatter(&self, bytes: usize) -> MoveAlgorithm {
        if self.eager(bytes) {
            MoveAlgorithm::Eager
        } else {
            MoveAlgorithm::Flat
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(nodes: &[usize]) -> Plan {
        let config = TeamConfig::default();
        Plan::new(nodes, config, nodes.len() <= config.flat_max_pes)
    }

    #[test]
    fn one_node_keeps_todays_algorithms() {
        let four = plan(&[0; 4]);
        assert_eq!(four.sync(), SyncAlgorithm::Flat);
        assert_eq!(four.broadcast(8), BroadcastAlgorithm::Eager);
        assert_eq!(four.broadcast(256), BroadcastAlgorithm::Eager);
        assert_eq!(
            four.broadcast(512),
            BroadcastAlgorithm::Tree(Shape::Star),
            "read in place past eager_broadcast_bytes"
        );
        assert_eq!(four.broadcast(4096), BroadcastAlgorithm::Tree(Shape::Star));
        assert_eq!(four.reduce(8), ReduceAlgorithm::Eager);
        assert_eq!(four.reduce(16 << 10), ReduceAlgorithm::Tree(Shape::Star));
        assert_eq!(four.reduce(1 << 20), ReduceAlgorithm::ScatterGather);
        assert_eq!(four.fcollect(1 << 20), MoveAlgorithm::Flat);
        assert_eq!(four.alltoall(8, false), MoveAlgorithm::Eager);
        assert_eq!(four.alltoall(4096, false), MoveAlgorithm::Pairwise);
        assert_eq!(four.alltoall(8192, false), MoveAlgorithm::Flat);
        let big = plan(&[0; 16]);
        assert_eq!(big.sync(), SyncAlgorithm::Dissemination);
        assert_eq!(big.broadcast(8), BroadcastAlgorithm::Tree(Shape::Binomial));
        assert_eq!(big.reduce(8), ReduceAlgorithm::Tree(Shape::Binomial));
        assert_eq!(big.fcollect(1 << 20), MoveAlgorithm::Ring);
    }

    #[test]
    fn blocks_go_into_ready_buffers_where_callers_make_them_ready() {
        let ready = TeamConfig {
            dest_ready: true,
            ..TeamConfig::default()
        };
        for nodes in [&[0, 0, 0, 0][..], &[0, 0, 1, 1], &[0; 16]] {
            let p = Plan::new(nodes, ready, nodes.len() <= ready.flat_max_pes);
            let eager = match nodes.len() <= ready.flat_max_pes {
                true => MoveAlgorithm::Eager,
                false => MoveAlgorithm::IntoReady,
            };
            let by_node = match nodes[3] != 0 {
                true => MoveAlgorithm::EagerByNode,
                false => eager,
            };
            assert_eq!(p.alltoall(8, false), by_node, "{nodes:?}");
            assert_eq!(p.fcollect(8), by_node, "{nodes:?}");
            for bytes in [8192, 1 << 20] {
                assert_eq!(p.alltoall(bytes, false), MoveAlgorithm::IntoReady);
                assert_eq!(p.fcollect(bytes), MoveAlgorithm::IntoReady);
            }
            // A slot-sized block stays eager across nodes only.
            let slot_sized = match nodes.len() <= ready.flat_max_pes && nodes[3] != 0 {
                true => MoveAlgorithm::Eager,
                false => MoveAlgorithm::IntoReady,
            };
            assert_eq!(p.alltoall(4096, false), slot_sized, "{nodes:?}");
            assert_eq!(p.fcollect(4096), slot_sized, "{nodes:?}");
            assert_ne!(p.alltoall(8192, true), MoveAlgorithm::IntoReady, "strided");
        }
    }

    #[test]
    fn alltoall_goes_pairwise_between_the_eager_and_the_flat_sizes_on_one_node() {
        let crowded = TeamConfig {
            eager_copy_bytes: 4096,
            ..TeamConfig::default()
        };
        for config in [TeamConfig::default(), crowded] {
            let two = Plan::new(&[0; 2], config, true);
            assert_eq!(two.alltoall(1024, false), MoveAlgorithm::Eager);
            assert_eq!(two.alltoall(1025, false), MoveAlgorithm::Pairwise);
            assert_eq!(two.alltoall(4096, false), MoveAlgorithm::Pairwise);
            assert_eq!(two.alltoall(4097, false), MoveAlgorithm::Flat);
            let strided = if config.eager_copy_bytes >= 2048 {
                MoveAlgorithm::Eager
            } else {
                MoveAlgorithm::Flat
            };
            assert_eq!(
                two.alltoall(2048, true),
                strided,
                "strided blocks never pairwise"
            );
        }
        let no_slots = Plan::new(&[0; 4], TeamConfig::default(), false);
        assert_eq!(no_slots.alltoall(8, false), MoveAlgorithm::Pairwise);
        let off = TeamConfig {
            pairwise_bytes: 0,
            ..TeamConfig::default()
        };
        assert_eq!(
            Plan::new(&[0; 2], off, true).alltoall(4096, false),
            MoveAlgorithm::Flat
        );
        let five = Plan::new(&[0; 5], TeamConfig::default(), true);
        assert_eq!(
            five.alltoall(4096, false),
            MoveAlgorithm::Flat,
            "dissemination sync"
        );
        let nodes = Plan::new(&[0, 1], TeamConfig::default(), true);
        assert_eq!(
            nodes.alltoall(4096, false),
            MoveAlgorithm::Eager,
            "slot-sized"
        );
        assert_eq!(nodes.alltoall(4097, false), MoveAlgorithm::Push);
    }

    #[test]
    fn one_member_per_node_keeps_the_flat_forms() {
        let three = plan(&[0, 1, 2]);
        assert!(!three.nodes.layered());
        assert_eq!(three.sync(), SyncAlgorithm::Flat);
        assert_eq!(three.broadcast(4096), BroadcastAlgorithm::Eager);
        assert_eq!(three.broadcast(4097), BroadcastAlgorithm::Tree(Shape::Star));
        assert_eq!(three.reduce(16 << 10), ReduceAlgorithm::Tree(Shape::Star));
        assert_eq!(
            three.reduce(8),
            ReduceAlgorithm::Eager,
            "no leaders to go through"
        );
        assert_eq!(three.fcollect(8), MoveAlgorithm::Eager);
        assert_eq!(three.alltoall(8, false), MoveAlgorithm::Eager);
        assert_eq!(
            three.fcollect(1 << 20),
            MoveAlgorithm::Push,
            "no fabric reads"
        );
    }

    #[test]
    fn teams_across_crowded_nodes_go_through_their_leaders() {
        for nodes in [&[0, 0, 1, 1][..], &[0, 0, 0, 1], &[3, 1, 3, 1, 3]] {
            let p = plan(nodes);
            assert_eq!(p.sync(), SyncAlgorithm::Nodes, "{nodes:?}");
            assert_eq!(p.broadcast(4097), BroadcastAlgorithm::Tree(Shape::Nodes));
            assert_eq!(p.reduce(16 << 10), ReduceAlgorithm::ScatteredByNode);
            assert_eq!(p.reduce(1 << 20), ReduceAlgorithm::ScatteredByNode);
            // A node's members share its combining above 64 KiB read by the leader.
            assert!(!p.node_combine_shared(64 << 10, 2));
            assert!(p.node_combine_shared((64 << 10) + 1, 2));
            assert!(p.node_combine_shared(33 << 10, 3));
            assert!(!p.node_combine_shared(1 << 20, 1), "a leader alone");
            // Eager sizes go through the slots by node, up to the slots' size for data moves
            // (reading in place is a fabric round trip); larger blocks are pushed.
            assert_eq!(p.broadcast(8), BroadcastAlgorithm::EagerByNode);
            assert_eq!(
                p.broadcast(4096),
                BroadcastAlgorithm::EagerByNode,
                "no fabric reads"
            );
            assert_eq!(p.reduce(8), ReduceAlgorithm::EagerByNode);
            assert_eq!(p.reduce(4096), ReduceAlgorithm::EagerByNode);
            assert_eq!(p.reduce(4097), ReduceAlgorithm::ScatteredByNode);
            assert_eq!(p.fcollect(4096), MoveAlgorithm::Eager);
            let whole = 4096 / nodes.len();
            assert_eq!(p.fcollect(whole), MoveAlgorithm::EagerByNode);
            assert_eq!(p.fcollect(whole + 1), MoveAlgorithm::Eager);
            // alltoall: a member's blocks and a pair of nodes' blocks fit a slot.
            let widest = p.nodes.widest();
            let fits = 4096 / nodes.len().max(widest * widest);
            assert_eq!(p.alltoall(fits, false), MoveAlgorithm::EagerByNode);
            assert_eq!(p.alltoall(fits + 1, false), MoveAlgorithm::Eager);
            assert_eq!(p.alltoall(8, true), MoveAlgorithm::Eager, "strided");
            assert_eq!(p.alltoall(4096, false), MoveAlgorithm::Eager);
            // fcollect by node where each node's blocks are contiguous.
            let by_node = match nodes {
                [3, 1, 3, 1, 3] => MoveAlgorithm::Push,
                _ => MoveAlgorithm::PushByNode,
            };
            assert_eq!(p.fcollect(4097), by_node, "{nodes:?}");
            assert_eq!(p.alltoall(4097, false), MoveAlgorithm::Push);
            assert_eq!(p.alltoall(4097, true), MoveAlgorithm::Flat);
            assert_eq!(p.fcollect(8), MoveAlgorithm::EagerByNode);
        }
        let no_slots = Plan::new(&[0, 0, 1, 1], TeamConfig::default(), false);
        assert_eq!(no_slots.reduce(8), ReduceAlgorithm::ScatteredByNode);
        // More nodes than the flat limit: the leaders no longer each talk to every other,
        // but for large reductions, which the tree would funnel through member 0.
        let narrow = TeamConfig {
            flat_max_pes: 2,
            ..TeamConfig::default()
        };
        let many_nodes = Plan::new(&[0, 0, 1, 2], narrow, false);
        assert_eq!(
            many_nodes.reduce((64 << 10) - 1),
            ReduceAlgorithm::Tree(Shape::Nodes)
        );
        assert_eq!(
            many_nodes.reduce(64 << 10),
            ReduceAlgorithm::ScatteredByNode
        );
        // Large broadcasts on three nodes or more: scattered among the heads.
        let three = Plan::new(&[0, 0, 1, 1, 2, 2], TeamConfig::default(), true);
        assert_eq!(
            three.broadcast(64 << 10),
            BroadcastAlgorithm::ScatteredByNode
        );
        assert_eq!(
            three.broadcast((64 << 10) - 1),
            BroadcastAlgorithm::Tree(Shape::Nodes)
        );
        let one_each = Plan::new(&[0, 1, 2], TeamConfig::default(), true);
        assert_eq!(
            one_each.broadcast(1 << 20),
            BroadcastAlgorithm::ScatteredByNode
        );
        let two = Plan::new(&[0, 0, 1, 1], TeamConfig::default(), true);
        assert_eq!(
            two.broadcast(1 << 20),
            BroadcastAlgorithm::Tree(Shape::Nodes)
        );
        assert_eq!(
            plan(&[0; 4]).broadcast(1 << 20),
            BroadcastAlgorithm::Tree(Shape::Star)
        );
        let at_the_limit = Plan::new(&[0, 0, 1], narrow, false);
        assert_eq!(
            at_the_limit.reduce(1 << 20),
            ReduceAlgorithm::ScatteredByNode
        );
        assert_eq!(
            no_slots.broadcast(8),
            BroadcastAlgorithm::Tree(Shape::Nodes)
        );
    }
}
