//! The `ferroshmem run` launcher: starts a program as the n PEs of one job, one process each,
//! and hosts the job's bootstrap root.
//!
//! Before starting the PEs the launcher binds the root on a loopback port (on an address the
//! other hosts reach when `--hosts` places PEs elsewhere, see [`hosts`]); every PE process
//! receives its place in the job and the way to the root through the environment (see
//! [`crate::launch_env::vars`]), so [`crate::run`] and [`crate::init`] in the program find it.
//!
//! - Output: each line a PE writes is printed on the same stream, prefixed with `[pe i] `
//!   (see the `output` module for the details).
//! - Failure: when a PE exits with a non-zero status or is killed by a signal, the launcher
//!   names it on stderr, sends SIGTERM to the other PEs, SIGKILL to any still running after
//!   the grace period, and exits with the code of [`Outcome::exit_code`].
//! - Interruption: SIGINT, SIGTERM, SIGHUP or SIGQUIT to the launcher is passed on the same
//!   way; a second one kills at once.
//! - Launcher death: every PE process is killed by the kernel (`PR_SET_PDEATHSIG`) when the
//!   launcher dies without stopping it, even by SIGKILL.
//! - PEs run in process groups of their own with stdin closed: signals reach what they
//!   started, and the terminal's Ctrl-C goes to the launcher, which stops the job.
//! - The root's troubles (PEs it lost, a job that never formed) are reported on stderr, but
//!   only the PEs' exit statuses decide the outcome, so programs that do not use ferroshmem
//!   run under the launcher too.
//!
//! [`launch`] is the launcher as a library call, [`relaunch_self`] lets a program (a
//! benchmark) start itself as a job, and [`cli_main`] is the `ferroshmem` binary, which also
//! takes `oshrun`'s and `mpirun`'s spellings (`-np 4`, `-N 2`: see the `argv` module) and
//! wraps the C compiler for programs of the C API (`ferroshmem cc`, `ferroshmem c++`: see the
//! `compile` module).

mod argv;
mod cli;
mod compile;
mod error;
pub mod hosts;
mod metrics;
mod outcome;
mod output;
mod pes;
mod root;
mod signals;
mod supervise;

use std::ffi::OsString;
use std::net::IpAddr;
use std::time::Duration;

use ferroshmem_runtime::config::{Bind, MAX_PES, MAX_SETTING_DURATION};

pub use cli::cli_main;
pub use error::LaunchError;
pub use hosts::Host;
pub use outcome::Outcome;

use crate::launch_env::{bootstrap_timeout, peer_timeout, LaunchEnv};
use crate::Error;

/// Default time between SIGTERM and SIGKILL when the job is stopped.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// What to launch, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Number of PEs, one process each; at least 1.
    pub n_pes: usize,
    /// The program every PE runs (searched in `PATH` when it has no `/`).
    pub program: OsString,
    /// The program's arguments.
    pub args: Vec<OsString>,
    /// Time between SIGTERM and SIGKILL when the job is stopped.
    pub grace: Duration,
    /// How long the job may take to form, for the root and every PE; `None` reads
    /// `FERROSHMEM_BOOTSTRAP_TIMEOUT` (default 60 s).
    pub bootstrap_timeout: Option<Duration>,
    /// Where the PEs run, in rank order; empty: all on this host.
    pub hosts: Vec<Host>,
    /// The remote shell that starts PEs on other hosts (`ssh` by default): the command and
    /// its first arguments; the host and the PE's command line follow.
    pub rsh: Vec<OsString>,
    /// The address the root listens on; `None`: loopback for a job on this host, else the
    /// address this host reaches the first other host from.
    pub root_address: Option<IpAddr>,
    /// Where each PE's threads may run, passed as `FERROSHMEM_BIND`; `None`: that variable
    /// as the launcher has it, if any, else the PEs' default ([`Bind::Share`]).
    pub bind: Option<Bind>,
}

impl LaunchOptions {
    /// `n_pes` PEs of `program`, without arguments, with the default grace period and
    /// bootstrap timeout.
    pub fn new(n_pes: usize, program: impl Into<OsString>) -> Self {
        LaunchOptions {
            n_pes,
            program: program.into(),
            args: Vec::new(),
            grace: DEFAULT_GRACE,
            bootstrap_timeout: None,
            hosts: Vec::new(),
            rsh: vec![OsString::from("ssh")],
            root_address: None,
            bind: None,
        }
    }

    /// Sets the program's arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }
}

/// Runs a job: binds the root, starts the PEs, forwards their output, stops them all when one
/// fails or the launcher is interrupted, and returns how the job ended once every PE process
/// has exited. Catches SIGINT, SIGTERM, SIGHUP and SIGQUIT for the rest of the process's
/// life. Needs a tokio runtime with I/O, time and signals enabled, on a thread that outlives
/// the job: the PEs it starts are killed when the thread that started them ends.
///
/// # Errors
/// [`LaunchError::Spawn`] when the program cannot be started; [`LaunchError::Setup`] for
/// invalid options or when the root or the signal handlers cannot be set up.
pub async fn launch(options: LaunchOptions) -> Result<Outcome, LaunchError> {
    check_options(&options)?;
    // Read by the root's connections and by every PE's: a bad value fails here, at once.
    peer_timeout()?;
    let timeout = match options.bootstrap_timeout {
        Some(t) => t,
        None => bootstrap_timeout()?,
    };
    let placements = hosts::place(&options.hosts, Some(options.n_pes))?;
    let root_ip = hosts::root_address(&placements, options.root_address)?;
    metrics::announce(&placements)?;
    let mut interrupts = signals::Interrupts::install()
        .map_err(|e| Error::os("catching the stopping signals", e))?;
    let mut root = root::Root::start(options.n_pes, root_ip, timeout).await?;
    let (sinks, writers) = output::start();
    let (exits_tx, exits) = tokio::sync::mpsc::unbounded_channel();
    let mut pes = Vec::with_capacity(options.n_pes);
    for (rank, placement) in placements.iter().enumerate() {
        let started = pes::spawn(
            rank,
            placement,
            &options,
            &root,
            timeout,
            &sinks,
            exits_tx.clone(),
        );
        match started {
            Ok(pe) => pes.push(pe),
            Err(source) => {
                for pe in pes {
                    signals::signal_group(pe.pid, rustix::process::Signal::KILL);
                    let _ = pe.task.await;
                }
                drop(sinks);
                writers.finish().await;
                return Err(LaunchError::Spawn {
                    program: options.program.to_string_lossy().into_owned(),
                    source,
                });
            }
        }
    }
    drop((exits_tx, sinks));
    let pids = pes.iter().map(|pe| pe.pid).collect();
    let (outcome, stopped) =
        supervise::supervise(pids, exits, options.grace, &mut interrupts, &mut root).await;
    for pe in pes {
        let _ = pe.task.await;
    }
    root.settle(&stopped).await;
    writers.finish().await;
    Ok(outcome)
}

/// Refuses options no job can run with: no PEs or more than [`MAX_PES`], and a grace
/// period or bootstrap timeout beyond [`MAX_SETTING_DURATION`] (each is added to the clock).
fn check_options(options: &LaunchOptions) -> Result<(), Error> {
    if !(1..=MAX_PES).contains(&options.n_pes) {
        return Err(Error::InvalidArgument(format!(
            "a job of {} PEs: it needs at least one and at most {MAX_PES}",
            options.n_pes
        )));
    }
    let durations = [
        ("grace period", Some(options.grace)),
        ("bootstrap timeout", options.bootstrap_timeout),
    ];
    for (what, duration) in durations {
        if let Some(d) = duration.filter(|&d| d > MAX_SETTING_DURATION) {
            return Err(Error::InvalidArgument(format!(
                "a {what} of {d:?} is longer than a year, the most a setting may give"
            )));
        }
    }
    Ok(())
}

/// Starts this very program (`std::env::current_exe()` with the current arguments) as a job
/// of `n_pes` PEs under [`launch`], unless this process already is a PE of a launched job
/// (started by `ferroshmem run`, `mpirun` or `srun`).
///
/// Returns `Some(exit code)` in the launching process, which should exit with it, and `None`
/// in a PE, which should go on to do the PE's work:
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// if let Some(code) = ferroshmem::launcher::relaunch_self(4).await? {
///     std::process::exit(code);
/// }
/// let pe = ferroshmem::init().await?;
/// // ... the benchmark, as one of 4 PE processes ...
/// pe.finalize().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`launch`]; also when the launch environment is malformed or the current executable
/// cannot be found.
pub async fn relaunch_self(n_pes: usize) -> Result<Option<i32>, LaunchError> {
    if LaunchEnv::detect()?.is_some() {
        return Ok(None);
    }
    let exe = std::env::current_exe().map_err(|source| LaunchError::Spawn {
        program: "the current executable".into(),
        source,
    })?;
    let options = LaunchOptions::new(n_pes, exe).args(std::env::args_os().skip(1));
    Ok(Some(launch(options).await?.exit_code()))
}
