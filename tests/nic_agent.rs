//! The `cpu` NIC handler's remote agent (`gpu::nic`): writes, reads, every atomic, chunked
//! transfers, per-peer ordering, thousands of requests in flight, refused keys and ranges,
//! timeouts and shutdown, in `run_local` jobs (every peer mapped) and across namespace
//! hosts (2 × 1 and 2 × 2 PEs, peers of the other host over the fabric), and a killed
//! target failing its initiator's requests with `PeerLost`. The heaps are host memory
//! (`HostMemory`); the protocol between the agents is what is tested.
//!
//! The PE program of the host jobs is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_NIC_SCENARIO` is set, and does nothing otherwise. Host tests need root and
//! libfabric, and say so and skip without them.

mod common;
mod nic_scenarios;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::netns::{self, Hosts};
use ferroshmem::gpu::nic::{
    Agent, AgentConfig, AmoOp, HeapMemory, HostMemory, Request, Status, Width,
};
use ferroshmem::{Error, Pe};
use nic_scenarios::{default_rings, make, scenarios, small, Check, Ctx, BASE, HEAP};

const SCENARIO: &str = "FSH_NIC_SCENARIO";

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
    local(2, default_rings(), 3000);
}

/// WQEs posted to send queues, performed by the cpu NIC handler through the agents.
#[test]
fn the_handler_performs_posted_wqes_locally_on_three_pes() {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let results = common::runtime()
        .block_on(ferroshmem::run_local(3, |pe| async move {
            nic_scenarios::handler::handler(&pe, small()).await
        }))
        .expect("the job runs");
    for (pe, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("PE {pe}: {e}"));
    }
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
            let refused =
                Agent::new(pe.data_plane(), Arc::new(pe.clone()), rings, memory, bad).await;
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
            // A read longer than any work request is refused before it is split up.
            let huge = Request::Read {
                addr: c.addr(1, 0, 0),
                rkey: c.key(1),
                len: usize::MAX,
            };
            let refused = c.agent.submit(1, huge).await;
            assert!(
                matches!(refused, Err(Error::InvalidArgument(ref why)) if why.contains("at most")),
                "{refused:?}"
            );
            pe.barrier_all().await?;
            if pe.my_pe() == 1 {
                c.agent.shutdown().await;
                pe.barrier_all().await?;
                return Ok::<(), Error>(());
            }
            pe.barrier_all().await?;
            let started = Instant::now();
            let late = c.write(1, c.addr(1, 0, 0), vec![1; 8]);
            let late = tokio::time::timeout(Duration::from_secs(10), late).await;
            assert!(matches!(late, Ok(Err(Error::Timeout { .. }))), "{late:?}");
            assert!(started.elapsed() >= Duration::from_millis(300));
            let waiting = c.write(1, c.addr(1, 0, 0), vec![1; 8]);
            let Ctx { agent, .. } = c;
            agent.shutdown().await;
            let ended = tokio::time::timeout(Duration::from_secs(10), waiting).await;
            assert!(matches!(ended, Ok(Err(Error::Shutdown))), "{ended:?}");
            Ok::<(), Error>(())
        }))
        .expect("the job runs");
    for r in results {
        r.expect("every PE");
    }
}

/// A heap whose deferred writes land only when flushed (as a GPU heap's queued copies do),
/// each PE's kept where the other PE of the job can look at it; with `address_order`, a
/// flush lands them in address order (as a GPU heap's runs of adjacent copies do). `log`
/// holds the address of each write as it landed.
struct DeferringMemory {
    landed: HostMemory,
    deferred: Mutex<Vec<(u64, Vec<u8>)>>,
    address_order: bool,
    log: Mutex<Vec<u64>>,
}

impl DeferringMemory {
    fn new(pe: &Pe, address_order: bool) -> ferroshmem::Result<DeferringMemory> {
        Ok(DeferringMemory {
            landed: HostMemory::new(BASE + pe.my_pe() as u64 * (1 << 32), HEAP)?,
            deferred: Mutex::default(),
            address_order,
            log: Mutex::default(),
        })
    }

    fn land(&self, addr: u64, data: &[u8]) -> ferroshmem::Result<()> {
        self.log.lock().expect("not poisoned").push(addr);
        self.landed.write(addr, data)
    }

    fn apply_deferred(&self) -> ferroshmem::Result<()> {
        let mut deferred = std::mem::take(&mut *self.deferred.lock().expect("not poisoned"));
        if self.address_order {
            deferred.sort_by_key(|&(addr, _)| addr);
        }
        deferred
            .iter()
            .try_for_each(|(addr, data)| self.land(*addr, data))
    }
}

impl HeapMemory for DeferringMemory {
    fn base(&self) -> u64 {
        self.landed.base()
    }
    fn size(&self) -> usize {
        self.landed.size()
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> ferroshmem::Result<()> {
        self.apply_deferred()?;
        self.landed.read(addr, out)
    }
    fn write(&self, addr: u64, data: &[u8]) -> ferroshmem::Result<()> {
        self.apply_deferred()?;
        self.land(addr, data)
    }
    fn write_deferred(&self, addr: u64, data: &[u8]) -> ferroshmem::Result<()> {
        let mut deferred = self.deferred.lock().expect("not poisoned");
        deferred.push((addr, data.to_vec()));
        Ok(())
    }
    fn flush(&self) -> ferroshmem::Result<()> {
        self.apply_deferred()
    }
    fn atomic(&self, addr: u64, width: Width, op: AmoOp) -> ferroshmem::Result<u64> {
        self.apply_deferred()?;
        self.landed.atomic(addr, width, op)
    }
}

/// Runs two PEs whose agents land into [`DeferringMemory`] heaps (`address_order` as given):
/// PE 0 runs `on_pe0` with its agent and PE 1's heap, then both shut their agents down.
fn with_deferring_heaps<F, Fut>(address_order: bool, on_pe0: F)
where
    F: Fn(Agent, Arc<DeferringMemory>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ferroshmem::Result<Agent>> + Send,
{
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let heaps: Arc<Mutex<Vec<Option<Arc<DeferringMemory>>>>> = Arc::new(Mutex::new(vec![None; 2]));
    let results = common::runtime()
        .block_on(ferroshmem::run_local(2, move |pe| {
            let (heaps, on_pe0) = (heaps.clone(), on_pe0.clone());
            async move {
                let config = small();
                let rings = pe.malloc::<u64>(config.ring_words(2)).await?;
                let memory = Arc::new(DeferringMemory::new(&pe, address_order)?);
                heaps.lock().expect("not poisoned")[pe.my_pe()] = Some(memory.clone());
                let exchange = Arc::new(pe.clone());
                let mut agent =
                    Agent::new(pe.data_plane(), exchange, rings, memory, config).await?;
                pe.barrier_all().await?;
                if pe.my_pe() == 0 {
                    let target = heaps.lock().expect("not poisoned")[1]
                        .clone()
                        .expect("PE 1's heap");
                    agent = on_pe0(agent, target).await?;
                }
                pe.barrier_all().await?;
                agent.shutdown().await;
                Ok::<(), Error>(())
            }
        }))
        .expect("the job runs");
    for r in results {
        r.expect("every PE");
    }
}

/// A write's reply comes only once the write is visible in the target's heap, however the
/// heap defers its writes: PE 0 keeps 64 small writes in flight to PE 1 and, as each reply
/// comes, finds its bytes in PE 1's heap without any further request.
#[test]
fn a_write_is_visible_in_the_heap_before_its_reply_comes() {
    with_deferring_heaps(false, |agent, target| async move {
        let peer = agent.peer(1).expect("PE 1");
        let writes: Vec<_> = (0..64u64)
            .map(|k| {
                let write = Request::Write {
                    addr: peer.base + 8 * k,
                    rkey: peer.rkey,
                    data: (k + 1).to_le_bytes().to_vec(),
                };
                (k, agent.submit(1, write))
            })
            .collect();
        for (k, reply) in writes {
            assert_eq!(reply.await?.status, Status::Ok);
            let mut seen = [0; 8];
            target.landed.read(peer.base + 8 * k, &mut seen)?;
            assert_eq!(
                u64::from_le_bytes(seen),
                k + 1,
                "write {k} replied to before it landed"
            );
        }
        Ok(agent)
    });
}

/// An ordered write (a fenced WQE: the device library's signal set) lands only after the
/// writes before it, even where the heap lands a batch's deferred writes in address order:
/// PE 0 sends PE 1, in one message, data at a high address and then an ordered 8-byte flag
/// below it; PE 1's heap must show the data first.
#[test]
fn an_ordered_write_lands_after_the_writes_before_it() {
    with_deferring_heaps(true, |agent, target| async move {
        let peer = agent.peer(1).expect("PE 1");
        let (data, flag) = (peer.base + 4096, peer.base);
        let requests = vec![
            Request::Write {
                addr: data,
                rkey: peer.rkey,
                data: vec![7; 64],
            },
            Request::OrderedWrite {
                addr: flag,
                rkey: peer.rkey,
                data: 1u64.to_le_bytes().to_vec(),
            },
        ];
        for reply in agent.submit_many(1, requests) {
            assert_eq!(reply.await?.status, Status::Ok);
        }
        let log = target.log.lock().expect("not poisoned").clone();
        let at = |addr| log.iter().position(|&a| a == addr);
        assert!(
            at(data).zip(at(flag)).is_some_and(|(d, f)| d < f),
            "the flag landed before the data it follows: {log:x?}"
        );
        Ok(agent)
    });
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
                "default" => scenarios(pe, default_rings(), 1000).await,
                "handler" => nic_scenarios::handler::handler(&pe, small()).await,
                "kill-handler" => lose_target_wqes(pe).await,
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

/// Runs `scenario` on 2 hosts × `per_host` PEs; each PE must say `passed`.
fn across_hosts(per_host: usize, scenario: &str, passed: &str) {
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
    assert_eq!(all.matches(passed).count(), 2 * per_host, "{all}");
    for address in &hosts.addresses {
        let here = all
            .matches(&format!("runs on {}", netns::host_name(address)))
            .count();
        assert_eq!(here, per_host, "{all}");
    }
}

#[test]
fn every_scenario_passes_across_two_hosts_of_one_pe() {
    across_hosts(1, "default", "every NIC agent scenario passed");
}

#[test]
fn every_scenario_passes_across_two_hosts_of_two_pes() {
    across_hosts(2, "small", "every NIC agent scenario passed");
}

#[test]
fn the_handler_performs_posted_wqes_across_two_hosts() {
    across_hosts(1, "handler", "the NIC handler scenario passed");
}

/// Kills the last PE (on the second host) while PE 0 has requests in flight to it: they
/// fail with `PeerLost` within the job's loss-detection bound.
#[test]
fn a_killed_target_fails_the_requests_waiting_for_it_with_peer_lost() {
    killed_target("kill", "PE 0: requests failed with", "PeerLost of PE 3");
}

/// The same through the cpu NIC handler: WQEs in flight to the killed PE end in error CQEs
/// (TRANSPORT_RETRY_EXC_ERR), so whoever waits on the queue is not left waiting.
#[test]
fn a_killed_target_fails_the_wqes_waiting_for_it_with_error_cqes() {
    killed_target(
        "kill-handler",
        "PE 0: WQEs failed with",
        "TRANSPORT_RETRY_EXC_ERR",
    );
}

/// Runs `scenario` on 2 hosts × 2 PEs, kills PE 3 once every PE is ready, and checks that
/// PE 0's line starting with `reported` says `expected` within 10 s of the kill.
fn killed_target(scenario: &str, reported: &str, expected: &str) {
    use std::io::BufRead;
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let mut child = job(&hosts, 2, scenario)
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
                common::host_pe::kill_pe_3(&all);
                killed = Some(Instant::now());
            }
        }
        if line.contains(reported) && report.is_none() {
            report = killed.map(|k| (k.elapsed(), line.clone()));
        }
    }
    let status = child.wait().expect("the launcher ends");
    drop(guard);
    assert!(!status.success(), "the job fails:\n{all}");
    let (after, line) = report.unwrap_or_else(|| panic!("PE 0 reported its requests' end:\n{all}"));
    assert!(line.contains(expected), "{line}\n{all}");
    assert!(after < Duration::from_secs(10), "{after:?}:\n{all}");
    eprintln!("{line}: {after:?} after the kill");
}

/// [`lose_target`] through the cpu NIC handler: PE 0 keeps 32 inline-write WQEs in flight to
/// the last PE and waits for their CQEs until a CQE says they failed.
async fn lose_target_wqes(pe: Pe) -> Check {
    use ferroshmem::gpu::ibgda::{
        Consumer, Producer, QueueLayout, QueueMemory, Syndrome, WorkRequest, WqeError, WqeFlags,
    };
    use ferroshmem::gpu::nic::{Failure, Handler};
    use nic_scenarios::handler::{Local, LOCAL_BASE};
    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let Ctx { agent, .. } = make(&pe, small()).await.map_err(|e| e.to_string())?;
    let agent = Arc::new(agent);
    let (me, victim) = (pe.my_pe(), pe.n_pes() - 1);
    pe.barrier_all().await.map_err(|e| e.to_string())?;
    println!("PE {me} ready, pid {}", std::process::id());
    if me != 0 {
        let _ = stop.recv().await;
        std::mem::forget(agent);
        return Ok(());
    }
    let queue = QueueMemory::host(QueueLayout::new(64, 128).map_err(|e| e.to_string())?, 9)
        .map_err(|e| e.to_string())?;
    let local = Arc::new(Local::new(
        HostMemory::new(LOCAL_BASE, 4096).map_err(|e| e.to_string())?,
    ));
    let handler = Handler::start(
        me,
        vec![(victim, Consumer::new(queue.clone()))],
        agent.clone(),
        local,
        Failure::default(),
    )
    .map_err(|e| e.to_string())?;
    let there = agent.peer(victim).ok_or("no victim")?;
    let producer = Producer::new(queue, Duration::from_secs(60));
    let ended = tokio::task::spawn_blocking(move || loop {
        for _ in 0..32 {
            let write = WorkRequest::WriteInline {
                data: vec![1; 64],
                remote: there.base + 4096,
                rkey: there.rkey,
            };
            producer.post(&write, WqeFlags::default())?;
        }
        producer.quiet()?;
    })
    .await
    .map_err(|e| e.to_string())?;
    let said = match ended {
        Err::<(), WqeError>(WqeError::Completion { syndrome, .. }) => {
            format!("{syndrome:#04x} {}", Syndrome::name(syndrome))
        }
        other => format!("{other:?}"),
    };
    println!("PE 0: WQEs failed with {said}");
    std::mem::forget(handler);
    std::mem::forget(agent);
    Ok(())
}
