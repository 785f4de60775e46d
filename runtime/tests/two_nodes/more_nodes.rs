//! Collectives on more than two loopback nodes, or on nodes of several PEs: binomial trees
//! through inner members, reductions of several fabric blocks, and block moves (`fcollect`
//! by node) that end with a sync of each node.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_runtime::heap::{Allocation, HeapId, SymBuffer};
use ferroshmem_runtime::{DataPlane, ReduceOp, Team, TeamConfig, Teams};
use tokio::time::timeout;

use super::common::loopback::{nodes_in_flight, nodes_laid_out, nodes_ordered, nodes_with_heap};
use super::{element, expect_in_dest, source_and_dest, NoExchange, BOUND, LEN};

/// Reads this PE's `dest` into `got`, then clears it: a later call that moved nothing into
/// it cannot pass for one that did.
async fn read_and_clear(dp: &DataPlane, dest: &SymBuffer<u64>, got: &mut [u64], me: usize) {
    dp.get(got, dest, me).await.expect("dest read");
    dp.put(dest, &vec![0; got.len()], me)
        .await
        .expect("dest cleared");
}

/// Runs `rounds` on every PE of `pes`, each in a task of its own, with its world team made
/// with the configuration `config` gives for its data plane, and waits for all of them.
async fn on_every_pe<R, F>(
    pes: Vec<Arc<DataPlane>>,
    config: fn(&DataPlane) -> TeamConfig,
    rounds: R,
) where
    R: Fn(Arc<DataPlane>, Team, usize) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send,
{
    let tasks: Vec<_> = pes
        .into_iter()
        .enumerate()
        .map(|(me, dp)| {
            let rounds = rounds.clone();
            tokio::spawn(async move {
                let teams = Teams::with_config(dp.clone(), Arc::new(NoExchange), config(&dp))
                    .expect("teams");
                rounds(dp.clone(), teams.world().clone(), me).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a PE's task");
    }
}

/// Binomial trees across nodes (four PEs, one per node, in a team configured to be too
/// large for the flat algorithms): member 2 of a tree rooted at 0 is a pushed child with a
/// pushed child of its own (member 3), which it serves from its `dest` once its own data
/// has landed. Broadcasts from every root and sums, with order kept and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binomial_trees_across_nodes_push_down_through_inner_members() {
    const N: usize = 4;
    for ordered in [usize::MAX, 4096] {
        let config = |dp: &DataPlane| TeamConfig {
            flat_max_pes: 2,
            ..TeamConfig::for_job(dp.nodes(), dp.heap_size())
        };
        on_every_pe(
            nodes_ordered(N, ordered),
            config,
            |dp, world, me| async move { binomial_rounds(&dp, &world, me, N).await },
        )
        .await;
    }
}

/// One PE's calls of [`binomial_trees_across_nodes_push_down_through_inner_members`].
async fn binomial_rounds(dp: &DataPlane, world: &Team, me: usize, n: usize) {
    let (source, dest) = source_and_dest();
    for root in 0..n {
        let mine: Vec<u64> = (0..LEN).map(|i| element(root, me, i)).collect();
        dp.put(&source, &mine, me).await.expect("source filled");
        dp.put(&dest, &[0; LEN], me).await.expect("dest cleared");
        let what = format!("broadcast from {root}");
        let call = world.broadcast(&dest, &source, root);
        expect_in_dest(dp, me, &what, call, |i| element(root, root, i)).await;
        dp.put(&dest, &[0; LEN], me).await.expect("dest cleared");
        let sum = |i| (0..n).map(|pe| element(root, pe, i)).sum();
        let call = world.reduce(ReduceOp::Sum, &dest, &source);
        expect_in_dest(dp, me, &format!("sum {root}"), call, sum).await;
    }
}

/// Elements reduced: three blocks of 1 MiB and a few elements more.
const BLOCKS_LEN: usize = 3 * (128 << 10) + 5;
/// Each PE's heap in [`a_reduction_of_several_blocks_across_nodes_reaches_every_member`]:
/// a source and a destination of [`BLOCKS_LEN`] elements, and room.
const BLOCKS_HEAP: usize = 8 << 20;

/// A source and a destination of [`BLOCKS_LEN`] elements at the start of the job's heap.
fn blocks_source_and_dest() -> (SymBuffer<u64>, SymBuffer<u64>) {
    let buffer = |at| {
        let place = Allocation::new(HeapId(1), at, BLOCKS_LEN * 8);
        SymBuffer::<u64>::from_allocation(place, BLOCKS_LEN).expect("a buffer")
    };
    (buffer(0), buffer(BLOCKS_LEN * 8))
}

/// Long enough for a reduction of several blocks through the loopback; reaching it means a
/// hang.
const BLOCKS_BOUND: Duration = Duration::from_secs(20);

/// Tree reductions across nodes large enough to be combined in several blocks (each block's
/// inputs read over the fabric at once), then pushed down whole. Four PEs on four nodes, in
/// a team whose reductions of any size go up and down a binomial tree (member 0 has
/// children 1 and 2 on other nodes, member 2 has child 3): sums from every PE, on every PE,
/// with writes of any length kept in order by the transport and with writes above 4 KiB
/// landing late (the posts must then wait for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reduction_of_several_blocks_across_nodes_reaches_every_member() {
    const N: usize = 4;
    for ordered in [usize::MAX, 4096] {
        let config = |dp: &DataPlane| TeamConfig {
            flat_max_pes: 2,
            large_bytes: usize::MAX,
            ..TeamConfig::for_job(dp.nodes(), dp.heap_size())
        };
        let pes = nodes_with_heap(N, ordered, BLOCKS_HEAP);
        on_every_pe(pes, config, move |dp, world, me| async move {
            block_sums(&dp, &world, me, N, ordered).await
        })
        .await;
    }
}

/// [`no_eager_slots`], with each node's combining in a reduction by node shared by its
/// members above 1 KiB read by its leader ([`TeamConfig::large_bytes`]).
fn shared_combining(dp: &DataPlane) -> TeamConfig {
    TeamConfig {
        large_bytes: 1024,
        ..no_eager_slots(dp)
    }
}

/// One PE's rounds of [`a_reduction_of_several_blocks_across_nodes_reaches_every_member`].
async fn block_sums(dp: &DataPlane, world: &Team, me: usize, n: usize, ordered: usize) {
    let (source, dest) = blocks_source_and_dest();
    for round in 0..3 {
        let mine: Vec<u64> = (0..BLOCKS_LEN).map(|i| element(round, me, i)).collect();
        dp.put(&source, &mine, me).await.expect("source filled");
        dp.put(&dest, &vec![0; BLOCKS_LEN], me)
            .await
            .expect("dest cleared");
        let summed = timeout(BLOCKS_BOUND, world.reduce(ReduceOp::Sum, &dest, &source)).await;
        let what = format!("PE {me}, round {round}, ordered {ordered}");
        assert!(matches!(summed, Ok(Ok(()))), "{what}: {summed:?}");
        let mut got = vec![0; BLOCKS_LEN];
        dp.get(&mut got, &dest, me).await.expect("dest read");
        let wrong =
            (0..BLOCKS_LEN).find(|&i| got[i] != (0..n).map(|pe| element(round, pe, i)).sum());
        assert_eq!(wrong, None, "{what}: the first element wrong");
    }
}

/// Block moves on loopback nodes of several PEs (`fcollect` and `alltoall` above the eager
/// sizes): `fcollect` by node where each node's members are consecutive (a leader gathers
/// its node's blocks and puts them whole into the other leaders' `dest`, its members read
/// the rest from it), block by block where they are not; `alltoall` block by block, the
/// node-mates' blocks read in place. Each call ends with a sync of each node alone. Call
/// after call, each source rewritten and each `dest` cleared as soon as the call returns,
/// every member finds every block of its call, on each of the [`TRANSPORTS`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_moves_on_nodes_of_several_pes_find_every_block_round_after_round() {
    let layouts: [&[usize]; 5] = [
        &[0, 0, 1, 1],
        &[0, 0, 0, 1],
        &[0, 1, 1, 2, 2, 2],
        &[0, 1, 0, 1],
        // Five nodes: the leaders sync by dissemination.
        &[0, 0, 1, 2, 3, 4],
    ];
    for (nodes, transport) in layouts.into_iter().flat_map(|l| TRANSPORTS.map(|t| (l, t))) {
        let config = |dp: &DataPlane| TeamConfig::for_job(dp.nodes(), dp.heap_size());
        let n = nodes.len();
        on_every_pe(transport(nodes), config, move |dp, world, me| async move {
            moving_rounds(&dp, &world, me, n).await
        })
        .await;
    }
}

/// One PE's rounds of [`block_moves_on_nodes_of_several_pes_find_every_block_round_after_round`]
/// in a team of `n`.
async fn moving_rounds(dp: &DataPlane, world: &Team, me: usize, n: usize) {
    /// Elements of a block: 8 KiB, above the eager sizes.
    const BLOCK: usize = 1024;
    let buffer = |at: usize| {
        let place = Allocation::new(HeapId(1), at, n * BLOCK * 8);
        SymBuffer::<u64>::from_allocation(place, n * BLOCK).expect("a buffer")
    };
    let (source, dest) = (buffer(0), buffer(n * BLOCK * 8));
    let mut got = vec![0; n * BLOCK];
    for round in 0..6 {
        // Each call's own values, written as soon as the call before returns: a member that
        // returned while a node-mate still read its buffers would be caught.
        let (gather, exchange) = (2 * round, 2 * round + 1);
        let mine: Vec<u64> = (0..n * BLOCK).map(|i| element(gather, me, i)).collect();
        dp.put(&source, &mine, me).await.expect("source filled");
        let gathered = timeout(BOUND, world.fcollect(&dest, source.slice(..BLOCK))).await;
        let mine: Vec<u64> = (0..n * BLOCK).map(|i| element(exchange, me, i)).collect();
        dp.put(&source, &mine, me).await.expect("source filled");
        read_and_clear(dp, &dest, &mut got, me).await;
        assert!(
            matches!(gathered, Ok(Ok(()))),
            "PE {me}, round {round}: {gathered:?}"
        );
        let wrong = (0..n * BLOCK).find(|&i| got[i] != element(gather, i / BLOCK, i % BLOCK));
        assert_eq!(wrong, None, "PE {me}, round {round}, fcollect");
        let exchanged = timeout(BOUND, world.alltoall(&dest, &source, BLOCK)).await;
        read_and_clear(dp, &dest, &mut got, me).await;
        assert!(
            matches!(exchanged, Ok(Ok(()))),
            "PE {me}, round {round}: {exchanged:?}"
        );
        let theirs = |i: usize| element(exchange, i / BLOCK, me * BLOCK + i % BLOCK);
        let wrong = (0..n * BLOCK).find(|&i| got[i] != theirs(i));
        assert_eq!(wrong, None, "PE {me}, round {round}, alltoall");
    }
}

/// Reductions on nodes of several PEs, scattered among the node leaders (each combines its
/// node's part of the elements from every leader's partial, then puts it into the others'
/// `dest`), with the eager slots off so that every length takes that form: lengths that
/// leave some leader an empty part, that do not split evenly, and whole; into another buffer
/// and in place; on each of the [`TRANSPORTS`]; with the node's combining shared by its members and done by its leader alone. A
/// team with more nodes than its flat limit goes up and down the tree by node instead, but
/// from `large_bytes` up (1 KiB with the combining shared: all but the shortest length).
/// Every member spoils its buffers as soon as its call returns, so that a later call cannot
/// pass on what an earlier one left; nothing is written past the length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reductions_across_nodes_of_several_pes_reach_every_member_round_after_round() {
    let layouts: [(&[usize], Option<usize>); 5] = [
        (&[0, 0, 1, 1], None),
        (&[0, 0, 0, 1], None),
        (&[0, 1, 1, 2, 2, 2], None),
        (&[1, 0, 1, 0], None),
        // Five nodes over a flat limit of four: the tree by node, or, from large_bytes up,
        // the elements split among the five leaders.
        (&[0, 0, 1, 2, 3, 4], Some(4)),
    ];
    for (((nodes, flat), transport), shared) in layouts
        .into_iter()
        .flat_map(|l| TRANSPORTS.map(|t| (l, t)))
        .flat_map(|l| [(l, false), (l, true)])
    {
        // The node's combining shared by its members above 1 KiB read by its leader, so
        // that all but the shortest length share it; by default, no length here does.
        let config = match (flat, shared) {
            (Some(_), false) => |dp: &DataPlane| TeamConfig {
                flat_max_pes: 4,
                ..no_eager_slots(dp)
            },
            (Some(_), true) => |dp: &DataPlane| TeamConfig {
                flat_max_pes: 4,
                ..shared_combining(dp)
            },
            (None, true) => shared_combining,
            (None, false) => no_eager_slots,
        };
        let n = nodes.len();
        on_every_pe(transport(nodes), config, move |dp, world, me| async move {
            summing_rounds(&dp, &world, me, n).await
        })
        .await;
    }
}

/// The job's team configuration with no eager slots.
fn no_eager_slots(dp: &DataPlane) -> TeamConfig {
    TeamConfig {
        eager_bytes: 0,
        eager_copy_bytes: 0,
        eager_broadcast_bytes: 0,
        ..TeamConfig::for_job(dp.nodes(), dp.heap_size())
    }
}

/// One PE's rounds of
/// [`reductions_across_nodes_of_several_pes_reach_every_member_round_after_round`] in a
/// team of `n`.
async fn summing_rounds(dp: &DataPlane, world: &Team, me: usize, n: usize) {
    let (source, dest) = source_and_dest();
    let calls = [2, 1001, LEN]
        .into_iter()
        .flat_map(|len| [(len, false), (len, true)]);
    for (call, (len, in_place)) in calls.enumerate() {
        let mine: Vec<u64> = (0..len).map(|i| element(call, me, i)).collect();
        dp.put(source.slice(..len), &mine, me)
            .await
            .expect("source filled");
        let into = if in_place { &source } else { &dest };
        let reduced = world.reduce(ReduceOp::Sum, into.slice(..len), source.slice(..len));
        let summed = timeout(BOUND, reduced).await;
        let what = format!("PE {me}, {len} elements, in place {in_place}");
        let sum = |i: usize| (0..n).map(|pe| element(call, pe, i)).sum::<u64>();
        let ended = summed.map_err(|_| "still waiting".to_string());
        check_and_spoil(dp, me, (&source, into), (len, in_place), ended, &what, sum).await;
    }
}

/// After a call on `len` elements into `into` (`source` itself where `in_place`) that
/// `ended` so: reads and clears `into` and spoils `source`, so that a later call cannot pass
/// on what this one left; then checks that the call succeeded, that `into` held `want(i)`
/// and, where not in place, that nothing was written past the length.
async fn check_and_spoil(
    dp: &DataPlane,
    me: usize,
    (source, into): (&SymBuffer<u64>, &SymBuffer<u64>),
    (len, in_place): (usize, bool),
    ended: Result<ferroshmem_runtime::Result<()>, String>,
    what: &str,
    want: impl Fn(usize) -> u64,
) {
    let mut got = vec![0; LEN];
    read_and_clear(dp, into, &mut got, me).await;
    dp.put(source, &[u64::MAX; LEN], me)
        .await
        .expect("source spoiled");
    assert!(matches!(ended, Ok(Ok(()))), "{what}: {ended:?}");
    let wrong = (0..len).find(|&i| got[i] != want(i));
    assert_eq!(wrong, None, "{what}: the first element wrong");
    if !in_place {
        let past = (len..LEN).find(|&i| got[i] != 0);
        assert_eq!(past, None, "{what}: written past the length");
    }
}

/// Members that pass another length than the others, on nodes of several PEs: a member that
/// is not its node's leader, a leader, and, on three nodes, a member whose disagreement has
/// to reach a leader of a node it is not on; with the node's combining shared and not, and
/// with a limit between the two lengths, so that a leader shares it where its odd member
/// would not, and the other way round. Every member's reduction fails with
/// `CollectiveMismatch`; none waits for the others forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reduction_of_another_length_on_a_node_of_several_pes_fails_on_every_member() {
    let cases: [(&[usize], usize); 3] = [
        (&[0, 0, 1, 1], 3),
        (&[0, 0, 1, 1], 2),
        (&[0, 1, 1, 2, 2, 2], 4),
    ];
    let configs = [no_eager_slots, shared_combining];
    let straddling = |dp: &DataPlane| TeamConfig {
        large_bytes: (LEN - 1) * 8,
        ..no_eager_slots(dp)
    };
    let between: [(&[usize], usize); 2] = [(&[0, 0, 1, 1], 1), (&[0, 0, 1, 1], 0)];
    let all = cases
        .into_iter()
        .flat_map(|c| configs.map(|f| (c, f)))
        .chain(
            between
                .into_iter()
                .map(|c| (c, straddling as fn(&DataPlane) -> TeamConfig)),
        );
    for ((nodes, odd), config) in all {
        on_every_pe(
            nodes_laid_out(nodes, usize::MAX),
            config,
            move |_dp, world, me| async move {
                let (source, dest) = source_and_dest();
                let len = if me == odd { LEN - 1 } else { LEN };
                let reduced = world.reduce(ReduceOp::Sum, dest.slice(..len), source.slice(..len));
                let refused = timeout(BOUND, reduced).await;
                assert!(
                    matches!(
                        refused,
                        Ok(Err(ferroshmem_runtime::Error::CollectiveMismatch { .. }))
                    ),
                    "nodes {nodes:?}, member {odd} odd, PE {me}: {refused:?}"
                );
            },
        )
        .await;
    }
}

/// A floating-point sum scattered among node leaders gives every member the same bits: each
/// part of a node's partial and of the result is combined once, by one member or leader,
/// and copied to the others; with the node's combining shared and not. Values of mixed
/// magnitudes, whose sum depends on the order of its terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floating_point_sum_by_node_gives_every_member_the_same_bits() {
    let alone = every_member_gets_the_same_bits(no_eager_slots).await;
    let shared = every_member_gets_the_same_bits(shared_combining).await;
    let differs = (0..LEN).find(|&i| alone[i] != shared[i]);
    assert_eq!(
        differs, None,
        "the first element whose bits differ, shared or not"
    );
}

/// [`a_floating_point_sum_by_node_gives_every_member_the_same_bits`] with the teams'
/// configuration `config`; returns the bits every member got.
async fn every_member_gets_the_same_bits(config: fn(&DataPlane) -> TeamConfig) -> Vec<u64> {
    let nodes = [0, 1, 1, 2, 2, 2];
    let results = Arc::new(std::sync::Mutex::new(vec![Vec::new(); nodes.len()]));
    let kept = results.clone();
    on_every_pe(
        nodes_laid_out(&nodes, 4096),
        config,
        move |dp, world, me| {
            let kept = kept.clone();
            async move {
                let place = |at: usize| Allocation::new(HeapId(1), at, LEN * 8);
                let buffer =
                    |at| SymBuffer::<f64>::from_allocation(place(at), LEN).expect("a buffer");
                let (source, dest) = (buffer(0), buffer(LEN * 8));
                let mine: Vec<f64> = (0..LEN)
                    .map(|i| {
                        (me as f64 + 1.0) * 10f64.powi((i % 9) as i32 - 4) + 1.0 / (i as f64 + 3.0)
                    })
                    .collect();
                dp.put(&source, &mine, me).await.expect("source filled");
                let summed = timeout(BOUND, world.reduce(ReduceOp::Sum, &dest, &source)).await;
                assert!(matches!(summed, Ok(Ok(()))), "PE {me}: {summed:?}");
                let mut got = vec![0f64; LEN];
                dp.get(&mut got, &dest, me).await.expect("dest read");
                let bits = got.iter().map(|v| v.to_bits()).collect();
                kept.lock().expect("results")[me] = bits;
            }
        },
    )
    .await;
    let results = results.lock().expect("results");
    for (pe, bits) in results.iter().enumerate() {
        assert_eq!(bits.len(), LEN, "PE {pe} kept no result");
        let differs = (0..LEN).find(|&i| bits[i] != results[0][i]);
        assert_eq!(
            differs, None,
            "PE {pe} against PE 0: the first element whose bits differ"
        );
    }
    results[0].clone()
}

/// A loopback job of PEs on the given nodes.
type Transport = fn(&[usize]) -> Vec<Arc<DataPlane>>;

/// The transports the rounds run on: writes of any length kept in order, those above 4 KiB
/// landing late, and every operation in flight.
const TRANSPORTS: [Transport; 3] = [
    |nodes| nodes_laid_out(nodes, usize::MAX),
    |nodes| nodes_laid_out(nodes, 4096),
    nodes_in_flight,
];

/// [`no_eager_slots`], with broadcasts of an element and more scattered among the node
/// heads on three nodes or more ([`TeamConfig::large_bytes`]), their parts in blocks of 200
/// bytes (25 elements), and reductions of as many scattered.
fn scattered_broadcasts(dp: &DataPlane) -> TeamConfig {
    TeamConfig {
        large_bytes: 8,
        pipeline_bytes: 200,
        ..no_eager_slots(dp)
    }
}

/// [`scattered_broadcasts`] whose parts move whole, not in blocks.
fn scattered_whole(dp: &DataPlane) -> TeamConfig {
    TeamConfig {
        pipeline_bytes: 0,
        ..scattered_broadcasts(dp)
    }
}

/// Broadcasts on two nodes, and on three or more, from every root, scattered among the node
/// heads (parts in blocks, and whole) and down the tree: lengths that leave some heads an
/// empty part, that split unevenly among the heads, and whole; into another buffer and in
/// place (`dest` the root's `source`); each followed by a sum, whose first words may reach
/// a head still reading the broadcast's; with writes of any length kept in order, with
/// writes above 4 KiB landing late, and with every operation in flight (a head may see
/// one block's post while the next block is still on its way). Nodes of several PEs
/// (consecutive and not), of one PE each, and five nodes. Every member spoils its buffers
/// as soon as its call returns; nothing is written past the length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcasts_scattered_among_the_node_heads_reach_every_member_from_every_root() {
    let layouts: [&[usize]; 5] = [
        // Two nodes: down the tree by node either way.
        &[0, 0, 1, 1],
        &[0, 0, 1, 1, 2, 2],
        &[0, 1, 2],
        &[1, 0, 2, 1, 0],
        &[0, 0, 1, 2, 3, 4],
    ];
    // Down the tree too (`large_bytes` out of reach), whose pushed children enter the next
    // call, of another length, while their parent may still read their acknowledgement.
    let tree_only = |dp: &DataPlane| TeamConfig {
        large_bytes: usize::MAX,
        ..no_eager_slots(dp)
    };
    for ((nodes, transport), config) in layouts
        .into_iter()
        .flat_map(|l| TRANSPORTS.map(|t| (l, t)))
        .flat_map(|l| {
            [
                (l, scattered_broadcasts as fn(&DataPlane) -> TeamConfig),
                (l, scattered_whole),
                (l, tree_only),
            ]
        })
    {
        let n = nodes.len();
        on_every_pe(transport(nodes), config, move |dp, world, me| async move {
            broadcasting_rounds(&dp, &world, me, n).await
        })
        .await;
    }
}

/// One PE's rounds of
/// [`broadcasts_scattered_among_the_node_heads_reach_every_member_from_every_root`].
async fn broadcasting_rounds(dp: &DataPlane, world: &Team, me: usize, n: usize) {
    let (source, dest) = source_and_dest();
    let calls = (0..n).flat_map(|root| {
        [1, 2, 1001, LEN]
            .into_iter()
            .flat_map(move |len| [(root, len, false), (root, len, true)])
    });
    for (call, (root, len, in_place)) in calls.enumerate() {
        let mine: Vec<u64> = (0..len).map(|i| element(call, me, i)).collect();
        dp.put(source.slice(..len), &mine, me)
            .await
            .expect("source filled");
        let into = if in_place { &source } else { &dest };
        let sent = world.broadcast(into.slice(..len), source.slice(..len), root);
        let done = timeout(BOUND, sent).await;
        let what = format!("PE {me}, root {root}, {len} elements, in place {in_place}");
        let ended = done.map_err(|_| "still waiting".to_string());
        let want = |i| element(call, root, i);
        check_and_spoil(dp, me, (&source, into), (len, in_place), ended, &what, want).await;
        // A reduction right behind it, whose first words may reach a member still reading
        // the broadcast's.
        dp.put(source.slice(..len), &mine, me)
            .await
            .expect("source filled");
        let reduced = world.reduce(ReduceOp::Sum, dest.slice(..len), source.slice(..len));
        let ended = timeout(BOUND, reduced)
            .await
            .map_err(|_| "still waiting".to_string());
        let sum = |i: usize| (0..n).map(|pe| element(call, pe, i)).sum::<u64>();
        let what = format!("{what}, the sum after it");
        check_and_spoil(dp, me, (&source, &dest), (len, false), ended, &what, sum).await;
    }
}

/// A scattered broadcast whose members disagree on its length (both lengths scattered, in
/// as many blocks and in fewer): a head of another node than the root's, or a member behind
/// such a head. Where a head differs, every member fails with `CollectiveMismatch` but the
/// root's node-mate (released at once to read the root's `source`, as down the tree);
/// where a member behind a head differs, that member and its head do (the head has passed
/// its part on by then, as a tree's inner member has). Nobody waits forever, and the next
/// broadcast reaches everyone; with operations landing at once and in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scattered_broadcast_of_another_length_fails_off_the_roots_node_then_the_next_works() {
    let transports: [Transport; 2] = [|nodes| nodes_laid_out(nodes, usize::MAX), nodes_in_flight];
    let cases = [2, 3].into_iter().flat_map(|odd| {
        [LEN - 1, LEN / 4]
            .into_iter()
            .flat_map(move |odd_len| transports.map(|t| (odd, odd_len, t)))
    });
    for (odd, odd_len, transport) in cases {
        on_every_pe(
            transport(&[0, 0, 1, 1, 2, 2]),
            scattered_broadcasts,
            move |dp, world, me| async move {
                let (source, dest) = source_and_dest();
                let len = if me == odd { odd_len } else { LEN };
                let sent = world.broadcast(dest.slice(..len), source.slice(..len), 0);
                let done = timeout(BOUND, sent).await;
                let what = format!("PE {me}, PE {odd} odd with {odd_len} elements");
                let done = done.unwrap_or_else(|_| panic!("{what}: still waiting"));
                let told = match odd {
                    2 => me != 1,
                    _ => me == 2 || me == 3,
                };
                if told {
                    assert!(
                        matches!(
                            done,
                            Err(ferroshmem_runtime::Error::CollectiveMismatch { .. })
                        ),
                        "{what}: {done:?}"
                    );
                }
                let mine: Vec<u64> = (0..LEN).map(|i| element(7, me, i)).collect();
                dp.put(&source, &mine, me).await.expect("source filled");
                let call = world.broadcast(&dest, &source, 0);
                expect_in_dest(&dp, me, &format!("{what}: the next"), call, |i| {
                    element(7, 0, i)
                })
                .await;
            },
        )
        .await;
    }
}

/// A scattered broadcast whose parts' blocks alternate between a length the transport keeps
/// in order behind its post and one a byte longer (4096 and 4104 bytes, writes of up to
/// 4096 kept in order, longer ones landing late): no block's post may overtake an earlier
/// block's data, or a head passes on a block that has not landed. Every member ends with
/// the root's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_either_side_of_the_ordered_length_reach_every_head_whole() {
    const ELEMENTS: usize = 4100;
    let config = |dp: &DataPlane| TeamConfig {
        pipeline_bytes: 5000,
        ..scattered_broadcasts(dp)
    };
    on_every_pe(
        nodes_laid_out(&[0, 1, 2], 4096),
        config,
        |dp, world, me| async move {
            let buffer = |at| {
                let place = Allocation::new(HeapId(1), at, ELEMENTS * 8);
                SymBuffer::<u64>::from_allocation(place, ELEMENTS).expect("a buffer")
            };
            let (source, dest) = (buffer(0), buffer(ELEMENTS * 8));
            let mine: Vec<u64> = (0..ELEMENTS).map(|i| element(5, me, i)).collect();
            dp.put(&source, &mine, me).await.expect("source filled");
            let sent = timeout(BOUND, world.broadcast(&dest, &source, 0)).await;
            assert!(matches!(sent, Ok(Ok(()))), "PE {me}: {sent:?}");
            let mut got = vec![0; ELEMENTS];
            dp.get(&mut got, &dest, me).await.expect("dest read");
            let want: Vec<u64> = (0..ELEMENTS).map(|i| element(5, 0, i)).collect();
            let wrong = (0..ELEMENTS).find(|&i| got[i] != want[i]);
            assert_eq!(
                wrong, None,
                "PE {me}: the first element that is not the root's"
            );
        },
    )
    .await;
}
