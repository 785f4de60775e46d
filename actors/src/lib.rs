//! ferroshmem's actors: the PE actor that owns each PE's segment and serves its control
//! messages, the control plane (bootstrap root, allgathers, lost-peer notices), and the ways
//! to start a job ([`run_local`], [`init`], [`run`]).

mod actor;
pub mod control;
mod exit;
mod gpu;
mod launch;
pub mod launch_env;
mod pe;
mod pmix;
mod rendezvous;
pub mod routes;
mod segment_exchange;
mod team;
mod threads;

pub use exit::{exit_now, exiting};
pub use launch::{init, init_alone, init_alone_with, init_with, run, run_local};
pub use pe::{FreeError, MallocHints, Pe};
pub use team::JoinOptions;
pub use threads::{init_thread, ThreadLevel};
