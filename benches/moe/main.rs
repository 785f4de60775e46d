//! MoE dispatch and combine (`ferroshmem::ep`) with DeepEP's settings, on the PEs of one
//! process sharing the GPUs there are (several PEs per GPU; run it under CUDA MPS so that
//! their kernels run side by side), or on the PEs of a launched job, one per process
//! (`ferroshmem run -n 8 -- moe-<hash>`). PE 0 gathers every PE's figures and reports them.
//!
//! Normal mode: 4096 tokens per PE, hidden 7168, top-8 of 256 experts chosen uniformly at
//! random (DeepEP's `test_intranode.py`), BF16 dispatch, FP8 dispatch (e4m3 bytes with
//! per-128 scales, moved as given) and BF16 combine (in place). Each PE
//! times its own calls, all PEs starting each call together (a host barrier before it);
//! bandwidth is DeepEP's per-PE bottleneck figure: the bytes of the rows the PE received,
//! over the call's time (combine sends the same bytes back).
//!
//! Low-latency mode: 128 tokens per PE, the same model: dispatch (send, then the receive
//! hook) of BF16 rows and casting them to FP8, and BF16 combine, calls back to back after one host barrier, each awaited
//! by the host (so each figure includes the host's wait for the GPU, which DeepEP's kernel
//! times do not); then the same calls, each queued behind a barrier of every PE on the stream,
//! so that the PEs' kernels start together as on separate GPUs (PEs sharing one GPU here
//! launch through one queue, up to a hundred microseconds apart), timed on the stream from the
//! barrier, and by the kernels' own clocks (`ep::KernelClocks`: the GPU's timer from the first
//! start to the last end of each call's kernels, what DeepEP's kernel times measure). Then the same BF16 round captured into a CUDA graph and replayed (one
//! launch per round, as a decoding loop runs it), its dispatch and combine timed on the
//! stream.
//!
//! Beside it, in the same run, the copy-engine bound: each PE moves the same bytes with one
//! `cuMemcpyAsync` device to device (`GpuPe::copy_local`), all PEs at once (for low-latency
//! mode, the BF16 rows a dispatch brings each PE, awaited as the calls are); and DeepEP's
//! published H800 figures for the record (intranode, 8 EP: dispatch 153 GB/s, combine
//! 158 GB/s; low latency, 8 EP: dispatch 77 µs, combine 114 µs).
//!
//! ```text
//! cargo bench --no-run --bench moe
//! target/release/deps/moe-<hash> [--pes 8] [--tokens 4096] [--hidden 7168] [--top-k 8]
//!                                [--experts 256] [--iters 20] [--blocks N] [--ll-tokens 128]
//!                                [--mode all|normal|low-latency]
//! target/release/ferroshmem run -n 8 -- target/release/deps/moe-<hash> [OPTIONS]
//! ```
//!
//! Prints a table and lines `FIGURE <name> <value> <unit>`. Without a GPU it says so and
//! exits successfully.

use std::time::{Duration, Instant};

use ferroshmem::ep::{Bf16, Buffer, Config, DispatchInput, Rows};
use ferroshmem::gpu::{DeviceBuffer, GpuPe, GpuSharing, HostBuffer};
use ferroshmem::{Error, Pe, Result};

mod low_latency;

use low_latency::{
    low_latency, low_latency_graph, low_latency_rows, report_low_latency, LowLatencyFigures,
    Sending, Start,
};

/// What the command line asks.
#[derive(Debug, Clone, Copy)]
struct Args {
    pes: usize,
    tokens: usize,
    hidden: usize,
    top_k: usize,
    experts: usize,
    iters: usize,
    blocks: Option<u32>,
    ll_tokens: usize,
    mode: Mode,
}

/// Which modes a run measures (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    All,
    Normal,
    LowLatency,
}

impl Mode {
    fn parse(value: &str) -> Result<Mode> {
        match value {
            "all" => Ok(Mode::All),
            "normal" => Ok(Mode::Normal),
            "low-latency" => Ok(Mode::LowLatency),
            _ => Err(Error::InvalidArgument(format!(
                "--mode takes all, normal or low-latency, not {value:?}"
            ))),
        }
    }

    fn normal(self) -> bool {
        self != Mode::LowLatency
    }

    fn low_latency(self) -> bool {
        self != Mode::Normal
    }
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        pes: 8,
        tokens: 4096,
        hidden: 7168,
        top_k: 8,
        experts: 256,
        iters: 20,
        blocks: None,
        ll_tokens: 128,
        mode: Mode::All,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue;
        }
        if flag == "--mode" {
            args.mode = Mode::parse(&it.next().unwrap_or_default())?;
            continue;
        }
        let value: usize = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::InvalidArgument(format!("{flag} needs a number")))?;
        match flag.as_str() {
            "--pes" => args.pes = value,
            "--tokens" => args.tokens = value,
            "--hidden" => args.hidden = value,
            "--top-k" => args.top_k = value,
            "--experts" => args.experts = value,
            "--iters" => args.iters = value.max(1),
            "--blocks" => args.blocks = Some(value.max(1) as u32),
            "--ll-tokens" => args.ll_tokens = value,
            _ => return Err(Error::InvalidArgument(format!("unknown option {flag}"))),
        }
    }
    Ok(args)
}

/// One PE's figures (plain data: every PE puts its own into PE 0's heap).
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Figures {
    received_bytes: f64,
    fp8_bytes: f64,
    dispatch_s: f64,
    combine_s: f64,
    fp8_dispatch_s: f64,
    copy_s: f64,
    fp8_copy_s: f64,
    ll: LowLatencyFigures,
    ll_fp8: LowLatencyFigures,
    /// The same calls, each behind a barrier on the stream (`Start::Together`).
    ll_together: LowLatencyFigures,
    ll_fp8_together: LowLatencyFigures,
    /// BF16 calls started together, each received by a hook of its own.
    ll_hook_together: LowLatencyFigures,
    /// A round replayed from a CUDA graph: `dispatch_s` is the whole round awaited,
    /// `combine_s` unused.
    ll_graph: LowLatencyFigures,
    /// The BF16 bytes of the rows a low-latency dispatch brings this PE.
    ll_bytes: f64,
    /// Seconds per awaited `cuMemcpyAsync` of `ll_bytes`, every PE copying at once.
    ll_copy_s: f64,
}

/// splitmix64, for routings and values.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Distinct experts drawn uniformly for each token.
fn routing(args: &Args, pe: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(args.tokens * args.top_k);
    let mut state = pe as u64 * 0x1000_0001;
    for _ in 0..args.tokens {
        let row_start = out.len();
        while out.len() < row_start + args.top_k {
            state = mix(state);
            let e = (state % args.experts as u64) as i64;
            if !out[row_start..].contains(&e) {
                out.push(e);
            }
        }
    }
    out
}

async fn upload<T: bytemuck::Pod>(gpu: &GpuPe, data: &[T]) -> Result<DeviceBuffer<T>> {
    let mut dev = DeviceBuffer::new(gpu.context(), data.len())?;
    gpu.copy_local(&mut dev, &HostBuffer::from_slice(gpu.context(), data)?)
        .await?;
    Ok(dev)
}

/// Every PE's figures, on PE 0 (`None` on the others), and whether the PEs share the GPU
/// under CUDA MPS.
type Gathered = Option<(Vec<Figures>, bool)>;

/// Measures this PE's figures and gathers every PE's on PE 0.
async fn bench(pe: Pe, args: Args) -> Result<Gathered> {
    let gpu = pe.init_gpu().await?;
    let mps = matches!(
        gpu.sharing(),
        GpuSharing::InProcess { mps: true, .. } | GpuSharing::Processes { mps: true, .. }
    );
    let mine = measure(&pe, &gpu, args).await?;
    let all = pe.calloc::<Figures>(pe.n_pes()).await?;
    pe.p(all.at(pe.my_pe()), mine, 0).await?;
    pe.barrier_all().await?;
    let gathered = if pe.my_pe() == 0 {
        let mut figures = vec![Figures::default(); pe.n_pes()];
        pe.get(&mut figures, &all, 0).await?;
        Some((figures, mps))
    } else {
        None
    };
    pe.free(all).await?;
    Ok(gathered)
}

/// This PE's figures: normal mode and its copy-engine bounds, then low latency (those the
/// run's mode asks; the others stay zero).
async fn measure(pe: &Pe, gpu: &GpuPe, args: Args) -> Result<Figures> {
    let mut figures = Figures::default();
    if args.mode.normal() {
        measure_normal(pe, gpu, args, &mut figures).await?;
    }
    if args.mode.low_latency() {
        let (bf16, fp8) = (
            Sending {
                fp8: false,
                hook: false,
            },
            Sending {
                fp8: true,
                hook: false,
            },
        );
        let hooked = Sending {
            fp8: false,
            hook: true,
        };
        figures.ll = low_latency(pe, gpu, &args, bf16, Start::BackToBack).await?;
        figures.ll_fp8 = low_latency(pe, gpu, &args, fp8, Start::BackToBack).await?;
        figures.ll_together = low_latency(pe, gpu, &args, bf16, Start::Together).await?;
        figures.ll_fp8_together = low_latency(pe, gpu, &args, fp8, Start::Together).await?;
        figures.ll_hook_together = low_latency(pe, gpu, &args, hooked, Start::Together).await?;
        figures.ll_graph = low_latency_graph(pe, gpu, &args).await?;
        let ll_bytes = low_latency_rows(&args, pe.my_pe(), pe.n_pes()) * args.hidden * 2;
        figures.ll_bytes = ll_bytes as f64;
        figures.ll_copy_s = copy_engine_time(pe, gpu, ll_bytes, args.iters * 5).await?;
    }
    Ok(figures)
}

/// Normal mode's figures and their copy-engine bounds, into `figures`.
async fn measure_normal(pe: &Pe, gpu: &GpuPe, args: Args, figures: &mut Figures) -> Result<()> {
    let config = Config {
        blocks: args.blocks,
        ..Config::new(args.tokens, args.hidden, args.top_k, args.experts)
    };
    let mut buffer = Buffer::new(gpu, config).await?;
    let x: Vec<Bf16> = (0..args.tokens * args.hidden)
        .map(|i| Bf16::from_f32(((mix(i as u64) % 17) as f32 - 8.0) / 8.0))
        .collect();
    let x = upload(gpu, &x).await?;
    let topk_idx = upload(gpu, &routing(&args, pe.my_pe())).await?;
    let topk_weights = upload(
        gpu,
        &vec![1.0f32 / args.top_k as f32; args.tokens * args.top_k],
    )
    .await?;
    let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), args.tokens * args.hidden)?;
    let input = DispatchInput {
        x: Rows::Bf16(&x),
        topk_idx: &topk_idx,
        topk_weights: &topk_weights,
        tokens: args.tokens,
    };
    let (dispatch, combine, received) =
        normal_rounds(pe, &mut buffer, input, &mut out, args.iters).await?;
    // FP8 rows (the bytes of random e4m3 values; the kernels move them as they are).
    let fp8 = upload(
        gpu,
        &(0..args.tokens * args.hidden)
            .map(|i| mix(i as u64) as u8 & 0x77)
            .collect::<Vec<u8>>(),
    )
    .await?;
    let scales = upload(gpu, &vec![1.0f32; args.tokens * (args.hidden / 128)]).await?;
    let fp8_input = DispatchInput {
        x: Rows::Fp8 {
            x: &fp8,
            scales: &scales,
        },
        ..input
    };
    let (fp8_dispatch, _, _) =
        normal_rounds(pe, &mut buffer, fp8_input, &mut out, args.iters).await?;
    let bytes = received * args.hidden * std::mem::size_of::<Bf16>();
    let fp8_bytes = received * (args.hidden + args.hidden / 128 * 4);
    let copy = copy_engine_time(pe, gpu, bytes, args.iters).await?;
    let fp8_copy = copy_engine_time(pe, gpu, fp8_bytes, args.iters).await?;
    buffer.destroy().await?;
    figures.received_bytes = bytes as f64;
    figures.fp8_bytes = fp8_bytes as f64;
    figures.dispatch_s = dispatch;
    figures.combine_s = combine;
    figures.fp8_dispatch_s = fp8_dispatch;
    figures.copy_s = copy;
    figures.fp8_copy_s = fp8_copy;
    Ok(())
}

/// Seconds per dispatch and per in-place combine of `input` (each call started on every PE
/// together), after two rounds of warm-up; and the rows received.
async fn normal_rounds(
    pe: &Pe,
    buffer: &mut Buffer,
    input: DispatchInput<'_>,
    out: &mut DeviceBuffer<Bf16>,
    iters: usize,
) -> Result<(f64, f64, usize)> {
    let (mut dispatch, mut combine) = (Duration::ZERO, Duration::ZERO);
    let mut received = 0;
    for i in 0..iters + 2 {
        pe.barrier_all().await?;
        let t0 = Instant::now();
        let handle = buffer.dispatch(input).await?.into_handle();
        let t1 = Instant::now();
        pe.barrier_all().await?;
        let t2 = Instant::now();
        buffer.combine_in_place(&handle, out).await?;
        if i >= 2 {
            dispatch += t1 - t0;
            combine += t2.elapsed();
        }
        received = handle.received();
    }
    let per = |d: Duration| d.as_secs_f64() / iters as f64;
    Ok((per(dispatch), per(combine), received))
}

/// Seconds per `cuMemcpyAsync` of `bytes` device to device, every PE copying at once.
async fn copy_engine_time(pe: &Pe, gpu: &GpuPe, bytes: usize, iters: usize) -> Result<f64> {
    let src = DeviceBuffer::<u8>::new(gpu.context(), bytes.max(1))?;
    let mut dst = DeviceBuffer::<u8>::new(gpu.context(), bytes.max(1))?;
    let mut total = Duration::ZERO;
    for i in 0..iters + 2 {
        pe.barrier_all().await?;
        let t0 = Instant::now();
        gpu.copy_local(&mut dst, &src).await?;
        if i >= 2 {
            total += t0.elapsed();
        }
    }
    Ok(total.as_secs_f64() / iters as f64)
}

fn report(args: &Args, figures: &[Figures], mps: bool) {
    let (mode, tokens) = match args.mode {
        Mode::LowLatency => ("low-latency mode", args.ll_tokens),
        _ => ("normal mode", args.tokens),
    };
    println!(
        "MoE {mode}: {} PEs, {tokens} tokens/PE, hidden {}, top-{} of {} experts; MPS: {mps}",
        figures.len(),
        args.hidden,
        args.top_k,
        args.experts,
    );
    println!("| figure | per-PE mean | vs copy-engine bound |");
    println!("|---|---|---|");
    let normal = match args.mode.normal() {
        true => report_normal(figures).to_vec(),
        false => Vec::new(),
    };
    println!("| DeepEP H800 (published, intranode 8 EP, NVLink) | dispatch 153 GB/s, combine 158 GB/s | |");
    println!("| DeepEP H800 (published, low latency 8 EP) | dispatch 77 µs, combine 114 µs | |");
    if args.mode.low_latency() {
        report_low_latency(args, figures);
    }
    for (name, value, unit) in normal {
        println!("FIGURE {name} {value:.2} {unit}");
    }
}

/// The normal mode's lines of the report; returns its `FIGURE` lines' names, values and units.
fn report_normal(figures: &[Figures]) -> [(&'static str, f64, &'static str); 7] {
    let n = figures.len() as f64;
    let mean = |f: fn(&Figures) -> f64| figures.iter().map(f).sum::<f64>() / n;
    let gbps = |bytes: f64, s: f64| bytes / s / 1e9;
    let dispatch_bw = mean(|f| f.received_bytes / f.dispatch_s / 1e9);
    let combine_bw = mean(|f| f.received_bytes / f.combine_s / 1e9);
    let copy_bw = mean(|f| f.received_bytes / f.copy_s / 1e9);
    let min_dispatch = figures
        .iter()
        .map(|f| gbps(f.received_bytes, f.dispatch_s))
        .fold(f64::MAX, f64::min);
    println!(
        "| received bytes per PE | {:.1} MB | |",
        mean(|f| f.received_bytes) / 1e6
    );
    println!(
        "| dispatch | {:.0} µs, {dispatch_bw:.1} GB/s (slowest PE {min_dispatch:.1}) | {:.2}× |",
        mean(|f| f.dispatch_s) * 1e6,
        dispatch_bw / copy_bw
    );
    println!(
        "| combine (in place) | {:.0} µs, {combine_bw:.1} GB/s | {:.2}× |",
        mean(|f| f.combine_s) * 1e6,
        combine_bw / copy_bw
    );
    println!("| copy-engine bound (cuMemcpyAsync D2D, same bytes, all PEs at once) | {:.0} µs, {copy_bw:.1} GB/s | 1.00× |", mean(|f| f.copy_s) * 1e6);
    let fp8_bw = mean(|f| f.fp8_bytes / f.fp8_dispatch_s / 1e9);
    let fp8_copy_bw = mean(|f| f.fp8_bytes / f.fp8_copy_s / 1e9);
    println!(
        "| dispatch, FP8 rows + scales ({:.1} MB per PE) | {:.0} µs, {fp8_bw:.1} GB/s | {:.2}× of its copy-engine bound ({:.0} µs, {fp8_copy_bw:.1} GB/s) |",
        mean(|f| f.fp8_bytes) / 1e6,
        mean(|f| f.fp8_dispatch_s) * 1e6,
        fp8_bw / fp8_copy_bw,
        mean(|f| f.fp8_copy_s) * 1e6
    );
    [
        ("ep_normal_dispatch_bw", dispatch_bw, "GB/s"),
        ("ep_normal_combine_bw", combine_bw, "GB/s"),
        ("ep_normal_copy_engine_bw", copy_bw, "GB/s"),
        ("ep_normal_fp8_dispatch_bw", fp8_bw, "GB/s"),
        ("ep_normal_fp8_copy_engine_bw", fp8_copy_bw, "GB/s"),
        ("ep_normal_dispatch_us", mean(|f| f.dispatch_s) * 1e6, "us"),
        ("ep_normal_combine_us", mean(|f| f.combine_s) * 1e6, "us"),
    ]
}

fn main() -> std::process::ExitCode {
    ferroshmem::observability::init_tracing();
    if let Err(e) = ferroshmem::gpu::detect() {
        println!("moe: nothing to measure, {e}");
        return std::process::ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("moe: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Launched (`ferroshmem run -n N`), the job has the launcher's PEs; alone, `--pes`.
    let pes = match ferroshmem::launch_env::LaunchEnv::detect() {
        Ok(launched) => launched.map_or(args.pes, |env| env.size),
        Err(e) => {
            eprintln!("moe: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if std::env::var_os("FERROSHMEM_SYMMETRIC_SIZE").is_none() {
        let config = Config::new(args.tokens, args.hidden, args.top_k, args.experts);
        let ll = Config::low_latency(args.ll_tokens, args.hidden, args.top_k, args.experts);
        let need = [config, ll]
            .iter()
            .map(|c| Buffer::bytes_needed(c, pes, false).unwrap_or(1 << 30))
            .max()
            .unwrap_or(1 << 30);
        std::env::set_var(
            "FERROSHMEM_SYMMETRIC_SIZE",
            format!("{}M", (need >> 20) + 64),
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let outcome = rt.block_on(async move {
        ferroshmem::run(pes, move |pe| bench(pe, args))
            .await?
            .into_iter()
            .collect::<Result<Vec<Gathered>>>()
    });
    match outcome {
        Ok(gathered) => {
            // PE 0's process reports; the others have nothing to say.
            if let Some((figures, mps)) = gathered.into_iter().flatten().next() {
                report(&args, &figures, mps);
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("moe: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
