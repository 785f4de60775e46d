//! Mismatched collectives: the messages a mismatched small (eager) call leaves behind are
//! never taken as a later call's own, and calls whose algorithms never meet, or that a member
//! gave up, end in an error on every member instead of a wait without end. Every call is
//! bounded, so that a PE left waiting shows as a timeout, not a hang.

mod common;

use std::future::Future;
use std::time::Duration;

use common::runtime;
use ferroshmem::{run_local, Error, Pe, Result, SymBuffer, Team};
use tokio::time::timeout;

/// Long enough for any call that should complete; reaching it means the call was left
/// waiting by a peer that gave up on the team.
const BOUND: Duration = Duration::from_secs(3);

/// Elements per buffer: small enough for the eager algorithms.
const LEN: usize = 4;

/// Runs `check` on every PE of a job of `n` PEs in this process; panics with every problem
/// any PE reports.
fn job<F, Fut>(n: usize, check: F)
where
    F: Fn(Pe) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<String>> + Send + 'static,
{
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let problems: Vec<String> = runtime()
        .block_on(run_local(n, check))
        .expect("job")
        .into_iter()
        .flatten()
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A team of every PE of the job, with eager slots; the world team stays usable for the
/// barriers between the steps.
async fn pair(pe: &Pe) -> Team {
    let team = pe
        .team_world()
        .split_strided(0, 1, pe.n_pes())
        .await
        .expect("split")
        .expect("member");
    let config = team.config();
    assert!(
        config.eager_bytes > 0
            && config.eager_copy_bytes >= 8 * LEN
            && config.eager_broadcast_bytes >= 8 * LEN,
        "{config:?}"
    );
    team
}

/// What one bounded call gave.
enum Outcome {
    Ok,
    Failed(Error),
    TimedOut,
}

async fn bounded(call: impl Future<Output = Result<()>>) -> Outcome {
    match timeout(BOUND, call).await {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(e)) => Outcome::Failed(e),
        Err(_) => Outcome::TimedOut,
    }
}

/// A source and a destination of `len` zeroed elements each.
async fn buffers(pe: &Pe, len: usize) -> (SymBuffer<u64>, SymBuffer<u64>) {
    (
        pe.calloc::<u64>(len).await.expect("calloc"),
        pe.calloc::<u64>(len).await.expect("calloc"),
    )
}

async fn read(pe: &Pe, buf: &SymBuffer<u64>) -> Vec<u64> {
    let mut out = vec![0; LEN];
    pe.get(&mut out, buf, pe.my_pe()).await.expect("read");
    out
}

async fn write(pe: &Pe, buf: &SymBuffer<u64>, data: &[u64]) {
    pe.put(buf, data, pe.my_pe()).await.expect("write");
}

/// Checks one correct call's outcome: `Ok` must come with `expected` in `dest`; an error
/// must be one a mismatch or an unusable team gives. Counts the calls that did not succeed.
async fn judge(
    pe: &Pe,
    what: String,
    outcome: Outcome,
    dest: &SymBuffer<u64>,
    expected: &[u64],
    failures: &mut usize,
    problems: &mut Vec<String>,
) {
    match outcome {
        Outcome::Ok => {
            let got = read(pe, dest).await;
            if got != expected {
                problems.push(format!(
                    "{what}: Ok with stale data {got:?}, not {expected:?}"
                ));
            }
        }
        Outcome::Failed(Error::CollectiveMismatch { .. } | Error::Desynchronized { .. })
        | Outcome::TimedOut => *failures += 1,
        Outcome::Failed(other) => problems.push(format!("{what}: unexpected {other:?}")),
    }
}

/// Element `k` of what PE `from` writes in round `round`.
fn data(round: u64, from: u64) -> Vec<u64> {
    (0..LEN as u64)
        .map(|k| 1000 * from + 10 * round + k)
        .collect()
}

/// After a mismatched call, three correct ones: round `r` writes `data(r, me)` into `src`,
/// runs `call`, and `judge`s the outcome against `expected(r)` in `dest`. Adds to
/// `problems` when a call returns `Ok` with stale data, or when no call, and not the
/// mismatched one (`failures` so far), noticed the mismatch.
async fn three_correct_calls<F, Fut>(
    pe: &Pe,
    (src, dest): (&SymBuffer<u64>, &SymBuffer<u64>),
    what: &str,
    call: F,
    expected: impl Fn(u64) -> Vec<u64>,
    mut failures: usize,
    problems: &mut Vec<String>,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let me = pe.my_pe();
    pe.barrier_all().await.expect("barrier");
    for round in 1..=3 {
        write(pe, src, &data(round, me as u64)).await;
        let outcome = bounded(call()).await;
        let what = format!("PE {me}, {what} {round}");
        judge(
            pe,
            what,
            outcome,
            dest,
            &expected(round),
            &mut failures,
            problems,
        )
        .await;
    }
    if failures == 0 {
        problems.push(format!("PE {me}: no call noticed the mismatch"));
    }
    pe.barrier_all().await.expect("barrier");
}

/// Run (1): each PE broadcasts as the root. Later correct broadcasts from PE 0 must never
/// hand PE 1 the first call's data; both PEs learn of the mismatch on their next broadcast
/// (PE 1 receives PE 0's leftover message, PE 0 finds PE 1's waiting as it starts a root).
#[test]
fn broadcast_with_two_roots_is_caught() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let (src, dest) = buffers(&pe, LEN).await;
        let mut problems = Vec::new();
        write(&pe, &src, &data(0, me as u64)).await;
        if let Outcome::Failed(e) = bounded(team.broadcast(&dest, &src, me)).await {
            if !matches!(e, Error::CollectiveMismatch { .. }) {
                problems.push(format!("PE {me}, two roots: unexpected {e:?}"));
            }
        }
        let (t, d, s) = (&team, &dest, &src);
        let call = move || t.broadcast(d, s, 0);
        let expected = |round| data(round, 0);
        three_correct_calls(
            &pe,
            (s, d),
            "broadcast from PE 0",
            call,
            expected,
            0,
            &mut problems,
        )
        .await;
        problems
    });
}

/// Run (2): PE 0 broadcasts while PE 1 sums. Later correct sums must never give either PE
/// the mismatched call's leftover contribution; each PE sees the mismatch at some point.
#[test]
fn broadcast_against_reduce_is_caught() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let (src, dest) = buffers(&pe, LEN).await;
        let mut problems = Vec::new();
        let mut failures = 0;
        write(&pe, &src, &data(0, me as u64)).await;
        let first = if me == 0 {
            bounded(team.broadcast(&dest, &src, 0)).await
        } else {
            bounded(team.sum_reduce(&dest, &src)).await
        };
        match first {
            Outcome::Ok => {}
            Outcome::TimedOut | Outcome::Failed(Error::CollectiveMismatch { .. }) => failures += 1,
            Outcome::Failed(e) => problems.push(format!("PE {me}, mismatched call: {e:?}")),
        }
        let (t, d, s) = (&team, &dest, &src);
        let call = move || t.sum_reduce(d, s);
        let expected = |round| {
            let (a, b) = (data(round, 0), data(round, 1));
            a.iter().zip(&b).map(|(x, y)| x + y).collect()
        };
        three_correct_calls(&pe, (s, d), "sum", call, expected, failures, &mut problems).await;
        problems
    });
}

/// A one-member team's `collect` into a short `dest` fails without taking the team down: the
/// next calls work.
#[test]
fn short_collect_keeps_a_lone_team_usable() {
    job(1, |pe| async move {
        let team = pe.team_world();
        let (src, dest) = buffers(&pe, LEN).await;
        write(&pe, &src, &[1, 2, 3, 4]).await;
        let mut problems = Vec::new();
        let short = team.collect(dest.slice(..LEN - 1), &src).await;
        if !matches!(short, Err(Error::OutOfBounds { .. })) {
            problems.push(format!("short collect: {short:?}"));
        }
        if let Err(e) = team.sync().await {
            problems.push(format!("sync after a short collect: {e:?}"));
        }
        match team.collect(&dest, &src).await {
            Ok(LEN) if read(&pe, &dest).await == [1, 2, 3, 4] => {}
            other => problems.push(format!("collect after a short one: {other:?}")),
        }
        problems
    });
}

/// `alltoalls` whose members pass different strides: every member is told (before, the flat
/// path read each peer's buffer with the reader's own stride and returned `Ok`).
#[test]
fn alltoalls_with_different_strides_is_caught() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        // Above the eager sizes: the flat path, where the strides went unchecked.
        let nelems = 300;
        let (src, dest) = buffers(&pe, 4 * nelems).await;
        let sst = 1 + me;
        let mut problems = Vec::new();
        match bounded(team.alltoalls(&dest, &src, 1, sst, nelems)).await {
            Outcome::Failed(Error::CollectiveMismatch { .. }) => {}
            Outcome::Ok => problems.push(format!(
                "PE {me}: source stride {sst} against the other's: Ok"
            )),
            Outcome::TimedOut => problems.push(format!("PE {me}: mismatched strides timed out")),
            Outcome::Failed(e) => problems.push(format!("PE {me}: mismatched strides: {e:?}")),
        }
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// Expects a `CollectiveMismatch` from `outcome` (a timeout means the call was left waiting).
fn expect_mismatch(what: String, outcome: Outcome, problems: &mut Vec<String>) {
    match outcome {
        Outcome::Failed(Error::CollectiveMismatch { .. }) => {}
        Outcome::Ok => problems.push(format!("{what}: Ok")),
        Outcome::TimedOut => problems.push(format!("{what}: left waiting")),
        Outcome::Failed(e) => problems.push(format!("{what}: {e:?}")),
    }
}

/// Expects the team to refuse further calls at once, after this PE gave a call up.
async fn expect_unusable(what: String, team: &Team, problems: &mut Vec<String>) {
    match bounded(team.sync()).await {
        Outcome::Failed(Error::Desynchronized { .. }) => {}
        Outcome::Ok => problems.push(format!("{what}: the team still syncs")),
        Outcome::TimedOut => problems.push(format!("{what}: the next sync was left waiting")),
        Outcome::Failed(e) => problems.push(format!("{what}: the next sync gave {e:?}")),
    }
}

/// Sizes that pick algorithms which never meet: two PEs sum 4 elements (eager messages) while
/// the third sums 16 Ki elements (reduce-scatter, which starts with a sync). Before the
/// members' call records, all three waited forever.
#[test]
fn reductions_whose_sizes_pick_different_algorithms_fail_everywhere() {
    job(3, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let big = 16 * 1024;
        assert!(8 * big >= team.config().large_bytes, "{:?}", team.config());
        let len = if me == 2 { big } else { LEN };
        let (src, dest) = buffers(&pe, big).await;
        let mut problems = Vec::new();
        let outcome = bounded(team.sum_reduce(dest.slice(..len), src.slice(..len))).await;
        expect_mismatch(format!("PE {me}, sum of {len}"), outcome, &mut problems);
        expect_unusable(format!("PE {me}"), &team, &mut problems).await;
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// Two roots of a broadcast too large for eager messages: each waits for its children's
/// acknowledgements, which never come.
#[test]
fn broadcast_above_eager_sizes_with_two_roots_fails_on_both() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let len = 512;
        assert!(8 * len > team.config().eager_copy_bytes);
        let (src, dest) = buffers(&pe, len).await;
        let mut problems = Vec::new();
        let outcome = bounded(team.broadcast(&dest, &src, me)).await;
        expect_mismatch(format!("PE {me}, root {me}"), outcome, &mut problems);
        expect_unusable(format!("PE {me}"), &team, &mut problems).await;
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// A member that gives a call up (its future dropped by a timeout) fails the members that
/// would wait for it, instead of leaving them waiting.
#[test]
fn a_call_given_up_fails_the_members_waiting_for_it() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let mut problems = Vec::new();
        if me == 0 {
            let given_up = timeout(Duration::from_millis(50), team.sync()).await;
            if given_up.is_ok() {
                problems.push(format!("PE 0: a sync without its peer ended: {given_up:?}"));
            }
            expect_unusable("PE 0".into(), &team, &mut problems).await;
        } else {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // PE 0 arrived at the first sync before it gave up, so that one may pass; the
            // next one waits for PE 0, which will never come.
            let first = bounded(team.sync()).await;
            let outcome = match first {
                Outcome::Ok => bounded(team.sync()).await,
                other => other,
            };
            expect_mismatch("PE 1, after PE 0 gave up".into(), outcome, &mut problems);
        }
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// A split (which agrees through the control plane) against a sync: neither waits forever.
#[test]
fn split_against_sync_fails_on_both() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let mut problems = Vec::new();
        let outcome = if me == 0 {
            bounded(async { team.split_strided(0, 1, 2).await.map(drop) }).await
        } else {
            bounded(team.sync()).await
        };
        expect_mismatch(format!("PE {me}"), outcome, &mut problems);
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// A call refused by its arguments' checks: on every member alike, the team stays usable;
/// on one member only, the members that made the call fail instead of waiting for it.
#[test]
fn a_call_refused_by_one_member_fails_the_others() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let (src, dest) = buffers(&pe, LEN).await;
        write(&pe, &src, &[me as u64 + 1; LEN]).await;
        let mut problems = Vec::new();
        let short = bounded(team.sum_reduce(dest.slice(..LEN - 1), &src)).await;
        if !matches!(short, Outcome::Failed(Error::OutOfBounds { .. })) {
            problems.push(format!("PE {me}, short dest everywhere: not OutOfBounds"));
        }
        match bounded(team.sum_reduce(&dest, &src)).await {
            Outcome::Ok if read(&pe, &dest).await == [3; LEN] => {}
            _ => problems.push(format!(
                "PE {me}: the team did not survive a refusal by all"
            )),
        }
        pe.barrier_all().await.expect("barrier");
        let outcome = if me == 0 {
            bounded(team.sum_reduce(dest.slice(..LEN - 1), &src)).await
        } else {
            bounded(team.sum_reduce(&dest, &src)).await
        };
        // PE 0 makes no further team call until PE 1 is done: PE 1 must learn of the
        // refusal from PE 0's record alone.
        match (me, outcome) {
            (0, Outcome::Failed(Error::OutOfBounds { .. })) => {}
            (1, outcome) => {
                expect_mismatch("PE 1, against a refusal".into(), outcome, &mut problems)
            }
            (_, _) => problems.push(format!("PE {me}: the refusal did not come back")),
        }
        pe.barrier_all().await.expect("barrier");
        if me == 0 {
            // PE 1 gave its call up, so PE 0's next call that waits for it fails.
            let next = bounded(team.sync()).await;
            expect_mismatch("PE 0, after PE 1 gave up".into(), next, &mut problems);
        }
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// `barrier_all` against a world-team reduction: both are world collectives, called in
/// different orders. The PE in the reduction fails instead of waiting forever; once it
/// comes to the barrier, the other PE's barrier completes.
#[test]
fn barrier_all_against_a_world_reduction_fails_the_reduction() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let (src, dest) = buffers(&pe, LEN).await;
        let mut problems = Vec::new();
        if me == 0 {
            let outcome = bounded(pe.team_world().sum_reduce(&dest, &src)).await;
            expect_mismatch(
                "PE 0, reduction against barrier_all".into(),
                outcome,
                &mut problems,
            );
        }
        if let Outcome::Failed(_) | Outcome::TimedOut = bounded(pe.barrier_all()).await {
            problems.push(format!("PE {me}: barrier_all did not complete"));
        }
        problems
    });
}

/// A non-root refuses an eager broadcast (a short `dest` on that PE alone) while the root,
/// which waits for nobody, returns `Ok`: the refuser's next broadcast must not take the
/// message left for the refused call as its own.
#[test]
fn a_lone_refusal_of_an_eager_broadcast_never_takes_stale_data() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let (src, dest) = buffers(&pe, LEN).await;
        let mut problems = Vec::new();
        write(&pe, &src, &[11; LEN]).await;
        let into = if me == 1 {
            dest.slice(..LEN - 1)
        } else {
            dest.slice(..)
        };
        let first = bounded(team.broadcast(into, &src, 0)).await;
        if me == 1 && !matches!(first, Outcome::Failed(Error::OutOfBounds { .. })) {
            problems.push("PE 1: a short dest was not refused".into());
        }
        pe.barrier_all().await.expect("barrier");
        write(&pe, &src, &[22; LEN]).await;
        let mut failures = 0;
        let outcome = bounded(team.broadcast(&dest, &src, 0)).await;
        let what = format!("PE {me}, the broadcast after the refusal");
        judge(
            &pe,
            what,
            outcome,
            &dest,
            &[22; LEN],
            &mut failures,
            &mut problems,
        )
        .await;
        if me == 1 && failures == 0 {
            problems.push("PE 1: the refused call went unnoticed".into());
        }
        pe.barrier_all().await.expect("barrier");
        problems
    });
}

/// A correct program: each PE runs world-team reductions and world barriers at once, from
/// two futures of one task, each sequence in the same order on every PE. No call may fail.
#[test]
fn world_barriers_and_world_calls_at_once_in_one_order_pass() {
    job(2, |pe| async move {
        let (src, dest) = buffers(&pe, LEN).await;
        let world = pe.team_world();
        let reductions = async {
            for _ in 0..20 {
                world.sum_reduce(&dest, &src).await?;
            }
            Ok::<_, Error>(())
        };
        let barriers = async {
            for _ in 0..20 {
                pe.sync_all().await?;
            }
            Ok::<_, Error>(())
        };
        let (r, b) = tokio::join!(reductions, barriers);
        let mut problems = Vec::new();
        if let Err(e) = r.and(b) {
            problems.push(format!("PE {}: {e:?}", pe.my_pe()));
        }
        problems
    });
}

/// A PE that ends its program (finalizes) without making a team call: the member waiting in
/// that call fails instead of waiting forever, and the job ends.
#[test]
fn a_member_that_finalizes_without_the_call_fails_the_others() {
    job(2, |pe| async move {
        let me = pe.my_pe();
        let team = pair(&pe).await;
        let (src, dest) = buffers(&pe, LEN).await;
        let mut problems = Vec::new();
        if me == 0 {
            let outcome = bounded(team.sum_reduce(&dest, &src)).await;
            expect_mismatch("PE 0, a sum PE 1 never made".into(), outcome, &mut problems);
        }
        problems
    });
}
