//! What counting one operation costs, in one process, against the same loop with metrics off:
//! a loop that stands for a host operation (an 8-byte store, alone as in an operation with no
//! fence such as `get`, or followed by the full fence that ends a `put` and a `quiet`)
//! records each iteration through [`Traffic::count_timed`] and [`Traffic::finish`] as the data
//! plane does, into an enabled block and into a disabled one, in alternating batches. Both
//! runs execute the same machine code (only the block differs), so the difference is the
//! count's, without the process-to-process noise that `scripts/compare-metrics` has to
//! average away.
//!
//! ```text
//! cargo bench -p ferroshmem-observability --bench count_cost [-- --batches N --ops N --threads N]
//! ```
//!
//! Prints a table and `RESULT <name> <threads> <ns per op> ns` lines. `--threads N` runs the
//! loop on N threads at once (each its own counting slot; past 16, the overflow shard).

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use ferroshmem_observability::{install_exporter, Op, PeMetrics, Traffic};

/// Targets of the block: as for a job of this many PEs.
const TARGETS: usize = 8;

/// The loop's settings.
struct Config {
    batches: usize,
    ops: u64,
    threads: usize,
}

fn parse() -> Result<Config, String> {
    let mut cfg = Config {
        batches: 31,
        ops: 1_000_000,
        threads: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let text = args.next().ok_or(format!("{name} needs a value"))?;
            match text.parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name} {text}: expected a whole number >= 1")),
            }
        };
        match arg.as_str() {
            "--batches" => cfg.batches = value("--batches")? as usize,
            "--ops" => cfg.ops = value("--ops")?,
            "--threads" => cfg.threads = value("--threads")? as usize,
            _ => {} // cargo's own `--bench`
        }
    }
    Ok(cfg)
}

/// Runs `ops` iterations of the stand-in operation, counted into `traffic`; ns per iteration.
#[inline(never)]
fn batch(traffic: &Traffic, memory: &[AtomicU64], fenced: bool, ops: u64) -> f64 {
    let started = Instant::now();
    for i in 0..ops {
        let target = black_box(i as usize % TARGETS);
        let timer = traffic.count_timed(Op::Put, target, 8);
        memory[target * 8].store(i, Ordering::Relaxed);
        if fenced {
            fence(Ordering::SeqCst);
        }
        traffic.finish(Op::Put, timer);
    }
    started.elapsed().as_nanos() as f64 / ops as f64
}

/// Medians of ns per iteration with metrics off and on, `batches` of each, alternating, on
/// each of `threads` threads (every thread's batches pooled).
fn measure(cfg: &Config, on: &Traffic, fenced: bool) -> (f64, f64) {
    let off = Traffic::disabled();
    let start = Barrier::new(cfg.threads);
    let (off_times, on_times): (Vec<f64>, Vec<f64>) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cfg.threads)
            .map(|_| {
                s.spawn(|| {
                    let memory: Vec<AtomicU64> =
                        (0..TARGETS * 8).map(|_| AtomicU64::new(0)).collect();
                    batch(on, &memory, fenced, cfg.ops / 10);
                    start.wait();
                    (0..cfg.batches)
                        .map(|_| {
                            let a = batch(&off, &memory, fenced, cfg.ops);
                            let b = batch(on, &memory, fenced, cfg.ops);
                            (a, b)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    });
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(off_times), median(on_times))
}

fn main() -> ExitCode {
    let cfg = match parse() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("count_cost: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = install_exporter() {
        eprintln!("count_cost: cannot install the exporter: {e}");
        return ExitCode::FAILURE;
    }
    let on = PeMetrics::new(0, 1).traffic("shm", TARGETS);
    println!(
        "{:<10} {:>8} {:>10} {:>10} {:>10} {:>7}   (ns per op, medians of {} batches of {})",
        "loop", "threads", "off", "on", "on - off", "on/off", cfg.batches, cfg.ops
    );
    for (name, fenced) in [("store", false), ("store_fence", true)] {
        let (off, on) = measure(&cfg, &on, fenced);
        println!(
            "{name:<10} {:>8} {off:>10.3} {on:>10.3} {:>10.3} {:>7.3}",
            cfg.threads,
            on - off,
            on / off
        );
        println!("RESULT {name}_off {} {off:.3} ns", cfg.threads);
        println!("RESULT {name}_on {} {on:.3} ns", cfg.threads);
    }
    ExitCode::SUCCESS
}
