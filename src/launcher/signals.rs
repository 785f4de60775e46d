//! Signals in and out: the launcher's own SIGINT/SIGTERM ([`Interrupts`]), and the signals it
//! sends to the PEs. Every PE runs in a process group of its own, so a signal to a PE reaches
//! the processes it started too (a shell script's commands, a PE's helpers).

use rustix::process::{kill_process_group, Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};

/// The launcher's SIGINT and SIGTERM, caught from [`Interrupts::install`] on.
#[derive(Debug)]
pub(crate) struct Interrupts {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// Catches SIGINT and SIGTERM. As with any tokio signal handler, they stay caught for the
    /// rest of the process's life.
    pub(crate) fn install() -> std::io::Result<Self> {
        Ok(Interrupts {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM and returns its number.
    pub(crate) async fn recv(&mut self) -> i32 {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::INT.as_raw(),
            Some(()) = self.terminate.recv() => Signal::TERM.as_raw(),
            else => std::future::pending().await,
        }
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
