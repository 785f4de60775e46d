//! # ferroshmem
//!
//! NVSHMEM's programming model — OpenSHMEM's partitioned global address space over a
//! symmetric heap — as an embeddable async Rust runtime.
//!
//! Every processing element (PE) owns a segment of the symmetric heap; a collective
//! [`Pe::malloc`] returns a [`SymBuffer`] that names the same offset on every PE, and one-sided
//! operations ([`put`](DataPlane::put), [`get`](DataPlane::get), atomics, signals) reach any
//! PE's copy directly. Blocking OpenSHMEM calls are awaited futures here; `_nbi` calls return
//! at once and complete at [`quiet`](DataPlane::quiet).
//!
//! The same program runs as n PEs inside one process ([`run_local`], no launcher needed) or as
//! one PE per process under `ferroshmem run`, `mpirun` or `srun` ([`run`] picks).
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> ferroshmem::Result<()> {
//!     ferroshmem::run(4, |pe| async move {
//!         let dest = pe.malloc::<u64>(1).await?;
//!         let next = (pe.my_pe() + 1) % pe.n_pes();
//!         pe.p(&dest, pe.my_pe() as u64, next).await?;
//!         pe.barrier_all().await?;
//!         println!("PE {} received {}", pe.my_pe(), pe.g(&dest, pe.my_pe()).await?);
//!         pe.free(dest).await?;
//!         Ok::<_, ferroshmem::Error>(())
//!     })
//!     .await?
//!     .into_iter()
//!     .collect()
//! }
//! ```

pub mod launcher;

pub use ferroshmem_actors::launch_env;
pub use ferroshmem_actors::{
    init, init_thread, init_with, run, run_local, FreeError, JoinOptions, MallocHints, Pe,
    ThreadLevel,
};
pub use ferroshmem_ep as ep;
pub use ferroshmem_gpu as gpu;
pub use ferroshmem_observability as observability;
pub use ferroshmem_runtime::config;
pub use ferroshmem_runtime::{
    AtomicInt, AtomicWord, Cmp, Context, ContextOptions, DataPlane, Error, GpuError, HeapId,
    Result, SignalOp, SymBuffer, SymSlice, Wait, WaitWord,
};
pub use ferroshmem_runtime::{
    BitwiseReducible, ReduceOp, Reducible, Team, TeamConfig, MIN_PIPELINE_BYTES, MISMATCH_GRACE,
};
