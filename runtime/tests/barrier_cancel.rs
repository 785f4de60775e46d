//! A world barrier (`sync_all`, `barrier_all`) dropped before it completes leaves its PE out
//! of step with the others: every later world barrier of that PE must fail at once with a
//! typed error, instead of letting PEs out early or hanging.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_runtime::route::Route;
use ferroshmem_runtime::{DataPlane, DataPlaneParts, Error, Health, HeapId, Result, Segment};
use tokio::time::timeout;

/// Long enough for anything that should complete; reaching it means a hang.
const BOUND: Duration = Duration::from_secs(5);

/// `n` PEs of one job in this process, each with its own data plane over the shared segments.
fn pes(n: usize) -> Vec<Arc<DataPlane>> {
    let segments: Vec<Arc<Segment>> = (0..n)
        .map(|pe| Arc::new(Segment::create(pe, 1 << 20).expect("segment")))
        .collect();
    (0..n)
        .map(|my_pe| {
            Arc::new(
                DataPlane::new(DataPlaneParts {
                    my_pe,
                    heap: HeapId(1),
                    routes: segments.iter().cloned().map(Route::Mapped).collect(),
                    remote: None,
                    nodes: vec![0; n],
                    machine_pes: n,
                    health: Arc::new(Health::new()),
                    spin: Duration::from_micros(50),
                })
                .expect("data plane"),
            )
        })
        .collect()
}

/// Awaits `barrier`, which must fail at once because a barrier of its PE was cancelled.
async fn assert_broken(barrier: impl Future<Output = Result<()>>, what: &str) {
    match timeout(BOUND, barrier).await {
        Ok(Err(Error::Desynchronized { what })) => {
            assert!(what.contains("world barrier"), "{what}")
        }
        Ok(other) => panic!("{what} after a cancelled barrier returned {other:?}"),
        Err(_) => panic!("{what} after a cancelled barrier hung"),
    }
}

/// PE 0 gives up on a barrier (a `sync_all` if `sync`, else a `barrier_all`) that PE 1 joins
/// late; then PE 0's later barriers fail.
async fn cancel_then_retry(sync: bool) {
    let pes = pes(2);
    let first = if sync {
        timeout(Duration::from_millis(50), pes[0].sync_all()).await
    } else {
        timeout(Duration::from_millis(50), pes[0].barrier_all()).await
    };
    assert!(first.is_err(), "PE 1 was late, yet PE 0 passed: {first:?}");
    let late = {
        let pe1 = pes[1].clone();
        tokio::spawn(async move { timeout(BOUND, pe1.barrier_all()).await })
    };
    assert_broken(pes[0].barrier_all(), "barrier_all").await;
    assert_broken(pes[0].sync_all(), "sync_all").await;
    assert_eq!(late.await.expect("PE 1's task"), Ok(Ok(())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_barrier_all_fails_every_later_barrier_of_its_pe() {
    cancel_then_retry(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sync_all_fails_every_later_barrier_of_its_pe() {
    cancel_then_retry(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_barriers_leave_the_next_ones_working() {
    let pes = pes(3);
    let tasks: Vec<_> = pes
        .iter()
        .cloned()
        .map(|pe| {
            tokio::spawn(async move {
                for _ in 0..20 {
                    timeout(BOUND, pe.barrier_all()).await.expect("hung")?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("PE task"), Ok(()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cancelled_barrier_a_job_failure_is_reported_first() {
    let pes = pes(2);
    let first = timeout(Duration::from_millis(50), pes[0].barrier_all()).await;
    assert!(first.is_err(), "PE 1 was late, yet PE 0 passed: {first:?}");
    let lost = Error::PeerLost {
        pe: 1,
        reason: "test".into(),
    };
    pes[0].health().fail(lost.clone());
    let next = timeout(BOUND, pes[0].barrier_all()).await;
    assert_eq!(next, Ok(Err(lost)));
}

/// PE 0 gives up on a barrier and goes on without the world barrier; PE 1, whose second
/// barrier waits for a signal PE 0 will never send, fails instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_waiting_for_a_pe_whose_barrier_broke_fails() {
    let pes = pes(2);
    let first = timeout(Duration::from_millis(50), pes[0].barrier_all()).await;
    assert!(first.is_err(), "PE 1 was late, yet PE 0 passed: {first:?}");
    // PE 0 signalled PE 1 before it gave up, so PE 1's first barrier passes.
    assert_eq!(timeout(BOUND, pes[1].barrier_all()).await, Ok(Ok(())));
    let failed = match timeout(BOUND, pes[1].barrier_all()).await {
        Ok(Err(e @ Error::CollectiveMismatch { .. })) => {
            assert!(
                e.to_string()
                    .contains("PE 0 left a world barrier unfinished"),
                "{e}"
            );
            e
        }
        Ok(other) => panic!("PE 1's barrier without PE 0 returned {other:?}"),
        Err(_) => panic!("PE 1's barrier without PE 0 hung"),
    };
    // PE 1's barrier failed midway, so its later ones fail at once, with the same error.
    assert_eq!(timeout(BOUND, pes[1].sync_all()).await, Ok(Err(failed)));
}
