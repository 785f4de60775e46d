//! The trees that broadcasts and reductions run over.
//!
//! - A star: the root is every other member's parent (flat algorithms).
//! - A binomial tree, in ranks relative to the root (rank `r` is member `(root + r) mod n`):
//!   rank `r`'s parent is `r` without its lowest set bit; its children are `r + 2^k` for
//!   every `2^k` below that bit (below `n` for the root) that stays below `n`, largest
//!   subtree first. Depth ⌈log₂ n⌉ for any n.
//! - Two levels by node (teams that span nodes): the root's children are the other nodes'
//!   heads, then the other members of its own node; each head's children are the other
//!   members of its node. A node's head is its leader, or the root on the root's node. Only
//!   the root–head edges cross nodes.

use crate::team::shape::NodeShape;

/// The kind of tree of a broadcast or reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Star,
    Binomial,
    Nodes,
}

/// A tree over a team's members, rooted at one of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tree<'a> {
    shape: Shape,
    root: usize,
    n: usize,
    nodes: &'a NodeShape,
}

impl<'a> Tree<'a> {
    /// The `shape` tree over a team grouped as `nodes`, rooted at member `root`.
    pub fn new(shape: Shape, root: usize, nodes: &'a NodeShape) -> Tree<'a> {
        let n = (0..nodes.nodes()).map(|g| nodes.members(g).len()).sum();
        Tree {
            shape,
            root,
            n,
            nodes,
        }
    }

    fn rank(&self, m: usize) -> usize {
        (m + self.n - self.root) % self.n
    }

    fn member(&self, r: usize) -> usize {
        (self.root + r) % self.n
    }

    /// The head of group `g`: its leader, or the root on the root's node.
    fn head(&self, g: usize) -> usize {
        if g == self.nodes.group_of(self.root) {
            self.root
        } else {
            self.nodes.leaders()[g]
        }
    }

    /// The parent of member `m` (none for the root).
    pub fn parent(&self, m: usize) -> Option<usize> {
        if m == self.root {
            return None;
        }
        match self.shape {
            Shape::Star => Some(self.root),
            Shape::Binomial => {
                let r = self.rank(m);
                Some(self.member(r & (r - 1)))
            }
            Shape::Nodes => match self.head(self.nodes.group_of(m)) {
                head if head == m => Some(self.root),
                head => Some(head),
            },
        }
    }

    /// The children of member `m`.
    pub fn children(&self, m: usize) -> Vec<usize> {
        match self.shape {
            Shape::Star if m == self.root => (1..self.n).map(|r| self.member(r)).collect(),
            Shape::Star => Vec::new(),
            Shape::Binomial => binomial_children(self.rank(m), self.n)
                .into_iter()
                .map(|r| self.member(r))
                .collect(),
            Shape::Nodes => {
                let g = self.nodes.group_of(m);
                if self.head(g) != m {
                    return Vec::new();
                }
                let mut out = Vec::new();
                if m == self.root {
                    out.extend(
                        (0..self.nodes.nodes())
                            .filter(|&h| h != g)
                            .map(|h| self.head(h)),
                    );
                }
                out.extend(self.nodes.members(g).iter().filter(|&&j| j != m));
                out
            }
        }
    }
}

/// The children of rank `r` of a binomial tree over `n` ranks, largest subtree first.
fn binomial_children(r: usize, n: usize) -> Vec<usize> {
    let limit = if r == 0 {
        n.next_power_of_two()
    } else {
        1 << r.trailing_zeros()
    };
    let mut out = Vec::new();
    let mut k = limit >> 1;
    while k > 0 {
        if r + k < n {
            out.push(r + k);
        }
        k >>= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every member but the root has one parent, which lists it, and returns
    /// the edges that cross nodes.
    fn check(tree: &Tree<'_>, nodes: &[usize]) -> usize {
        let n = nodes.len();
        let mut seen = vec![0; n];
        let mut crossing = 0;
        for m in 0..n {
            for c in tree.children(m) {
                assert_eq!(tree.parent(c), Some(m), "{tree:?} child {c}");
                seen[c] += 1;
                crossing += usize::from(nodes[c] != nodes[m]);
            }
        }
        for (m, &s) in seen.iter().enumerate() {
            assert_eq!(s, usize::from(m != tree.root), "{tree:?}: {seen:?}");
        }
        crossing
    }

    #[test]
    fn every_member_has_one_parent_that_lists_it() {
        for shape in [Shape::Star, Shape::Binomial, Shape::Nodes] {
            for n in 1..40 {
                let nodes: Vec<usize> = (0..n).map(|m| m % 3).collect();
                let grouped = NodeShape::new(&nodes);
                for root in [0, n / 2, n - 1] {
                    check(&Tree::new(shape, root, &grouped), &nodes);
                }
            }
        }
        let one = NodeShape::new(&[0; 6]);
        assert_eq!(
            Tree::new(Shape::Binomial, 0, &one).children(0),
            vec![4, 2, 1]
        );
        assert_eq!(Tree::new(Shape::Binomial, 0, &one).children(4), vec![5]);
        assert_eq!(Tree::new(Shape::Binomial, 2, &one).children(0), vec![1]);
    }

    #[test]
    fn the_node_tree_crosses_each_node_once_through_its_leader() {
        // Nodes: {0, 2, 4}, {1, 3}, {5}.
        let nodes = [0, 1, 0, 1, 0, 2];
        let grouped = NodeShape::new(&nodes);
        for root in 0..nodes.len() {
            let tree = Tree::new(Shape::Nodes, root, &grouped);
            assert_eq!(check(&tree, &nodes), 2, "root {root}");
        }
        let tree = Tree::new(Shape::Nodes, 2, &grouped);
        assert_eq!(tree.children(2), vec![1, 5, 0, 4]);
        assert_eq!(tree.children(1), vec![3]);
        assert_eq!(tree.parent(3), Some(1));
        assert_eq!(tree.parent(0), Some(2), "the root heads its own node");
        assert!(tree.children(0).is_empty());
    }
}
