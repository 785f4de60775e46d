//! A small mixture-of-experts layer served by tokio tasks: each PE is a service that takes
//! batches of tokens from a client task over a channel, routes each token to its top-k experts
//! (a random router), dispatches the tokens to the PEs that own those experts
//! (`ferroshmem::ep`), runs its experts on what it received (a CUDA kernel, in place: expert `e`
//! scales a row by `e + 1`, weighted), combines the results back, and checks every output token
//! against a reference computed for that token alone on the host, exactly. It prints the
//! layer's throughput.
//!
//! ```text
//! cargo run --release --example moe_layer                 # 4 PEs on the GPUs there are
//! cargo run --release --example moe_layer -- --pes 8 --batches 20
//! ```
//!
//! Several PEs share a GPU when there are more PEs than GPUs: run it under CUDA MPS so that
//! their kernels run side by side. Without a GPU it says so and exits successfully.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use ferroshmem::ep::{Bf16, Buffer, Config, DispatchInput, Rows};
use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuModule, GpuPe, HostBuffer, LaunchDims};
use ferroshmem::{Error, Result};
use tokio::sync::mpsc;

const TOKENS: usize = 512;
const HIDDEN: usize = 1024;
const TOP_K: usize = 4;
const EXPERTS: usize = 32;

/// The experts: row `i` becomes the sum over its local experts `e` (slot order, f32) of
/// `weight × (e + 1) × x`, rounded to bf16. Roundings are explicit, so the host can repeat them.
const EXPERTS_KERNEL: &str = r#"
__device__ unsigned short to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) | 0x40u) & 0xffffu);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
extern "C" __global__ void experts(unsigned short* rows, const long long* idx, const float* w,
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

/// One batch a client sends: token rows and the router's choices.
struct Batch {
    x: Vec<Bf16>,
    topk_idx: Vec<i64>,
    topk_weights: Vec<f32>,
}

/// splitmix64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random router: each token's top-k of random scores, weights summing to 1 (powers of 2).
fn route(seed: u64) -> (Vec<i64>, Vec<f32>) {
    let mut idx = Vec::with_capacity(TOKENS * TOP_K);
    let mut state = seed;
    for _ in 0..TOKENS {
        let mut scores: Vec<(u64, i64)> = (0..EXPERTS as i64)
            .map(|e| {
                state = mix(state);
                (state, e)
            })
            .collect();
        scores.sort_unstable();
        idx.extend(scores[..TOP_K].iter().map(|&(_, e)| e));
    }
    let weights = [0.5, 0.25, 0.125, 0.125];
    (idx, (0..TOKENS).flat_map(|_| weights).collect())
}

/// A client: `batches` batches of tokens for PE `pe`'s service.
async fn client(pe: usize, batches: usize, to_service: mpsc::Sender<Batch>) {
    for b in 0..batches {
        let seed = mix((pe as u64) << 32 | b as u64);
        let x = (0..TOKENS * HIDDEN)
            .map(|i| Bf16::from_f32(((mix(seed ^ i as u64) % 17) as f32 - 8.0) / 8.0))
            .collect();
        let (topk_idx, topk_weights) = route(seed);
        let batch = Batch {
            x,
            topk_idx,
            topk_weights,
        };
        if to_service.send(batch).await.is_err() {
            return;
        }
    }
}

/// What the layer must give back for token `t` of `batch`, worked out for that token alone:
/// each PE's experts' rounded sum, summed in PE order and rounded.
fn reference(batch: &Batch, t: usize, n_pes: usize) -> Vec<Bf16> {
    let local = (EXPERTS / n_pes) as i64;
    let slots = &batch.topk_idx[t * TOP_K..(t + 1) * TOP_K];
    let row = &batch.x[t * HIDDEN..(t + 1) * HIDDEN];
    let mut sum = vec![0.0f32; HIDDEN];
    for pe in 0..n_pes as i64 {
        if !slots.iter().any(|e| e / local == pe) {
            continue;
        }
        for (h, v) in row.iter().enumerate() {
            let mut acc = 0.0f32;
            for (j, &e) in slots.iter().enumerate() {
                if e / local == pe {
                    acc += (batch.topk_weights[t * TOP_K + j] * (e + 1) as f32) * v.to_f32();
                }
            }
            sum[h] += Bf16::from_f32(acc).to_f32();
        }
    }
    sum.into_iter().map(Bf16::from_f32).collect()
}

/// The layer on one PE: its ep buffer and its experts.
struct MoeLayer {
    gpu: GpuPe,
    buffer: Buffer,
    experts: GpuModule,
}

impl MoeLayer {
    async fn new(gpu: &GpuPe) -> Result<MoeLayer> {
        let buffer = Buffer::new(gpu, Config::new(TOKENS, HIDDEN, TOP_K, EXPERTS)).await?;
        let experts = gpu.compile(EXPERTS_KERNEL, &CompileOptions::default())?;
        Ok(MoeLayer {
            gpu: gpu.clone(),
            buffer,
            experts,
        })
    }

    /// Runs one batch through the layer; the output rows.
    async fn forward(&mut self, batch: &Batch) -> Result<Vec<Bf16>> {
        let gpu = &self.gpu;
        let x = upload(gpu, &batch.x).await?;
        let topk_idx = upload(gpu, &batch.topk_idx).await?;
        let topk_weights = upload(gpu, &batch.topk_weights).await?;
        let input = DispatchInput {
            x: Rows::Bf16(&x),
            topk_idx: &topk_idx,
            topk_weights: &topk_weights,
            tokens: TOKENS,
        };
        let first = (gpu.my_pe() * self.buffer.local_experts()) as i32;
        let received = self.buffer.dispatch(input).await?;
        let args = [
            received.recv_x_ptr().into(),
            received.recv_topk_idx_ptr().into(),
            received.recv_topk_weights_ptr().into(),
            (received.received() as i32).into(),
            (HIDDEN as i32).into(),
            (TOP_K as i32).into(),
            first.into(),
        ];
        // SAFETY: `experts` takes (u16*, const i64*, const f32*, int, int, int, int) as passed:
        // the received rows, experts and weights in the buffer's receive region, which stays
        // until the buffer's stream (where the kernel runs) has run it.
        unsafe {
            self.experts.launch(
                "experts",
                LaunchDims::linear(132, 256),
                received.stream(),
                &args,
            )?
        };
        let handle = received.into_handle();
        let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), TOKENS * HIDDEN)?;
        self.buffer.combine_in_place(&handle, &mut out).await?;
        let mut host = HostBuffer::<Bf16>::new(gpu.context(), TOKENS * HIDDEN)?;
        gpu.copy_local(&mut host, &out).await?;
        Ok(host.as_slice().to_vec())
    }
}

async fn upload<T: bytemuck::Pod>(gpu: &GpuPe, data: &[T]) -> Result<DeviceBuffer<T>> {
    let mut dev = DeviceBuffer::new(gpu.context(), data.len())?;
    gpu.copy_local(&mut dev, &HostBuffer::from_slice(gpu.context(), data)?)
        .await?;
    Ok(dev)
}

/// One PE's service: batches in, checked outputs out; the time spent in the layer.
async fn serve(pe: ferroshmem::Pe, batches: usize) -> Result<Duration> {
    let gpu = pe.init_gpu().await?;
    let mut layer = MoeLayer::new(&gpu).await?;
    let (to_service, mut from_clients) = mpsc::channel(2);
    tokio::spawn(client(pe.my_pe(), batches, to_service));
    let mut busy = Duration::ZERO;
    while let Some(batch) = from_clients.recv().await {
        let started = Instant::now();
        let out = layer.forward(&batch).await?;
        busy += started.elapsed();
        for t in 0..TOKENS {
            if out[t * HIDDEN..(t + 1) * HIDDEN] != reference(&batch, t, pe.n_pes()) {
                return Err(Error::InvalidArgument(format!(
                    "PE {}: token {t} differs from the reference",
                    pe.my_pe()
                )));
            }
        }
    }
    layer.buffer.destroy().await?;
    Ok(busy)
}

fn option(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<()> {
    ferroshmem::observability::init_tracing();
    if let Err(e) = ferroshmem::gpu::detect() {
        println!("moe_layer: nothing to run, {e}");
        return Ok(());
    }
    let (pes, batches) = (option("--pes", 4), option("--batches", 10));
    if std::env::var_os("FERROSHMEM_SYMMETRIC_SIZE").is_none() {
        std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "256M");
    }
    let busy = ferroshmem::run_local(pes, move |pe| serve(pe, batches))
        .await?
        .into_iter()
        .collect::<Result<Vec<Duration>>>()?;
    let slowest = busy.iter().max().copied().unwrap_or_default().as_secs_f64();
    let tokens = (pes * batches * TOKENS) as f64;
    println!(
        "moe_layer: {pes} PEs, {batches} batches of {TOKENS} tokens (hidden {HIDDEN}, top-{TOP_K} of {EXPERTS} experts): every output token matches its reference; {:.0} tokens/s through the layer ({:.2} ms a batch, uploads and checks' copies included)",
        tokens / slowest,
        slowest * 1e3 / batches as f64
    );
    Ok(())
}
