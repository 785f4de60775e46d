//! Agreement on collective heap calls (`malloc`, `free`, on host or GPU heaps): every PE
//! contributes what it asked for and what it got through one control-plane allgather, and
//! every PE compares them, so that a PE that called differently is named on every PE.
//!
//! A call whose arguments fail the PE's own checks (a size that overflows, an alignment that
//! is not a power of two, a buffer of another heap) still takes part in the allgather, as a
//! call that failed locally or was refused: the other PEs then fail with
//! [`Error::CollectiveMismatch`] instead of waiting for
//! it, or pairing with its next call, and every heap stays in step.

use bytemuck::Pod;

use crate::error::{Error, Result};

/// One PE's request for a collective allocation, as its program made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRequest {
    len: usize,
    elem: usize,
    elem_align: usize,
    align: usize,
}

impl AllocRequest {
    /// `len` elements of `T`, aligned to `align` bytes (`T`'s own alignment for `malloc`).
    pub fn of<T: Pod>(len: usize, align: usize) -> Self {
        AllocRequest {
            len,
            elem: std::mem::size_of::<T>(),
            elem_align: std::mem::align_of::<T>(),
            align,
        }
    }

    /// The bytes asked for, saturated when they overflow (as the other PEs see the call).
    pub fn bytes(&self) -> usize {
        self.len.saturating_mul(self.elem)
    }

    /// The alignment asked for (as the other PEs see the call).
    pub fn align(&self) -> usize {
        self.align
    }

    /// The bytes and the alignment to ask the allocator for, or why this PE refuses its own
    /// call.
    ///
    /// # Errors
    /// [`Error::InvalidAlignment`] for an alignment of 0 or not a power of two;
    /// [`Error::InvalidArgument`] when the bytes overflow.
    pub fn checked(&self) -> Result<(usize, usize)> {
        if self.align == 0 || !self.align.is_power_of_two() {
            return Err(Error::InvalidAlignment(self.align));
        }
        let bytes = self.len.checked_mul(self.elem).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} elements of {} bytes overflow",
                self.len, self.elem
            ))
        })?;
        Ok((bytes, self.align.max(self.elem_align)))
    }
}

/// One PE's collective heap call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapCall {
    op: u8,
    bytes: u64,
    align: u64,
    /// Offset obtained (alloc) or freed (free); `u64::MAX` if the local step failed.
    offset: u64,
}

impl HeapCall {
    const ALLOC: u8 = 1;
    const FREE: u8 = 2;
    const REFUSED_FREE: u8 = 3;

    /// An allocation of `bytes` aligned to `align` that got `offset` locally (`None`: failed).
    pub fn alloc(bytes: usize, align: usize, offset: Option<usize>) -> Self {
        HeapCall {
            op: Self::ALLOC,
            bytes: bytes as u64,
            align: align as u64,
            offset: offset.map_or(u64::MAX, |o| o as u64),
        }
    }

    /// A free of the allocation of `bytes` at `offset`.
    pub fn free(bytes: usize, offset: usize) -> Self {
        HeapCall {
            op: Self::FREE,
            bytes: bytes as u64,
            align: 0,
            offset: offset as u64,
        }
    }

    /// A free this PE refused: the buffer belongs to another heap, or (`unfinished`) the
    /// operations before it failed to complete (its `quiet` failed), so the buffer may still
    /// be read or written. The reason travels in the call, for the other PEs' error.
    pub fn refused_free(unfinished: bool) -> Self {
        HeapCall {
            op: Self::REFUSED_FREE,
            bytes: 0,
            align: u64::from(unfinished),
            offset: u64::MAX,
        }
    }

    /// Wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.op];
        v.extend_from_slice(&self.bytes.to_le_bytes());
        v.extend_from_slice(&self.align.to_le_bytes());
        v.extend_from_slice(&self.offset.to_le_bytes());
        v
    }

    /// Reads the wire form.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != 25 {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(HeapCall {
            op: b[0],
            bytes: word(1),
            align: word(9),
            offset: word(17),
        })
    }

    /// Bytes asked for (alloc) or freed (free).
    pub fn bytes(&self) -> usize {
        self.bytes as usize
    }

    /// Offset obtained (alloc) or freed (free); `None` if the local allocation failed.
    pub fn offset(&self) -> Option<usize> {
        (self.offset != u64::MAX).then_some(self.offset as usize)
    }

    /// Whether this is an allocation (its local offset must be given back if the PEs
    /// disagree).
    pub fn is_alloc(&self) -> bool {
        self.op == Self::ALLOC
    }

    fn describe(&self) -> String {
        match self.op {
            Self::ALLOC if self.offset == u64::MAX => format!(
                "an allocation of {} bytes aligned to {} that failed locally",
                self.bytes, self.align
            ),
            Self::ALLOC => format!(
                "an allocation of {} bytes aligned to {}",
                self.bytes, self.align
            ),
            Self::FREE => format!("a free of the allocation at offset {}", self.offset),
            Self::REFUSED_FREE if self.align != 0 => "a free it refused (its operations before \
                 the free failed to complete, so the buffer is kept)"
                .into(),
            Self::REFUSED_FREE => "a free it refused (a buffer of another heap)".into(),
            _ => "an unknown heap call".into(),
        }
    }

    /// Compares every PE's call with this PE's; `None` when all agree (a local failure on
    /// every PE alike is left to the caller's local error).
    pub fn mismatch(&self, my_pe: usize, payloads: &[Vec<u8>]) -> Option<String> {
        let differing: Vec<String> = payloads
            .iter()
            .enumerate()
            .filter_map(|(pe, p)| match Self::decode(p) {
                Some(c) if c == *self => None,
                Some(c) => Some(format!("PE {pe} made {}", c.describe())),
                None => Some(format!("PE {pe} made a different collective call")),
            })
            .collect();
        (!differing.is_empty()).then(|| {
            format!(
                "PE {my_pe} made {}, but {}",
                self.describe(),
                differing.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_round_trip_and_compare() {
        let a = HeapCall::alloc(100, 64, Some(128));
        assert_eq!(HeapCall::decode(&a.encode()), Some(a));
        assert_eq!(HeapCall::decode(&[1, 2]), None);
        let same = vec![a.encode(), a.encode()];
        assert_eq!(a.mismatch(0, &same), None);
        let other = vec![a.encode(), HeapCall::alloc(200, 64, Some(128)).encode()];
        let text = a.mismatch(0, &other).unwrap();
        assert!(
            text.contains("PE 1 made an allocation of 200 bytes"),
            "{text}"
        );
        let f = HeapCall::free(100, 128);
        assert!(f
            .mismatch(1, &[f.encode(), vec![9]])
            .unwrap()
            .contains("PE 1"));
    }

    #[test]
    fn a_refused_free_tells_the_others_why() {
        let f = HeapCall::free(100, 128);
        let why = |unfinished| {
            let refused = HeapCall::refused_free(unfinished).encode();
            f.mismatch(0, &[f.encode(), refused]).unwrap()
        };
        assert!(why(false).contains("another heap"), "{}", why(false));
        assert!(why(true).contains("failed to complete"), "{}", why(true));
    }
}
