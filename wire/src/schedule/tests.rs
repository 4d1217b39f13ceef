use super::*;

#[test]
fn delays_grow_by_the_factor_up_to_the_maximum() {
    let policy = RetryPolicy {
        max_attempts: 5,
        initial_delay_seconds: 1.0,
        factor: 2.0,
        max_delay_seconds: 5.0,
        jitter: 0.0,
        on: vec![RetryOn::Failed],
        resume: false,
    };
    let delays: Vec<f64> = (1..=4).map(|a| policy.delay(a, 0.5)).collect();
    assert_eq!(delays, [1.0, 2.0, 4.0, 5.0]);
    assert!(policy.retries(4, RetryOn::Failed));
    assert!(!policy.retries(5, RetryOn::Failed));
    assert!(!policy.retries(1, RetryOn::Interrupted));
    let jittered = RetryPolicy { jitter: 0.5, ..policy };
    assert_eq!(jittered.delay(2, 0.0), 1.0);
    assert_eq!(jittered.delay(2, 1.0), 3.0);
}

#[test]
fn a_state_covers_its_reasons_and_a_reason_only_itself() {
    let on = |on: &[RetryOn]| RetryPolicy {
        on: on.to_vec(),
        ..serde_json::from_str(r#"{"max_attempts": 3}"#).expect("parses")
    };
    let stalled = (RunState::Interrupted, Some(EndReason::Stalled));
    let shutdown = (RunState::Interrupted, Some(EndReason::DaemonShutdown));
    let oom = (RunState::Failed, Some(EndReason::OutOfMemory));
    let retried = |policy: &RetryPolicy, (state, reason)| policy.retries_end(1, state, reason);
    let interrupted = on(&[RetryOn::Interrupted]);
    assert!(retried(&interrupted, stalled) && retried(&interrupted, shutdown) && !retried(&interrupted, oom));
    let only_stalled = on(&[RetryOn::Stalled]);
    assert!(retried(&only_stalled, stalled) && !retried(&only_stalled, shutdown) && !retried(&only_stalled, oom));
    let failed_or_stalled = on(&[RetryOn::Failed, RetryOn::Stalled]);
    assert!(retried(&failed_or_stalled, oom) && retried(&failed_or_stalled, stalled));
    assert!(!retried(&failed_or_stalled, (RunState::Cancelled, Some(EndReason::Cancelled))));
    assert!(!on(&[RetryOn::Stalled]).retries_end(3, stalled.0, stalled.1), "attempts still count");
    // Configurations name them as the end reasons are named; the states as before.
    let policy: RetryPolicy =
        serde_json::from_str(r#"{"max_attempts": 2, "on": ["failed", "stalled", "out_of_memory"]}"#).expect("parses");
    assert_eq!(policy.on, [RetryOn::Failed, RetryOn::Stalled, RetryOn::OutOfMemory]);
    let preempted = (RunState::Interrupted, Some(EndReason::Preempted));
    assert!(!on(&[RetryOn::Interrupted]).retries_end(1, preempted.0, preempted.1), "resumed by itself instead");
    let refused = serde_json::from_str::<RetryPolicy>(r#"{"max_attempts": 2, "on": ["cancelled"]}"#);
    assert!(refused.is_err(), "a cancelled run is never retried");
}

#[test]
fn every_end_reason_of_a_retried_state_can_be_named() {
    // A cancelled or expired run is never retried; a preempted one is resumed by itself instead.
    let never = [EndReason::Cancelled, EndReason::Expired, EndReason::Preempted];
    for reason in EndReason::ALL.iter().copied().filter(|r| !never.contains(r)) {
        let on: RetryOn = serde_json::from_value(serde_json::json!(reason.name())).expect("a retry outcome");
        assert_eq!(on.reason(), Some(reason));
    }
}

#[test]
fn a_bad_policy_is_named() {
    let policy: RetryPolicy = serde_json::from_str(r#"{"max_attempts": 0}"#).expect("parses");
    assert_eq!(policy.problem().as_deref(), Some("max_attempts must be between 1 and 100, not 0."));
    let policy: RetryPolicy = serde_json::from_str(r#"{"max_attempts": 3, "factor": 0.5}"#).expect("parses");
    assert_eq!(policy.problem().as_deref(), Some("factor must be at least 1, not 0.5."));
}
