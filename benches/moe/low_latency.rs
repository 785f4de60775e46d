//! The benchmark's low-latency mode: the calls timed back to back, started together behind a
//! barrier on the stream, and replayed from a CUDA graph, and their lines of the report.

use std::time::Instant;

use ferroshmem::ep::{Buffer, Config, KernelClocks, LowLatencyInput, LowLatencyRound};
use ferroshmem::gpu::cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};
use ferroshmem::gpu::{DeviceBuffer, GpuPe};
use ferroshmem::{Error, Pe, Result};

use super::{mix, routing, upload, Args, Bf16, Figures};

/// How the calls of a low-latency measurement start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// One host barrier before them all, then each call queued once the previous one is
    /// awaited: the PEs' launches, which share the GPU here, go out as their hosts get to them.
    BackToBack,
    /// Each call queued behind a barrier of every PE on its stream, so that the PEs' kernels
    /// start together on the GPU, as those of PEs on separate GPUs (whose launches do not
    /// queue behind each other's) would; its stream times start after the barrier.
    Together,
}

/// How a measured low-latency dispatch sends: casting rows to FP8 or not, receiving by a hook
/// of its own or in the send's kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sending {
    pub fp8: bool,
    pub hook: bool,
}

/// Seconds per low-latency dispatch (send and receive, as `sending` says) and combine of
/// `ll_tokens` tokens, each awaited, started as `start` says.
pub(crate) async fn low_latency(
    pe: &Pe,
    gpu: &GpuPe,
    args: &Args,
    Sending { fp8, hook }: Sending,
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
        hook,
    };
    let mut figures = LowLatencyFigures::default();
    let events = [event(gpu)?, event(gpu)?, event(gpu)?, event(gpu)?];
    // Kernel clocks read after each call (a wait for the stream) only where a barrier starts
    // the next: elsewhere the wait would add to the stagger between the PEs' calls.
    let clocked = start == Start::Together;
    buffer.clock_kernels(clocked)?;
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
        let elapsed = t1.elapsed();
        let clocks = match clocked {
            true => buffer.take_kernel_clocks()?,
            false => KernelClocks::default(),
        };
        if i >= 5 {
            figures.dispatch_s += (t1 - t0).as_secs_f64();
            figures.combine_s += elapsed.as_secs_f64();
            figures.dispatch_stream_s += elapsed_s(&events[0], &events[1])?;
            figures.combine_stream_s += elapsed_s(&events[2], &events[3])?;
            figures.add_kernel_times(&clocks);
        }
    }
    buffer.destroy().await?;
    Ok(figures.per_call(args.iters * 5))
}

/// A BF16 low-latency round (dispatch, the receive hook, combine of the received rows as
/// they are) captured into a CUDA graph and replayed, as a decoding loop would: one launch
/// per round. Events around the replay and one captured between the receive hook and the
/// combine split the stream's time into dispatch and combine.
pub(crate) async fn low_latency_graph(
    pe: &Pe,
    gpu: &GpuPe,
    args: &Args,
) -> Result<LowLatencyFigures> {
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
pub(crate) struct LowLatencyFigures {
    dispatch_s: f64,
    combine_s: f64,
    dispatch_stream_s: f64,
    combine_stream_s: f64,
    /// The kernels' own time on the GPU (see `ep::KernelClocks`).
    dispatch_kernel_s: f64,
    combine_kernel_s: f64,
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
            dispatch_kernel_s: self.dispatch_kernel_s / calls,
            combine_kernel_s: self.combine_kernel_s / calls,
        }
    }

    /// Adds one call's kernel times.
    fn add_kernel_times(&mut self, clocks: &KernelClocks) {
        let s = |ns: Option<u64>| ns.unwrap_or(0) as f64 * 1e-9;
        self.dispatch_kernel_s += s(clocks.dispatch_ns());
        self.combine_kernel_s += s(clocks.combine_ns());
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

/// The rows a low-latency dispatch brings PE `me` of `pes`: every PE's (token, slot) pairs
/// whose expert lives on `me`.
pub(crate) fn low_latency_rows(args: &Args, me: usize, pes: usize) -> usize {
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

/// A report line of a call's microseconds awaited and on the stream, with its ratio to the
/// copy-engine bound `bound` (µs) where one applies.
fn print_awaited(what: &str, (awaited, stream): (f64, f64), bound: Option<f64>) {
    let ratio = bound.map_or(String::new(), |b| format!("{:.2}× awaited", b / awaited));
    println!("| {what} | awaited {awaited:.1} µs, on the stream {stream:.1} µs | {ratio} |");
}

/// The low-latency lines of the report.
pub(crate) fn report_low_latency(args: &Args, figures: &[Figures]) {
    let mean = |f: fn(&Figures) -> f64| figures.iter().map(f).sum::<f64>() / figures.len() as f64;
    let us = |f: fn(&Figures) -> f64| mean(f) * 1e6;
    let copy = us(|f| f.ll_copy_s);
    let dispatch = format!(
        "low latency, {} tokens/PE, BF16: dispatch (send and receive in one kernel)",
        args.ll_tokens
    );
    let dispatch_times = (us(|f| f.ll.dispatch_s), us(|f| f.ll.dispatch_stream_s));
    print_awaited(&dispatch, dispatch_times, Some(copy));
    let fp8_times = (
        us(|f| f.ll_fp8.dispatch_s),
        us(|f| f.ll_fp8.dispatch_stream_s),
    );
    print_awaited("low latency: dispatch casting to FP8", fp8_times, None);
    let combine_times = (us(|f| f.ll.combine_s), us(|f| f.ll.combine_stream_s));
    let config = Config::low_latency(args.ll_tokens, args.hidden, args.top_k, args.experts);
    let rows = match config.pulls() {
        true => "each PE reads its rows where they lie",
        false => "the rows sent back",
    };
    print_awaited(
        &format!("low latency: combine (BF16, weighted; in place: {rows})"),
        combine_times,
        Some(copy),
    );
    println!(
        "| low latency, each call behind a barrier on the stream (PEs start together): BF16 dispatch, FP8 dispatch, combine | on the stream {:.1}, {:.1}, {:.1} µs | |",
        us(|f| f.ll_together.dispatch_stream_s),
        us(|f| f.ll_fp8_together.dispatch_stream_s),
        us(|f| f.ll_together.combine_stream_s)
    );
    println!(
        "| low latency, started together: BF16 dispatch with a receive hook of its own (a kernel more) | on the stream {:.1} µs | |",
        us(|f| f.ll_hook_together.dispatch_stream_s)
    );
    println!(
        "| low latency, started together, kernel times (the GPU's timer in the kernels, first start to last end of each call's kernels, as DeepEP's profiler figures are kernel times): BF16 dispatch, FP8 dispatch, combine | {:.1}, {:.1}, {:.1} µs | |",
        us(|f| f.ll_together.dispatch_kernel_s),
        us(|f| f.ll_fp8_together.dispatch_kernel_s),
        us(|f| f.ll_together.combine_kernel_s)
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
            us(|f| f.ll_together.dispatch_stream_s),
        ),
        (
            "ep_ll_together_fp8_dispatch_stream_us",
            us(|f| f.ll_fp8_together.dispatch_stream_s),
        ),
        (
            "ep_ll_together_combine_stream_us",
            us(|f| f.ll_together.combine_stream_s),
        ),
        (
            "ep_ll_together_hook_dispatch_stream_us",
            us(|f| f.ll_hook_together.dispatch_stream_s),
        ),
        (
            "ep_ll_together_dispatch_kernel_us",
            us(|f| f.ll_together.dispatch_kernel_s),
        ),
        (
            "ep_ll_together_fp8_dispatch_kernel_us",
            us(|f| f.ll_fp8_together.dispatch_kernel_s),
        ),
        (
            "ep_ll_together_combine_kernel_us",
            us(|f| f.ll_together.combine_kernel_s),
        ),
    ];
    for (name, value) in lines {
        println!("FIGURE {name} {value:.1} us");
    }
}
