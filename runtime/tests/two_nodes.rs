//! PEs of two nodes (in one process, through a loopback transport): what a PE learns of a
//! peer it can only read through the remote transport.

mod common;

use std::time::Duration;

use common::loopback::two_nodes;
use ferroshmem_runtime::Error;
use tokio::time::timeout;

/// Long enough for anything that should complete; reaching it means a hang.
const BOUND: Duration = Duration::from_secs(5);

/// PE 0 gives a world barrier up after signalling PE 1, so PE 1's first barrier passes;
/// PE 0's later barriers fail at once without signalling, and PE 1's second barrier, which
/// waits for PE 0's signal, learns from PE 0's header (read remotely) that it never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_waiting_for_a_remote_pe_whose_barrier_broke_fails() {
    let pes = two_nodes(false);
    let first = timeout(Duration::from_millis(50), pes[0].barrier_all()).await;
    assert!(first.is_err(), "PE 1 was late, yet PE 0 passed: {first:?}");
    assert_eq!(timeout(BOUND, pes[1].barrier_all()).await, Ok(Ok(())));
    let again = timeout(BOUND, pes[0].barrier_all()).await;
    assert!(
        matches!(again, Ok(Err(Error::Desynchronized { .. }))),
        "{again:?}"
    );
    match timeout(BOUND, pes[1].barrier_all()).await {
        Ok(Err(Error::CollectiveMismatch { detail, .. })) => {
            assert!(
                detail.contains("PE 0 left a world barrier unfinished"),
                "{detail}"
            )
        }
        other => panic!("PE 1's barrier after PE 0's broke: {other:?}"),
    }
}

/// PE 0 finalizes after one barrier, PE 1 makes two: PE 1's second barrier fails, naming
/// PE 0's final barrier, instead of waiting for a PE that has left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_past_a_remote_pe_s_final_one_fails() {
    let pes = two_nodes(false);
    let zero = pes[0].clone();
    let finalizing = tokio::spawn(async move {
        zero.mark_finalizing();
        let last = timeout(BOUND, zero.barrier_all()).await;
        zero.shut_down();
        last
    });
    assert_eq!(timeout(BOUND, pes[1].barrier_all()).await, Ok(Ok(())));
    assert_eq!(finalizing.await.expect("PE 0's task"), Ok(Ok(())));
    match timeout(BOUND, pes[1].barrier_all()).await {
        Ok(Err(Error::CollectiveMismatch { detail, .. })) => {
            assert!(detail.contains("PE 0 has finalized"), "{detail}")
        }
        other => panic!("PE 1's barrier past PE 0's final one: {other:?}"),
    }
}
