//! `sync_all` and `barrier_all` over the segments' header flags: a dissemination barrier,
//! ⌈log₂ n⌉ rounds; in round k PE i signals PE (i + 2^k) mod n and waits for PE
//! (i − 2^k) mod n. Flags are monotonic counters, so no reset is needed between barriers.

use std::sync::atomic::Ordering;

use crate::data_plane::DataPlane;
use crate::error::Result;
use crate::segment::Segment;
use crate::wait::Wait;

impl DataPlane {
    /// Waits until every PE has called `sync_all` (`shmem_sync_all`): a pure synchronization,
    /// it completes no outstanding operation.
    ///
    /// Collective: every PE calls it, one call at a time per PE.
    pub async fn sync_all(&self) -> Result<()> {
        let started = self.traffic.barrier_start();
        let result = self.dissemination().await;
        self.traffic.barrier_done(started, &result);
        result
    }

    /// The dissemination barrier behind [`DataPlane::sync_all`].
    async fn dissemination(&self) -> Result<()> {
        let n = self.n_pes();
        let epoch = self.barrier_epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let own = self.own_segment();
        let mut distance = 1;
        let mut round = 0;
        while distance < n {
            let to = &self.segments[(self.my_pe + distance) % n];
            to.barrier_flag(round).fetch_add(1, Ordering::SeqCst);
            let at = Segment::barrier_flag_offset(round);
            to.wake_watchers(at, at + 8);
            let flag = own.barrier_flag(round);
            Wait::new(
                self,
                "barrier",
                at..at + 8,
                Ok(move || (flag.load(Ordering::Acquire) >= epoch).then_some(())),
            )
            .await?;
            distance *= 2;
            round += 1;
        }
        self.health.check()
    }

    /// Completes this PE's outstanding operations, then synchronizes every PE
    /// (`shmem_barrier_all`): after it, every PE sees every put issued before it.
    pub async fn barrier_all(&self) -> Result<()> {
        self.quiet().await?;
        self.sync_all().await
    }
}
