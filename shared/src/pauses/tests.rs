//! The pause rule of a run's end, case by case, without a database.

use chrono::{TimeZone, Utc};
use uuid::Uuid;

use super::*;
use crate::fixtures::run;

#[test]
fn a_failure_counts_a_success_resets_and_the_rest_changes_nothing() {
    assert_eq!(streak_step(&run(RunState::Failed)), StreakStep::Count);
    assert_eq!(streak_step(&run(RunState::Succeeded)), StreakStep::Reset);
    for state in [RunState::Interrupted, RunState::Cancelled, RunState::Queued, RunState::Running] {
        assert_eq!(streak_step(&run(state)), StreakStep::Keep, "{state}");
    }
}

#[test]
fn a_retry_counts_like_any_run_and_whatever_its_end_reason() {
    let mut retry = run(RunState::Failed);
    retry.attempt = 3;
    retry.retry_of = Some(Uuid::now_v7());
    retry.end_reason = Some(crate::EndReason::Timeout);
    assert_eq!(streak_step(&retry), StreakStep::Count);
}

#[test]
fn a_shard_never_counts_only_its_parent_does() {
    let mut child = run(RunState::Failed);
    child.parent_id = Some(Uuid::now_v7());
    child.shard = Some(0);
    child.shards = Some(4);
    assert_eq!(streak_step(&child), StreakStep::Keep);
    child.state = RunState::Succeeded;
    assert_eq!(streak_step(&child), StreakStep::Keep, "a shard's success does not reset either");
    let mut parent = run(RunState::Failed);
    parent.shards = Some(4);
    assert_eq!(streak_step(&parent), StreakStep::Count);
}

#[test]
fn the_kth_failure_in_a_row_pauses_and_no_k_never_does() {
    assert!(!pauses_at(2, Some(3)));
    assert!(pauses_at(3, Some(3)));
    assert!(pauses_at(4, Some(3)), "a count past k (k lowered meanwhile) pauses too");
    assert!(pauses_at(1, Some(1)));
    assert!(!pauses_at(1000, None));
}

#[test]
fn the_sentences_say_why_since_when_by_whom_and_how_to_resume() {
    let mut failed = run(RunState::Failed);
    failed.error = Some("exit status 1: the model server refused the connection".into());
    let reason = automatic_reason(3, &failed);
    assert_eq!(
        reason,
        format!(
            "its last 3 runs failed in a row (the last, run {}: exit status 1: the model server refused the \
             connection)",
            failed.id
        )
    );
    let pause = WorkerPause {
        at: Utc.with_ymd_and_hms(2026, 12, 7, 19, 0, 0).single().expect("a time"),
        by: "ops@archive".into(),
        reason: "the model server is down.".into(),
        automatic: false,
    };
    assert_eq!(
        refusal("embed", &pause),
        "Worker embed is paused: it was paused at 2026-12-07T19:00:00Z (by hand by ops@archive): the model server \
         is down. Resume it with POST /api/workers/embed/resume or `scrinalia worker resume embed --reason …`."
    );
    let long = "x".repeat(500);
    failed.error = Some(long);
    assert!(automatic_reason(3, &failed).ends_with("x…)"));
}
