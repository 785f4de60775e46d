//! What the ep tests share: a small shape, routings, every PE's inputs made from a seed (so
//! that each PE can compute the whole team's reference), an expert function run on the host
//! and on the GPU with the same roundings, and one checked dispatch-and-combine round.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use ferroshmem::ep::reference::{self, PeInput, Received};
use ferroshmem::ep::{Bf16, Buffer, Config, Dispatch, DispatchInput};
use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuPe, HostBuffer, LaunchDims, LocalMem};
use ferroshmem::{Error, Pe, Result};

/// The sizes of the tests: 96 tokens at most, rows of 256, top-4 of 16 experts.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub n: usize,
    pub max_tokens: usize,
    pub hidden: usize,
    pub top_k: usize,
    pub experts: usize,
}

/// How tokens pick their experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Distinct random experts, about one slot in eight empty.
    Random,
    /// Only even experts: the odd ones get nothing.
    EvenExpertsOnly,
    /// Every token to expert 3 alone.
    AllToOne,
    /// Every slot empty: nothing moves.
    Nowhere,
}

impl Routing {
    pub const ALL: [Routing; 4] = [
        Routing::Random,
        Routing::EvenExpertsOnly,
        Routing::AllToOne,
        Routing::Nowhere,
    ];
}

/// One PE's inputs, on the host.
#[derive(Debug, Clone)]
pub struct Input {
    pub tokens: usize,
    pub x: Vec<Bf16>,
    pub topk_idx: Vec<i64>,
    pub topk_weights: Vec<f32>,
}

impl Input {
    fn as_pe_input(&self) -> PeInput<'_> {
        PeInput {
            x: &self.x,
            topk_idx: &self.topk_idx,
            topk_weights: &self.topk_weights,
        }
    }
}

/// splitmix64: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl Shape {
    pub fn small(n: usize) -> Shape {
        Shape {
            n,
            max_tokens: 96,
            hidden: 256,
            top_k: 4,
            experts: 16,
        }
    }

    pub fn config(&self) -> Config {
        Config::new(self.max_tokens, self.hidden, self.top_k, self.experts)
    }

    /// PE `pe`'s inputs for `routing` and `seed`: PEs dispatch different numbers of tokens.
    pub fn input(&self, pe: usize, routing: Routing, seed: u64) -> Input {
        let mut rng = Rng(seed * 1_000_003 + pe as u64 * 7919 + routing as u64);
        let tokens = self.max_tokens - 5 * pe;
        let x = (0..tokens * self.hidden)
            .map(|_| Bf16::from_f32((rng.below(17) as f32 - 8.0) / 8.0))
            .collect();
        let mut topk_idx = Vec::with_capacity(tokens * self.top_k);
        for _ in 0..tokens {
            topk_idx.extend(self.experts_of(&mut rng, routing));
        }
        let topk_weights = (0..tokens * self.top_k)
            .map(|_| [0.25, 0.5, 1.0, 2.0][rng.below(4)])
            .collect();
        Input {
            tokens,
            x,
            topk_idx,
            topk_weights,
        }
    }

    fn experts_of(&self, rng: &mut Rng, routing: Routing) -> Vec<i64> {
        let mut row = vec![-1i64; self.top_k];
        match routing {
            Routing::Nowhere => {}
            Routing::AllToOne => row[0] = 3,
            Routing::Random | Routing::EvenExpertsOnly => {
                let step = if routing == Routing::Random { 1 } else { 2 };
                let choices = self.experts / step;
                for slot in 0..self.top_k {
                    if routing == Routing::Random && rng.below(8) == 0 {
                        continue;
                    }
                    loop {
                        let e = (rng.below(choices) * step) as i64;
                        if !row.contains(&e) {
                            row[slot] = e;
                            break;
                        }
                    }
                }
            }
        }
        row
    }
}

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

pub async fn upload<T: bytemuck::Pod>(gpu: &GpuPe, data: &[T]) -> Result<DeviceBuffer<T>> {
    let mut dev = DeviceBuffer::new(gpu.context(), data.len().max(1))?;
    if !data.is_empty() {
        let mut host = HostBuffer::new(gpu.context(), dev.len())?;
        host.as_mut_slice()[..data.len()].copy_from_slice(data);
        gpu.copy_local(&mut dev, &host).await?;
    }
    Ok(dev)
}

pub async fn download<T: bytemuck::Pod>(
    gpu: &GpuPe,
    dev: &DeviceBuffer<T>,
    len: usize,
) -> Result<Vec<T>> {
    let mut host = HostBuffer::new(gpu.context(), dev.len())?;
    gpu.copy_local(&mut host, dev).await?;
    Ok(host.as_slice()[..len].to_vec())
}

/// Uploads `input` and dispatches it; the received row count on success.
pub async fn dispatch_only(gpu: &GpuPe, buffer: &mut Buffer, input: &Input) -> Result<usize> {
    let x = upload(gpu, &input.x).await?;
    let topk_idx = upload(gpu, &input.topk_idx).await?;
    let topk_weights = upload(gpu, &input.topk_weights).await?;
    let d = buffer
        .dispatch(DispatchInput {
            x: &x,
            topk_idx: &topk_idx,
            topk_weights: &topk_weights,
            tokens: input.tokens,
        })
        .await?;
    Ok(d.received())
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
            x: &x,
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
