//! [`RowsPool`]: the device tables of dispatches' handles (where each token landed on each PE),
//! kept for reuse from one call to the next.
//!
//! A handle needs its own table (it lives until its combine, and a caller may hold several),
//! but allocating device memory in every dispatch costs tens of microseconds of host time,
//! and under CUDA MPS the server allocates for one PE at a time: with 8 PEs on a GPU their
//! calls started up to half a millisecond apart, each waiting for the others' allocations.
//! A table given back when its handle drops serves the next dispatch instead.

use std::sync::{Arc, Mutex, PoisonError};

use ferroshmem_gpu::cudarc::driver::CudaContext;
use ferroshmem_gpu::DeviceBuffer;
use ferroshmem_runtime::Result;

/// Tables kept idle at most (more are freed): as many as handles a caller usually holds.
const IDLE_TABLES: usize = 4;

/// The idle tables of one buffer, each of `len` entries (the most a dispatch writes).
#[derive(Debug, Clone)]
pub(crate) struct RowsPool {
    idle: Arc<Mutex<Vec<DeviceBuffer<i32>>>>,
    len: usize,
}

impl RowsPool {
    /// A pool of tables of `len` entries (at least 1).
    pub(crate) fn new(len: usize) -> Self {
        RowsPool {
            idle: Arc::default(),
            len: len.max(1),
        }
    }

    /// An idle table, or a new one of the pool's length.
    ///
    /// # Errors
    /// The driver's, when a new table cannot be allocated.
    pub(crate) fn take(&self, ctx: &Arc<CudaContext>) -> Result<RowsTable> {
        let idle = self.lock().pop();
        let table = match idle {
            Some(table) => table,
            None => DeviceBuffer::new(ctx, self.len)?,
        };
        Ok(RowsTable {
            table: Some(table),
            pool: self.clone(),
        })
    }

    /// Tables idle now.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<DeviceBuffer<i32>>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A table taken from a [`RowsPool`], given back to it when dropped.
#[derive(Debug)]
pub(crate) struct RowsTable {
    table: Option<DeviceBuffer<i32>>,
    pool: RowsPool,
}

impl RowsTable {
    /// The table's device address, for the kernels.
    pub(crate) fn device_ptr(&self) -> u64 {
        self.table.as_ref().map_or(0, DeviceBuffer::device_ptr)
    }
}

impl Drop for RowsTable {
    fn drop(&mut self) {
        let Some(table) = self.table.take() else {
            return;
        };
        let mut idle = self.pool.lock();
        if idle.len() < IDLE_TABLES {
            idle.push(table);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU's context, or `None` (the test then says so and passes) where there is none.
    fn context() -> Option<Arc<CudaContext>> {
        match ferroshmem_gpu::detect().and_then(|_| {
            CudaContext::new(0).map_err(|e| ferroshmem_runtime::Error::no_gpu(e.to_string()))
        }) {
            Ok(ctx) => Some(ctx),
            Err(e) => {
                eprintln!("skipped: no usable GPU here ({e})");
                None
            }
        }
    }

    #[test]
    fn a_dropped_table_serves_the_next_take_and_idle_ones_are_bounded() {
        let Some(ctx) = context() else { return };
        let pool = RowsPool::new(1024);
        let first = pool.take(&ctx).unwrap();
        let addr = first.device_ptr();
        assert_ne!(addr, 0);
        drop(first);
        assert_eq!(pool.idle(), 1);
        let again = pool.take(&ctx).unwrap();
        assert_eq!(again.device_ptr(), addr, "the given-back table is reused");
        assert_eq!(pool.idle(), 0);
        let held: Vec<RowsTable> = (0..IDLE_TABLES + 2)
            .map(|_| pool.take(&ctx).unwrap())
            .collect();
        let mut addrs: Vec<u64> = held.iter().map(RowsTable::device_ptr).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), held.len(), "tables held at once are distinct");
        drop(held);
        drop(again);
        assert_eq!(pool.idle(), IDLE_TABLES);
    }
}
