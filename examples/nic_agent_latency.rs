//! The `cpu` NIC handler's remote agent (`gpu::nic`) between 2 PEs, beside the host data
//! plane's own operations in the same run: PE 0 times, against PE 1 (whose agent serves from
//! its service thread while PE 1 waits in `barrier_all`),
//!
//! | figure | agent | anchor (data plane) |
//! |---|---|---|
//! | `fetch_add` | an 8-byte `FetchAdd` request and its reply | `atomic_fetch_add` |
//! | `write8` | an 8-byte `Write` request and its reply | `p` of 8 bytes, then `quiet` (landed: a put to another node returns once sent) |
//! | `write_bw` | `Write`s of `--bw-mib` MiB in all, 16 MiB each, all in flight | `put_nbi`s of the same, one `quiet` |
//! | `wqe_fadd` | an 8-byte fetch-add WQE posted to a send queue, performed by the cpu NIC handler through the agent, and its CQE (`Producer::post`, polled, yielding the core, until its CQE) | `atomic_fetch_add` |
//! | `wqe_write8` | an 8-byte inline write WQE and its CQE, the same way | `p` of 8 bytes, then `quiet` |
//! | `wqe_write128_rate` | 128-byte write WQEs (source in local memory) posted back to back, `4 × --iters` of them, then a quiet: µs per WQE, the handler and agent's throughput for small writes | `put_nbi`s of 128 bytes, one `quiet` |
//!
//! `--ring-blocks N` and `--chunk BYTES` size the agents' rings (default: the agent's).
//! Each latency is the median of `--reps` batches of `--iters` operations, after warm-up; each
//! line gives the agent's figure, the anchor's and their ratio. Across two hosts (the agent's
//! case: the target's heap cannot be registered with the fabric):
//!
//! ```text
//! cargo build --release --example nic_agent_latency --bin ferroshmem
//! scripts/netns-hosts up nicl 2
//! target/release/ferroshmem run --hosts A:1,B:1 --rsh "$(scripts/netns-hosts agent nicl)" \
//!     -- target/release/examples/nic_agent_latency --iters 2000 --reps 5
//! scripts/netns-hosts down nicl
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroshmem::gpu::ibgda::{
    AtomicOp, Consumer, Producer, QueueLayout, QueueMemory, Width as WqeWidth, WorkRequest,
    WqeFlags,
};
use ferroshmem::gpu::nic::{
    Agent, AgentConfig, AmoOp, Failure, Handler, HeapMemory, HostMemory, LocalMemory, Request,
    Width,
};
use ferroshmem::{Error, Pe, Result, SymBuffer};

/// The options: `--iters`, `--reps`, `--bw-mib`, and the agent's `--ring-blocks` and
/// `--chunk` (bytes).
#[derive(Debug, Clone, Copy)]
struct Options {
    iters: usize,
    reps: usize,
    bw_mib: usize,
    ring_blocks: usize,
    chunk: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    Options {
        iters: value("--iters", 2000),
        reps: value("--reps", 5),
        bw_mib: value("--bw-mib", 64),
        ring_blocks: value("--ring-blocks", AgentConfig::default().ring_blocks),
        chunk: value("--chunk", AgentConfig::default().max_chunk),
    }
}

/// The median over `reps` batches of what `batch` returns (seconds per operation).
async fn median<F, Fut>(reps: usize, mut batch: F) -> Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<f64>>,
{
    let mut all = Vec::with_capacity(reps);
    for _ in 0..reps {
        all.push(batch().await?);
    }
    all.sort_by(f64::total_cmp);
    Ok(all[all.len() / 2])
}

/// Seconds per call of `op`, over `iters` calls.
async fn per_op<F, Fut, T>(iters: usize, mut op: F) -> Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let started = Instant::now();
    for _ in 0..iters {
        op().await?;
    }
    Ok(started.elapsed().as_secs_f64() / iters as f64)
}

fn line(name: &str, agent: f64, anchor: f64, unit: &str) {
    println!(
        "{name:<10} agent {agent:>10.2} {unit}   data plane {anchor:>10.2} {unit}   ratio {:.2}",
        agent / anchor
    );
}

/// Symmetric buffers of the anchors.
struct Anchors {
    word: SymBuffer<u64>,
    dest: SymBuffer<u8>,
}

/// The size of one bandwidth message.
const MESSAGE: usize = 16 << 20;
/// The bytes of each write of `wqe_write128_rate`.
const SMALL: usize = 128;

/// PE 0's measurements against PE 1.
async fn measure(pe: &Pe, agent: &Arc<Agent>, anchors: &Anchors, o: Options) -> Result<()> {
    let peer = agent
        .peer(1)
        .ok_or(Error::PeOutOfRange { pe: 1, n_pes: 1 })?;
    let word = &anchors.word;
    let amo = || {
        let request = Request::Atomic {
            addr: peer.base,
            rkey: peer.rkey,
            width: Width::W8,
            op: AmoOp::FetchAdd(1),
        };
        agent.submit(1, request)
    };
    let write = || {
        let request = Request::Write {
            addr: peer.base + 64,
            rkey: peer.rkey,
            data: vec![1; 8],
        };
        agent.submit(1, request)
    };
    per_op(o.iters, amo).await?;
    let us = 1e6;
    let a = median(o.reps, || per_op(o.iters, amo)).await? * us;
    let d = median(o.reps, || {
        per_op(o.iters, || pe.atomic_fetch_add(word, 1, 1))
    })
    .await?
        * us;
    line("fetch_add", a, d, "us");
    let a = median(o.reps, || per_op(o.iters, write)).await? * us;
    // Landed, as the agent's reply says its write has: a put returns once sent.
    let put_landed = || async {
        pe.p(word, 1, 1).await?;
        pe.quiet().await
    };
    let d = median(o.reps, || per_op(o.iters, put_landed)).await? * us;
    line("write8", a, d, "us");
    let HandlerFigures {
        fadd,
        write8,
        stream128,
    } = through_the_handler(agent, o).await?;
    let d_fadd = median(o.reps, || {
        per_op(o.iters, || pe.atomic_fetch_add(word, 1, 1))
    })
    .await?
        * us;
    line("wqe_fadd", fadd * us, d_fadd, "us");
    let d_put = median(o.reps, || per_op(o.iters, put_landed)).await? * us;
    line("wqe_write8", write8 * us, d_put, "us");
    let d_stream = median(o.reps, || async {
        let started = Instant::now();
        for _ in 0..4 * o.iters {
            pe.put_nbi(anchors.dest.slice(..SMALL), &[1u8; SMALL], 1)?;
        }
        pe.quiet().await?;
        Ok(started.elapsed().as_secs_f64() / (4 * o.iters) as f64)
    })
    .await?
        * us;
    line("wqe_write128_rate", stream128 * us, d_stream, "us");
    bandwidth(pe, agent, &anchors.dest, o).await
}

/// Local buffers of the handler's WQEs, in host memory.
struct Local(HostMemory);

impl LocalMemory for Local {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0; len];
        self.0.read(addr, &mut out)?;
        Ok(out)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.0.write(addr, data)
    }
}

/// What [`through_the_handler`] measures, in seconds per WQE.
struct HandlerFigures {
    fadd: f64,
    write8: f64,
    stream128: f64,
}

/// Seconds per WQE (posted, performed by a cpu NIC handler through `agent`, its CQE seen):
/// an 8-byte fetch-add, then an 8-byte inline write, each the median of the batches; then
/// per WQE of a stream of 128-byte writes ended by a quiet.
async fn through_the_handler(agent: &Arc<Agent>, o: Options) -> Result<HandlerFigures> {
    let peer = agent
        .peer(1)
        .ok_or(Error::PeOutOfRange { pe: 1, n_pes: 1 })?;
    let layout = QueueLayout::new(1024, 2048).map_err(Error::from)?;
    let queue = QueueMemory::host(layout, 2).map_err(Error::from)?;
    let local_base = 0x6000_0000_0000;
    let local = Arc::new(Local(HostMemory::new(local_base, 4096)?));
    let handler = Handler::start(
        0,
        vec![(1, Consumer::new(queue.clone()))],
        agent.clone(),
        local,
        Failure::default(),
    )?;
    let producer = Producer::new(queue, Duration::from_secs(60));
    let fadd = WorkRequest::Atomic {
        op: AtomicOp::FetchAdd { add: 1 },
        width: WqeWidth::W8,
        remote: peer.base + 128,
        rkey: peer.rkey,
        result: local_base,
        lkey: 0,
    };
    let write = WorkRequest::WriteInline {
        data: vec![1; 8],
        remote: peer.base + 192,
        rkey: peer.rkey,
    };
    let figures = tokio::task::spawn_blocking(move || {
        let timed = |wqe: &WorkRequest| -> Result<f64> {
            let mut all = Vec::with_capacity(o.reps);
            for _ in 0..o.reps {
                let started = Instant::now();
                for _ in 0..o.iters {
                    // The WQE's own CQE (a quiet would add a NOP's round trip).
                    let seen = producer.cqes();
                    producer
                        .post(wqe, WqeFlags::SIGNALED)
                        .map_err(Error::from)?;
                    while producer.cqes() == seen {
                        producer.poll();
                        // A GPU polls its CQ without a host core: yield this one, so that
                        // the handler and the agent have the CPUs of a small machine.
                        std::thread::yield_now();
                    }
                    if let Some(e) = producer.error() {
                        return Err(e.into());
                    }
                }
                all.push(started.elapsed().as_secs_f64() / o.iters as f64);
            }
            all.sort_by(f64::total_cmp);
            Ok(all[all.len() / 2])
        };
        let stream = WorkRequest::Write {
            local: local_base + 1024,
            lkey: 0,
            remote: peer.base + 1024,
            rkey: peer.rkey,
            len: SMALL as u32,
        };
        let mut all = Vec::with_capacity(o.reps);
        for _ in 0..o.reps {
            let started = Instant::now();
            for _ in 0..4 * o.iters {
                producer
                    .post(&stream, WqeFlags::default())
                    .map_err(Error::from)?;
            }
            producer.quiet().map_err(Error::from)?;
            all.push(started.elapsed().as_secs_f64() / (4 * o.iters) as f64);
        }
        all.sort_by(f64::total_cmp);
        Ok::<_, Error>(HandlerFigures {
            fadd: timed(&fadd)?,
            write8: timed(&write)?,
            stream128: all[all.len() / 2],
        })
    })
    .await
    .map_err(|e| Error::os("the handler's measurement", e))??;
    drop(handler);
    Ok(figures)
}

/// `write_bw`: GB/s of 16 MiB writes, all in flight, beside `put_nbi` + `quiet`.
async fn bandwidth(pe: &Pe, agent: &Agent, dest: &SymBuffer<u8>, o: Options) -> Result<()> {
    let count = (o.bw_mib << 20).div_ceil(MESSAGE).max(1);
    let peer = agent
        .peer(1)
        .ok_or(Error::PeOutOfRange { pe: 1, n_pes: 1 })?;
    let src = vec![7u8; MESSAGE];
    let gbps = |secs: f64| (count * MESSAGE) as f64 / secs / 1e9;
    let a = median(o.reps, || async {
        // The sources are made before the clock starts, as a handler's would be.
        let sources: Vec<Vec<u8>> = (0..count).map(|_| src.clone()).collect();
        let started = Instant::now();
        let writes: Vec<_> = sources
            .into_iter()
            .map(|data| {
                agent.submit(
                    1,
                    Request::Write {
                        addr: peer.base,
                        rkey: peer.rkey,
                        data,
                    },
                )
            })
            .collect();
        for w in writes {
            w.await?;
        }
        Ok(started.elapsed().as_secs_f64())
    })
    .await?;
    let d = median(o.reps, || async {
        let started = Instant::now();
        for _ in 0..count {
            pe.put_nbi(dest, &src, 1)?;
        }
        pe.quiet().await?;
        Ok(started.elapsed().as_secs_f64())
    })
    .await?;
    line("write_bw", gbps(a), gbps(d), "GB/s");
    Ok(())
}

fn main() -> Result<()> {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::os("tokio runtime", e))?;
    let results = rt.block_on(ferroshmem::run(2, move |pe| async move {
        if pe.n_pes() != 2 {
            return Err(Error::InvalidArgument("run it on 2 PEs".into()));
        }
        let config = AgentConfig {
            ring_blocks: o.ring_blocks,
            max_chunk: o.chunk,
            timeout: Some(Duration::from_secs(120)),
        };
        let rings = pe.malloc::<u64>(config.ring_words(2)).await?;
        let base = 0x7000_0000_0000 + pe.my_pe() as u64 * (1 << 32);
        let memory = Arc::new(HostMemory::new(base, 32 << 20)?);
        let exchange = Arc::new(pe.clone());
        let agent = Arc::new(Agent::new(pe.data_plane(), exchange, rings, memory, config).await?);
        let anchors = Anchors {
            word: pe.calloc::<u64>(1).await?,
            dest: pe.malloc::<u8>(MESSAGE).await?,
        };
        pe.barrier_all().await?;
        if pe.my_pe() == 0 {
            measure(&pe, &agent, &anchors, o).await?;
        }
        pe.barrier_all().await?;
        pe.free(anchors.word).await?;
        pe.free(anchors.dest).await?;
        let agent = Arc::try_unwrap(agent)
            .map_err(|_| Error::InvalidArgument("the agent is still shared".into()))?;
        if let Some(rings) = agent.shutdown().await {
            pe.free(rings).await?;
        }
        Ok(())
    }))?;
    results.into_iter().collect()
}
