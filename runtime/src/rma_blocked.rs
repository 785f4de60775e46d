//! Blocked strided transfers (OpenSHMEM 1.6's `shmem_ibput`, `shmem_ibget`): `nblocks`
//! blocks of `bsize` contiguous elements, block `i` going between `source + i·sst` and
//! `dest + i·dst` (strides in elements, each at least `bsize`).

use bytemuck::Pod;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;

/// The elements `nblocks` blocks of `bsize` reach at `stride` apart, checked.
fn blocked_extent(stride: usize, (bsize, nblocks): (usize, usize), what: &str) -> Result<usize> {
    if nblocks > 1 && stride < bsize {
        return Err(Error::InvalidArgument(format!(
            "{what} stride {stride} is shorter than a block of {bsize}: blocks would overlap"
        )));
    }
    match nblocks {
        0 => Ok(0),
        n => (n - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(bsize))
            .ok_or_else(|| Error::InvalidArgument(format!("{what} stride overflows"))),
    }
}

impl DataPlane {
    /// Copies `nblocks` blocks of `bsize` elements of `src`, `sst` apart, into `dest` on PE
    /// `pe`, `dst` apart (`shmem_ibput`); returns once every block is put (as
    /// [`DataPlane::put`]: delivered on a mapped route, on its way to another node). The blocks
    /// travel at once (a PE on another node gets them all in flight together).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a stride shorter than a block; [`Error::OutOfBounds`]
    /// when `src` or `dest` is shorter than the blocks reach; as [`DataPlane::put`].
    pub async fn ibput<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        src: &[T],
        (dst, sst): (usize, usize),
        (bsize, nblocks): (usize, usize),
        pe: usize,
    ) -> Result<()> {
        let dest = dest.into();
        let dest_extent = blocked_extent(dst, (bsize, nblocks), "destination")?;
        let src_extent = blocked_extent(sst, (bsize, nblocks), "source")?;
        if src_extent > src.len() {
            return Err(Error::OutOfBounds {
                what: "ibput source",
                needed: src_extent,
                available: src.len(),
            });
        }
        if dest_extent > dest.len() {
            return Err(Error::OutOfBounds {
                what: "ibput destination",
                needed: dest_extent,
                available: dest.len(),
            });
        }
        if bsize == 0 {
            // Blocks of nothing: however many, nothing moves.
            return self.route(pe).map(|_| ());
        }
        let landings: Vec<_> = (0..nblocks)
            .map(|i| {
                let to = dest.slice(i * dst..i * dst + bsize);
                self.put(to, &src[i * sst..i * sst + bsize], pe)
            })
            .collect();
        for landing in landings {
            landing.await?;
        }
        Ok(())
    }

    /// Copies `nblocks` blocks of `bsize` elements of `src` on PE `pe`, `sst` apart, into
    /// `dest`, `dst` apart (`shmem_ibget`); returns once every block has arrived.
    ///
    /// # Errors
    /// As [`DataPlane::ibput`], and as [`DataPlane::get`].
    pub async fn ibget<T: Pod>(
        &self,
        dest: &mut [T],
        src: impl Into<SymSlice<'_, T>>,
        (dst, sst): (usize, usize),
        (bsize, nblocks): (usize, usize),
        pe: usize,
    ) -> Result<()> {
        let src = src.into();
        let dest_extent = blocked_extent(dst, (bsize, nblocks), "destination")?;
        let src_extent = blocked_extent(sst, (bsize, nblocks), "source")?;
        if dest_extent > dest.len() {
            return Err(Error::OutOfBounds {
                what: "ibget destination",
                needed: dest_extent,
                available: dest.len(),
            });
        }
        if src_extent > src.len() {
            return Err(Error::OutOfBounds {
                what: "ibget source",
                needed: src_extent,
                available: src.len(),
            });
        }
        if bsize == 0 {
            return self.route(pe).map(|_| ());
        }
        for i in 0..nblocks {
            let from = src.slice(i * sst..i * sst + bsize);
            self.get(&mut dest[i * dst..i * dst + bsize], from, pe)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_reach_their_last_block_and_may_not_overlap() {
        assert_eq!(blocked_extent(5, (3, 4), "x").unwrap(), 18);
        assert_eq!(blocked_extent(1, (3, 1), "x").unwrap(), 3);
        assert_eq!(blocked_extent(9, (3, 0), "x").unwrap(), 0);
        assert!(blocked_extent(2, (3, 2), "x").is_err());
        assert!(blocked_extent(usize::MAX, (3, 3), "x").is_err());
    }
}
