//! Runs of adjacent byte ranges: how [`Staged`](super::staged::Staged) turns many small
//! copies into few.
//!
//! Writes deferred to one flush land together, so only overlapping ones must keep their
//! order: [`Pending`] keeps the waiting ones by destination, refuses an overlapping one (the
//! caller flushes first), and hands them out as [`Run`]s of adjacent destinations, one copy
//! each. [`runs_of`] does the same for the spans of a batch of reads.

use std::collections::BTreeMap;

/// Adjacent ranges that one copy moves: the run starts at `addr`; each part is
/// `(index, len)`, in address order (an index the caller gave: a staging offset or a span's
/// number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub addr: u64,
    pub parts: Vec<(usize, usize)>,
}

impl Run {
    /// The bytes the run covers.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|&(_, len)| len).sum()
    }
}

/// Writes waiting for their copy: destination → (staging offset, length).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    by_addr: BTreeMap<u64, (usize, usize)>,
}

impl Pending {
    /// Whether `len` bytes at `addr` overlap a write already waiting.
    pub fn overlaps(&self, addr: u64, len: usize) -> bool {
        let end = addr + len as u64;
        let before = self
            .by_addr
            .range(..=addr)
            .next_back()
            .is_some_and(|(&a, &(_, l))| a + l as u64 > addr);
        let after = self
            .by_addr
            .range(addr..)
            .next()
            .is_some_and(|(&a, _)| a < end);
        before || after
    }

    /// Adds a write of `len` bytes at `addr` staged at offset `at`; the caller has checked
    /// that it overlaps none ([`Pending::overlaps`]).
    pub fn insert(&mut self, addr: u64, at: usize, len: usize) {
        self.by_addr.insert(addr, (at, len));
    }

    /// Every waiting write, as runs of adjacent destinations (parts: staging offsets); none
    /// waits afterwards.
    pub fn take_runs(&mut self) -> Vec<Run> {
        let by_addr = std::mem::take(&mut self.by_addr);
        runs(by_addr.into_iter().map(|(addr, (at, len))| (addr, at, len)))
    }
}

/// The spans `(addr, len)` as runs of adjacent addresses (parts: the spans' indices).
/// Overlapping spans start runs of their own.
pub(crate) fn runs_of(spans: &[(u64, usize)]) -> Vec<Run> {
    let mut sorted: Vec<(u64, usize, usize)> = spans
        .iter()
        .enumerate()
        .map(|(i, &(addr, len))| (addr, i, len))
        .collect();
    sorted.sort_unstable();
    runs(sorted.into_iter())
}

/// Groups `(addr, index, len)` items, sorted by address, into runs of adjacent ones.
fn runs(sorted: impl Iterator<Item = (u64, usize, usize)>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    // Where the last run ends (kept, so that a long run is not summed at each step).
    let mut end = None;
    for (addr, index, len) in sorted {
        match out.last_mut() {
            Some(run) if end == Some(addr) => run.parts.push((index, len)),
            _ => out.push(Run {
                addr,
                parts: vec![(index, len)],
            }),
        }
        end = Some(addr + len as u64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_writes_make_one_run_in_address_order_and_gaps_split_runs() {
        let mut p = Pending::default();
        // Blocks' chunks arriving out of order: 2, 0, 1, then one past a gap.
        for (addr, at) in [
            (0x1100u64, 0usize),
            (0x1000, 256),
            (0x1080, 384),
            (0x2000, 512),
        ] {
            assert!(!p.overlaps(addr, 128));
            p.insert(addr, at, 128);
        }
        let runs = p.take_runs();
        assert_eq!(
            runs,
            vec![
                Run {
                    addr: 0x1000,
                    parts: vec![(256, 128), (384, 128), (0, 128)]
                },
                Run {
                    addr: 0x2000,
                    parts: vec![(512, 128)]
                },
            ]
        );
        assert_eq!(runs[0].len(), 384);
        assert!(p.take_runs().is_empty(), "none waits afterwards");
    }

    #[test]
    fn overlaps_are_found_on_either_side_and_touching_is_not_overlap() {
        let mut p = Pending::default();
        p.insert(100, 0, 50);
        assert!(p.overlaps(120, 4), "inside");
        assert!(p.overlaps(90, 11), "reaching in from before");
        assert!(p.overlaps(149, 10), "starting in its last byte");
        assert!(p.overlaps(80, 100), "covering it");
        assert!(!p.overlaps(150, 10), "right after");
        assert!(!p.overlaps(90, 10), "right before");
    }

    #[test]
    fn spans_group_by_address_and_keep_their_indices() {
        let spans = [
            (0x300u64, 0x100usize),
            (0x100, 0x100),
            (0x200, 0x100),
            (0x900, 8),
        ];
        let runs = runs_of(&spans);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].addr, 0x100);
        assert_eq!(runs[0].parts, vec![(1, 0x100), (2, 0x100), (0, 0x100)]);
        assert_eq!(runs[1].parts, vec![(3, 8)]);
        // The same span twice (two WQEs reading one buffer) is two runs, not one.
        assert_eq!(runs_of(&[(0x100, 8), (0x100, 8)]).len(), 2);
    }
}
