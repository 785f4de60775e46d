//! The memory the agent acts on: [`HeapMemory`], a PE's symmetric heap as the target side
//! performs requests on it (the GPU heap through the copy engines and an atomic kernel, or
//! host memory), and [`HostMemory`], its host-memory implementation: a word array with
//! atomics, which is also the backing of the agent's tests.

use std::sync::atomic::{AtomicU64, Ordering};

use ferroshmem_runtime::{Error, Result};

use super::request::{AmoOp, Width};

/// A PE's symmetric heap, as the agent's target side performs requests on it. Addresses are
/// the heap's own (a GPU heap's virtual addresses, say); the agent has checked every range
/// it passes against [`HeapMemory::base`] and [`HeapMemory::size`] (and an atomic's
/// alignment) before it calls. The calls come from the agent's service thread and may block
/// for as long as a copy takes.
pub trait HeapMemory: Send + Sync + 'static {
    /// The heap's first address.
    fn base(&self) -> u64;
    /// The heap's size in bytes.
    fn size(&self) -> usize;
    /// Copies `out.len()` bytes at `addr` into `out`.
    ///
    /// # Errors
    /// Whatever the memory's transport reports; the request then ends with
    /// [`Status::RemoteOperation`](super::Status::RemoteOperation).
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()>;
    /// Copies `data` to `addr`; visible to the heap's owner once it returns.
    ///
    /// # Errors
    /// As [`HeapMemory::read`].
    fn write(&self, addr: u64, data: &[u8]) -> Result<()>;
    /// Starts copying `data` to `addr`, visible to the heap's owner once
    /// [`HeapMemory::flush`] returns; overlapping deferred writes land in call order, and a
    /// later read or atomic sees them, but the owner may see them land in any order before
    /// the flush returns (see [`HeapMemory::write_ordered`]). The agent defers the writes of
    /// one batch of requests and flushes before it replies to any of them, so a GPU heap
    /// waits for its copies once per batch.
    /// `data` is the caller's again once this returns. The default writes at once.
    ///
    /// # Errors
    /// As [`HeapMemory::read`].
    fn write_deferred(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.write(addr, data)
    }
    /// [`HeapMemory::write_deferred`] of `len` bytes that `fill(offset, out)` provides, a
    /// piece at a time (`out` is to hold bytes `offset..offset + out.len()` of them): a GPU
    /// heap has them written straight into its staging memory, with no copy of their own.
    /// The default fills one buffer.
    ///
    /// # Errors
    /// As [`HeapMemory::read`], and whatever `fill` returns (nothing more is written then).
    fn write_deferred_from(
        &self,
        addr: u64,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let mut data = vec![0; len];
        fill(0, &mut data)?;
        self.write_deferred(addr, &data)
    }
    /// [`HeapMemory::write_deferred`] of the `len` bytes at byte `offset` of the agent's
    /// rings (a write request's payload, as it landed), copied straight from there where
    /// this heap can (a GPU heap that registered the rings' host memory with the driver):
    /// `None` where it cannot, and the caller writes them another way. The agent keeps those bytes as they
    /// are until the next [`HeapMemory::flush`] returns. The default cannot.
    fn write_deferred_from_ring(&self, addr: u64, offset: usize, len: usize) -> Option<Result<()>> {
        let _ = (addr, offset, len);
        None
    }
    /// As [`HeapMemory::write_deferred`], but the heap's owner sees this write only after
    /// every write deferred before it (a signal after the data it announces). The default
    /// flushes first.
    ///
    /// # Errors
    /// As [`HeapMemory::read`].
    fn write_ordered(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.flush()?;
        self.write_deferred(addr, data)
    }
    /// Waits until every deferred write is visible to the heap's owner.
    ///
    /// # Errors
    /// As [`HeapMemory::read`]: a write that failed here fails the agent's service (its
    /// requests were taken; the job fails rather than say they were performed).
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    /// Applies `op` atomically to the `width`-byte word at `addr` (aligned to its width),
    /// as [`AmoOp::apply`] defines it, and returns the old value.
    ///
    /// # Errors
    /// As [`HeapMemory::read`].
    fn atomic(&self, addr: u64, width: Width, op: AmoOp) -> Result<u64>;
}

/// A heap in host memory: `size` bytes (rounded up to whole words) at the made-up address
/// `base`, every access through atomics (no unsafe). Bytewise accesses to a partial word
/// merge into it with a compare-and-swap, so they never tear a concurrent atomic.
#[derive(Debug)]
pub struct HostMemory {
    base: u64,
    size: usize,
    words: Box<[AtomicU64]>,
}

impl HostMemory {
    /// A zeroed heap of `size` bytes at address `base` (which must be 8-byte aligned).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a misaligned base or a range that overflows.
    pub fn new(base: u64, size: usize) -> Result<HostMemory> {
        if base % 8 != 0 || base.checked_add(size as u64).is_none() {
            return Err(Error::InvalidArgument(format!(
                "a host heap of {size} bytes at {base:#x}: the base must be 8-byte aligned and the range fit"
            )));
        }
        let words = (0..size.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        Ok(HostMemory { base, size, words })
    }

    /// The word holding heap byte `offset`, and the byte's place in it.
    fn word(&self, offset: usize) -> Result<(&AtomicU64, usize)> {
        match self.words.get(offset / 8) {
            Some(w) => Ok((w, offset % 8)),
            None => Err(Error::OutOfBounds {
                what: "host heap",
                needed: offset + 1,
                available: self.size,
            }),
        }
    }

    /// The heap offset of `len` bytes at `addr`, checked.
    fn offset(&self, addr: u64, len: usize) -> Result<usize> {
        let offset = addr
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|o| o.checked_add(len).is_some_and(|end| end <= self.size));
        offset.ok_or(Error::OutOfBounds {
            what: "host heap",
            needed: len,
            available: self.size,
        })
    }
}

impl HeapMemory for HostMemory {
    fn base(&self) -> u64 {
        self.base
    }

    fn size(&self) -> usize {
        self.size
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let start = self.offset(addr, out.len())?;
        let mut i = 0;
        while i < out.len() {
            let (word, at) = self.word(start + i)?;
            let bytes = word.load(Ordering::Acquire).to_le_bytes();
            let n = (8 - at).min(out.len() - i);
            out[i..i + n].copy_from_slice(&bytes[at..at + n]);
            i += n;
        }
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let start = self.offset(addr, data.len())?;
        let mut i = 0;
        while i < data.len() {
            let (word, at) = self.word(start + i)?;
            let n = (8 - at).min(data.len() - i);
            let part = &data[i..i + n];
            if n == 8 {
                let mut whole = [0; 8];
                whole.copy_from_slice(part);
                word.store(u64::from_le_bytes(whole), Ordering::Release);
            } else {
                let merge = |old: u64| {
                    let mut bytes = old.to_le_bytes();
                    bytes[at..at + n].copy_from_slice(part);
                    Some(u64::from_le_bytes(bytes))
                };
                let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, merge);
            }
            i += n;
        }
        Ok(())
    }

    fn atomic(&self, addr: u64, width: Width, op: AmoOp) -> Result<u64> {
        let size = width.bytes() as usize;
        let start = self.offset(addr, size)?;
        if start % size != 0 {
            return Err(Error::MisalignedAtomic {
                offset: start,
                align: size,
            });
        }
        let (word, at) = self.word(start)?;
        let shift = 8 * at as u32;
        let mask = width.mask() << shift;
        let mut old = 0;
        let _ = word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
            old = (w & mask) >> shift;
            let new = op.apply(old, width);
            Some((w & !mask) | (new << shift))
        });
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_land_where_written_across_words() {
        let m = HostMemory::new(0x1000, 64).expect("heap");
        let data: Vec<u8> = (1..=21).collect();
        m.write(0x1003, &data).expect("write");
        let mut back = vec![0; 25];
        m.read(0x1001, &mut back).expect("read");
        assert_eq!(&back[..2], &[0, 0]);
        assert_eq!(&back[2..23], &data[..]);
        assert_eq!(&back[23..], &[0, 0]);
    }

    #[test]
    fn four_byte_atomics_leave_the_other_half_alone() {
        let m = HostMemory::new(0, 16).expect("heap");
        m.write(0, &u64::MAX.to_le_bytes()).expect("write");
        let old = m.atomic(4, Width::W4, AmoOp::FetchAdd(1)).expect("amo");
        assert_eq!(old, 0xFFFF_FFFF);
        let mut back = [0; 8];
        m.read(0, &mut back).expect("read");
        assert_eq!(u64::from_le_bytes(back), 0x0000_0000_FFFF_FFFF);
        assert_eq!(m.atomic(8, Width::W8, AmoOp::Swap(5)).expect("amo"), 0);
        assert_eq!(m.atomic(8, Width::W8, AmoOp::Fetch).expect("amo"), 5);
    }

    #[test]
    fn ranges_outside_the_heap_and_misaligned_words_are_refused() {
        let m = HostMemory::new(0x100, 16).expect("heap");
        assert!(m.write(0xF8, &[1]).is_err());
        assert!(m.write(0x10F, &[1, 2]).is_err());
        assert!(m.read(0x110, &mut [0]).is_err());
        assert!(matches!(
            m.atomic(0x104, Width::W8, AmoOp::Fetch),
            Err(Error::MisalignedAtomic { .. })
        ));
        assert!(HostMemory::new(3, 8).is_err());
    }
}
