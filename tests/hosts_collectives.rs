//! Collectives on teams that span hosts, with the hosts' shapes that pick each algorithm:
//! 2 hosts × 2 PEs and an uneven 3 + 1 (syncs by node, trees by node), 3 hosts × 1 PE (one
//! member per node: the flat forms). Each host is a network + UTS namespace on a bridge
//! (`common::netns`), PEs started by `ferroshmem run --hosts … --rsh AGENT`. Runs the
//! `across-nodes` collective scenario (every collective on teams split to span the nodes,
//! values checked, and mismatches across nodes caught on every member) and, on the uneven
//! shape, the whole collective suite. Needs root (namespaces) and libfabric; says so and
//! skips otherwise.
//!
//! A PE killed while the others sync a team by node (2 hosts: 2 + 1 PEs, the victim alone on
//! its host, so that a member waits for its leader's release while the leader waits for the
//! victim) ends every survivor's sync in `PeerLost`.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_SCENARIOS` is set, and does nothing otherwise.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::{self, Hosts};
use ferroshmem::Error;

/// The collective scenarios a PE runs, comma-separated.
const SCENARIOS: &str = "FSH_TEST_SCENARIOS";
/// Where each survivor of the loss scenario writes what its sync ended with (this path,
/// then `.` and its PE number).
const REPORT: &str = "FSH_TEST_REPORT";
/// The scenario in which the last PE is killed during a team sync.
const KILL_IN_SYNC: &str = "kill-in-sync";
/// Longer than any of these jobs takes; reaching it means a hang.
const JOB_BOUND: Duration = Duration::from_secs(900);

#[test]
fn pe_entry() {
    let Ok(list) = std::env::var(SCENARIOS) else {
        return;
    };
    let rt = common::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let list = list.clone();
        async move {
            let me = pe.my_pe();
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            println!("PE {me} runs on {}", host.trim());
            if list == KILL_IN_SYNC {
                return lose_one_in_sync(&pe).await;
            }
            for name in list.split(',') {
                let started = Instant::now();
                let outcome = common::collective_scenarios::run(name, pe.clone()).await;
                println!("PE {me}: scenario {name} took {:?}", started.elapsed());
                if let Err(e) = outcome {
                    println!("PE {me}: scenario {name} failed: {e}");
                    return Err(Error::InvalidArgument(format!("{name} failed")));
                }
            }
            println!("PE {me}: every scenario passed");
            Ok(())
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

/// The last PE is killed once a team copied from the world has synced; every other PE
/// then syncs that team again, and writes what the sync ended with to its report file,
/// then stays until the launcher kills the job (the remote shells of this scenario ignore
/// SIGTERM: see its test).
async fn lose_one_in_sync(pe: &ferroshmem::Pe) -> ferroshmem::Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let team = pe
        .team_world()
        .split_strided(0, 1, n)
        .await?
        .ok_or(Error::Shutdown)?;
    let passed = pe.calloc::<u64>(n).await?;
    team.sync().await?;
    println!("PE {me} ready");
    // The victim dies once every other PE is past the first sync (and so bound for the
    // second, where it is lost). Each says so with a put it does not wait for: nothing of
    // the others then waits on an answer the victim could take with it.
    if me != n - 1 {
        pe.put_nbi(passed.at(me), &[1], n - 1)?;
    } else {
        pe.wait_until_all(passed.slice(..n - 1), None, ferroshmem::Cmp::Eq, 1)
            .await?;
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
    let started = Instant::now();
    let report = match team.sync().await {
        Err(Error::PeerLost { pe: lost, .. }) => format!(
            "PE {me}: PeerLost of PE {lost} after {} ms",
            started.elapsed().as_millis()
        ),
        other => format!("PE {me}: the sync ended with {other:?}"),
    };
    if let Ok(path) = std::env::var(REPORT) {
        let _ = std::fs::write(format!("{path}.{me}"), &report);
    }
    println!("{report}");
    tokio::time::sleep(JOB_BOUND).await;
    std::mem::forget((team, passed));
    Ok(())
}

/// Runs `scenarios` as a job with `per_host[i]` PEs on `hosts[i]`, with `env` added, each
/// host's PEs started through `rsh` (the hosts' agent, or a wrapper of it); returns whether
/// it succeeded and its output.
fn job(
    hosts: &Hosts,
    per_host: &[usize],
    scenarios: &str,
    env: &[(&str, &str)],
    rsh: &Path,
) -> (bool, String) {
    let spread: Vec<(usize, usize)> = per_host.iter().copied().enumerate().collect();
    job_spread(hosts, &spread, scenarios, env, rsh)
}

/// [`job`] with the PEs given in order as `(host, count)`: `count` PEs on host `host`, a
/// host named again where its PEs alternate with another's.
fn job_spread(
    hosts: &Hosts,
    spread: &[(usize, usize)],
    scenarios: &str,
    env: &[(&str, &str)],
    rsh: &Path,
) -> (bool, String) {
    let spread: Vec<String> = spread
        .iter()
        .map(|&(h, k)| format!("{}:{k}", hosts.addresses[h]))
        .collect();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
        .args([
            "run",
            "--grace",
            "2s",
            "--hosts",
            &spread.join(","),
            "--rsh",
        ])
        .arg(rsh)
        .arg("--")
        .arg(std::env::current_exe().expect("test binary"))
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIOS, scenarios)
        .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
        .env("RUST_BACKTRACE", "0")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the launcher starts");
    while child.try_wait().expect("job status").is_none() {
        if started.elapsed() > JOB_BOUND {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("job output");
    eprintln!(
        "{spread:?}, {scenarios}: {:?} in {:?}",
        out.status,
        started.elapsed()
    );
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `scenarios` as a job with `per_host[i]` PEs on host `i`, and checks that every PE
/// passed, on the host it was meant for.
fn scenarios_pass(per_host: &[usize], scenarios: &str) {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(per_host.len()) else {
        return;
    };
    let (success, all) = job(&hosts, per_host, scenarios, &[], &hosts.agent);
    assert!(success, "{all}");
    let n: usize = per_host.iter().sum();
    assert_eq!(all.matches("every scenario passed").count(), n, "{all}");
    for (address, &k) in hosts.addresses.iter().zip(per_host) {
        let here = all
            .matches(&format!("runs on {}", netns::host_name(address)))
            .count();
        assert_eq!(here, k, "PEs on host {address}:\n{all}");
    }
}

#[test]
fn collectives_across_two_hosts_of_two_pes() {
    scenarios_pass(&[2, 2], "across-nodes");
}

/// Two hosts whose PEs alternate (0 and 2 on one, 1 and 3 on the other): a node's members
/// are not consecutive in the team, so the leaders of the forms by node pack their node's
/// blocks, and each node's part of a block move is scattered.
#[test]
fn collectives_across_two_hosts_whose_pes_alternate() {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let spread = [(0, 1), (1, 1), (0, 1), (1, 1)];
    let (success, all) = job_spread(&hosts, &spread, "across-nodes", &[], &hosts.agent);
    assert!(success, "{all}");
    assert_eq!(all.matches("every scenario passed").count(), 4, "{all}");
    for (pe, &(h, _)) in spread.iter().enumerate() {
        let name = netns::host_name(&hosts.addresses[h]);
        let (prefix, said) = (format!("[pe {pe}]"), format!("PE {pe} runs on {name}"));
        let found = all
            .lines()
            .any(|l| l.starts_with(&prefix) && l.ends_with(&said));
        assert!(found, "PE {pe} not on {name}:\n{all}");
    }
}

#[test]
fn collectives_across_three_hosts_of_one_pe() {
    scenarios_pass(&[1, 1, 1], "across-nodes");
}

#[test]
fn collectives_across_an_uneven_three_and_one() {
    scenarios_pass(&[3, 1], "across-nodes,collectives");
}

/// A PE killed during a sync by node (2 + 1 PEs): both survivors' syncs end in `PeerLost`
/// naming it, and the launcher exits non-zero.
#[test]
fn a_pe_killed_during_a_sync_by_node_ends_every_survivors_sync_in_peer_lost() {
    if !netns::fabric_available() {
        return;
    }
    let Some(hosts) = Hosts::make(2) else {
        return;
    };
    let report = std::env::temp_dir().join(format!("fsh-hc-report-{}", std::process::id()));
    let path = report.to_str().expect("a UTF-8 temporary path");
    // The remote shells, and so the PEs, ignore the launcher's SIGTERM (sent at once when
    // the victim's process has ended) and stay until its SIGKILL after the grace period,
    // so that a survivor's report is not cut short by the stop that the loss itself set off.
    let rsh = std::env::temp_dir().join(format!("fsh-hc-rsh-{}", std::process::id()));
    let script = format!(
        "#!/bin/sh\ntrap '' TERM\nexec '{}' \"$@\"\n",
        hosts.agent.display()
    );
    std::fs::write(&rsh, script).expect("the wrapper is written");
    std::fs::set_permissions(&rsh, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (success, all) = job(&hosts, &[2, 1], KILL_IN_SYNC, &[(REPORT, path)], &rsh);
    let _ = std::fs::remove_file(&rsh);
    assert!(
        !success,
        "the launcher exits non-zero when a PE is killed:\n{all}"
    );
    for pe in 0..2 {
        let file = format!("{path}.{pe}");
        let got = std::fs::read_to_string(&file).unwrap_or_default();
        let _ = std::fs::remove_file(&file);
        assert!(got.contains("PeerLost of PE 2"), "PE {pe}: {got:?}\n{all}");
    }
}
