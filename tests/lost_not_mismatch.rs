//! A PE lost in the middle of a collective is reported as lost, never as a mismatch: the
//! survivors that see its call, or a fellow survivor's, given up before they learn of the
//! loss themselves still fail with `PeerLost` naming it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::runtime;
use ferroshmem::{run_local, Error};

/// Elements of the reduction: large enough that its members wait for each other.
const LEN: usize = 1 << 19;

#[test]
fn survivors_of_a_pe_lost_mid_collective_report_it_lost() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let rt = runtime();
    let mut lost_rounds = 0;
    for round in 0..20 {
        let seen: Arc<Mutex<Vec<(usize, Error)>>> = Arc::default();
        let record = seen.clone();
        let job = run_local(4, move |pe| {
            let record = record.clone();
            async move {
                let me = pe.my_pe();
                let src = pe.calloc::<u64>(LEN).await?;
                let dest = pe.calloc::<u64>(LEN).await?;
                let fcollect_src = pe.calloc::<u64>(1 << 16).await?;
                let fcollect_dest = pe.calloc::<u64>(4 << 16).await?;
                let world = pe.team_world();
                let outcome = {
                    let calls = async {
                        world.sum_reduce(&dest, &src).await?;
                        world.fcollect(&fcollect_dest, &fcollect_src).await
                    };
                    let mut calls = std::pin::pin!(calls);
                    if me == 2 {
                        // PE 2 is lost while its calls are under way: its task panics with
                        // their future still alive, which is dropped as it unwinds.
                        tokio::select! {
                            biased;
                            done = &mut calls => done,
                            // Ready at its second poll: the calls have been polled twice.
                            () = tokio::task::yield_now() => panic!("PE 2 is lost mid-collective"),
                        }
                    } else {
                        calls.as_mut().await
                    }
                };
                if let Err(e) = &outcome {
                    record.lock().unwrap().push((me, e.clone()));
                }
                std::mem::forget((src, dest, fcollect_src, fcollect_dest));
                outcome
            }
        });
        let ended = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), job).await });
        let ended = ended.unwrap_or_else(|_| panic!("round {round}: a survivor hung"));
        if ended.is_ok() {
            // PE 2's calls completed before it could panic: nothing was lost this round.
            continue;
        }
        lost_rounds += 1;
        assert!(
            matches!(ended, Err(Error::Panicked { pe: 2, .. })),
            "round {round}: {ended:?}"
        );
        for (pe, error) in seen.lock().unwrap().iter() {
            assert!(
                matches!(error, Error::PeerLost { pe: 2, .. }),
                "round {round}: PE {pe} reported {error:?} instead of the loss of PE 2"
            );
        }
    }
    assert!(
        lost_rounds >= 10,
        "PE 2 was lost mid-call in {lost_rounds} rounds of 20"
    );
}
