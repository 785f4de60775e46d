//! What metrics cost on the fabric path, in one process: two PEs reach each other only
//! through the fabric (`tcp;ofi_rxm` on loopback), and PE 0 has two data planes over the
//! same endpoint and connection, one made before the exporter is installed (metrics off: its
//! traffic blocks record nothing) and one after (metrics on: the count and the in-flight
//! gauge per operation). Both run the same code over the same connection, in alternating
//! batches, so that the difference is what recording costs, beside the loopback's own noise
//! (the endpoint's CQ depth, recorded per completion-queue read and not per operation, is
//! kept for both, from the first data plane that records). Two separate pairs of PEs are no
//! use here: the pair made second measured 1.8–3× slower than the first with metrics off
//! in both.
//!
//! - `put_wait`: an 8-byte put, then `quiet` (one round trip each: a put to another node
//!   returns once sent);
//! - `nbi_quiet`: 64 `put_nbi` of 8 bytes then `quiet` (per put).
//!
//! ```text
//! cargo bench -p ferroshmem-net --bench fabric_metrics_cost [-- --batches N --ops N]
//! ```
//!
//! Prints a table (medians of the batches' µs per operation, and the median of each batch
//! pair's own on/off ratio) and `RESULT <name>_<off|on> <µs> us` lines.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Instant;

use common::{available, two_nodes_in, view_in};
use ferroshmem_observability::install_exporter;
use ferroshmem_runtime::{DataPlane, HeapId};

/// Puts of one `put_nbi` burst before its `quiet`.
const BURST: usize = 64;

struct Config {
    batches: usize,
    ops: usize,
}

fn parse() -> Result<Config, String> {
    let mut cfg = Config {
        batches: 21,
        ops: 2000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            let text = args.next().ok_or(format!("{name} needs a value"))?;
            match text.parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name} {text}: expected a whole number >= 1")),
            }
        };
        match arg.as_str() {
            "--batches" => cfg.batches = value("--batches")?,
            "--ops" => cfg.ops = value("--ops")?,
            _ => {} // cargo's own `--bench`
        }
    }
    Ok(cfg)
}

/// Runs `ops` operations of kind `name` from PE 0's data plane `dp` to PE 1; µs per
/// operation.
async fn batch(name: &str, dp: &DataPlane, heap: HeapId, ops: usize) -> f64 {
    let word = view_in::<u64>(heap, 0, 1);
    let started = Instant::now();
    match name {
        "put_wait" => {
            for i in 0..ops {
                dp.put(&word, &[i as u64], 1).await.expect("put");
                dp.quiet().await.expect("landed");
            }
        }
        _ => {
            for burst in 0..ops.div_ceil(BURST) {
                for i in 0..BURST {
                    let value = (burst * BURST + i) as u64;
                    dp.put_nbi(&word, &[value], 1).expect("put_nbi");
                }
                dp.quiet().await.expect("quiet");
            }
        }
    }
    let took = started.elapsed().as_secs_f64() * 1e6;
    std::mem::forget(word);
    took / ops.next_multiple_of(if name == "put_wait" { 1 } else { BURST }) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let cfg = match parse() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("fabric_metrics_cost: {e}");
            return ExitCode::from(2);
        }
    };
    if !available() {
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = runtime.enter();
    // One job id for both: the data planes differ only in whether they record.
    let heap = HeapId(1);
    let [pe0, _pe1] = two_nodes_in(heap, |r| r);
    if let Err(e) = install_exporter() {
        eprintln!("fabric_metrics_cost: cannot install the exporter: {e}");
        return ExitCode::FAILURE;
    }
    let on = pe0.another_data_plane(0, heap);
    let off = &pe0.dp;
    println!(
        "{:<10} {:>10} {:>10} {:>8} {:>14}   (µs per op, medians of {} batches of {})",
        "op", "off", "on", "on/off", "paired on/off", cfg.batches, cfg.ops
    );
    for name in ["put_wait", "nbi_quiet"] {
        let (mut offs, mut ons, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        runtime.block_on(async {
            // Connections made and warm before timing.
            batch(name, off, heap, cfg.ops / 10 + 1).await;
            batch(name, &on, heap, cfg.ops / 10 + 1).await;
            for round in 0..cfg.batches {
                // Alternate which goes first, so that drift favours neither.
                let (a, b) = if round % 2 == 0 {
                    let a = batch(name, off, heap, cfg.ops).await;
                    (a, batch(name, &on, heap, cfg.ops).await)
                } else {
                    let b = batch(name, &on, heap, cfg.ops).await;
                    (batch(name, off, heap, cfg.ops).await, b)
                };
                offs.push(a);
                ons.push(b);
                ratios.push(b / a);
            }
        });
        let (off_us, on_us) = (median(offs), median(ons));
        println!(
            "{name:<10} {off_us:>10.2} {on_us:>10.2} {:>8.3} {:>14.3}",
            on_us / off_us,
            median(ratios)
        );
        println!("RESULT {name}_off {off_us:.3} us");
        println!("RESULT {name}_on {on_us:.3} us");
    }
    ExitCode::SUCCESS
}
