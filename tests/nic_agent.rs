//! The `cpu` NIC handler's remote agent (`gpu::nic`): writes, reads, every atomic, chunked
//! transfers, per-peer ordering, thousands of requests in flight, refused keys and ranges,
//! timeouts and shutdown, in `run_local` jobs (every peer mapped) and across namespace
//! hosts (2 × 1 and 2 × 2 PEs, peers of the other host over the fabric), and a killed
//! target failing its initiator's requests with `PeerLost`. The heaps are host memory
//! ([`HostMemory`]); the protocol between the agents is what is tested.
//!
//! The PE program of the host jobs is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_NIC_SCENARIO` is set, and does nothing otherwise. Host tests need root and
//! libfabric, and say so and skip without them.

mod common;

use std::future::Future;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::netns::{self, Hosts};
use ferroshmem::gpu::nic::{
    Agent, AgentConfig, AmoOp, HeapMemory, HostMemory, Reply, Request, Status, Width,
};
use ferroshmem::{Error, Pe};
use ferroshmem_runtime::{Exchange, ExchangeFuture};

const SCENARIO: &str = "FSH_NIC_SCENARIO";
/// Each PE's heap, and the part of it each initiator uses.
const HEAP: usize = 8 << 20;
const REGION: u64 = 1 << 20;
/// Where the heaps claim to be (each PE's elsewhere, as GPU heaps are).
const BASE: u64 = 0x7000_0000_0000;

type Check = std::result::Result<(), String>;
/// A request's reply, to come.
type Pending = std::pin::Pin<Box<dyn Future<Output = ferroshmem::Result<Reply>> + Send>>;

/// The control plane of one PE, as the agent sees it.
#[derive(Debug)]
struct PeExchange(Pe);

impl Exchange for PeExchange {
    fn exchange(
        &self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> ExchangeFuture<'_> {
        Box::pin(self.0.exchange(group, index, size, payload))
    }
}

/// Rings small enough that records skip to the ring's start and credit runs out.
fn small() -> AgentConfig {
    AgentConfig {
        ring_blocks: 256,
        max_chunk: 4096,
        timeout: None,
    }
}

/// A PE with its agent and heap.
struct Ctx {
    pe: Pe,
    agent: Agent,
    memory: Arc<HostMemory>,
    config: AgentConfig,
}

async fn make(pe: &Pe, config: AgentConfig) -> ferroshmem::Result<Ctx> {
    let rings = pe.malloc::<u64>(config.ring_words(pe.n_pes())).await?;
    let base = BASE + pe.my_pe() as u64 * (1 << 32);
    let memory = Arc::new(HostMemory::new(base, HEAP)?);
    let exchange = Arc::new(PeExchange(pe.clone()));
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
    fn me(&self) -> usize {
        self.pe.my_pe()
    }

    fn next(&self) -> usize {
        (self.me() + 1) % self.pe.n_pes()
    }

    fn prev(&self) -> usize {
        (self.me() + self.pe.n_pes() - 1) % self.pe.n_pes()
    }

    /// Byte `off` of the region of `initiator` in `pe`'s heap.
    fn addr(&self, pe: usize, initiator: usize, off: u64) -> u64 {
        self.agent.peer(pe).expect("a PE").base + initiator as u64 * REGION + off
    }

    fn key(&self, pe: usize) -> u32 {
        self.agent.peer(pe).expect("a PE").rkey
    }

    fn submit(&self, pe: usize, r: Request) -> Pending {
        Box::pin(self.agent.submit(pe, r))
    }

    fn write(&self, pe: usize, addr: u64, data: Vec<u8>) -> Pending {
        let rkey = self.key(pe);
        self.submit(pe, Request::Write { addr, rkey, data })
    }

    fn read(&self, pe: usize, addr: u64, len: usize) -> Pending {
        let rkey = self.key(pe);
        self.submit(pe, Request::Read { addr, rkey, len })
    }

    fn amo(&self, pe: usize, addr: u64, width: Width, op: AmoOp) -> Pending {
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
    fn own(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.memory.read(addr, &mut out).expect("own heap");
        out
    }

    async fn barrier(&self) -> Check {
        self.pe.barrier_all().await.map_err(|e| e.to_string())
    }
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn ok(r: ferroshmem::Result<Reply>, what: &str) -> std::result::Result<Reply, String> {
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

/// A write, a read back, and every atomic on 8- and 4-byte words of the next PE, checked by
/// what comes back and, after a barrier, by the previous PE's bytes in this PE's heap.
async fn rma_and_atomics(c: &Ctx) -> Check {
    let (q, me) = (c.next(), c.me());
    let data = pattern(1000, me);
    ok(c.write(q, c.addr(q, me, 128), data.clone()).await, "write")?;
    let back = ok(c.read(q, c.addr(q, me, 128), 1000).await, "read")?;
    ensure(back.data == data, || {
        "the read brought back what was written".into()
    })?;
    let word = c.addr(q, me, 0);
    let steps: [(AmoOp, u64); 12] = [
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
    ];
    for (op, old) in steps {
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
    ensure(c.own(c.addr(me, p, 128), 1000) == pattern(1000, p), || {
        "PE's write landed here".into()
    })?;
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
/// target, watching its own heap meanwhile, never sees a flag ahead of its data.
async fn ordering(c: &Ctx) -> Check {
    const K: u64 = 120;
    let (q, me, p) = (c.next(), c.me(), c.prev());
    let mut pending = Vec::new();
    for k in 1..=K {
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
/// leaves the heap all come back with their status, change nothing, and the target goes on
/// serving.
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
    )?;
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

/// Every scenario, in order, on agents made with `config`.
async fn scenarios(pe: Pe, config: AgentConfig, per_peer: u64) -> Check {
    let c = make(&pe, config).await.map_err(|e| e.to_string())?;
    rma_and_atomics(&c)
        .await
        .map_err(|e| format!("rma_and_atomics: {e}"))?;
    large(&c).await.map_err(|e| format!("large: {e}"))?;
    ordering(&c).await.map_err(|e| format!("ordering: {e}"))?;
    in_flight(&c, per_peer)
        .await
        .map_err(|e| format!("in_flight: {e}"))?;
    refusals(&c).await.map_err(|e| format!("refusals: {e}"))?;
    c.barrier().await?;
    let rings = c.agent.shutdown().await.ok_or("the rings come back")?;
    pe.free(rings).await.map_err(|e| e.to_string())?;
    println!("PE {}: every NIC agent scenario passed", pe.my_pe());
    Ok(())
}

fn local(n: usize, config: AgentConfig, per_peer: u64) {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let results = common::runtime()
        .block_on(ferroshmem::run_local(n, move |pe| {
            scenarios(pe, config.clone(), per_peer)
        }))
        .expect("the job runs");
    for (pe, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("{n} PEs, PE {pe}: {e}"));
    }
}

#[test]
fn every_scenario_passes_locally_on_four_pes_with_small_rings() {
    local(4, small(), 3000);
}

#[test]
fn every_scenario_passes_locally_on_two_pes_with_the_default_rings() {
    local(2, AgentConfig::default(), 3000);
}

/// A request to a PE whose agent has stopped times out; one still waiting when its own
/// agent stops fails with `Shutdown`; bad configs and PEs are refused.
#[test]
fn timeouts_shutdown_and_bad_arguments_end_requests_with_typed_errors() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let results = common::runtime()
        .block_on(ferroshmem::run_local(2, |pe| async move {
            let bad = AgentConfig {
                ring_blocks: 64,
                max_chunk: 4096,
                timeout: None,
            };
            let rings = pe.malloc::<u64>(bad.ring_words(2)).await?;
            let memory = Arc::new(HostMemory::new(BASE, HEAP)?);
            let refused = Agent::new(
                pe.data_plane(),
                Arc::new(PeExchange(pe.clone())),
                rings,
                memory,
                bad,
            )
            .await;
            assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
            let config = AgentConfig {
                timeout: Some(Duration::from_millis(300)),
                ..small()
            };
            let c = make(&pe, config).await?;
            let out_of_range = c.agent.submit(7, Request::Nop).await;
            assert!(
                matches!(out_of_range, Err(Error::PeOutOfRange { pe: 7, .. })),
                "{out_of_range:?}"
            );
            assert_eq!(c.agent.submit(1, Request::Nop).await?.status, Status::Ok);
            pe.barrier_all().await?;
            if pe.my_pe() == 1 {
                c.agent.shutdown().await;
                pe.barrier_all().await?;
                return Ok::<(), Error>(());
            }
            pe.barrier_all().await?;
            let started = Instant::now();
            let late = c.write(1, c.addr(1, 0, 0), vec![1; 8]).await;
            assert!(matches!(late, Err(Error::Timeout { .. })), "{late:?}");
            assert!(started.elapsed() >= Duration::from_millis(300));
            let waiting = c.write(1, c.addr(1, 0, 0), vec![1; 8]);
            let Ctx { agent, .. } = c;
            agent.shutdown().await;
            let ended = waiting.await;
            assert!(matches!(ended, Err(Error::Shutdown)), "{ended:?}");
            Ok::<(), Error>(())
        }))
        .expect("the job runs");
    for r in results {
        r.expect("every PE");
    }
}

#[test]
fn pe_entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let rt = common::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let scenario = scenario.clone();
        async move {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            println!("PE {} runs on {}", pe.my_pe(), host.trim());
            match scenario.as_str() {
                "small" => scenarios(pe, small(), 1000).await,
                "default" => scenarios(pe, AgentConfig::default(), 1000).await,
                _ => lose_target(pe).await,
            }
        }
    }));
    match results {
        Ok(r) if r.iter().all(|r| r.is_ok()) => {}
        other => {
            eprintln!("{other:?}");
            std::process::exit(1);
        }
    }
}

/// PE 0 keeps 32 writes in flight to the last PE (on the other host) until they fail; the
/// test kills the last PE's process once every PE said `ready`. PE 0 says what its requests
/// ended with; the others wait for the launcher's SIGTERM.
async fn lose_target(pe: Pe) -> Check {
    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let c = make(&pe, small()).await.map_err(|e| e.to_string())?;
    let (me, victim) = (pe.my_pe(), pe.n_pes() - 1);
    c.barrier().await?;
    println!("PE {me} ready, pid {}", std::process::id());
    if me != 0 {
        let _ = stop.recv().await;
        println!("PE {me} stopped by SIGTERM");
        std::mem::forget(c);
        return Ok(());
    }
    let mut served = 0u64;
    let outcome = loop {
        let window: Vec<_> = (0..32)
            .map(|_| c.write(victim, c.addr(victim, 0, 0), vec![1; 512]))
            .collect();
        let mut failed = None;
        for w in window {
            match w.await {
                Ok(_) => served += 1,
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            break e;
        }
    };
    match outcome {
        Error::PeerLost { pe: lost, .. } => {
            println!("PE 0: requests failed with PeerLost of PE {lost} after {served} served")
        }
        other => println!("PE 0: requests failed with {other:?}"),
    }
    std::mem::forget(c);
    Ok(())
}

/// `ferroshmem run` of [`pe_entry`] as `scenario`, `per_host` PEs on each of `hosts`.
fn job(hosts: &Hosts, per_host: usize, scenario: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
    cmd.args([
        "run",
        "--grace",
        "30s",
        "--hosts",
        &hosts.hosts_arg(per_host),
        "--rsh",
    ])
    .arg(&hosts.agent)
    .arg("--")
    .arg(std::env::current_exe().expect("test binary"))
    .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
    .env(SCENARIO, scenario)
    .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
    .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
    .env("RUST_BACKTRACE", "0");
    cmd
}

fn across_hosts(per_host: usize, scenario: &str) {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let started = Instant::now();
    let out = job(&hosts, per_host, scenario)
        .output()
        .expect("the launcher starts");
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "2 hosts x {per_host} PEs, {scenario}: {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    assert!(out.status.success(), "{all}");
    assert_eq!(
        all.matches("every NIC agent scenario passed").count(),
        2 * per_host,
        "{all}"
    );
    for address in &hosts.addresses {
        let here = all
            .matches(&format!("runs on {}", netns::host_name(address)))
            .count();
        assert_eq!(here, per_host, "{all}");
    }
}

#[test]
fn every_scenario_passes_across_two_hosts_of_one_pe() {
    across_hosts(1, "default");
}

#[test]
fn every_scenario_passes_across_two_hosts_of_two_pes() {
    across_hosts(2, "small");
}

/// Kills the last PE (on the second host) while PE 0 has requests in flight to it: they
/// fail with `PeerLost` within the job's loss-detection bound.
#[test]
fn a_killed_target_fails_the_requests_waiting_for_it_with_peer_lost() {
    use std::io::BufRead;
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let mut child = job(&hosts, 2, "kill")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the launcher starts");
    let stdout = child.stdout.take().expect("stdout");
    let pid = child.id();
    let guard = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(90));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let (mut all, mut ready, mut killed, mut report) = (String::new(), 0, None, None);
    for line in std::io::BufReader::new(stdout)
        .lines()
        .map_while(|l| l.ok())
    {
        all.push_str(&line);
        all.push('\n');
        if line.contains(" ready, pid ") {
            ready += 1;
            if ready == 4 {
                let victim = all
                    .lines()
                    .find_map(|l| {
                        l.split_once("PE 3 ready, pid ")?
                            .1
                            .trim()
                            .parse::<i32>()
                            .ok()
                    })
                    .and_then(rustix::process::Pid::from_raw)
                    .unwrap_or_else(|| panic!("PE 3 said its pid:\n{all}"));
                rustix::process::kill_process(victim, rustix::process::Signal::KILL)
                    .expect("kill PE 3");
                killed = Some(Instant::now());
            }
        }
        if line.contains("PE 0: requests failed with") && report.is_none() {
            report = killed.map(|k| (k.elapsed(), line.clone()));
        }
    }
    let status = child.wait().expect("the launcher ends");
    drop(guard);
    assert!(!status.success(), "the job fails:\n{all}");
    let (after, line) = report.unwrap_or_else(|| panic!("PE 0 reported its requests' end:\n{all}"));
    assert!(line.contains("PeerLost of PE 3"), "{line}\n{all}");
    assert!(after < Duration::from_secs(10), "{after:?}:\n{all}");
    eprintln!("PE 0's requests failed with PeerLost {after:?} after the kill");
}
