//! Scenarios of teams, collectives and locks that every PE of a job runs, the same in
//! `run_local` jobs and in multi-process jobs. Every collective is checked against a
//! reference computed locally, on every member, with a guard element after each destination
//! so that writes past the end show.

mod nodes;
mod teams;

use ferroshmem::{Error, Pe, ReduceOp, Reducible, Result, SymBuffer, SymSlice, Team, TeamConfig};

/// Fails the scenario with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(Error::InvalidArgument(format!("check failed on line {}: {}", line!(), format!($($msg)*))));
        }
    };
}
pub(crate) use ensure;

/// Names of all scenarios.
pub const ALL: &[&str] = &["teams", "collectives", "big", "locks"];

/// Runs the scenario called `name` on `pe`.
pub async fn run(name: &str, pe: Pe) -> Result<()> {
    match name {
        "teams" => teams::teams(&pe).await,
        "collectives" => collectives(&pe).await,
        "big" => big(&pe).await,
        "locks" => teams::locks(&pe, 200).await,
        "small-heap" => small_heap(&pe).await,
        "across-nodes" => nodes::across_nodes(&pe).await,
        other => Err(Error::InvalidArgument(format!("no scenario {other}"))),
    }
}

/// A value that names its origin: the world PE that wrote it, a salt and an index.
fn word(from: usize, salt: usize, i: usize) -> u32 {
    ((from as u32) << 24) ^ ((salt as u32) << 16) ^ (i as u32).wrapping_mul(2_654_435_761)
}

const GUARD: u32 = 0xdead_beef;

/// The configurations the matrix runs under, each forcing other algorithms.
fn configs() -> Vec<(&'static str, TeamConfig)> {
    let default = TeamConfig::default();
    vec![
        ("default (eager, flat, reduce-scatter)", default),
        (
            "eager up to 4 KiB, star trees, pairwise alltoall up to 1 MiB",
            TeamConfig {
                eager_copy_bytes: 4096,
                eager_broadcast_bytes: 4096,
                large_bytes: usize::MAX,
                pairwise_bytes: 1 << 20,
                ..default
            },
        ),
        (
            "binomial trees",
            TeamConfig {
                eager_bytes: 0,
                flat_max_pes: 1,
                large_bytes: usize::MAX,
                ..default
            },
        ),
        (
            "callers make every dest ready (OpenSHMEM's contract)",
            TeamConfig {
                dest_ready: true,
                ..default
            },
        ),
        (
            "rings and reduce-scatter; across 3 nodes, broadcasts scattered in 1 KiB blocks",
            TeamConfig {
                eager_bytes: 0,
                flat_max_pes: 1,
                large_bytes: 0,
                pipeline_bytes: 1024,
                ..default
            },
        ),
    ]
}

/// This PE's teams for a matrix: a copy of the world, the odd PEs (PE 0 alone in a job of
/// one), and the columns of a 2-D split in rows of 2. `None` where this PE is no member.
async fn sub_teams(pe: &Pe, config: TeamConfig) -> Result<Vec<(&'static str, Option<Team>)>> {
    let world = pe.team_world();
    let n = pe.n_pes();
    let copy = world.split_strided_with(0, 1, n, config).await?;
    let (start, size) = if n == 1 { (0, 1) } else { (1, n / 2) };
    let odds = world.split_strided_with(start, 2, size, config).await?;
    let (row, column) = world.split_2d_with(2, config).await?;
    row.destroy().await?;
    Ok(vec![
        ("world copy", copy),
        ("odd PEs", odds),
        ("2-D column", Some(column)),
    ])
}

/// Reads `len` elements of this PE's `view`.
async fn read<T: bytemuck::Pod>(pe: &Pe, view: SymSlice<'_, T>) -> Result<Vec<T>> {
    let mut out = vec![T::zeroed(); view.len()];
    pe.get(&mut out, view, pe.my_pe()).await?;
    Ok(out)
}

/// Writes `data` into this PE's `view`.
async fn write<T: bytemuck::Pod>(pe: &Pe, view: SymSlice<'_, T>, data: &[T]) -> Result<()> {
    pe.put(view.slice(..data.len()), data, pe.my_pe()).await
}

/// Fills `dest` with guards, so that any element a collective should not write shows.
async fn guard(pe: &Pe, dest: SymSlice<'_, u32>, len: usize) -> Result<()> {
    write(pe, dest, &vec![GUARD; len]).await
}

/// Where the team's callers make every `dest` ready before a call
/// ([`TeamConfig::dest_ready`]), waits until every member has: a member may write into
/// another's `dest` as soon as it calls.
async fn ready(t: &Team) -> Result<()> {
    match t.config().dest_ready {
        true => t.sync().await,
        false => Ok(()),
    }
}

/// Checks `dest[..want.len()] == want` and the guard after it.
async fn expect(pe: &Pe, dest: SymSlice<'_, u32>, want: &[u32], what: &str) -> Result<()> {
    let got = read(pe, dest.slice(..want.len() + 1)).await?;
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        return Err(Error::InvalidArgument(format!(
            "{what}: element {i} of {} is {:#x}, expected {:#x}",
            want.len(),
            got[i],
            want[i]
        )));
    }
    ensure!(got[want.len()] == GUARD, "{what}: wrote past its end");
    Ok(())
}

/// Scratch buffers of a matrix, as `u32` views (reductions cast them).
struct Bufs {
    src: SymBuffer<u64>,
    dst: SymBuffer<u64>,
}

impl Bufs {
    fn src(&self) -> SymSlice<'_, u32> {
        self.src.all().as_bytes().cast::<u32>()
    }
    fn dst(&self) -> SymSlice<'_, u32> {
        self.dst.all().as_bytes().cast::<u32>()
    }
}

async fn check_broadcast(pe: &Pe, t: &Team, b: &Bufs, len: usize, root: usize) -> Result<()> {
    let me = pe.my_pe();
    let root_pe = t.world_pe(root).unwrap_or(usize::MAX);
    write(
        pe,
        b.src(),
        &(0..len).map(|i| word(me, 1, i)).collect::<Vec<_>>(),
    )
    .await?;
    guard(pe, b.dst(), len + 1).await?;
    t.broadcast(b.dst(), b.src().slice(..len), root).await?;
    let want: Vec<u32> = (0..len).map(|i| word(root_pe, 1, i)).collect();
    expect(
        pe,
        b.dst(),
        &want,
        &format!("broadcast of {len} from {root}"),
    )
    .await?;
    // In place: the root's source is the destination.
    write(
        pe,
        b.dst(),
        &(0..len).map(|i| word(me, 2, i)).collect::<Vec<_>>(),
    )
    .await?;
    t.broadcast(b.dst().slice(..len), b.dst().slice(..len), root)
        .await?;
    let want: Vec<u32> = (0..len).map(|i| word(root_pe, 2, i)).collect();
    expect(pe, b.dst(), &want, &format!("in-place broadcast of {len}")).await?;
    // To the others only: the root's destination keeps what it held.
    let held: Vec<u32> = (0..len).map(|i| word(me, 3, i)).collect();
    write(pe, b.dst(), &held).await?;
    t.broadcast_to_others(b.dst(), b.src().slice(..len), root)
        .await?;
    let want: Vec<u32> = match me == root_pe {
        true => held,
        false => (0..len).map(|i| word(root_pe, 1, i)).collect(),
    };
    expect(pe, b.dst(), &want, &format!("broadcast to others of {len}")).await
}

async fn check_fcollect(pe: &Pe, t: &Team, b: &Bufs, len: usize) -> Result<()> {
    let me = pe.my_pe();
    let n = t.n_pes();
    write(
        pe,
        b.src(),
        &(0..len).map(|i| word(me, 3, i)).collect::<Vec<_>>(),
    )
    .await?;
    guard(pe, b.dst(), n * len + 1).await?;
    ready(t).await?;
    t.fcollect(b.dst(), b.src().slice(..len)).await?;
    let want: Vec<u32> = (0..n)
        .flat_map(|j| {
            let from = t.world_pe(j).unwrap_or(usize::MAX);
            (0..len).map(move |i| word(from, 3, i))
        })
        .collect();
    expect(pe, b.dst(), &want, &format!("fcollect of {len}")).await
}

async fn check_collect(pe: &Pe, t: &Team, b: &Bufs, len: usize) -> Result<()> {
    let me = pe.my_pe();
    let n = t.n_pes();
    let count = |j: usize| if j % 2 == 0 { len } else { len / 2 + j };
    let mine = count(t.my_pe());
    write(
        pe,
        b.src(),
        &(0..mine).map(|i| word(me, 4, i)).collect::<Vec<_>>(),
    )
    .await?;
    let want: Vec<u32> = (0..n)
        .flat_map(|j| {
            let from = t.world_pe(j).unwrap_or(usize::MAX);
            (0..count(j)).map(move |i| word(from, 4, i))
        })
        .collect();
    guard(pe, b.dst(), want.len() + 1).await?;
    let total = t.collect(b.dst(), b.src().slice(..mine)).await?;
    ensure!(
        total == want.len(),
        "collect total {total} != {}",
        want.len()
    );
    expect(pe, b.dst(), &want, &format!("collect around {len}")).await
}

async fn check_alltoall(pe: &Pe, t: &Team, b: &Bufs, len: usize) -> Result<()> {
    let me = pe.my_pe();
    let (n, tme) = (t.n_pes(), t.my_pe());
    let src: Vec<u32> = (0..n * len)
        .map(|k| word(me, 5 + k / len.max(1), k % len.max(1)))
        .collect();
    write(pe, b.src(), &src).await?;
    guard(pe, b.dst(), n * len + 1).await?;
    ready(t).await?;
    t.alltoall(b.dst(), b.src(), len).await?;
    let want: Vec<u32> = (0..n * len)
        .map(|k| word(t.world_pe(k / len).unwrap_or(0), 5 + tme, k % len))
        .collect();
    expect(pe, b.dst(), &want, &format!("alltoall of {len}")).await?;
    if len > 2000 {
        return Ok(());
    }
    // Strided: source stride 3, destination stride 2; the gaps keep their guards.
    let (sst, dst) = (3, 2);
    let span = |stride: usize| {
        if n * len == 0 {
            0
        } else {
            (n * len - 1) * stride + 1
        }
    };
    let mut src = vec![0u32; span(sst)];
    for k in 0..n * len {
        src[k * sst] = word(me, 40 + k / len, k % len);
    }
    write(pe, b.src(), &src).await?;
    guard(pe, b.dst(), span(dst) + 1).await?;
    t.alltoalls(b.dst(), b.src(), dst, sst, len).await?;
    let mut want = vec![GUARD; span(dst)];
    for k in 0..n * len {
        want[k * dst] = word(t.world_pe(k / len).unwrap_or(0), 40 + tme, k % len);
    }
    expect(pe, b.dst(), &want, &format!("alltoalls of {len}")).await
}

/// An element type of the reduction checks, with an independent reference operator.
trait Elem: Reducible + PartialEq + Copy {
    fn value(pe: usize, i: usize, op: ReduceOp) -> Self;
    fn apply(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn value(pe: usize, i: usize, op: ReduceOp) -> Self {
                let v = (pe as u64 * 0x9e37_79b9 + i as u64 * 0x85eb_ca6b) >> 3;
                match op {
                    ReduceOp::Prod => (1 + (v % 3)) as $t,
                    _ => v as $t,
                }
            }
            fn apply(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::And => a & b,
                    ReduceOp::Or => a | b,
                    ReduceOp::Xor => a ^ b,
                    ReduceOp::Min => if b < a { b } else { a },
                    ReduceOp::Max => if b > a { b } else { a },
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                }
            }
        }
    )*};
}
int_elem!(i8, i32, u64);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn value(pe: usize, i: usize, op: ReduceOp) -> Self {
                match op {
                    // Powers of two: every product is exact, in any order.
                    ReduceOp::Prod => [1.0, 2.0, 0.5, -1.0][(pe + i) % 4],
                    // Small integers: every sum is exact.
                    _ => ((pe * 7 + i * 3) % 19) as $t - 9.0,
                }
            }
            fn apply(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Sum => a + b,
                    _ => a * b,
                }
            }
        }
    )*};
}
float_elem!(f32, f64);

async fn check_reduce<T: Elem>(
    pe: &Pe,
    t: &Team,
    b: &Bufs,
    len: usize,
    op: ReduceOp,
) -> Result<()> {
    let me = pe.my_pe();
    let n = t.n_pes();
    let src = b.src.all().as_bytes().cast::<T>();
    let dst = b.dst.all().as_bytes().cast::<T>();
    let block = if n * len <= src.len() { len } else { len / n };
    let mine: Vec<T> = (0..len.max(n * block))
        .map(|i| T::value(me, i, op))
        .collect();
    write(pe, src, &mine[..len]).await?;
    let contribution = |j: usize, i: usize| T::value(t.world_pe(j).unwrap_or(0), i, op);
    let reduced = |i: usize| {
        (1..n).fold(contribution(0, i), |a, j| {
            T::apply(op, a, contribution(j, i))
        })
    };
    let what = format!("{op:?} reduce of {len} {}", std::any::type_name::<T>());
    t.reduce(op, dst.slice(..len), src.slice(..len)).await?;
    let got = read(pe, dst.slice(..len)).await?;
    if let Some(i) = (0..len).find(|&i| got[i] != reduced(i)) {
        return Err(Error::InvalidArgument(format!(
            "{what}: element {i} is {:?}, expected {:?}",
            got[i],
            reduced(i)
        )));
    }
    // In place.
    t.reduce(op, src.slice(..len), src.slice(..len)).await?;
    let got = read(pe, src.slice(..len)).await?;
    ensure!((0..len).all(|i| got[i] == reduced(i)), "in-place {what}");
    // Reduce-scatter: member j gets block j of the reduction of n blocks (of `len`
    // elements when they fit the buffer, else of `len / n`).
    write(pe, src, &mine[..n * block]).await?;
    t.reducescatter(op, dst.slice(..block), src.slice(..n * block), block)
        .await?;
    let got = read(pe, dst.slice(..block)).await?;
    let base = t.my_pe() * block;
    ensure!(
        (0..block).all(|i| got[i] == reduced(base + i)),
        "reducescatter of {what}"
    );
    Ok(())
}

/// The sum scans: `sum_inscan` into `dst`, then `sum_exscan` in place in `src`; member `m`
/// gets the sum over members before it (and itself, inclusive) in member order.
async fn check_scan<T: Elem>(pe: &Pe, t: &Team, b: &Bufs, len: usize) -> Result<()> {
    let me = t.my_pe();
    let src = b.src.all().as_bytes().cast::<T>();
    let dst = b.dst.all().as_bytes().cast::<T>();
    let contribution = |j: usize, i: usize| T::value(t.world_pe(j).unwrap_or(0), i, ReduceOp::Sum);
    let prefix = |members: usize, i: usize| {
        (0..members).fold(T::zeroed(), |a, j| {
            T::apply(ReduceOp::Sum, a, contribution(j, i))
        })
    };
    let mine: Vec<T> = (0..len).map(|i| contribution(me, i)).collect();
    for inclusive in [true, false] {
        write(pe, src, &mine).await?;
        let (to, members) = match inclusive {
            true => (dst, me + 1),
            false => (src, me),
        };
        match inclusive {
            true => t.sum_inscan(to.slice(..len), src.slice(..len)).await?,
            false => t.sum_exscan(to.slice(..len), src.slice(..len)).await?,
        }
        let got = read(pe, to.slice(..len)).await?;
        if let Some(i) = (0..len).find(|&i| got[i] != prefix(members, i)) {
            return Err(Error::InvalidArgument(format!(
                "{} sum scan of {len} {}: element {i} is {:?}, expected {:?}",
                if inclusive {
                    "inclusive"
                } else {
                    "exclusive, in-place"
                },
                std::any::type_name::<T>(),
                got[i],
                prefix(members, i)
            )));
        }
    }
    Ok(())
}

/// Every collective, on every team of `config`, at every size of `sizes`.
async fn matrix(pe: &Pe, b: &Bufs, config: TeamConfig, sizes: &[usize]) -> Result<()> {
    for (name, team) in sub_teams(pe, config).await? {
        let Some(t) = team else { continue };
        for &len in sizes {
            let ctx = |e: Error| {
                Error::InvalidArgument(format!("{name} of {} PEs, {len} elements: {e}", t.n_pes()))
            };
            async {
                for root in [0, t.n_pes() - 1] {
                    check_broadcast(pe, &t, b, len, root).await?;
                }
                check_fcollect(pe, &t, b, len).await?;
                check_collect(pe, &t, b, len).await?;
                check_alltoall(pe, &t, b, len).await?;
                check_reduce::<i32>(pe, &t, b, len, ReduceOp::Sum).await?;
                check_reduce::<f64>(pe, &t, b, len, ReduceOp::Max).await?;
                if len <= 1025 {
                    for op in [
                        ReduceOp::And,
                        ReduceOp::Or,
                        ReduceOp::Xor,
                        ReduceOp::Min,
                        ReduceOp::Prod,
                    ] {
                        check_reduce::<u64>(pe, &t, b, len, op).await?;
                    }
                    check_reduce::<i8>(pe, &t, b, len, ReduceOp::Sum).await?;
                    check_reduce::<f32>(pe, &t, b, len, ReduceOp::Prod).await?;
                    check_reduce::<f64>(pe, &t, b, len, ReduceOp::Sum).await?;
                    check_scan::<i32>(pe, &t, b, len).await?;
                    check_scan::<f64>(pe, &t, b, len).await?;
                }
                t.barrier().await
            }
            .await
            .map_err(ctx)?;
        }
        t.destroy().await?;
    }
    Ok(())
}

/// Hundreds of small collectives back to back, broadcasts from changing roots mixed with
/// reductions, some members dawdling: an eager sender that overwrote a slot before its
/// receiver read it would show as a wrong value.
async fn back_to_back(pe: &Pe) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let world = pe.team_world();
    let buf = pe.calloc::<u64>(8).await?;
    for i in 0..600u64 {
        if me == (i as usize * 7) % n && i % 97 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        if i % 5 == 4 {
            pe.put(buf.slice(4..6), &[i, me as u64], me).await?;
            world.sum_reduce(buf.slice(6..8), buf.slice(4..6)).await?;
            let got = read(pe, buf.slice(6..8)).await?;
            let want = [i * n as u64, (n * (n - 1) / 2) as u64];
            ensure!(got == want, "reduce {i}: {got:?}");
        } else {
            let root = (i / 3) as usize % n;
            pe.put(buf.slice(0..2), &[i, me as u64], me).await?;
            world
                .broadcast(buf.slice(2..4), buf.slice(0..2), root)
                .await?;
            let got = read(pe, buf.slice(2..4)).await?;
            ensure!(
                got == [i, root as u64],
                "broadcast {i} from {root}: {got:?}"
            );
        }
    }
    world.barrier().await?;
    pe.free(buf).await?;
    Ok(())
}

/// In a job whose heap is too small for eager slots, the world team still has every
/// collective (without the eager algorithms), and splits still work.
pub async fn small_heap(pe: &Pe) -> Result<()> {
    let world = pe.team_world();
    ensure!(
        world.config().eager_bytes == 0,
        "no eager slots in a tiny heap"
    );
    let b = Bufs {
        src: pe.calloc::<u64>(512).await?,
        dst: pe.calloc::<u64>(512).await?,
    };
    for len in [1, 100] {
        check_broadcast(pe, &world, &b, len, 0).await?;
        check_fcollect(pe, &world, &b, len).await?;
        check_reduce::<i32>(pe, &world, &b, len, ReduceOp::Sum).await?;
    }
    let copy = world.split_strided(0, 1, pe.n_pes()).await?;
    copy.ok_or(Error::Shutdown)?.destroy().await?;
    pe.free(b.dst).await?;
    pe.free(b.src).await?;
    Ok(())
}

/// Every collective under every configuration, from 0 elements to past the eager and
/// reduce-scatter thresholds.
pub async fn collectives(pe: &Pe) -> Result<()> {
    back_to_back(pe).await?;
    let cap = 8 * 20_000 * 3 + 64;
    let b = Bufs {
        src: pe.calloc::<u64>(cap).await?,
        dst: pe.calloc::<u64>(cap).await?,
    };
    for (name, config) in configs() {
        matrix(pe, &b, config, &[0, 1, 7, 1024, 1025, 20_000])
            .await
            .map_err(|e| Error::InvalidArgument(format!("{name}: {e}")))?;
    }
    pe.free(b.dst).await?;
    pe.free(b.src).await?;
    Ok(())
}

/// A reduction of `len` elements whose reference costs O(1) per element: member values
/// `i · (world PE + 1)` summed, and `i mod 1000 + world PE` maximized.
async fn check_big_reduce(pe: &Pe, t: &Team, b: &Bufs, len: usize) -> Result<()> {
    let me = pe.my_pe();
    let weight: u32 = (0..t.n_pes())
        .map(|j| t.world_pe(j).unwrap_or(0) as u32 + 1)
        .sum();
    let top = (0..t.n_pes())
        .filter_map(|j| t.world_pe(j))
        .max()
        .unwrap_or(0) as f32;
    let ints = b.src.all().as_bytes().cast::<u32>().slice(..len);
    let sums = b.dst.all().as_bytes().cast::<u32>().slice(..len);
    let mine: Vec<u32> = (0..len as u32)
        .map(|i| i.wrapping_mul(me as u32 + 1))
        .collect();
    write(pe, ints, &mine).await?;
    t.sum_reduce(sums, ints).await?;
    let got = read(pe, sums).await?;
    let bad = (0..len).find(|&i| got[i] != (i as u32).wrapping_mul(weight));
    ensure!(bad.is_none(), "sum of {len}: element {bad:?}");
    let floats = b.src.all().as_bytes().cast::<f32>().slice(..len);
    let maxima = b.dst.all().as_bytes().cast::<f32>().slice(..len);
    let mine: Vec<f32> = (0..len).map(|i| (i % 1000) as f32 + me as f32).collect();
    write(pe, floats, &mine).await?;
    t.max_reduce(maxima, floats).await?;
    let got = read(pe, maxima).await?;
    let bad = (0..len).find(|&i| got[i] != (i % 1000) as f32 + top);
    ensure!(bad.is_none(), "max of {len}: element {bad:?}");
    Ok(())
}

/// Several MiB through each collective, on the world, with the default configuration, with
/// callers that make every `dest` ready, and with rings.
pub async fn big(pe: &Pe) -> Result<()> {
    let n = pe.n_pes();
    let total = 3 << 18; // 768 Ki u32 = 3 MiB
    let b = Bufs {
        src: pe.calloc::<u64>(total / 2 + 64).await?,
        dst: pe.calloc::<u64>(total / 2 + 64).await?,
    };
    for (name, config) in [configs()[0], configs()[3], configs()[4]] {
        let t = pe
            .team_world()
            .split_strided_with(0, 1, n, config)
            .await?
            .ok_or(Error::Shutdown)?;
        let ctx = |e: Error| Error::InvalidArgument(format!("{name}: {e}"));
        async {
            check_broadcast(pe, &t, &b, total, n - 1).await?;
            check_fcollect(pe, &t, &b, total / n).await?;
            check_collect(pe, &t, &b, total / (2 * n)).await?;
            check_alltoall(pe, &t, &b, total / n).await?;
            check_big_reduce(pe, &t, &b, total).await
        }
        .await
        .map_err(ctx)?;
        t.destroy().await?;
    }
    pe.free(b.dst).await?;
    pe.free(b.src).await?;
    Ok(())
}
