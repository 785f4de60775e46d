//! The trees that broadcasts and reductions run over, in ranks relative to the root (rank
//! `r` is member `(root + r) mod n`).
//!
//! - A star: the root is every other rank's parent (flat algorithms).
//! - A binomial tree: rank `r`'s parent is `r` without its lowest set bit; its children are
//!   `r + 2^k` for every `2^k` below that bit (below `n` for the root) that stays below `n`,
//!   largest subtree first. Depth ⌈log₂ n⌉ for any n.

/// The tree of a broadcast or reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Star,
    Binomial,
}

impl Shape {
    /// The parent of rank `r` (none for the root).
    pub fn parent(self, r: usize) -> Option<usize> {
        match (self, r) {
            (_, 0) => None,
            (Shape::Star, _) => Some(0),
            (Shape::Binomial, r) => Some(r & (r - 1)),
        }
    }

    /// The children of rank `r` among `n` ranks, largest subtree first.
    pub fn children(self, r: usize, n: usize) -> Vec<usize> {
        match self {
            Shape::Star if r == 0 => (1..n).collect(),
            Shape::Star => Vec::new(),
            Shape::Binomial => {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_has_one_parent_that_lists_it() {
        for shape in [Shape::Star, Shape::Binomial] {
            for n in 1..40 {
                let mut seen = vec![0; n];
                for r in 0..n {
                    for c in shape.children(r, n) {
                        assert_eq!(shape.parent(c), Some(r), "{shape:?} n={n} child {c}");
                        seen[c] += 1;
                    }
                }
                assert_eq!(seen[0], 0);
                assert!(
                    seen[1..].iter().all(|&s| s == 1),
                    "{shape:?} n={n}: {seen:?}"
                );
            }
        }
        assert_eq!(Shape::Binomial.children(0, 6), vec![4, 2, 1]);
        assert_eq!(Shape::Binomial.children(4, 6), vec![5]);
    }
}
