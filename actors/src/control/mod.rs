//! The control plane: how PEs reach the job's root to form the job, run allgathers (heap
//! allocation checks, later team creation) and learn of lost peers. Data never travels here.

pub mod hub;
pub mod link;
pub mod tcp;
pub mod wire;

pub use hub::{HubNews, HubReport};
pub use link::{local_job, Link};
pub use tcp::{connect, RootServer};
