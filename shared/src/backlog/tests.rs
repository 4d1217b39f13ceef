use std::time::Duration;

use scrinalia_wire::BacklogTrigger;

use super::{CountState, Decision, count_interval, decide};

fn trigger(quiet: Option<u64>, max: Option<u64>) -> BacklogTrigger {
    BacklogTrigger { when_pending_at_least: 50, quiet_seconds: quiet, max_delay_seconds: max }
}

fn state(pending: i64, grew_ago: f64, reached_ago: f64) -> CountState {
    CountState {
        worker: "tags".into(),
        pending: Some(pending),
        counted_ago: 0.5,
        grew_ago: Some(grew_ago),
        reached_ago: Some(reached_ago),
        counted_after_end: true,
        fired_since_count: false,
        in_flight: false,
    }
}

#[test]
fn a_quiet_count_at_the_threshold_fires_with_its_reason() {
    let t = trigger(Some(30), Some(600));
    assert_eq!(decide(&t, &state(62, 31.2, 40.0), false, false), Decision::Fire("62 pending for 31 s".into()));
    assert_eq!(decide(&t, &state(62, 10.0, 40.0), false, false), Decision::Wait(Duration::from_secs(20)));
    assert_eq!(decide(&t, &state(49, 100.0, 100.0), false, false), Decision::Idle, "below the threshold");
}

#[test]
fn a_count_that_keeps_growing_fires_at_the_max_delay() {
    let t = trigger(Some(30), Some(600));
    assert_eq!(
        decide(&t, &state(900, 2.0, 600.5), false, false),
        Decision::Fire("900 pending, waited the max delay of 600 s".into())
    );
    assert_eq!(decide(&t, &state(900, 2.0, 590.0), false, false), Decision::Wait(Duration::from_secs(10)));
}

#[test]
fn nothing_fires_in_flight_paused_on_a_stale_count_or_twice_on_one_count() {
    let t = trigger(Some(30), None);
    let due = state(62, 40.0, 40.0);
    assert_eq!(decide(&t, &due, true, false), Decision::Idle, "a run in flight");
    assert_eq!(decide(&t, &due, false, true), Decision::Idle, "paused");
    assert_eq!(decide(&t, &CountState { counted_after_end: false, ..due.clone() }, false, false), Decision::Idle);
    assert_eq!(decide(&t, &CountState { fired_since_count: true, ..due.clone() }, false, false), Decision::Idle);
    assert_eq!(decide(&t, &CountState { pending: None, ..due }, false, false), Decision::Idle, "a failed count");
}

#[test]
fn a_triggered_worker_is_counted_every_half_quiet_at_most_its_interval() {
    let minute = Duration::from_secs(60);
    assert_eq!(count_interval(&trigger(Some(30), None), minute), Duration::from_secs(15));
    assert_eq!(count_interval(&trigger(Some(600), None), minute), minute);
    assert_eq!(count_interval(&trigger(Some(1), None), minute), Duration::from_secs(1));
    assert_eq!(count_interval(&trigger(None, None), minute), minute);
}
