//! Watching a running job: the first PE to fail, or a stopping signal to the launcher
//! (SIGINT, SIGTERM, SIGHUP, SIGQUIT), stops the others with SIGTERM, and whatever still runs
//! a grace period later gets SIGKILL (at once on a second stopping signal). The root's end is
//! reported as it happens.

use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::{sleep_until, Instant};

use super::outcome::{describe, signal_name};
use super::output::status;
use super::pes::Exit;
use super::root::Root;
use super::signals::{signal_group, Interrupts};
use super::Outcome;

/// Where the job is in stopping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// A PE ended the job with a global exit: the others exit on their own, and get SIGTERM
    /// at this instant if they have not.
    Ending(Instant),
    /// SIGTERM sent; SIGKILL at this instant.
    Stopping(Instant),
    Killed,
}

/// The job as the supervisor sees it.
struct Job {
    /// Each PE's process while it runs.
    pes: Vec<Option<Pid>>,
    grace: Duration,
    phase: Phase,
    outcome: Outcome,
    /// The PE blamed for the job's failure whose exit has not come yet: the root lost it
    /// before the PE whose failed exit stopped the job (a PE killed by a signal may be
    /// reaped after the survivors that exited because of it).
    blamed: Option<usize>,
    /// The PEs still running when the launcher stopped the job: the root's word that it
    /// lost them is the stop's doing, not news.
    stopped: Vec<bool>,
}

impl Job {
    fn signal(&mut self, signal: Signal) {
        for (rank, pe) in self.pes.iter().enumerate() {
            self.stopped[rank] |= pe.is_some();
        }
        self.pes
            .iter()
            .flatten()
            .for_each(|&pid| signal_group(pid, signal));
    }

    fn running(&self) -> Vec<String> {
        (0..self.pes.len())
            .filter(|&rank| self.pes[rank].is_some())
            .map(|rank| rank.to_string())
            .collect()
    }

    fn stop(&mut self, outcome: Outcome) {
        self.outcome = outcome;
        self.signal(Signal::TERM);
        self.phase = Phase::Stopping(Instant::now() + self.grace);
    }

    /// PE `rank` exited. The first failed exit stops the job; it names the PE that failed
    /// first, which is the first PE the root lost when the root lost one before it, unless
    /// that PE's own exit was the stop (killed by the launcher's SIGTERM or SIGKILL): the
    /// first failed exit is then the one that says what went wrong.
    fn exited(&mut self, Exit { rank, status }: Exit, first_lost: Option<usize>) {
        self.pes[rank] = None;
        if self.blamed == Some(rank) {
            self.blamed = None;
            if !status.success() && !self.stopped_by_the_launcher(&status) {
                self.outcome = Outcome::PeFailed { pe: rank, status };
            }
            self.report();
            return;
        }
        if status.success() || self.phase != Phase::Running {
            return;
        }
        self.stop(Outcome::PeFailed { pe: rank, status });
        match first_lost.filter(|&f| f != rank && self.pes[f].is_some()) {
            Some(first) => {
                // Lost before the stop: the root's word of it is news.
                self.stopped[first] = false;
                self.blamed = Some(first);
            }
            None => self.report(),
        }
    }

    /// Whether `status` is the end of a PE that the launcher was stopping: killed by the
    /// SIGTERM or SIGKILL it sent.
    fn stopped_by_the_launcher(&self, status: &std::process::ExitStatus) -> bool {
        use std::os::unix::process::ExitStatusExt;
        match (self.phase, status.signal()) {
            (Phase::Stopping(_) | Phase::Killed, Some(s)) if s == Signal::TERM.as_raw() => true,
            (Phase::Killed, Some(s)) => s == Signal::KILL.as_raw(),
            _ => false,
        }
    }

    /// Names the PE that failed first.
    fn report(&self) {
        if let Outcome::PeFailed { pe, status: exit } = self.outcome {
            let others = if self.running().is_empty() {
                ""
            } else {
                "; stopping the other PEs"
            };
            status(format_args!("PE {pe} {}{others}", describe(&exit)));
        }
    }

    fn interrupted(&mut self, signal: i32) {
        let name = signal_name(signal);
        if matches!(self.phase, Phase::Running | Phase::Ending(_)) {
            status(format_args!("received {name}; stopping the PEs"));
            self.stop(Outcome::Interrupted { signal });
        } else {
            status(format_args!("received {name} again; killing the PEs"));
            self.kill();
        }
    }

    /// The root says PE `pe` ended the job with `code` (a global exit): the job's outcome
    /// from now on, whatever the PEs' exits say. The other PEs exit on their own; those
    /// still running a grace period later are stopped.
    fn global_exit(&mut self, pe: usize, code: i32) {
        if matches!(self.outcome, Outcome::GlobalExit { .. }) || self.phase != Phase::Running {
            return;
        }
        status(format_args!(
            "PE {pe} ended the job with global_exit({code})"
        ));
        self.outcome = Outcome::GlobalExit { pe, code };
        self.phase = Phase::Ending(Instant::now() + self.grace);
    }

    fn grace_over(&mut self) {
        let running = self.running().join(", ");
        if let Phase::Ending(_) = self.phase {
            status(format_args!(
                "PE(s) {running} still running {:?} after the global exit; stopping them",
                self.grace
            ));
            self.signal(Signal::TERM);
            self.phase = Phase::Stopping(Instant::now() + self.grace);
            return;
        }
        status(format_args!(
            "PE(s) {running} still running {:?} after SIGTERM; killing them",
            self.grace
        ));
        self.kill();
    }

    fn kill(&mut self) {
        self.signal(Signal::KILL);
        self.phase = Phase::Killed;
    }
}

/// How long a first failed exit waits for the root to tell of a PE it lost: survivors may
/// learn of a killed peer from their own connections and exit before the root has read the
/// killed PE's closed connection.
const LOSS_SETTLE: Duration = Duration::from_millis(50);

/// The first PE the root lost, as `exit` is handled: for the first failed exit of a running
/// job, once the root had [`LOSS_SETTLE`] to learn of a loss.
async fn first_lost_by(job: &Job, exit: &Exit, root: &Root) -> Option<usize> {
    let known = root.first_lost();
    if known.is_some() || exit.status.success() || job.phase != Phase::Running {
        return known;
    }
    tokio::time::sleep(LOSS_SETTLE).await;
    root.first_lost()
}

/// Watches the job until every PE process has exited and returns how it ended, and which
/// PEs the launcher stopped.
pub(crate) async fn supervise(
    pids: Vec<Pid>,
    mut exits: UnboundedReceiver<Exit>,
    grace: Duration,
    interrupts: &mut Interrupts,
    root: &mut Root,
) -> (Outcome, Vec<bool>) {
    let mut job = Job {
        stopped: vec![false; pids.len()],
        pes: pids.into_iter().map(Some).collect(),
        grace,
        phase: Phase::Running,
        outcome: Outcome::Success,
        blamed: None,
    };
    while job.pes.iter().any(Option::is_some) {
        let deadline = match job.phase {
            Phase::Ending(at) | Phase::Stopping(at) => Some(at),
            Phase::Running | Phase::Killed => None,
        };
        tokio::select! {
            exit = exits.recv() => match exit {
                Some(exit) => {
                    if let Some((pe, code)) = root.global_exit() {
                        job.global_exit(pe, code);
                    }
                    let first_lost = first_lost_by(&job, &exit, root).await;
                    job.exited(exit, first_lost);
                }
                None => break,
            },
            signal = interrupts.recv() => job.interrupted(signal),
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                job.grace_over();
            }
            () = root.ended(&job.stopped) => {}
        }
    }
    (job.outcome, job.stopped)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command, ExitStatus};

    use super::*;

    /// PE 0 exits with status 1; the root had lost PE 1 just before, so PE 1 is blamed
    /// until its exit comes. Where that exit is the launcher's own SIGTERM, PE 0's failure
    /// is the job's; where PE 1 failed by itself (or was killed from elsewhere), PE 1's.
    #[test]
    fn a_pe_killed_by_the_stop_is_not_blamed_over_the_exit_that_stopped_the_job() {
        // SIGTERM: the stop's; SIGKILL while the stop waits out its grace: from elsewhere
        // (the launcher sends it only after); status 3: PE 1's own.
        let cases = [(15, 0), (9, 1), (3 << 8, 1)].map(|(raw, pe)| (ExitStatus::from_raw(raw), pe));
        for (pe1_status, blamed) in cases {
            // A stand-in for PE 1's process group, which the stop signals.
            let mut sleeper = Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .expect("sleep starts");
            let pid = Pid::from_child(&sleeper);
            let mut job = Job {
                stopped: vec![false; 2],
                pes: vec![None, Some(pid)],
                grace: Duration::from_secs(5),
                phase: Phase::Running,
                outcome: Outcome::Success,
                blamed: None,
            };
            let failed = ExitStatus::from_raw(1 << 8);
            job.exited(
                Exit {
                    rank: 0,
                    status: failed,
                },
                Some(1),
            );
            assert_eq!(job.blamed, Some(1));
            job.exited(
                Exit {
                    rank: 1,
                    status: pe1_status,
                },
                Some(1),
            );
            match job.outcome {
                Outcome::PeFailed { pe, .. } => assert_eq!(pe, blamed, "{pe1_status:?}"),
                ref other => panic!("{other:?}"),
            }
            assert_eq!(job.stopped, [false, false], "PE 1 was lost before the stop");
            let _ = sleeper.kill();
            let _ = sleeper.wait();
        }
    }
}
