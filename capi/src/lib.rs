//! # ferroshmem-c
//!
//! OpenSHMEM 1.5's C API over ferroshmem, as a shared and a static library
//! (`libferroshmem_c.so`, `libferroshmem_c.a`) with `shmem.h` and `shmemx.h` (in `include/`),
//! so that existing OpenSHMEM programs build and run on ferroshmem with their names changed
//! only (`ferroshmem cc`, `ferroshmem run -np N`).
//!
//! ## Layout
//!
//! One module per family of routines, each exporting the C symbols of its family; the typed
//! families are generated per type from OpenSHMEM's type tables (a module per type). Every
//! routine is a thin body over the Rust API: [`state`] holds this process's PE, turns the C
//! caller's pointers into symmetric views, and runs each operation to its end, and [`raw`]
//! is the one module that reads the caller's memory through raw pointers.
//!
//! ## Errors
//!
//! OpenSHMEM's C routines return no errors. Where the specification leaves an outcome
//! undefined (an address outside the symmetric heap, a PE out of range, a lost peer, a
//! call before `shmem_init`), the routine prints its name, the error and the PE, then ends
//! the job with a non-zero status: never a silent corruption, never a hang.

pub mod amo;
pub mod amo_deprecated;
pub mod collectives;
pub mod ctx;
pub mod extras;
pub mod locks;
pub mod memory;
mod raw;
pub mod rma;
pub mod setup;
pub mod signals;
pub mod state;
pub mod teams;
pub mod types;
pub mod waits;
