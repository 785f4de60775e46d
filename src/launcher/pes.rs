//! Starting the PE processes: one process group each, killed by the kernel if the launcher
//! dies, the bootstrap environment, piped output, and a task per PE that forwards its output
//! and reports its exit.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{getpid, getppid, set_parent_process_death_signal, Pid, Signal};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::hosts::{forwarded_env, remote_words, Placement};
use super::output::{forward, status, Sinks, Stream};
use super::root::Root;
use super::signals::signal_group;
use super::LaunchOptions;
use crate::launch_env::vars;

/// A PE process's exit, as the PE's task reports it.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) rank: usize,
    pub(crate) status: ExitStatus,
}

/// A started PE.
#[derive(Debug)]
pub(crate) struct RunningPe {
    /// Its process, which leads the PE's process group.
    pub(crate) pid: Pid,
    /// Forwards its output, waits for it, and sends its [`Exit`].
    pub(crate) task: JoinHandle<()>,
}

/// Builds PE `rank`'s command: the program, its arguments and the bootstrap environment,
/// started here or, for a PE placed on another host, through the remote shell.
#[allow(unsafe_code)] // `pre_exec`, whose closure runs between fork and exec
fn command(
    rank: usize,
    placement: &Placement,
    options: &LaunchOptions,
    root: &Root,
    timeout: Duration,
) -> Command {
    let mut env = vec![
        (vars::RANK.to_string(), rank.to_string().into()),
        (vars::SIZE.to_string(), options.n_pes.to_string().into()),
        (
            vars::LOCAL_RANK.to_string(),
            placement.local_rank.to_string().into(),
        ),
        (
            vars::LOCAL_SIZE.to_string(),
            placement.local_size.to_string().into(),
        ),
        (vars::ROOT.to_string(), root.address.to_string().into()),
        (vars::SECRET.to_string(), root.secret_hex.clone().into()),
        (
            vars::BOOTSTRAP_TIMEOUT.to_string(),
            format!("{}ms", timeout.as_millis()).into(),
        ),
    ];
    if let Some(bind) = options.bind {
        env.push((vars::BIND.to_string(), bind.name().into()));
    }
    let mut cmd = match &placement.host {
        None => {
            let mut cmd = Command::new(&options.program);
            cmd.args(&options.args).envs(env);
            cmd
        }
        Some(host) => {
            let (rsh, rsh_args) = options
                .rsh
                .split_first()
                .map_or((std::ffi::OsStr::new("ssh"), &[][..]), |(c, a)| {
                    (c.as_os_str(), a)
                });
            let mut forwarded = forwarded_env();
            forwarded.retain(|(k, _)| !env.iter().any(|(e, _)| e == k));
            forwarded.extend(env);
            let cwd = std::env::current_dir().ok();
            let mut cmd = Command::new(rsh);
            cmd.args(rsh_args).arg(host).args(remote_words(
                &forwarded,
                &options.program,
                &options.args,
                cwd.as_deref().map(|d| d.as_os_str()),
            ));
            cmd
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let launcher = getpid();
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed: it makes two raw system calls (prctl, getppid)
    // through rustix, allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || die_with_launcher(launcher));
    }
    cmd
}

/// In a new PE process, before `exec`: asks the kernel to SIGKILL it when the launcher dies
/// (even by SIGKILL, when no handler of the launcher's runs), and gives up if the launcher
/// already has, between the fork and this call. The kernel sends the signal when the thread
/// that started the PE ends, not only the whole launcher: `launch` starts every PE from the
/// thread that polls it, which must outlive the job (the `ferroshmem` binary's main thread,
/// or a tokio worker thread, which lives as long as its runtime).
fn die_with_launcher(launcher: Pid) -> std::io::Result<()> {
    set_parent_process_death_signal(Some(Signal::KILL))?;
    if getppid() != Some(launcher) {
        // Not `io::Error::other`, which would allocate.
        return Err(rustix::io::Errno::SRCH.into());
    }
    Ok(())
}

/// Starts PE `rank`. Its task sends the PE's [`Exit`] to `exits` as soon as the process
/// ends, then forwards what is left of its output; when processes the PE left behind still
/// hold its output open the grace period after it ended, forwarding stops and they are killed.
pub(crate) fn spawn(
    rank: usize,
    placement: &Placement,
    options: &LaunchOptions,
    root: &Root,
    timeout: Duration,
    sinks: &Sinks,
    exits: UnboundedSender<Exit>,
) -> std::io::Result<RunningPe> {
    let drain = options.grace;
    let mut child = command(rank, placement, options, root, timeout).spawn()?;
    let pid = child
        .id()
        .and_then(|id| Pid::from_raw(id.try_into().ok()?))
        .ok_or_else(|| std::io::Error::other("the new process has no id"))?;
    let (give_up, when) = watch::channel(None);
    let forwarders = [
        child.stdout.take().map(|p| {
            let (sinks, when) = (sinks.clone(), when.clone());
            tokio::spawn(forward(p, rank, Stream::Stdout, sinks, when))
        }),
        child.stderr.take().map(|p| {
            let (sinks, when) = (sinks.clone(), when.clone());
            tokio::spawn(forward(p, rank, Stream::Stderr, sinks, when))
        }),
    ];
    let task = tokio::spawn(async move {
        let status = wait(&mut child, rank).await;
        let _ = exits.send(Exit { rank, status });
        give_up.send_replace(Some(Instant::now() + drain));
        let gave_up = futures::future::join_all(forwarders.into_iter().flatten()).await;
        if gave_up.into_iter().any(|g| g.unwrap_or(false)) {
            signal_group(pid, Signal::KILL);
        }
    });
    Ok(RunningPe { pid, task })
}

async fn wait(child: &mut Child, rank: usize) -> ExitStatus {
    match child.wait().await {
        Ok(status) => status,
        Err(e) => {
            status(format_args!("cannot wait for PE {rank}'s process: {e}"));
            let _ = child.start_kill();
            // Counted as a failure with status 1: the real status is unknowable.
            ExitStatus::from_raw(1 << 8)
        }
    }
}
