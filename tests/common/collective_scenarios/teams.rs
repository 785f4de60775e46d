//! Scenarios of team structure (splits, translation, errors, destruction, concurrent
//! creation, mismatches found by every member) and of locks.

use std::time::Duration;

use ferroshmem::{Error, Pe, ReduceOp, Result, SymBuffer, TeamConfig};

use super::ensure;

/// Team structure, translation, errors, destruction, concurrent creation and use, and
/// mismatches found on every member.
pub async fn teams(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let world = pe.team_world();
    let node = pe.team_node();
    ensure!(world.my_pe() == me && world.n_pes() == n, "world numbering");
    // The node team: the PEs whose memory is mapped here, in world order.
    let on_node: Vec<usize> = (0..n).filter(|&p| pe.is_mapped(p)).collect();
    ensure!(
        node.n_pes() == on_node.len(),
        "the node team is this node's PEs"
    );
    let node_rank = on_node.iter().position(|&p| p == me);
    ensure!(world.translate_pe(me, &node)? == node_rank, "world to node");
    for (i, &p) in on_node.iter().enumerate() {
        ensure!(node.world_pe(i) == Some(p), "node to world");
    }
    // Evens and odds.
    let evens = world.split_strided(0, 2, n.div_ceil(2)).await?;
    ensure!(evens.is_some() == (me % 2 == 0), "even membership");
    if let Some(e) = &evens {
        ensure!(
            e.my_pe() == me / 2 && e.n_pes() == n.div_ceil(2),
            "even numbering"
        );
        ensure!(
            e.translate_pe(e.my_pe(), &world)? == Some(me),
            "even to world"
        );
        ensure!(e.world_pe(e.n_pes()).is_none(), "past the end");
        ensure!(
            matches!(
                e.translate_pe(e.n_pes(), &world),
                Err(Error::PeOutOfRange { .. })
            ),
            "translate past the end"
        );
    }
    if let (Some(e), true) = (&evens, n > 1) {
        ensure!(
            world.translate_pe(1, e)?.is_none(),
            "an odd PE is no even one"
        );
    }
    // 2-D splits: rows of x, columns of stride x.
    for x in [1, 2, 3, n + 1] {
        let (row, column) = world.split_2d(x).await?;
        let xr = x.min(n);
        ensure!(row.world_pe(0) == Some(me / xr * xr), "row of {me} by {x}");
        ensure!(row.n_pes() == xr.min(n - me / xr * xr), "row size");
        ensure!(column.world_pe(0) == Some(me % xr), "column of {me} by {x}");
        ensure!(column.n_pes() == (n - me % xr).div_ceil(xr), "column size");
        ensure!(
            column.world_pe(1).is_none_or(|p| p == me % xr + xr),
            "column stride"
        );
        row.destroy().await?;
        column.destroy().await?;
    }
    // A negative stride lists its members downwards; a zero one names one PE.
    let reversed = world.split_strided(n - 1, -1, n).await?;
    let reversed = reversed.ok_or(Error::Shutdown)?;
    ensure!(reversed.my_pe() == n - 1 - me, "reversed numbering");
    ensure!(reversed.world_pe(0) == Some(n - 1), "reversed first member");
    ensure!(
        world.translate_pe(me, &reversed)? == Some(n - 1 - me),
        "world to reversed"
    );
    let mine = pe.calloc::<u64>(1).await?;
    let all = pe.calloc::<u64>(n).await?;
    pe.p(mine.at(0), me as u64, me).await?;
    reversed.fcollect(&all, &mine).await?;
    let mut gathered = vec![0u64; n];
    pe.get(&mut gathered, &all, me).await?;
    ensure!(
        gathered == (0..n as u64).rev().collect::<Vec<_>>(),
        "fcollect over the reversed team: {gathered:?}"
    );
    reversed.destroy().await?;
    pe.free(all).await?;
    pe.free(mine).await?;
    let last = world.split_strided(n - 1, 0, 1).await?;
    ensure!(
        last.as_ref().map(|t| t.world_pe(0)) == (me == n - 1).then_some(Some(n - 1)),
        "stride 0 of one PE"
    );
    if let Some(t) = last {
        t.destroy().await?;
    }
    // Invalid splits: the same typed error on every PE.
    let bad = world.split_strided(0, 0, 2).await;
    ensure!(
        matches!(bad, Err(Error::InvalidArgument(_))),
        "stride 0 of two: {bad:?}"
    );
    let bad = world.split_strided(0, -1, 2).await;
    ensure!(
        matches!(bad, Err(Error::InvalidArgument(_))),
        "below PE 0: {bad:?}"
    );
    let bad = world.split_strided(0, 1, 0).await;
    ensure!(
        matches!(bad, Err(Error::InvalidArgument(_))),
        "size 0: {bad:?}"
    );
    let bad = world.split_strided(0, 1, n + 1).await;
    ensure!(
        matches!(bad, Err(Error::PeOutOfRange { .. })),
        "too many: {bad:?}"
    );
    let bad = world.split_strided(n, 1, 1).await;
    ensure!(
        matches!(bad, Err(Error::PeOutOfRange { .. })),
        "start past the end: {bad:?}"
    );
    let bad = world.split_2d(0).await;
    ensure!(
        matches!(bad, Err(Error::InvalidArgument(_))),
        "xrange 0: {bad:?}"
    );
    if n > 1 {
        let bad = world.split_strided(0, 1, if me == 0 { 1 } else { n }).await;
        ensure!(
            matches!(bad, Err(Error::CollectiveMismatch { .. })),
            "mismatched split: {bad:?}"
        );
    }
    // Destruction.
    ensure!(
        matches!(world.destroy().await, Err(Error::InvalidArgument(_))),
        "world destroy"
    );
    if let Some(e) = evens {
        let copy = e.clone();
        e.destroy().await?;
        ensure!(
            copy.sync().await == Err(Error::TeamDestroyed),
            "sync after destroy"
        );
        ensure!(
            copy.destroy().await == Err(Error::TeamDestroyed),
            "destroy twice"
        );
        ensure!(
            copy.translate_pe(0, &world) == Err(Error::TeamDestroyed),
            "translate after destroy"
        );
    }
    // Regions go back to the pool: far more teams than the pool holds at once.
    for _ in 0..100 {
        let t = world.split_strided(0, 1, n).await?.ok_or(Error::Shutdown)?;
        t.sync().await?;
        t.destroy().await?;
    }
    concurrent(pe).await?;
    mismatches(pe).await?;
    world.sync().await
}

/// Teams created, and collectives run, at the same time: on disjoint halves, and by the
/// same PE on two teams at once.
async fn concurrent(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let world = pe.team_world();
    let half = n.div_ceil(2);
    let (low, high) = world.split_2d(half).await?;
    high.destroy().await?;
    // Each half splits itself and reduces on the result, both halves at once.
    let inner = low
        .split_strided(0, 1, low.n_pes())
        .await?
        .ok_or(Error::Shutdown)?;
    let v = pe.calloc::<u64>(2).await?;
    pe.p(v.at(0), me as u64 + 1, me).await?;
    inner.sum_reduce(v.at(1), v.at(0)).await?;
    let first = me / half * half;
    let want: u64 = (first..(first + half).min(n)).map(|p| p as u64 + 1).sum();
    ensure!(pe.g(v.at(1), me).await? == want, "sum over my half");
    // Two splits of two parents at once, then two reductions on them at once.
    let dup = world.split_strided(0, 1, n).await?.ok_or(Error::Shutdown)?;
    let (a, b) = tokio::join!(
        dup.split_strided(0, 1, n),
        inner.split_strided(0, 1, inner.n_pes())
    );
    let (a, b) = (a?.ok_or(Error::Shutdown)?, b?.ok_or(Error::Shutdown)?);
    let bufs = pe.calloc::<u64>(4).await?;
    pe.p(bufs.at(0), 1, me).await?;
    let (ra, rb) = tokio::join!(
        a.sum_reduce(bufs.at(1), bufs.at(0)),
        b.sum_reduce(bufs.at(2), bufs.at(0))
    );
    ra?;
    rb?;
    ensure!(
        pe.g(bufs.at(1), me).await? == n as u64,
        "concurrent reduce on all"
    );
    ensure!(
        pe.g(bufs.at(2), me).await? == inner.n_pes() as u64,
        "concurrent reduce on half"
    );
    for t in [a, b, dup, inner, low] {
        t.destroy().await?;
    }
    pe.free(bufs).await?;
    pe.free(v).await?;
    Ok(())
}

/// Members that call different collectives, or the same with other sizes, all get
/// `CollectiveMismatch`, and the team goes on working; a collective cancelled midway leaves
/// its team unusable instead of out of step.
async fn mismatches(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    if n == 1 {
        return Ok(());
    }
    let world = pe.team_world();
    let buf = pe.calloc::<u64>(8 * 10_000).await?;
    // Sizes past the eager limit: the flat algorithm's first sync finds the difference.
    let len = if me == 0 { 5000 } else { 6000 };
    let r = world
        .fcollect(buf.slice(..8 * len), buf.slice(70_000..70_000 + len))
        .await;
    ensure!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "fcollect sizes: {r:?}"
    );
    // Different operators on the eager path: every member sees every descriptor.
    let op = if me == 0 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    let r = world.reduce(op, buf.at(0), buf.at(1)).await;
    ensure!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "reduce operators: {r:?}"
    );
    // A barrier against a large broadcast... both sync first.
    let r = if me == 0 {
        world.barrier().await
    } else {
        world
            .fcollect(buf.slice(..8 * 6000), buf.slice(70_000..76_000))
            .await
    };
    ensure!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "barrier against fcollect: {r:?}"
    );
    world.sync().await?;
    world.sum_reduce(buf.at(0), buf.at(1)).await?;
    // PE 0 stays out; the others give up waiting for it (or, once another member gave up,
    // fail with it).
    let t = world.split_strided(0, 1, n).await?.ok_or(Error::Shutdown)?;
    if me != 0 {
        let mut first = Box::pin(t.sync());
        let r = tokio::time::timeout(Duration::from_millis(20), &mut first).await;
        ensure!(
            matches!(r, Err(_) | Ok(Err(Error::CollectiveMismatch { .. }))),
            "a sync without PE 0 finished: {r:?}"
        );
        if r.is_err() {
            // The first sync is still running on this PE: a second call on the team is busy.
            let busy = t.sync().await;
            ensure!(
                matches!(busy, Err(Error::TeamBusy)),
                "a second sync: {busy:?}"
            );
        }
        drop(first);
        let r = t.sync().await;
        ensure!(
            matches!(r, Err(Error::Desynchronized { .. })),
            "team after a cancelled sync: {r:?}"
        );
    }
    world.barrier().await?;
    mismatches_into_ready(pe, &buf).await?;
    pe.free(buf).await?;
    Ok(())
}

/// Mismatched calls on a team whose callers make every `dest` ready
/// (`TeamConfig::dest_ready`), whose blocks go out before the calls are compared: each
/// fails on every member, and the team stays usable.
async fn mismatches_into_ready(pe: &Pe, buf: &SymBuffer<u64>) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let world = pe.team_world();
    let config = TeamConfig {
        dest_ready: true,
        ..world.config()
    };
    let t = world
        .split_strided_with(0, 1, n, config)
        .await?
        .ok_or(Error::Shutdown)?;
    let len = if me == 0 { 5000 } else { 6000 };
    let r = t
        .fcollect(buf.slice(..8 * len), buf.slice(70_000..70_000 + len))
        .await;
    ensure!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "fcollect sizes into ready buffers: {r:?}"
    );
    t.sync().await?;
    let each = 8000 / n;
    let r = match me {
        0 => {
            let source = buf.slice(40_000..40_000 + n * each);
            t.alltoall(buf.slice(..n * each), source, each).await
        }
        _ => {
            let source = buf.slice(70_000..70_000 + each);
            t.fcollect(buf.slice(..n * each), source).await
        }
    };
    ensure!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "alltoall against fcollect into ready buffers: {r:?}"
    );
    t.sync().await?;
    t.sum_reduce(buf.at(0), buf.at(1)).await?;
    t.destroy().await
}

/// PEs take turns in a lock guarding a plain (non-atomic) counter on PE 0: the total is
/// exact. Also `test_lock`, and the errors of misuse.
pub async fn locks(pe: &Pe, rounds: u64) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let lock = pe.calloc::<u64>(3).await?;
    let counter = pe.calloc::<u64>(2).await?;
    for i in 0..rounds {
        // Two locks, with different home PEs, guarding two counters.
        let k = (i as usize + me) % 2;
        pe.set_lock(lock.at(k)).await?;
        let v = pe.g(counter.at(k), 0).await?;
        if i % 16 == 0 {
            tokio::task::yield_now().await;
        }
        pe.p(counter.at(k), v + 1, 0).await?;
        pe.clear_lock(lock.at(k)).await?;
    }
    pe.barrier_all().await?;
    let total = pe.g(counter.at(0), 0).await? + pe.g(counter.at(1), 0).await?;
    ensure!(
        total == rounds * n as u64,
        "counted {total}, expected {}",
        rounds * n as u64
    );
    // Misuse: releasing a lock not held, taking one twice.
    let r = pe.clear_lock(lock.at(2)).await;
    ensure!(
        matches!(r, Err(Error::LockNotHeld)),
        "clear without holding: {r:?}"
    );
    pe.barrier_all().await?;
    if me == 0 {
        ensure!(pe.test_lock(lock.at(2)).await?, "test_lock on a free lock");
        let r = pe.set_lock(lock.at(2)).await;
        ensure!(
            matches!(r, Err(Error::LockHeld)),
            "set_lock while holding: {r:?}"
        );
    }
    pe.barrier_all().await?;
    if me != 0 {
        ensure!(!pe.test_lock(lock.at(2)).await?, "test_lock on a held lock");
    }
    pe.barrier_all().await?;
    if me == 0 {
        pe.clear_lock(lock.at(2)).await?;
    }
    pe.barrier_all().await?;
    pe.free(counter).await?;
    pe.free(lock).await?;
    Ok(())
}
