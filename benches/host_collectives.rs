//! Collective benchmarks of the host runtime on the world team, OSU micro-benchmark style:
//! the twin of `benches/oshmem/host_collectives.c`, for `scripts/compare-oshmem-collectives`.
//!
//! | figure | call | size column |
//! |---|---|---|
//! | `barrier` | `Team::barrier` | 0 |
//! | `broadcast` | `Team::broadcast` from PE 0, in place (the root's buffer is the source) | bytes broadcast |
//! | `fcollect` | `Team::fcollect` | bytes each PE contributes |
//! | `alltoall` | `Team::alltoall` | bytes each PE sends each PE |
//! | `reduce` | `Team::sum_reduce` on `i32` | bytes reduced |
//!
//! Method: every PE times each call alone, with a `barrier_all` between calls that is not
//! timed; a batch of calls gives a PE's mean time per call; a PE's figure is the median over
//! `--reps` batches after `--warmup` untimed calls; the figure printed is the mean of the
//! PEs' figures. Sizes up to 4 KiB are reported as latency (µs), larger ones as bandwidth in
//! GB/s (10⁹ bytes/s) of the bytes one PE ends up with in its destination: the size for
//! broadcast and reduce, `n_pes ×` the size for fcollect and alltoall. Every result is
//! checked after its last call. PE 0 prints a table and lines
//! `RESULT <name> <size_bytes> <value> <unit>`.
//!
//! ```text
//! cargo bench --no-run --bench host_collectives
//! ferroshmem run -n 4 -- target/release/deps/host_collectives-<hash>
//! mpirun -np 2 target/release/deps/host_collectives-<hash>
//! target/release/deps/host_collectives-<hash> --pes 2      # no launcher: PEs in-process
//! ```
//!
//! Options: `--iters N` (calls per batch of a latency size, default 2000), `--warmup N`
//! (default 200), `--reps N` (default 5), `--bw-mib N` (MiB moved per batch of a bandwidth
//! size, default 64), `--pes N` (PEs when no launcher started the program, default 2),
//! `--only NAME` (measure only that collective, e.g. to profile it), `--dest-ready` (measure
//! on a copy of the world team whose callers make every `dest` ready before a call, as
//! OpenSHMEM's do and this benchmark's `barrier_all` between calls does:
//! `TeamConfig::dest_ready`, the C library's teams' setting; the C twin ignores the flag),
//! `--flat-max-pes N` (measure on a copy of the world team whose flat limit is N:
//! `TeamConfig::flat_max_pes`, e.g. to run a team of 3 nodes as one of more nodes than its
//! limit; such a team of more members than N has no eager slots), `--pipeline-bytes N`
//! (measure on a copy of the world team whose scattered broadcasts move parts in blocks of
//! N bytes, 0 for whole parts: `TeamConfig::pipeline_bytes`), `--size N` (measure only
//! messages of N bytes, a multiple of 4 up to 8 MiB; a latency figure up to 4 KiB, else a
//! bandwidth one).
//! Other arguments (cargo's `--bench`) are ignored.

use std::process::ExitCode;
use std::time::Instant;

use ferroshmem::launch_env::LaunchEnv;
use ferroshmem::{Error, Pe, Result, SymBuffer, SymSlice, Team, TeamConfig};

/// Message sizes in bytes.
const SIZES: [usize; 6] = [4, 256, 4096, 64 << 10, 1 << 20, 8 << 20];
/// Sizes up to this are latency figures.
const LATENCY_MAX: usize = 4096;
/// The largest block.
const MAX_BLOCK: usize = 8 << 20;

/// Command-line settings.
#[derive(Debug, Clone, Copy)]
struct Config {
    iters: usize,
    warmup: usize,
    reps: usize,
    bw_bytes: usize,
    pes: usize,
    only: Option<Op>,
    dest_ready: bool,
    flat_max_pes: Option<usize>,
    pipeline_bytes: Option<usize>,
    size: Option<usize>,
}

impl Config {
    fn from_args() -> std::result::Result<Self, String> {
        let mut cfg = Config {
            iters: 2000,
            warmup: 200,
            reps: 5,
            bw_bytes: 64 << 20,
            pes: 2,
            only: None,
            dest_ready: false,
            flat_max_pes: None,
            pipeline_bytes: None,
            size: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--dest-ready" {
                cfg.dest_ready = true;
                continue;
            }
            let (key, inline) = match arg.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            if !matches!(
                key.as_str(),
                "--iters"
                    | "--warmup"
                    | "--reps"
                    | "--bw-mib"
                    | "--pes"
                    | "--only"
                    | "--flat-max-pes"
                    | "--pipeline-bytes"
                    | "--size"
            ) {
                continue;
            }
            let value = inline
                .or_else(|| args.next())
                .ok_or_else(|| format!("{key} needs a value"))?;
            if key == "--only" {
                let op = Op::ALL.into_iter().find(|op| op.name() == value);
                cfg.only = Some(op.ok_or_else(|| format!("--only {value:?}: no such figure"))?);
                continue;
            }
            let n: usize = value
                .parse()
                .map_err(|_| format!("{key} {value:?}: expected a whole number"))?;
            if n == 0 && !matches!(key.as_str(), "--warmup" | "--pipeline-bytes") {
                return Err(format!("{key} must be at least 1"));
            }
            match key.as_str() {
                "--iters" => cfg.iters = n,
                "--warmup" => cfg.warmup = n,
                "--reps" => cfg.reps = n,
                "--bw-mib" => cfg.bw_bytes = n << 20,
                "--flat-max-pes" => cfg.flat_max_pes = Some(n),
                "--pipeline-bytes" => cfg.pipeline_bytes = Some(n),
                "--size" if n > MAX_BLOCK || n % 4 != 0 => {
                    return Err(format!(
                    "--size {n}: a multiple of 4 bytes (the elements are i32), at most {MAX_BLOCK}"
                ))
                }
                "--size" => cfg.size = Some(n),
                _ => cfg.pes = n,
            }
        }
        Ok(cfg)
    }
}

/// The collectives measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Barrier,
    Broadcast,
    Fcollect,
    Alltoall,
    Reduce,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::Barrier,
        Op::Broadcast,
        Op::Fcollect,
        Op::Alltoall,
        Op::Reduce,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Barrier => "barrier",
            Op::Broadcast => "broadcast",
            Op::Fcollect => "fcollect",
            Op::Alltoall => "alltoall",
            Op::Reduce => "reduce",
        }
    }
}

/// One measured figure.
#[derive(Debug, Clone)]
struct Figure {
    name: &'static str,
    size: usize,
    value: f64,
    unit: &'static str,
}

/// The symmetric buffers of the benchmark, as `i32`.
struct Bufs {
    dest: SymBuffer<i32>,
    source: SymBuffer<i32>,
    times: SymBuffer<f64>,
}

fn ints(buf: &SymBuffer<i32>, n: usize) -> SymSlice<'_, i32> {
    buf.slice(..n)
}

/// One call of `op` on `size` bytes (per block for fcollect and alltoall).
async fn call(team: &Team, b: &Bufs, op: Op, size: usize) -> Result<()> {
    let n = size / 4;
    let pes = team.n_pes();
    match op {
        Op::Barrier => team.barrier().await,
        Op::Broadcast => team.broadcast(ints(&b.dest, n), ints(&b.dest, n), 0).await,
        Op::Fcollect => {
            team.fcollect(ints(&b.dest, n * pes), ints(&b.source, n))
                .await
        }
        Op::Alltoall => {
            team.alltoall(ints(&b.dest, n * pes), ints(&b.source, n * pes), n)
                .await
        }
        Op::Reduce => team.sum_reduce(ints(&b.dest, n), ints(&b.source, n)).await,
    }
}

/// The source values of `op` on PE `me`, and the destination each PE should end with.
fn fill(op: Op, me: usize, pes: usize, n: usize) -> Vec<i32> {
    match op {
        Op::Alltoall => (0..pes * n)
            .map(|k| (me * 1000 + (k / n) * 10 + (k % n) % 10) as i32)
            .collect(),
        Op::Broadcast => (0..n)
            .map(|i| if me == 0 { i as i32 } else { -1 })
            .collect(),
        _ => (0..n).map(|i| (me * 1000 + i % 1000) as i32).collect(),
    }
}

fn expected(op: Op, me: usize, pes: usize, n: usize) -> Vec<i32> {
    match op {
        Op::Barrier => Vec::new(),
        Op::Broadcast => (0..n as i32).collect(),
        Op::Fcollect => (0..pes * n)
            .map(|k| ((k / n) * 1000 + (k % n) % 1000) as i32)
            .collect(),
        Op::Alltoall => (0..pes * n)
            .map(|k| ((k / n) * 1000 + me * 10 + (k % n) % 10) as i32)
            .collect(),
        Op::Reduce => (0..n)
            .map(|i| (0..pes).map(|p| (p * 1000 + i % 1000) as i32).sum())
            .collect(),
    }
}

/// The median of `samples`.
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Measures one figure; every PE returns the mean over PEs of the PEs' figures.
async fn measure(pe: &Pe, team: &Team, b: &Bufs, op: Op, size: usize, cfg: Config) -> Result<f64> {
    let (me, pes) = (pe.my_pe(), pe.n_pes());
    let n = size / 4;
    let moved = if matches!(op, Op::Fcollect | Op::Alltoall) {
        size * pes
    } else {
        size
    };
    let latency = size <= LATENCY_MAX;
    let calls = if latency {
        cfg.iters
    } else {
        (cfg.bw_bytes / moved.max(1)).max(4)
    };
    let warmup = if latency { cfg.warmup } else { 2 };
    let source = fill(op, me, pes, n);
    let target = if op == Op::Broadcast {
        &b.dest
    } else {
        &b.source
    };
    pe.put(target.slice(..source.len()), &source, me).await?;
    pe.barrier_all().await?;
    for _ in 0..warmup {
        call(team, b, op, size).await?;
        pe.barrier_all().await?;
    }
    let mut samples = Vec::with_capacity(cfg.reps);
    for _ in 0..cfg.reps {
        let mut total = 0.0;
        for _ in 0..calls {
            let start = Instant::now();
            call(team, b, op, size).await?;
            total += start.elapsed().as_secs_f64();
            pe.barrier_all().await?;
        }
        samples.push(total / calls as f64);
    }
    let want = expected(op, me, pes, n);
    let mut got = vec![0i32; want.len()];
    pe.get(&mut got, b.dest.slice(..want.len()), me).await?;
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        return Err(Error::InvalidArgument(format!(
            "{} of {size} bytes: PE {me} element {i} is {}, expected {}",
            op.name(),
            got[i],
            want[i]
        )));
    }
    pe.p(b.times.at(me), median(samples), 0).await?;
    pe.barrier_all().await?;
    let mut times = vec![0.0f64; pes];
    pe.get(&mut times, &b.times, 0).await?;
    pe.barrier_all().await?;
    let mean = times.iter().sum::<f64>() / pes as f64;
    Ok(if latency {
        mean * 1e6
    } else {
        moved as f64 / mean / 1e9
    })
}

/// The benchmark as one PE runs it; PE 0 returns the figures.
async fn bench(pe: Pe, cfg: Config) -> Result<Vec<Figure>> {
    let pes = pe.n_pes();
    let world = pe.team_world();
    let copied = cfg.dest_ready || cfg.flat_max_pes.is_some() || cfg.pipeline_bytes.is_some();
    let team = match copied {
        true => {
            let config = TeamConfig {
                dest_ready: cfg.dest_ready || world.config().dest_ready,
                flat_max_pes: cfg.flat_max_pes.unwrap_or(world.config().flat_max_pes),
                pipeline_bytes: cfg.pipeline_bytes.unwrap_or(world.config().pipeline_bytes),
                ..world.config()
            };
            let copy = world.split_strided_with(0, 1, pes, config).await?;
            copy.ok_or_else(|| Error::InvalidArgument("no copy of the world team".into()))?
        }
        false => world,
    };
    let b = Bufs {
        dest: pe.align::<i32>(4096, MAX_BLOCK / 4 * pes).await?,
        source: pe.align::<i32>(4096, MAX_BLOCK / 4 * pes).await?,
        times: pe.calloc::<f64>(pes).await?,
    };
    let mut figures = Vec::new();
    for op in Op::ALL
        .into_iter()
        .filter(|&op| cfg.only.is_none_or(|o| o == op))
    {
        let sizes: &[usize] = match (op, &cfg.size) {
            (Op::Barrier, _) => &[0],
            (_, Some(size)) => std::slice::from_ref(size),
            (_, None) => &SIZES,
        };
        for &size in sizes {
            let value = measure(&pe, &team, &b, op, size, cfg).await?;
            let latency = size <= LATENCY_MAX;
            figures.push(Figure {
                name: op.name(),
                size,
                value,
                unit: if latency { "us" } else { "GB/s" },
            });
        }
    }
    if copied {
        team.destroy().await?;
    }
    pe.free(b.times).await?;
    pe.free(b.source).await?;
    pe.free(b.dest).await?;
    Ok(if pe.my_pe() == 0 { figures } else { Vec::new() })
}

fn report(mode: &str, pes: usize, cfg: &Config, figures: &[Figure]) {
    println!(
        "# ferroshmem host_collectives: {pes} PEs, {mode}; per call, mean over PEs of each PE's median of {} batches",
        cfg.reps
    );
    let mut last = "";
    for f in figures {
        if f.name != last {
            println!("\n#{}\n{:<12}{}", f.name, "size(B)", f.unit);
            last = f.name;
        }
        println!("{:<12}{:.4}", f.size, f.value);
    }
    println!();
    for f in figures {
        println!("RESULT {} {} {:.4} {}", f.name, f.size, f.value, f.unit);
    }
}

fn main() -> ExitCode {
    let cfg = match Config::from_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("host_collectives: {e}");
            return ExitCode::from(2);
        }
    };
    let launched = match LaunchEnv::detect() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("host_collectives: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut contract = match cfg.dest_ready {
        true => "; callers make every dest ready (TeamConfig::dest_ready)".to_string(),
        false => String::new(),
    };
    if let Some(n) = cfg.flat_max_pes {
        contract.push_str(&format!("; flat limit {n} (TeamConfig::flat_max_pes)"));
    }
    if let Some(n) = cfg.pipeline_bytes {
        contract.push_str(&format!("; blocks of {n} B (TeamConfig::pipeline_bytes)"));
    }
    let (mode, pes, workers) = match &launched {
        Some(env) => (
            format!("launched by {} (one PE per process)", env.launcher),
            env.size,
            1,
        ),
        None => (
            "no launcher: PEs in this process".to_string(),
            cfg.pes,
            cfg.pes,
        ),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build();
    let outcome = runtime
        .map_err(|e| Error::InvalidArgument(format!("cannot start tokio: {e}")))
        .and_then(|rt| rt.block_on(ferroshmem::run(cfg.pes, move |pe| bench(pe, cfg))));
    match outcome.and_then(|per_pe| per_pe.into_iter().collect::<Result<Vec<_>>>()) {
        Ok(per_pe) => {
            let figures: Vec<Figure> = per_pe.into_iter().flatten().collect();
            if !figures.is_empty() {
                report(&format!("{mode}{contract}"), pes, &cfg, &figures);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("host_collectives: {e}");
            ExitCode::FAILURE
        }
    }
}
