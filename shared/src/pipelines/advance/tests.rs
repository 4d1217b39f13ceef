//! The rule that moves a pipeline run on, case by case.

use chrono::Utc;
use uuid::Uuid;

use super::{Advance, decide};
use crate::{
    PipelineState, RunState,
    fixtures::{pipeline, run},
};

#[test]
fn a_step_in_flight_is_waited_for() {
    assert_eq!(decide(&pipeline(1), Some(&run(RunState::Queued)), None), Advance::Wait);
    assert_eq!(decide(&pipeline(1), Some(&run(RunState::Running)), None), Advance::Wait);
}

#[test]
fn a_succeeded_step_starts_the_next_and_the_last_ends_the_pipeline() {
    assert_eq!(decide(&pipeline(0), Some(&run(RunState::Succeeded)), None), Advance::Start(1));
    assert_eq!(
        decide(&pipeline(2), Some(&run(RunState::Succeeded)), None),
        Advance::End(PipelineState::Succeeded, None)
    );
}

#[test]
fn a_step_with_no_run_is_requested() {
    assert_eq!(decide(&pipeline(1), None, None), Advance::Start(1));
}

#[test]
fn a_failed_step_is_followed_by_its_retry_or_ends_the_pipeline() {
    let failed = run(RunState::Failed);
    let retry = Uuid::now_v7();
    assert_eq!(decide(&pipeline(1), Some(&failed), Some(retry)), Advance::Follow(retry));
    let Advance::End(PipelineState::Failed, Some(reason)) = decide(&pipeline(1), Some(&failed), None) else {
        panic!("a failed step without a retry ends the pipeline")
    };
    assert_eq!(reason, format!("step 2 (b) failed (run {}): exit status 2", failed.id));
    let interrupted = run(RunState::Interrupted);
    assert!(matches!(decide(&pipeline(1), Some(&interrupted), None), Advance::End(PipelineState::Failed, _)));
}

#[test]
fn a_cancel_ends_the_pipeline_once_its_step_has_ended() {
    let cancelled = run(RunState::Cancelled);
    let Advance::End(PipelineState::Cancelled, Some(reason)) = decide(&pipeline(1), Some(&cancelled), None) else {
        panic!("a cancelled step cancels the pipeline")
    };
    assert!(reason.starts_with("step 2 (b) was cancelled by bob"), "{reason}");
    let mut flagged = pipeline(1);
    flagged.cancel_requested_at = Some(Utc::now());
    flagged.cancel_requested_by = Some("carol".into());
    assert_eq!(decide(&flagged, Some(&run(RunState::Running)), None), Advance::Wait, "the step is stopped first");
    // A step that succeeded although the pipeline was being cancelled does not start the next one.
    assert_eq!(
        decide(&flagged, Some(&run(RunState::Succeeded)), None),
        Advance::End(PipelineState::Cancelled, Some("cancelled by carol".into()))
    );
    assert_eq!(decide(&flagged, None, None), Advance::End(PipelineState::Cancelled, Some("cancelled by carol".into())));
}

#[test]
fn an_interrupted_step_is_followed_by_its_retry() {
    let retry = Uuid::now_v7();
    assert_eq!(decide(&pipeline(0), Some(&run(RunState::Interrupted)), Some(retry)), Advance::Follow(retry));
}
