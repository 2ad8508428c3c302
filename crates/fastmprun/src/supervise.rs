//! Supervision and the exit policy: wait for the processes, and on the first failure,
//! the timeout or a signal to the launcher, stop the rest (SIGTERM, then SIGKILL after
//! a grace period) and decide the launcher's exit status.
//!
//! The supervisor is a single thread that reaps with `try_wait` whenever SIGCHLD (or a
//! fallback tick) wakes it. Keeping the reaping and the signalling in one thread means a
//! pid is never signalled after it was reaped (and possibly reused).

use std::cell::Cell;
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::os::{self, Wakeup};
use crate::spawn::Label;

/// Time between SIGTERM and SIGKILL when stopping a job: enough to flush and exit.
const TERMINATION_GRACE: Duration = Duration::from_secs(2);

/// Longest sleep between checks even without SIGCHLD; a safety net, not the mechanism.
const FALLBACK_TICK: Duration = Duration::from_millis(200);

/// Exit status for `--timeout`, as timeout(1) uses.
const TIMEOUT_EXIT: u8 = 124;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Exited(i32),
    Killed(c_int),
    /// The OS could not tell us (waiting failed).
    Unknown,
}

impl Outcome {
    fn of(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(signal)) => Outcome::Killed(signal),
            (None, None) => Outcome::Unknown,
        }
    }

    fn failed(self) -> bool {
        self != Outcome::Exited(0)
    }

    /// The launcher's exit status when this outcome decides it (shell convention).
    fn exit_code(self) -> u8 {
        match self {
            Outcome::Exited(code) => u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1),
            Outcome::Killed(signal) => signal_exit_code(signal),
            Outcome::Unknown => 1,
        }
    }
}

fn signal_exit_code(signal: c_int) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// One supervised process.
struct Supervised {
    label: Label,
    child: Child,
    outcome: Option<Outcome>,
}

/// The job is being stopped; it ends with `exit_code` once every process is gone.
struct Stopping {
    exit_code: u8,
    kill_at: Instant,
    killed: bool,
    /// The process whose failure stopped the job, if one did.
    culprit: Option<usize>,
}

impl Stopping {
    fn new(exit_code: u8, culprit: Option<usize>) -> Self {
        Stopping { exit_code, kill_at: Instant::now() + TERMINATION_GRACE, killed: false, culprit }
    }
}

pub struct Supervisor {
    processes: Vec<Supervised>,
    wakeups: Receiver<Wakeup>,
    started: Instant,
    timeout: Option<Duration>,
    /// Bit `s` is set once the launcher has sent signal `s` to the processes, so that deaths it
    /// did not cause can be told apart.
    signals_sent: Cell<u64>,
}

impl Supervisor {
    /// `wakeups` comes from [`os::watch_signals`]; the timeout counts from now.
    pub fn new(wakeups: Receiver<Wakeup>, timeout: Option<Duration>) -> Self {
        Supervisor { processes: Vec::new(), wakeups, started: Instant::now(), timeout, signals_sent: Cell::new(0) }
    }

    pub fn add(&mut self, label: Label, child: Child) {
        self.processes.push(Supervised { label, child, outcome: None });
    }

    /// Kills everything started so far at once; used when a later spawn fails.
    pub fn abort(mut self) {
        self.signal_running(libc::SIGKILL);
        for process in &mut self.processes {
            if process.outcome.is_none() {
                // Already SIGKILLed, so this cannot block for long; the status is moot.
                let _ = process.child.wait();
            }
        }
        self.kill_leftovers();
    }

    /// Runs the job to its end and returns the launcher's exit status.
    pub fn run(mut self) -> u8 {
        let mut stopping: Option<Stopping> = None;
        loop {
            let newly_exited = self.reap();
            if stopping.is_none()
                && let Some(index) =
                    culprit(newly_exited.iter().filter_map(|&index| Some((index, self.processes[index].outcome?))))
            {
                stopping = Some(self.stop_after_failure(index));
            }
            if self.running() == 0 {
                break;
            }
            let now = Instant::now();
            let deadline = self.timeout.map(|timeout| self.started + timeout);
            if stopping.is_none() && deadline.is_some_and(|deadline| now >= deadline) {
                stopping = Some(self.stop_after_timeout());
            }
            if let Some(stop) = &mut stopping
                && !stop.killed
                && now >= stop.kill_at
            {
                self.signal_running(libc::SIGKILL);
                stop.killed = true;
            }
            let next_check = match &stopping {
                None => deadline,
                Some(stop) => (!stop.killed).then_some(stop.kill_at),
            }
            .map_or(now + FALLBACK_TICK, |at| at.min(now + FALLBACK_TICK));
            let wait = next_check.saturating_duration_since(now);
            match self.wakeups.recv_timeout(wait) {
                Ok(Wakeup::Terminate(signal)) => match &mut stopping {
                    None => stopping = Some(self.stop_after_signal(signal)),
                    Some(stop) => {
                        // Asked again while stopping: do not wait for the grace period.
                        self.signal_running(libc::SIGKILL);
                        stop.killed = true;
                    }
                },
                Ok(Wakeup::ChildChanged) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
            }
        }
        self.report_other_signal_deaths(stopping.as_ref().and_then(|stop| stop.culprit));
        self.kill_leftovers();
        stopping.map_or(0, |stop| stop.exit_code)
    }

    /// Names every process, besides the one already reported, that a signal the launcher did not
    /// send killed: when such a rank dies, its peers may fail and be noticed first, and the
    /// report must still name the rank that was killed.
    fn report_other_signal_deaths(&self, reported: Option<usize>) {
        for (index, process) in self.processes.iter().enumerate() {
            if let Some(Outcome::Killed(signal)) = process.outcome
                && Some(index) != reported
                && !self.was_sent(signal)
            {
                let pid = process.child.id();
                eprintln!(
                    "fastmprun: {} (pid {pid}) was killed by signal {}",
                    process.label,
                    os::describe_signal(signal)
                );
            }
        }
    }

    fn was_sent(&self, signal: c_int) -> bool {
        u32::try_from(signal)
            .ok()
            .and_then(|bit| 1u64.checked_shl(bit))
            .is_some_and(|bit| self.signals_sent.get() & bit != 0)
    }

    /// Collects processes that ended since the last call; returns their indices.
    fn reap(&mut self) -> Vec<usize> {
        let mut newly_exited = Vec::new();
        for (index, process) in self.processes.iter_mut().enumerate() {
            if process.outcome.is_some() {
                continue;
            }
            let outcome = match process.child.try_wait() {
                Ok(None) => continue,
                Ok(Some(status)) => Outcome::of(status),
                Err(error) => {
                    eprintln!("fastmprun: cannot wait for {}: {error}", process.label);
                    Outcome::Unknown
                }
            };
            process.outcome = Some(outcome);
            newly_exited.push(index);
        }
        newly_exited
    }

    fn running(&self) -> usize {
        self.processes.iter().filter(|process| process.outcome.is_none()).count()
    }

    /// Signals the process group of every process still running; returns how many.
    fn signal_running(&self, signal: c_int) -> usize {
        if let Some(bit) = u32::try_from(signal).ok().and_then(|bit| 1u64.checked_shl(bit)) {
            self.signals_sent.set(self.signals_sent.get() | bit);
        }
        let mut signalled = 0;
        for process in self.processes.iter().filter(|p| p.outcome.is_none()) {
            os::signal_group(process.child.id(), signal);
            signalled += 1;
        }
        signalled
    }

    /// Kills what the processes may have left behind in their groups (background
    /// children), so that nothing outlives the job and no pipe stays open.
    fn kill_leftovers(&self) {
        for process in &self.processes {
            os::signal_group(process.child.id(), libc::SIGKILL);
        }
    }

    fn stop_after_failure(&self, index: usize) -> Stopping {
        let process = &self.processes[index];
        let outcome = process.outcome.unwrap_or(Outcome::Unknown);
        let pid = process.child.id();
        let how = match outcome {
            Outcome::Exited(code) => format!("exited with status {code}"),
            Outcome::Killed(signal) => {
                format!("was killed by signal {}", os::describe_signal(signal))
            }
            Outcome::Unknown => "ended in an unknown way".into(),
        };
        eprintln!("fastmprun: {} (pid {pid}) {how}", process.label);
        let others = self.signal_running(libc::SIGTERM);
        if others > 0 {
            eprintln!("fastmprun: terminating {}", self.count(others, "other "));
        }
        Stopping::new(outcome.exit_code(), Some(index))
    }

    /// [`count_units`] of what this job's processes are: ranks, or processes of thread ranks.
    fn count(&self, count: usize, qualifier: &str) -> String {
        let unit = self.processes.first().map_or("rank", |process| process.label.unit());
        count_units(count, qualifier, unit)
    }

    fn stop_after_timeout(&self) -> Stopping {
        let running = self.signal_running(libc::SIGTERM);
        let seconds = self.timeout.unwrap_or_default().as_secs_f64();
        eprintln!("fastmprun: timed out after {seconds} s; terminated {}", self.count(running, ""));
        Stopping::new(TIMEOUT_EXIT, None)
    }

    fn stop_after_signal(&self, signal: c_int) -> Stopping {
        let running = self.signal_running(signal);
        eprintln!(
            "fastmprun: received signal {}; forwarded it to {}",
            os::describe_signal(signal),
            self.count(running, "")
        );
        Stopping::new(signal_exit_code(signal), None)
    }
}

/// The failure to report among processes found ended in the same reaping pass, where the order
/// in which they ended is lost: one killed by a signal comes before one that exited with an error
/// status, since the peers of a killed rank exit with errors of their own as a consequence.
fn culprit(ended: impl Iterator<Item = (usize, Outcome)>) -> Option<usize> {
    ended
        .filter(|(_, outcome)| outcome.failed())
        .min_by_key(|(_, outcome)| !matches!(outcome, Outcome::Killed(_)))
        .map(|(index, _)| index)
}

/// `1 rank`, `3 other ranks`, `2 other processes`.
fn count_units(count: usize, qualifier: &str, unit: &str) -> String {
    let plural = match (count, unit) {
        (1, _) => "",
        (_, "process") => "es",
        _ => "s",
    };
    format!("{count} {qualifier}{unit}{plural}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(Outcome::Exited(3).exit_code(), 3);
        assert_eq!(Outcome::Killed(libc::SIGKILL).exit_code(), 137);
        assert_eq!(Outcome::Unknown.exit_code(), 1);
        assert!(!Outcome::Exited(0).failed());
        assert!(Outcome::Killed(libc::SIGTERM).failed());
    }

    #[test]
    fn a_killed_process_is_blamed_before_peers_that_exited_with_errors() {
        let killed = Outcome::Killed(libc::SIGKILL);
        let ended = [(0, Outcome::Exited(1)), (1, killed), (2, Outcome::Exited(0))];
        assert_eq!(culprit(ended.into_iter()), Some(1));
        assert_eq!(
            culprit([(3, Outcome::Exited(0)), (4, Outcome::Exited(2)), (5, Outcome::Exited(1))].into_iter()),
            Some(4)
        );
        assert_eq!(culprit([(0, Outcome::Exited(0))].into_iter()), None);
    }

    #[test]
    fn counts_name_ranks_or_processes() {
        assert_eq!(count_units(1, "other ", "rank"), "1 other rank");
        assert_eq!(count_units(3, "", "rank"), "3 ranks");
        assert_eq!(count_units(2, "other ", "process"), "2 other processes");
    }
}
