//! The retry rule of a run's end, case by case, without a database.

use chrono::Utc;
use serde_json::json;

use super::{Retry, retry_of};
use crate::{EndReason, Resolved, RetryOn, RetryPolicy, Run, RunState, Source, fixtures::run};

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        initial_delay_seconds: 10.0,
        factor: 2.0,
        max_delay_seconds: 60.0,
        jitter: 0.5,
        on: vec![RetryOn::Failed, RetryOn::Interrupted],
        resume: true,
    }
}

fn ended(state: RunState, attempt: i32, policy: RetryPolicy) -> Run {
    let mut run = run(state);
    run.attempt = attempt;
    run.config.retry = Some(Resolved { value: policy, source: Source::Override });
    run
}

#[test]
fn only_failed_and_interrupted_runs_are_retried_and_never_once_cancelled() {
    for state in [RunState::Succeeded, RunState::Cancelled] {
        assert_eq!(retry_of(&ended(state, 1, policy()), 0.5), None, "{state}");
    }
    assert_eq!(retry_of(&run(RunState::Failed), 0.5), None, "no policy, no retry");
    let mut cancelled = ended(RunState::Interrupted, 1, policy());
    cancelled.cancel_requested_at = Some(Utc::now());
    assert_eq!(retry_of(&cancelled, 0.5), None, "a run someone asked to cancel is not retried");
    let only_failed = RetryPolicy { on: vec![RetryOn::Failed], ..policy() };
    assert_eq!(retry_of(&ended(RunState::Interrupted, 1, only_failed), 0.5), None);
}

#[test]
fn a_policy_may_name_end_reasons_and_a_state_covers_all_of_its_own() {
    let with_reason = |state, reason, on: &[RetryOn]| {
        let mut run = ended(state, 1, RetryPolicy { on: on.to_vec(), ..policy() });
        run.end_reason = Some(reason);
        retry_of(&run, 0.5).is_some()
    };
    let stalled = (RunState::Interrupted, EndReason::Stalled);
    let shutdown = (RunState::Interrupted, EndReason::DaemonShutdown);
    assert!(with_reason(stalled.0, stalled.1, &[RetryOn::Interrupted]), "interrupted covers stalled");
    assert!(with_reason(stalled.0, stalled.1, &[RetryOn::Stalled]));
    assert!(!with_reason(shutdown.0, shutdown.1, &[RetryOn::Stalled]), "stalled names only itself");
    assert!(!with_reason(RunState::Failed, EndReason::OutOfMemory, &[RetryOn::Stalled]));
    assert!(with_reason(RunState::Failed, EndReason::OutOfMemory, &[RetryOn::OutOfMemory]));
    assert!(!with_reason(RunState::Failed, EndReason::ExitStatus, &[RetryOn::OutOfMemory]));
}

#[test]
fn the_last_attempt_is_not_retried() {
    assert!(retry_of(&ended(RunState::Failed, 4, policy()), 0.5).is_some());
    assert_eq!(retry_of(&ended(RunState::Failed, 5, policy()), 0.5), None);
}

#[test]
fn delays_grow_to_the_cap_and_jitter_stays_within_its_bounds() {
    let at = |attempt, unit| retry_of(&ended(RunState::Failed, attempt, policy()), unit).map(|r| r.delay_seconds);
    // Attempt 1 → 2: 10 s, moved by up to half of itself either way.
    assert_eq!(at(1, 0.5), Some(10.0));
    assert_eq!(at(1, 0.0), Some(5.0), "the lower jitter bound");
    assert_eq!(at(1, 1.0), Some(15.0), "the upper jitter bound");
    // Attempt 3 → 4: 40 s; attempt 4 → 5: 80 s, capped at 60 s, and jitter never lifts it above the cap.
    assert_eq!(at(3, 0.5), Some(40.0));
    assert_eq!(at(4, 0.5), Some(60.0), "at the cap");
    assert_eq!(at(4, 1.0), Some(60.0), "jitter does not pass the cap");
    assert_eq!(at(4, 0.0), Some(30.0), "jitter still lowers a capped delay");
    let retry = retry_of(&ended(RunState::Failed, 2, policy()), 0.5).expect("a retry");
    assert_eq!(retry, Retry { attempt: 3, delay_seconds: 20.0, resume: false });
}

#[test]
fn an_interrupted_run_with_a_checkpoint_resumes_and_a_failed_one_starts_over() {
    let mut interrupted = ended(RunState::Interrupted, 1, policy());
    assert!(!retry_of(&interrupted, 0.5).expect("a retry").resume, "no checkpoint: it starts over");
    interrupted.checkpoint = Some(json!({"page": 12}));
    interrupted.checkpoint_at = Some(Utc::now());
    let retry = retry_of(&interrupted, 0.5).expect("a retry");
    assert!(retry.resume);
    let request = retry.new_run(&interrupted);
    assert_eq!(request.links.follows, Some((interrupted.id, crate::FollowKind::Resume)));
    assert_eq!(request.links.checkpoint.map(|c| c.0), interrupted.checkpoint.as_ref());
    assert_eq!(request.links.retry, Some((interrupted.id, 2)));
    let mut failed = ended(RunState::Failed, 1, policy());
    failed.checkpoint = interrupted.checkpoint.clone();
    failed.checkpoint_at = interrupted.checkpoint_at;
    assert!(!retry_of(&failed, 0.5).expect("a retry").resume, "a failed run starts over");
    let no_resume = ended(RunState::Interrupted, 1, RetryPolicy { resume: false, ..policy() });
    assert!(!retry_of(&no_resume, 0.5).expect("a retry").resume);
}
