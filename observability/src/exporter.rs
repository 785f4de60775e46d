//! The Prometheus exporter of a process: the recorder (`metrics-exporter-prometheus`) that
//! every ferroshmem metric is registered with, the traffic blocks it sums at each scrape, the
//! `FERROSHMEM_METRICS_ADDR` setting, and the `/metrics` endpoint ([`crate::endpoint`]).
//!
//! One exporter serves every PE of the process (all of a `run_local` job's PEs, told apart by
//! their `pe` label). The recorder is also offered to the `metrics` facade as the global
//! recorder, so that an application's own `metrics::counter!` calls appear on the same
//! endpoint; if the application installed another recorder first, ferroshmem's metrics are
//! still served here.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use metrics::Recorder;
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::names::{self, Kind, DURATION_BUCKETS};
use crate::traffic::{Source, Traffic};

/// The variable that turns the endpoint on: a port (`9464`, bound on 127.0.0.1) or
/// `host:port` (`0.0.0.0:9464`). A launched PE listens on that port plus its local rank.
pub const METRICS_ADDR_VAR: &str = "FERROSHMEM_METRICS_ADDR";

/// Why metrics could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// `FERROSHMEM_METRICS_ADDR` cannot be used.
    #[error("{METRICS_ADDR_VAR}: {0}")]
    Address(String),
    /// The endpoint could not listen.
    #[error("cannot serve metrics on {address} ({METRICS_ADDR_VAR}): {message}")]
    Listen {
        /// The address asked for.
        address: SocketAddr,
        /// What the operating system said.
        message: String,
    },
    /// The recorder could not be built.
    #[error("cannot set up the metrics recorder: {0}")]
    Setup(String),
}

/// The process's exporter: see the module documentation.
pub struct Exporter {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
    sources: Mutex<Vec<Source>>,
    endpoint: Mutex<Option<SocketAddr>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("endpoint", &self.endpoint())
            .finish_non_exhaustive()
    }
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();
static INSTALLING: Mutex<()> = Mutex::new(());

/// The exporter, if [`install_exporter`] ran.
pub fn installed() -> Option<&'static Exporter> {
    EXPORTER.get()
}

/// Installs the process's exporter (once; later calls return the same one). PEs created
/// afterwards record metrics; PEs created before record nothing.
pub fn install_exporter() -> Result<&'static Exporter, MetricsError> {
    let _once = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(exporter) = EXPORTER.get() {
        return Ok(exporter);
    }
    let recorder = PrometheusBuilder::new()
        .add_global_label(names::NODE, hostname())
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            &DURATION_BUCKETS,
        )
        .map_err(|e| MetricsError::Setup(e.to_string()))?
        .build_recorder();
    let handle = recorder.handle();
    let recorder = Arc::new(recorder);
    for m in names::ALL {
        let (name, unit, help) = (m.name.into(), Some(m.unit), m.help.into());
        match m.kind {
            Kind::Counter => recorder.describe_counter(name, unit, help),
            Kind::Gauge => recorder.describe_gauge(name, unit, help),
            Kind::Histogram => recorder.describe_histogram(name, unit, help),
        }
    }
    if metrics::set_global_recorder(recorder.clone()).is_err() {
        tracing::debug!(
            "another metrics recorder is installed: ferroshmem serves only its own metrics"
        );
    }
    Ok(EXPORTER.get_or_init(|| Exporter {
        recorder,
        handle,
        sources: Mutex::new(Vec::new()),
        endpoint: Mutex::new(None),
    }))
}

impl Exporter {
    pub(crate) fn recorder(&self) -> &PrometheusRecorder {
        &self.recorder
    }

    pub(crate) fn add_source(&self, traffic: &Traffic) {
        if let Some(source) = traffic.source() {
            let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
            sources.retain(Source::is_live);
            sources.push(source);
        }
    }

    /// Sums the traffic counters of every live PE into the recorder and renders the
    /// Prometheus text exposition, as a scrape of `/metrics` returns it.
    pub fn render(&self) -> String {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(Source::publish);
        self.handle.render()
    }

    /// Drains recorded histogram samples into their buckets (the endpoint calls it every few
    /// seconds, so that samples do not pile up between scrapes).
    pub(crate) fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// Where the `/metrics` endpoint listens, once [`Exporter::serve`] started it.
    pub fn endpoint(&self) -> Option<SocketAddr> {
        *self.endpoint.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `GET /metrics` on `address` (port 0 picks a free port) from a thread of its
    /// own, for the rest of the process's life, and returns the bound address. The process
    /// has one endpoint: when it already serves, this returns that endpoint's address.
    pub fn serve(&'static self, address: SocketAddr) -> Result<SocketAddr, MetricsError> {
        let mut endpoint = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(bound) = *endpoint {
            return Ok(bound);
        }
        let listen_error = |e: std::io::Error| MetricsError::Listen {
            address,
            message: e.to_string(),
        };
        let listener = TcpListener::bind(address).map_err(listen_error)?;
        let bound = listener.local_addr().map_err(listen_error)?;
        crate::endpoint::spawn(listener, self).map_err(listen_error)?;
        tracing::info!(%bound, "metrics endpoint at http://{bound}/metrics");
        *endpoint = Some(bound);
        Ok(bound)
    }
}

/// Reads an endpoint address: a bare port means 127.0.0.1.
pub fn parse_address(text: &str) -> Result<SocketAddr, MetricsError> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        MetricsError::Address(format!(
            "{text:?} is neither a port (9464) nor an IP address and port (0.0.0.0:9464, [::1]:9464)"
        ))
    })
}

/// The address of the PE with local rank `local_rank`: `base`'s port plus the rank (port 0
/// stays 0: every PE then picks a free port).
pub fn address_for_rank(base: SocketAddr, local_rank: usize) -> Result<SocketAddr, MetricsError> {
    if base.port() == 0 {
        return Ok(base);
    }
    let port = u16::try_from(usize::from(base.port()) + local_rank).map_err(|_| {
        MetricsError::Address(format!(
            "port {} + local rank {local_rank} is past 65535",
            base.port()
        ))
    })?;
    Ok(SocketAddr::new(base.ip(), port))
}

/// The endpoint address `FERROSHMEM_METRICS_ADDR` asks for (plus `local_rank` for a launched
/// PE); `Ok(None)` when the variable is unset or empty (metrics off).
pub fn address_from_env(local_rank: usize) -> Result<Option<SocketAddr>, MetricsError> {
    match std::env::var(METRICS_ADDR_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(MetricsError::Address("not valid UTF-8".into()))
        }
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => address_for_rank(parse_address(&text)?, local_rank).map(Some),
    }
}

/// Installs the exporter and starts the endpoint if `FERROSHMEM_METRICS_ADDR` asks for one
/// (at its port plus `local_rank`); returns the endpoint's address, or `None` when metrics
/// are off.
pub fn start_from_env(local_rank: usize) -> Result<Option<SocketAddr>, MetricsError> {
    match address_from_env(local_rank)? {
        None => Ok(None),
        Some(address) => install_exporter()?.serve(address).map(Some),
    }
}

/// This host's name, the `node` label.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_or_fail_typed() {
        assert_eq!(
            parse_address("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_address(" 0.0.0.0:9464 ").unwrap(),
            "0.0.0.0:9464".parse().unwrap()
        );
        assert_eq!(
            parse_address("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        for bad in ["", "x", "70000", "localhost:9464", "1.2.3.4", "-1"] {
            assert!(
                matches!(parse_address(bad), Err(MetricsError::Address(_))),
                "{bad}"
            );
        }
        let base = parse_address("9464").unwrap();
        assert_eq!(address_for_rank(base, 3).unwrap().port(), 9467);
        assert_eq!(
            address_for_rank(parse_address("0").unwrap(), 3)
                .unwrap()
                .port(),
            0
        );
        assert!(address_for_rank(parse_address("65535").unwrap(), 1).is_err());
    }
}
