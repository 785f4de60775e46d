//! Test scenarios that every PE of a job runs, the same in `run_local` jobs and in
//! multi-process jobs (launcher, mpirun). Each checks values and returns an error describing
//! the first mismatch.

mod contexts;
mod queries;

use std::time::Duration;

use ferroshmem::{AtomicInt, AtomicWord, Cmp, Error, Pe, Result, SignalOp};

/// Fails the scenario with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(Error::InvalidArgument(format!("check failed on line {}: {}", line!(), format!($($msg)*))));
        }
    };
}
pub(crate) use ensure;

/// Names of all scenarios, for the multi-process driver.
pub const ALL: &[&str] = &[
    "rma",
    "amo",
    "contention",
    "ordering",
    "signals",
    "waits",
    "errors",
    "barrier",
    "queries",
    "vector_waits",
    "realloc",
    "contexts",
    "fetching_nbi_atomics",
    "blocked_strided",
];

/// Runs the scenario called `name` on `pe`.
pub async fn run(name: &str, pe: Pe) -> Result<()> {
    match name {
        "rma" => rma(&pe).await,
        "amo" => amo(&pe).await,
        // Each add to a PE on another node is a fabric round trip: fewer there.
        "contention" => {
            let all_mapped = (0..pe.n_pes()).all(|p| pe.is_mapped(p));
            contention(&pe, if all_mapped { 100_000 } else { 2_000 }).await
        }
        "ordering" => ordering(&pe).await,
        "signals" => signals(&pe).await,
        "waits" => waits(&pe).await,
        "errors" => errors(&pe).await,
        "barrier" => barrier(&pe).await,
        "queries" => queries::queries(&pe).await,
        "vector_waits" => queries::vector_waits(&pe).await,
        "realloc" => queries::realloc(&pe).await,
        "contexts" => contexts::contexts(&pe).await,
        "fetching_nbi_atomics" => contexts::fetching_nbi_atomics(&pe).await,
        "blocked_strided" => queries::blocked_strided(&pe).await,
        other => Err(Error::InvalidArgument(format!("no scenario {other}"))),
    }
}

fn pattern(from: usize, len: usize, salt: u64) -> Vec<u64> {
    (0..len as u64)
        .map(|i| (from as u64) << 40 | salt << 32 | i)
        .collect()
}

/// Every RMA form moves the right bytes between every pair of neighbours.
pub async fn rma(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    for len in [1usize, 7, 1000, 300_000] {
        let buf = pe.malloc::<u64>(len).await?;
        pe.put(&buf, &pattern(me, len, 1), next).await?;
        pe.barrier_all().await?;
        let mut got = vec![0u64; len];
        pe.get(&mut got, &buf, me).await?;
        ensure!(got == pattern(prev, len, 1), "put of {len} elements");
        pe.barrier_all().await?;
        // get from the next PE: it holds what this PE put there
        pe.get(&mut got, &buf, next).await?;
        ensure!(got == pattern(me, len, 1), "get of {len} elements");
        pe.barrier_all().await?;
        pe.put_nbi(&buf, &pattern(me, len, 2), next)?;
        pe.quiet().await?;
        pe.barrier_all().await?;
        pe.get(&mut got, &buf, me).await?;
        ensure!(got == pattern(prev, len, 2), "put_nbi of {len}");
        let copy = pe.malloc::<u64>(len).await?;
        pe.get_nbi(&copy, &buf, next)?;
        pe.quiet().await?;
        pe.get(&mut got, &copy, me).await?;
        ensure!(got == pattern(me, len, 2), "get_nbi of {len}");
        pe.barrier_all().await?;
        pe.free(copy).await?;
        pe.free(buf).await?;
    }
    // p and g on every element type width
    let bytes = pe.calloc::<u8>(16).await?;
    let words = pe.calloc::<i32>(4).await?;
    let floats = pe.calloc::<f64>(2).await?;
    pe.p(bytes.at(me % 16), me as u8 + 1, next).await?;
    pe.p(words.at(3), -(me as i32), next).await?;
    pe.p(floats.at(1), me as f64 + 0.5, next).await?;
    pe.barrier_all().await?;
    ensure!(
        pe.g(bytes.at(prev % 16), me).await? == prev as u8 + 1,
        "p/g u8"
    );
    ensure!(pe.g(words.at(3), me).await? == -(prev as i32), "p/g i32");
    ensure!(
        pe.g(floats.at(1), me).await? == prev as f64 + 0.5,
        "p/g f64"
    );
    ensure!(pe.g(words.at(3), next).await? == -(me as i32), "remote g");
    pe.barrier_all().await?;
    // strided: every third element of the destination, from every second of the source
    let strided = pe.calloc::<u32>(30).await?;
    let src: Vec<u32> = (0..20).map(|i| (me * 1000 + i) as u32).collect();
    pe.iput(&strided, &src, 3, 2, 10, next).await?;
    pe.barrier_all().await?;
    let mut local = vec![0u32; 30];
    pe.get(&mut local, &strided, me).await?;
    for (i, &got) in local.iter().enumerate() {
        let want = if i % 3 == 0 {
            (prev * 1000 + (i / 3) * 2) as u32
        } else {
            0
        };
        ensure!(got == want, "iput element {i}: {got} != {want}");
    }
    let mut gathered = vec![0u32; 20];
    pe.iget(&mut gathered, &strided, 2, 3, 10, me).await?;
    for i in 0..10 {
        ensure!(
            gathered[2 * i] == (prev * 1000 + 2 * i) as u32,
            "iget element {i}"
        );
        ensure!(gathered[2 * i + 1] == 0, "iget left gaps alone");
    }
    pe.barrier_all().await?;
    pe.free(strided).await?;
    pe.free(floats).await?;
    pe.free(words).await?;
    pe.free(bytes).await?;
    Ok(())
}

async fn amo_ops<T: AtomicInt + TryFrom<u64> + Into<i128>>(pe: &Pe) -> Result<()>
where
    <T as TryFrom<u64>>::Error: std::fmt::Debug,
{
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let t = |v: u64| T::try_from(v).expect("small");
    let cell = pe.calloc::<T>(8).await?;
    // Each PE works on its own element of the next PE's array: results are exact.
    let mine = cell.at(me % 8);
    if me < 8 {
        pe.atomic_set(mine, t(5), next).await?;
        ensure!(pe.atomic_fetch(mine, next).await? == t(5), "set/fetch");
        ensure!(pe.atomic_swap(mine, t(9), next).await? == t(5), "swap");
        ensure!(
            pe.atomic_compare_swap(mine, t(1), t(2), next).await? == t(9),
            "failed cswap returns old"
        );
        ensure!(
            pe.atomic_compare_swap(mine, t(9), t(12), next).await? == t(9),
            "cswap"
        );
        ensure!(
            pe.atomic_fetch_add(mine, t(3), next).await? == t(12),
            "fetch_add"
        );
        pe.atomic_add(mine, t(1), next).await?;
        ensure!(pe.atomic_fetch_inc(mine, next).await? == t(16), "fetch_inc");
        pe.atomic_inc(mine, next).await?;
        ensure!(
            pe.atomic_fetch_and(mine, t(0b1110), next).await? == t(18),
            "fetch_and"
        );
        pe.atomic_and(mine, t(0b0110), next).await?;
        ensure!(
            pe.atomic_fetch_or(mine, t(0b1000), next).await? == t(0b0010),
            "fetch_or"
        );
        pe.atomic_or(mine, t(0b0001), next).await?;
        ensure!(
            pe.atomic_fetch_xor(mine, t(0b1111), next).await? == t(0b1011),
            "fetch_xor"
        );
        pe.atomic_xor(mine, t(0b0001), next).await?;
        ensure!(
            pe.atomic_fetch(mine, next).await? == t(0b0101),
            "final value"
        );
    }
    pe.barrier_all().await?;
    pe.free(cell).await?;
    Ok(())
}

/// Every AMO, on every integer type, gives OpenSHMEM's results.
pub async fn amo(pe: &Pe) -> Result<()> {
    amo_ops::<i32>(pe).await?;
    amo_ops::<u32>(pe).await?;
    amo_ops::<i64>(pe).await?;
    amo_ops::<u64>(pe).await?;
    float_amos::<f32>(pe, 1.5, -0.25).await?;
    float_amos::<f64>(pe, 2.75e300, -1.0e-300).await?;
    Ok(())
}

/// Fetch, set and swap on floats of the next PE (their bits move unchanged).
async fn float_amos<F: AtomicWord + PartialEq>(pe: &Pe, a: F, b: F) -> Result<()> {
    let (me, next) = (pe.my_pe(), (pe.my_pe() + 1) % pe.n_pes());
    let word = pe.calloc::<F>(2).await?;
    pe.barrier_all().await?;
    pe.atomic_set(word.at(1), a, next).await?;
    pe.barrier_all().await?;
    let fetched = pe.atomic_fetch(word.at(1), me).await?;
    ensure!(fetched == a, "float set then fetch: {fetched:?}");
    pe.barrier_all().await?;
    let old = pe.atomic_swap(word.at(1), b, next).await?;
    ensure!(old == a, "float swap returned {old:?}");
    pe.barrier_all().await?;
    let now = pe.atomic_fetch(word.at(1), me).await?;
    ensure!(now == b, "after the swap: {now:?}");
    pe.barrier_all().await?;
    pe.free(word).await?;
    Ok(())
}

/// Every PE adds 1 to one counter on PE 0 `times` times (and fetch-adds on another): the
/// totals are exact.
pub async fn contention(pe: &Pe, times: u64) -> Result<()> {
    let n = pe.n_pes() as u64;
    let counter = pe.calloc::<u64>(2).await?;
    let signed = pe.calloc::<i32>(1).await?;
    let mut seen_max = 0;
    for _ in 0..times {
        pe.atomic_add(counter.at(0), 1, 0).await?;
        let old = pe.atomic_fetch_inc(counter.at(1), 0).await?;
        seen_max = seen_max.max(old);
        pe.atomic_add(&signed, -1, 0).await?;
    }
    pe.barrier_all().await?;
    let total = pe.atomic_fetch(counter.at(0), 0).await?;
    ensure!(total == n * times, "counter total {total} != {}", n * times);
    ensure!(
        pe.atomic_fetch(counter.at(1), 0).await? == n * times,
        "fetch_inc total"
    );
    ensure!(
        seen_max < n * times,
        "fetch_inc results are distinct and below the total"
    );
    ensure!(
        pe.atomic_fetch(&signed, 0).await? == -((n * times) as i32),
        "signed total"
    );
    pe.barrier_all().await?;
    pe.free(signed).await?;
    pe.free(counter).await?;
    Ok(())
}

/// After `fence` or `quiet`, a flag seen set implies the data before it is visible.
pub async fn ordering(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let len = 1 << 16;
    let data = pe.calloc::<u64>(len).await?;
    let flag = pe.calloc::<u64>(1).await?;
    for round in 1..=20u64 {
        let payload = pattern(me, len, round);
        pe.put_nbi(&data, &payload, next)?;
        if round % 2 == 0 {
            pe.fence();
        } else {
            pe.quiet().await?;
        }
        pe.p(&flag, round, next).await?;
        pe.wait_until(&flag, Cmp::Ge, round)
            .timeout(Duration::from_secs(30))
            .await?;
        let mut got = vec![0u64; len];
        pe.get(&mut got, &data, me).await?;
        ensure!(
            got == pattern(prev, len, round),
            "round {round}: data behind the flag"
        );
        pe.barrier_all().await?;
    }
    pe.free(flag).await?;
    pe.free(data).await?;
    Ok(())
}

/// put_signal (SET and ADD), signal_op, signal_fetch and signal_wait_until.
pub async fn signals(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let data = pe.calloc::<u64>(4096).await?;
    let sig = pe.calloc::<u64>(2).await?;
    for round in 1..=10u64 {
        pe.put_signal(
            &data,
            &pattern(me, 4096, round),
            sig.at(0),
            round,
            SignalOp::Set,
            next,
        )
        .await?;
        let v = pe
            .signal_wait_until(&sig.at(0), Cmp::Eq, round)
            .timeout(Duration::from_secs(30))
            .await?;
        ensure!(v == round, "signal value");
        let mut got = vec![0u64; 4096];
        pe.get(&mut got, &data, me).await?;
        ensure!(got == pattern(prev, 4096, round), "data behind put_signal");
        pe.barrier_all().await?;
    }
    // ADD from every PE to PE 0's second signal.
    pe.put_signal_nbi(data.at(me % 4096), &[7], sig.at(1), 10, SignalOp::Add, 0)?;
    pe.signal_op(sig.at(1), 1, SignalOp::Add, 0).await?;
    pe.quiet().await?;
    if me == 0 {
        let want = 11 * n as u64;
        pe.signal_wait_until(&sig.at(1), Cmp::Eq, want)
            .timeout(Duration::from_secs(30))
            .await?;
        ensure!(
            pe.signal_fetch(sig.at(1))? == want,
            "signal_fetch after adds"
        );
    }
    pe.barrier_all().await?;
    pe.free(sig).await?;
    pe.free(data).await?;
    Ok(())
}

/// Waits wake when another PE writes (after sleeping, too), the test forms agree, and a
/// timeout returns its error.
pub async fn waits(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let vars = pe.calloc::<i64>(4).await?;
    ensure!(!pe.test(vars.at(0), Cmp::Ne, 0)?, "test on zero");
    ensure!(pe.test_all(&vars, None, Cmp::Eq, 0)?, "test_all");
    ensure!(pe.test_any(&vars, None, Cmp::Gt, 0)?.is_none(), "test_any");
    // A short timeout with nobody writing.
    let timed = pe
        .wait_until(&vars.at(0), Cmp::Eq, 42)
        .timeout(Duration::from_millis(30))
        .await;
    ensure!(
        matches!(timed, Err(Error::Timeout { .. })),
        "timeout: {timed:?}"
    );
    pe.barrier_all().await?;
    // The next PE sleeps (well past the spin time) before this PE writes.
    let writer = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        pe.p(vars.at(2), 5, next).await?;
        pe.atomic_set(vars.at(1), 3, next).await
    };
    let waiter = async {
        let v = pe
            .wait_until(&vars.at(1), Cmp::Ge, 3)
            .timeout(Duration::from_secs(30))
            .await?;
        let any = pe.wait_until_any(&vars, None, Cmp::Eq, 5).await?;
        let some = pe.wait_until_some(&vars, None, Cmp::Gt, 0).await?;
        Ok::<_, Error>((v, any, some))
    };
    let (w, r) = tokio::join!(writer, waiter);
    w?;
    let (v, any, some) = r?;
    ensure!(v == 3, "wait_until value {v}");
    ensure!(any == Some(2), "wait_until_any index {any:?}");
    ensure!(some == vec![1, 2], "wait_until_some {some:?}");
    ensure!(
        pe.test_some(&vars, None, Cmp::Gt, 0)? == vec![1, 2],
        "test_some"
    );
    // Calls that do not exclude what they handled still see every satisfied index in turn.
    let mut seen = [false; 4];
    for _ in 0..4 {
        if let Some(i) = pe.test_any(&vars, None, Cmp::Gt, 0)? {
            seen[i] = true;
        }
    }
    ensure!(
        seen == [false, true, true, false],
        "test_any in turn: {seen:?}"
    );
    let mut seen = [false; 4];
    for _ in 0..4 {
        if let Some(i) = pe.wait_until_any(&vars, None, Cmp::Gt, 0).await? {
            seen[i] = true;
        }
    }
    ensure!(
        seen == [false, true, true, false],
        "wait_until_any in turn: {seen:?}"
    );
    let exclude = [false, true, true, false];
    ensure!(
        pe.test_all(&vars, Some(&exclude), Cmp::Eq, 0)?,
        "test_all with exclusions"
    );
    ensure!(
        pe.wait_until_any(&vars, Some(&[true; 4]), Cmp::Eq, 0)
            .await?
            .is_none(),
        "wait_until_any with all excluded"
    );
    pe.barrier_all().await?;
    pe.atomic_set(vars.at(0), 1, next).await?;
    pe.atomic_set(vars.at(3), 1, next).await?;
    pe.wait_until_all(&vars, Some(&[false, true, true, false]), Cmp::Eq, 1)
        .timeout(Duration::from_secs(30))
        .await?;
    pe.barrier_all().await?;
    pe.free(vars).await?;
    Ok(())
}

/// Each bad input returns its typed error, on every PE, and changes nothing.
pub async fn errors(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let buf = pe.calloc::<u64>(4).await?;
    let (used, size) = pe.heap_usage().await?;
    let e = pe.put(&buf, &[1], n).await;
    ensure!(
        e == Err(Error::PeOutOfRange { pe: n, n_pes: n }),
        "put to PE n: {e:?}"
    );
    ensure!(
        matches!(
            pe.g(&buf, usize::MAX).await,
            Err(Error::PeOutOfRange { .. })
        ),
        "g from a huge PE"
    );
    let e = pe.put(&buf, &[1; 5], me).await;
    ensure!(
        matches!(
            e,
            Err(Error::OutOfBounds {
                needed: 5,
                available: 4,
                ..
            })
        ),
        "put past the end: {e:?}"
    );
    ensure!(
        matches!(pe.g(buf.at(4), me).await, Err(Error::OutOfBounds { .. })),
        "g past the end"
    );
    let mut big = [0u64; 8];
    ensure!(
        matches!(
            pe.get(&mut big, &buf, me).await,
            Err(Error::OutOfBounds { .. })
        ),
        "get past the end"
    );
    ensure!(
        matches!(
            pe.get(&mut big[..2], buf.slice(3..), me).await,
            Err(Error::OutOfBounds { .. })
        ),
        "get from a short slice"
    );
    let misaligned = buf.all().as_bytes().slice(4..12).cast::<u64>();
    let e = pe.atomic_fetch_add(misaligned, 1, me).await;
    ensure!(
        matches!(e, Err(Error::MisalignedAtomic { align: 8, .. })),
        "misaligned atomic: {e:?}"
    );
    let foreign = ferroshmem::SymBuffer::<u64>::from_allocation(
        ferroshmem_runtime::Allocation::new(
            ferroshmem::HeapId(pe.heap_id().0 ^ 1),
            buf.offset(),
            32,
        ),
        4,
    )?;
    ensure!(
        pe.put(&foreign, &[1], me).await == Err(Error::NotSymmetric),
        "handle of another heap"
    );
    std::mem::forget(foreign);
    let e = pe.iput(&buf, &[1, 2], 0, 1, 2, me).await;
    ensure!(
        matches!(e, Err(Error::InvalidArgument(_))),
        "zero stride: {e:?}"
    );
    ensure!(
        pe.align::<u64>(3, 1).await.err() == Some(Error::InvalidAlignment(3)),
        "alignment 3"
    );
    // Exhaustion: same request everywhere, same error everywhere, nothing allocated.
    let e = pe.malloc::<u8>(size + 1).await;
    ensure!(
        matches!(e, Err(Error::HeapExhausted { .. })),
        "exhausted: {e:?}"
    );
    // Mismatch: PE-dependent sizes are caught on every PE, nothing is allocated.
    let e = pe.malloc::<u64>(if me == n - 1 { 16 } else { 8 }).await;
    if n > 1 {
        ensure!(
            matches!(
                e,
                Err(Error::CollectiveMismatch {
                    operation: "malloc",
                    ..
                })
            ),
            "mismatch: {e:?}"
        );
    } else {
        pe.free(e?).await?;
    }
    ensure!(
        pe.heap_usage().await? == (used, size),
        "errors left the heap as it was"
    );
    // A free of different buffers on different PEs: caught, buffers come back usable.
    let a = pe.malloc::<u64>(2).await?;
    let b = pe.malloc::<u64>(2).await?;
    if n > 1 {
        let (first, second) = if me == 0 { (a, b) } else { (b, a) };
        let e = pe.free(first).await;
        let back = match e {
            Err(ferroshmem::FreeError {
                error:
                    Error::CollectiveMismatch {
                        operation: "free", ..
                    },
                buffer: Some(buf),
            }) => buf,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "free mismatch not caught: {other:?}"
                )))
            }
        };
        pe.p(&back, 1, me).await?;
        let (x, y) = if me == 0 {
            (back, second)
        } else {
            (second, back)
        };
        pe.free(y).await?;
        pe.free(x).await?;
    } else {
        pe.free(b).await?;
        pe.free(a).await?;
    }
    // The job still works after all of that.
    pe.p(&buf, me as u64, (me + 1) % n).await?;
    pe.barrier_all().await?;
    ensure!(
        pe.g(&buf, me).await? == ((me + n - 1) % n) as u64,
        "job healthy after errors"
    );
    pe.barrier_all().await?;
    pe.free(buf).await?;
    Ok(())
}

/// Repeated barriers keep every PE in step.
pub async fn barrier(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let counter = pe.calloc::<u64>(1).await?;
    for round in 1..=200u64 {
        pe.atomic_inc(&counter, 0).await?;
        pe.barrier_all().await?;
        let v = pe.atomic_fetch(&counter, 0).await?;
        ensure!(v == round * n as u64, "round {round}: PE {me} saw {v}");
        pe.sync_all().await?;
    }
    pe.free(counter).await?;
    Ok(())
}
