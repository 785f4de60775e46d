//! ferroshmem's engine without CUDA and without actors.
//!
//! It owns the symmetric heap (segments in shared memory, the deterministic allocator, typed
//! handles) and the data plane: put/get, atomics, signals, waits and barriers that go straight
//! from the caller to a peer's memory. The `ferroshmem-actors` crate builds a job out of these
//! pieces; users normally reach them through the `ferroshmem` facade.

pub mod amo;
mod amo_nbi;
pub mod barrier;
pub mod collectives;
pub mod config;
pub mod context;
pub mod cpus;
pub mod data_plane;
pub mod doorbell;
pub mod error;
pub mod exchange;
pub mod fd_passing;
pub mod health;
pub mod heap;
pub mod landed;
pub mod landing;
pub mod lock;
mod post;
mod query;
pub mod rma;
mod rma_blocked;
pub mod route;
pub mod segment;
pub mod shared_memory;
pub mod signal;
pub mod team;
pub mod wait;
mod wait_vector;

pub use amo::{AtomicInt, AtomicWord};
pub use collectives::{
    BitwiseReducible, Collective, Complex32, Complex64, LongDouble, ReduceOp, Reducible,
};
pub use context::{Context, ContextOptions};
pub use data_plane::{DataPlane, DataPlaneParts};
pub use error::{Error, GpuError, Result};
pub use exchange::{Exchange, ExchangeFuture};
pub use health::Health;
pub use heap::{Allocation, HeapAllocator, HeapId, SymBuffer, SymSlice};
pub use landed::WriteCounter;
pub use query::{LIBRARY_NAME, SPEC_VERSION};
pub use segment::Segment;
pub use signal::SignalOp;
pub use team::{Team, TeamConfig, Teams, MIN_PIPELINE_BYTES, MISMATCH_GRACE};
pub use wait::{Cmp, Wait, WaitWord};
