//! Jobs across hosts: each host a network + UTS namespace on a bridge (`common::netns`), PEs
//! started on them by `ferroshmem run --hosts … --rsh AGENT`, PEs of one host mapped to each
//! other and the others reached through the fabric (`tcp;ofi_rxm`). Every scenario of
//! `common::scenarios` at 2 hosts × 2 PEs and 3 hosts × 1 PE. Needs root (namespaces) and
//! libfabric; says so and skips otherwise. `.ci/run` runs it as root with both installed.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_SCENARIO` is set, and does nothing otherwise (`common::host_pe`).

mod common;

use std::process::{Command, Output};
use std::time::Instant;

use common::cpus::{self, cpu_list};
use common::host_pe::{kill_pe_3, text, watch_job, REPORT, SCENARIO};
use common::netns::{self, Hosts};

#[test]
fn pe_entry() {
    common::host_pe::act_if_asked();
}

/// `ferroshmem run` of this test binary's PE entry as `scenario`, `per_host` PEs on each of
/// `hosts`, with `grace` between SIGTERM and SIGKILL.
fn ferroshmem_run(hosts: &Hosts, per_host: usize, scenario: &str, grace: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
    cmd.args([
        "run",
        "--grace",
        grace,
        "--hosts",
        &hosts.hosts_arg(per_host),
        "--rsh",
    ])
    .arg(&hosts.agent)
    .arg("--")
    .arg(std::env::current_exe().expect("test binary"))
    .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
    .env(SCENARIO, scenario)
    .env_remove("FERROSHMEM_BIND")
    .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
    .env("RUST_BACKTRACE", "0");
    cmd
}

/// Runs `scenario` as a job of `per_host` PEs on each of `hosts`.
fn job(hosts: &Hosts, per_host: usize, scenario: &str) -> Output {
    let started = Instant::now();
    let out = ferroshmem_run(hosts, per_host, scenario, "2s")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
        .output()
        .expect("the launcher starts");
    eprintln!(
        "{} hosts x {per_host} PEs, {scenario}: {:?} in {:?}",
        hosts.addresses.len(),
        out.status,
        started.elapsed()
    );
    out
}

fn every_scenario_passes(n_hosts: usize, per_host: usize) {
    scenarios_pass(n_hosts, per_host, "all");
}

fn scenarios_pass(n_hosts: usize, per_host: usize, set: &str) {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(n_hosts) else {
        return;
    };
    let out = job(&hosts, per_host, set);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let passed = all.matches("every scenario passed").count();
    assert_eq!(passed, n_hosts * per_host, "{all}");
    for address in &hosts.addresses {
        let here = all
            .matches(&format!("runs on {}", netns::host_name(address)))
            .count();
        assert_eq!(here, per_host, "PEs on host {address}:\n{all}");
    }
}

#[test]
fn every_scenario_passes_on_two_hosts_of_two_pes() {
    every_scenario_passes(2, 2);
}

#[test]
fn every_scenario_passes_on_three_hosts_of_one_pe() {
    every_scenario_passes(3, 1);
}

/// The CPU lists the PEs of `out` printed, one per PE of `n`.
fn pes_cpus(out: &Output, n: usize) -> Vec<Vec<usize>> {
    let all = text(out);
    assert!(out.status.success(), "{all}");
    (0..n)
        .map(|pe| {
            let line = all
                .lines()
                .find_map(|l| l.strip_prefix(&format!("[pe {pe}] PE {pe} may run on CPUs ")))
                .unwrap_or_else(|| panic!("no CPUs of PE {pe}:\n{all}"));
            cpu_list(line)
        })
        .collect()
}

/// Hosts made of namespaces of one machine run on its CPUs: asked to (`FERROSHMEM_BIND=share`)
/// each of two hosts' PEs gets its own half of them, not each all of them as the only PE of
/// its host; by default they stay unbound (nodes sharing a kernel need CPUs for its network
/// stack between them).
#[test]
fn hosts_of_one_machine_share_its_cpus_when_asked_and_stay_unbound_by_default() {
    let allowed = cpu_list(&cpus::allowed_list("/proc/self/status"));
    if allowed.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let asked = ferroshmem_run(&hosts, 1, "cpus", "2s")
        .env("FERROSHMEM_BIND", "share")
        .output()
        .expect("the launcher starts");
    let shares = pes_cpus(&asked, 2);
    // Halves of the machine's CPUs (which ones follows its cores and packages).
    assert_eq!(shares[0].len(), allowed.len() / 2, "{shares:?}");
    let mut both = [shares[0].clone(), shares[1].clone()].concat();
    both.sort_unstable();
    assert_eq!(both, allowed, "{shares:?}");
    let unbound = pes_cpus(&job(&hosts, 1, "cpus"), 2);
    assert_eq!(unbound, [allowed.clone(), allowed], "by default");
}

/// `mpirun` of this test binary's PE entry as `scenario`, 2 PEs on each of `hosts` (started
/// there through the hosts' agent, each after the words `before`), with `env` passed to every
/// PE; returns its output, or `None` (saying why) where mpirun is not installed.
fn mpirun_job(
    hosts: &Hosts,
    scenario: &str,
    env: &[(&str, &str)],
    before: &[&str],
) -> Option<Output> {
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("skipped: mpirun (openmpi-bin) is not installed");
        return None;
    }
    let subnet = format!(
        "{}.0/24",
        hosts.bridge_address.rsplit_once('.').expect("ipv4").0
    );
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .arg("--mca")
    .arg("plm_rsh_agent")
    .arg(&hosts.agent)
    .args(["--mca", "oob_tcp_if_include", &subnet])
    .args(["--mca", "btl_tcp_if_include", &subnet])
    .args(["-H", &hosts.hosts_arg(2), "-np", "4"]);
    let passed = [
        SCENARIO,
        "FERROSHMEM_SYMMETRIC_SIZE",
        "RUST_BACKTRACE",
        "RUST_LOG",
    ];
    for name in passed.iter().chain(env.iter().map(|(k, _)| k)) {
        cmd.args(["-x", name]);
    }
    let started = Instant::now();
    let out = cmd
        .args(before)
        .arg(std::env::current_exe().expect("test binary"))
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, scenario)
        .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
        .env("RUST_BACKTRACE", "0")
        // Each PE logs how it found the bootstrap root when it joins.
        .env("RUST_LOG", "ferroshmem_actors=info")
        .envs(env.iter().copied())
        .output()
        .expect("mpirun starts");
    eprintln!(
        "mpirun, 2 hosts x 2 PEs, {scenario}: {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    Some(out)
}

/// Checks that every PE of an mpirun job passed, 2 on each host, and found the root through
/// `rendezvous`.
fn mpirun_job_passed(hosts: &Hosts, out: &Output, rendezvous: &str) {
    let all = text(out);
    assert!(out.status.success(), "{all}");
    assert_eq!(all.matches("every scenario passed").count(), 4, "{all}");
    for address in &hosts.addresses {
        assert_eq!(
            all.matches(&format!("runs on {}", netns::host_name(address)))
                .count(),
            2,
            "{all}"
        );
    }
    // The log line may be coloured: its words are matched apart.
    let joined = all
        .lines()
        .filter(|l| l.contains("PE joined its job") && l.contains("rendezvous"))
        .filter(|l| l.ends_with(rendezvous))
        .count();
    assert_eq!(
        joined, 4,
        "every PE found the root through {rendezvous}:\n{all}"
    );
}

/// PE 0's root address and the job's secret travel through mpirun's PMIx key-value store:
/// nothing is given to the PEs, and PE 0's rendezvous socket (node-local) cannot reach the
/// other host.
#[test]
fn every_scenario_passes_under_mpirun_across_hosts_through_pmix() {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    if let Some(out) = mpirun_job(&hosts, "all", &[], &[]) {
        mpirun_job_passed(&hosts, &out, "Pmix");
    }
}

/// The root's address and secret given to every PE, as where the launcher offers no PMIx.
#[test]
fn a_scenario_passes_under_mpirun_across_hosts_with_the_root_given() {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let port = 20_000 + std::process::id() % 40_000;
    let root = format!("{}:{port}", hosts.addresses[0]);
    let secret: String = (0..32)
        .map(|i| format!("{:02x}", (i * 37 + port) % 256))
        .collect();
    let env = [
        ("FERROSHMEM_ROOT", root.as_str()),
        ("FERROSHMEM_SECRET", secret.as_str()),
    ];
    if let Some(out) = mpirun_job(&hosts, "rma", &env, &[]) {
        mpirun_job_passed(&hosts, &out, "Environment");
    }
}

/// Without PMIx (taken from the PEs' environment) and without the root given, a job across
/// hosts cannot hand the root out: every PE fails at init with a configuration error saying
/// what to give, instead of waiting for a root it cannot find.
#[test]
fn a_job_across_hosts_without_pmix_fails_at_init_saying_what_to_give() {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let Some(out) = mpirun_job(&hosts, "rma", &[], &["env", "-u", "PMIX_RANK"]) else {
        return;
    };
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    let refused = all
        .lines()
        .filter(|l| l.contains("Config(") && l.contains("FERROSHMEM_ROOT"))
        .count();
    assert!(refused >= 1, "a PE says what to give:\n{all}");
    assert_eq!(all.matches("every scenario passed").count(), 0, "{all}");
}

#[test]
fn every_collective_scenario_passes_on_two_hosts_of_two_pes() {
    scenarios_pass(2, 2, "collectives");
}

#[test]
fn every_collective_scenario_passes_on_three_hosts_of_one_pe() {
    scenarios_pass(3, 1, "collectives");
}

/// Starts `scenario` on `per_host` PEs of each host, output piped.
fn spawn_job(
    hosts: &Hosts,
    per_host: usize,
    scenario: &str,
    env: &[(&str, &str)],
) -> std::process::Child {
    ferroshmem_run(hosts, per_host, scenario, "30s")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the launcher starts")
}

/// Runs `scenario` on `per_host` PEs of 2 hosts, `lose` acting once every PE is ready (given
/// the hosts and the job's output so far), and
/// checks that the launcher fails, that PE 0 names one of the PEs `lost` within `bound`, and
/// that `stopped` PEs said they were stopped by the launcher's SIGTERM (their own handler);
/// returns how long PE 0's report took after `lose`.
fn loss_is_reported(
    per_host: usize,
    scenario: &str,
    env: &[(&str, &str)],
    lost: std::ops::Range<usize>,
    stopped: usize,
    bound: std::time::Duration,
    lose: impl FnOnce(&Hosts, &str),
) -> Option<std::time::Duration> {
    if !netns::fabric_available() {
        return None;
    }
    let hosts = Hosts::make(2)?;
    let report = std::env::temp_dir().join(format!("fsh-report-{scenario}-{}", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let path = report.to_string_lossy().into_owned();
    let mut env = env.to_vec();
    env.push((REPORT, path.as_str()));
    let child = spawn_job(&hosts, per_host, scenario, &env);
    let (all, _, status) = watch_job(child, 2 * per_host, |ready| lose(&hosts, ready));
    assert!(!status.success(), "the launcher exits non-zero:\n{all}");
    let said = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    let ms = said
        .strip_prefix("PE 0: PeerLost of PE ")
        .and_then(|rest| rest.strip_suffix(" ms"))
        .and_then(|rest| rest.split_once(" after "))
        .filter(|(pe, _)| pe.parse().is_ok_and(|pe| lost.contains(&pe)))
        .and_then(|(_, ms)| ms.parse::<u64>().ok());
    let after =
        std::time::Duration::from_millis(ms.unwrap_or_else(|| {
            panic!("PE 0 names one of PEs {lost:?}; it reported {said:?}:\n{all}")
        }));
    assert!(after < bound, "{after:?}:\n{all}");
    assert_eq!(all.matches("stopped by SIGTERM").count(), stopped, "{all}");
    Some(after)
}

#[test]
fn a_killed_remote_pe_ends_every_wait_with_peer_lost() {
    let bound = std::time::Duration::from_secs(10);
    if let Some(after) = loss_is_reported(2, "kill-remote", &[], 3..4, 2, bound, |_, ready| {
        kill_pe_3(ready)
    }) {
        eprintln!("PeerLost reached PE 0 {after:?} after its wait began (target: within 2 s)");
    }
}

#[test]
fn a_cut_link_ends_every_wait_with_peer_lost_within_the_peer_timeout() {
    let env = [("FERROSHMEM_PEER_TIMEOUT", "3s")];
    let bound = std::time::Duration::from_secs(20);
    let cut = |hosts: &Hosts, _: &str| hosts.cut(1).expect("cut the link");
    // Either PE of the cut host may be found silent first.
    if let Some(after) = loss_is_reported(2, "cut-link", &env, 2..4, 3, bound, cut) {
        eprintln!("PeerLost reached PE 0 {after:?} after its wait began, cut then (FERROSHMEM_PEER_TIMEOUT=3s)");
    }
}
