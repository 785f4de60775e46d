//! PEs of two nodes (in one process, through a loopback transport): what a PE learns of a
//! peer it can only read through the remote transport. Collectives on more nodes, or on
//! nodes of several PEs, are in `two_nodes/more_nodes.rs`.

#[path = "two_nodes/more_nodes.rs"]
mod more_nodes;

mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::loopback::{two_nodes, two_nodes_ordered, two_nodes_settling, Settling};
use ferroshmem_runtime::heap::{Allocation, HeapId, SymBuffer};
use ferroshmem_runtime::{
    DataPlane, Error, Exchange, ExchangeFuture, ReduceOp, Team, TeamConfig, Teams,
};
use tokio::time::timeout;

/// Long enough for anything that should complete; reaching it means a hang.
const BOUND: Duration = Duration::from_secs(5);

/// `n` words at the start of the job's heap (heap 1), as both PEs of `two_nodes` see it.
fn heap_words(n: usize) -> SymBuffer<u64> {
    SymBuffer::<u64>::from_allocation(Allocation::new(HeapId(1), 0, 64), n).expect("words")
}

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

/// No team is created in these tests, so no exchange is made.
#[derive(Debug)]
struct NoExchange;

impl Exchange for NoExchange {
    fn exchange(&self, _: u64, _: usize, _: usize, _: Vec<u8>) -> ExchangeFuture<'_> {
        Box::pin(async { Err(Error::Shutdown) })
    }
}

/// An element type aligned above a cache line.
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(256))]
struct Wide([u64; 32]);

/// An `fcollect` between members on two nodes moves each member's block through a
/// temporary copy: elements aligned above a line arrive whole (a temporary aligned only to a
/// line once gave an empty block, and the call succeeded without moving it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fcollect_across_nodes_moves_elements_aligned_above_a_line() {
    const PER_PE: usize = 16;
    let block = PER_PE * std::mem::size_of::<Wide>();
    let pes = two_nodes(false);
    let calls: Vec<_> = pes
        .iter()
        .enumerate()
        .map(|(me, dp)| {
            let dp = dp.clone();
            tokio::spawn(async move {
                let teams = Teams::new(dp.clone(), Arc::new(NoExchange)).expect("teams");
                let buffer = |at, len| {
                    SymBuffer::<Wide>::from_allocation(
                        Allocation::new(HeapId(1), at, len * 256),
                        len,
                    )
                    .expect("a buffer")
                };
                let (source, dest) = (buffer(0, PER_PE), buffer(block, 2 * PER_PE));
                let mine = vec![Wide([me as u64 + 1; 32]); PER_PE];
                dp.put(&source, &mine, me).await.expect("source filled");
                dp.put(&dest, &vec![Wide([99; 32]); 2 * PER_PE], me)
                    .await
                    .expect("dest filled");
                let done = timeout(BOUND, teams.world().fcollect(&dest, &source)).await;
                assert!(matches!(done, Ok(Ok(()))), "PE {me}'s fcollect: {done:?}");
                let mut got = vec![Wide([0; 32]); 2 * PER_PE];
                dp.get(&mut got, &dest, me).await.expect("dest read");
                got
            })
        })
        .collect();
    for (me, call) in calls.into_iter().enumerate() {
        let got = call.await.expect("a PE's task");
        for (i, element) in got.iter().enumerate() {
            let from = i / PER_PE;
            assert_eq!(
                *element,
                Wide([from as u64 + 1; 32]),
                "PE {me}, element {i}"
            );
        }
    }
}

/// Elements of the buffers of the pushing tests: 16 KiB, past the eager sizes.
const LEN: usize = 2048;

/// Element `i` of member `pe`'s source in round `round`.
fn element(round: usize, pe: usize, i: usize) -> u64 {
    ((round << 32) | (pe << 16) | i) as u64
}

/// A source and a destination of [`LEN`] elements at the start of the job's heap.
fn source_and_dest() -> (SymBuffer<u64>, SymBuffer<u64>) {
    let buffer = |at| {
        let place = Allocation::new(HeapId(1), at, LEN * 8);
        SymBuffer::<u64>::from_allocation(place, LEN).expect("a buffer")
    };
    (buffer(0), buffer(LEN * 8))
}

/// Runs `call` on each PE's world team (in a task of its own) with that PE's data plane
/// and number, and gives back what each returned.
async fn on_both<R, F>(pes: &[Arc<DataPlane>], call: fn(Arc<DataPlane>, Team, usize) -> F) -> Vec<R>
where
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let tasks: Vec<_> = pes
        .iter()
        .enumerate()
        .map(|(me, dp)| {
            let teams = Teams::new(dp.clone(), Arc::new(NoExchange)).expect("teams");
            let (dp, world) = (dp.clone(), teams.world().clone());
            tokio::spawn(async move {
                let out = call(dp, world, me).await;
                drop(teams);
                out
            })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("a PE's task"));
    }
    out
}

/// Runs `collective` into a cleared `dest` and checks that it gives `want(i)` there.
async fn expect_in_dest<F>(
    dp: &DataPlane,
    me: usize,
    what: &str,
    collective: F,
    want: impl Fn(usize) -> u64,
) where
    F: Future<Output = ferroshmem_runtime::Result<()>>,
{
    let (_, dest) = source_and_dest();
    let done = timeout(BOUND, collective).await;
    assert!(matches!(done, Ok(Ok(()))), "PE {me}, {what}: {done:?}");
    let mut got = vec![0; LEN];
    dp.get(&mut got, &dest, me).await.expect("dest read");
    let want: Vec<u64> = (0..LEN).map(want).collect();
    assert!(got == want, "PE {me}, {what}");
}

/// One PE's rounds of [`collectives_across_nodes_signal_their_receivers_only_behind_the_data`].
async fn pushing_rounds(dp: Arc<DataPlane>, world: Team, me: usize) {
    let (source, dest) = source_and_dest();
    let half = LEN / 2;
    for round in 0..4 {
        let root = round % 2;
        let mine: Vec<u64> = (0..LEN).map(|i| element(round, me, i)).collect();
        dp.put(&source, &mine, me).await.expect("source filled");
        let clear = || dp.put(&dest, &[0; LEN], me);
        clear().await.expect("dest cleared");
        let what = format!("round {round}, broadcast");
        let call = world.broadcast(&dest, &source, root);
        expect_in_dest(&dp, me, &what, call, |i| element(round, root, i)).await;
        clear().await.expect("dest cleared");
        let sum = |i| element(round, 0, i) + element(round, 1, i);
        let call = world.reduce(ReduceOp::Sum, &dest, &source);
        expect_in_dest(&dp, me, &format!("round {round}, sum"), call, sum).await;
        clear().await.expect("dest cleared");
        let block = |i: usize| element(round, i / half, i % half);
        let call = world.fcollect(&dest, source.slice(..half));
        expect_in_dest(&dp, me, &format!("round {round}, fcollect"), call, block).await;
        clear().await.expect("dest cleared");
        let theirs = |i: usize| element(round, i / half, me * half + i % half);
        let call = world.alltoall(&dest, &source, half);
        expect_in_dest(&dp, me, &format!("round {round}, alltoall"), call, theirs).await;
    }
}

/// Broadcasts and reductions (down their trees), `fcollect`s and `alltoall`s above the
/// eager sizes between members on two nodes push the data into the other member's `dest`
/// and signal it behind the data: at once where the transport keeps so long a write in
/// order, else once the write has landed. Either way, from either root and call after
/// call, the receiver finds the whole message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectives_across_nodes_signal_their_receivers_only_behind_the_data() {
    for ordered in [usize::MAX, 4096] {
        on_both(&two_nodes_ordered(ordered), |dp, world, me| {
            pushing_rounds(dp, world, me)
        })
        .await;
    }
}

/// A tree broadcast whose members on two nodes disagree on its length: the root refuses to
/// push (which would write past the other's shorter `dest`), both members fail with
/// `CollectiveMismatch`, the other's `dest` stays as it was, and the next broadcast works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_broadcast_of_another_length_is_refused_on_both_nodes() {
    const UNTOUCHED: u64 = 0xdead_beef;
    let outcomes = on_both(&two_nodes_ordered(usize::MAX), |dp, world, me| async move {
        let (source, dest) = source_and_dest();
        dp.put(&dest, &[UNTOUCHED; LEN], me)
            .await
            .expect("dest filled");
        let len = LEN - me;
        let refused = timeout(
            BOUND,
            world.broadcast(dest.slice(..len), source.slice(..len), 0),
        )
        .await;
        if me == 1 {
            let mut got = vec![0; LEN];
            dp.get(&mut got, &dest, me).await.expect("dest read");
            assert!(got.iter().all(|&x| x == UNTOUCHED), "PE 1's dest written");
        }
        let mine: Vec<u64> = (0..LEN).map(|i| element(0, me, i)).collect();
        dp.put(&source, &mine, me).await.expect("source filled");
        let call = world.broadcast(&dest, &source, 0);
        expect_in_dest(&dp, me, "the broadcast after", call, |i| element(0, 0, i)).await;
        refused
    })
    .await;
    for (me, refused) in outcomes.into_iter().enumerate() {
        assert!(
            matches!(refused, Ok(Err(Error::CollectiveMismatch { .. }))),
            "PE {me}: {refused:?}"
        );
    }
}

/// A member on another node that called a tree reduction, while its peer's broadcast waits
/// for it as a root (both above the eager sizes, both the team's first call): the reduction's
/// signal lands in the word where the broadcast waits for its data, with the same call
/// number, yet the broadcast does not take it for its data (it carries no broadcast's
/// descriptor), and both fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_against_a_reduction_across_nodes_fails_on_both() {
    let outcomes = on_both(&two_nodes_ordered(usize::MAX), |_, world, me| async move {
        let (source, dest) = source_and_dest();
        let call = async {
            match me {
                0 => world.broadcast(&dest, &source, 1).await,
                _ => world.reduce(ReduceOp::Sum, &dest, &source).await,
            }
        };
        timeout(BOUND, call).await
    })
    .await;
    for (me, outcome) in outcomes.into_iter().enumerate() {
        assert!(
            matches!(outcome, Ok(Err(Error::CollectiveMismatch { .. }))),
            "PE {me}: {outcome:?}"
        );
    }
}

/// A remote operation's future polled again after it completed reports
/// [`Error::Polled`], as a mapped one's does, instead of polling its ended completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_operation_polled_after_it_completed_says_so() {
    let pes = two_nodes(true);
    let word = heap_words(1);
    let mut fetch = Box::pin(pes[0].g(&word, 1));
    assert_eq!(timeout(BOUND, fetch.as_mut()).await, Ok(Ok(0)));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let again = fetch.as_mut().poll(&mut cx);
    assert!(
        matches!(again, std::task::Poll::Ready(Err(Error::Polled))),
        "{again:?}"
    );
    let mut into = [7u64];
    let mut read = Box::pin(pes[0].get(&mut into, &word, 1));
    assert!(matches!(timeout(BOUND, read.as_mut()).await, Ok(Ok(()))));
    let again = read.as_mut().poll(&mut cx);
    assert!(
        matches!(again, std::task::Poll::Ready(Err(Error::Polled))),
        "{again:?}"
    );
}

/// A `quiet` whose confirmation of puts to another node never comes (that node stopped
/// answering) ends once the job learns the peer was lost, as every other wait does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_waiting_for_a_lost_peer_s_confirmation_ends_with_peer_lost() {
    let pes = two_nodes_settling(false, Settling::Never);
    let words = heap_words(2);
    pes[0].put(&words, &[1u64, 2], 1).await.expect("sent");
    let quiet = {
        let pe = pes[0].clone();
        tokio::spawn(async move { pe.quiet().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!quiet.is_finished(), "the confirmation never comes");
    let lost = Error::PeerLost {
        pe: 1,
        reason: "cut off".into(),
    };
    pes[0].health().fail(lost.clone());
    let ended = timeout(BOUND, quiet).await.expect("in time").expect("ran");
    assert_eq!(ended, Err(lost));
}

/// A put after a fence waits for the puts before the fence; a put after it must not overtake
/// it: the last put to a word is the one that stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_after_a_fenced_put_lands_after_it() {
    let pes = two_nodes(true);
    let words = heap_words(2);
    let (first, word) = (words.slice(..1), words.slice(1..));
    for round in 1..=20u64 {
        pes[0]
            .put(first, &[round], 1)
            .await
            .expect("before the fence");
        pes[0].fence();
        pes[0]
            .put(word, &[2 * round], 1)
            .await
            .expect("the fenced put");
        pes[0]
            .put(word, &[2 * round + 1], 1)
            .await
            .expect("the put after it");
        timeout(BOUND, pes[0].quiet())
            .await
            .expect("in time")
            .expect("quiet");
        let last = pes[1].g(word, 1).await.expect("own word");
        assert_eq!(
            last,
            2 * round + 1,
            "round {round}: the later put was overtaken"
        );
    }
}

/// A put's failure stays `quiet`'s: an operation after a fence waits for the put to end but
/// does not take its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_put_before_a_fence_fails_the_quiet_not_the_fenced_operation() {
    let pes = two_nodes_settling(true, Settling::PutsFail);
    let word = heap_words(1);
    pes[0].put(&word, &[1u64], 1).await.expect("sent");
    pes[0].fence();
    let fenced = timeout(BOUND, pes[0].g(&word, 1)).await.expect("in time");
    assert_eq!(fenced, Ok(0), "the get after the fence");
    let quiet = timeout(BOUND, pes[0].quiet()).await.expect("in time");
    assert!(matches!(quiet, Err(Error::InvalidArgument(_))), "{quiet:?}");
}

/// A caller outside any tokio runtime (a C program's thread): a put after a fence is posted
/// once the puts before it have completed, on the runtime the data plane was built on, not
/// only when a later `quiet` polls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_put_from_outside_any_runtime_goes_out_without_a_quiet() {
    let pes = two_nodes(true);
    let two_words = || heap_words(2);
    let words = two_words();
    let caller = {
        let (pe, words) = (pes[0].clone(), two_words());
        std::thread::spawn(move || {
            pe.put_nbi(words.slice(..1), &[1u64], 1).expect("first");
            pe.fence();
            pe.put_nbi(words.slice(1..), &[2u64], 1).expect("second");
        })
    };
    caller.join().expect("the caller's thread");
    let landed = async {
        loop {
            let second = pes[1].g(words.slice(1..), 1).await.expect("own word");
            if second == 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    timeout(BOUND, landed).await.expect("the fenced put landed");
}

/// A put refused at its target fails the quiet of a barrier after it, but the barrier's
/// synchronization takes place all the same: the other PE is not left waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_whose_quiet_fails_still_meets_the_others() {
    let refused = Error::Os {
        context: "a write refused at its target",
        message: "bad key".into(),
    };
    let pes = two_nodes_settling(false, Settling::FailsOnce(refused.clone()));
    let words = heap_words(2);
    pes[0].put(&words, &[1u64, 2], 1).await.expect("sent");
    let barriers: Vec<_> = pes
        .iter()
        .map(|pe| {
            let pe = pe.clone();
            tokio::spawn(async move { pe.barrier_all().await })
        })
        .collect();
    let mut ended = Vec::new();
    for barrier in barriers {
        ended.push(
            timeout(BOUND, barrier)
                .await
                .expect("in time")
                .expect("ran"),
        );
    }
    // The PEs share the transport: whichever quiets first meets the refusal.
    ended.sort_by_key(Result::is_ok);
    assert_eq!(ended, [Err(refused), Ok(())]);
    let next = async { tokio::join!(pes[0].barrier_all(), pes[1].barrier_all()) };
    let next = timeout(BOUND, next).await.expect("in time");
    assert_eq!(next, (Ok(()), Ok(())), "the next barrier");
}

/// The control plane says PE 0 finalized and left (its process may be gone, its header
/// unreadable): PE 1's barrier, whose signal from PE 0 has not come, fails instead of
/// waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_waiting_for_a_remote_pe_that_left_fails() {
    let pes = two_nodes(false);
    pes[1].health().mark_finished(0);
    match timeout(BOUND, pes[1].barrier_all()).await {
        Ok(Err(Error::CollectiveMismatch { detail, .. })) => {
            assert!(detail.contains("PE 0 has finalized and left"), "{detail}")
        }
        other => panic!("PE 1's barrier after PE 0 left: {other:?}"),
    }
}

/// The same for a team call: PE 0 left without making it, so PE 1's call fails, whether or
/// not PE 1 could still read PE 0's call records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_call_waiting_for_a_remote_member_that_left_fails() {
    let pes = two_nodes(false);
    let teams = Teams::new(pes[1].clone(), Arc::new(NoExchange)).expect("teams");
    pes[1].health().mark_finished(0);
    match timeout(BOUND, teams.world().sync()).await {
        Ok(Err(Error::CollectiveMismatch { detail, .. })) => {
            assert!(detail.contains("member 0 has finalized"), "{detail}")
        }
        other => panic!("PE 1's team sync after PE 0 left: {other:?}"),
    }
}

/// Two members whose predefined teams disagree on [`TeamConfig::dest_ready`] (one writes
/// into the other's `dest` at once, the other syncs first) fail their `fcollect` and
/// `alltoall` with `CollectiveMismatch`, at eager sizes and above, instead of running
/// algorithms that never meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_disagree_on_the_dest_ready_contract_fail_their_calls() {
    let pes = two_nodes(false);
    let calls: Vec<_> = pes
        .iter()
        .enumerate()
        .map(|(me, dp)| {
            let dp = dp.clone();
            tokio::spawn(async move {
                let config = TeamConfig {
                    dest_ready: me == 0,
                    ..TeamConfig::for_job(dp.nodes(), dp.heap_size())
                };
                let teams =
                    Teams::with_config(dp.clone(), Arc::new(NoExchange), config).expect("teams");
                let buffer = |at, len| {
                    SymBuffer::<u64>::from_allocation(Allocation::new(HeapId(1), at, len * 8), len)
                        .expect("a buffer")
                };
                let (source, dest) = (buffer(0, 8192), buffer(1 << 16, 16384));
                let mut outcomes = Vec::new();
                for each in [2, 4096] {
                    let world = teams.world();
                    let call = world.fcollect(dest.slice(..2 * each), source.slice(..each));
                    outcomes.push(timeout(BOUND, call).await);
                    let call =
                        world.alltoall(dest.slice(..2 * each), source.slice(..2 * each), each);
                    outcomes.push(timeout(BOUND, call).await);
                }
                outcomes
            })
        })
        .collect();
    for (me, call) in calls.into_iter().enumerate() {
        let outcomes = call.await.expect("a PE's task");
        let first = &outcomes[0];
        assert!(
            matches!(first, Ok(Err(Error::CollectiveMismatch { .. }))),
            "PE {me}'s first call: {first:?}"
        );
        for later in &outcomes[1..] {
            assert!(
                matches!(later, Ok(Err(_))),
                "PE {me}'s later calls: {outcomes:?}"
            );
        }
    }
}
