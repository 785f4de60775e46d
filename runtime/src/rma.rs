//! Remote memory access on the data plane: `put`, `get`, `p`, `g`, strided `iput`/`iget`, the
//! `_nbi` forms, `fence` and `quiet`.
//!
//! To a mapped peer every transfer completes before the call returns; `_nbi` calls therefore
//! return at once with the data in place, which OpenSHMEM allows (completion may come earlier
//! than `quiet`). To a peer on another node the blocking forms await the remote transport's
//! completion, and `_nbi` ones are started at once and awaited by `quiet`. `quiet` also
//! orders: it is a full fence.

use std::sync::atomic::{fence, Ordering};

use bytemuck::Pod;
use ferroshmem_observability::Op;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::landing::{land, nothing, GetLanding, Landing};
use crate::route::{Completion, Domain, RemoteOp, Route};
use crate::segment::{Segment, HEADER_SIZE};
use crate::shared_memory::Caching;

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
pub(crate) fn publish(target: &Segment, start: usize, end: usize) {
    fence(Ordering::SeqCst);
    target.wake_watchers(start, end);
}

/// The size from which a put to another node returns only once its bytes are sent (see
/// `DataPlane::put_waits`).
pub const PUT_SENT_AT_RETURN: usize = 64 * 1024;

impl DataPlane {
    /// Copies `src` into `dest` on PE `pe` (`shmem_put`). On a mapped route the copy is done
    /// before the call returns; the future only reports it. To a PE on another node the
    /// bytes are copied and on their way when the call returns (`src` is free again, as
    /// after OpenSHMEM's blocking put; a put of [`PUT_SENT_AT_RETURN`] bytes or more, or the
    /// first after a [`fence`](DataPlane::fence), returns once they are sent): they land in
    /// order behind this PE's earlier puts to that PE (and before its later operations
    /// there), and have landed once [`DataPlane::quiet`] (or a barrier, which quiets first)
    /// completes. A put whose landing must be known elsewhere at once (another PE told of
    /// it) is followed by `quiet`, as in OpenSHMEM.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`], [`Error::NotSymmetric`], [`Error::OutOfBounds`] when `dest`
    /// holds fewer than `src.len()` elements. A put to another node that fails there (or on
    /// the way) fails the next [`DataPlane::quiet`], as an `_nbi` one does.
    #[inline(always)]
    pub fn put<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        src: &[T],
        pe: usize,
    ) -> Landing<()> {
        let dest = dest.into();
        if self.put_mapped(dest, src, pe) {
            return Landing::ready(Ok(()));
        }
        self.put_checked(dest, src, pe)
    }

    /// [`DataPlane::put`] past its mapped fast path: to another node, or refused with the
    /// reason. Out of line, so that the fast path inlined into callers stays small.
    #[inline(never)]
    fn put_checked<T: Pod>(&self, dest: SymSlice<'_, T>, src: &[T], pe: usize) -> Landing<()> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let wait = self.put_waits(None, bytes.len());
        match self.start_put(dest, bytes, src.len(), pe, None) {
            Ok(None) => Landing::ready(Ok(())),
            Ok(Some(remote)) if wait => Landing::remote(self.awaited(remote), nothing),
            // The bytes were copied and are on their way: the source is free at once, and the
            // write's completion (its error, if any) is `quiet`'s, as an `_nbi` one's.
            Ok(Some(remote)) => {
                self.defer(remote);
                Landing::ready(Ok(()))
            }
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Whether a put of `len` bytes to another node in `domain` (`None`: the default
    /// context's) waits until its bytes are sent rather than returning once they are copied:
    /// after a fence (it is posted only once the operations before the fence completed, and
    /// the operations after it must not overtake it), and from [`PUT_SENT_AT_RETURN`] bytes
    /// (so that a loop of large puts holds one copy at a time, not all of them).
    pub(crate) fn put_waits(&self, domain: Option<&Domain>, len: usize) -> bool {
        let Some(r) = &self.remotes else {
            return false;
        };
        len >= PUT_SENT_AT_RETURN || domain.unwrap_or(r.default_domain()).is_fenced()
    }

    /// Starts copying `src` into `dest` on PE `pe` (`shmem_put_nbi`); complete at `quiet`.
    /// The source may be reused as soon as the call returns.
    #[inline(always)]
    pub fn put_nbi<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        src: &[T],
        pe: usize,
    ) -> Result<()> {
        if let Some(remote) =
            self.start_put(dest.into(), bytemuck::cast_slice(src), src.len(), pe, None)?
        {
            self.defer(remote);
        }
        Ok(())
    }

    /// Validates a put of `bytes` (`len` elements) into `dest` on PE `pe` and does it on a
    /// mapped route, or starts it on the remote one and returns its completion.
    #[inline(always)]
    pub(crate) fn start_put<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        bytes: &[u8],
        len: usize,
        pe: usize,
        domain: Option<&Domain>,
    ) -> Result<Option<Completion>> {
        let (route, at) = self.validate(pe, || self.locate(dest, len, "put destination"))?;
        Ok(match route {
            Route::Mapped(target) => {
                self.write_mapped(target, at, bytes, pe);
                None
            }
            Route::Remote => Some(self.remote_in(domain, Op::Put, pe, (bytes.len(), at), || {
                RemoteOp::PutSent(bytes.to_vec())
            })),
        })
    }

    /// The mapped arm of a put: copies `bytes` to mapping offset `at` of `target` (PE `pe`).
    #[inline(always)]
    fn write_mapped(&self, target: &Segment, at: usize, bytes: &[u8], pe: usize) {
        self.mapped(Op::Put, pe, bytes.len(), || {
            target.mapping().write(at, bytes);
            publish(target, at, at + bytes.len());
        });
    }

    /// [`DataPlane::put`] when it can complete at once on a mapped route: `true` once the
    /// data is in place; `false`, with nothing written or counted, for a peer on another node
    /// or an argument [`DataPlane::put`] would refuse (then call it: it says why). For
    /// callers that cannot inline the whole operation (the C ABI), as
    /// [`DataPlane::get_mapped_at`].
    #[inline(always)]
    pub fn put_mapped<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        src: &[T],
        pe: usize,
    ) -> bool {
        let Some((target, at)) = self.mapped_at(pe, dest.into(), src.len()) else {
            return false;
        };
        self.write_mapped(target, at, bytemuck::cast_slice(src), pe);
        true
    }

    /// The segment of PE `pe` when its route is mapped, and the mapping offset of `view`
    /// when it passes its checks and holds `needed` elements: what [`DataPlane::put_mapped`]
    /// and [`DataPlane::get`]'s mapped path need, with no error made (`None` otherwise).
    #[inline(always)]
    fn mapped_at<T: Pod>(
        &self,
        pe: usize,
        view: SymSlice<'_, T>,
        needed: usize,
    ) -> Option<(&Segment, usize)> {
        let Some(Route::Mapped(segment)) = self.routes.get(pe) else {
            return None;
        };
        Some((segment, self.offset_if_valid(view, needed)?))
    }

    /// [`DataPlane::put`] of bytes the caller hands over: to a PE of another node they
    /// travel as they are, without the copy `put` makes of its source (for large messages
    /// a caller has just built).
    ///
    /// # Errors
    /// As [`DataPlane::put`].
    pub fn put_owned(&self, dest: SymSlice<'_, u8>, data: Vec<u8>, pe: usize) -> Landing<()> {
        let valid = self.validate(pe, || self.locate(dest, data.len(), "put destination"));
        match valid {
            Ok((Route::Mapped(target), at)) => {
                self.write_mapped(target, at, &data, pe);
                Landing::ready(Ok(()))
            }
            Ok((Route::Remote, at)) => {
                let len = data.len();
                let remote = self.remote(Op::Put, pe, len, at, || RemoteOp::Put(data));
                Landing::remote(self.awaited(remote), nothing)
            }
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Copies this PE's own symmetric `src` into `dest` on PE `pe` (for collectives that push
    /// a block of their `source` into a member's `dest`): on a mapped route one copy from
    /// mapping to mapping, done when the call returns; to another node the bytes are read
    /// out and sent as [`DataPlane::put_owned`] sends them.
    ///
    /// `caching` applies on a mapped route ([`SharedMapping::copy_from`]).
    ///
    /// # Errors
    /// As [`DataPlane::put`], for either view.
    ///
    /// [`SharedMapping::copy_from`]: crate::shared_memory::SharedMapping::copy_from
    pub(crate) fn put_within<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        pe: usize,
        caching: Caching,
    ) -> Landing<()> {
        let moved = src.len().saturating_mul(std::mem::size_of::<T>());
        let own = self.own_segment();
        let valid = self.validate(pe, || {
            let at = self.locate(dest, src.len(), "put destination")?;
            Ok((at, self.locate(src, src.len(), "put source")?))
        });
        match valid {
            Ok((Route::Mapped(target), (at, from))) => {
                self.mapped(Op::Put, pe, moved, || {
                    target
                        .mapping()
                        .copy_from(at, own.mapping(), from, moved, caching);
                    publish(target, at, at + moved);
                });
                Landing::ready(Ok(()))
            }
            Ok((Route::Remote, (_, from))) => {
                let mut data = vec![0u8; moved];
                own.mapping().read(from, &mut data);
                self.put_owned(dest.as_bytes(), data, pe)
            }
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Copies `src` on PE `pe` into `dest` (`shmem_get`); `dest.len()` elements are read.
    #[inline(always)]
    pub fn get<'a, 's, T: Pod>(
        &self,
        dest: &'a mut [T],
        src: impl Into<SymSlice<'s, T>>,
        pe: usize,
    ) -> GetLanding<'a> {
        let src = src.into();
        if let Some((source, at)) = self.mapped_at(pe, src, dest.len()) {
            self.read_mapped(source, at, bytemuck::cast_slice_mut(dest), pe);
            return GetLanding::ready(Ok(()));
        }
        self.get_checked(bytemuck::cast_slice_mut(dest), src, pe)
    }

    /// [`DataPlane::get`]'s copy on a mapped route, counted where traffic is. It keeps the
    /// mapping's panicking bounds check (which `mapped_at` has made unreachable) rather than
    /// [`DataPlane::get_mapped_at`]'s fallible one: with the latter, an `await`ed `get` in a loop
    /// compiled into a 16-byte reload of two 8-byte stores of the source view (a stalled
    /// store-to-load forward), 3.0 → 7.0 ns per `get` in `benches/host_pt2pt.rs`.
    #[inline(always)]
    fn read_mapped(&self, source: &Segment, at: usize, dest: &mut [u8], pe: usize) {
        if self.traffic.is_enabled() {
            self.get_mapped_counted(source, at, dest, pe);
        } else {
            source.mapping().read(at, dest);
        }
    }

    /// [`DataPlane::get`] past its mapped fast path, as [`DataPlane::put_checked`].
    #[inline(never)]
    fn get_checked<'a, T: Pod>(
        &self,
        dest: &'a mut [u8],
        src: SymSlice<'_, T>,
        pe: usize,
    ) -> GetLanding<'a> {
        match self.start_get(dest, src, pe, None) {
            Ok(None) => GetLanding::ready(Ok(())),
            Ok(Some(remote)) => GetLanding::remote(self.awaited(remote), dest),
            Err(e) => GetLanding::ready(Err(e)),
        }
    }

    /// [`DataPlane::get`] of the bytes at user-heap offset `offset` (a symmetric address's
    /// offset from the start of its PE's heap, the same on every PE) when it can complete at
    /// once on a mapped route: `true` once `dest` holds the data; `false`, with nothing read
    /// or counted, for a PE out of range or on another node, a range that does not lie in
    /// the user heap, or once this PE has shut down (then call [`DataPlane::get`]: it says
    /// why). For callers that hold addresses rather than views and cannot inline the whole
    /// operation (the C ABI): its mapped path is a small function of its own, with no
    /// frame to build. A range outside the mapping (which the checks before it rule out)
    /// returns `false` too, instead of panicking, so no panic message is built inline.
    #[inline(always)]
    pub fn get_mapped_at(&self, dest: &mut [u8], offset: usize, pe: usize) -> bool {
        let Some(Route::Mapped(source)) = self.routes.get(pe) else {
            return false;
        };
        if !self.in_user_heap(offset, dest.len()) || self.is_shut_down() {
            return false;
        }
        let at = HEADER_SIZE + offset;
        if self.traffic.is_enabled() {
            self.get_mapped_counted(source, at, dest, pe);
            return true;
        }
        source.mapping().try_read(at, dest)
    }

    /// The mapped copy of [`DataPlane::get_mapped_at`] and [`DataPlane::get`] when traffic is
    /// counted: out of line, so that the uncounted copy beside it stays small where they are
    /// inlined whole (the C ABI's `get`, and every Rust `get`).
    #[inline(never)]
    fn get_mapped_counted(&self, source: &Segment, at: usize, dest: &mut [u8], pe: usize) {
        self.mapped(Op::Get, pe, dest.len(), || source.mapping().read(at, dest));
    }

    /// Validates a get into `dest` (bytes of `src`'s elements) and does it on a mapped
    /// route, or starts it on the remote one and returns its completion.
    #[inline(always)]
    pub(crate) fn start_get<T: Pod>(
        &self,
        dest: &mut [u8],
        src: SymSlice<'_, T>,
        pe: usize,
        domain: Option<&Domain>,
    ) -> Result<Option<Completion>> {
        let moved = dest.len();
        let len = moved / std::mem::size_of::<T>().max(1);
        let (route, at) = self.validate(pe, || self.locate(src, len, "get source"))?;
        Ok(match route {
            Route::Mapped(source) => {
                self.mapped(Op::Get, pe, moved, || source.mapping().read(at, dest));
                None
            }
            Route::Remote => {
                Some(self.remote_in(domain, Op::Get, pe, (moved, at), || RemoteOp::Get(moved)))
            }
        })
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
        let (dest, src) = (dest.into(), src.into());
        if let Some(remote) = self.start_get_into(dest, src, pe, None, Caching::Keep)? {
            self.defer(remote);
        }
        Ok(())
    }

    /// A get into this PE's symmetric `dest` whose future resolves once the data has landed
    /// (for collectives, which go on with what they read); `caching` as for
    /// [`DataPlane::start_get_into`].
    pub(crate) fn get_into<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        pe: usize,
        caching: Caching,
    ) -> Landing<()> {
        match self.start_get_into(dest, src, pe, None, caching) {
            Ok(None) => Landing::ready(Ok(())),
            Ok(Some(remote)) => Landing::remote(self.awaited(remote), nothing),
            Err(e) => Landing::ready(Err(e)),
        }
    }

    /// Validates a get of `src` on PE `pe` into this PE's symmetric `dest` and does it on a
    /// mapped route, or starts it on the remote one and returns its completion, which
    /// writes the bytes into `dest` (and wakes its waiters) when they arrive. `caching`
    /// applies on a mapped route ([`SharedMapping::copy_from`]).
    ///
    /// [`SharedMapping::copy_from`]: crate::shared_memory::SharedMapping::copy_from
    pub(crate) fn start_get_into<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        pe: usize,
        domain: Option<&Domain>,
        caching: Caching,
    ) -> Result<Option<Completion>> {
        let moved = dest.len().saturating_mul(std::mem::size_of::<T>());
        let (route, (dst_at, src_at)) = self.validate(pe, || {
            let dst_at = self.locate(dest, 0, "get_nbi destination")?;
            Ok((dst_at, self.locate(src, dest.len(), "get_nbi source")?))
        })?;
        let own = self.own_segment();
        Ok(match route {
            Route::Mapped(source) => {
                self.mapped(Op::Get, pe, moved, || {
                    own.mapping()
                        .copy_from(dst_at, source.mapping(), src_at, moved, caching);
                    // This PE's own waiters on `dest` learn of it now, not at the doorbell's
                    // next tick.
                    publish(own, dst_at, dst_at + moved);
                });
                None
            }
            Route::Remote => {
                let got = self.remote_in(domain, Op::Get, pe, (moved, src_at), || {
                    RemoteOp::Get(moved)
                });
                let own = self.own_handle();
                Some(Box::pin(async move {
                    let bytes = got.await?;
                    own.mapping().write(dst_at, &bytes);
                    publish(&own, dst_at, dst_at + bytes.len());
                    Ok(Vec::new())
                }))
            }
        })
    }

    /// Writes one element into `dest[0]` on PE `pe` (`shmem_p`).
    #[inline(always)]
    pub fn p<'s, T: Pod>(
        &self,
        dest: impl Into<SymSlice<'s, T>>,
        value: T,
        pe: usize,
    ) -> Landing<()> {
        self.put(dest, std::slice::from_ref(&value), pe)
    }

    /// Reads one element `src[0]` from PE `pe` (`shmem_g`).
    #[inline(always)]
    pub fn g<'s, T: Pod>(&self, src: impl Into<SymSlice<'s, T>>, pe: usize) -> Landing<T> {
        let mut v = T::zeroed();
        match self.start_get(bytemuck::bytes_of_mut(&mut v), src.into(), pe, None) {
            Ok(None) => Landing::ready(Ok(v)),
            Ok(Some(remote)) => Landing::remote(self.awaited(remote), read_element),
            Err(e) => Landing::ready(Err(e)),
        }
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
        let size = std::mem::size_of::<T>();
        let moved = nelems.saturating_mul(size);
        let (route, (at, dest_extent)) = self.validate(pe, || {
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
            Ok((at, dest_extent))
        })?;
        match route {
            Route::Mapped(target) => self.mapped(Op::Iput, pe, moved, || {
                for i in 0..nelems {
                    target
                        .mapping()
                        .write(at + i * dst * size, bytemuck::bytes_of(&src[i * sst]));
                }
                publish(target, at, at + dest_extent * size);
            }),
            Route::Remote => {
                let puts: Vec<Completion> = (0..nelems)
                    .map(|i| {
                        let element = bytemuck::bytes_of(&src[i * sst]).to_vec();
                        self.remote(Op::Iput, pe, size, at + i * dst * size, || {
                            RemoteOp::PutSent(element)
                        })
                    })
                    .collect();
                for put in puts {
                    put.await?;
                }
            }
        }
        Ok(())
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
        let size = std::mem::size_of::<T>();
        let moved = nelems.saturating_mul(size);
        let len = dest.len();
        let (route, at) = self.validate(pe, || {
            let dest_extent = strided_extent(dst, nelems, "destination")?;
            let src_extent = strided_extent(sst, nelems, "source")?;
            if dest_extent > len {
                return Err(Error::OutOfBounds {
                    what: "iget destination",
                    needed: dest_extent,
                    available: len,
                });
            }
            self.locate(src.into(), src_extent, "iget source")
        })?;
        match route {
            Route::Mapped(source) => self.mapped(Op::Iget, pe, moved, || {
                for i in 0..nelems {
                    source.mapping().read(
                        at + i * sst * size,
                        bytemuck::bytes_of_mut(&mut dest[i * dst]),
                    );
                }
            }),
            Route::Remote => {
                let gets: Vec<Completion> = (0..nelems)
                    .map(|i| {
                        self.remote(Op::Iget, pe, size, at + i * sst * size, || {
                            RemoteOp::Get(size)
                        })
                    })
                    .collect();
                for (i, get) in gets.into_iter().enumerate() {
                    let got = get.await?;
                    bytemuck::bytes_of_mut(&mut dest[i * dst]).copy_from_slice(&got);
                }
            }
        }
        Ok(())
    }

    /// Orders this PE's puts, AMOs and signals to each PE: those issued before the fence are
    /// delivered before those issued after (`shmem_fence`). To PEs on other nodes, the
    /// remote operations issued after it start once those issued before have completed (a
    /// put: once on its way, behind which the fabric keeps the later ones).
    pub fn fence(&self) {
        self.fence_in(None);
    }

    /// [`DataPlane::fence`] in ordering domain `domain` (`None`: the default context's).
    pub(crate) fn fence_in(&self, domain: Option<&Domain>) {
        fence(Ordering::SeqCst);
        if let Some(r) = &self.remotes {
            domain.unwrap_or(r.default_domain()).fence();
        }
    }

    /// Completes every operation this PE has issued (`shmem_quiet`): to PEs on other nodes,
    /// its `_nbi` operations end and its puts are confirmed landed.
    ///
    /// # Errors
    /// [`Error::Shutdown`] once this PE has finalized; the first error of an `_nbi`
    /// operation to a PE on another node, or of a put there (a refusal at the target is
    /// reported by a later `quiet`, of this context or another).
    #[inline(always)]
    pub fn quiet(&self) -> Landing<()> {
        self.quiet_in(None)
    }

    /// [`DataPlane::quiet`] of ordering domain `domain` (`None`: the default context's).
    #[inline(always)]
    pub(crate) fn quiet_in(&self, domain: Option<&Domain>) -> Landing<()> {
        fence(Ordering::SeqCst);
        if self.is_shut_down() {
            return Landing::ready(Err(Error::Shutdown));
        }
        match self.remote_pending(domain) {
            None => Landing::ready(Ok(())),
            Some(pending) => Landing::remote(self.awaited(pending), nothing),
        }
    }
}

/// One element from the bytes a remote read brought back.
fn read_element<T: Pod>(got: Vec<u8>) -> Result<T> {
    let mut v = T::zeroed();
    land(bytemuck::bytes_of_mut(&mut v), got)?;
    Ok(v)
}
