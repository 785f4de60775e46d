//! Remote memory access on the data plane: `put`, `get`, `p`, `g`, strided `iput`/`iget`, the
//! `_nbi` forms, `fence` and `quiet`.
//!
//! Over shared memory every transfer completes before the call returns; `_nbi` calls therefore
//! return at once with the data in place, which OpenSHMEM allows (completion may come earlier
//! than `quiet`). `quiet` still orders: it is a full fence.

use std::sync::atomic::{fence, Ordering};

use bytemuck::Pod;
use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::segment::Segment;

/// Checks an element stride of a strided transfer and returns the elements it spans.
fn strided_extent(stride: usize, nelems: usize, what: &str) -> Result<usize> {
    if stride == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} stride must be at least 1"
        )));
    }
    if nelems == 0 {
        return Ok(0);
    }
    (nelems - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(1))
        .ok_or_else(|| Error::InvalidArgument(format!("{what} stride overflows")))
}

/// Makes a plain write of mapping bytes `[start, end)` of `target` visible and wakes the
/// owner's waiters sleeping on them.
#[inline]
fn publish(target: &Segment, start: usize, end: usize) {
    fence(Ordering::SeqCst);
    target.wake_watchers(start, end);
}

impl DataPlane {
    /// Copies `src` into `dest` on PE `pe` and returns once it is delivered (`shmem_put`).
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`], [`Error::NotSymmetric`], [`Error::OutOfBounds`] when `dest`
    /// holds fewer than `src.len()` elements.
    pub async fn put<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        src: &[T],
        pe: usize,
    ) -> Result<()> {
        self.put_nbi(dest, src, pe)
    }

    /// Starts copying `src` into `dest` on PE `pe` (`shmem_put_nbi`); complete at `quiet`.
    /// The source may be reused as soon as the call returns.
    pub fn put_nbi<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        src: &[T],
        pe: usize,
    ) -> Result<()> {
        let moved = std::mem::size_of_val(src);
        self.counted(
            Op::Put,
            pe,
            moved,
            || {
                let target = self.segment(pe)?;
                Ok((
                    target,
                    self.locate(dest.into(), src.len(), "put destination")?,
                ))
            },
            |(target, at)| {
                let bytes: &[u8] = bytemuck::cast_slice(src);
                target.mapping().write(at, bytes);
                publish(target, at, at + bytes.len());
            },
        )
    }

    /// Copies `src` on PE `pe` into `dest` (`shmem_get`); `dest.len()` elements are read.
    pub async fn get<T: Pod>(
        &self,
        dest: &mut [T],
        src: impl Into<SymSlice<'_, T>>,
        pe: usize,
    ) -> Result<()> {
        let (moved, len) = (std::mem::size_of_val(dest), dest.len());
        self.counted(
            Op::Get,
            pe,
            moved,
            || {
                let source = self.segment(pe)?;
                Ok((source, self.locate(src.into(), len, "get source")?))
            },
            |(source, at)| {
                source.mapping().read(at, bytemuck::cast_slice_mut(dest));
            },
        )
    }

    /// Starts copying `src` on PE `pe` into this PE's symmetric `dest` (`shmem_get_nbi`);
    /// `dest.len()` elements are read. The destination is symmetric so that transports which
    /// complete later never write into memory Rust has handed back; this PE's tasks waiting
    /// on it (`wait_until`) are woken as by a put.
    pub fn get_nbi<'d, 's, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'d, T>>,
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> Result<()> {
        let dest = dest.into();
        let moved = dest.len().saturating_mul(std::mem::size_of::<T>());
        self.counted(
            Op::Get,
            pe,
            moved,
            || {
                let source = self.segment(pe)?;
                let dst_at = self.locate(dest, 0, "get_nbi destination")?;
                let src_at = self.locate(src.into(), dest.len(), "get_nbi source")?;
                Ok((source, dst_at, src_at))
            },
            |(source, dst_at, src_at)| {
                let own = self.own_segment();
                own.mapping()
                    .copy_from(dst_at, source.mapping(), src_at, moved);
                // This PE's own waiters on `dest` learn of it now, not at the doorbell's next tick.
                publish(own, dst_at, dst_at + moved);
            },
        )
    }

    /// Writes one element into `dest[0]` on PE `pe` (`shmem_p`).
    pub async fn p<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        value: T,
        pe: usize,
    ) -> Result<()> {
        self.put_nbi(dest, std::slice::from_ref(&value), pe)
    }

    /// Reads one element `src[0]` from PE `pe` (`shmem_g`).
    pub async fn g<T: Pod>(&self, src: impl Into<SymSlice<'_, T>>, pe: usize) -> Result<T> {
        let mut v = T::zeroed();
        self.get(std::slice::from_mut(&mut v), src, pe).await?;
        Ok(v)
    }

    /// Strided put (`shmem_iput`): element `i` of the transfer goes from `src[i * sst]` to
    /// `dest[i * dst]` on PE `pe`, for `i < nelems`. Strides count elements and must be ≥ 1.
    pub async fn iput<T: Pod>(
        &self,
        dest: impl Into<SymSlice<'_, T>>,
        src: &[T],
        dst: usize,
        sst: usize,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        let moved = nelems.saturating_mul(std::mem::size_of::<T>());
        self.counted(
            Op::Iput,
            pe,
            moved,
            || {
                let target = self.segment(pe)?;
                let dest_extent = strided_extent(dst, nelems, "destination")?;
                let src_extent = strided_extent(sst, nelems, "source")?;
                if src_extent > src.len() {
                    return Err(Error::OutOfBounds {
                        what: "iput source",
                        needed: src_extent,
                        available: src.len(),
                    });
                }
                let at = self.locate(dest.into(), dest_extent, "iput destination")?;
                Ok((target, at, dest_extent))
            },
            |(target, at, dest_extent)| {
                let size = std::mem::size_of::<T>();
                for i in 0..nelems {
                    target
                        .mapping()
                        .write(at + i * dst * size, bytemuck::bytes_of(&src[i * sst]));
                }
                publish(target, at, at + dest_extent * size);
            },
        )
    }

    /// Strided get (`shmem_iget`): element `i` goes from `src[i * sst]` on PE `pe` to
    /// `dest[i * dst]`, for `i < nelems`.
    pub async fn iget<T: Pod>(
        &self,
        dest: &mut [T],
        src: impl Into<SymSlice<'_, T>>,
        dst: usize,
        sst: usize,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        let moved = nelems.saturating_mul(std::mem::size_of::<T>());
        let len = dest.len();
        self.counted(
            Op::Iget,
            pe,
            moved,
            || {
                let source = self.segment(pe)?;
                let dest_extent = strided_extent(dst, nelems, "destination")?;
                let src_extent = strided_extent(sst, nelems, "source")?;
                if dest_extent > len {
                    return Err(Error::OutOfBounds {
                        what: "iget destination",
                        needed: dest_extent,
                        available: len,
                    });
                }
                Ok((source, self.locate(src.into(), src_extent, "iget source")?))
            },
            |(source, at)| {
                let size = std::mem::size_of::<T>();
                for i in 0..nelems {
                    source.mapping().read(
                        at + i * sst * size,
                        bytemuck::bytes_of_mut(&mut dest[i * dst]),
                    );
                }
            },
        )
    }

    /// Orders this PE's puts, AMOs and signals to each PE: those issued before the fence are
    /// delivered before those issued after (`shmem_fence`).
    pub fn fence(&self) {
        fence(Ordering::SeqCst);
    }

    /// Completes every operation this PE has issued (`shmem_quiet`).
    ///
    /// # Errors
    /// [`Error::Shutdown`] once this PE has finalized.
    pub async fn quiet(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        if self.is_shut_down() {
            return Err(Error::Shutdown);
        }
        Ok(())
    }
}
