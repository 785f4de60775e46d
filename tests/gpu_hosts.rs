//! GPU PEs on different nodes: the network path (IBGDA with the `cpu` NIC handler). Each
//! "host" is a UTS namespace with its own host name on this machine (`scripts/uts-rsh`), so
//! PEs of different hosts are on different nodes, share the loopback for the fabric, and
//! reach each other's GPU heaps only through the send queues their kernels write. The device
//! scenario calls every device-library function on the next PE and checks the values; the
//! host scenario does host-initiated `put`, `p`, `get`, `g` on the next PE (the NIC agent's
//! path). The jobs are 2 hosts × 1 PE (every peer remote) and 2 hosts × 2 PEs (NVLink-mapped
//! within a host, the network between).
//!
//! Skipped, saying why, without a GPU or without root (namespaces).

mod gpu_scenarios;

use std::path::PathBuf;
use std::time::Instant;

const SCENARIO: &str = "FSH_GPU_HOSTS_SCENARIO";

/// Why this machine cannot run these tests, if it cannot.
fn cannot_run() -> Option<String> {
    if let Err(e) = ferroshmem::gpu::detect() {
        return Some(e.to_string());
    }
    // Namespaces need root.
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    (!root).then(|| "not root: UTS namespaces cannot be made".to_string())
}

fn launcher() -> PathBuf {
    std::env::var_os("FERROSHMEM_LAUNCHER")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ferroshmem").into())
}

/// The remote-shell agent that makes UTS "hosts" (from the working tree where the tests run,
/// else from the sources).
fn uts_rsh() -> PathBuf {
    let here = PathBuf::from("scripts/uts-rsh");
    if here.exists() {
        return here.canonicalize().unwrap_or(here);
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/uts-rsh"))
}

/// Runs the device scenario as a job placed by `hosts` (`--hosts` syntax) of `n` PEs.
fn hosts_job(test: &str, hosts: &str, n: usize) {
    if let Some(why) = cannot_run() {
        eprintln!("{test}: skipped, {why}");
        return;
    }
    let started = Instant::now();
    let out = std::process::Command::new(launcher())
        .args([
            "run",
            "--hosts",
            hosts,
            "--root-address",
            "127.0.0.1",
            "--timeout",
            "240s",
        ])
        .arg("--rsh")
        .arg(uts_rsh())
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "gpu_hosts_pe_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, "device_functions,host_ops")
        .env("FERROSHMEM_SYMMETRIC_SIZE", "256M")
        .env("FERROSHMEM_FABRIC_ADDRESS", "127.0.0.1")
        .output()
        .expect("the ferroshmem launcher starts");
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "the GPU job across hosts {hosts} failed in {:?}",
        started.elapsed()
    );
    for name in ["device_functions", "host_ops"] {
        assert!(
            text.contains(&format!("GPU scenario {name}: ok on {n} PEs")),
            "scenario {name} did not report success"
        );
    }
}

#[test]
fn two_hosts_one_pe_each() {
    hosts_job("two_hosts_one_pe_each", "ha:1,hb:1", 2);
}

#[test]
fn two_hosts_two_pes_each() {
    hosts_job("two_hosts_two_pes_each", "ha:2,hb:2", 4);
}

/// A PE of the jobs above (does nothing unless one of them started it).
#[test]
fn gpu_hosts_pe_entry() {
    let Some(which) = std::env::var_os(SCENARIO) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pe = ferroshmem::init().await.unwrap();
        let gpu = pe.init_gpu().await.unwrap();
        let mut all = gpu_scenarios::all();
        all.push(("host_ops", |p, g| Box::pin(host_ops(p, g))));
        let which = which.to_string_lossy().into_owned();
        for (name, scenario) in all {
            if !which.split(',').any(|w| w == name) {
                continue;
            }
            let started = Instant::now();
            if let Err(e) = scenario(pe.clone(), gpu.clone()).await {
                eprintln!("GPU scenario {name} FAILED on PE {}: {e}", pe.my_pe());
                panic!("{e}");
            }
            pe.barrier_all().await.unwrap();
            if pe.my_pe() == 0 {
                eprintln!(
                    "GPU scenario {name}: ok on {} PEs in {:?}",
                    pe.n_pes(),
                    started.elapsed()
                );
            }
        }
        drop(gpu);
        pe.finalize().await.unwrap();
    });
}

/// Host-initiated `put`, `p`, `get` and `g` on the next PE, whatever its route.
async fn host_ops(pe: ferroshmem::Pe, g: ferroshmem::gpu::GpuPe) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::HostBuffer;
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    let buf = g.calloc::<u64>(64).await?;
    let data: Vec<u64> = (0..32).map(|i| (me * 1000 + i) as u64).collect();
    g.put(
        buf.slice(0..32),
        &HostBuffer::from_slice(g.context(), &data)?,
        next,
    )
    .await?;
    g.p(buf.at(40), me as u64 + 7, next).await?;
    let mut back = HostBuffer::<u64>::new(g.context(), 32)?;
    g.get(&mut back, buf.slice(0..32), next).await?;
    let single = g.g(buf.at(40), next).await?;
    let fine = back.as_slice() == data.as_slice() && single == me as u64 + 7;
    pe.barrier_all().await?;
    g.free(buf).await.map_err(|(e, _)| e)?;
    match fine {
        true => Ok(()),
        false => Err(ferroshmem::Error::Config(format!(
            "PE {me}: read back {:?} and {single} from PE {next}",
            &back.as_slice()[..4]
        ))),
    }
}
