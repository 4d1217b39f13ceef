//! The rule of a parent's state, case by case, without a database.

use chrono::Duration;
use serde_json::json;
use uuid::Uuid;

use super::settled;
use crate::{EndReason, Run, RunState, fixtures::run};

/// Child `shard` of 3 in `state`; an ended one with the reason its state implies.
fn child(shard: i32, state: RunState) -> Run {
    let mut run = run(state);
    run.parent_id = Some(Uuid::nil());
    run.shard = Some(shard);
    run.shards = Some(3);
    run.end_reason = match state {
        RunState::Queued | RunState::Running => None,
        RunState::Succeeded | RunState::Failed => Some(EndReason::ExitStatus),
        RunState::Interrupted => Some(EndReason::OwnerLost),
        RunState::Cancelled => Some(EndReason::Cancelled),
    };
    run.exit_code = match state {
        RunState::Succeeded => Some(0),
        RunState::Failed => Some(2),
        _ => None,
    };
    run.error = (!matches!(state, RunState::Succeeded | RunState::Queued | RunState::Running))
        .then(|| format!("{state} on purpose"));
    run
}

fn state_of(states: [RunState; 3]) -> RunState {
    let children: Vec<Run> = states.iter().enumerate().map(|(i, s)| child(i as i32, *s)).collect();
    settled(3, &children).state
}

#[test]
fn a_parent_is_queued_until_a_child_leaves_the_queue_and_runs_while_any_is_in_flight() {
    use RunState::*;
    assert_eq!(state_of([Queued, Queued, Queued]), Queued);
    assert_eq!(state_of([Queued, Running, Queued]), Running);
    assert_eq!(state_of([Succeeded, Queued, Queued]), Running, "one ended, the others still queued");
    assert_eq!(state_of([Failed, Running, Succeeded]), Running, "a failed shard waits for the others");
    let none = settled(3, &[]);
    assert_eq!((none.state, none.reason, none.error), (Queued, None, None));
}

#[test]
fn a_parent_ends_failed_before_interrupted_before_cancelled_naming_every_child_that_did_not_succeed() {
    use RunState::*;
    assert_eq!(state_of([Succeeded, Succeeded, Succeeded]), Succeeded);
    assert_eq!(state_of([Cancelled, Interrupted, Failed]), Failed);
    assert_eq!(state_of([Cancelled, Interrupted, Succeeded]), Interrupted);
    assert_eq!(state_of([Cancelled, Succeeded, Succeeded]), Cancelled);

    let children = vec![child(0, Succeeded), child(1, Failed), child(2, Cancelled)];
    let parent = settled(3, &children);
    assert_eq!((parent.state, parent.reason, parent.exit_code), (Failed, Some(EndReason::ExitStatus), Some(2)));
    let error = parent.error.expect("a sentence");
    assert!(error.starts_with("a shard failed — shard 1 of 3 failed"), "{error}");
    assert!(error.contains(&format!("(run {}: failed on purpose)", children[1].id)), "{error}");
    assert!(error.contains("shard 2 of 3 cancelled"), "{error}");
    assert!(!error.contains("shard 0"), "a shard that succeeded is not named: {error}");

    let all = vec![child(0, Succeeded), child(1, Succeeded), child(2, Succeeded)];
    let parent = settled(3, &all);
    assert_eq!((parent.reason, parent.exit_code, parent.error), (Some(EndReason::ExitStatus), Some(0), None));
}

#[test]
fn each_shard_counts_its_newest_child_so_a_retried_shard_follows_its_retry() {
    use RunState::*;
    let failed = child(1, Failed);
    let mut retry = child(1, Running);
    retry.requested_at = failed.requested_at + Duration::seconds(10);
    let children = vec![child(0, Succeeded), failed.clone(), retry.clone(), child(2, Succeeded)];
    assert_eq!(settled(3, &children).state, Running, "the retry is in flight");

    retry.state = Succeeded;
    retry.end_reason = Some(EndReason::ExitStatus);
    retry.exit_code = Some(0);
    let children = vec![child(0, Succeeded), retry, failed, child(2, Succeeded)];
    assert_eq!(settled(3, &children).state, Succeeded, "order of the rows does not matter; the retry succeeded");
}

#[test]
fn results_and_progress_sum_numbers_key_by_key_and_list_the_rest_per_shard() {
    use RunState::*;
    let mut children = vec![child(0, Succeeded), child(1, Succeeded), child(2, Succeeded)];
    children[0].result = Some(json!({"processed": 3, "seconds": 1.5, "model": "m1"}));
    children[1].result = Some(json!({"processed": 4, "seconds": 0.5, "model": "m1"}));
    children[2].result = Some(json!({"processed": 5, "failed": 1}));
    children[1].progress = Some(json!({"done": 4, "total": 4}));
    children[2].progress = Some(json!({"done": 2, "total": 5}));
    let parent = settled(3, &children);
    assert_eq!(parent.result, Some(json!({"processed": 12, "seconds": 2.0, "failed": 1, "model": ["m1", "m1", null]})));
    assert_eq!(parent.progress, Some(json!({"done": 6, "total": 9})));

    let running = vec![child(0, Running), child(1, Queued), child(2, Queued)];
    let parent = settled(3, &running);
    assert_eq!((parent.result, parent.progress), (None, None), "no child has reported anything yet");
}
