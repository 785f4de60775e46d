//! A wait that has gone to sleep still notices its timeout (the doorbell ticks while anyone
//! sleeps), and one woken by a write returns the written value.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroshmem_runtime::heap::{Allocation, HeapId, SymBuffer};
use ferroshmem_runtime::route::Route;
use ferroshmem_runtime::{Cmp, DataPlane, DataPlaneParts, Error, Health, Segment};

fn one_pe() -> (DataPlane, SymBuffer<u64>) {
    let seg = Arc::new(Segment::create(0, 1 << 20).expect("segment"));
    let dp = DataPlane::new(DataPlaneParts {
        my_pe: 0,
        heap: HeapId(1),
        routes: vec![Route::Mapped(seg)],
        remote: None,
        nodes: vec![0],
        machine_pes: 1,
        health: Arc::new(Health::new()),
        spin: Duration::from_micros(50),
    })
    .expect("data plane");
    let buf = SymBuffer::from_allocation(Allocation::new(HeapId(1), 0, 64), 1).expect("buffer");
    (dp, buf)
}

#[tokio::test]
async fn a_sleeping_wait_times_out() {
    let (dp, buf) = one_pe();
    let start = Instant::now();
    let r = dp
        .wait_until(&buf, Cmp::Eq, 42)
        .timeout(Duration::from_millis(30))
        .await;
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(start.elapsed() >= Duration::from_millis(30));
    std::mem::forget(buf);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_wait_wakes_on_a_write() {
    let (dp, buf) = one_pe();
    let dp = Arc::new(dp);
    let writer = {
        let dp = dp.clone();
        let view =
            SymBuffer::<u64>::from_allocation(Allocation::new(HeapId(1), 0, 64), 1).expect("view");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            dp.atomic_set(&view, 7, 0).await.expect("set");
            std::mem::forget(view);
        })
    };
    let v = dp
        .wait_until(&buf, Cmp::Eq, 7)
        .timeout(Duration::from_secs(10))
        .await;
    assert_eq!(v, Ok(7));
    writer.await.expect("writer");
    std::mem::forget(buf);
}
