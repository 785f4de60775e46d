//! PEs that finish at different times: one PE makes a collective call that another, already
//! finalizing, never makes. Every collective entry point must then fail with a typed error on
//! the PE left alone, instead of waiting for a PE that has gone. Also: a `Pe` kept after
//! `finalize` refuses every call, and handles built by hand never reach past the user heap.
//! Every job is bounded, so that a wait without end shows as a failed test, not a hang.

mod common;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::runtime;
use ferroshmem::{run_local, Cmp, Error, Pe, Result, SignalOp, SymBuffer};
use ferroshmem_runtime::Allocation;

/// Long enough for any job here to end; reaching it means a PE was left waiting.
const BOUND: Duration = Duration::from_secs(20);

/// A collective call that PE 1 makes after PE 0 has stopped making calls.
type Call = fn(Pe) -> Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// Runs a job of `n` PEs in which PE 0 returns at once (and finalizes) while every other PE
/// makes `call` first; returns how the job, and each PE's program, ended.
fn lone_call(n: usize, call: Call) -> Result<Vec<Result<()>>> {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    runtime().block_on(async move {
        let job = run_local(n, move |pe| async move {
            if pe.my_pe() == 0 {
                return Ok(());
            }
            call(pe).await
        });
        tokio::time::timeout(BOUND, job)
            .await
            .unwrap_or_else(|_| panic!("a PE was left waiting for a PE that finalized"))
    })
}

/// Whether the job, or a PE's program, failed with a collective mismatch.
fn mismatched(ended: &Result<Vec<Result<()>>>) -> bool {
    let mismatch = |e: &Error| matches!(e, Error::CollectiveMismatch { .. });
    match ended {
        Err(e) => mismatch(e),
        Ok(pes) => pes.iter().any(|r| r.as_ref().is_err_and(mismatch)),
    }
}

/// Asserts that the job, or a PE's program, failed with a collective mismatch.
fn expect_mismatch(what: &str, n: usize, call: Call) {
    let ended = lone_call(n, call);
    assert!(mismatched(&ended), "{what} with {n} PEs: {ended:?}");
}

fn boxed<F: Future<Output = Result<()>> + Send + 'static>(
    f: F,
) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
    Box::pin(f)
}

#[test]
fn a_world_barrier_past_a_finalized_pes_last_fails() {
    for n in [2, 3, 4] {
        expect_mismatch("barrier_all", n, |pe| {
            boxed(async move { pe.barrier_all().await })
        });
        expect_mismatch("sync_all", n, |pe| {
            boxed(async move { pe.sync_all().await })
        });
    }
}

#[test]
fn loops_that_end_on_their_own_clocks_fail_instead_of_hanging() {
    expect_mismatch("three barriers more", 4, |pe| {
        boxed(async move {
            for _ in 0..pe.my_pe() {
                pe.barrier_all().await?;
            }
            Ok(())
        })
    });
}

#[test]
fn heap_calls_of_a_lone_pe_fail() {
    for n in [2, 3] {
        expect_mismatch("malloc", n, |pe| {
            boxed(async move { pe.malloc::<u64>(8).await.map(std::mem::forget) })
        });
        expect_mismatch("calloc", n, |pe| {
            boxed(async move { pe.calloc::<u64>(8).await.map(std::mem::forget) })
        });
        expect_mismatch("align", n, |pe| {
            boxed(async move { pe.align::<u64>(4096, 8).await.map(std::mem::forget) })
        });
        expect_mismatch("exchange", n, |pe| {
            boxed(async move {
                let (me, n) = (pe.my_pe(), pe.n_pes());
                pe.exchange(0, me, n, vec![1]).await.map(drop)
            })
        });
    }
}

#[test]
fn a_lone_free_fails_and_keeps_the_buffer() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    let ended = runtime().block_on(async {
        let job = run_local(2, |pe| async move {
            let buf = pe.malloc::<u64>(8).await?;
            if pe.my_pe() == 0 {
                std::mem::forget(buf);
                return Ok(());
            }
            match pe.free(buf).await {
                Ok(()) => Err(Error::InvalidArgument("a lone free succeeded".into())),
                Err(failed) => {
                    assert!(failed.buffer.is_some(), "the buffer comes back");
                    std::mem::forget(failed.buffer);
                    Err(failed.error)
                }
            }
        });
        tokio::time::timeout(BOUND, job).await.expect("bounded")
    });
    let pes = ended.expect("job");
    assert!(
        matches!(pes[1], Err(Error::CollectiveMismatch { .. })),
        "{pes:?}"
    );
}

/// A team call that PE 1 and up make, on two zeroed buffers of 4 elements, after PE 0 has
/// stopped making calls.
type TeamCall =
    fn(Pe, SymBuffer<u64>, SymBuffer<u64>) -> Pin<Box<dyn Future<Output = Result<()>> + Send>>;

#[test]
fn team_calls_of_a_lone_pe_fail() {
    let calls: [(&str, TeamCall); 11] = [
        ("team barrier", |pe, _, _| {
            boxed(async move { pe.team_world().barrier().await })
        }),
        ("team sync", |pe, _, _| {
            boxed(async move { pe.team_world().sync().await })
        }),
        ("split", |pe, _, _| {
            boxed(async move {
                let world = pe.team_world();
                world.split_strided(0, 1, world.n_pes()).await.map(drop)
            })
        }),
        ("sum_reduce", |pe, a, b| {
            boxed(async move { pe.team_world().sum_reduce(&a, &b).await })
        }),
        ("fcollect", |pe, a, b| {
            boxed(async move { pe.team_world().fcollect(&a, &b.slice(0..1)).await })
        }),
        ("split_2d", |pe, _, _| {
            boxed(async move { pe.team_world().split_2d(1).await.map(drop) })
        }),
        ("collect", |pe, a, b| {
            boxed(async move { pe.team_world().collect(&a, &b.slice(0..1)).await.map(drop) })
        }),
        ("alltoall", |pe, a, b| {
            boxed(async move { pe.team_world().alltoall(&a, &b, 1).await })
        }),
        ("alltoalls", |pe, a, b| {
            boxed(async move { pe.team_world().alltoalls(&a, &b, 1, 1, 1).await })
        }),
        ("sum_reducescatter", |pe, a, b| {
            boxed(async move { pe.team_world().sum_reducescatter(&a, &b, 1).await })
        }),
        // From the PE that finalized: the others wait for its data. (A root that finds no
        // receiver does not wait: its eager messages wait in their slots.)
        ("broadcast", |pe, a, b| {
            boxed(async move { pe.team_world().broadcast(&a, &b, 0).await })
        }),
    ];
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    for (what, call) in calls {
        let ended = runtime().block_on(async move {
            let job = run_local(3, move |pe| async move {
                let a = pe.calloc::<u64>(4).await?;
                let b = pe.calloc::<u64>(4).await?;
                if pe.my_pe() == 0 {
                    std::mem::forget((a, b));
                    return Ok(());
                }
                call(pe, a, b).await
            });
            tokio::time::timeout(BOUND, job).await
        });
        let ended = ended.unwrap_or_else(|_| panic!("{what}: a PE was left waiting"));
        assert!(mismatched(&ended), "{what}: {ended:?}");
    }
}

#[test]
fn a_lone_destroy_fails() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    let ended = runtime().block_on(async {
        let job = run_local(3, |pe| async move {
            let world = pe.team_world();
            let team = world.split_strided(0, 1, world.n_pes()).await?;
            let team = team.expect("every PE is a member");
            if pe.my_pe() == 0 {
                return Ok(());
            }
            team.destroy().await
        });
        tokio::time::timeout(BOUND, job).await
    });
    let ended = ended.expect("a PE was left waiting in destroy");
    assert!(mismatched(&ended), "{ended:?}");
}

/// Runs a one-PE job that keeps a clone of its `Pe` and a buffer, and gives them back once
/// the job has ended (finalized).
fn finalized_pe() -> (Pe, SymBuffer<u64>) {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    let kept = Arc::new(Mutex::new(None));
    let keep = kept.clone();
    runtime()
        .block_on(run_local(1, move |pe| {
            let keep = keep.clone();
            async move {
                let buf = pe.calloc::<u64>(4).await?;
                *keep.lock().unwrap() = Some((pe.clone(), buf));
                Ok::<_, Error>(())
            }
        }))
        .expect("job")
        .into_iter()
        .collect::<Result<()>>()
        .expect("PE");
    let kept = kept.lock().unwrap().take().expect("kept");
    kept
}

/// `call`, bounded: a call that waits past it fails the test.
async fn bounded<R>(call: impl IntoFuture<Output = R>) -> std::result::Result<R, ()> {
    tokio::time::timeout(Duration::from_secs(5), call.into_future())
        .await
        .map_err(drop)
}

#[test]
fn a_pe_kept_after_finalize_refuses_every_call() {
    let (pe, buf) = finalized_pe();
    let rt = runtime();
    let shut = |what: &str, r: Result<()>| {
        assert_eq!(r, Err(Error::Shutdown), "{what} after finalize");
    };
    rt.block_on(async {
        shut("put", pe.put(&buf, &[1], 0).await);
        shut("put_nbi", pe.put_nbi(&buf, &[1], 0));
        shut("p", pe.p(&buf, 1, 0).await);
        shut("get", pe.get(&mut [0u64], &buf, 0).await);
        shut("g", pe.g(&buf, 0).await.map(drop));
        shut(
            "fetch_add",
            pe.atomic_fetch_add(buf.at(0), 1, 0).await.map(drop),
        );
        shut("atomic_set", pe.atomic_set(buf.at(0), 1, 0).await);
        shut(
            "put_signal",
            pe.put_signal(buf.slice(0..1), &[1], buf.at(1), 1, SignalOp::Set, 0)
                .await,
        );
        shut("quiet", pe.quiet().await);
        shut(
            "wait_until",
            bounded(pe.wait_until(&buf, Cmp::Eq, 0))
                .await
                .expect("bounded")
                .map(drop),
        );
        shut("test", pe.test(&buf, Cmp::Eq, 0).map(drop));
        shut(
            "barrier_all",
            bounded(pe.barrier_all()).await.expect("bounded"),
        );
        shut("sync_all", bounded(pe.sync_all()).await.expect("bounded"));
        shut(
            "malloc",
            bounded(pe.malloc::<u64>(1))
                .await
                .expect("bounded")
                .map(drop),
        );
        shut(
            "team barrier",
            bounded(pe.team_world().barrier()).await.expect("bounded"),
        );
        shut(
            "sum_reduce",
            bounded(pe.team_world().sum_reduce(&buf, &buf))
                .await
                .expect("bounded"),
        );
        shut(
            "finalize again",
            bounded(pe.clone().finalize()).await.expect("bounded"),
        );
    });
    std::mem::forget(buf);
}

/// A handle made by hand over `bytes` bytes at heap offset `offset` of `pe`'s heap.
fn forged(pe: &Pe, offset: usize, bytes: usize) -> SymBuffer<u64> {
    SymBuffer::from_allocation(Allocation::new(pe.heap_id(), offset, bytes), bytes / 8)
        .expect("a well-typed handle")
}

#[test]
fn handles_made_by_hand_never_reach_past_the_user_heap() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    let sums = runtime()
        .block_on(run_local(4, |pe| async move {
            let past_the_end = forged(&pe, pe.heap_size() - 8, 64);
            let over_the_pool = forged(&pe, pe.user_heap_bytes(), 64);
            let far_away = forged(&pe, usize::MAX - 8, 64);
            for (what, h) in [
                ("past the end", &past_the_end),
                ("over the pool", &over_the_pool),
                ("far away", &far_away),
            ] {
                let refused = [
                    pe.put(h, &[7; 8], 0).await,
                    pe.put(h.slice(1..2), &[7], 0).await,
                    pe.get(&mut [0; 1], h.slice(3..4), 0).await,
                    pe.atomic_add(h.at(2), 1, 0).await,
                    pe.team_world()
                        .sum_reduce(&h.slice(0..1), &h.slice(0..1))
                        .await,
                ];
                for r in refused {
                    assert_eq!(r, Err(Error::NotSymmetric), "{what}");
                }
            }
            std::mem::forget((past_the_end, over_the_pool, far_away));
            // The team pool is intact: the world team still reduces right.
            let one = pe.malloc::<u64>(1).await?;
            pe.p(&one, 1, pe.my_pe()).await?;
            pe.barrier_all().await?;
            pe.team_world().sum_reduce(&one, &one).await?;
            let sum = pe.g(&one, pe.my_pe()).await?;
            pe.free(one).await?;
            Ok::<_, Error>(sum)
        }))
        .expect("job");
    for sum in sums {
        assert_eq!(sum, Ok(4));
    }
}
