//! How a launched job ended ([`Outcome`]), the exit code the launcher mirrors from it, and the
//! wording of a PE's exit status in messages.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::Signal;

/// How a job that was started ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Every PE exited with status 0.
    Success,
    /// PE `pe` was the first to fail, with `status`; the other PEs were stopped.
    PeFailed {
        /// The PE that failed first.
        pe: usize,
        /// Its process's exit status.
        status: ExitStatus,
    },
    /// The launcher received `signal` (SIGINT, SIGTERM, SIGHUP or SIGQUIT) and stopped the
    /// PEs.
    Interrupted {
        /// The signal's number.
        signal: i32,
    },
    /// PE `pe` ended the job with a global exit (`shmem_global_exit`) of status `code`.
    GlobalExit {
        /// The PE that called it.
        pe: usize,
        /// The status it gave, which the launcher exits with.
        code: i32,
    },
}

impl Outcome {
    /// Whether the job succeeded: every PE exited with status 0, or one ended the job with a
    /// global exit of status 0.
    pub fn success(&self) -> bool {
        self.exit_code() == 0
    }

    /// The exit code `ferroshmem run` exits with: 0 on success; the first failing PE's exit
    /// code when it exited with one; 128 + the signal's number when that PE was killed by a
    /// signal, or when the launcher itself was interrupted (the shell's convention); a global
    /// exit's status, as a process's exit code keeps it (its low 8 bits).
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::PeFailed { status, .. } => match (status.code(), status.signal()) {
                (Some(code), _) if code != 0 => code,
                (_, Some(signal)) => 128 + signal,
                _ => 1,
            },
            Outcome::Interrupted { signal } => 128 + signal,
            Outcome::GlobalExit { code, .. } => code & 0xff,
        }
    }
}

const SIGNAL_NAMES: &[(Signal, &str)] = &[
    (Signal::HUP, "SIGHUP"),
    (Signal::INT, "SIGINT"),
    (Signal::QUIT, "SIGQUIT"),
    (Signal::ILL, "SIGILL"),
    (Signal::TRAP, "SIGTRAP"),
    (Signal::ABORT, "SIGABRT"),
    (Signal::BUS, "SIGBUS"),
    (Signal::FPE, "SIGFPE"),
    (Signal::KILL, "SIGKILL"),
    (Signal::USR1, "SIGUSR1"),
    (Signal::SEGV, "SIGSEGV"),
    (Signal::USR2, "SIGUSR2"),
    (Signal::PIPE, "SIGPIPE"),
    (Signal::ALARM, "SIGALRM"),
    (Signal::TERM, "SIGTERM"),
    (Signal::XCPU, "SIGXCPU"),
    (Signal::XFSZ, "SIGXFSZ"),
    (Signal::SYS, "SIGSYS"),
];

/// A signal's conventional name (`SIGKILL`), or `signal N` for the uncommon ones.
pub(crate) fn signal_name(signal: i32) -> String {
    SIGNAL_NAMES
        .iter()
        .find(|(s, _)| s.as_raw() == signal)
        .map_or_else(|| format!("signal {signal}"), |(_, name)| name.to_string())
}

/// Describes an exit status as the tail of a sentence about a PE: `exited with status 3`,
/// `was killed by signal 9 (SIGKILL)`.
pub(crate) fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (_, Some(signal)) => format!(
            "was killed by signal {signal} ({}){}",
            signal_name(signal),
            if status.core_dumped() {
                ", dumping core"
            } else {
                ""
            }
        ),
        _ => format!("ended with {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_like_the_shell() {
        let exited = ExitStatus::from_raw(3 << 8);
        let killed = ExitStatus::from_raw(9);
        assert_eq!(describe(&exited), "exited with status 3");
        assert_eq!(describe(&killed), "was killed by signal 9 (SIGKILL)");
        assert_eq!(signal_name(63), "signal 63");
        let failed = |status| Outcome::PeFailed { pe: 0, status }.exit_code();
        assert_eq!(failed(exited), 3);
        assert_eq!(failed(killed), 137);
        assert_eq!(Outcome::Interrupted { signal: 2 }.exit_code(), 130);
        assert_eq!(Outcome::Success.exit_code(), 0);
        let ended = |code| Outcome::GlobalExit { pe: 1, code };
        assert_eq!(ended(0).exit_code(), 0);
        assert!(ended(0).success());
        assert_eq!(ended(3).exit_code(), 3);
        assert!(!ended(3).success());
        assert_eq!(ended(256 + 7).exit_code(), 7);
    }
}
