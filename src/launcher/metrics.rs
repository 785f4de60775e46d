//! The PEs' metrics endpoints, as the launcher announces them: when
//! `FERROSHMEM_METRICS_ADDR` is set, each PE process serves `/metrics` on its own host at
//! that port plus its local rank (which the PEs work out themselves from the inherited
//! variable), and the launcher checks the ports fit and prints every address before starting
//! the PEs.

use ferroshmem_observability::{address_for_rank, address_from_env, METRICS_ADDR_VAR};

use super::hosts::Placement;
use super::output::status;
use crate::Error;

/// Checks `FERROSHMEM_METRICS_ADDR` for a job placed as `placements` and prints where each
/// PE will serve its metrics (on its own host, at the port plus its local rank); does
/// nothing when metrics are off.
///
/// # Errors
/// [`Error::Config`] when the variable cannot be read or a PE's port would pass 65535.
pub(crate) fn announce(placements: &[Placement]) -> Result<(), Error> {
    let config = |e: ferroshmem_observability::MetricsError| Error::Config(e.to_string());
    let Some(base) = address_from_env(0).map_err(config)? else {
        return Ok(());
    };
    if base.port() == 0 {
        status(format_args!(
            "{METRICS_ADDR_VAR}={base}: each PE serves /metrics on a free port of its own (RUST_LOG=info shows which)"
        ));
        return Ok(());
    }
    let most = placements.iter().map(|p| p.local_rank).max().unwrap_or(0);
    address_for_rank(base, most).map_err(config)?;
    for (rank, placement) in placements.iter().enumerate() {
        let address = address_for_rank(base, placement.local_rank).map_err(config)?;
        match &placement.host {
            None => status(format_args!(
                "PE {rank} serves metrics at http://{address}/metrics"
            )),
            Some(host) => status(format_args!(
                "PE {rank} serves metrics on {host} at http://{address}/metrics"
            )),
        }
    }
    Ok(())
}
