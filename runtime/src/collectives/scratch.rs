//! [`Scratch`]: zeroed temporary elements that start on a cache line, for the copies between
//! the symmetric heap and a collective's private memory.
//!
//! Heap allocations start on 64-byte lines, `Vec`'s only on 16 bytes. A copy whose source and
//! destination sit at different offsets within a line can be many times slower: glibc's
//! `memcpy` uses `rep movsb` from a few KiB up, and on AMD EPYC that copies 16 KiB at 2.4 GB/s
//! when the two are 16 bytes apart within a line, at 47–94 GB/s when they are not. So a
//! reduction whose temporaries happened to land 16 bytes off ran at a fifth of its speed.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::{Pod, Zeroable};

/// The unit of a [`Scratch`]'s memory: one 64-byte line.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// `len` zeroed elements of `T` starting on a 64-byte line, or on `T`'s own alignment where
/// that is larger (a zero-sized `T` gives none).
#[derive(Debug)]
pub(super) struct Scratch<T> {
    lines: Vec<Line>,
    /// Where the elements start in `lines`, in bytes: the first multiple of `T`'s alignment.
    start: usize,
    len: usize,
    elem: PhantomData<T>,
}

impl<T: Pod> Scratch<T> {
    /// `len` zeroed elements.
    pub(super) fn zeroed(len: usize) -> Scratch<T> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        // Lines start on 64 bytes; a larger alignment (a power of two, so a multiple of 64)
        // may skip up to `align / 64 - 1` of them.
        let align = std::mem::align_of::<T>().max(64);
        let lines = vec![Line::zeroed(); bytes.div_ceil(64) + align / 64 - 1];
        let start = (align - lines.as_ptr() as usize % align) % align;
        Scratch {
            lines,
            start,
            len,
            elem: PhantomData,
        }
    }

    /// The elements' bytes.
    fn bytes(&self) -> usize {
        self.len.saturating_mul(std::mem::size_of::<T>())
    }
}

impl<T: Pod> Deref for Scratch<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        let all = bytemuck::cast_slice::<Line, u8>(&self.lines);
        let bytes = &all[self.start..self.start + self.bytes()];
        // Aligned for `T` above, so only a zero-sized `T` fails.
        bytemuck::try_cast_slice(bytes).unwrap_or_default()
    }
}

impl<T: Pod> DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let range = self.start..self.start + self.bytes();
        let bytes = &mut bytemuck::cast_slice_mut::<Line, u8>(&mut self.lines)[range];
        bytemuck::try_cast_slice_mut(bytes).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::Scratch;

    #[test]
    fn elements_start_on_a_line_and_number_what_was_asked() {
        for len in [0, 1, 3, 16, 17, 4097] {
            let mut ints = Scratch::<i32>::zeroed(len);
            assert_eq!(ints.len(), len);
            assert_eq!(ints.as_ptr() as usize % 64, 0);
            assert!(ints.iter().all(|&v| v == 0));
            ints.iter_mut().enumerate().for_each(|(i, v)| *v = i as i32);
            assert!(ints.iter().enumerate().all(|(i, &v)| v == i as i32));
        }
        let odd = Scratch::<[u8; 3]>::zeroed(5);
        assert_eq!((odd.len(), odd.as_ptr() as usize % 64), (5, 0));
        assert!(Scratch::<()>::zeroed(7).is_empty());
    }

    /// An element type aligned above a line.
    #[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C, align(256))]
    struct Wide([u64; 32]);

    #[test]
    fn elements_aligned_above_a_line_start_on_their_alignment() {
        for len in [1, 2, 5] {
            let mut wide = Scratch::<Wide>::zeroed(len);
            assert_eq!(wide.len(), len);
            assert_eq!(wide.as_ptr() as usize % 256, 0);
            wide.iter_mut()
                .enumerate()
                .for_each(|(i, w)| *w = Wide([i as u64; 32]));
            assert!(wide
                .iter()
                .enumerate()
                .all(|(i, w)| *w == Wide([i as u64; 32])));
        }
    }
}
