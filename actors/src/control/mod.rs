//! The control plane: how PEs reach the job's root to form the job, run allgathers (heap
//! allocation checks, later team creation) and learn of lost peers. Data never travels here.

pub mod hub;
pub mod link;
pub mod outbox;
pub mod tcp;
pub mod wire;

pub use hub::{HubNews, HubReport};
pub use link::{local_job, Link};
pub use tcp::{connect, RootServer};

/// The instant `timeout` from now; a timeout too long for the clock (beyond any setting's
/// year: see `MAX_SETTING_DURATION`) ends a year from now, which no job outlives.
pub(crate) fn deadline_after(timeout: std::time::Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(timeout)
        .unwrap_or(now + ferroshmem_runtime::config::MAX_SETTING_DURATION)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_timeout_too_long_for_the_clock_ends_a_year_from_now() {
        let now = tokio::time::Instant::now();
        let year = ferroshmem_runtime::config::MAX_SETTING_DURATION;
        let end = super::deadline_after(Duration::MAX);
        assert!(end >= now + year && end < now + year + Duration::from_secs(60));
        let soon = super::deadline_after(Duration::from_secs(5));
        assert!(soon >= now + Duration::from_secs(5) && soon < end);
    }
}
