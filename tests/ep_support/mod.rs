//! What the ep tests share: GPU jobs one at a time, a small shape, routings, and every PE's
//! inputs made from a seed (so that each PE can compute the whole team's reference).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferroshmem::ep::reference::PeInput;
use ferroshmem::ep::{Bf16, Config};
use ferroshmem::gpu::{DeviceBuffer, GpuPe, HostBuffer, LocalMem};
use ferroshmem::{Pe, Result};

/// The tests of a binary, one at a time (they share the GPUs and set the heap size).
static EP_TESTS: Mutex<()> = Mutex::new(());

pub fn exclusive(test: &str) -> Option<MutexGuard<'static, ()>> {
    if let Err(e) = ferroshmem::gpu::detect() {
        eprintln!("{test}: skipped, {e}");
        return None;
    }
    let turn = EP_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "256M");
    Some(turn)
}

/// Runs `body` on every PE of an `n`-PE one-process job, each with its GPU, within 240 s.
pub fn job<F, Fut>(n: usize, body: F)
where
    F: Fn(Pe, GpuPe) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let run = ferroshmem::run_local(n, move |pe| {
        let body = body.clone();
        async move {
            let gpu = pe.init_gpu().await?;
            body(pe, gpu).await
        }
    });
    let results = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(240), run).await })
        .unwrap_or_else(|_| panic!("the {n}-PE ep job did not finish within 240 s"))
        .unwrap();
    for (pe, r) in results.into_iter().enumerate() {
        if let Err(e) = r {
            panic!("PE {pe}: {e}");
        }
    }
    eprintln!("{n} PEs: done in {:?}", started.elapsed());
}

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
    pub fn as_pe_input(&self) -> PeInput<'_> {
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
