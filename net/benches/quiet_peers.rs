//! What `quiet` costs as a job grows: PE 0 puts 8 bytes to one peer through the fabric
//! (`tcp;ofi_rxm` on loopback) and quiets, in data planes that reach 2, 64 and 1024 PEs
//! through the same endpoint (every PE but PE 0 is the same peer, PE 1, under another
//! number: one lane each, all idle but PE 1's). The data planes run the same code over the
//! same connection in alternating batches, so the difference between widths is what the
//! idle lanes cost `quiet`, beside the loopback's own noise.
//!
//! ```text
//! cargo bench -p ferroshmem-net --bench quiet_peers [-- --batches N --ops N]
//! ```
//!
//! A second figure times `quiet` alone, with nothing sent since the last: every lane idle.
//!
//! Prints the median over batches of µs per put + `quiet` and per idle `quiet` for each
//! width, their ratios to the narrowest, and `RESULT put_quiet_<width> <µs> us` and
//! `RESULT idle_quiet_<width> <µs> us` lines.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Instant;

use common::{available, two_nodes, view, wide_data_plane};
use ferroshmem_runtime::DataPlane;

/// The numbers of PEs the data planes reach.
const WIDTHS: [usize; 3] = [2, 64, 1024];

struct Config {
    batches: usize,
    ops: usize,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Config, String> {
    let mut cfg = Config {
        batches: 15,
        ops: 2000,
    };
    let mut args = args.skip(1);
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--batches" => &mut cfg.batches,
            "--ops" => &mut cfg.ops,
            // cargo bench passes `--bench`.
            _ => continue,
        };
        let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
        *slot = value
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
            .ok_or_else(|| format!("{arg} {value:?}: expected a whole number above 0"))?;
    }
    Ok(cfg)
}

/// µs per put of 8 bytes to PE 1 followed by `quiet`, over `ops` of them.
async fn put_quiet(dp: &DataPlane, ops: usize) -> f64 {
    let word = view::<u64>(0, 1);
    let start = Instant::now();
    for i in 0..ops {
        dp.put(word.slice(..), &[i as u64], 1).await.expect("put");
        dp.quiet().await.expect("quiet");
    }
    start.elapsed().as_secs_f64() * 1e6 / ops as f64
}

/// µs per `quiet` with nothing sent since the last, over `ops` of them.
async fn idle_quiet(dp: &DataPlane, ops: usize) -> f64 {
    dp.quiet().await.expect("quiet");
    let start = Instant::now();
    for _ in 0..ops {
        dp.quiet().await.expect("quiet");
    }
    start.elapsed().as_secs_f64() * 1e6 / ops as f64
}

/// Prints the medians of `samples` (one list per width) under `title`, with their ratios to
/// the narrowest, then their `RESULT <name>_<width>` lines.
fn report(title: &str, name: &str, samples: Vec<Vec<f64>>) {
    let medians: Vec<f64> = samples.into_iter().map(median).collect();
    println!("# {title}, by the PEs the data plane reaches");
    println!("{:>8} {:>12} {:>10}", "PEs", "latency(us)", "ratio");
    for (width, us) in WIDTHS.iter().zip(&medians) {
        println!("{width:>8} {us:>12.3} {:>10.2}", us / medians[0]);
    }
    for (width, us) in WIDTHS.iter().zip(&medians) {
        println!("RESULT {name}_{width} {us:.3} us");
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cfg = match parse(std::env::args()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("quiet_peers: {e}");
            return ExitCode::from(2);
        }
    };
    if !available() {
        return ExitCode::SUCCESS;
    }
    let nodes = two_nodes(|key| key);
    let planes: Vec<DataPlane> = WIDTHS
        .iter()
        .map(|&width| wide_data_plane(&nodes[0], width).0)
        .collect();
    for dp in &planes {
        put_quiet(dp, cfg.ops / 10 + 1).await;
    }
    let mut samples = vec![Vec::new(); planes.len()];
    let mut idle = vec![Vec::new(); planes.len()];
    for _ in 0..cfg.batches {
        for ((dp, taken), idle) in planes.iter().zip(&mut samples).zip(&mut idle) {
            taken.push(put_quiet(dp, cfg.ops).await);
            idle.push(idle_quiet(dp, cfg.ops * 10).await);
        }
    }
    report("put 8 B + quiet to one peer", "put_quiet", samples);
    report("quiet with nothing sent since the last", "idle_quiet", idle);
    ExitCode::SUCCESS
}
