//! The fire pass's rules, without a database: which fires a schedule makes when it is found late (the missed
//! policy) and what a fire does while its target has a run in flight (the overlap policy).

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

use super::{firing::plan, pass::overlapped};
use crate::{
    FireOutcome, MissedPolicy, OverlapPolicy,
    fixtures::{catalogue, schedule},
    runs::Resolver,
};

fn at(minute: u32, second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 4, 9, minute, second).single().expect("a time")
}

/// A planned fire: its time, its outcome, and whether it requests its target.
type Planned = (DateTime<Utc>, FireOutcome, bool);

/// The fires of a schedule every minute, due at 09:00, when the clock reads `now` and a fire may be 30 s late.
fn planned(missed: MissedPolicy, now: DateTime<Utc>) -> (Vec<Planned>, Option<DateTime<Utc>>) {
    let schedule = schedule(OverlapPolicy::Skip, missed, at(0, 0));
    let resolver = Resolver::new(Vec::new(), Vec::new());
    let plan = plan(&catalogue(), &resolver, &schedule, now, chrono::Duration::seconds(30));
    (plan.fires.iter().map(|f| (f.at, f.outcome, f.target.is_some())).collect(), plan.next)
}

#[test]
fn a_fire_on_time_is_requested_and_the_next_follows_the_clock() {
    let (fires, next) = planned(MissedPolicy::Skip, at(0, 2));
    assert_eq!(fires, vec![(at(0, 0), FireOutcome::Requested, true)]);
    assert_eq!(next, Some(at(1, 0)));
}

#[test]
fn missed_skip_records_every_late_fire_and_requests_none() {
    // Found at 09:03:45: the fires of 09:00 to 09:03 are all more than 30 s late.
    let (fires, next) = planned(MissedPolicy::Skip, at(3, 45));
    assert_eq!(fires.len(), 4);
    assert!(fires.iter().all(|(_, outcome, target)| *outcome == FireOutcome::Missed && !target), "{fires:?}");
    assert_eq!(next, Some(at(4, 0)));
}

#[test]
fn missed_once_runs_only_the_latest_missed_fire() {
    let (fires, _) = planned(MissedPolicy::Once, at(3, 45));
    let (missed, requested): (Vec<_>, Vec<_>) = fires.into_iter().partition(|(_, o, _)| *o == FireOutcome::Missed);
    assert_eq!(missed.len(), 3);
    assert_eq!(requested, vec![(at(3, 0), FireOutcome::Requested, true)], "the latest of the missed fires runs");
    // A fire on time after the missed ones is requested as usual, and then no missed one runs.
    let (fires, _) = planned(MissedPolicy::Once, at(3, 10));
    let requested: Vec<_> = fires.iter().filter(|(_, o, _)| *o == FireOutcome::Requested).collect();
    assert_eq!(requested, vec![&(at(3, 0), FireOutcome::Requested, true)]);
    assert_eq!(fires.iter().filter(|(_, o, _)| *o == FireOutcome::Missed).count(), 3);
}

#[test]
fn overlap_skip_skips_and_names_the_run_in_flight() {
    let blocking = Uuid::now_v7();
    let skip = schedule(OverlapPolicy::Skip, MissedPolicy::Skip, at(0, 0));
    let (outcome, reason, waiting) = overlapped(&skip, at(0, 0), blocking, None);
    assert_eq!((outcome, waiting), (FireOutcome::Skipped, None));
    assert_eq!(reason.as_deref(), Some(format!("worker b had run {blocking} in flight").as_str()));
}

#[test]
fn overlap_queue_keeps_one_fire_waiting_and_skips_the_next_while_one_waits() {
    let blocking = Uuid::now_v7();
    let queue = schedule(OverlapPolicy::Queue, MissedPolicy::Skip, at(0, 0));
    let (outcome, reason, waiting) = overlapped(&queue, at(0, 0), blocking, None);
    assert_eq!((outcome, waiting), (FireOutcome::Waiting, Some(at(0, 0))));
    assert!(reason.as_deref().is_some_and(|r| r.ends_with("it runs when that ends")), "{reason:?}");
    let (outcome, reason, still) = overlapped(&queue, at(1, 0), blocking, waiting);
    assert_eq!((outcome, still), (FireOutcome::Skipped, waiting), "the fire that waits already stays the one");
    assert!(reason.as_deref().is_some_and(|r| r.contains("2026-12-04T09:00:00.000Z waits already")), "{reason:?}");
}
