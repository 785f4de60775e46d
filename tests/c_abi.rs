//! The C ABI end to end, as a C user runs it: each program of `tests/c/` built with
//! `ferroshmem cc` (the C++ one with `ferroshmem c++`) against `shmem.h` and
//! `libferroshmem_c`, then run with
//! `ferroshmem run -np N` at 1, 2 and 4 PEs (each program checks its own values and exits
//! non-zero on the first difference); the OpenSHMEM benchmarks of `benches/oshmem/` built
//! unmodified; and the C ABI's refusals (a routine given an address outside the heap ends
//! the job, naming the routine, the error and the PE).
//!
//! Skipped, saying so, where no C (or C++) compiler is installed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::c_programs::{
    build, build_with, ferroshmem, finish, have_cc, have_compiler, out_dir, start, test_source,
};

/// Builds `tests/c/NAME.c` and runs it at 1, 2 and 4 PEs; every run must exit 0.
fn check_program(name: &str) {
    check_source("cc", &format!("{name}.c"), name, "-std=c11");
}

/// Builds `tests/c/FILE` with `ferroshmem DRIVER` in language standard `std` into `name`
/// and runs it at 1, 2 and 4 PEs; every run must exit 0.
fn check_source(driver: &str, file: &str, name: &str, std: &str) {
    if !have_compiler(driver) {
        return;
    }
    let program = build_with(driver, &test_source(file), name, &[std]);
    for n in ["1", "2", "4"] {
        let what = format!("{name} at {n} PEs");
        let output = finish(
            ferroshmem(&["run", "-np", n, program.to_str().expect("a UTF-8 path")]),
            &what,
        );
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert!(
            output.status.success(),
            "{what} failed ({:?}):\n{stdout}\n{stderr}",
            output.status
        );
        eprintln!("{what}: {} lines of checks passed", stdout.lines().count());
    }
}

#[test]
fn setup_and_queries() {
    check_program("setup");
}

#[test]
fn memory_management() {
    check_program("memory");
}

#[test]
fn remote_memory_access() {
    check_program("rma");
}

#[test]
fn atomics() {
    check_program("amo");
}

#[test]
fn signals() {
    check_program("signal");
}

#[test]
fn point_to_point_synchronization_and_locks() {
    check_program("sync");
}

#[test]
fn collectives() {
    check_program("collectives");
}

#[test]
fn teams() {
    check_program("teams");
}

#[test]
fn contexts() {
    check_program("ctx");
}

/// The generic names from C++ (overloads over the C11 tables), inside templates.
#[test]
fn generic_names_from_cpp() {
    check_source("c++", "generic.cpp", "generic", "-std=c++17");
}

/// The OpenSHMEM benchmarks compile unmodified against ferroshmem's `shmem.h`.
#[test]
fn the_oshmem_benchmarks_build_unmodified() {
    if !have_cc() {
        return;
    }
    for name in ["host_pt2pt", "host_collectives"] {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("benches/oshmem/{name}.c"));
        // As their build line has it: the compiler's default C dialect.
        build(&source, name, &[]);
    }
}

/// A routine handed an address that is not symmetric (a local variable on the stack) prints
/// the routine, the error and the PE instead of writing anywhere: a put ends the job with
/// status 1; a team collect (whose output length only the call learns) returns non-zero,
/// here made the program's status 3.
#[test]
fn an_address_outside_the_heap_is_refused_with_a_message() {
    if !have_cc() {
        return;
    }
    let programs = [
        (
            "outside",
            "    int x;\n    shmem_init();\n    shmem_int_p(&x, 1, 0);\n    int status = 0;",
            "shmem_int_p",
            1,
        ),
        (
            "collect_outside",
            "    long dest[4];\n    shmem_init();\n    long *src = shmem_malloc(sizeof(long));\n    \
             *src = 1;\n    int status = shmem_long_collect(SHMEM_TEAM_WORLD, dest, src, 1) ? 3 : 0;",
            "shmem_long_collect",
            3,
        ),
    ];
    for (name, calls, routine, status) in programs {
        let body = format!("{calls}\n    shmem_finalize();\n    return status;");
        let output = run_program(name, &body, "2");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(status), "{name}: {stderr}");
        let said = |pe| {
            format!("ferroshmem: PE {pe}: {routine}: address is outside this job's symmetric heap")
        };
        assert!(
            (0..2).any(|pe| stderr.contains(&said(pe))),
            "{name}: {stderr}"
        );
    }
}

/// The deprecated active-set collectives on a set other than the whole job size their own
/// buffers by the call's count: a count no heap holds, or one whose product overflows, ends
/// the job with the routine's message and status 1, before anything is allocated or moved
/// (no abort, no call that returns having moved nothing); so does a set reaching past the
/// job, before any member list is made.
#[test]
fn an_active_set_collective_refuses_counts_no_heap_holds() {
    if !have_cc() {
        return;
    }
    let prelude = "    static long psync[SHMEM_COLLECT_SYNC_SIZE];
                       for (int i = 0; i < SHMEM_COLLECT_SYNC_SIZE; i++)
                           psync[i] = SHMEM_SYNC_VALUE;
    shmem_init();
                       long *src = shmem_malloc(8 * sizeof(long));
                       long *dst = shmem_malloc(16 * sizeof(long));
    shmem_barrier_all();";
    let cases = [
        (
            "set_count_max",
            "shmem_fcollect64(dst, src, (size_t)-1, 0, 0, 2, psync)",
            "shmem_fcollect64",
        ),
        (
            "set_count_huge",
            "shmem_fcollect64(dst, src, (size_t)1 << 40, 0, 0, 2, psync)",
            "shmem_fcollect64",
        ),
        (
            "set_count_wraps",
            "shmem_alltoall64(dst, src, (size_t)1 << 63, 0, 0, 2, psync)",
            "shmem_alltoall64",
        ),
        (
            "set_broadcast_huge",
            "shmem_broadcast64(dst, src, (size_t)1 << 40, 0, 0, 0, 2, psync)",
            "shmem_broadcast64",
        ),
        (
            "set_past_the_job",
            "shmem_barrier(0, 0, 2147483647, psync)",
            "shmem_barrier",
        ),
    ];
    for (name, call, routine) in cases {
        let body = format!(
            "{prelude}
    if (shmem_my_pe() < 2)
        {call};
    shmem_finalize();
    return 0;"
        );
        let output = run_program(name, &body, "3");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            (0..2).any(|pe| stderr.contains(&format!("ferroshmem: PE {pe}: {routine}: "))),
            "{name}: {stderr}"
        );
        assert!(
            !stderr.contains("panic") && !stderr.contains("memory allocation"),
            "{name}: {stderr}"
        );
    }
}

/// A team split whose configuration one PE alone cannot read (a null config with the
/// contexts bit set) fails on every PE instead of leaving the others a team that waits for
/// that PE forever; the parent stays usable.
#[test]
fn a_split_refused_by_one_pe_fails_on_every_pe() {
    if !have_cc() {
        return;
    }
    let body = "    shmem_init();\n    shmem_team_t t = SHMEM_TEAM_INVALID;\n    \
                long mask = shmem_my_pe() == 0 ? SHMEM_TEAM_NUM_CONTEXTS : 0;\n    \
                int rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, 2, NULL, mask, &t);\n    \
                shmem_barrier_all();\n    int ok = rc != 0 && t == SHMEM_TEAM_INVALID;\n    \
                shmem_finalize();\n    return ok ? 0 : 3;";
    let output = run_program("split_refused", body, "2");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("PE 0: shmem_team_split_strided"),
        "{stderr}"
    );
}

/// A team collective whose arguments one PE alone refuses (a `dest` outside the symmetric
/// heap) fails on every member: the others do not wait for that PE's part forever.
#[test]
fn a_collective_refused_by_one_pe_fails_on_every_pe() {
    if !have_cc() {
        return;
    }
    let body = "    shmem_init();\n    long *sym = shmem_malloc(8 * sizeof(long));\n    \
                long own[8];\n    shmem_team_t t = SHMEM_TEAM_INVALID;\n    \
                int made = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, 2, NULL, 0, &t);\n    \
                long *dest = shmem_my_pe() == 0 ? own : sym;\n    \
                int rc = shmem_long_broadcast(t, dest, sym, 8, 0);\n    \
                shmem_barrier_all();\n    int ok = made == 0 && rc != 0;\n    \
                shmem_finalize();\n    return ok ? 0 : 3;";
    let output = run_program("collective_refused", body, "2");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("PE 0: shmem_long_broadcast"), "{stderr}");
    assert!(stderr.contains("PE 1: shmem_long_broadcast"), "{stderr}");
}

/// A C program started directly, with no launcher, is a job of one PE (as OpenSHMEM
/// implementations' singleton mode): it initializes, uses its heap and finalizes.
#[test]
fn a_program_started_without_a_launcher_is_a_job_of_one_pe() {
    if !have_cc() {
        return;
    }
    let body = "    shmem_init();\n    long *x = shmem_malloc(sizeof(long));\n    \
                shmem_long_p(x, 42, 0);\n    shmem_barrier_all();\n    \
                int ok = shmem_n_pes() == 1 && shmem_my_pe() == 0 && shmem_long_g(x, 0) == 42;\n    \
                shmem_free(x);\n    shmem_finalize();\n    return ok ? 0 : 3;";
    let program = build_program("alone", body);
    let output = finish(start(Command::new(&program), "alone"), "alone");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // `RUST_LOG` applies to C programs too: a free metrics port is logged where it is.
    let mut logged = Command::new(&program);
    logged
        .env("RUST_LOG", "info")
        .env("FERROSHMEM_METRICS_ADDR", "0");
    let output = finish(start(logged, "alone, logged"), "alone, logged");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("metrics endpoint at http://"), "{stderr}");
}

/// Builds the C program `body` (the inside of `main`, after `#include <shmem.h>`) as `name`.
fn build_program(name: &str, body: &str) -> PathBuf {
    let source = out_dir().join(format!("{name}.c"));
    let text = format!("#include <shmem.h>\nint main(void) {{\n{body}\n}}\n");
    std::fs::write(&source, text).expect("write the program");
    build(&source, name, &["-std=c11"])
}

/// Builds the C program `body` as [`build_program`] does and runs it at `n` PEs under
/// `ferroshmem run`.
fn run_program(name: &str, body: &str, n: &str) -> Output {
    let program = build_program(name, body);
    finish(
        ferroshmem(&["run", "-n", n, program.to_str().expect("a UTF-8 path")]),
        name,
    )
}

/// The body of a program in which PE `pe` ends the job with `status` while the others wait
/// in a barrier that would otherwise never end.
fn global_exit_body(pe: usize, status: i32) -> String {
    format!(
        "    shmem_init();\n    if (shmem_my_pe() == {pe})\n        shmem_global_exit({status});\n    \
         shmem_barrier_all();\n    shmem_finalize();\n    return 7;"
    )
}

/// `shmem_global_exit` on one PE ends the whole job with its status, while the other PEs
/// wait in a barrier that would otherwise never end: every PE exits with that status (0
/// included), and the launcher says which PE ended the job.
#[test]
fn global_exit_ends_the_job_with_its_status() {
    if !have_cc() {
        return;
    }
    for (name, pe, status, n) in [("global_exit3", 1, 3, "2"), ("global_exit0", 0, 0, "4")] {
        let output = run_program(name, &global_exit_body(pe, status), n);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(status), "{name}: {stderr}");
        let said = format!("PE {pe} ended the job with global_exit({status})");
        assert!(stderr.contains(&said), "{name}: {stderr}");
        // Every PE exited on its own: none was lost, none had to be stopped.
        assert!(!stderr.contains("lost"), "{name}: {stderr}");
        assert!(!stderr.contains("still running"), "{name}: {stderr}");
        assert!(!stderr.contains("no answer"), "{name}: {stderr}");
    }
}

/// Under `mpirun`, where PE 0's process hosts the bootstrap root, a global exit of another PE
/// ends every PE with its status too: PE 0 leaves only once the root has told the others.
#[test]
fn global_exit_under_mpirun() {
    let have_mpirun = Command::new("mpirun").arg("--version").output().is_ok();
    if !have_cc() || !have_mpirun {
        eprintln!("global_exit_under_mpirun: skipped, no C compiler or no mpirun");
        return;
    }
    for status in [5, 0] {
        let name = format!("global_exit_mpirun{status}");
        let program = build_program(&name, &global_exit_body(2, status));
        let mut mpirun = Command::new("mpirun");
        mpirun
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ])
            .args(["-np", "4"])
            .arg(&program);
        let output = finish(start(mpirun, "mpirun"), &name);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(status), "{name}: {stderr}");
        assert!(!stderr.contains("lost"), "{name}: {stderr}");
        // The PE that asked heard the root's answer: PE 0 kept the root until it was given.
        assert!(!stderr.contains("no answer"), "{name}: {stderr}");
    }
}

/// A program that never calls `shmem_finalize` (as programs written for `start_pes` do) leaves
/// the job at its normal exit as if it had: a PE done first waits for the others instead of
/// leaving them to find it lost.
#[test]
fn a_normal_exit_finalizes() {
    if !have_cc() {
        return;
    }
    let body = "    start_pes(0);\n    static int x;\n    shmem_int_p(&x, 1, (_my_pe() + 1) % _num_pes());\n    \
                shmem_barrier_all();\n    return x == 1 ? 0 : 2;";
    for round in 0..3 {
        let output = run_program("no_finalize", body, "4");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "round {round}: {stderr}");
        assert!(!stderr.contains("lost"), "round {round}: {stderr}");
    }
}

/// `shmem_init_thread` provides the level requested, which `shmem_query_thread` then reports;
/// `shmem_init` provides `SHMEM_THREAD_MULTIPLE`.
#[test]
fn the_thread_level_provided_is_the_one_requested() {
    if !have_cc() {
        return;
    }
    for level in 0..3 {
        let body = format!(
            "    int provided = -1, queried = -1;\n    shmem_init_thread({level}, &provided);\n    \
             shmem_query_thread(&queried);\n    shmem_finalize();\n    \
             return provided == {level} && queried == {level} ? 0 : 10 + provided;"
        );
        let output = run_program(&format!("thread_level{level}"), &body, "2");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "level {level}: {stderr}");
    }
    let body = "    int queried = -1;\n    shmem_init();\n    shmem_query_thread(&queried);\n    \
                shmem_finalize();\n    return queried == SHMEM_THREAD_MULTIPLE ? 0 : 10 + queried;";
    let output = run_program("thread_level_init", body, "1");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A split of `SHMEM_TEAM_INVALID` (what PEs left out of an earlier split hold) makes no
/// team and returns non-zero without a word: OpenSHMEM makes it an outcome, not an error.
#[test]
fn splitting_the_invalid_team_is_quiet() {
    if !have_cc() {
        return;
    }
    let body = "    shmem_init();\n    shmem_team_t a = SHMEM_TEAM_WORLD, x = SHMEM_TEAM_WORLD, \
                y = SHMEM_TEAM_WORLD;\n    int s = shmem_team_split_strided(SHMEM_TEAM_INVALID, 0, 1, 1, \
                NULL, 0, &a);\n    int t = shmem_team_split_2d(SHMEM_TEAM_INVALID, 1, NULL, 0, &x, \
                NULL, 0, &y);\n    shmem_finalize();\n    return s != 0 && t != 0 && a == \
                SHMEM_TEAM_INVALID && x == SHMEM_TEAM_INVALID && y == SHMEM_TEAM_INVALID ? 0 : 1;";
    let output = run_program("split_invalid", body, "2");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.trim().is_empty(), "{stderr}");
}

/// The calls at the edges of the spec that programs for other OpenSHMEM libraries make.
#[test]
fn edge_cases() {
    check_program("edges");
}
