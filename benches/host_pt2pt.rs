//! Point-to-point microbenchmarks of the host runtime between 2 PEs, in the style of NVSHMEM's
//! perftests: a size column, then µs per operation or GB/s (10⁹ bytes/s).
//!
//! | figure | what PE 0 times | PE 1 |
//! |---|---|---|
//! | `put_quiet` | 8-byte `put` to PE 1, then `quiet` | waits in `barrier_all` |
//! | `get` | 8-byte `get` from PE 1 | waits in `barrier_all` |
//! | `fetch_add` | `u64` `atomic_fetch_add` on PE 1 | waits in `barrier_all` |
//! | `pingpong` | `p` a flag on PE 1, `wait_until` PE 1's `p` back; one-way = round trip / 2; each batch on a flag of its own | mirrors |
//! | `put_bw` | back-to-back `put_nbi` of the size to PE 1, one `quiet` at the end | waits in `barrier_all` |
//! | `barrier_all` | `barrier_all` | loops too |
//!
//! While PE 0 times a figure alone, PE 1 waits in `barrier_all`, as in the perftests. Past
//! `FERROSHMEM_SPIN_US` (default 50 µs) that wait sleeps, and every write into a PE with a
//! sleeping waiter then also wakes it: run with `FERROSHMEM_SPIN_US=1000000` (the most, 1 s)
//! to see the figures of a target that keeps spinning.
//!
//! Each figure is the median of `--reps` timed batches, after warm-up. The bandwidth source and
//! destination are page-aligned: memcpy between buffers misaligned to each other runs up to
//! 25% slower at 64–256 KiB on some CPUs, which would measure the allocator, not the runtime.
//! PE 0 prints a table and, for `scripts/compare-oshmem`, lines
//! `RESULT <name> <size_bytes> <value> <unit>`.
//!
//! ```text
//! cargo bench --no-run --bench host_pt2pt
//! mpirun -np 2 target/release/deps/host_pt2pt-<hash>       # one PE per process
//! ferroshmem run -n 2 -- target/release/deps/host_pt2pt-<hash>
//! target/release/deps/host_pt2pt-<hash> --iters 20000      # no launcher: 2 PEs in-process
//! ```
//!
//! Options: `--iters N` (timed operations per batch of a latency figure, default 100000),
//! `--warmup N` (untimed operations first, default 10000), `--reps N` (timed batches, default
//! 5), `--bw-mib N` (MiB moved per bandwidth batch, default 256), `--workers N` (tokio worker
//! threads; default 1 per PE of this process), `--only barrier_all` (only that figure, on any
//! number of PEs from 2: e.g. 4 PEs on 2 hosts). Other arguments (cargo's `--bench`) are
//! ignored.

use std::process::ExitCode;
use std::time::Instant;

use ferroshmem::launch_env::LaunchEnv;
use ferroshmem::{Cmp, Error, Pe, Result};

/// The number of PEs the benchmark needs.
const PES: usize = 2;
/// Transfer sizes of the bandwidth figure: 4 KiB to 16 MiB, ×4 steps.
const BW_SIZES: [usize; 7] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];
/// The largest transfer.
const MAX_SIZE: usize = 16 << 20;
/// Alignment of the bandwidth buffers.
const PAGE: usize = 4096;
/// Bytes of a `u64`, the size column of the 8-byte figures.
const WORD: usize = std::mem::size_of::<u64>();
/// Flags of the ping-pong, one per batch in turn: where a flag's line sits alone moved the
/// one-way time by a third (0.11–0.15 µs over 12 lines of one process on an Intel Xeon VM,
/// OSHMEM's the same), so a figure from one line measured its placement.
const PINGPONG_FLAGS: usize = 16;
/// Words between two ping-pong flags: a page and a line, so that each is on a page and at a
/// line offset of its own.
const PINGPONG_FLAG_STRIDE: usize = (PAGE + 64) / WORD;

/// Command-line settings.
#[derive(Debug, Clone, Copy)]
struct Config {
    iters: u64,
    warmup: u64,
    reps: usize,
    bw_bytes: usize,
    workers: Option<usize>,
    /// `--only barrier_all`: time the world barrier alone, on any number of PEs.
    barrier_only: bool,
}

impl Config {
    /// Reads the options; unknown arguments are skipped.
    fn from_args() -> std::result::Result<Self, String> {
        let mut cfg = Config {
            iters: 100_000,
            warmup: 10_000,
            reps: 5,
            bw_bytes: 256 << 20,
            workers: None,
            barrier_only: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let (key, inline) = match arg.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            if !matches!(
                key.as_str(),
                "--iters" | "--warmup" | "--reps" | "--bw-mib" | "--workers" | "--only"
            ) {
                continue;
            }
            let value = inline
                .or_else(|| args.next())
                .ok_or_else(|| format!("{key} needs a value"))?;
            if key == "--only" {
                if value != "barrier_all" {
                    return Err(format!(
                        "--only {value:?}: only barrier_all can be run alone"
                    ));
                }
                cfg.barrier_only = true;
                continue;
            }
            let n: u64 = value
                .parse()
                .map_err(|_| format!("{key} {value:?}: expected a whole number"))?;
            if n == 0 && key != "--warmup" {
                return Err(format!("{key} must be at least 1"));
            }
            match key.as_str() {
                "--iters" => cfg.iters = n,
                "--warmup" => cfg.warmup = n,
                "--reps" => cfg.reps = n as usize,
                "--bw-mib" => cfg.bw_bytes = (n as usize) << 20,
                _ => cfg.workers = Some(n as usize),
            }
        }
        Ok(cfg)
    }
}

/// How one figure is measured: untimed calls, then timed batches of calls.
#[derive(Debug, Clone, Copy)]
struct Plan {
    warmup: u64,
    iters: u64,
    reps: usize,
}

/// One measured figure.
#[derive(Debug, Clone)]
struct Figure {
    name: &'static str,
    size: usize,
    value: f64,
    unit: &'static str,
}

impl Figure {
    fn latency(name: &'static str, size: usize, seconds: f64) -> Self {
        Figure {
            name,
            size,
            value: seconds * 1e6,
            unit: "us",
        }
    }
}

/// The median of `samples`.
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Runs `$body` (a `Result<()>` expression that may `.await`) with `$i` = 1, 2, … counting on
/// across warm-up and the timed batches of `$plan`, and evaluates to the median time of one
/// run over the batches, in seconds. A macro, not a function over an async closure: the
/// futures of borrowing async closures cannot be shown `Send` through a generic call.
macro_rules! per_op {
    ($plan:expr, |$i:ident| $body:expr) => {{
        let plan: Plan = $plan;
        let mut $i: u64 = 0;
        for _ in 0..plan.warmup {
            $i += 1;
            $body?;
        }
        let mut samples = Vec::with_capacity(plan.reps);
        for _ in 0..plan.reps {
            let start = Instant::now();
            for _ in 0..plan.iters {
                $i += 1;
                $body?;
            }
            samples.push(start.elapsed().as_secs_f64() / plan.iters as f64);
        }
        median(samples)
    }};
}

/// The ping-pong flag of call `i` (counted from 1, as [`per_op`] counts) under `plan`: the
/// warm-up's and the first batch's flag 0, then one flag per batch in turn.
fn pingpong_flag(i: u64, plan: Plan) -> usize {
    let batch = i.saturating_sub(plan.warmup + 1) / plan.iters.max(1);
    (batch % PINGPONG_FLAGS as u64) as usize
}

/// Checks a value read back after a figure, so that a broken transfer cannot pass as fast.
fn check(what: &str, got: u64, want: u64) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: read {got}, expected {want}"
        )))
    }
}

/// `--only barrier_all`: the world barrier of however many PEs there are; PE 0 returns it.
async fn barrier_alone(pe: Pe, cfg: Config) -> Result<Vec<Figure>> {
    let plan = Plan {
        warmup: cfg.warmup,
        iters: cfg.iters,
        reps: cfg.reps,
    };
    pe.barrier_all().await?;
    let t = per_op!(plan, |_i| pe.barrier_all().await);
    let figure = Figure::latency("barrier_all", 0, t);
    Ok(if pe.my_pe() == 0 {
        vec![figure]
    } else {
        Vec::new()
    })
}

/// The benchmark as one PE runs it; PE 0 returns the figures.
async fn bench(pe: Pe, cfg: Config) -> Result<Vec<Figure>> {
    if cfg.barrier_only && pe.n_pes() >= PES {
        return barrier_alone(pe, cfg).await;
    }
    if pe.n_pes() != PES {
        return Err(Error::InvalidArgument(format!(
            "host_pt2pt needs exactly {PES} PEs, not {}",
            pe.n_pes()
        )));
    }
    let me = pe.my_pe();
    let word = pe.calloc::<u64>(1).await?;
    let counter = pe.calloc::<u64>(1).await?;
    let flags = pe
        .calloc::<u64>(PINGPONG_FLAGS * PINGPONG_FLAG_STRIDE)
        .await?;
    let big = pe.align::<u8>(PAGE, MAX_SIZE).await?;
    let lat = Plan {
        warmup: cfg.warmup,
        iters: cfg.iters,
        reps: cfg.reps,
    };
    let calls = cfg.warmup + cfg.iters * cfg.reps as u64;
    let mut figures = Vec::new();
    pe.barrier_all().await?;

    if me == 0 {
        let t = per_op!(lat, |i| {
            pe.put(&word, &[i], 1).await?;
            pe.quiet().await
        });
        figures.push(Figure::latency("put_quiet", WORD, t));
        check("put_quiet", pe.g(&word, 1).await?, calls)?;

        let mut got = [0u64];
        let t = per_op!(lat, |_i| pe.get(&mut got, &word, 1).await);
        figures.push(Figure::latency("get", WORD, t));
        check("get", got[0], calls)?;

        let t = per_op!(lat, |_i| pe.atomic_fetch_add(&counter, 1u64, 1).await);
        figures.push(Figure::latency("fetch_add", WORD, t));
        check("fetch_add", pe.g(&counter, 1).await?, calls)?;
    }
    pe.barrier_all().await?;

    // Ping-pong: PE 0 serves i, PE 1 returns it; both count the same calls.
    let peer = 1 - me;
    let t = per_op!(lat, |i| {
        let at = pingpong_flag(i, lat) * PINGPONG_FLAG_STRIDE;
        let flag = flags.slice(at..at + 1);
        if me == 0 {
            pe.p(flag, i, peer).await?;
            pe.wait_until(flag, Cmp::Ge, i).await?;
        } else {
            pe.wait_until(flag, Cmp::Ge, i).await?;
            pe.p(flag, i, peer).await?;
        }
        Ok::<_, Error>(())
    });
    figures.push(Figure::latency("pingpong", WORD, t / 2.0));
    pe.barrier_all().await?;

    if me == 0 {
        let backing: Vec<u8> = (0..MAX_SIZE + PAGE).map(|b| b as u8).collect();
        let skip = (PAGE - backing.as_ptr() as usize % PAGE) % PAGE;
        let src = &backing[skip..skip + MAX_SIZE];
        for size in BW_SIZES {
            let puts = (cfg.bw_bytes / size).max(4);
            let plan = Plan {
                warmup: 1,
                iters: 1,
                reps: cfg.reps,
            };
            let t = per_op!(plan, |_i| {
                for _ in 0..puts {
                    pe.put_nbi(big.slice(..size), &src[..size], 1)?;
                }
                pe.quiet().await
            });
            figures.push(Figure {
                name: "put_bw",
                size,
                value: (size * puts) as f64 / t / 1e9,
                unit: "GB/s",
            });
        }
        let mut tail = [0u8];
        pe.get(&mut tail, big.at(MAX_SIZE - 1), 1).await?;
        check("put_bw", u64::from(tail[0]), u64::from(src[MAX_SIZE - 1]))?;
    }
    pe.barrier_all().await?;

    let t = per_op!(lat, |_i| pe.barrier_all().await);
    figures.push(Figure::latency("barrier_all", 0, t));

    for buffer in [word, counter, flags] {
        pe.free(buffer).await?;
    }
    pe.free(big).await?;
    Ok(if me == 0 { figures } else { Vec::new() })
}

/// Prints the figures as perftests-style tables, then as `RESULT` lines.
fn report(mode: &str, cfg: &Config, figures: &[Figure]) {
    let pes = if cfg.barrier_only {
        "the job's".to_string()
    } else {
        PES.to_string()
    };
    println!(
        "# ferroshmem host_pt2pt: {pes} PEs, {mode}; median of {} batches ({} latency iterations, {} MiB per bandwidth batch)",
        cfg.reps,
        cfg.iters,
        cfg.bw_bytes >> 20
    );
    let mut last = "";
    for f in figures {
        if f.name != last {
            let what = if f.unit == "us" {
                "latency"
            } else {
                "bandwidth"
            };
            println!("\n#{} {what}\n{:<12}{what}({})", f.name, "size(B)", f.unit);
            last = f.name;
        }
        println!("{:<12}{:.3}", f.size, f.value);
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
            eprintln!("host_pt2pt: {e}");
            return ExitCode::from(2);
        }
    };
    let launched = match LaunchEnv::detect() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("host_pt2pt: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mode, local_pes) = match &launched {
        Some(env) => (
            format!("launched by {} (one PE per process)", env.launcher),
            1,
        ),
        None => ("no launcher: both PEs in this process".to_string(), PES),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.workers.unwrap_or(local_pes))
        .enable_all()
        .build();
    let outcome = runtime
        .map_err(|e| Error::InvalidArgument(format!("cannot start tokio: {e}")))
        .and_then(|rt| rt.block_on(ferroshmem::run(PES, move |pe| bench(pe, cfg))));
    match outcome.and_then(|per_pe| per_pe.into_iter().collect::<Result<Vec<_>>>()) {
        Ok(per_pe) => {
            let figures: Vec<Figure> = per_pe.into_iter().flatten().collect();
            if !figures.is_empty() {
                report(&mode, &cfg, &figures);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("host_pt2pt: {e}");
            ExitCode::FAILURE
        }
    }
}
