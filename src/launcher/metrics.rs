//! The PEs' metrics endpoints, as the launcher announces them: when
//! `FERROSHMEM_METRICS_ADDR` is set, each PE process serves `/metrics` on that port plus its
//! local rank (which the PEs work out themselves from the inherited variable), and the
//! launcher checks the ports fit and prints every address before starting the PEs.

use ferroshmem_observability::{address_for_rank, address_from_env, METRICS_ADDR_VAR};

use super::output::status;
use crate::Error;

/// Checks `FERROSHMEM_METRICS_ADDR` for a job of `n_pes` PEs on this node and prints where
/// each PE will serve its metrics; does nothing when metrics are off.
///
/// # Errors
/// [`Error::Config`] when the variable cannot be read or a PE's port would pass 65535.
pub(crate) fn announce(n_pes: usize) -> Result<(), Error> {
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
    address_for_rank(base, n_pes.saturating_sub(1)).map_err(config)?;
    for rank in 0..n_pes {
        let address = address_for_rank(base, rank).map_err(config)?;
        status(format_args!(
            "PE {rank} serves metrics at http://{address}/metrics"
        ));
    }
    Ok(())
}
