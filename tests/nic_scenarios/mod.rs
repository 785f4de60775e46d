//! The NIC agent's scenarios, shared by `tests/nic_agent.rs`'s in-process jobs and its jobs
//! across namespace hosts: each PE makes an agent over a host-memory heap ([`make`]) and runs
//! [`scenarios`], which checks what comes back and what lands in the heaps.

#![allow(dead_code)]

pub mod handler;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroshmem::gpu::nic::{
    Agent, AgentConfig, AmoOp, HeapMemory, HostMemory, Reply, Request, Status, Width,
};
use ferroshmem::Pe;

/// Each PE's heap, and the part of it each initiator uses.
pub const HEAP: usize = 8 << 20;
pub const REGION: u64 = 1 << 20;
/// Where the heaps claim to be (each PE's elsewhere, as GPU heaps are).
pub const BASE: u64 = 0x7000_0000_0000;

pub type Check = std::result::Result<(), String>;
/// A request's reply, to come.
pub type Pending = std::pin::Pin<Box<dyn Future<Output = ferroshmem::Result<Reply>> + Send>>;

/// Rings small enough that records skip to the ring's start and credit runs out.
pub fn small() -> AgentConfig {
    AgentConfig {
        ring_blocks: 256,
        max_chunk: 4096,
        timeout: Some(PATIENCE),
    }
}

/// The default rings.
pub fn default_rings() -> AgentConfig {
    AgentConfig {
        timeout: Some(PATIENCE),
        ..AgentConfig::default()
    }
}

/// How long a request of these tests may take before it fails the test (instead of
/// hanging it).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A PE with its agent and heap.
pub struct Ctx {
    pub pe: Pe,
    pub agent: Agent,
    pub memory: Arc<HostMemory>,
    pub config: AgentConfig,
}

pub async fn make(pe: &Pe, config: AgentConfig) -> ferroshmem::Result<Ctx> {
    let rings = pe.malloc::<u64>(config.ring_words(pe.n_pes())).await?;
    let base = BASE + pe.my_pe() as u64 * (1 << 32);
    let memory = Arc::new(HostMemory::new(base, HEAP)?);
    let exchange = Arc::new(pe.clone());
    let agent = Agent::new(
        pe.data_plane(),
        exchange,
        rings,
        memory.clone(),
        config.clone(),
    )
    .await?;
    Ok(Ctx {
        pe: pe.clone(),
        agent,
        memory,
        config,
    })
}

impl Ctx {
    pub fn me(&self) -> usize {
        self.pe.my_pe()
    }

    pub fn next(&self) -> usize {
        (self.me() + 1) % self.pe.n_pes()
    }

    pub fn prev(&self) -> usize {
        (self.me() + self.pe.n_pes() - 1) % self.pe.n_pes()
    }

    /// Byte `off` of the region of `initiator` in `pe`'s heap.
    pub fn addr(&self, pe: usize, initiator: usize, off: u64) -> u64 {
        self.agent.peer(pe).expect("a PE").base + initiator as u64 * REGION + off
    }

    pub fn key(&self, pe: usize) -> u32 {
        self.agent.peer(pe).expect("a PE").rkey
    }

    pub fn submit(&self, pe: usize, r: Request) -> Pending {
        Box::pin(self.agent.submit(pe, r))
    }

    pub fn write(&self, pe: usize, addr: u64, data: Vec<u8>) -> Pending {
        let rkey = self.key(pe);
        self.submit(pe, Request::Write { addr, rkey, data })
    }

    pub fn read(&self, pe: usize, addr: u64, len: usize) -> Pending {
        let rkey = self.key(pe);
        self.submit(pe, Request::Read { addr, rkey, len })
    }

    pub fn amo(&self, pe: usize, addr: u64, width: Width, op: AmoOp) -> Pending {
        let rkey = self.key(pe);
        self.submit(
            pe,
            Request::Atomic {
                addr,
                rkey,
                width,
                op,
            },
        )
    }

    /// This PE's own heap bytes.
    pub fn own(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.memory.read(addr, &mut out).expect("own heap");
        out
    }

    pub async fn barrier(&self) -> Check {
        self.pe.barrier_all().await.map_err(|e| e.to_string())
    }
}

pub fn ensure(ok: bool, what: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

pub fn ok(r: ferroshmem::Result<Reply>, what: &str) -> std::result::Result<Reply, String> {
    match r {
        Ok(reply) if reply.status == Status::Ok => Ok(reply),
        other => Err(format!("{what}: {other:?}")),
    }
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 7 + seed * 13 + i / 251) as u8)
        .collect()
}

/// A write to the next PE and its read back, and, after a barrier, the previous PE's write
/// in this PE's heap.
async fn rma(c: &Ctx) -> Check {
    let (q, me) = (c.next(), c.me());
    let data = pattern(1000, me);
    ok(c.write(q, c.addr(q, me, 128), data.clone()).await, "write")?;
    let back = ok(c.read(q, c.addr(q, me, 128), 1000).await, "read")?;
    ensure(back.data == data, || {
        "the read brought back what was written".into()
    })?;
    c.barrier().await?;
    let p = c.prev();
    ensure(c.own(c.addr(me, p, 128), 1000) == pattern(1000, p), || {
        "PE's write landed here".into()
    })
}

/// The 8-byte atomics of [`atomics`], from a zero word, with the old value each fetches.
fn eight_byte_steps() -> [(AmoOp, u64); 12] {
    [
        (AmoOp::Swap(5), 0),
        (AmoOp::FetchAdd(10), 5),
        (
            AmoOp::CompareSwap {
                compare: 15,
                swap: 100,
            },
            15,
        ),
        (
            AmoOp::CompareSwap {
                compare: 1,
                swap: 7,
            },
            100,
        ),
        (AmoOp::And(0xF0), 100),
        (AmoOp::Or(0x3), 96),
        (AmoOp::Xor(0xFF), 99),
        (
            AmoOp::MaskedCompareSwap {
                compare: 0,
                compare_mask: 0,
                swap: 0xAB,
                swap_mask: u64::MAX,
            },
            156,
        ),
        (
            AmoOp::MaskedFetchAdd {
                add: 1,
                boundary: 0,
            },
            0xAB,
        ),
        (
            AmoOp::MaskedFetchAdd {
                add: 0xF,
                boundary: u64::MAX,
            },
            0xAC,
        ),
        (AmoOp::FetchAdd(u64::MAX), 0xA3),
        (AmoOp::Fetch, 0xA2),
    ]
}

/// Every atomic on 8- and 4-byte words of the next PE, checked by the values they fetch
/// and, after a barrier, by the previous PE's words in this PE's heap.
async fn atomics(c: &Ctx) -> Check {
    let (q, me) = (c.next(), c.me());
    let word = c.addr(q, me, 0);
    for (op, old) in eight_byte_steps() {
        let got = ok(c.amo(q, word, Width::W8, op).await, "atomic")?;
        ensure(got.value == old, || {
            format!("{op:?} fetched {} for {old}", got.value)
        })?;
    }
    let half = c.addr(q, me, 8);
    for (op, old) in [
        (AmoOp::Swap(0xFFFF_FFFF), 0),
        (AmoOp::FetchAdd(2), 0xFFFF_FFFF),
        (AmoOp::Fetch, 1),
    ] {
        let got = ok(c.amo(q, half, Width::W4, op).await, "4-byte atomic")?;
        ensure(got.value == old, || {
            format!("4-byte {op:?} fetched {} for {old}", got.value)
        })?;
    }
    c.barrier().await?;
    let p = c.prev();
    let words = c.own(c.addr(me, p, 0), 16);
    ensure(words[..8] == 0xA2u64.to_le_bytes(), || {
        format!("the 8-byte word: {words:?}")
    })?;
    ensure(words[8..] == [1, 0, 0, 0, 0, 0, 0, 0], || {
        format!("the 4-byte words: {words:?}")
    })
}

/// A write of many chunks (and not a whole number of blocks) and its read back.
async fn large(c: &Ctx) -> Check {
    let (q, me) = (c.next(), c.me());
    let len = 100 * c.config.max_chunk / 3 + 13;
    let data = pattern(len, me + 1);
    ok(
        c.write(q, c.addr(q, me, 65536), data.clone()).await,
        "large write",
    )?;
    let back = ok(c.read(q, c.addr(q, me, 65536), len).await, "large read")?;
    ensure(back.data == data, || {
        "the large read brought back what was written".into()
    })?;
    c.barrier().await?;
    let p = c.prev();
    ensure(
        c.own(c.addr(me, p, 65536), len) == pattern(len, p + 1),
        || "the large write landed".into(),
    )
}

/// Write k, read it back, then swap a flag to k, for k = 1..=K, none awaited before the
/// next is submitted: each read sees its write, each swap fetches the one before, and the
/// target, watching its own heap meanwhile, never sees a flag ahead of its data. Every other
/// k submits its three requests together (`submit_many`).
async fn ordering(c: &Ctx) -> Check {
    const K: u64 = 120;
    let (q, me, p) = (c.next(), c.me(), c.prev());
    let mut pending: Vec<Pending> = Vec::new();
    for k in 1..=K {
        if k % 2 == 0 {
            // The same three requests placed together (the cpu NIC handler's way).
            let rkey = c.key(q);
            let batch = vec![
                Request::Write {
                    addr: c.addr(q, me, 8192),
                    rkey,
                    data: vec![k as u8; 300],
                },
                Request::Read {
                    addr: c.addr(q, me, 8192),
                    rkey,
                    len: 300,
                },
                Request::Atomic {
                    addr: c.addr(q, me, 16),
                    rkey,
                    width: Width::W8,
                    op: AmoOp::Swap(k),
                },
            ];
            for reply in c.agent.submit_many(q, batch) {
                pending.push(Box::pin(reply));
            }
            continue;
        }
        pending.push(c.write(q, c.addr(q, me, 8192), vec![k as u8; 300]));
        pending.push(c.read(q, c.addr(q, me, 8192), 300));
        pending.push(c.amo(q, c.addr(q, me, 16), Width::W8, AmoOp::Swap(k)));
    }
    let (flag, buf) = (c.addr(me, p, 16), c.addr(me, p, 8192 + 299));
    let watch = async {
        let started = Instant::now();
        loop {
            let f = c
                .memory
                .atomic(flag, Width::W8, AmoOp::Fetch)
                .map_err(|e| e.to_string())?;
            let b = c.own(buf, 1)[0] as u64;
            ensure(b >= f, || format!("flag {f} before its data ({b})"))?;
            if f == K {
                return Ok(());
            }
            ensure(started.elapsed() < Duration::from_secs(60), || {
                "the flag never reached K".into()
            })?;
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
    };
    let replies = async {
        let mut k = 0u64;
        for (i, r) in pending.into_iter().enumerate() {
            let reply = ok(r.await, "ordered request")?;
            match i % 3 {
                0 => k += 1,
                1 => ensure(reply.data == vec![k as u8; 300], || {
                    format!("read {k} saw {:?}", &reply.data[..4])
                })?,
                _ => ensure(reply.value == k - 1, || {
                    format!("swap {k} fetched {}", reply.value)
                })?,
            }
        }
        Ok::<(), String>(())
    };
    tokio::try_join!(watch, replies)?;
    c.barrier().await
}

/// `per_peer` fetch-adds to every PE (this one included), all submitted before any is
/// awaited: every one lands once, and each initiator's fetched values rise.
async fn in_flight(c: &Ctx, per_peer: u64) -> Check {
    let n = c.pe.n_pes();
    let mut pending = Vec::new();
    for _ in 0..per_peer {
        for t in 0..n {
            pending.push((t, c.amo(t, c.addr(t, 0, 24), Width::W8, AmoOp::FetchAdd(1))));
        }
    }
    let mut last = vec![None; n];
    for (t, r) in pending {
        let v = ok(r.await, "fetch-add")?.value;
        ensure(last[t].is_none_or(|l| v > l), || {
            format!("fetched {v} after {:?} from PE {t}", last[t])
        })?;
        last[t] = Some(v);
    }
    c.barrier().await?;
    let total = c
        .memory
        .atomic(c.addr(c.me(), 0, 24), Width::W8, AmoOp::Fetch)
        .map_err(|e| e.to_string())?;
    ensure(total == per_peer * n as u64, || {
        format!("{total} adds landed of {}", per_peer * n as u64)
    })
}

/// A wrong key, ranges leaving the heap, a misaligned atomic and a chunked write whose end
/// leaves the heap all come back with their status.
async fn refusals(c: &Ctx) -> Check {
    let (q, me) = (c.next(), c.me());
    let heap = c.agent.peer(q).expect("a PE");
    let end = heap.base + heap.size as u64;
    let expect = |r: ferroshmem::Result<Reply>, status: Status, what: &str| match r {
        Ok(reply) if reply.status == status => Ok(()),
        other => Err(format!("{what}: {other:?}, not {status:?}")),
    };
    let bad_key = Request::Write {
        addr: c.addr(q, me, 4096),
        rkey: heap.rkey ^ 0x8000_0000,
        data: vec![9; 64],
    };
    expect(
        c.submit(q, bad_key).await,
        Status::RemoteAccess,
        "wrong key",
    )?;
    let bad_amo_key = Request::Atomic {
        addr: c.addr(q, me, 32),
        rkey: heap.rkey + 2,
        width: Width::W8,
        op: AmoOp::Swap(1),
    };
    expect(
        c.submit(q, bad_amo_key).await,
        Status::RemoteAccess,
        "atomic with a wrong key",
    )?;
    expect(
        c.write(q, end - 4, vec![9; 8]).await,
        Status::RemoteAccess,
        "write across the end",
    )?;
    expect(
        c.read(q, heap.base - 8, 8).await,
        Status::RemoteAccess,
        "read before the base",
    )?;
    expect(
        c.amo(q, end, Width::W8, AmoOp::Fetch).await,
        Status::RemoteAccess,
        "atomic past the end",
    )?;
    expect(
        c.amo(q, c.addr(q, me, 36), Width::W8, AmoOp::Fetch).await,
        Status::RemoteInvalidRequest,
        "misaligned atomic",
    )?;
    let chunk = c.config.max_chunk as u64;
    let tail = end - chunk - chunk / 2;
    expect(
        c.write(q, tail, vec![9; 2 * chunk as usize]).await,
        Status::RemoteAccess,
        "chunked write across the end",
    )
}

/// After [`refusals`]: the refused requests changed nothing and the target serves on.
async fn unharmed(c: &Ctx) -> Check {
    let (q, me) = (c.next(), c.me());
    let heap = c.agent.peer(q).expect("a PE");
    let chunk = c.config.max_chunk as u64;
    let tail = heap.base + heap.size as u64 - chunk - chunk / 2;
    let after = ok(
        c.read(q, tail, chunk as usize).await,
        "read after the refusals",
    )?;
    ensure(after.data.iter().all(|&b| b == 0), || {
        "a refused write changed nothing".into()
    })?;
    let back = ok(
        c.read(q, c.addr(q, me, 4096), 64).await,
        "read of the wrong key's place",
    )?;
    ensure(back.data.iter().all(|&b| b == 0), || {
        "the wrong key wrote nothing".into()
    })?;
    ok(
        c.write(q, c.addr(q, me, 4096), vec![5; 64]).await,
        "a write after the refusals",
    )?;
    let back = ok(c.read(q, c.addr(q, me, 4096), 64).await, "its read")?;
    ensure(back.data == vec![5; 64], || "the target serves on".into())?;
    c.barrier().await?;
    let own_end = c.memory.base() + c.memory.size() as u64;
    ensure(
        c.own(own_end - 2 * chunk, 2 * chunk as usize)
            .iter()
            .all(|&b| b == 0),
        || "this heap's end is untouched".into(),
    )
}

/// Every scenario, in order, on agents made with `config`. A failure panics, so that the
/// job fails at once (the other PEs learn that this one was lost) instead of leaving them in
/// a barrier.
pub async fn scenarios(pe: Pe, config: AgentConfig, per_peer: u64) -> Check {
    let me = pe.my_pe();
    if let Err(e) = every_scenario(pe, config, per_peer).await {
        panic!("PE {me}: {e}");
    }
    println!("PE {me}: every NIC agent scenario passed");
    Ok(())
}

async fn every_scenario(pe: Pe, config: AgentConfig, per_peer: u64) -> Check {
    let c = make(&pe, config).await.map_err(|e| e.to_string())?;
    rma(&c).await.map_err(|e| format!("rma: {e}"))?;
    atomics(&c).await.map_err(|e| format!("atomics: {e}"))?;
    large(&c).await.map_err(|e| format!("large: {e}"))?;
    ordering(&c).await.map_err(|e| format!("ordering: {e}"))?;
    in_flight(&c, per_peer)
        .await
        .map_err(|e| format!("in_flight: {e}"))?;
    refusals(&c).await.map_err(|e| format!("refusals: {e}"))?;
    unharmed(&c).await.map_err(|e| format!("unharmed: {e}"))?;
    c.barrier().await?;
    let rings = c.agent.shutdown().await.ok_or("the rings come back")?;
    pe.free(rings).await.map_err(|e| e.to_string())
}
