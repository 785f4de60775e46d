//! In a `run_local` job, a PE whose `barrier_all` was cancelled while a peer was late gets a
//! typed error from its next barrier (and the PEs waiting for its signal get one too), and
//! the job ends with that error instead of hanging or passing on with PEs out of step.

use std::time::Duration;

use ferroshmem::{run_local, Error};
use tokio::time::{sleep, timeout};

#[test]
fn a_cancelled_barrier_fails_the_pes_next_barrier_and_the_job() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let n = 4;
    let job = rt.block_on(async {
        timeout(
            Duration::from_secs(30),
            run_local(n, move |pe| async move {
                if pe.my_pe() == 0 {
                    let gave_up = timeout(Duration::from_millis(50), pe.barrier_all()).await;
                    assert!(gave_up.is_err(), "the last PE was late, yet PE 0 passed");
                } else {
                    if pe.my_pe() == n - 1 {
                        sleep(Duration::from_millis(200)).await;
                    }
                    pe.barrier_all().await?;
                }
                pe.barrier_all().await
            }),
        )
        .await
    });
    match job.expect("the job hung") {
        Err(Error::Desynchronized { what }) => assert!(what.contains("world barrier"), "{what}"),
        // A PE waiting for PE 0's signal may learn of the broken barrier first.
        Err(Error::CollectiveMismatch { detail, .. }) => {
            assert!(
                detail.contains("PE 0 left a world barrier unfinished"),
                "{detail}"
            )
        }
        other => panic!("expected PE 0's broken barrier to fail the job, got {other:?}"),
    }
}
