//! The world barrier of jobs across hosts whose shapes make it sync by node: uneven (3 PEs
//! on one host, 1 on the other) and 3 hosts × 2 PEs, each host a network + UTS namespace
//! (`common::netns`), PEs started by `ferroshmem run --hosts … --rsh AGENT`. Every PE puts
//! the barrier's number to every PE, the PEs of the last host late, then all meet in
//! `barrier_all` and check that every number arrived: a PE let out of the barrier before
//! every PE came to it reads an old one. Needs root and libfabric; says so and skips
//! otherwise.
//!
//! The PE program is this test binary itself: [`pe_entry`] acts as a PE when
//! `FSH_TEST_BARRIER` is set, and does nothing otherwise.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::netns::Hosts;
use ferroshmem::{Error, Pe, Result};

const ROUNDS: &str = "FSH_TEST_BARRIER";

#[test]
fn pe_entry() {
    let Ok(rounds) = std::env::var(ROUNDS) else {
        return;
    };
    let rounds: Option<u64> = rounds.parse().ok();
    let rt = common::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| async move {
        let outcome = match rounds {
            Some(rounds) => barriers_meet(&pe, rounds).await,
            None => one_barrier_more(&pe).await,
        };
        match &outcome {
            Ok(()) => println!("PE {}: every barrier met", pe.my_pe()),
            Err(e) => println!("PE {}: {e}", pe.my_pe()),
        }
        outcome
    }));
    if !matches!(&results, Ok(r) if r.iter().all(|r| r.is_ok())) {
        eprintln!("{results:?}");
        std::process::exit(1);
    }
}

/// `rounds` barriers, each after this PE put the round's number in its slot on every PE;
/// the PEs on the last PE's host come late to every other one.
async fn barriers_meet(pe: &Pe, rounds: u64) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let slots = pe.calloc::<u64>(n).await?;
    let late = pe.is_mapped(n - 1);
    let mut seen = vec![0u64; n];
    for round in 1..=rounds {
        if late && round % 2 == 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for to in 0..n {
            pe.p(slots.at(me), round, to).await?;
        }
        pe.barrier_all().await?;
        pe.get(&mut seen, &slots, me).await?;
        if let Some(from) = seen.iter().position(|&s| s != round) {
            return Err(Error::InvalidArgument(format!(
                "left barrier {round} with PE {from}'s number at {}: it had not come yet",
                seen[from]
            )));
        }
        // Nobody writes the next round's numbers before every PE has read these.
        pe.sync_all().await?;
    }
    pe.free(slots).await?;
    Ok(())
}

/// PE 1 makes two barriers more than the others, which finalize: its first meets their
/// final barrier, its second waits for PEs that have left, and must fail saying so instead
/// of waiting for ever (bounded here, so that a wait without end shows as a failure).
async fn one_barrier_more(pe: &Pe) -> Result<()> {
    for _ in 0..5 {
        pe.barrier_all().await?;
    }
    if pe.my_pe() != 1 {
        return Ok(());
    }
    pe.barrier_all().await?;
    let extra = tokio::time::timeout(Duration::from_secs(20), pe.barrier_all()).await;
    match extra {
        Ok(Err(Error::CollectiveMismatch { detail, .. })) => {
            println!("PE 1: the barrier no other PE made failed: {detail}");
            Ok(())
        }
        other => Err(Error::InvalidArgument(format!(
            "the barrier no other PE made ended with {other:?}"
        ))),
    }
}

fn fabric_available() -> bool {
    match ferroshmem_net::Library::load() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// Runs the PE entry on `counts[i]` PEs of host `i` of `hosts`, making `rounds` barriers
/// (a number) or one barrier more on PE 1 (`extra`).
fn job(hosts: &Hosts, counts: &[usize], rounds: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
        .args([
            "run",
            "--grace",
            "2s",
            "--hosts",
            &hosts.hosts_arg_of(counts),
        ])
        .arg("--rsh")
        .arg(&hosts.agent)
        .arg("--")
        .arg(std::env::current_exe().expect("test binary"))
        .args(["pe_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROUNDS, rounds)
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "60s")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the launcher starts")
}

/// Runs `rounds` (see [`job`]) on `counts[i]` PEs of host `i`: whether the job succeeded,
/// and its output; `None` where the hosts cannot be made (said why).
fn run_job(counts: &[usize], rounds: &str) -> Option<(bool, String)> {
    if !fabric_available() {
        return None;
    }
    let hosts = Hosts::make(counts.len())?;
    let out = job(&hosts, counts, rounds);
    let all = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), all))
}

fn barriers_meet_on(counts: &[usize]) {
    let Some((succeeded, all)) = run_job(counts, "40") else {
        return;
    };
    assert!(succeeded, "{all}");
    let met = all.matches("every barrier met").count();
    assert_eq!(met, counts.iter().sum::<usize>(), "{all}");
}

#[test]
fn the_world_barrier_meets_on_three_pes_and_one() {
    barriers_meet_on(&[3, 1]);
}

#[test]
fn the_world_barrier_meets_on_three_hosts_of_two_pes() {
    barriers_meet_on(&[2, 2, 2]);
}

/// PE 1's barrier past the others' final one fails with the mismatch (its finalize then
/// fails too, since its world barrier is broken, so the job ends non-zero).
#[test]
fn a_barrier_past_the_others_final_one_fails_on_a_node_with_its_leader_gone() {
    let Some((succeeded, all)) = run_job(&[3, 1], "extra") else {
        return;
    };
    assert!(!succeeded, "{all}");
    assert!(
        all.contains("PE 1: the barrier no other PE made failed"),
        "{all}"
    );
}
