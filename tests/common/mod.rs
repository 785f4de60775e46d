//! Shared helpers of the integration tests.

#![allow(dead_code)]

pub mod c_programs;
pub mod collective_scenarios;
pub mod cpus;
pub mod host_pe;
pub mod netns;
pub mod prometheus;
pub mod scenarios;
pub mod slurm;
pub mod uts_hosts;

/// A multi-thread tokio runtime of 4 workers, for tests that drive jobs themselves.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}
