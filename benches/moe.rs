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
//! barrier. Then the same BF16 round captured into a CUDA graph and replayed (one
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

use ferroshmem::ep::{Bf16, Buffer, Config, DispatchInput, LowLatencyInput, LowLatencyRound, Rows};
use ferroshmem::gpu::cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};
use ferroshmem::gpu::{DeviceBuffer, GpuPe, GpuSharing, HostBuffer};
use ferroshmem::{Error, Pe, Result};

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
    ll_gated: LowLatencyFigures,
    ll_fp8_gated: LowLatencyFigures,
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
        figures.ll = low_latency(pe, gpu, &args, false, Start::BackToBack).await?;
        figures.ll_fp8 = low_latency(pe, gpu, &args, true, Start::BackToBack).await?;
        figures.ll_gated = low_latency(pe, gpu, &args, false, Start::Together).await?;
        figures.ll_fp8_gated = low_latency(pe, gpu, &args, true, Start::Together).await?;
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

/// How the calls of a low-latency measurement start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// One host barrier before them all, then each call queued once the previous one is
    /// awaited: the PEs' launches, which share the GPU here, go out as their hosts get to them.
    BackToBack,
    /// Each call queued behind a barrier of every PE on its stream, so that the PEs' kernels
    /// start together on the GPU, as those of PEs on separate GPUs (whose launches do not
    /// queue behind each other's) would; its stream times start after the barrier.
    Together,
}

/// Seconds per low-latency dispatch (send and receive; `fp8`: casting rows to FP8) and combine
/// of `ll_tokens` tokens, each awaited, started as `start` says.
async fn low_latency(
    pe: &Pe,
    gpu: &GpuPe,
    args: &Args,
    fp8: bool,
    start: Start,
) -> Result<LowLatencyFigures> {
    let LowLatencyBench {
        mut buffer,
        x,
        topk_idx,
        topk_weights,
        mut out,
    } = LowLatencyBench::new(pe, gpu, args).await?;
    let tokens = args.ll_tokens;
    let input = LowLatencyInput {
        fp8,
        x: &x,
        topk_idx: &topk_idx,
        tokens,
    };
    let mut figures = LowLatencyFigures::default();
    let events = [event(gpu)?, event(gpu)?, event(gpu)?, event(gpu)?];
    pe.barrier_all().await?;
    for i in 0..args.iters * 5 + 5 {
        let t0 = Instant::now();
        if start == Start::Together {
            gpu.barrier_all_on_stream(buffer.stream())?;
        }
        record(&events[0], buffer.stream())?;
        let mut sent = buffer.low_latency_dispatch(input)?;
        sent.queue_receive()?;
        record(&events[1], sent.stream())?;
        let handle = sent.receive().await?.handle();
        let t1 = Instant::now();
        if start == Start::Together {
            gpu.barrier_all_on_stream(buffer.stream())?;
        }
        record(&events[2], buffer.stream())?;
        let combining = buffer.queue_low_latency_combine(
            &handle,
            None,
            (&topk_idx, &topk_weights),
            &mut out,
        )?;
        record(&events[3], combining.stream())?;
        combining.finish().await?;
        if i >= 5 {
            figures.dispatch_s += (t1 - t0).as_secs_f64();
            figures.combine_s += t1.elapsed().as_secs_f64();
            figures.dispatch_stream_s += elapsed_s(&events[0], &events[1])?;
            figures.combine_stream_s += elapsed_s(&events[2], &events[3])?;
        }
    }
    buffer.destroy().await?;
    Ok(figures.per_call(args.iters * 5))
}

/// A BF16 low-latency round (dispatch, the receive hook, combine of the received rows as
/// they are) captured into a CUDA graph and replayed, as a decoding loop would: one launch
/// per round. Events around the replay and one captured between the receive hook and the
/// combine split the stream's time into dispatch and combine.
async fn low_latency_graph(pe: &Pe, gpu: &GpuPe, args: &Args) -> Result<LowLatencyFigures> {
    let LowLatencyBench {
        mut buffer,
        mut x,
        mut topk_idx,
        mut topk_weights,
        mut out,
    } = LowLatencyBench::new(pe, gpu, args).await?;
    let tokens = args.ll_tokens;
    let events = [event(gpu)?, event(gpu)?, event(gpu)?];
    let round = LowLatencyRound {
        x: &mut x,
        topk_idx: &mut topk_idx,
        topk_weights: &mut topk_weights,
        tokens,
        fp8: false,
        y: None,
        out: &mut out,
    };
    let mut graph = buffer.capture_low_latency(round, |received| {
        gpu.record_event(&events[1], received.stream())
    })?;
    let mut figures = LowLatencyFigures::default();
    pe.barrier_all().await?;
    for i in 0..args.iters * 5 + 5 {
        let t0 = Instant::now();
        record(&events[0], graph.stream())?;
        let replay = graph.queue_replay()?;
        record(&events[2], replay.stream())?;
        replay.finish().await?;
        if i >= 5 {
            figures.dispatch_s += t0.elapsed().as_secs_f64();
            figures.dispatch_stream_s += elapsed_s(&events[0], &events[1])?;
            figures.combine_stream_s += elapsed_s(&events[1], &events[2])?;
        }
    }
    drop(graph);
    buffer.destroy().await?;
    Ok(figures.per_call(args.iters * 5))
}

/// A low-latency buffer with one round's inputs (`ll_tokens` tokens of random BF16 rows,
/// this PE's routing, equal weights) and its output, on this PE's GPU.
struct LowLatencyBench {
    buffer: Buffer,
    x: DeviceBuffer<Bf16>,
    topk_idx: DeviceBuffer<i64>,
    topk_weights: DeviceBuffer<f32>,
    out: DeviceBuffer<Bf16>,
}

impl LowLatencyBench {
    async fn new(pe: &Pe, gpu: &GpuPe, args: &Args) -> Result<LowLatencyBench> {
        let tokens = args.ll_tokens;
        let config = Config {
            blocks: args.blocks,
            ..Config::low_latency(tokens, args.hidden, args.top_k, args.experts)
        };
        let buffer = Buffer::new(gpu, config).await?;
        let x: Vec<Bf16> = (0..tokens * args.hidden)
            .map(|i| Bf16::from_f32(((mix(i as u64) % 17) as f32 - 8.0) / 8.0))
            .collect();
        let ll_args = Args { tokens, ..*args };
        let weights = vec![1.0f32 / args.top_k as f32; tokens * args.top_k];
        Ok(LowLatencyBench {
            buffer,
            x: upload(gpu, &x).await?,
            topk_idx: upload(gpu, &routing(&ll_args, pe.my_pe())).await?,
            topk_weights: upload(gpu, &weights).await?,
            out: DeviceBuffer::new(gpu.context(), tokens * args.hidden)?,
        })
    }
}

/// One PE's low-latency figures, seconds per call: awaited by the host, and between events
/// on the stream around the queued kernels (no host wait).
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct LowLatencyFigures {
    dispatch_s: f64,
    combine_s: f64,
    dispatch_stream_s: f64,
    combine_stream_s: f64,
}

impl LowLatencyFigures {
    /// These sums of `calls` calls' times, per call.
    fn per_call(self, calls: usize) -> LowLatencyFigures {
        let calls = calls as f64;
        LowLatencyFigures {
            dispatch_s: self.dispatch_s / calls,
            combine_s: self.combine_s / calls,
            dispatch_stream_s: self.dispatch_stream_s / calls,
            combine_stream_s: self.combine_stream_s / calls,
        }
    }
}

fn event(gpu: &GpuPe) -> Result<CudaEvent> {
    gpu.context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| Error::cuda(format!("timing event: {e}")))
}

fn record(event: &CudaEvent, stream: &CudaStream) -> Result<()> {
    event
        .record(stream)
        .map_err(|e| Error::cuda(format!("recording an event: {e}")))
}

/// Seconds between two recorded events whose stream has completed them.
fn elapsed_s(a: &CudaEvent, b: &CudaEvent) -> Result<f64> {
    a.elapsed_ms(b)
        .map(|ms| f64::from(ms) / 1e3)
        .map_err(|e| Error::cuda(format!("elapsed time: {e}")))
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

/// The rows a low-latency dispatch brings PE `me` of `pes`: every PE's (token, slot) pairs
/// whose expert lives on `me`.
fn low_latency_rows(args: &Args, me: usize, pes: usize) -> usize {
    let ll_args = Args {
        tokens: args.ll_tokens,
        ..*args
    };
    let local = args.experts / pes;
    (0..pes)
        .flat_map(|source| routing(&ll_args, source))
        .filter(|&e| e >= 0 && e as usize / local == me)
        .count()
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

/// The low-latency lines of the report.
fn report_low_latency(args: &Args, figures: &[Figures]) {
    let mean = |f: fn(&Figures) -> f64| figures.iter().map(f).sum::<f64>() / figures.len() as f64;
    let us = |f: fn(&Figures) -> f64| mean(f) * 1e6;
    let copy = us(|f| f.ll_copy_s);
    println!(
        "| low latency, {} tokens/PE, BF16: dispatch (send + receive hook) | awaited {:.1} µs, on the stream {:.1} µs | {:.2}× awaited |",
        args.ll_tokens,
        us(|f| f.ll.dispatch_s),
        us(|f| f.ll.dispatch_stream_s),
        copy / us(|f| f.ll.dispatch_s)
    );
    println!(
        "| low latency: dispatch casting to FP8 | awaited {:.1} µs, on the stream {:.1} µs | |",
        us(|f| f.ll_fp8.dispatch_s),
        us(|f| f.ll_fp8.dispatch_stream_s)
    );
    println!(
        "| low latency: combine (BF16, weighted) | awaited {:.1} µs, on the stream {:.1} µs | {:.2}× awaited |",
        us(|f| f.ll.combine_s),
        us(|f| f.ll.combine_stream_s),
        copy / us(|f| f.ll.combine_s)
    );
    println!(
        "| low latency, each call behind a barrier on the stream (PEs start together): BF16 dispatch, FP8 dispatch, combine | on the stream {:.1}, {:.1}, {:.1} µs | |",
        us(|f| f.ll_gated.dispatch_stream_s),
        us(|f| f.ll_fp8_gated.dispatch_stream_s),
        us(|f| f.ll_gated.combine_stream_s)
    );
    println!(
        "| low latency copy-engine bound (cuMemcpyAsync D2D of the BF16 rows received, {:.1} MB per PE, all PEs at once, awaited) | {copy:.1} µs | 1.00× |",
        mean(|f| f.ll_bytes) / 1e6
    );
    println!(
        "| low latency, BF16 round replayed from a CUDA graph (one launch per round) | dispatch on the stream {:.1} µs, combine on the stream {:.1} µs; the round awaited {:.1} µs | |",
        us(|f| f.ll_graph.dispatch_stream_s),
        us(|f| f.ll_graph.combine_stream_s),
        us(|f| f.ll_graph.dispatch_s)
    );
    let lines = [
        ("ep_ll_dispatch_us", us(|f| f.ll.dispatch_s)),
        ("ep_ll_copy_engine_us", copy),
        (
            "ep_ll_graph_dispatch_stream_us",
            us(|f| f.ll_graph.dispatch_stream_s),
        ),
        (
            "ep_ll_graph_combine_stream_us",
            us(|f| f.ll_graph.combine_stream_s),
        ),
        ("ep_ll_dispatch_stream_us", us(|f| f.ll.dispatch_stream_s)),
        (
            "ep_ll_fp8_dispatch_stream_us",
            us(|f| f.ll_fp8.dispatch_stream_s),
        ),
        ("ep_ll_combine_us", us(|f| f.ll.combine_s)),
        ("ep_ll_combine_stream_us", us(|f| f.ll.combine_stream_s)),
        (
            "ep_ll_together_dispatch_stream_us",
            us(|f| f.ll_gated.dispatch_stream_s),
        ),
        (
            "ep_ll_together_fp8_dispatch_stream_us",
            us(|f| f.ll_fp8_gated.dispatch_stream_s),
        ),
        (
            "ep_ll_together_combine_stream_us",
            us(|f| f.ll_gated.combine_stream_s),
        ),
    ];
    for (name, value) in lines {
        println!("FIGURE {name} {value:.1} us");
    }
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
