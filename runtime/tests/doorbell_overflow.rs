//! Once more waiters have slept at once than the segment header has watch slots, later timed
//! waits must still time out on their own: the doorbell keeps ticking while anyone sleeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroshmem_runtime::heap::{Allocation, HeapId, SymBuffer};
use ferroshmem_runtime::route::Route;
use ferroshmem_runtime::segment::WATCH_SLOTS;
use ferroshmem_runtime::{Cmp, DataPlane, DataPlaneParts, Error, Health, Segment};
use tokio::time::{sleep, timeout};

/// One PE whose waits sleep after 50 µs of spinning.
fn one_pe() -> Arc<DataPlane> {
    let seg = Arc::new(Segment::create(0, 1 << 20).expect("segment"));
    Arc::new(
        DataPlane::new(DataPlaneParts {
            my_pe: 0,
            heap: HeapId(1),
            routes: vec![Route::Mapped(seg)],
            remote: None,
            nodes: vec![0],
            machine_pes: 1,
            health: Arc::new(Health::new()),
            spin: Duration::from_micros(50),
        })
        .expect("data plane"),
    )
}

/// A view of the `u64` at heap offset `offset` (never freed: the test owns no allocator).
fn word(offset: usize) -> SymBuffer<u64> {
    SymBuffer::from_allocation(Allocation::new(HeapId(1), offset, 8), 1).expect("view")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_wait_times_out_after_more_sleepers_than_watch_slots() {
    let dp = one_pe();
    let sleepers = WATCH_SLOTS + 8;
    let waiters: Vec<_> = (0..sleepers)
        .map(|_| {
            let dp = dp.clone();
            tokio::spawn(async move {
                let flag = word(0);
                let r = dp
                    .wait_until(&flag, Cmp::Eq, 1)
                    .timeout(Duration::from_secs(20))
                    .await;
                std::mem::forget(flag);
                r
            })
        })
        .collect();
    // Long past their spin: every waiter sleeps, the last ones watching everything.
    sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "a waiter ended");
    let flag = word(0);
    dp.atomic_set(&flag, 1, 0).await.expect("set");
    std::mem::forget(flag);
    for w in waiters {
        let r = timeout(Duration::from_secs(20), w).await;
        assert_eq!(r.expect("a released waiter hung").expect("task"), Ok(1));
    }
    // Nobody sleeps now: the doorbell goes back to sleeping without a tick.
    sleep(Duration::from_millis(100)).await;
    let quiet = word(8);
    let start = Instant::now();
    // The outer bound polls the wait when it expires, which then notices its own timeout:
    // on time means well before that.
    let r = timeout(
        Duration::from_secs(2),
        dp.wait_until(&quiet, Cmp::Eq, 1)
            .timeout(Duration::from_millis(100)),
    )
    .await;
    let took = start.elapsed();
    std::mem::forget(quiet);
    assert!(
        matches!(r, Ok(Err(Error::Timeout { .. }))),
        "expected a timeout, got {r:?}"
    );
    assert!(
        (Duration::from_millis(100)..Duration::from_secs(1)).contains(&took),
        "the 100 ms wait timed out after {took:?}: the doorbell did not tick"
    );
}
