//! A team's shape: its members grouped by node, computed once when the team is made, from
//! the node of every PE that the data plane knows. Every member computes the same shape (the
//! node numbers are alike on every PE), so every member picks the same algorithms from it
//! (`collectives/plan.rs`).
//!
//! Groups are numbered by their lowest member, and each group's lowest member is its
//! leader: the member that speaks for the group across nodes.

/// The members of a team grouped by node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeShape {
    /// The group of each member.
    group_of: Box<[usize]>,
    /// The members of each group, ascending; groups ordered by their lowest member.
    groups: Box<[Box<[usize]>]>,
    /// The leader of each group (its lowest member).
    leaders: Box<[usize]>,
}

impl NodeShape {
    /// The shape of a team whose member `m` lives on node `nodes[m]` (any numbering that
    /// gives the members of one node the same number).
    pub fn new(nodes: &[usize]) -> NodeShape {
        let mut keys: Vec<usize> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let group_of = nodes
            .iter()
            .enumerate()
            .map(|(member, node)| {
                let g = match keys.iter().position(|k| k == node) {
                    Some(g) => g,
                    None => {
                        keys.push(*node);
                        groups.push(Vec::new());
                        groups.len() - 1
                    }
                };
                groups[g].push(member);
                g
            })
            .collect();
        NodeShape {
            group_of,
            leaders: groups.iter().map(|g| g[0]).collect(),
            groups: groups.into_iter().map(Vec::into_boxed_slice).collect(),
        }
    }

    /// The number of nodes the team spans.
    pub fn nodes(&self) -> usize {
        self.groups.len()
    }

    /// The group of member `m`.
    pub fn group_of(&self, m: usize) -> usize {
        self.group_of[m]
    }

    /// The members of group `g`, ascending (its leader first).
    pub fn members(&self, g: usize) -> &[usize] {
        &self.groups[g]
    }

    /// The leader of every group, by group.
    pub fn leaders(&self) -> &[usize] {
        &self.leaders
    }

    /// The most members any node holds.
    pub fn widest(&self) -> usize {
        self.groups.iter().map(|g| g.len()).max().unwrap_or(0)
    }

    /// Whether every node's members are consecutive team members: each node's blocks of a
    /// collective laid out by member are then contiguous.
    pub fn consecutive(&self) -> bool {
        self.groups
            .iter()
            .all(|g| g.windows(2).all(|pair| pair[1] == pair[0] + 1))
    }

    /// Whether the team spans nodes and some node holds more than one of its members: the
    /// shapes where a node-aware algorithm can take work off the fabric.
    pub fn layered(&self) -> bool {
        self.nodes() > 1 && self.widest() > 1
    }

    /// In a broadcast by node from member `root`, the members the root sends to: the other
    /// nodes' leaders (whose messages cross the fabric, the slowest), then its own node's
    /// other members.
    pub fn broadcast_receivers(&self, root: usize) -> Vec<usize> {
        let group = self.group_of(root);
        let leaders = self.leaders.iter().filter(|&&l| self.group_of(l) != group);
        let mates = self.members(group).iter().filter(|&&m| m != root);
        leaders.chain(mates).copied().collect()
    }

    /// In a broadcast by node from member `root`, the member that member `m` (not the root)
    /// takes the message from: the root, where `m` is on the root's node or leads its own;
    /// else its node's leader.
    pub fn broadcast_sender(&self, m: usize, root: usize) -> usize {
        let leader = self.members(self.group_of(m))[0];
        match self.group_of(m) != self.group_of(root) && m != leader {
            true => leader,
            false => root,
        }
    }

    /// In a broadcast by node from member `root`, the members that member `m` (not the root)
    /// passes the message on to: its node's other members where it leads a node other than
    /// the root's; nobody otherwise.
    pub fn broadcast_forwards(&self, m: usize, root: usize) -> &[usize] {
        let members = self.members(self.group_of(m));
        match self.group_of(m) != self.group_of(root) && m == members[0] {
            true => &members[1..],
            false => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_group_by_node_with_the_lowest_as_leader() {
        let shape = NodeShape::new(&[5, 2, 5, 9, 2]);
        assert_eq!(shape.nodes(), 3);
        assert_eq!(shape.members(0), &[0, 2]);
        assert_eq!(shape.members(1), &[1, 4]);
        assert_eq!(shape.members(2), &[3]);
        assert_eq!(shape.leaders(), &[0, 1, 3]);
        assert_eq!(shape.group_of(4), 1);
        assert_eq!(shape.widest(), 2);
        assert!(shape.layered());
        assert!(!NodeShape::new(&[0, 1, 2]).layered(), "one member per node");
        assert!(!shape.consecutive(), "members 0 and 2 share a node");
        assert!(NodeShape::new(&[4, 4, 7, 7, 7, 1]).consecutive());
        assert!(!NodeShape::new(&[3, 3, 3]).layered(), "one node");
        assert!(NodeShape::new(&[0, 0, 0, 1]).layered(), "3 + 1");
    }

    #[test]
    fn a_broadcast_by_node_reaches_every_member_once_and_from_its_sender() {
        for nodes in [
            &[0, 0, 1, 1][..],
            &[0, 0, 0, 1],
            &[3, 1, 3, 1, 3],
            &[7, 8, 7, 9],
        ] {
            let shape = NodeShape::new(nodes);
            for root in 0..nodes.len() {
                let sends = |s: usize| match s == root {
                    true => shape.broadcast_receivers(root),
                    false => shape.broadcast_forwards(s, root).to_vec(),
                };
                let mut reached: Vec<usize> = (0..nodes.len()).flat_map(sends).collect();
                reached.sort_unstable();
                let others: Vec<usize> = (0..nodes.len()).filter(|&m| m != root).collect();
                assert_eq!(
                    reached, others,
                    "{nodes:?} from {root}: each other member once"
                );
                for m in others {
                    let from = shape.broadcast_sender(m, root);
                    assert!(
                        sends(from).contains(&m),
                        "{nodes:?} from {root}: {m}'s sender"
                    );
                    let fabric = nodes[from] != nodes[m];
                    let leads = shape.leaders().contains(&m);
                    assert!(
                        !fabric || (from == root && leads),
                        "{nodes:?}: only leaders"
                    );
                }
                let first = shape.broadcast_receivers(root).first().copied();
                let leads_elsewhere = |l: &usize| nodes[*l] != nodes[root];
                let fabric_first = first.filter(leads_elsewhere).is_some();
                assert!(
                    fabric_first,
                    "{nodes:?} from {root}: the other nodes' leaders first"
                );
            }
        }
    }
}
