//! How a run ends in the ledger: the supervisor's exit report, what the daemon asked for and what it knows
//! about the lease, turned into one [`Finish`]: a typed [`EndReason`] and a sentence a person can read, with
//! whether the run yielded when asked ([`Outcome`]); and [`write_ledger`], which writes it, fenced by ownership.

use std::{collections::VecDeque, time::Duration};

use scrinalia_shared::{DbError, Run, RunState, telemetry};
use scrinalia_shared::{
    EndReason,
    runs::Finish,
    usage::{self, RunUsage},
};
use scrinalia_wire::YIELDED_EXIT_STATUS;
use serde_json::Value;

use crate::{
    Context,
    frame::{ExitReport, StopCause},
};

/// How many stderr lines a failure keeps.
const TAIL_LINES: usize = 20;
/// Longer stderr lines are cut in the error.
const TAIL_LINE_CHARS: usize = 400;

/// The last lines a worker wrote on stderr.
#[derive(Debug, Default)]
pub struct StderrTail(VecDeque<String>);

impl StderrTail {
    /// Keeps `line`, dropping the oldest beyond the limit.
    pub fn push(&mut self, line: &str) {
        if self.0.len() == TAIL_LINES {
            self.0.pop_front();
        }
        self.0.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
    }

    fn appended_to(&self, sentence: String) -> String {
        if self.0.is_empty() {
            sentence
        } else {
            let lines: Vec<&str> = self.0.iter().map(String::as_str).collect();
            format!("{sentence}; last lines of stderr:\n{}", lines.join("\n"))
        }
    }
}

/// Everything the ledger entry is made of.
#[derive(Debug)]
pub struct Ending<'a> {
    /// The supervisor's report (or one made up when the supervisor itself failed).
    pub report: &'a ExitReport,
    /// Why the daemon lost the lease, if it did.
    pub lease_lost: Option<&'a str>,
    /// The run's timeout.
    pub timeout_seconds: u64,
    /// Who asked to cancel the run.
    pub cancelled_by: Option<&'a str>,
    /// The worker's last stderr lines.
    pub tail: &'a StderrTail,
    /// The worker's `{"result": …}`.
    pub result: Option<Value>,
    /// The supervisor ended without a report (`report` was made up by the daemon).
    pub supervisor_lost: bool,
    /// The stall watchdog's sentence, when it stopped the worker.
    pub stalled: Option<&'a str>,
    /// What the run cost, when its worker started.
    pub usage: Option<RunUsage>,
    /// The memory limit and the peak, when the kernel's OOM killer acted in the run's cgroup.
    pub out_of_memory: Option<(u64, Option<u64>)>,
    /// The daemon asked the run to yield.
    pub yield_asked: bool,
}

/// How a run ended: its ledger entry, and whether it yielded when asked.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The ledger entry.
    pub finish: Finish,
    /// The run was asked to yield and ended by it: it exited with [`YIELDED_EXIT_STATUS`] once signalled, or was
    /// still running when the request's grace ended and was stopped. Not when it exited 0 (it finished), failed
    /// by itself, or was cancelled, stopped by a shutdown or fenced after the request: those end as they say.
    pub yielded: bool,
}

impl Ending<'_> {
    /// Whether the run yielded when asked (see [`Outcome::yielded`]).
    pub fn yielded(&self) -> bool {
        let report = self.report;
        let stopped_by_the_yield = match report.stopped_by {
            Some(StopCause::Yield) => true,
            None => report.yield_signalled && report.code == Some(YIELDED_EXIT_STATUS),
            Some(_) => false,
        };
        self.yield_asked && stopped_by_the_yield && self.lease_lost.is_none() && !self.supervisor_lost
    }

    /// The ledger entry and whether the run yielded.
    pub fn outcome(self) -> Outcome {
        let yielded = self.yielded();
        Outcome { finish: self.finish(), yielded }
    }

    /// The ledger entry.
    pub fn finish(self) -> Finish {
        let report = self.report;
        if self.yielded() {
            // Only a preemption asks a run to yield: it ends `interrupted` (`preempted`), resumable from its
            // checkpoint, and its end requests that resume.
            let error = match report.stopped_by {
                Some(StopCause::Yield) => "preempted: asked to yield, the worker was still running when its grace \
                                           ended, so it was stopped; its last checkpoint stands"
                    .to_owned(),
                _ => format!("preempted: yielded at a checkpoint when asked (exit status {YIELDED_EXIT_STATUS})"),
            };
            let reason = EndReason::Preempted;
            return Finish {
                reason,
                exit_code: report.code,
                error: Some(error),
                result: self.result,
                usage: self.usage,
            };
        }
        let (reason, error) = match (self.lease_lost, report.stopped_by) {
            (Some(reason), _) => (EndReason::LeaseLost, format!("lease lost: {reason}")),
            (None, Some(StopCause::Deadline | StopCause::Kill)) => (
                EndReason::LeaseLost,
                "lease lost: the lease was not renewed in time, so the supervisor killed the worker".to_owned(),
            ),
            (None, Some(StopCause::Cancel)) => match self.stalled {
                // The watchdog stopped it as a cancel does; nobody cancelled it.
                Some(sentence) => (EndReason::Stalled, sentence.to_owned()),
                None => {
                    (EndReason::Cancelled, format!("cancelled by {}", self.cancelled_by.unwrap_or("an unknown actor")))
                }
            },
            (None, Some(StopCause::Terminate | StopCause::DaemonGone)) => {
                (EndReason::DaemonShutdown, "daemon shutdown".to_owned())
            }
            // Stopped for a yield the runner did not ask for (it always says when it asks): a stop by the daemon.
            (None, Some(StopCause::Yield)) => (EndReason::DaemonShutdown, "stopped by the daemon".to_owned()),
            (None, Some(StopCause::Timeout)) => {
                (EndReason::Timeout, format!("timed out after {} s", self.timeout_seconds))
            }
            // Told by the cgroup's OOM-kill counter, not guessed from a SIGKILL; a worker that survived a child's
            // OOM kill and exited 0 succeeded.
            (None, None) => match self.out_of_memory {
                Some((limit, peak)) if report.code != Some(0) => {
                    (EndReason::OutOfMemory, self.tail.appended_to(usage::out_of_memory(limit, peak)))
                }
                _ => self.natural_end(),
            },
        };
        let error = (reason.state(report.code) != scrinalia_shared::RunState::Succeeded).then_some(error);
        Finish { reason, exit_code: report.code, error, result: self.result, usage: self.usage }
    }

    fn natural_end(&self) -> (EndReason, String) {
        let report = self.report;
        if self.supervisor_lost {
            let sentence = "the run's supervisor ended without a report; its worker was killed".to_owned();
            return (EndReason::SupervisorLost, self.tail.appended_to(sentence));
        }
        if let Some(e) = &report.spawn_error {
            return (EndReason::SpawnFailed, self.tail.appended_to(format!("could not run the worker: {e}")));
        }
        match (report.code, &report.signal) {
            (Some(0), _) => (EndReason::ExitStatus, String::new()),
            (Some(code), _) => (EndReason::ExitStatus, self.tail.appended_to(format!("exited with status {code}"))),
            (None, Some(signal)) => (EndReason::Signal, self.tail.appended_to(format!("killed by signal {signal}"))),
            (None, None) => (EndReason::ExitStatus, self.tail.appended_to("ended without an exit status".to_owned())),
        }
    }
}

/// Writes the terminal state, fenced by ownership: a run another daemon recovered is left as it is. Retries
/// while the database is unreachable (the lease is still being renewed meanwhile), up to twice the lease.
/// Counts the outcome and marks the run's span failed unless it succeeded.
pub async fn write_ledger(ctx: &Context, run: &Run, finish: &Finish) {
    let give_up = tokio::time::Instant::now() + (ctx.settings.daemon.lease() * 2).max(Duration::from_secs(10));
    let span = tracing::Span::current();
    loop {
        match ctx.db.finish_run(run.id, ctx.daemon_id, finish).await {
            Ok(done) => {
                let (state, duration_ms, exit_code) = (done.state.as_str(), done.duration_ms, done.exit_code);
                match done.error.as_deref() {
                    None => tracing::info!(state, duration_ms, exit_code, "run finished"),
                    Some(error) => tracing::info!(state, duration_ms, exit_code, error, "run finished"),
                }
                let seconds = duration_ms.map(|ms| ms as f64 / 1000.0);
                ctx.metrics.run_finished(&run.worker, state, seconds);
                ctx.metrics.run_usage(&run.worker, finish.usage.as_ref());
                if done.end_reason == Some(EndReason::Preempted) {
                    ctx.metrics.run_preempted(&run.worker);
                }
                if done.state != RunState::Succeeded {
                    telemetry::mark_failed(&span, done.error.as_deref().unwrap_or(state));
                }
                return;
            }
            Err(DbError::LeaseLost { .. }) => {
                let state = finish.state().as_str();
                tracing::warn!(
                    would_be = state,
                    "the run is no longer this daemon's (another daemon recovered it); its ledger entry is left as it is"
                );
                ctx.metrics.run_finished(&run.worker, "lost", None);
                telemetry::mark_failed(&span, "another daemon recovered the run");
                return;
            }
            Err(e) if tokio::time::Instant::now() < give_up => {
                tracing::warn!(error = %e, "could not write the run's end; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "gave up writing the run's end; recovery will mark it interrupted");
                ctx.metrics.run_finished(&run.worker, "unrecorded", None);
                telemetry::mark_failed(&span, "the run's end could not be written");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use scrinalia_shared::RunState;

    use super::*;

    fn ending(report: &ExitReport, tail: &StderrTail) -> Finish {
        ending_of(report, tail).finish()
    }

    fn ending_of<'a>(report: &'a ExitReport, tail: &'a StderrTail) -> Ending<'a> {
        let cancelled_by = Some("ada");
        Ending {
            report,
            lease_lost: None,
            timeout_seconds: 9,
            cancelled_by,
            tail,
            result: None,
            supervisor_lost: false,
            stalled: None,
            usage: None,
            out_of_memory: None,
            yield_asked: false,
        }
    }

    #[test]
    fn sentences_name_the_cause() {
        let mut tail = StderrTail::default();
        for i in 0..25 {
            tail.push(&format!("line {i}"));
        }
        let failed = ending(&ExitReport { code: Some(3), ..ExitReport::default() }, &tail);
        assert_eq!((failed.state(), failed.reason), (RunState::Failed, EndReason::ExitStatus));
        let error = failed.error.expect("an error");
        assert!(error.starts_with("exited with status 3; last lines of stderr:\nline 5\n"), "{error}");
        assert!(error.ends_with("line 24"));
        let empty = StderrTail::default();
        let killed = ending(&ExitReport { signal: Some("SIGSEGV".into()), ..ExitReport::default() }, &empty);
        assert_eq!((killed.reason, killed.error.as_deref()), (EndReason::Signal, Some("killed by signal SIGSEGV")));
        let cancelled = ending(&ExitReport { stopped_by: Some(StopCause::Cancel), ..ExitReport::default() }, &empty);
        assert_eq!((cancelled.state(), cancelled.error.as_deref()), (RunState::Cancelled, Some("cancelled by ada")));
        let timed_out = ending(&ExitReport { stopped_by: Some(StopCause::Timeout), ..ExitReport::default() }, &empty);
        assert_eq!((timed_out.reason, timed_out.error.as_deref()), (EndReason::Timeout, Some("timed out after 9 s")));
        let stopped = ExitReport { stopped_by: Some(StopCause::Cancel), ..ExitReport::default() };
        let stalled =
            Ending { stalled: Some("no progress for 2 s since step 3"), ..ending_of(&stopped, &empty) }.finish();
        assert_eq!(
            (stalled.state(), stalled.reason, stalled.error.as_deref()),
            (RunState::Interrupted, EndReason::Stalled, Some("no progress for 2 s since step 3")),
            "stopped by the watchdog, not cancelled by ada"
        );
        let ok = ending(&ExitReport { code: Some(0), ..ExitReport::default() }, &empty);
        assert_eq!((ok.state(), ok.reason, ok.error), (RunState::Succeeded, EndReason::ExitStatus, None));
    }

    #[test]
    fn a_run_yielded_only_when_asked_and_ended_by_it() {
        let tail = StderrTail::default();
        let asked = |report: &ExitReport| {
            let outcome = Ending { yield_asked: true, ..ending_of(report, &tail) }.outcome();
            (outcome.yielded, outcome.finish.state(), outcome.finish.reason)
        };
        let signalled = |code| ExitReport { code: Some(code), yield_signalled: true, ..ExitReport::default() };
        let yielded = Ending { yield_asked: true, ..ending_of(&signalled(75), &tail) }.outcome();
        assert!(yielded.yielded);
        assert_eq!(
            (yielded.finish.state(), yielded.finish.exit_code, yielded.finish.error.as_deref()),
            (RunState::Interrupted, Some(75), Some("preempted: yielded at a checkpoint when asked (exit status 75)")),
            "recorded as a preemption"
        );
        let overdue =
            ExitReport { stopped_by: Some(StopCause::Yield), signal: Some("SIGTERM".into()), ..ExitReport::default() };
        assert_eq!(asked(&overdue), (true, RunState::Interrupted, EndReason::Preempted), "stopped after its grace");
        assert_eq!(asked(&signalled(0)), (false, RunState::Succeeded, EndReason::ExitStatus), "it finished first");
        assert_eq!(asked(&signalled(1)), (false, RunState::Failed, EndReason::ExitStatus), "it failed by itself");
        let unsignalled = ExitReport { code: Some(75), ..ExitReport::default() };
        assert_eq!(asked(&unsignalled), (false, RunState::Failed, EndReason::ExitStatus), "75 before it was asked");
        let cancelled = ExitReport { stopped_by: Some(StopCause::Cancel), ..signalled(75) };
        assert_eq!(asked(&cancelled), (false, RunState::Cancelled, EndReason::Cancelled), "a cancel wins");
        let unasked = ending_of(&signalled(75), &tail).outcome();
        assert_eq!((unasked.yielded, unasked.finish.state()), (false, RunState::Failed), "never asked: a failure");
        let fenced = Ending { yield_asked: true, lease_lost: Some("gone"), ..ending_of(&overdue, &tail) }.outcome();
        assert_eq!((fenced.yielded, fenced.finish.reason), (false, EndReason::LeaseLost));
    }
}
