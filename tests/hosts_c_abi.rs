//! OpenSHMEM C programs across hosts, as a C user runs them: each program of `tests/c/`
//! (one per family of the C API, each checking its own values and exiting non-zero on the
//! first difference) built with `ferroshmem cc` and run with `ferroshmem run --hosts` on two
//! network-namespace hosts of two PEs each, then on an uneven two and one; and a program
//! that says where each PE runs and which PEs `shmem_ptr` reaches by loads and stores (those
//! of its own host only). Needs root (namespaces), libfabric and a C compiler; says so and
//! skips otherwise.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::c_programs::{build, families, finish, have_cc, out_dir, start, test_source};
use common::netns::{self, Hosts};

/// Where each PE runs, and how it reaches every PE: `shmem_ptr` gives a pointer for the PEs
/// of its own node and NULL for the others.
const WHERE: &str = r#"#define _POSIX_C_SOURCE 200809L
#include <shmem.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    shmem_init();
    long *word = shmem_malloc(sizeof(long));
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    int me = shmem_my_pe();
    for (int pe = 0; pe < shmem_n_pes(); pe++)
        printf("PE %d on %s reaches PE %d by %s\n", me, host, pe,
               shmem_ptr(word, pe) ? "loads and stores" : "the network");
    shmem_free(word);
    shmem_finalize();
    return 0;
}
"#;

/// Runs `program` with `per_host[i]` PEs on host `i` of `hosts`; returns its output.
fn run_across(hosts: &Hosts, per_host: &[usize], program: &Path, what: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
    command
        .args(["run", "--grace", "2s", "--hosts"])
        .arg(hosts.hosts_arg_of(per_host))
        .arg("--rsh")
        .arg(&hosts.agent)
        .arg("--")
        .arg(program);
    finish(start(command, what), what)
}

/// Whether the tests can run here: a C compiler, libfabric, and the hosts (root).
fn hosts_for_c(n: usize) -> Option<Hosts> {
    if !have_cc() || !netns::fabric_available() {
        return None;
    }
    Hosts::make(n)
}

/// Every family's program exits 0 on every PE of each job shape.
#[test]
fn every_c_program_passes_across_hosts() {
    let Some(hosts) = hosts_for_c(2) else {
        return;
    };
    let names = families();
    assert!(names.len() >= 10, "the C programs: {names:?}");
    for name in &names {
        let program = build(&test_source(&format!("{name}.c")), name, &["-std=c11"]);
        for per_host in [&[2, 2][..], &[2, 1]] {
            let what = format!("{name} on hosts of {per_host:?} PEs");
            let output = run_across(&hosts, per_host, &program, &what);
            assert!(
                output.status.success(),
                "{what} failed ({:?}):\n{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// Each PE runs on the host it was given, and `shmem_ptr` gives a pointer exactly for the
/// PEs of that host.
#[test]
fn pes_run_where_given_and_reach_their_own_host_by_loads_and_stores() {
    let Some(hosts) = hosts_for_c(2) else {
        return;
    };
    let source = out_dir().join("where.c");
    std::fs::write(&source, WHERE).expect("write the program");
    let program = build(&source, "where", &["-std=c11"]);
    let per_host = [2, 1];
    let output = run_across(&hosts, &per_host, &program, "where");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let host_of = [0, 0, 1];
    for (me, &mine) in host_of.iter().enumerate() {
        let name = netns::host_name(&hosts.addresses[mine]);
        for (pe, &theirs) in host_of.iter().enumerate() {
            let by = match mine == theirs {
                true => "loads and stores",
                false => "the network",
            };
            let line = format!("PE {me} on {name} reaches PE {pe} by {by}");
            assert!(
                stdout.contains(&line),
                "no {line:?} in:\n{stdout}\n{stderr}"
            );
        }
    }
}
