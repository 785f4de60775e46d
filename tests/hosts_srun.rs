//! Jobs across hosts under Slurm's `srun`: a Slurm cluster of one node per namespace host
//! (`common::slurm`), each host a network + UTS namespace on a bridge (`common::netns`), the
//! job's PEs started there by `slurmd`. Under `--mpi=pmix` PE 0 hands the bootstrap root out
//! through Slurm's PMIx plugin, which no other test reaches (`tests/hosts.rs` runs `mpirun`,
//! whose PMIx server is Open MPI's). Needs root, libfabric and Slurm (`slurmctld`, `slurmd`,
//! `slurm-client`); says so and skips otherwise. `.ci/run` installs them and runs it as root.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_SCENARIO` is set, and does nothing otherwise (`common::host_pe`).

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::c_programs::{self, build, families, have_cc, test_source};
use common::host_pe::{kill_pe_3, text, watch_job, REPORT, SCENARIO};
use common::netns::{self, Hosts};
use common::slurm::Cluster;

#[test]
fn pe_entry() {
    common::host_pe::act_if_asked();
}

/// A job's nodes and PEs on each node.
type Layout = (usize, usize);

/// `n` namespace hosts and a Slurm cluster over them, or `None` where either cannot be made
/// (each says why).
fn cluster(n: usize) -> Option<(Hosts, Cluster)> {
    if !netns::fabric_available() {
        return None;
    }
    let hosts = Hosts::make(n)?;
    let cluster = Cluster::make(&hosts)?;
    Some((hosts, cluster))
}

/// `srun` of this test binary's PE entry as `scenario`, `per_node` PEs on each of `nodes`
/// nodes, with `mpi` as `srun --mpi`; Slurm ends the job after 5 minutes, and at once where
/// a PE fails.
fn srun_job(cluster: &Cluster, (nodes, per_node): Layout, scenario: &str, mpi: &str) -> Command {
    let mut cmd = cluster.srun();
    cmd.args([
        "-N",
        &nodes.to_string(),
        "-n",
        &(per_node * nodes).to_string(),
    ])
    .args(["--mpi", mpi, "--kill-on-bad-exit=1", "-t", "5"])
    .arg(std::env::current_exe().expect("test binary"))
    .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
    .env(SCENARIO, scenario)
    .env_remove("FERROSHMEM_BIND")
    .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
    .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
    .env("RUST_BACKTRACE", "0")
    // Each PE logs how it found the bootstrap root when it joins.
    .env("RUST_LOG", "ferroshmem_actors=info");
    cmd
}

/// Runs `srun_job` to its end, failing the test where it runs past [`c_programs::LIMIT`].
fn run(cluster: &Cluster, (nodes, per_node): Layout, scenario: &str, mpi: &str) -> Output {
    let started = Instant::now();
    let child = srun_job(cluster, (nodes, per_node), scenario, mpi)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("srun starts");
    let out = c_programs::finish(child, "srun");
    eprintln!(
        "srun --mpi={mpi} -N {nodes} -n {}, {scenario}: {:?} in {:?}",
        per_node * nodes,
        out.status,
        started.elapsed()
    );
    out
}

/// PE 0's root address and the job's secret travel through Slurm's PMIx plugin: nothing is
/// given to the PEs, PE 0's rendezvous socket (node-local) cannot reach the other hosts,
/// and every scenario passes with two PEs on each of two hosts.
#[test]
fn every_scenario_passes_under_srun_across_hosts_through_pmix() {
    every_scenario_passes((2, 2));
}

/// The same with one PE on each of three hosts.
#[test]
fn every_scenario_passes_under_srun_on_three_hosts_of_one_pe() {
    every_scenario_passes((3, 1));
}

/// Every scenario under `srun --mpi=pmix`, on the hosts of `layout`: each PE passes on the
/// host Slurm gave it, having found the root through PMIx.
fn every_scenario_passes((nodes, per_node): Layout) {
    let Some((hosts, cluster)) = cluster(nodes) else {
        return;
    };
    let out = run(&cluster, (nodes, per_node), "all", "pmix");
    let all = text(&out);
    let pes = nodes * per_node;
    assert!(out.status.success(), "{all}\n{}", cluster.logs());
    assert_eq!(all.matches("every scenario passed").count(), pes, "{all}");
    for address in &hosts.addresses {
        let here = all
            .matches(&format!("runs on {}", netns::host_name(address)))
            .count();
        assert_eq!(here, per_node, "PEs on host {address}:\n{all}");
    }
    let joined = all
        .lines()
        .filter(|l| l.contains("PE joined its job") && l.contains("srun"))
        .filter(|l| l.ends_with("rendezvous=Pmix"))
        .count();
    assert_eq!(joined, pes, "every PE found the root through PMIx:\n{all}");
}

/// The collective scenarios (every collective on teams that span the two hosts) pass under
/// `srun` too.
#[test]
fn every_collective_scenario_passes_under_srun_across_hosts() {
    let Some((_hosts, cluster)) = cluster(2) else {
        return;
    };
    let out = run(&cluster, (2, 2), "collectives", "pmix");
    let all = text(&out);
    assert!(out.status.success(), "{all}\n{}", cluster.logs());
    assert_eq!(all.matches("every scenario passed").count(), 4, "{all}");
}

/// On one node without PMIx, PE 0 hands the root out on its rendezvous socket.
#[test]
fn a_job_on_one_node_under_srun_without_pmix_finds_the_root_on_the_rendezvous_socket() {
    let Some((hosts, cluster)) = cluster(2) else {
        return;
    };
    let out = run(&cluster, (1, 2), "rma", "none");
    let all = text(&out);
    assert!(out.status.success(), "{all}\n{}", cluster.logs());
    assert_eq!(all.matches("every scenario passed").count(), 2, "{all}");
    let on_one = hosts
        .addresses
        .iter()
        .map(|a| {
            all.matches(&format!("runs on {}", netns::host_name(a)))
                .count()
        })
        .max();
    assert_eq!(on_one, Some(2), "both PEs on one host:\n{all}");
    let joined = all
        .lines()
        .filter(|l| l.contains("PE joined its job") && l.ends_with("rendezvous=Socket"))
        .count();
    assert_eq!(joined, 2, "every PE found the root on the socket:\n{all}");
}

/// Without `--mpi=pmix` Slurm offers no PMIx, and a job across hosts cannot hand the root
/// out: every PE fails at init with a configuration error saying what to give, instead of
/// waiting for a root it cannot find.
#[test]
fn a_job_under_srun_without_pmix_fails_at_init_saying_what_to_give() {
    let Some((_hosts, cluster)) = cluster(2) else {
        return;
    };
    let out = run(&cluster, (2, 2), "rma", "none");
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    let refused = all
        .lines()
        .filter(|l| l.contains("Config(") && l.contains("srun --mpi=pmix"))
        .count();
    assert!(refused >= 1, "a PE says what to give:\n{all}");
    assert_eq!(all.matches("every scenario passed").count(), 0, "{all}");
}

/// PE 3's process, on the second host, killed once every PE is ready: PE 0's wait ends in
/// `PeerLost` naming it, and `srun` (`--kill-on-bad-exit`) stops the job and exits non-zero.
#[test]
fn a_pe_killed_under_srun_ends_every_wait_with_peer_lost() {
    let Some((_hosts, cluster)) = cluster(2) else {
        return;
    };
    let report = std::env::temp_dir().join(format!("fsh-report-srun-{}", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let child = srun_job(&cluster, (2, 2), "kill-remote", "pmix")
        .env(REPORT, &report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("srun starts");
    let (all, _, status) = watch_job(child, 4, kill_pe_3);
    assert!(!status.success(), "srun exits non-zero:\n{all}");
    let said = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    let ms: u64 = said
        .strip_prefix("PE 0: PeerLost of PE 3 after ")
        .and_then(|rest| rest.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("PE 0 names PE 3; it reported {said:?}:\n{all}"));
    assert!(Duration::from_millis(ms) < Duration::from_secs(10), "{all}");
    // Slurm stopped the others with SIGTERM, which their own handler keeps to say so.
    assert_eq!(all.matches("stopped by SIGTERM").count(), 2, "{all}");
    eprintln!("PeerLost reached PE 0 {ms} ms after its wait began (target: within 2 s)");
}

/// Every OpenSHMEM C program of `tests/c/` (one per family of the C API, each checking its
/// own values), built with `ferroshmem cc`, passes under `srun --mpi=pmix` with 2 PEs on
/// each of two hosts, as a C user runs it on a Slurm cluster.
#[test]
fn every_c_program_passes_under_srun_across_hosts() {
    if !have_cc() {
        return;
    }
    let Some((_hosts, cluster)) = cluster(2) else {
        return;
    };
    let names = families();
    assert!(names.len() >= 10, "the C programs: {names:?}");
    for name in &names {
        let program = build(&test_source(&format!("{name}.c")), name, &["-std=c11"]);
        let mut srun = cluster.srun();
        srun.args([
            "-N",
            "2",
            "-n",
            "4",
            "--mpi",
            "pmix",
            "--kill-on-bad-exit=1",
        ])
        .args(["-t", "5"])
        .arg(&program);
        // The C tests' environment, which srun hands to every PE.
        let out = c_programs::finish(c_programs::start(srun, name), name);
        assert!(out.status.success(), "{name}:\n{}", text(&out));
    }
}
