//! GPU point-to-point benchmarks between 2 PEs, one per GPU, in the style of NVSHMEM's
//! perftests. Kernels use the device library (compiled through `GpuPe::compile`). With one PE
//! (one GPU) every operation targets the PE itself (loopback) and the ping-pong is skipped:
//! figures for the local path only, not for NVLink.
//!
//! | figure | what PE 0 measures |
//! |---|---|
//! | `init_ms` | process joining the job and setting up its GPU PE (`init` + `init_gpu`; `init_gpu` alone in-process); `init_host_part_ms`: the `init` part |
//! | `dev_put_bw_<size>` | one kernel of `--blocks` × `--threads`, each block `fsh_putmem_nbi_block` of its chunk to PE 1, repeated (50; 5 from 256 MiB), one `fsh_quiet`; CUDA events, after one warm-up launch |
//! | `dev_get_bw_<size>` | the same with `fsh_getmem_nbi_block` |
//! | `dev_p_quiet_us` | one thread: `fsh_p` + `fsh_quiet`, 10 000 times |
//! | `dev_fetch_add_us` | one thread: 64-bit `fsh_atomic_fetch_add` on PE 1, 10 000 times |
//! | `dev_put_signal_pingpong_us` | `fsh_putmem_signal_nbi` of 8 bytes + `fsh_signal_wait_until`, PE 1 answering; one way = round trip / 2 |
//! | `barrier_all_on_stream_us` | 1 000 `barrier_all_on_stream` on both PEs, per barrier (`_graph_us`: the same captured in a CUDA graph) |
//! | `host_put_on_stream_bw_<size>` | `put_on_stream` (copy engine) to PE 1, repeated, CUDA events |
//! | `host_put_on_stream_4k_us` | 1 000 `put_on_stream` of 4 KiB, wall time from first call to completion, per op |
//! | `host_put_on_stream_4k_queue_us` | the same, host time to queue them (no wait), per op |
//! | `host_put8_quiet_us` | awaited `put` of 8 bytes from pinned memory, then `quiet().await` |
//! | `host_p8_us` | awaited `p` of a `u64` (no NVSHMEM twin) |
//! | `host_wait_stream_us` | `wait_stream` of an idle stream: the event and completion-thread latency alone (no NVSHMEM twin) |
//! | `host_barrier_all_us` | `barrier_all().await` on both PEs |
//!
//! PE 0 prints a table and, for `scripts/compare-nvshmem`, lines `FIGURE <name> <value> <unit>`.
//!
//! ```text
//! cargo bench --no-run --bench gpu_pt2pt
//! ferroshmem run -n 2 -- target/release/deps/gpu_pt2pt-<hash> [--blocks 32 --threads 1024]
//! target/release/deps/gpu_pt2pt-<hash>                   # no launcher: 1 PE per GPU, at most 2
//! ```
//!
//! Across two nodes (`ferroshmem run --hosts a:1,b:1 …`) the kernels' figures measure the
//! network path (IBGDA with the `cpu` NIC handler) and the on-stream ones are left out.
//!
//! Options: `--blocks N`, `--threads N` (bandwidth kernels, default 32 × 1024),
//! `--max-size BYTES` (largest bandwidth size, default 1 GiB), `--lat-iters N` (default
//! 10 000). Without a GPU it says so and exits successfully.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::Instant;

use ferroshmem::gpu::cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};
use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuModule, GpuPe, HostBuffer, LaunchDims};
use ferroshmem::{Error, GpuError, Pe, Result};

const KERNELS: &str = r#"
extern "C" __global__ void __launch_bounds__(1024) put_bw(char* dst, const char* src, fsh_u64 bytes, int iters, int peer) {
    fsh_u64 chunk = bytes / gridDim.x, off = chunk * blockIdx.x;
    fsh_u64 len = blockIdx.x == gridDim.x - 1 ? bytes - off : chunk;
    for (int i = 0; i < iters; ++i) fsh_putmem_nbi_block(dst + off, src + off, len, peer);
    fsh_quiet();
}
extern "C" __global__ void __launch_bounds__(1024) get_bw(char* dst, const char* src, fsh_u64 bytes, int iters, int peer) {
    fsh_u64 chunk = bytes / gridDim.x, off = chunk * blockIdx.x;
    fsh_u64 len = blockIdx.x == gridDim.x - 1 ? bytes - off : chunk;
    for (int i = 0; i < iters; ++i) fsh_getmem_nbi_block(dst + off, src + off, len, peer);
    fsh_quiet();
}
extern "C" __global__ void p_lat(int* dst, int iters, int peer) {
    for (int i = 0; i < iters; ++i) { fsh_p(dst, i, peer); fsh_quiet(); }
}
extern "C" __global__ void fadd_lat(fsh_u64* dst, int iters, int peer, fsh_u64* out) {
    fsh_u64 acc = 0;
    for (int i = 0; i < iters; ++i) acc += fsh_atomic_fetch_add(dst, 1ull, peer);
    *out = acc;
}
extern "C" __global__ void pingpong(fsh_u64* data, fsh_u64* sig, int iters, int peer, int first, fsh_u64 base) {
    for (fsh_u64 i = base + 1; i <= base + iters; ++i) {
        if (first) {
            fsh_putmem_signal_nbi(data, data + 1, 8, sig, i, FSH_SIGNAL_SET, peer);
            fsh_signal_wait_until(sig, FSH_CMP_GE, i);
        } else {
            fsh_signal_wait_until(sig, FSH_CMP_GE, i);
            fsh_putmem_signal_nbi(data, data + 1, 8, sig, i, FSH_SIGNAL_SET, peer);
        }
        *(volatile fsh_u64*)(data + 2) = i;
    }
    fsh_quiet();
}
"#;

const GIB: usize = 1 << 30;
const BW_SIZES: [usize; 6] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, GIB];

struct Opts {
    blocks: u32,
    threads: u32,
    max_size: usize,
    lat_iters: usize,
}

fn opts() -> Result<Opts> {
    let mut o = Opts {
        blocks: 32,
        threads: 1024,
        max_size: GIB,
        lat_iters: 10_000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<usize> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::InvalidArgument(format!("{name} needs a number")))
        };
        match a.as_str() {
            "--blocks" => o.blocks = value("--blocks")? as u32,
            "--threads" => o.threads = value("--threads")? as u32,
            "--max-size" => o.max_size = value("--max-size")?,
            "--lat-iters" => o.lat_iters = value("--lat-iters")?,
            _ => {}
        }
    }
    Ok(o)
}

fn size_name(bytes: usize) -> String {
    match bytes {
        b if b >= GIB => format!("{}G", b / GIB),
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}

/// Prints one figure (PE 0 only) as a table row and a machine-readable line.
fn figure(pe: &GpuPe, name: &str, value: f64, unit: &str) {
    if pe.my_pe() == 0 {
        eprintln!("# {name} at {:.1} s", process_seconds());
        println!("{name:<36} {value:>12.3} {unit}");
        println!("FIGURE {name} {value:.4} {unit}");
    }
}

/// Seconds since the first progress line (they show where a stalled step stopped).
fn process_seconds() -> f64 {
    static FIRST: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    FIRST.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// The error of a ping-pong round that did not end in `bound`, after printing the last
/// iteration the kernel reached and the signal word it waits on (read while it still runs).
async fn stalled_pingpong(
    g: &GpuPe,
    data: &ferroshmem::gpu::GpuBuffer<u64>,
    sig: &ferroshmem::gpu::GpuBuffer<u64>,
    round: usize,
    bound: std::time::Duration,
) -> Error {
    let me = g.my_pe();
    let read = async {
        let mut reached = HostBuffer::<u64>::new(g.context(), 1)?;
        let mut signal = HostBuffer::<u64>::new(g.context(), 1)?;
        g.get(&mut reached, data.slice(2..3), me).await?;
        g.get(&mut signal, sig.slice(0..1), me).await?;
        Ok::<_, Error>((reached.as_slice()[0], signal.as_slice()[0]))
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), read).await {
        Ok(Ok((reached, signal))) => eprintln!(
            "# PE {me}: ping-pong round {round} stalled: iteration {reached} reached, signal {signal}"
        ),
        other => eprintln!("# PE {me}: ping-pong round {round} stalled, progress unreadable: {other:?}"),
    }
    Error::Timeout {
        operation: "the put-signal ping-pong",
        after: bound,
    }
}

fn event(g: &GpuPe) -> Result<CudaEvent> {
    g.context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| Error::cuda(format!("timing event: {e}")))
}

/// Milliseconds between two recorded events once `stream` has completed.
async fn elapsed_ms(g: &GpuPe, stream: &CudaStream, a: &CudaEvent, b: &CudaEvent) -> Result<f64> {
    g.wait_stream(stream).await?;
    a.elapsed_ms(b)
        .map(f64::from)
        .map_err(|e| Error::cuda(format!("elapsed time: {e}")))
}

/// Runs `launch` once to warm up, then once between events; returns milliseconds.
async fn timed(
    g: &GpuPe,
    stream: &Arc<CudaStream>,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<f64> {
    launch()?;
    g.wait_stream(stream).await?;
    let (a, b) = (event(g)?, event(g)?);
    a.record(stream).map_err(|e| Error::cuda(e.to_string()))?;
    launch()?;
    b.record(stream).map_err(|e| Error::cuda(e.to_string()))?;
    elapsed_ms(g, stream, &a, &b).await
}

/// Microseconds per call of `op`: the best of 5 batches of `per_batch` awaited calls.
async fn best_per_op_us<F, Fut>(per_batch: usize, mut op: F) -> Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..per_batch {
            op().await?;
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e6 / per_batch.max(1) as f64);
    }
    Ok(best)
}

/// The PE a figure targets: the other PE, or this one when the job has one PE.
fn peer_of(g: &GpuPe) -> usize {
    (g.my_pe() + 1) % g.n_pes()
}

fn dims1() -> LaunchDims {
    LaunchDims::linear(1, 1)
}

async fn device_figures(
    g: &GpuPe,
    m: &GpuModule,
    o: &Opts,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    let me = g.my_pe();
    let peer = peer_of(g) as i32;
    let max = o.max_size.min(GIB);
    let big = g.malloc::<u8>(max).await?;
    let local = DeviceBuffer::<u8>::new(g.context(), max)?;
    let small = g.calloc::<u64>(64).await?;
    let (big_p, small_p) = (g.local_ptr(&big)?, g.local_ptr(&small)?);
    g.barrier_all().await?;
    for kind in ["put", "get"] {
        for &size in BW_SIZES.iter().filter(|&&s| s <= max) {
            let iters = if size >= 256 << 20 { 5 } else { 50 };
            if me == 0 {
                let (dst, src) = if kind == "put" {
                    (big_p, local.device_ptr())
                } else {
                    (local.device_ptr(), big_p)
                };
                let name = format!("{kind}_bw");
                let dims = LaunchDims::linear(o.blocks, o.threads);
                let args = [
                    dst.into(),
                    src.into(),
                    (size as u64).into(),
                    (iters as i32).into(),
                    peer.into(),
                ];
                // SAFETY: the kernel takes (dst, src, bytes, iters, peer); both buffers hold
                // `size` bytes and live until the stream is waited for.
                let ms = timed(g, stream, || unsafe {
                    m.launch(&name, dims, stream, &args)
                })
                .await?;
                let gbs = (size * iters) as f64 / (ms * 1e-3) / 1e9;
                figure(
                    g,
                    &format!("dev_{kind}_bw_{}", size_name(size)),
                    gbs,
                    "GB/s",
                );
            }
            g.barrier_all().await?;
        }
    }
    let iters = o.lat_iters as i32;
    if me == 0 {
        let args = [small_p.into(), iters.into(), peer.into()];
        // SAFETY: p_lat takes (int*, iters, peer) on symmetric memory that outlives the call.
        let ms = timed(g, stream, || unsafe {
            m.launch("p_lat", dims1(), stream, &args)
        })
        .await?;
        figure(g, "dev_p_quiet_us", ms * 1e3 / iters as f64, "us");
        let args = [
            small_p.into(),
            iters.into(),
            peer.into(),
            (small_p + 256).into(),
        ];
        // SAFETY: fadd_lat takes (u64*, iters, peer, u64* out), both in `small`.
        let ms = timed(g, stream, || unsafe {
            m.launch("fadd_lat", dims1(), stream, &args)
        })
        .await?;
        figure(g, "dev_fetch_add_us", ms * 1e3 / iters as f64, "us");
    }
    g.barrier_all().await?;
    // Ping-pong (2 PEs): both PEs launch; signal values continue across the runs.
    if g.n_pes() == 2 {
        let sig = g.calloc::<u64>(8).await?;
        let data = g.calloc::<u64>(8).await?;
        let (sig_p, data_p) = (g.local_ptr(&sig)?, g.local_ptr(&data)?);
        let mut base = 0u64;
        let mut ms = 0.0;
        for round in 0..2 {
            g.barrier_all().await?;
            let (a, b) = (event(g)?, event(g)?);
            a.record(stream).map_err(|e| Error::cuda(e.to_string()))?;
            let args = [
                data_p.into(),
                sig_p.into(),
                iters.into(),
                peer.into(),
                i32::from(me == 0).into(),
                base.into(),
            ];
            eprintln!(
                "# PE {me}: ping-pong round {round} launched at {:.1} s",
                process_seconds()
            );
            // SAFETY: pingpong takes (u64* data, u64* sig, iters, peer, first, base), symmetric.
            unsafe { m.launch("pingpong", dims1(), stream, &args)? };
            b.record(stream).map_err(|e| Error::cuda(e.to_string()))?;
            let bound = std::time::Duration::from_secs(60);
            let t = match tokio::time::timeout(bound, elapsed_ms(g, stream, &a, &b)).await {
                Ok(t) => t?,
                Err(_) => return Err(stalled_pingpong(g, &data, &sig, round, bound).await),
            };
            if round == 1 {
                ms = t;
            }
            base += iters as u64;
        }
        figure(
            g,
            "dev_put_signal_pingpong_us",
            ms * 1e3 / (2.0 * iters as f64),
            "us",
        );
        g.barrier_all().await?;
        for b in [sig, data] {
            g.free(b).await.map_err(|(e, _)| e)?;
        }
    }
    g.barrier_all().await?;
    g.free(small).await.map_err(|(e, _)| e)?;
    g.free(big).await.map_err(|(e, _)| e)?;
    Ok(())
}

async fn stream_figures(g: &GpuPe, o: &Opts, stream: &Arc<CudaStream>) -> Result<()> {
    let (me, peer) = (g.my_pe(), peer_of(g));
    let n = 1000;
    g.barrier_all().await?;
    let ms = timed(g, stream, || {
        (0..n).try_for_each(|_| g.barrier_all_on_stream(stream))
    })
    .await?;
    figure(g, "barrier_all_on_stream_us", ms * 1e3 / n as f64, "us");
    g.barrier_all().await?;
    let graph = g.capture(stream, |st| {
        (0..100).try_for_each(|_| g.barrier_all_on_stream(st))
    })?;
    let ms = timed(g, stream, || (0..10).try_for_each(|_| graph.launch(stream))).await?;
    figure(g, "barrier_all_on_stream_graph_us", ms * 1e3 / 1000.0, "us");
    g.barrier_all().await?;
    let max = o.max_size.min(GIB);
    let (src, dst) = (g.malloc::<u8>(max).await?, g.malloc::<u8>(max).await?);
    g.barrier_all().await?;
    if me == 0 {
        for &size in BW_SIZES.iter().filter(|&&s| s <= max) {
            let iters = if size >= 256 << 20 { 5 } else { 50 };
            let ms = timed(g, stream, || {
                (0..iters).try_for_each(|_| {
                    g.put_on_stream(dst.slice(..size), src.slice(..size), peer, stream)
                })
            })
            .await?;
            let gbs = (size * iters) as f64 / (ms * 1e-3) / 1e9;
            figure(
                g,
                &format!("host_put_on_stream_bw_{}", size_name(size)),
                gbs,
                "GB/s",
            );
        }
        let ops = 1000;
        let (mut best, mut best_queue) = (f64::MAX, f64::MAX);
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..ops {
                g.put_on_stream(dst.slice(..4096), src.slice(..4096), peer, stream)?;
            }
            let queued = t.elapsed();
            g.wait_stream(stream).await?;
            best = best.min(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
            best_queue = best_queue.min(queued.as_secs_f64() * 1e6 / ops as f64);
        }
        figure(g, "host_put_on_stream_4k_us", best, "us");
        figure(g, "host_put_on_stream_4k_queue_us", best_queue, "us");
        let word = HostBuffer::from_slice(g.context(), &[7u64])?;
        let dest = dst.slice(..8).cast::<u64>();
        let per_batch = o.lat_iters / 5;
        let best = best_per_op_us(per_batch, || async {
            g.put(dest, &word, peer).await?;
            g.quiet().await
        })
        .await?;
        figure(g, "host_put8_quiet_us", best, "us");
        let best = best_per_op_us(per_batch, || g.p(dest, 7u64, peer)).await?;
        figure(g, "host_p8_us", best, "us");
        let best = best_per_op_us(per_batch, || g.wait_stream(stream)).await?;
        figure(g, "host_wait_stream_us", best, "us");
    }
    g.barrier_all().await?;
    let best = best_per_op_us(o.lat_iters / 5, || g.barrier_all()).await?;
    figure(g, "host_barrier_all_us", best, "us");
    g.free(src).await.map_err(|(e, _)| e)?;
    g.free(dst).await.map_err(|(e, _)| e)?;
    Ok(())
}

async fn bench(pe: Pe, started: Instant, host_ms: f64) -> Result<()> {
    let o = opts()?;
    if !(1..=2).contains(&pe.n_pes()) {
        return Err(Error::InvalidArgument(format!(
            "gpu_pt2pt needs 1 or 2 PEs, not {}",
            pe.n_pes()
        )));
    }
    let g = match pe.init_gpu().await {
        Ok(g) => g,
        Err(Error::Gpu(GpuError::NoGpu(why))) => {
            println!("gpu_pt2pt: nothing to measure, no GPU: {why}");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let init_ms = started.elapsed().as_secs_f64() * 1e3;
    let all = pe
        .exchange(
            0x4750_5542_454e_4348,
            pe.my_pe(),
            pe.n_pes(),
            init_ms.to_le_bytes().to_vec(),
        )
        .await?;
    let slowest = all
        .iter()
        .map(|b| f64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
        .fold(0.0, f64::max);
    if g.my_pe() == 0 {
        println!(
            "# gpu_pt2pt: {} PE(s){}, {} ({} SMs), device kernels {} x {}",
            g.n_pes(),
            match (g.n_pes(), g.is_remote(1 - g.my_pe().min(1))) {
                (1, _) => " (loopback)",
                (_, true) => " on two nodes (network path)",
                _ => "",
            },
            g.device().name(),
            g.device().multiprocessors(),
            o.blocks,
            o.threads
        );
    }
    figure(&g, "init_ms", slowest, "ms");
    figure(&g, "init_host_part_ms", host_ms, "ms");
    let module = g.compile(KERNELS, &CompileOptions::default())?;
    let stream = g.new_stream()?;
    device_figures(&g, &module, &o, &stream).await?;
    // A peer on another node is reached through the network path, which carries kernels'
    // operations and awaited host ones, not on-stream copies yet.
    if g.n_pes() == 2 && g.is_remote(1 - g.my_pe()) {
        return Ok(());
    }
    stream_figures(&g, &o, &stream).await?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let started = Instant::now();
    ferroshmem::observability::init_tracing();
    if std::env::var_os("FERROSHMEM_SYMMETRIC_SIZE").is_none() {
        std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "2200M");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let outcome: Result<()> = rt.block_on(async move {
        match ferroshmem::launch_env::LaunchEnv::detect()? {
            Some(_) => {
                let pe = ferroshmem::init().await?;
                let host_ms = started.elapsed().as_secs_f64() * 1e3;
                bench(pe.clone(), started, host_ms).await?;
                pe.finalize().await
            }
            None => {
                let gpus = match ferroshmem::gpu::detect() {
                    Ok(inventory) => inventory.devices.min(2),
                    Err(e) => {
                        println!("gpu_pt2pt: nothing to measure, {e}");
                        return Ok(());
                    }
                };
                ferroshmem::run_local(gpus, move |pe| bench(pe, Instant::now(), 0.0))
                    .await?
                    .into_iter()
                    .collect()
            }
        }
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_pt2pt: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
