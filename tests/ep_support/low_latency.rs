//! The low-latency part of the ep tests: experts that scale rows by their number, on the host
//! and on the GPU, and one checked low-latency dispatch-and-combine round.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use ferroshmem::ep::reference::{self, PeInput};
use ferroshmem::ep::{
    fp8, Bf16, Buffer, CapturedReceive, Config, LowLatencyCombine, LowLatencyDispatch,
    LowLatencyInput, LowLatencyRound,
};
use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuModule, GpuPe, LaunchDims};
use ferroshmem::{Error, Result};

use crate::ep_support::{download, upload, Input, Routing, Shape};

/// Expert `e` scales a row by `e + 1` (rounded to bf16).
fn expert(e: usize, row: &[Bf16]) -> Vec<Bf16> {
    row.iter()
        .map(|v| Bf16::from_f32(v.to_f32() * (e + 1) as f32))
        .collect()
}

const SCALE_KERNEL: &str = r#"
__device__ unsigned short to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) | 0x40u) & 0xffffu);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
extern "C" __global__ void scale_rows(unsigned short* rows, long long elements, float factor) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < elements; i += (long long)gridDim.x * blockDim.x)
        rows[i] = to_bf16(__fmul_rn(__uint_as_float(((unsigned)rows[i]) << 16), factor));
}
// As scale_rows over local expert `le`'s rows, their count read on the GPU (a graph's replay's).
extern "C" __global__ void scale_counted_rows(unsigned short* packed, const int* counts, int le, long long stride,
                                              int hidden, float factor) {
    scale_rows(packed + le * stride * hidden, (long long)counts[le] * hidden, factor);
}
"#;

pub fn config(shape: &Shape) -> Config {
    Config::low_latency(shape.max_tokens, shape.hidden, shape.top_k, shape.experts)
}

/// As [`config`], combines in place going back as `combine` says.
pub fn config_combining(shape: &Shape, combine: LowLatencyCombine) -> Config {
    Config {
        low_latency_combine: combine,
        ..config(shape)
    }
}

/// Checks what each local expert received against the reference.
async fn check_received(
    d: &LowLatencyDispatch<'_>,
    want: &[reference::ExpertRows],
    shape: &Shape,
    what: &str,
) -> Result<()> {
    for (le, want) in want.iter().enumerate() {
        let same = |ok: bool, part: &str| match ok {
            true => Ok(()),
            false => Err(Error::InvalidArgument(format!(
                "{what}, local expert {le}: {part} differs"
            ))),
        };
        same(d.recv_count()[le] == want.src_pe.len(), "the row count")?;
        for (s, &rows) in want.rows_from.iter().enumerate() {
            same(d.rows_from(le, s) == Some(rows), "the rows per source")?;
        }
        let (pe, slot) = d.recv_src(le).await?;
        // Order the GPU's rows by (source, slot), as the reference has them.
        let mut order: Vec<usize> = (0..pe.len()).collect();
        order.sort_by_key(|&i| (pe[i], slot[i]));
        same(
            order.iter().map(|&i| pe[i]).collect::<Vec<_>>() == want.src_pe,
            "the sources",
        )?;
        same(
            order.iter().map(|&i| slot[i]).collect::<Vec<_>>() == want.src_slot,
            "the slots",
        )?;
        if !d.is_fp8() {
            let x = d.recv_x(le).await?;
            let h = shape.hidden;
            let rows: Vec<Bf16> = order
                .iter()
                .flat_map(|&i| x[i * h..(i + 1) * h].to_vec())
                .collect();
            same(rows == want.x, "the rows")?;
        }
    }
    Ok(())
}

/// Runs the experts on the GPU, in place, on the buffer's stream.
fn experts_in_place(gpu: &GpuPe, d: &LowLatencyDispatch<'_>, shape: &Shape) -> Result<()> {
    let module = gpu.compile(SCALE_KERNEL, &CompileOptions::default())?;
    let first = gpu.my_pe() * shape.experts / shape.n;
    let row_bytes = (shape.hidden * 2) as u64;
    for (le, &count) in d.recv_count().iter().enumerate() {
        let rows = d.recv_x_ptr() + (le * d.rows_per_expert()) as u64 * row_bytes;
        let args = [
            rows.into(),
            ((count * shape.hidden) as i64).into(),
            ((first + le + 1) as f32).into(),
        ];
        // SAFETY: scale_rows takes (u16*, long long, float) as passed: the expert's packed rows,
        // in the buffer's region, which the buffer keeps until its stream has run the kernel.
        unsafe { module.launch("scale_rows", LaunchDims::linear(16, 256), d.stream(), &args)? };
    }
    Ok(())
}

/// The experts' results as a device buffer of the packed layout, made on the host from each
/// row's source row (`inputs`: every PE's).
async fn experts_in_a_buffer(
    gpu: &GpuPe,
    d: &LowLatencyDispatch<'_>,
    shape: &Shape,
    inputs: &[Input],
) -> Result<DeviceBuffer<Bf16>> {
    let first = gpu.my_pe() * shape.experts / shape.n;
    let (h, stride) = (shape.hidden, d.rows_per_expert() * shape.hidden);
    let mut y = vec![Bf16::ZERO; d.recv_count().len() * stride];
    for le in 0..d.recv_count().len() {
        let (pe, slot) = d.recv_src(le).await?;
        for (i, (&pe, &slot)) in pe.iter().zip(&slot).enumerate() {
            let t = slot as usize / shape.top_k;
            let scaled = expert(first + le, &inputs[pe as usize].x[t * h..(t + 1) * h]);
            y[le * stride + i * h..le * stride + (i + 1) * h].copy_from_slice(&scaled);
        }
    }
    upload(gpu, &y).await
}

/// Checks an FP8 dispatch: each row's codes and scales are its source row's, cast on the host.
async fn check_received_fp8(
    d: &LowLatencyDispatch<'_>,
    shape: &Shape,
    inputs: &[Input],
    what: &str,
) -> Result<()> {
    let (h, g) = (shape.hidden, shape.hidden / fp8::GROUP);
    for le in 0..d.recv_count().len() {
        let (codes, scales) = d.recv_x_fp8(le).await?;
        let (pe, slot) = d.recv_src(le).await?;
        for (i, (&pe, &slot)) in pe.iter().zip(&slot).enumerate() {
            let t = slot as usize / shape.top_k;
            let (want_codes, want_scales) =
                fp8::quantize(&inputs[pe as usize].x[t * h..(t + 1) * h]);
            if codes[i * h..(i + 1) * h] != want_codes[..]
                || scales[i * g..(i + 1) * g] != want_scales[..]
            {
                return Err(Error::InvalidArgument(format!(
                    "{what}, local expert {le}: FP8 row {i} differs from its source row cast on the host"
                )));
            }
        }
    }
    Ok(())
}

/// One low-latency round of every PE's inputs, checked: seeds 0 mod 3 run every PE's experts
/// in place (combine reads rows where they lie), 1 mod 3 send results from a device buffer,
/// 2 mod 3 mix the two (even PEs in place); `fp8` casts the rows on the way (then results come
/// from a buffer). Half the PEs of a round (which half alternates with the seed) receive by a
/// hook of its own, the others in the send's kernel.
pub async fn round(
    gpu: &GpuPe,
    buffer: &mut Buffer,
    shape: &Shape,
    (routing, seed, fp8): (Routing, u64, bool),
) -> Result<()> {
    let me = gpu.my_pe();
    let inputs: Vec<Input> = (0..shape.n)
        .map(|p| shape.input(p, routing, seed))
        .collect();
    let pe_inputs: Vec<PeInput<'_>> = inputs.iter().map(Input::as_pe_input).collect();
    let want =
        reference::low_latency_dispatch(&pe_inputs, shape.hidden, shape.top_k, shape.experts)?;
    let mine = &inputs[me];
    let x = upload(gpu, &mine.x).await?;
    let topk_idx = upload(gpu, &mine.topk_idx).await?;
    let topk_weights = upload(gpu, &mine.topk_weights).await?;
    let sent = buffer.low_latency_dispatch(LowLatencyInput {
        x: &x,
        topk_idx: &topk_idx,
        tokens: mine.tokens,
        fp8,
        hook: (seed + me as u64) % 2 == 0,
    })?;
    let d = sent.receive().await?;
    let what = format!(
        "PE {me} of {}, {routing:?}, seed {seed}, FP8 {fp8}",
        shape.n
    );
    check_received(&d, &want[me], shape, &what).await?;
    if fp8 {
        check_received_fp8(&d, shape, &inputs, &what).await?;
    }
    let handle = d.handle();
    let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), (mine.tokens * shape.hidden).max(1))?;
    let in_place = match seed % 3 {
        0 => true,
        1 => false,
        _ => me % 2 == 0,
    };
    if in_place && !fp8 {
        experts_in_place(gpu, &d, shape)?;
        buffer
            .low_latency_combine(&handle, None, (&topk_idx, &topk_weights), &mut out)
            .await?;
    } else {
        let y = experts_in_a_buffer(gpu, &d, shape, &inputs).await?;
        buffer
            .low_latency_combine(&handle, Some(&y), (&topk_idx, &topk_weights), &mut out)
            .await?;
    }
    let got = download(gpu, &out, mine.tokens * shape.hidden).await?;
    compare_combined(&got, mine, shape, &what)
}

/// The first `tokens` tokens of `input`.
fn first_tokens(mut input: Input, tokens: usize) -> Input {
    let tokens = tokens.min(input.tokens);
    let k = input.topk_idx.len() / input.tokens.max(1);
    let hidden = input.x.len() / input.tokens.max(1);
    input.x.truncate(tokens * hidden);
    input.topk_idx.truncate(tokens * k);
    input.topk_weights.truncate(tokens * k);
    Input { tokens, ..input }
}

/// Rounds one after another with nothing between a combine and the next dispatch (inputs
/// uploaded first, every output checked at the end), experts in place, one PE dispatching
/// every token and the others one each, PE 0 in even rounds, PE 1 in odd ones: where
/// combines pull, the heavy PE's reduce reads long after the others' have ended, and PE 1's
/// next dispatch, had it written the area of packed rows the previous one did, would
/// overwrite the rows it still reads (each dispatch's rows must lie in the other area: checked
/// too, as whether the overwrite shows in the values depends on timing).
pub async fn back_to_back_rounds(
    gpu: &GpuPe,
    buffer: &mut Buffer,
    shape: &Shape,
    rounds: u64,
) -> Result<()> {
    let me = gpu.my_pe();
    let mut staged = Vec::new();
    for seed in 0..rounds {
        let all = shape.input(me, Routing::Random, 500 + seed);
        let heavy = (seed % 2) as usize;
        let mine = if me == heavy {
            all
        } else {
            first_tokens(all, 1)
        };
        let x = upload(gpu, &mine.x).await?;
        let topk_idx = upload(gpu, &mine.topk_idx).await?;
        let topk_weights = upload(gpu, &mine.topk_weights).await?;
        let out = DeviceBuffer::<Bf16>::new(gpu.context(), (mine.tokens * shape.hidden).max(1))?;
        staged.push((mine, x, topk_idx, topk_weights, out));
    }
    let pulls = buffer.config().pulls();
    let mut last_rows = None;
    for (mine, x, topk_idx, topk_weights, out) in &mut staged {
        let sent = buffer.low_latency_dispatch(LowLatencyInput {
            x,
            topk_idx,
            tokens: mine.tokens,
            fp8: false,
            hook: false,
        })?;
        let d = sent.receive().await?;
        if pulls && last_rows == Some(d.recv_x_ptr()) {
            return Err(Error::InvalidArgument(format!(
                "PE {me}: two dispatches in a row put their rows in one area ({:#x})",
                d.recv_x_ptr()
            )));
        }
        last_rows = Some(d.recv_x_ptr());
        experts_in_place(gpu, &d, shape)?;
        let handle = d.handle();
        buffer
            .low_latency_combine(&handle, None, (topk_idx, topk_weights), out)
            .await?;
    }
    for (round, (mine, _, _, _, out)) in staged.iter().enumerate() {
        let got = download(gpu, out, mine.tokens * shape.hidden).await?;
        let what = format!("PE {me} of {}, back-to-back round {round}", shape.n);
        compare_combined(&got, mine, shape, &what)?;
    }
    Ok(())
}

/// Queues the experts of a captured round (each scales its rows by its number + 1, in
/// place), their row counts read on the GPU at each replay.
fn experts_captured(
    module: &GpuModule,
    r: &CapturedReceive<'_>,
    first_expert: usize,
    shape: &Shape,
) -> Result<()> {
    for le in 0..shape.experts / shape.n {
        let args = [
            r.recv_x_ptr().into(),
            r.recv_count_ptr().into(),
            (le as i32).into(),
            (r.rows_per_expert() as i64).into(),
            (shape.hidden as i32).into(),
            ((first_expert + le + 1) as f32).into(),
        ];
        // SAFETY: scale_counted_rows takes (u16*, const int*, int, long long, int, float) as
        // passed: the packed rows and the counts of the buffer's region and scratch, which
        // the graph's buffer keeps while the graph (and this module, the caller's) lives.
        unsafe {
            module.launch(
                "scale_counted_rows",
                LaunchDims::linear(16, 256),
                r.stream(),
                &args,
            )?
        };
    }
    Ok(())
}

/// Captures a round whose experts scale their rows in place, then replays it with the
/// inputs of other seeds and routings written into its buffers, every combined token
/// checked against the reference each time.
pub async fn captured_rounds(gpu: &GpuPe, buffer: &mut Buffer, shape: &Shape) -> Result<()> {
    let me = gpu.my_pe();
    let first = shape.input(me, Routing::Random, 100);
    let (tokens, h) = (first.tokens, shape.hidden);
    let mut x = upload(gpu, &first.x).await?;
    let mut topk_idx = upload(gpu, &first.topk_idx).await?;
    let mut topk_weights = upload(gpu, &first.topk_weights).await?;
    let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), tokens * h)?;
    let module = gpu.compile(SCALE_KERNEL, &CompileOptions::default())?;
    let first_expert = me * shape.experts / shape.n;
    let fp8_in_place = LowLatencyRound {
        x: &mut x,
        topk_idx: &mut topk_idx,
        topk_weights: &mut topk_weights,
        tokens,
        fp8: true,
        y: None,
        out: &mut out,
    };
    match buffer.capture_low_latency(fp8_in_place, |_| Ok(())) {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("an FP8 round without y was captured: {other:?}"),
    }
    let round = LowLatencyRound {
        x: &mut x,
        topk_idx: &mut topk_idx,
        topk_weights: &mut topk_weights,
        tokens,
        fp8: false,
        y: None,
        out: &mut out,
    };
    let mut graph =
        buffer.capture_low_latency(round, |r| experts_captured(&module, r, first_expert, shape))?;
    let plan = [
        (Routing::Random, 100),
        (Routing::Random, 101),
        (Routing::AllToOne, 102),
        (Routing::EvenExpertsOnly, 103),
        (Routing::Random, 104),
    ];
    match graph
        .write_inputs(&[], &first.topk_idx, &first.topk_weights)
        .await
    {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("short inputs were written: {other:?}"),
    }
    for (routing, seed) in plan {
        let inputs: Vec<Input> = (0..shape.n)
            .map(|p| shape.input(p, routing, seed))
            .collect();
        let mine = &inputs[me];
        graph
            .write_inputs(&mine.x, &mine.topk_idx, &mine.topk_weights)
            .await?;
        // Odd seeds through the on-stream form: queued, then waited for.
        match seed % 2 {
            0 => graph.replay().await?,
            _ => graph.queue_replay()?.finish().await?,
        }
        let got = download(gpu, graph.out(), tokens * h).await?;
        let replay = format!("PE {me} of {}, replay of {routing:?} seed {seed}", shape.n);
        compare_combined(&got, mine, shape, &replay)?;
    }
    drop(graph);
    drop(module);
    Ok(())
}

/// Whether a PE's combined tokens `got` are the reference's for its input `mine`; else an
/// error naming the first token that differs (`what`: which PE and round).
fn compare_combined(got: &[Bf16], mine: &Input, shape: &Shape, what: &str) -> Result<()> {
    let (tokens, h, k) = (mine.tokens, shape.hidden, shape.top_k);
    let pe_input = mine.as_pe_input();
    let want = |t| reference::low_latency_combine_token(&pe_input, t, h, k, expert);
    let wrong: Vec<usize> = (0..tokens)
        .filter(|&t| got[t * h..(t + 1) * h] != want(t)[..])
        .collect();
    let Some(&t) = wrong.first() else {
        return Ok(());
    };
    Err(Error::InvalidArgument(format!(
        "{what}: {} of {tokens} combined tokens differ, the first {t} (its experts {:?}; got \
         {:?}.., want {:?}..)",
        wrong.len(),
        &mine.topk_idx[t * k..(t + 1) * k],
        &got[t * h..t * h + 4],
        &want(t)[..4],
    )))
}
