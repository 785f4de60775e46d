//! `ferroshmem run` never leaves PEs behind: SIGHUP and SIGQUIT stop the job like SIGTERM,
//! and when the launcher dies without stopping it (SIGKILL) the kernel kills the PEs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, test_kill_process, Pid, Signal};

/// Longest any launcher run here may take before the test fails.
const LIMIT: Duration = Duration::from_secs(20);

/// How long the PEs may outlive their launcher.
const PE_DEATH: Duration = Duration::from_secs(5);

/// A directory where each PE of a [`Job`] writes its process id; removed on drop.
struct PidDir(PathBuf);

impl PidDir {
    fn new(test: &str) -> Self {
        let name = format!("ferroshmem-parent-death-{test}-{}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        PidDir(dir)
    }
}

impl Drop for PidDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `ferroshmem run -n N` whose PEs are `sleep 30` processes, and their pids.
struct Job {
    launcher: Child,
    pes: Vec<Pid>,
}

impl Job {
    /// Starts `n` PEs, each writing its pid to `dir` before it becomes a `sleep 30`, and
    /// waits until all have.
    fn start(n: usize, dir: &Path) -> Job {
        let dir = dir.display();
        let body = format!(
            "echo $$ > {dir}/$FERROSHMEM_RANK.tmp && mv {dir}/$FERROSHMEM_RANK.tmp {dir}/$FERROSHMEM_RANK.pid && exec sleep 30"
        );
        let launcher = Command::new(env!("CARGO_BIN_EXE_ferroshmem"))
            .args(["run", "-n", &n.to_string(), "sh", "-c", &body])
            .env_remove("FERROSHMEM_RANK")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferroshmem");
        let mut job = Job {
            launcher,
            pes: Vec::new(),
        };
        let started = Instant::now();
        while job.pes.len() < n {
            assert!(started.elapsed() < LIMIT, "the PEs never started");
            std::thread::sleep(Duration::from_millis(10));
            job.pes = (0..n)
                .map_while(|rank| {
                    let pid = std::fs::read_to_string(format!("{dir}/{rank}.pid")).ok()?;
                    Pid::from_raw(pid.trim().parse().ok()?)
                })
                .collect();
        }
        job
    }

    fn signal(&self, signal: Signal) {
        kill_process(Pid::from_child(&self.launcher), signal).unwrap();
    }

    /// Waits for the launcher to exit and returns its exit code and stderr.
    fn finish(&mut self) -> (Option<i32>, String) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.launcher.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > LIMIT {
                let _ = self.launcher.kill();
                panic!("ferroshmem still running after {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        use std::io::Read;
        let _ = self
            .launcher
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr);
        (status.code(), stderr)
    }

    /// Asserts that every PE is gone (or a zombie nobody reaped yet) within [`PE_DEATH`].
    fn expect_pes_gone(&self) {
        let deadline = Instant::now() + PE_DEATH;
        let alive = |pid: Pid| {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()));
            let zombie = stat
                .unwrap_or_default()
                .rsplit(") ")
                .next()
                .is_some_and(|s| s.starts_with('Z'));
            test_kill_process(pid).is_ok() && !zombie
        };
        while self.pes.iter().any(|&pid| alive(pid)) {
            assert!(
                Instant::now() < deadline,
                "PE processes {:?} outlived their launcher by {PE_DEATH:?}",
                self.pes
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Job {
    /// Never leaves a process of the test behind, whatever the test found.
    fn drop(&mut self) {
        let _ = self.launcher.kill();
        let _ = self.launcher.wait();
        for &pid in &self.pes {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
}

#[test]
fn pes_die_with_a_launcher_killed_by_sigkill() {
    let dir = PidDir::new("sigkill");
    let mut job = Job::start(2, &dir.0);
    job.signal(Signal::KILL);
    let (code, _) = job.finish();
    assert_eq!(code, None, "the launcher was killed");
    job.expect_pes_gone();
}

#[test]
fn sighup_and_sigquit_to_the_launcher_stop_the_job() {
    for (signal, name) in [(Signal::HUP, "SIGHUP"), (Signal::QUIT, "SIGQUIT")] {
        let dir = PidDir::new(name);
        let mut job = Job::start(2, &dir.0);
        job.signal(signal);
        let (code, stderr) = job.finish();
        let stopping = format!("ferroshmem: received {name}; stopping the PEs");
        assert!(stderr.contains(&stopping), "no {stopping:?} in {stderr:?}");
        assert_eq!(code, Some(128 + signal.as_raw()), "{stderr}");
        job.expect_pes_gone();
    }
}
