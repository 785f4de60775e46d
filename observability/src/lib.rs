//! ferroshmem's observability, used by every other ferroshmem crate and depending on none:
//! metric names ([`names`]), the cheap per-PE recording API ([`PeMetrics`], [`Traffic`]),
//! the Prometheus exporter and its `/metrics` endpoint ([`install_exporter`],
//! [`start_from_env`]), and the `tracing` set-up ([`init_tracing`]).
//!
//! Metrics are off by default: PEs record only once the exporter is installed, which
//! `FERROSHMEM_METRICS_ADDR` asks for.

pub mod endpoint;
mod exporter;
pub mod names;
mod op;
mod pe;
mod slot;
pub mod traffic;

pub use exporter::{
    address_for_rank, address_from_env, install_exporter, installed, parse_address, start_from_env,
    Exporter, MetricsError, METRICS_ADDR_VAR,
};
pub use pe::{HeapMemory, PeMetrics};
pub use traffic::{ErrorKind, Op, Traffic};

/// Installs a `tracing` subscriber writing to standard error, filtered by `RUST_LOG`
/// (default `warn`), in colour only on a terminal. Does nothing if a subscriber is already
/// installed. An event that cannot be written (standard error closed or full) is dropped:
/// the subscriber would otherwise report that with `eprintln!`, which panics then, in
/// whatever task logged.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .log_internal_errors(false)
        .try_init();
}
