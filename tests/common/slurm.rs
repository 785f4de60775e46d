//! A Slurm cluster over namespace hosts (`netns.rs`), for the tests under `srun`: the
//! controller in this machine's own network namespace, on the hosts' bridge, and one `slurmd`
//! in each host, under that host's name. Made as root where Slurm is installed (`.ci/run`
//! installs it); [`Cluster::make`] says why and returns `None` otherwise. The daemons are
//! stopped and their files deleted when the value is dropped, and get SIGTERM if the test
//! process dies first (killed: its namespace hosts stay, as every such test's do).
//!
//! # What the daemons get
//! - No authentication (`auth/none`, `cred/none`): they all run as root on one machine.
//! - Their own files in one directory (configuration, state, spool, logs), and a controller
//!   port picked free, so that clusters of concurrent tests do not meet.
//! - Each `slurmd` a mount namespace of its own, in which empty file systems cover
//!   `/sys/fs/cgroup` and the PMIx plugin's client directory. Slurm's `cgroup/v1` plugin
//!   then starts whatever cgroups the machine has (`proctrack/pgid` and `task/none` use
//!   none), and each node has its own client directory, as separate hosts would: the
//!   plugin names it after the job alone, so nodes sharing `/tmp` collided and refused the
//!   job's steps.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::netns::{self, Hosts};

/// How long the nodes may take to report to the controller.
const COME_UP: Duration = Duration::from_secs(30);

/// A running Slurm cluster of one node per host.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    /// The controller first, then each node's `slurmd`.
    daemons: Vec<Child>,
}

/// Where `program` is: in `/usr/sbin`, where Debian puts Slurm's daemons whether or not it
/// is on the `PATH`, else wherever the `PATH` finds it.
fn program(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from(name)
    }
}

/// Whether `program` runs; says it is missing (the test is then skipped) where it does not.
fn installed(name: &str, package: &str) -> bool {
    let runs = Command::new(program(name))
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !runs {
        eprintln!("skipped: `{name}` ({package}) is not installed");
    }
    runs
}

/// A TCP port for a controller: one free now below Linux's range of ports handed out for
/// outgoing connections and port 0 (from 32768), where the jobs' own connections could take
/// it before the controller binds it; tried from a start of this process's own.
fn controller_port() -> u16 {
    static MADE: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id()
        .wrapping_mul(7)
        .wrapping_add(MADE.fetch_add(1, Ordering::Relaxed).wrapping_mul(131));
    (0..12_000)
        .map(|k| 20_000 + (start.wrapping_add(k * 17) % 12_000) as u16)
        .find(|&port| std::net::TcpListener::bind(("0.0.0.0", port)).is_ok())
        .expect("a free port for the Slurm controller")
}

/// Whether this Slurm has the `auth/none` plugin (Slurm 22.05 does; later releases dropped
/// it): looked for in the plugin directories of Debian's and Slurm's own packages.
fn has_auth_none() -> bool {
    let dirs = ["/usr/lib", "/usr/lib64", "/usr/local/lib"];
    let found = dirs.iter().any(|dir| {
        let subdirs = std::fs::read_dir(dir).into_iter().flatten().flatten();
        subdirs.map(|e| e.path()).any(|sub| {
            sub.join("auth_none.so").exists()
                || std::fs::read_dir(&sub)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|e| e.path().join("auth_none.so").exists())
        })
    });
    if !found {
        eprintln!("skipped: this Slurm has no auth/none plugin (Slurm 22.05 has)");
    }
    found
}

impl Cluster {
    /// Starts a cluster of one node per host of `hosts` and waits until every node is idle,
    /// or says why it cannot and returns `None`. Panics, with the daemons' logs, where they
    /// start but the nodes do not come up.
    pub fn make(hosts: &Hosts) -> Option<Cluster> {
        let programs = [
            ("slurmctld", "slurmctld"),
            ("slurmd", "slurmd"),
            ("srun", "slurm-client"),
            ("setpriv", "util-linux"),
        ];
        if !programs.iter().all(|(p, package)| installed(p, package)) || !has_auth_none() {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("fsh-slurm-{}", hosts.bridge_address));
        let _ = std::fs::remove_dir_all(&dir);
        let conf = dir.join("slurm.conf");
        let mut cluster = Cluster {
            dir,
            conf,
            daemons: Vec::new(),
        };
        cluster.write_config(hosts).expect("the cluster's files");
        cluster.start(hosts).expect("the Slurm daemons start");
        cluster.wait_until_idle(hosts.addresses.len());
        Some(cluster)
    }

    /// `srun`, talking to this cluster; SIGTERM'd, so that it stops its job, if the thread
    /// that starts it ends first (a killed test).
    pub fn srun(&self) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "TERM"])
            .arg(program("srun"))
            .env("SLURM_CONF", &self.conf);
        cmd
    }

    fn write_config(&self, hosts: &Hosts) -> std::io::Result<()> {
        let dir = self.dir.display();
        for sub in ["state", "pmix"] {
            std::fs::create_dir_all(self.dir.join(sub))?;
        }
        let mut conf = format!(
            "ClusterName=fsh\n\
             SlurmctldHost=fsh-ctl({bridge})\n\
             SlurmctldPort={port}\n\
             AuthType=auth/none\n\
             CredType=cred/none\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             ProctrackType=proctrack/pgid\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/linear\n\
             SwitchType=switch/none\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             KillWait=10\n\
             MinJobAge=2\n\
             SlurmdParameters=config_overrides\n\
             StateSaveLocation={dir}/state\n\
             SlurmdSpoolDir={dir}/spool-%n\n\
             SlurmctldPidFile={dir}/slurmctld.pid\n\
             SlurmdPidFile={dir}/slurmd-%n.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\n\
             SlurmdLogFile={dir}/slurmd-%n.log\n",
            bridge = hosts.bridge_address,
            port = controller_port(),
        );
        let names: Vec<String> = hosts
            .addresses
            .iter()
            .map(|a| netns::host_name(a))
            .collect();
        for (address, name) in hosts.addresses.iter().zip(&names) {
            std::fs::create_dir_all(self.dir.join(format!("spool-{name}")))?;
            conf += &format!("NodeName={name} NodeAddr={address} CPUs=2 State=UNKNOWN\n");
        }
        conf += &format!(
            "PartitionName=all Nodes={} Default=YES MaxTime=INFINITE State=UP\n",
            names.join(",")
        );
        std::fs::write(&self.conf, conf)?;
        std::fs::write(self.dir.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\n")?;
        std::fs::write(
            self.dir.join("mpi.conf"),
            format!("PMIxCliTmpDirBase={dir}/pmix\n"),
        )
    }

    /// Starts the controller (under the host name its configuration gives it) and each
    /// host's `slurmd`, in the foreground, their output in the cluster's directory. Each is
    /// this thread's child (every program before it replaces itself) and gets SIGTERM when
    /// the thread ends (`setpriv --pdeathsig`): a test process that is killed leaves no
    /// daemon behind. The thread that makes the cluster drops it, before it ends.
    fn start(&mut self, hosts: &Hosts) -> std::io::Result<()> {
        let log = |name: &str| std::fs::File::create(self.dir.join(name));
        let controller = Command::new("unshare")
            .args(["--uts", "sh", "-c"])
            .arg(r#"hostname fsh-ctl && exec setpriv --pdeathsig TERM "$2" -D -i -f "$1""#)
            .arg("sh")
            .arg(&self.conf)
            .arg(program("slurmctld"))
            .stdout(log("slurmctld.out")?)
            .stderr(Stdio::from(log("slurmctld.err")?))
            .spawn()?;
        self.daemons.push(controller);
        let pmix = self.dir.join("pmix");
        for address in &hosts.addresses {
            let name = netns::host_name(address);
            let node = Command::new("ip")
                .args(["netns", "exec", &hosts.namespace(address)])
                .args(["unshare", "--uts", "--mount", "--propagation", "private"])
                .args(["sh", "-c"])
                .arg(
                    r#"mount -t tmpfs tmpfs /sys/fs/cgroup && mount -t tmpfs tmpfs "$3" &&
                       hostname "$1" && exec setpriv --pdeathsig TERM "$4" -D -f "$2" -N "$1""#,
                )
                .arg("sh")
                .arg(&name)
                .arg(&self.conf)
                .arg(&pmix)
                .arg(program("slurmd"))
                .stdout(log(&format!("slurmd-{name}.out"))?)
                .stderr(Stdio::from(log(&format!("slurmd-{name}.err"))?))
                .spawn()?;
            self.daemons.push(node);
        }
        Ok(())
    }

    /// Waits until `nodes` nodes report idle; panics with the daemons' logs after
    /// [`COME_UP`].
    fn wait_until_idle(&self, nodes: usize) {
        let started = Instant::now();
        loop {
            let out = Command::new(program("sinfo"))
                .args(["-h", "-N", "-o", "%t"])
                .env("SLURM_CONF", &self.conf)
                .output();
            let states = out
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let idle = states.lines().filter(|s| s.trim() == "idle").count();
            if idle == nodes {
                return;
            }
            assert!(
                started.elapsed() < COME_UP,
                "the Slurm cluster did not come up in {COME_UP:?} (nodes: {states:?}):\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether the controller still lists a job.
    fn has_jobs(&self) -> bool {
        Command::new(program("squeue"))
            .args(["-h", "-o", "%i"])
            .env("SLURM_CONF", &self.conf)
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    }

    /// The last lines of every log in the cluster's directory.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        let entries = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        for path in entries.map(|e| e.path()).filter(|p| is_log(p)) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            all += &format!("--- {}\n", path.display());
            for line in tail.iter().rev() {
                all += line;
                all.push('\n');
            }
        }
        all
    }
}

fn is_log(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("log" | "out" | "err")
    )
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A job a failed test left behind ends with the cluster: its steps' processes
        // would outlive their slurmd.
        let _ = Command::new(program("scancel"))
            .args(["--quiet", "--partition", "all"])
            .env("SLURM_CONF", &self.conf)
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.has_jobs() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        for daemon in &self.daemons {
            if let Some(pid) = rustix::process::Pid::from_raw(daemon.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for daemon in &mut self.daemons {
            while matches!(daemon.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
