//! Communication contexts: operations on a context made from the world and from a team (PE
//! numbers the team's), `_nbi` puts completed by the context's own `quiet`, fences, atomics
//! and signals on a context, and refused PE numbers; and the non-blocking fetching atomics,
//! whose old values land by `quiet`.

use ferroshmem::{Context, ContextOptions, Error, Pe, Result, SignalOp, SymBuffer};

use super::ensure;

/// Every operation family on a world context and on a team context, checked on the PE that
/// received it.
pub async fn contexts(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let ctx = pe.ctx_create(ContextOptions::PRIVATE | ContextOptions::NOSTORE);
    ensure!(ctx.team().is_none(), "a world context has no team");
    ensure!(
        ctx.options().contains(ContextOptions::PRIVATE),
        "options kept"
    );
    let data = pe.calloc::<u64>(8).await?;
    let counter = pe.calloc::<u64>(1).await?;
    let sig = pe.calloc::<u64>(1).await?;
    // _nbi puts on the context, completed by its quiet before the barrier.
    let mine: Vec<u64> = (0..8).map(|i| (me as u64) << 8 | i).collect();
    ctx.put_nbi(data.slice(..4), &mine[..4], next)?;
    ctx.fence();
    ctx.put_nbi(data.slice(4..), &mine[4..], next)?;
    ctx.quiet().await?;
    ctx.atomic_fetch_add(&counter, 1, 0).await?;
    ctx.put_signal(data.slice(..1), &mine[..1], (&sig, 1, SignalOp::Add), next)
        .await?;
    pe.barrier_all().await?;
    let mut got = vec![0u64; 8];
    pe.get(&mut got, &data, me).await?;
    let want: Vec<u64> = (0..8).map(|i| (prev as u64) << 8 | i).collect();
    ensure!(
        got == want,
        "PE {me}: the context's puts from PE {prev}: {got:?}"
    );
    ensure!(ctx.g(&sig, me).await? == 1, "PE {me}: one signal added");
    if me == 0 {
        let total = ctx.atomic_fetch(&counter, 0).await?;
        ensure!(total == n as u64, "the context's adds: {total}");
    }
    let refused = ctx.p(&counter, 0, n).await;
    ensure!(
        matches!(refused, Err(Error::PeOutOfRange { .. })),
        "PE {n} of a world context: {refused:?}"
    );
    team_context(pe, &data).await?;
    pe.barrier_all().await?;
    for b in [data, counter, sig] {
        pe.free(b).await.map_err(|e| e.error)?;
    }
    Ok(())
}

/// A context of the even PEs numbers them as the team does: team PE 1 is world PE 2.
async fn team_context(pe: &Pe, data: &SymBuffer<u64>) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let evens = pe.team_world().split_strided(0, 2, n.div_ceil(2)).await?;
    if let Some(team) = evens {
        let ctx = Context::for_team(&team, ContextOptions::NONE)?;
        ensure!(
            ctx.team().map(|t| t.n_pes()) == Some(n.div_ceil(2)),
            "the context's team"
        );
        let (tme, tn) = (team.my_pe(), team.n_pes());
        ctx.p(data.at(0), 1000 + tme as u64, (tme + 1) % tn).await?;
        ctx.quiet().await?;
        team.sync().await?;
        let from = (tme + tn - 1) % tn;
        let got = pe.g(data.at(0), me).await?;
        ensure!(
            got == 1000 + from as u64,
            "PE {me} in the even team got {got}"
        );
        team.destroy().await?;
    }
    Ok(())
}

/// The fetching atomics' `_nbi` forms: every PE fetch-adds on PE 0's counter and swaps into
/// the next PE's word, the old values landing in its own symmetric words by `quiet`; the
/// fetched adds are distinct and the counter ends at their sum.
pub async fn fetching_nbi_atomics(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let counter = pe.calloc::<u64>(1).await?;
    let word = pe.calloc::<i32>(1).await?;
    let fetched = pe.calloc::<u64>(3).await?;
    let swapped = pe.calloc::<i32>(1).await?;
    let real = pe.calloc::<f64>(2).await?;
    pe.barrier_all().await?;
    pe.atomic_fetch_add_nbi(fetched.at(0), &counter, 1 << me, 0)?;
    pe.atomic_swap_nbi(&swapped, &word, me as i32 + 1, (me + 1) % n)?;
    pe.atomic_fetch_or_nbi(fetched.at(1), &counter, 0, 0)?;
    pe.atomic_compare_swap_nbi(fetched.at(2), &counter, (u64::MAX, 7), 0)?;
    pe.atomic_swap_nbi(real.at(0), real.at(1), 2.5f64, me)?;
    pe.quiet().await?;
    pe.barrier_all().await?;
    let mine = pe.g(fetched.at(0), me).await?;
    ensure!(
        mine & (1 << me) == 0,
        "PE {me}: its own add was not in the old value {mine:#x}"
    );
    ensure!(
        pe.g(&swapped, me).await? == 0,
        "PE {me}: the swap's old value"
    );
    let got = pe.g(&word, me).await?;
    let from = (me + n - 1) % n;
    ensure!(
        got == from as i32 + 1,
        "PE {me}: the swapped-in word is {got}"
    );
    ensure!(pe.g(real.at(1), me).await? == 2.5, "PE {me}: the f64 swap");
    let total = pe.g(&counter, 0).await?;
    ensure!(total == (1u64 << n) - 1, "the counter ends at {total:#x}");
    let fetched_all = pe.calloc::<u64>(n).await?;
    pe.team_world()
        .fcollect(&fetched_all, fetched.at(0))
        .await?;
    let mut olds = vec![0u64; n];
    pe.get(&mut olds, &fetched_all, me).await?;
    olds.sort_unstable();
    olds.dedup();
    ensure!(olds.len() == n, "fetch-add old values repeat: {olds:?}");
    let refused = pe.atomic_fetch_add_nbi(fetched.at(0), &counter, 1, n);
    ensure!(
        matches!(refused, Err(Error::PeOutOfRange { .. })),
        "{refused:?}"
    );
    pe.barrier_all().await?;
    pe.free(fetched_all).await.map_err(|e| e.error)?;
    for b in [counter, fetched] {
        pe.free(b).await.map_err(|e| e.error)?;
    }
    pe.free(word).await.map_err(|e| e.error)?;
    pe.free(swapped).await.map_err(|e| e.error)?;
    pe.free(real).await.map_err(|e| e.error)
}
