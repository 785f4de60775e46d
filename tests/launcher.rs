//! `ferroshmem run`: output forwarding, failure handling, signals and the bootstrap root,
//! driving the real binary on shell commands, and on this test binary itself as a ferroshmem
//! PE program (see [`pe_program`]).

use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use ferroshmem::launcher::{launch, LaunchError, LaunchOptions, Outcome};
use rustix::process::{kill_process, Pid, Signal};

#[path = "common/cpus.rs"]
mod cpus;
use cpus::{allowed_list, cpu_list};

/// Longest any launcher run here may take before the test fails.
const LIMIT: Duration = Duration::from_secs(20);

/// Environment variable that makes [`pe_program`] act as a PE.
const PE_MODE: &str = "FERROSHMEM_LAUNCHER_TEST_PE";

/// How a `ferroshmem` process ended.
struct Finished {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    elapsed: Duration,
}

fn start(args: &[&str], env: &[(&str, &str)]) -> Child {
    start_under(&[], args, env)
}

/// [`start`], the launcher run by the command `wrapper` (e.g. `taskset -c 0,1`) when given.
fn start_under(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Child {
    let launcher = env!("CARGO_BIN_EXE_ferroshmem");
    let mut command = match wrapper.split_first() {
        Some((program, wrapper_args)) => {
            let mut command = Command::new(program);
            command.args(wrapper_args).arg(launcher);
            command
        }
        None => Command::new(launcher),
    };
    command
        .args(args)
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "5s")
        .env("FERROSHMEM_SYMMETRIC_SIZE", "1M")
        .env_remove("FERROSHMEM_RANK")
        .env_remove("FERROSHMEM_BIND")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferroshmem")
}

/// Waits for a started `ferroshmem`, killing it and failing the test after [`LIMIT`].
fn finish(child: Child) -> Finished {
    let (started, pid) = (Instant::now(), Pid::from_child(&child));
    let (tx, rx) = channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let Ok(output) = rx.recv_timeout(LIMIT) else {
        let _ = kill_process(pid, Signal::KILL);
        panic!("ferroshmem still running after {LIMIT:?}");
    };
    let output = output.unwrap();
    Finished {
        code: output.status.code(),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

fn run(args: &[&str]) -> Finished {
    finish(start(args, &[]))
}

impl Finished {
    fn stdout_lines(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.stdout);
        text.lines().map(str::to_string).collect()
    }

    /// Asserts the exit code, that stderr contains each of `messages`, and a quick end.
    fn expect(&self, code: i32, messages: &[&str]) {
        let stderr = &self.stderr;
        assert_eq!(self.code, Some(code), "stderr: {stderr}");
        for m in messages {
            assert!(stderr.contains(m), "no {m:?} in stderr: {stderr}");
        }
        assert!(self.elapsed < Duration::from_secs(10), "{:?}", self.elapsed);
    }

    /// Asserts that the `sleep`s the PEs of a [`script`] started are gone (or zombies
    /// nobody reaped yet), waiting up to 5 s.
    fn expect_sleepers_gone(&self, n: usize) {
        let lines = self.stdout_lines();
        let pids: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.split(" sleeping ").nth(1))
            .collect();
        assert_eq!(pids.len(), n, "{lines:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        for pid in pids {
            loop {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
                let stat = stat.unwrap_or_default();
                if stat.is_empty() || stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')) {
                    break;
                }
                assert!(Instant::now() < deadline, "sleep {pid} left running");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A directory where the PEs of a [`script`] mark that they are ready; removed on drop.
struct ReadyDir(std::path::PathBuf);

impl ReadyDir {
    fn new(test: &str) -> Self {
        let name = format!("ferroshmem-launcher-{test}-{}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        ReadyDir(dir)
    }
}

impl Drop for ReadyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A shell script for `n` PEs: every PE but `rank` starts a `sleep 30` (a grandchild of the
/// launcher), prints `sleeping PID`, marks itself ready in `ready` and waits; PE `rank` waits
/// until the others are ready and then runs `then`.
fn script(ready: &ReadyDir, n: usize, rank: usize, then: &str) -> String {
    let dir = ready.0.display();
    format!(
        "if [ $FERROSHMEM_RANK = {rank} ]; then \
           until [ $(ls {dir} | wc -l) -ge {others} ]; do sleep 0.02; done; {then}; \
         fi; \
         sleep 30 & echo sleeping $!; touch {dir}/$FERROSHMEM_RANK; wait",
        others = n - 1
    )
}

#[test]
fn output_lines_are_prefixed_on_their_own_stream() {
    let body = "echo out $FERROSHMEM_RANK; echo err $FERROSHMEM_RANK >&2";
    let done = run(&["run", "-n", "3", "--", "sh", "-c", body]);
    done.expect(0, &[]);
    let mut out = done.stdout_lines();
    out.sort();
    assert_eq!(out, ["[pe 0] out 0", "[pe 1] out 1", "[pe 2] out 2"]);
    let mut err: Vec<&str> = done.stderr.lines().collect();
    err.sort();
    assert_eq!(err, ["[pe 0] err 0", "[pe 1] err 1", "[pe 2] err 2"]);
}

#[test]
fn each_pe_gets_its_place_and_the_root() {
    let body = "echo $FERROSHMEM_RANK $FERROSHMEM_SIZE $FERROSHMEM_LOCAL_RANK \
                $FERROSHMEM_LOCAL_SIZE $FERROSHMEM_BOOTSTRAP_TIMEOUT $FERROSHMEM_ROOT \
                $FERROSHMEM_SECRET";
    let done = run(&["run", "--np", "2", "--timeout", "7s", "sh", "-c", body]);
    done.expect(0, &[]);
    let mut out = done.stdout_lines();
    out.sort();
    let fields: Vec<Vec<&str>> = out.iter().map(|l| l.split(' ').collect()).collect();
    assert_eq!(fields[0][..7], ["[pe", "0]", "0", "2", "0", "2", "7000ms"]);
    assert_eq!(fields[1][..7], ["[pe", "1]", "1", "2", "1", "2", "7000ms"]);
    assert!(fields[0][7].starts_with("127.0.0.1:"), "{out:?}");
    assert_eq!(fields[0][7..], fields[1][7..]);
    assert_eq!(fields[0][8].len(), 64);
    // This host named in two entries: one host of two PEs, local ranks 0 and 1.
    let done = run(&[
        "run",
        "--hosts",
        "localhost:1,127.0.0.1:1",
        "sh",
        "-c",
        body,
    ]);
    done.expect(0, &[]);
    let mut out = done.stdout_lines();
    out.sort();
    let places: Vec<Vec<&str>> = out.iter().map(|l| l.split(' ').collect()).collect();
    assert_eq!(places[0][2..6], ["0", "2", "0", "2"], "{out:?}");
    assert_eq!(places[1][2..6], ["1", "2", "1", "2"], "{out:?}");
}

#[test]
fn unfinished_and_binary_lines_pass_through() {
    let done = run(&["run", "-n", "1", "printf", r"a\n\377\376\nno newline"]);
    done.expect(0, &[]);
    let want = b"[pe 0] a\n[pe 0] \xff\xfe\n[pe 0] no newline\n";
    assert_eq!(done.stdout, want);
}

#[test]
fn a_failing_pe_stops_the_others_and_sets_the_exit_code() {
    let ready = ReadyDir::new("fail");
    let body = script(&ready, 3, 1, "exit 3");
    let done = run(&["run", "-n", "3", "sh", "-c", &body]);
    let failed = "ferroshmem: PE 1 exited with status 3; stopping the other PEs";
    done.expect(3, &[failed]);
    done.expect_sleepers_gone(2);
}

#[test]
fn a_pe_killed_by_a_signal_is_reported() {
    let ready = ReadyDir::new("kill");
    let body = script(&ready, 2, 0, "kill -9 $$");
    let done = run(&["run", "-n", "2", "sh", "-c", &body]);
    done.expect(128 + 9, &["PE 0 was killed by signal 9 (SIGKILL)"]);
    done.expect_sleepers_gone(1);
}

#[test]
fn pes_ignoring_sigterm_are_killed_after_the_grace_period() {
    let ready = ReadyDir::new("grace");
    let body = format!("trap '' TERM; {}", script(&ready, 3, 2, "exit 1"));
    let done = run(&["run", "-n", "3", "--grace", "300ms", "sh", "-c", &body]);
    let killed = "PE(s) 0, 1 still running 300ms after SIGTERM; killing them";
    done.expect(1, &[killed]);
    assert!(done.elapsed >= Duration::from_millis(300));
    done.expect_sleepers_gone(2);
}

#[test]
fn sigterm_to_the_launcher_stops_the_job() {
    let ready = ReadyDir::new("sigterm");
    let body = script(&ready, 2, 9, ":");
    let job = start(&["run", "-n", "2", "sh", "-c", &body], &[]);
    let started = Instant::now();
    while std::fs::read_dir(&ready.0).unwrap().count() < 2 {
        assert!(started.elapsed() < LIMIT, "the PEs never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill_process(Pid::from_child(&job), Signal::TERM).unwrap();
    let done = finish(job);
    let stopping = "ferroshmem: received SIGTERM; stopping the PEs";
    done.expect(128 + 15, &[stopping]);
    done.expect_sleepers_gone(2);
}

#[test]
fn a_missing_program_is_named() {
    let done = run(&["run", "-n", "2", "--", "ferroshmem-no-such-program"]);
    done.expect(127, &["cannot start `ferroshmem-no-such-program`"]);
}

#[test]
fn help_and_bad_arguments() {
    let help = run(&["run", "--help"]);
    assert_eq!(help.code, Some(0));
    let text = help.stdout_lines().join("\n");
    for option in ["--np", "--grace", "--timeout", "--bind-to", "PROGRAM"] {
        assert!(text.contains(option), "{text}");
    }
    assert_eq!(run(&["run", "-n", "0", "true"]).code, Some(2));
    assert_eq!(run(&["run", "-n", "2"]).code, Some(2));
    let refused = [
        (&["run", "-n", "100000000000", "true"][..], "at most"),
        (
            &["run", "--hosts", "a:18446744073709551615,b:1", "true"],
            "at most",
        ),
        (
            &["run", "-N", "9223372036854775808", "--hosts", "a,b", "true"],
            "at most",
        ),
        (
            &["run", "-n", "1", "--grace", "10000000000000000000s", "true"],
            "longer than a year",
        ),
        (
            &["run", "-n", "1", "--timeout", "20000000000000000s", "true"],
            "longer than a year",
        ),
        (&["run", "--hosts", "fd00::5,fd00::6", "true"], "brackets"),
        (
            &["run", "-n", "2", "--grce", "1s", "true"],
            "--grce is not an option",
        ),
        (
            &["run", "-n", "2", "-x", "FOO=1", "true"],
            "-x is not an option",
        ),
        (
            &["run", "--bogus", "-n", "2", "true"],
            "--bogus is not an option",
        ),
    ];
    for (args, why) in refused {
        let done = run(args);
        assert_eq!(done.code, Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(why), "{args:?}: {}", done.stderr);
        assert!(
            !done.stderr.contains("panicked"),
            "{args:?}: {}",
            done.stderr
        );
    }
    let bad_peer_timeout = finish(start(
        &["run", "-n", "1", "true"],
        &[("FERROSHMEM_PEER_TIMEOUT", "abc")],
    ));
    assert_ne!(
        bad_peer_timeout.code,
        Some(0),
        "{}",
        bad_peer_timeout.stderr
    );
    assert!(
        bad_peer_timeout.stderr.contains("FERROSHMEM_PEER_TIMEOUT"),
        "{}",
        bad_peer_timeout.stderr
    );
    let bad_bind = run(&["run", "-n", "1", "--bind-to", "socket", "true"]);
    assert_eq!(bad_bind.code, Some(2));
    assert!(
        bad_bind.stderr.contains("expected share, core or none"),
        "{}",
        bad_bind.stderr
    );
}

#[tokio::test]
async fn the_library_call_reports_the_first_failure() {
    let body = "[ $FERROSHMEM_RANK = 2 ] && exit 4; sleep 30";
    let options = LaunchOptions {
        bootstrap_timeout: Some(Duration::from_secs(5)),
        ..LaunchOptions::new(3, "sh").args(["-c", body])
    };
    let outcome = launch(options).await.unwrap();
    let Outcome::PeFailed { pe: 2, status } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!((status.code(), outcome.exit_code()), (Some(4), 4));
    let missing = launch(LaunchOptions::new(1, "ferroshmem-no-such-program")).await;
    let code = missing.as_ref().map_err(LaunchError::exit_code);
    assert!(matches!(missing, Err(LaunchError::Spawn { .. })));
    assert_eq!(code.err(), Some(127));
}

/// Runs this test binary as the PE program, [`pe_program`] in `mode`, on `n` PEs.
fn run_pes(n: &str, mode: &str) -> Finished {
    run_pes_under(&[], &["-n", n], mode)
}

/// [`run_pes`] with the launcher's options `options` (`-n 2`), the launcher run by the command
/// `wrapper` when given (see [`start_under`]).
fn run_pes_under(wrapper: &[&str], options: &[&str], mode: &str) -> Finished {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let test = [exe, "pe_program", "--exact", "--nocapture"];
    let args = [&["run"], options, &["--"], &test[..]].concat();
    finish(start_under(wrapper, &args, &[(PE_MODE, mode)]))
}

#[test]
fn ferroshmem_pes_form_a_job() {
    let done = run_pes("3", "ok");
    done.expect(0, &[]);
    let out = done.stdout_lines();
    let mut joined: Vec<&String> = out.iter().filter(|l| l.contains("of 3 joined")).collect();
    joined.sort();
    let want: Vec<String> = (0..3)
        .map(|i| format!("[pe {i}] PE {i} of 3 joined"))
        .collect();
    assert_eq!(joined, want.iter().collect::<Vec<_>>());
    assert!(!done.stderr.contains("ferroshmem:"), "{}", done.stderr);
}

#[test]
fn a_crashed_ferroshmem_pe_is_reported_by_the_launcher_and_the_root() {
    let done = run_pes("3", "abort");
    let failed = "ferroshmem: PE 1 was killed by signal 6 (SIGABRT); stopping the other PEs";
    let lost = "ferroshmem: the bootstrap root lost PE 1";
    done.expect(128 + 6, &[failed, lost]);
}

/// `--bind-to core`: every thread of each PE may run on one CPU only, PE `i` (its rank on
/// this host) on the `i`-th CPU this process may run on, in turn.
#[test]
fn bound_pes_run_each_on_one_cpu_dealt_in_rank_order() {
    let done = run_pes_under(&[], &["-n", "3", "--bind-to", "core"], "bind");
    done.expect(0, &[]);
    let allowed = cpu_list(&allowed_list("/proc/self/status"));
    for (pe, cpu) in (0..3).map(|pe| (pe, allowed[pe % allowed.len()])) {
        let want = format!("[pe {pe}] PE {pe} runs on {{\"{cpu}\"}}");
        assert!(
            done.stdout_lines().contains(&want),
            "no {want:?} in {:?}",
            done.stdout_lines()
        );
    }
}

/// The distinct CPU lists of PE `pe`'s threads, as [`pe_program`] printed them in `done`.
fn cpus_of(done: &Finished, pe: usize) -> Vec<Vec<usize>> {
    let prefix = format!("[pe {pe}] PE {pe} runs on ");
    let line = done
        .stdout_lines()
        .into_iter()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {:?}", done.stdout_lines()));
    line[prefix.len()..]
        .trim_matches(['{', '}'])
        .split(", ")
        .map(|list| cpu_list(list.trim_matches('"')))
        .collect()
}

/// Asserts that `n` PEs of `done` split `cpus` between them, every thread of a PE on its
/// share (which CPUs each gets follows the machine's cores).
fn assert_shares(done: &Finished, n: usize, cpus: &[usize]) {
    let shares: Vec<Vec<Vec<usize>>> = (0..n).map(|pe| cpus_of(done, pe)).collect();
    assert!(shares.iter().all(|s| s.len() == 1), "{shares:?}");
    let mut all: Vec<usize> = shares.iter().flat_map(|s| s[0].clone()).collect();
    all.sort_unstable();
    assert_eq!(all, cpus, "{n} PEs: {shares:?}");
}

/// Asserts that every thread of the `n` PEs of `done` may run on all of `cpus`.
fn assert_unbound(done: &Finished, n: usize, cpus: &[usize]) {
    for pe in 0..n {
        assert_eq!(
            cpus_of(done, pe),
            [cpus.to_vec()],
            "PE {pe} of {n} is bound"
        );
    }
}

/// The CPUs of this process, when it may use two at least and `taskset` is installed.
fn two_cpus_and_taskset() -> Option<Vec<usize>> {
    let allowed = cpu_list(&allowed_list("/proc/self/status"));
    if allowed.len() < 2 || Command::new("taskset").arg("-V").output().is_err() {
        eprintln!("skipped: needs two CPUs and taskset (util-linux)");
        return None;
    }
    Some(allowed)
}

/// Asserts that the `n` PEs of `done`, which outnumber `cpus` (in number order), are bound
/// to one of them each, dealt in rank order (`n = 3` on 2 CPUs: PEs 0 and 2 on the first,
/// PE 1 on the other).
fn assert_one_cpu_each_dealt(done: &Finished, n: usize, cpus: &[usize]) {
    let bound: Vec<Vec<Vec<usize>>> = (0..n).map(|pe| cpus_of(done, pe)).collect();
    let dealt: Vec<Vec<Vec<usize>>> = (0..n).map(|pe| vec![vec![cpus[pe % cpus.len()]]]).collect();
    assert_eq!(bound, dealt, "{n} PEs on {cpus:?}");
}

/// Whether `cpus` are all of the machine's online CPUs.
fn the_whole_machine(cpus: &[usize]) -> bool {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    cpu_list(online.trim()) == cpus
}

/// `--bind-to share` on two CPUs (the launcher held to them by `taskset`): 2 PEs get one
/// each; 3 PEs, which outnumber them, one each too, dealt in rank order, where the two are
/// the whole machine (CPUs are dealt only over the whole machine), else none.
#[test]
fn asked_for_shares_split_the_cpus_given_and_the_pes_when_crowded() {
    let Some(allowed) = two_cpus_and_taskset() else {
        return;
    };
    let two = [allowed[0], allowed[1]];
    let taskset = ["taskset", "-c", &format!("{},{}", two[0], two[1])];
    let pair = run_pes_under(&taskset, &["-n", "2", "--bind-to", "share"], "bind");
    pair.expect(0, &[]);
    assert_shares(&pair, 2, &two);
    let crowd = run_pes_under(&taskset, &["-n", "3", "--bind-to", "share"], "bind");
    crowd.expect(0, &[]);
    if the_whole_machine(&two) {
        assert_one_cpu_each_dealt(&crowd, 3, &two);
    } else {
        assert_unbound(&crowd, 3, &two);
    }
}

/// The most PEs a test starts to outnumber the machine's CPUs: machines with more CPUs skip
/// that check, which would start a process per CPU and one more.
const MOST_PES_STARTED_TO_CROWD: usize = 9;

/// By default two PEs share the machine's CPUs, PEs that outnumber them get one each, and
/// PEs placed already (`taskset`) stay on the CPUs they were given.
#[test]
fn by_default_pes_share_the_machine_unless_placed_already() {
    let Some(allowed) = two_cpus_and_taskset() else {
        return;
    };
    if the_whole_machine(&allowed) {
        let pair = run_pes("2", "bind");
        pair.expect(0, &[]);
        assert_shares(&pair, 2, &allowed);
        let crowd_size = allowed.len() + 1;
        if crowd_size <= MOST_PES_STARTED_TO_CROWD {
            let crowd = run_pes(&crowd_size.to_string(), "bind");
            crowd.expect(0, &[]);
            assert_one_cpu_each_dealt(&crowd, crowd_size, &allowed);
        } else {
            eprintln!("not checked: the default on a crowded machine (too many CPUs to crowd)");
        }
    } else {
        eprintln!("not checked: the default share (this process may not use every CPU)");
    }
    if allowed.len() < 3 {
        eprintln!("not checked: PEs placed already (needs three CPUs to place them on two)");
        return;
    }
    let two = [allowed[0], allowed[1]];
    let taskset = ["taskset", "-c", &format!("{},{}", two[0], two[1])];
    let placed = run_pes_under(&taskset, &["-n", "2"], "bind");
    placed.expect(0, &[]);
    assert_unbound(&placed, 2, &two);
}

/// The distinct CPU lists of this process's threads (a thread that ended while they were
/// read is left out).
fn threads_cpus() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("this process's threads")
        .flatten()
        .map(|t| allowed_list(&t.path().join("status").to_string_lossy()))
        .filter(|list| !list.is_empty())
        .collect()
}

/// Not a test of its own: the PE program of [`ferroshmem_pes_form_a_job`] and
/// [`a_crashed_ferroshmem_pe_is_reported_by_the_launcher_and_the_root`], which run this
/// binary under the launcher with [`PE_MODE`] set. Without it, it does nothing.
#[tokio::test]
async fn pe_program() {
    let Ok(mode) = std::env::var(PE_MODE) else {
        return;
    };
    let (pe, provided) = ferroshmem::init_thread(ferroshmem::ThreadLevel::Serialized)
        .await
        .expect("join the job");
    assert_eq!(provided, ferroshmem::ThreadLevel::Multiple);
    assert_eq!(pe.query_thread(), provided);
    pe.barrier_all().await.expect("barrier");
    println!("PE {} of {} joined", pe.my_pe(), pe.n_pes());
    if mode == "bind" {
        println!("PE {} runs on {:?}", pe.my_pe(), threads_cpus());
    }
    if mode == "abort" {
        if pe.my_pe() == 1 {
            std::process::abort();
        }
        // Wait to be stopped by the launcher, so that PE 1 is the first to fail.
        let _ = pe.barrier_all().await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    pe.finalize().await.expect("finalize");
}

/// The launcher's own lines and the PEs' forwarded lines stay whole when stdout and stderr
/// are one pipe: the launcher wrote its status lines in pieces, between which a forwarded
/// line could land (in 5–10 % of the runs before).
#[test]
fn status_lines_and_forwarded_lines_stay_whole_on_one_pipe() {
    let launcher = env!("CARGO_BIN_EXE_ferroshmem");
    // 8 loops at once, 40 jobs each, all writing into one pipe.
    let job = format!("{launcher} run -n 1 -- sh -c 'echo x; exit 1' 2>&1");
    let script = format!("for j in $(seq 8); do (for i in $(seq 40); do {job}; done) & done; wait");
    let out = Command::new("sh")
        .args(["-c", &script])
        .env_remove("FERROSHMEM_RANK")
        .output()
        .expect("sh");
    let text = String::from_utf8_lossy(&out.stdout);
    let broken: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("[pe 0] ") && !l.starts_with("ferroshmem: "))
        .collect();
    assert!(broken.is_empty(), "split lines: {broken:?}");
    assert_eq!(text.matches("[pe 0] x").count(), 320, "{text}");
}

/// A program that never joins the job (one that does not use ferroshmem) runs to its end
/// under the launcher, which says that no PE joined and takes the program's exit status.
#[test]
fn a_program_that_never_joins_runs_on_and_is_said_to() {
    let done = run(&[
        "run",
        "-n",
        "2",
        "--timeout",
        "1s",
        "sh",
        "-c",
        "sleep 2; exit 5",
    ]);
    assert_eq!(done.code, Some(5), "{}", done.stderr);
    assert!(done.stderr.contains("no PE joined"), "{}", done.stderr);
}
