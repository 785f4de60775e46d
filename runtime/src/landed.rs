//! Write counters: how much of peers' fabric writes has landed in a range of this PE's
//! segment, kept by the PE itself from what its endpoint reports (libfabric's remote
//! counters, done in software), so that one write both carries its data and says it landed.
//!
//! A peer's write over the fabric brings a notice that the owner's endpoint reports once the
//! data is placed, in the order of that peer's writes (the endpoint's RMA order); the
//! transport hands each to [`Segment::landed`]. A counter registered for a range
//! ([`DataPlane::count_writes`]) then adds the write's length, in units, to a `u64` of the
//! segment, and wakes the waiters sleeping on that word: a reader that sees the count has
//! grown by `k` units sees the bytes of the writes it counts. Writes by mapped peers bring
//! no notice: whoever uses a counter updates it for those itself (a put-with-signal adding
//! the same count, say). A write that reaches past its range, or one too long for its
//! notice to say its length, is not counted.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::segment::Segment;

/// One counted range.
#[derive(Debug, Clone)]
struct Counted {
    id: u64,
    watched: Range<usize>,
    counter: usize,
    unit: usize,
}

/// The counters of a segment (on the owner's segment object).
#[derive(Debug, Default)]
pub(crate) struct WriteCounters {
    counted: RwLock<Vec<Counted>>,
    /// How many counters there are: a write costs one load when there are none.
    live: AtomicUsize,
    next: AtomicU64,
}

impl WriteCounters {
    /// Counts a write of mapping bytes `[start, end)`; returns the counter words it moved.
    fn count(&self, segment: &Segment, start: usize, end: usize) -> Vec<usize> {
        if self.live.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let counted = self.counted.read().unwrap_or_else(PoisonError::into_inner);
        counted
            .iter()
            .filter(|c| c.watched.start <= start && end <= c.watched.end && start < end)
            .map(|c| {
                let word: &AtomicU64 = segment.mapping().atomic(c.counter);
                word.fetch_add(((end - start) / c.unit) as u64, Ordering::SeqCst);
                c.counter
            })
            .collect()
    }
}

/// A registered write counter; counting stops when it is dropped.
#[derive(Debug)]
pub struct WriteCounter {
    segment: Arc<Segment>,
    id: u64,
}

impl Drop for WriteCounter {
    fn drop(&mut self) {
        let counters = &self.segment.counters;
        let mut counted = counters
            .counted
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        counted.retain(|c| c.id != self.id);
        counters.live.store(counted.len(), Ordering::Release);
    }
}

impl Segment {
    /// Counts peers' writes that land within mapping bytes `watched` of this (the owner's)
    /// segment: each adds its length divided by `unit` to the `u64` at mapping offset
    /// `counter`. See the module documentation.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a range or word outside the mapping;
    /// [`Error::MisalignedAtomic`] for a counter not 8-byte aligned;
    /// [`Error::InvalidArgument`] for a zero unit or a counter inside the range.
    pub fn count_writes(
        self: &Arc<Self>,
        watched: Range<usize>,
        counter: usize,
        unit: usize,
    ) -> Result<WriteCounter> {
        let size = self.mapping().len();
        if watched.start > watched.end || watched.end > size || counter + 8 > size {
            return Err(Error::OutOfBounds {
                what: "write counter",
                needed: watched.end.max(counter + 8),
                available: size,
            });
        }
        if counter % 8 != 0 {
            return Err(Error::MisalignedAtomic {
                offset: counter,
                align: 8,
            });
        }
        if unit == 0 || (watched.start < counter + 8 && counter < watched.end) {
            return Err(Error::InvalidArgument(format!(
                "a write counter at {counter} of writes to {watched:?} in units of {unit} bytes"
            )));
        }
        let counters = &self.counters;
        let id = counters.next.fetch_add(1, Ordering::Relaxed);
        let mut counted = counters
            .counted
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        counted.push(Counted {
            id,
            watched,
            counter,
            unit,
        });
        counters.live.store(counted.len(), Ordering::Release);
        Ok(WriteCounter {
            segment: self.clone(),
            id,
        })
    }

    /// Records a peer's write of mapping bytes `[start, end)` that this PE's endpoint
    /// reported placed (`end` is `usize::MAX` when the notice could not say): counts it
    /// ([`Segment::count_writes`]) and wakes the waiters sleeping on it or on the counters
    /// it moved ([`Segment::wake_here`]; the same ordering contract).
    pub fn landed(&self, start: usize, end: usize) {
        for counter in self.counters.count(self, start, end) {
            self.wake_here(counter, counter + 8);
        }
        self.wake_here(start, end);
    }
}

impl DataPlane {
    /// Counts peers' fabric writes into `watched`, of this PE's heap, in `counter` (see the
    /// module documentation): each adds its length divided by `unit` bytes.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`], [`Error::MisalignedAtomic`] and [`Error::InvalidArgument`] as
    /// [`Segment::count_writes`] says, for views outside the heap among them.
    pub fn count_writes(
        &self,
        watched: SymSlice<'_, u8>,
        counter: SymSlice<'_, u64>,
        unit: usize,
    ) -> Result<WriteCounter> {
        let start = self.locate(watched, watched.len(), "counted writes")?;
        let counter = self.locate_atomic(counter)?;
        self.own_handle()
            .count_writes(start..start + watched.len(), counter, unit)
    }
}
