//! Signals in and out: the launcher's own SIGINT, SIGTERM, SIGHUP and SIGQUIT
//! ([`Interrupts`]), and the signals it sends to the PEs. Every PE runs in a process group of
//! its own, so a signal to a PE reaches the processes it started too (a shell script's
//! commands, a PE's helpers).

use rustix::process::{kill_process_group, Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};

/// The signals that stop the job, caught from [`Interrupts::install`] on: SIGINT (Ctrl-C),
/// SIGTERM, SIGHUP (the terminal or session went away) and SIGQUIT (Ctrl-\).
const STOPPING: [Signal; 4] = [Signal::INT, Signal::TERM, Signal::HUP, Signal::QUIT];

/// The launcher's stopping signals (see [`STOPPING`]), caught from [`Interrupts::install`] on.
#[derive(Debug)]
pub(crate) struct Interrupts {
    caught: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Interrupts {
    /// Catches SIGINT, SIGTERM, SIGHUP and SIGQUIT. As with any tokio signal handler, they
    /// stay caught for the rest of the process's life.
    pub(crate) fn install() -> std::io::Result<Self> {
        let caught = STOPPING
            .iter()
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s.as_raw()))?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Interrupts { caught })
    }

    /// Waits for the next stopping signal and returns its number.
    pub(crate) async fn recv(&mut self) -> i32 {
        let next = self.caught.iter_mut().map(|(number, stream)| {
            Box::pin(async move {
                match stream.recv().await {
                    Some(()) => number.as_raw(),
                    None => std::future::pending().await,
                }
            })
        });
        futures::future::select_all(next).await.0
    }
}

/// Sends `signal` to the process group that PE process `pid` leads. A group that is already
/// gone is not an error.
pub(crate) fn signal_group(pid: Pid, signal: Signal) {
    if let Err(e) = kill_process_group(pid, signal) {
        if e != rustix::io::Errno::SRCH {
            tracing::warn!(
                pid = pid.as_raw_nonzero(),
                "cannot signal a PE's processes: {e}"
            );
        }
    }
}
