//! ferroshmem's observability: tracing set-up (and, later, metric names and the Prometheus
//! exporter). Depends on no other ferroshmem crate.

/// Installs a `tracing` subscriber writing to standard error, filtered by `RUST_LOG`
/// (default `warn`). Does nothing if a subscriber is already installed.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
