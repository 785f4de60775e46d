//! Scenarios of the query routines (version, name, accessibility, `ptr`), of the allocation
//! extras (hints, `realloc`) and of the `_vector` waits and tests.

use std::time::Duration;

use ferroshmem::{Cmp, Error, FreeError, MallocHints, Pe, Result};

use super::ensure;

/// The query routines: the version and name, which PEs and addresses are accessible, and
/// `ptr` (the next PE's copy read through it where that PE is mapped, none where it is not).
pub async fn queries(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    ensure!(pe.info_get_version() == (1, 5), "version");
    ensure!(pe.info_get_name().starts_with("ferroshmem"), "name");
    ensure!(
        (0..n).all(|p| pe.pe_accessible(p)) && !pe.pe_accessible(n),
        "pe_accessible"
    );
    let buf = pe.calloc::<u64>(4).await?;
    let own = pe.ptr(&buf, me)?.ok_or(Error::Shutdown)?;
    ensure!(pe.addr_accessible(own.cast(), next), "a symmetric address");
    ensure!(!pe.addr_accessible(own.cast(), n), "a PE past the end");
    let on_stack = 7u64;
    ensure!(
        !pe.addr_accessible(std::ptr::from_ref(&on_stack).cast(), me),
        "an address off the heap"
    );
    pe.p(buf.at(0), 100 + me as u64, me).await?;
    pe.barrier_all().await?;
    match pe.ptr(&buf, next)? {
        Some(theirs) => {
            // SAFETY: `theirs` is the next PE's copy of `buf`, mapped here and alive until
            // the barrier below; it wrote it before the barrier above and nobody writes it now.
            #[allow(unsafe_code)]
            let seen = unsafe { theirs.read_volatile() };
            ensure!(seen == 100 + next as u64, "read through ptr: {seen}");
        }
        None => ensure!(!pe.is_mapped(next), "no ptr to a mapped PE"),
    }
    ensure!(
        matches!(pe.ptr(&buf, n), Err(Error::PeOutOfRange { .. })),
        "ptr past the end"
    );
    let world = pe.team_world();
    ensure!(
        world.ptr(&buf, next)? == pe.ptr(&buf, next)?,
        "team_ptr on the world team"
    );
    ensure!(
        matches!(world.ptr(&buf, n), Err(Error::PeOutOfRange { .. })),
        "team_ptr past the end"
    );
    pe.barrier_all().await?;
    pe.free(buf).await?;
    let hinted = pe
        .malloc_with_hints::<u64>(8, MallocHints::ATOMICS_REMOTE | MallocHints::SIGNAL_REMOTE)
        .await?;
    pe.atomic_set(hinted.at(3), 0, me).await?;
    pe.barrier_all().await?;
    pe.atomic_add(hinted.at(3), 5, next).await?;
    pe.barrier_all().await?;
    let got = pe.g(hinted.at(3), me).await?;
    ensure!(got == 5, "an atomic on a hinted allocation: {got}");
    pe.free(hinted).await?;
    Ok(())
}

/// The `_vector` waits and tests, each variable against its own value; the last wait is
/// completed by the previous PE's write.
pub async fn vector_waits(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let vars = pe.calloc::<i32>(4).await?;
    pe.put(&vars, &[0, 5, 2, 9], me).await?;
    let values = [0, 5, 3, 9];
    let skip_2 = [false, false, true, false];
    let below = [1, 4, 1, 10];
    ensure!(
        !pe.test_all_vector(&vars, None, Cmp::Eq, &values)?,
        "test_all_vector"
    );
    ensure!(
        pe.test_all_vector(&vars, Some(&skip_2), Cmp::Eq, &values)?,
        "test_all_vector with exclusions"
    );
    ensure!(
        pe.test_some_vector(&vars, None, Cmp::Gt, &below)? == vec![1, 2],
        "test_some_vector"
    );
    let mut seen = [false; 4];
    for _ in 0..4 {
        if let Some(i) = pe.test_any_vector(&vars, None, Cmp::Gt, &below)? {
            seen[i] = true;
        }
    }
    ensure!(
        seen == [false, true, true, false],
        "test_any_vector in turn: {seen:?}"
    );
    pe.wait_until_all_vector(&vars, Some(&skip_2), Cmp::Eq, &values)
        .timeout(Duration::from_secs(30))
        .await?;
    let some = pe
        .wait_until_some_vector(&vars, None, Cmp::Gt, &below)
        .await?;
    ensure!(some == vec![1, 2], "wait_until_some_vector {some:?}");
    let any = pe
        .wait_until_any_vector(&vars, None, Cmp::Gt, &below)
        .await?;
    ensure!(matches!(any, Some(1 | 2)), "wait_until_any_vector {any:?}");
    let short = pe.test_all_vector(&vars, None, Cmp::Eq, &values[..3]);
    ensure!(
        matches!(short, Err(Error::InvalidArgument(_))),
        "short values: {short:?}"
    );
    pe.barrier_all().await?;
    let writer = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        pe.p(vars.at(2), 3, next).await
    };
    let waiter = pe
        .wait_until_all_vector(&vars, None, Cmp::Eq, &values)
        .timeout(Duration::from_secs(30));
    let (written, waited) = tokio::join!(writer, waiter);
    written?;
    waited?;
    pe.barrier_all().await?;
    pe.free(vars).await?;
    sixteen_bit_waits(pe).await
}

/// Waits and tests on 16-bit words (which only waits and tests take): the previous PE's put
/// completes a wait; the vector and `_any` forms see them too.
async fn sixteen_bit_waits(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let shorts = pe.calloc::<i16>(3).await?;
    let flags = pe.calloc::<u16>(2).await?;
    pe.put(&shorts, &[-7, 0, 300], me).await?;
    ensure!(pe.test(shorts.at(0), Cmp::Lt, 0)?, "test on i16");
    ensure!(
        pe.test_some(&shorts, None, Cmp::Ne, 0)? == vec![0, 2],
        "test_some on i16"
    );
    ensure!(
        pe.test_all_vector(&shorts, None, Cmp::Eq, &[-7, 0, 300])?,
        "test_all_vector on i16"
    );
    pe.barrier_all().await?;
    let writer = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        pe.put(flags.at(1), &[0xfffe_u16], next).await
    };
    let waiter = pe
        .wait_until(flags.at(1), Cmp::Eq, 0xfffe_u16)
        .timeout(Duration::from_secs(30));
    let (written, waited) = tokio::join!(writer, waiter);
    written?;
    ensure!(waited? == 0xfffe, "wait_until on u16");
    let any = pe.wait_until_any(&flags, None, Cmp::Gt, 0).await?;
    ensure!(any == Some(1), "wait_until_any on u16: {any:?}");
    pe.barrier_all().await?;
    pe.free(flags).await?;
    pe.free(shorts).await?;
    Ok(())
}

/// `realloc` keeps this PE's first elements when it grows and when it shrinks, the result is
/// symmetric (the previous PE puts into it), and a refused size gives the buffer back whole.
pub async fn realloc(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let mine: Vec<u64> = (0..4).map(|i| (me * 10 + i) as u64).collect();
    let buf = pe.malloc::<u64>(4).await?;
    pe.put(&buf, &mine, me).await?;
    let buf = pe.realloc(buf, 8).await?;
    let mut got = vec![0u64; 8];
    pe.get(&mut got, &buf, me).await?;
    ensure!(got[..4] == mine[..], "grown: {got:?}");
    pe.barrier_all().await?;
    pe.p(buf.at(7), 700 + next as u64, next).await?;
    pe.barrier_all().await?;
    ensure!(
        pe.g(buf.at(7), me).await? == 700 + me as u64,
        "a put into the grown buffer"
    );
    let buf = pe.realloc(buf, 2).await?;
    ensure!(buf.len() == 2, "shrunk to {}", buf.len());
    let mut got = vec![0u64; 2];
    pe.get(&mut got, &buf, me).await?;
    ensure!(got[..] == mine[..2], "shrunk: {got:?}");
    let refused = pe.realloc(buf, usize::MAX).await;
    let buf = match refused {
        Err(FreeError {
            error: Error::InvalidArgument(_) | Error::HeapExhausted { .. },
            buffer: Some(buf),
        }) => buf,
        other => {
            return Err(Error::InvalidArgument(format!(
                "a huge realloc: {:?}",
                other.map(|b| b.len()).map_err(|e| e.error)
            )))
        }
    };
    ensure!(buf.len() == 2, "the refused buffer's length");
    pe.get(&mut got, &buf, me).await?;
    ensure!(
        got[..] == mine[..2],
        "the refused buffer's contents: {got:?}"
    );
    pe.free(buf).await?;
    Ok(())
}

/// OpenSHMEM 1.6's blocked strided transfers: three blocks of two elements, 3 apart in the
/// source and 4 apart in the destination, put into the next PE and read back from the
/// previous one; a stride shorter than a block is refused.
pub async fn blocked_strided(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let dest = pe.calloc::<u32>(12).await?;
    let src: Vec<u32> = (0..9).map(|i| (me as u32) << 8 | i).collect();
    pe.barrier_all().await?;
    pe.ibput(&dest, &src, (4, 3), (2, 3), next).await?;
    pe.barrier_all().await?;
    let mut got = vec![0u32; 12];
    pe.get(&mut got, &dest, me).await?;
    let from = |p: usize, i: u32| (p as u32) << 8 | i;
    let want: Vec<u32> = (0..12)
        .map(|j| match (j / 4, j % 4) {
            (b, 0 | 1) => from(prev, b * 3 + j % 4),
            _ => 0,
        })
        .collect();
    ensure!(got == want, "PE {me}: ibput from PE {prev} gave {got:?}");
    // Block b of the next PE's dest holds this PE's elements 3b, 3b + 1; read back 3 apart,
    // they land where they started.
    let mut back = vec![u32::MAX; 8];
    pe.ibget(&mut back, &dest, (3, 4), (2, 3), next).await?;
    let want_back: Vec<u32> = (0..8)
        .map(|k| match k % 3 {
            2 => u32::MAX,
            _ => from(me, k),
        })
        .collect();
    ensure!(
        back == want_back,
        "PE {me}: ibget from PE {next} gave {back:?}"
    );
    let refused = pe.ibput(&dest, &src, (1, 3), (2, 2), next).await;
    ensure!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    // Blocks of no elements move nothing, however many (at once: no operation per block).
    let empty = pe.ibput(&dest, &src, (0, 0), (0, 1 << 60), next).await;
    ensure!(empty.is_ok(), "ibput of empty blocks: {empty:?}");
    let empty = pe.ibget(&mut back, &dest, (0, 0), (0, 1 << 60), next).await;
    ensure!(empty.is_ok(), "ibget of empty blocks: {empty:?}");
    let nowhere = pe.ibput(&dest, &src, (0, 0), (0, 3), pe.n_pes()).await;
    ensure!(
        matches!(nowhere, Err(Error::PeOutOfRange { .. })),
        "ibput of empty blocks to no PE: {nowhere:?}"
    );
    pe.barrier_all().await?;
    pe.free(dest).await.map_err(|e| e.error)
}
