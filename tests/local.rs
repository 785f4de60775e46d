//! Every scenario in `run_local` jobs of 1, 2, 3, 4 and 8 PEs, plus failure handling of
//! in-process jobs.

mod common;

use std::time::Duration;

use common::{runtime, scenarios};
use ferroshmem::{run_local, Cmp, Error};

fn check_scenario(name: &'static str) {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let rt = runtime();
    for n in [1, 2, 3, 4, 8] {
        eprintln!("n={n}");
        let results = rt
            .block_on(run_local(n, move |pe| scenarios::run(name, pe)))
            .unwrap_or_else(|e| panic!("{name} with {n} PEs: {e}"));
        for (pe, r) in results.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("{name} with {n} PEs, PE {pe}: {e}"));
        }
    }
}

#[test]
fn rma() {
    check_scenario("rma");
}

#[test]
fn amo() {
    check_scenario("amo");
}

#[test]
fn contention() {
    check_scenario("contention");
}

#[test]
fn ordering() {
    check_scenario("ordering");
}

#[test]
fn signals() {
    check_scenario("signals");
}

#[test]
fn waits() {
    check_scenario("waits");
}

#[test]
fn errors() {
    check_scenario("errors");
}

#[test]
fn queries() {
    check_scenario("queries");
}

#[test]
fn vector_waits() {
    check_scenario("vector_waits");
}

#[test]
fn realloc() {
    check_scenario("realloc");
}

#[test]
fn contexts() {
    check_scenario("contexts");
}

#[test]
fn fetching_nbi_atomics() {
    check_scenario("fetching_nbi_atomics");
}

#[test]
fn blocked_strided() {
    check_scenario("blocked_strided");
}

#[test]
fn barrier() {
    check_scenario("barrier");
}

#[test]
fn zero_pes_is_an_error() {
    let r = runtime().block_on(run_local(0, |_pe| async {}));
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}

#[test]
fn a_panicking_pe_fails_the_job_and_its_peers_do_not_hang() {
    let rt = runtime();
    let r = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            run_local(4, |pe| async move {
                let flag = pe.calloc::<u64>(1).await?;
                pe.barrier_all().await?;
                if pe.my_pe() == 2 {
                    panic!("PE 2 gives up");
                }
                // Nobody ever sets the flag: only the lost peer can end this wait.
                pe.wait_until(&flag, Cmp::Eq, 1).await?;
                Ok::<_, Error>(())
            }),
        )
        .await
    });
    match r {
        Ok(Err(Error::Panicked { pe: 2, message })) => assert!(message.contains("gives up")),
        other => panic!("expected PE 2's panic, got {other:?}"),
    }
}

#[test]
fn handles_of_one_job_are_refused_by_another() {
    let rt = runtime();
    let r = rt.block_on(run_local(1, |pe| async move {
        let buf = pe.malloc::<u64>(1).await?;
        let inner = run_local(1, move |other| {
            let view = ferroshmem::SymBuffer::<u64>::from_allocation(
                ferroshmem_runtime::Allocation::new(ferroshmem::HeapId(0), 0, 8),
                1,
            );
            async move {
                let view = view?;
                let r = other.put(&view, &[1], 0).await;
                std::mem::forget(view);
                r
            }
        })
        .await?;
        pe.free(buf).await?;
        Ok::<_, Error>(inner)
    }));
    let inner = r
        .expect("outer job")
        .pop()
        .expect("one PE")
        .expect("inner job");
    assert_eq!(inner, vec![Err(Error::NotSymmetric)]);
}

#[test]
fn exchanges_gather_every_member_and_groups_run_independently() {
    let rt = runtime();
    let r = rt.block_on(run_local(4, |pe| async move {
        let me = pe.my_pe();
        let world = pe.exchange(0, me, 4, vec![me as u8]).await?;
        assert_eq!(world, vec![vec![0], vec![1], vec![2], vec![3]]);
        // Even and odd PEs form two groups of two that exchange at the same time.
        let group = 100 + (me % 2) as u64;
        let pair = pe.exchange(group, me / 2, 2, vec![me as u8 * 10]).await?;
        let base = (me % 2) as u8 * 10;
        assert_eq!(pair, vec![vec![base], vec![base + 20]]);
        let bad = pe.exchange(7, 3, 2, vec![]).await;
        assert!(matches!(bad, Err(Error::InvalidArgument(_))));
        Ok::<_, Error>(())
    }));
    for res in r.expect("job") {
        res.expect("PE");
    }
}
