//! GPU PEs in the metrics: a known pattern of host-initiated and on-stream operations, then
//! the Prometheus exposition must hold exactly its operation and byte counts under
//! `transport="cuda"`, nothing left in flight after `quiet`, a sampled latency, the CQ depth,
//! and the GPU heap's use under `memory="gpu"`.
//!
//! Its own test binary: it installs the metrics exporter for the whole process before any PE
//! starts. Without a GPU it says so and passes.

use std::time::Duration;

use ferroshmem::gpu::HostBuffer;
use ferroshmem::observability::names::OP_SAMPLE_EVERY;
use ferroshmem::{Pe, Result, SignalOp};

/// `p` calls per PE: past the sampler's period, so that one of them is timed.
const P_CALLS: usize = OP_SAMPLE_EVERY as usize + 8;

/// The sample of `metric` whose labels include every one of `labels`, if any.
fn sample(text: &str, metric: &str, labels: &[(&str, String)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| {
            // `{pe="0"` or `,pe="0"`: not the end of `target_pe="0"`.
            labels.iter().all(|(k, v)| {
                l.contains(&format!("{{{k}=\"{v}\"")) || l.contains(&format!(",{k}=\"{v}\""))
            })
        })
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// Each PE, towards the next: 3 `put`s of one `u64` (stream memory writes) and one of
/// 8 `u64`s (a copy), 2 `get`s of 2 `u64`s, [`P_CALLS`] `p`s (enough for the sampler to time
/// one), one `put_nbi` of 16 `u64`s and a `quiet`, 2 `put_on_stream`s of 32 `u64`s and one
/// `signal_op_on_stream`. Then each PE checks its own series.
async fn pattern(pe: Pe) -> Result<()> {
    let g = pe.init_gpu().await?;
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    let a = g.calloc::<u64>(64).await?;
    let b = g.calloc::<u64>(64).await?;
    let sig = g.calloc::<u64>(1).await?;
    let one = HostBuffer::from_slice(g.context(), &[7u64])?;
    let eight = HostBuffer::from_slice(g.context(), &[9u64; 8])?;
    for _ in 0..3 {
        g.put(a.slice(0..1), &one, next).await?;
    }
    g.put(a.slice(8..16), &eight, next).await?;
    let mut two = HostBuffer::<u64>::new(g.context(), 2)?;
    for _ in 0..2 {
        g.get(&mut two, a.slice(0..2), next).await?;
    }
    for _ in 0..P_CALLS {
        g.p(a.slice(20..21), 5u64, next).await?;
    }
    g.put_nbi(b.slice(0..16), a.slice(0..16), next)?;
    g.quiet().await?;
    let stream = g.new_stream()?;
    for _ in 0..2 {
        g.put_on_stream(b.slice(32..64), a.slice(32..64), next, &stream)?;
    }
    g.signal_op_on_stream(&sig, 1, SignalOp::Add, next, &stream)?;
    g.wait_stream(&stream).await?;
    g.barrier_all().await?;

    let text = ferroshmem::observability::installed()
        .expect("the exporter is installed")
        .render();
    let series = |op: &str| {
        vec![
            ("op", op.to_string()),
            ("transport", "cuda".to_string()),
            ("pe", me.to_string()),
            ("target_pe", next.to_string()),
        ]
    };
    let expect = [
        // op, operations, bytes
        (
            "put",
            3 + 1 + P_CALLS + 1 + 2,
            3 * 8 + 64 + P_CALLS * 8 + 128 + 2 * 256,
        ),
        ("get", 2, 2 * 16),
        ("signal", 1, 8),
    ];
    for (op, ops, bytes) in expect {
        let labels = series(op);
        let got_ops = sample(&text, "ferroshmem_ops_total", &labels);
        let got_bytes = sample(&text, "ferroshmem_bytes_total", &labels);
        assert_eq!(
            (got_ops, got_bytes),
            (Some(ops as f64), Some(bytes as f64)),
            "PE {me}: {op} operations and bytes towards PE {next}\n{text}"
        );
    }
    let here = [("transport", "cuda".to_string()), ("pe", me.to_string())];
    assert_eq!(
        sample(&text, "ferroshmem_ops_in_flight", &here),
        Some(0.0),
        "PE {me}: operations left in flight\n{text}"
    );
    let timed = sample(
        &text,
        "ferroshmem_op_duration_seconds_count",
        &[("op", "put".to_string()), here[0].clone(), here[1].clone()],
    );
    assert!(
        timed.is_some_and(|n| n >= 1.0),
        "PE {me}: no sampled put latency\n{text}"
    );
    assert!(
        sample(&text, "ferroshmem_cq_depth", &here).is_some(),
        "PE {me}: no CQ depth\n{text}"
    );
    let gpu_heap = [("memory", "gpu".to_string()), ("pe", me.to_string())];
    let used = g.heap_used().await;
    assert!(
        used >= (64 + 64 + 1) * 8,
        "PE {me}: {used} GPU heap bytes in use"
    );
    assert_eq!(
        (
            sample(&text, "ferroshmem_heap_used_bytes", &gpu_heap),
            sample(&text, "ferroshmem_heap_free_bytes", &gpu_heap),
        ),
        (Some(used as f64), Some((g.heap_size() - used) as f64)),
        "PE {me}: GPU heap gauges\n{text}"
    );
    g.barrier_all().await?;
    for buf in [a, b, sig] {
        g.free(buf).await.map_err(|(e, _)| e)?;
    }
    Ok(())
}

#[test]
fn gpu_traffic_is_counted() {
    let devices = match ferroshmem::gpu::detect() {
        Ok(inventory) => inventory.devices,
        Err(e) => {
            eprintln!("gpu_traffic_is_counted: skipped, {e}");
            return;
        }
    };
    // The only test of this binary: no other thread reads the environment now.
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    ferroshmem::observability::install_exporter().expect("the exporter installs");
    // One thread: the sampler times the operation after each OP_SAMPLE_EVERY counted by
    // one thread, and a multi-thread runtime would spread the calls over its workers.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = devices.clamp(1, 8);
    let job = ferroshmem::run_local(n, pattern);
    let results = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), job).await })
        .expect("the GPU job finishes within 60 s")
        .expect("the job runs");
    for r in results {
        r.unwrap();
    }
}
