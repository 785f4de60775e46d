//! Teams that span nodes: every collective on teams split from the world so that they take
//! in several nodes unevenly (all of them, all but PE 0, all but the last PE), under every
//! configuration, values checked; then members on different nodes that call different
//! collectives, or the same with other sizes, all get `CollectiveMismatch` and the team goes
//! on working. In a job on one node it runs the same collectives (and skips the mismatches
//! across nodes).

use std::time::Duration;

use ferroshmem::{Error, Pe, ReduceOp, Result, Team};

use super::{
    check_alltoall, check_broadcast, check_collect, check_fcollect, check_reduce, configs, ensure,
    read, Bufs,
};

/// Teams of `config` that span the job's nodes: a copy of the world, the world without PE 0
/// and without the last PE (in jobs of more than two PEs). `None` where this PE is no member.
async fn spanning_teams(pe: &Pe, config: ferroshmem::TeamConfig) -> Result<Vec<Option<Team>>> {
    let world = pe.team_world();
    let n = pe.n_pes();
    let mut teams = vec![world.split_strided_with(0, 1, n, config).await?];
    if n > 2 {
        teams.push(world.split_strided_with(1, 1, n - 1, config).await?);
        teams.push(world.split_strided_with(0, 1, n - 1, config).await?);
    }
    Ok(teams)
}

/// Every collective of `t` at `len` elements, from every root.
async fn every_collective(pe: &Pe, t: &Team, b: &Bufs, len: usize) -> Result<()> {
    for root in 0..t.n_pes() {
        check_broadcast(pe, t, b, len, root).await?;
    }
    check_fcollect(pe, t, b, len).await?;
    check_collect(pe, t, b, len).await?;
    check_alltoall(pe, t, b, len).await?;
    check_reduce::<i32>(pe, t, b, len, ReduceOp::Sum).await?;
    check_reduce::<f64>(pe, t, b, len, ReduceOp::Sum).await?;
    check_reduce::<u64>(pe, t, b, len, ReduceOp::Xor).await?;
    check_reduce::<f32>(pe, t, b, len, ReduceOp::Prod).await?;
    t.barrier().await?;
    t.sync().await
}

/// The scenario.
pub async fn across_nodes(pe: &Pe) -> Result<()> {
    let cap = 8 * 20_000 * 3 + 64;
    let b = Bufs {
        src: pe.calloc::<u64>(cap).await?,
        dst: pe.calloc::<u64>(cap).await?,
    };
    for (name, config) in configs() {
        for team in spanning_teams(pe, config).await? {
            let Some(t) = team else { continue };
            for len in [1, 7, 1025, 20_000] {
                every_collective(pe, &t, &b, len).await.map_err(|e| {
                    Error::InvalidArgument(format!(
                        "{name}, team of {} PEs from PE {:?}, {len} elements: {e}",
                        t.n_pes(),
                        t.world_pe(0)
                    ))
                })?;
            }
            t.destroy().await?;
        }
    }
    pe.free(b.dst).await?;
    pe.free(b.src).await?;
    mismatches_across_nodes(pe).await
}

/// The members on the last PE's node call otherwise than the others: each collective ends
/// in `CollectiveMismatch` on every member, and the world goes on working.
async fn mismatches_across_nodes(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let node = pe.team_node();
    if node.n_pes() == n {
        return Ok(());
    }
    let odd = node.team_pe(n - 1).is_some();
    let world = pe.team_world();
    let buf = pe.calloc::<u64>(8 * 10_000).await?;
    let mismatch = |r: Result<()>, what: &str| -> Result<()> {
        ensure!(
            matches!(r, Err(Error::CollectiveMismatch { .. })),
            "PE {me}: {what}: {r:?}"
        );
        Ok(())
    };
    // Past the eager sizes: flat fcollect, whose first sync (by node) finds it.
    let len = if odd { 6000 } else { 5000 };
    let r = world
        .fcollect(buf.slice(..8 * len), buf.slice(70_000..70_000 + len))
        .await;
    mismatch(r, "fcollect sizes")?;
    // The same at eager sizes: by node where a node holds several PEs, flat otherwise.
    let len = if odd { 2 } else { 1 };
    let r = world
        .fcollect(buf.slice(..8 * len), buf.slice(70_000..70_000 + len))
        .await;
    mismatch(r, "fcollect sizes, eager")?;
    let r = world
        .alltoall(
            buf.slice(..n * len),
            buf.slice(70_000..70_000 + n * len),
            len,
        )
        .await;
    mismatch(r, "alltoall sizes, eager")?;
    // A barrier against an fcollect: both sync first.
    let r = if odd {
        world
            .fcollect(buf.slice(..8 * 6000), buf.slice(70_000..76_000))
            .await
    } else {
        world.barrier().await
    };
    mismatch(r, "barrier against fcollect")?;
    // Reductions and broadcasts down the tree by node (16 KiB: past the eager sizes).
    let op = if odd { ReduceOp::Max } else { ReduceOp::Sum };
    let r = world
        .reduce(op, buf.slice(..2048), buf.slice(4096..6144))
        .await;
    mismatch(r, "reduce operators")?;
    // The same at eager sizes: by node where a node holds several PEs (each leader passes
    // its verdict on to its node), flat otherwise.
    let r = world
        .reduce(op, buf.slice(..4), buf.slice(4096..4100))
        .await;
    mismatch(r, "reduce operators, eager")?;
    // One member alone disagrees (on two hosts of two PEs, a member that is not its node's
    // leader): its leader passes the verdict on.
    let op = if me == n - 1 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    let r = world
        .reduce(op, buf.slice(..4), buf.slice(4096..4100))
        .await;
    mismatch(r, "reduce operators of the last PE, eager")?;
    eager_broadcast_mismatches(pe, &world, &buf, odd).await?;
    // A broadcast's members learn of a mismatch from their parent and children: the root
    // and the other node's members do; the root's node-mates, which agree with the root and
    // have no children, may return `Ok`.
    let len = if odd { 2048 } else { 2047 };
    let r = world
        .broadcast(buf.slice(..len), buf.slice(4096..4096 + len), 0)
        .await;
    if odd || me == 0 {
        mismatch(r, "broadcast lengths")?;
    } else {
        ensure!(
            matches!(r, Ok(()) | Err(Error::CollectiveMismatch { .. })),
            "PE {me}: broadcast lengths: {r:?}"
        );
    }
    // The world still works, values checked.
    world.sync().await?;
    pe.put(buf.at(1), &[me as u64 + 1], me).await?;
    world.sum_reduce(buf.at(0), buf.at(1)).await?;
    let got = read(pe, buf.slice(..1)).await?;
    ensure!(
        got[0] == (n * (n + 1) / 2) as u64,
        "sum after mismatches: {got:?}"
    );
    tokio::time::timeout(Duration::from_secs(30), world.barrier())
        .await
        .map_err(|_| Error::InvalidArgument("barrier after mismatches hung".into()))??;
    pe.free(buf).await?;
    straddling_the_by_node_limit(pe, odd).await
}

/// Eager broadcasts from PE 0 whose members on the last PE's node disagree with it, then
/// whose leader there alone does. By node (where a node holds several PEs), each leader of a
/// node other than the root's passes the root's message on, or its verdict after a
/// mismatch, so every member on the last PE's node fails with `CollectiveMismatch` either
/// way; the root, which receives nothing, and its node-mates, which agree with it, may
/// return `Ok`.
async fn eager_broadcast_mismatches(
    pe: &Pe,
    world: &Team,
    buf: &ferroshmem::SymBuffer<u64>,
    odd: bool,
) -> Result<()> {
    let me = pe.my_pe();
    let leads_odd_node = odd && pe.team_node().world_pe(0) == Some(me);
    for (what, differs) in [
        ("lengths", odd),
        ("lengths, the leader alone", leads_odd_node),
    ] {
        let len = if differs { 2 } else { 1 };
        let r = world
            .broadcast(buf.slice(..len), buf.slice(4096..4096 + len), 0)
            .await;
        match odd {
            true => ensure!(
                matches!(r, Err(Error::CollectiveMismatch { .. })),
                "PE {me}: eager broadcast {what}: {r:?}"
            ),
            false => ensure!(
                matches!(r, Ok(()) | Err(Error::CollectiveMismatch { .. })),
                "PE {me}: eager broadcast {what}: {r:?}"
            ),
        }
    }
    Ok(())
}

/// `fcollect` blocks on either side of the by-node limit (the whole result fits a slot on
/// the members outside the last PE's node, not on those in it): on a team whose nodes hold
/// several members the by-node and flat eager forms meet only in part, yet every member
/// fails with `CollectiveMismatch`, in bounded time, and the team can still be destroyed.
async fn straddling_the_by_node_limit(pe: &Pe, odd: bool) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let config = ferroshmem::TeamConfig::default();
    let team = pe.team_world().split_strided_with(0, 1, n, config).await?;
    let Some(t) = team else {
        return Ok(());
    };
    let buf = pe.calloc::<u64>(8 * 1024).await?;
    let whole = config.eager_bytes / 8 / n;
    let len = if odd { whole + 1 } else { whole };
    let call = t.fcollect(buf.slice(..n * len), buf.slice(7000..7000 + len));
    let r = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .map_err(|_| Error::InvalidArgument("fcollect across the limit hung".into()))?;
    ensure!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "PE {me}: fcollect across the by-node limit: {r:?}"
    );
    let destroyed = tokio::time::timeout(Duration::from_secs(30), t.destroy()).await;
    ensure!(destroyed.is_ok(), "PE {me}: destroying the team hung");
    pe.free(buf).await?;
    Ok(())
}
