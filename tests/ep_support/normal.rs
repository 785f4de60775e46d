//! The normal-mode part of the ep tests: an expert function on the host and on the GPU with
//! the same roundings, and one checked dispatch-and-combine round.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use ferroshmem::ep::reference::{self, Received};
use ferroshmem::ep::{Bf16, Buffer, Dispatch, DispatchInput, Handle, Rows};
use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuPe, LaunchDims};
use ferroshmem::{Error, Pe, Result};

use crate::ep_support::{download, upload, Input, Routing, Shape};

/// The expert function: each received row becomes the sum over its local experts `e` of
/// `weight × (global expert + 1) × x`, in f32 in slot order, rounded to bf16.
pub fn experts_on_host(got: &Received, pe: usize, shape: &Shape) -> Vec<Bf16> {
    let first = (pe * shape.experts / shape.n) as i64;
    let mut y = Vec::with_capacity(got.x.len());
    for (i, row) in got.x.chunks(shape.hidden).enumerate() {
        for v in row {
            let mut acc = 0.0f32;
            for j in 0..shape.top_k {
                let e = got.topk_idx[i * shape.top_k + j];
                if e >= 0 {
                    let w = got.topk_weights[i * shape.top_k + j];
                    acc += (w * (first + e + 1) as f32) * v.to_f32();
                }
            }
            y.push(Bf16::from_f32(acc));
        }
    }
    y
}

const EXPERT_KERNEL: &str = r#"
__device__ unsigned short to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) | 0x40u) & 0xffffu);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
extern "C" __global__ void experts_in_place(unsigned short* rows, const long long* idx, const float* w,
                                            int received, int hidden, int k, int first) {
    for (long long i = blockIdx.x; i < received; i += gridDim.x) {
        for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
            float x = __uint_as_float(((unsigned)rows[i * hidden + h]) << 16);
            float acc = 0.0f;
            for (int j = 0; j < k; ++j) {
                long long e = idx[i * k + j];
                if (e >= 0) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(w[i * k + j], (float)(first + e + 1)), x));
            }
            rows[i * hidden + h] = to_bf16(acc);
        }
    }
}
"#;

/// Runs the expert function on the GPU over what `d` received, in place, on the buffer's
/// stream.
fn experts_on_gpu(
    gpu: &GpuPe,
    stream: &ferroshmem::gpu::cudarc::driver::CudaStream,
    d: &Dispatch<'_>,
    shape: &Shape,
) -> Result<()> {
    if d.received() == 0 {
        return Ok(());
    }
    let module = gpu.compile(EXPERT_KERNEL, &CompileOptions::default())?;
    let first = (gpu.my_pe() * shape.experts / shape.n) as i32;
    let args = [
        d.recv_x_ptr().into(),
        d.recv_topk_idx_ptr().into(),
        d.recv_topk_weights_ptr().into(),
        (d.received() as i32).into(),
        (shape.hidden as i32).into(),
        (shape.top_k as i32).into(),
        first.into(),
    ];
    // SAFETY: experts_in_place takes (u16*, const i64*, const f32*, int, int, int, int) as
    // passed: the received rows, experts and weights of the buffer's receive region, which
    // the buffer keeps until its stream (this one) has run the kernel.
    unsafe {
        module.launch(
            "experts_in_place",
            LaunchDims::linear(64, 256),
            stream,
            &args,
        )
    }?;
    // The module may go once its kernel ran.
    drop(module);
    Ok(())
}

/// Uploads `input` and dispatches it; the received row count on success.
pub async fn dispatch_only(gpu: &GpuPe, buffer: &mut Buffer, input: &Input) -> Result<usize> {
    Ok(dispatch_handle(gpu, buffer, input).await?.received())
}

/// Uploads `input` and dispatches it; the dispatch's handle.
pub async fn dispatch_handle(gpu: &GpuPe, buffer: &mut Buffer, input: &Input) -> Result<Handle> {
    let x = upload(gpu, &input.x).await?;
    let topk_idx = upload(gpu, &input.topk_idx).await?;
    let topk_weights = upload(gpu, &input.topk_weights).await?;
    let d = buffer
        .dispatch(DispatchInput {
            x: Rows::Bf16(&x),
            topk_idx: &topk_idx,
            topk_weights: &topk_weights,
            tokens: input.tokens,
        })
        .await?;
    Ok(d.into_handle())
}

/// One dispatch and combine of every PE's inputs for `routing` and `seed`, each result
/// checked against the reference. Even seeds send results back from a device buffer, odd
/// ones in place, computed on the GPU.
pub async fn check_round(
    pe: &Pe,
    gpu: &GpuPe,
    buffer: &mut Buffer,
    shape: &Shape,
    routing: Routing,
    seed: u64,
) -> Result<()> {
    let me = pe.my_pe();
    let inputs: Vec<Input> = (0..shape.n)
        .map(|p| shape.input(p, routing, seed))
        .collect();
    let refs = reference::dispatch(
        &inputs.iter().map(Input::as_pe_input).collect::<Vec<_>>(),
        shape.hidden,
        shape.top_k,
        shape.experts,
    )?;
    let ys: Vec<Vec<Bf16>> = refs
        .iter()
        .enumerate()
        .map(|(r, got)| experts_on_host(got, r, shape))
        .collect();
    let tokens: Vec<usize> = inputs.iter().map(|i| i.tokens).collect();
    let want_back = reference::combine(&tokens, &refs, &ys, shape.hidden)?;
    let (mine, want) = (&inputs[me], &refs[me]);
    let x = upload(gpu, &mine.x).await?;
    let topk_idx = upload(gpu, &mine.topk_idx).await?;
    let topk_weights = upload(gpu, &mine.topk_weights).await?;
    let d = buffer
        .dispatch(DispatchInput {
            x: Rows::Bf16(&x),
            topk_idx: &topk_idx,
            topk_weights: &topk_weights,
            tokens: mine.tokens,
        })
        .await?;
    let what = format!("PE {me} of {}, {routing:?}, seed {seed}", shape.n);
    let same = |ok: bool, part: &str| match ok {
        true => Ok(()),
        false => Err(Error::InvalidArgument(format!(
            "{what}: {part} differs from the reference"
        ))),
    };
    same(d.received() == want.rows(), "the received row count")?;
    same(
        d.rows_from() == want.rows_from.as_slice(),
        "rows per source PE",
    )?;
    same(
        d.tokens_per_expert() == want.tokens_per_expert.as_slice(),
        "tokens per expert",
    )?;
    same(d.recv_x().await? == want.x, "received rows")?;
    same(d.recv_src().await? == want.src_idx, "source indices")?;
    same(
        d.recv_topk_idx().await? == want.topk_idx,
        "received experts",
    )?;
    same(
        d.recv_topk_weights().await? == want.topk_weights,
        "received weights",
    )?;
    let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), (mine.tokens * shape.hidden).max(1))?;
    if seed % 2 == 1 {
        experts_on_gpu(gpu, d.stream(), &d, shape)?;
        let handle = d.into_handle();
        buffer.combine_in_place(&handle, &mut out).await?;
    } else {
        let handle = d.into_handle();
        let y = upload(gpu, &ys[me]).await?;
        buffer.combine(&handle, &y, &mut out).await?;
    }
    same(
        download(gpu, &out, mine.tokens * shape.hidden).await? == want_back[me],
        "combined tokens",
    )
}

/// One FP8 dispatch of every PE's rows, made so that each row's bytes and scales name their
/// PE, token and place: each received row and its scales checked against its source's.
pub async fn check_fp8_round(gpu: &GpuPe, buffer: &mut Buffer, shape: &Shape) -> Result<()> {
    let scales_per_row = shape.hidden / 128;
    // Each PE's FP8 bytes and scales name their PE, token and place.
    let fp8_of = |p: usize, tokens: usize| -> (Vec<u8>, Vec<f32>) {
        let bytes = (0..tokens * shape.hidden)
            .map(|i| (i * 7 + p * 31) as u8)
            .collect();
        let scales = (0..tokens * scales_per_row)
            .map(|i| (p * 100_000 + i) as f32)
            .collect();
        (bytes, scales)
    };
    let inputs: Vec<_> = (0..shape.n)
        .map(|p| shape.input(p, Routing::Random, 50))
        .collect();
    let as_pe: Vec<_> = inputs.iter().map(|i| i.as_pe_input()).collect();
    let want = &reference::dispatch(&as_pe, shape.hidden, shape.top_k, shape.experts)?[gpu.my_pe()];
    let mine = &inputs[gpu.my_pe()];
    let (bytes, scales) = fp8_of(gpu.my_pe(), mine.tokens);
    let (x, s) = (upload(gpu, &bytes).await?, upload(gpu, &scales).await?);
    let (idx, w) = (
        upload(gpu, &mine.topk_idx).await?,
        upload(gpu, &mine.topk_weights).await?,
    );
    let input = DispatchInput {
        x: Rows::Fp8 { x: &x, scales: &s },
        topk_idx: &idx,
        topk_weights: &w,
        tokens: mine.tokens,
    };
    let d = buffer.dispatch(input).await?;
    assert!(d.is_fp8() && d.recv_x().await.is_err());
    let (got, got_scales) = d.recv_x_fp8().await?;
    assert_eq!(d.received(), want.rows());
    for i in 0..want.rows() {
        let (src, t) = (want.src_pe[i], want.src_idx[i] as usize);
        let (their_bytes, their_scales) = fp8_of(src, inputs[src].tokens);
        let h = shape.hidden;
        assert_eq!(
            got[i * h..(i + 1) * h],
            their_bytes[t * h..(t + 1) * h],
            "row {i}"
        );
        let k = scales_per_row;
        assert_eq!(
            got_scales[i * k..(i + 1) * k],
            their_scales[t * k..(t + 1) * k]
        );
    }
    assert_eq!(d.recv_topk_idx().await?, want.topk_idx);
    Ok(())
}
