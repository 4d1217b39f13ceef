use chrono::{DateTime, Duration, Utc};
use scrinalia_wire::{Daemon, DaemonState, QueueCount, RunState};
use serde_json::json;

use super::{Facts, assess, spoken};

fn now() -> DateTime<Utc> {
    "2026-12-19T12:00:00Z".parse().expect("a time")
}

fn count(pending: i64, oldest_ago: Option<i64>) -> QueueCount {
    serde_json::from_value(json!({
        "worker": "embed", "pending": pending, "unmeasurable": null, "done": null, "error": null,
        "measured_at": now(), "took_ms": 3, "measured_by": null, "age_seconds": 1.0,
        "oldest_pending_at": oldest_ago.map(|s| now() - Duration::seconds(s)),
        "pending_since": now() - Duration::seconds(7200),
    }))
    .expect("a count")
}

fn daemon(labels: &[&str], state: DaemonState, seen_ago: i64) -> Daemon {
    serde_json::from_value(json!({
        "id": uuid::Uuid::nil(), "host": "h", "pid": 1, "version": "1", "capacity": 3, "workers": [],
        "labels": labels, "started_at": now(), "heartbeat_at": now() - Duration::seconds(seen_ago),
        "heartbeat_age_seconds": 1.0, "runs_in_flight": 0, "state": state, "drain_requested_at": null,
        "drain_requested_by": null, "stopped_at": null,
    }))
    .expect("a daemon")
}

#[test]
fn a_breach_names_the_label_no_live_daemon_has() {
    let labels = vec!["gpu".to_owned()];
    let c = count(62, Some(600));
    let facts = Facts { within_seconds: 5, labels: &labels, count: Some(&c), ..Facts::default() };
    let daemons = [daemon(&["cpu"], DaemonState::Active, 1), daemon(&["gpu"], DaemonState::Gone, 3 * 3600)];
    let f = assess("embed", &facts, &daemons, now());
    assert!(f.breached);
    assert_eq!(f.age_seconds, Some(600));
    let reason = f.reason.expect("a reason");
    assert!(reason.starts_with("No daemon with label gpu for 3 h: 62 pending"), "{reason}");
    let never = assess("embed", &facts, &daemons[..1], now()).reason.expect("a reason");
    assert!(never.starts_with("No daemon with label gpu has ever run"), "{never}");
}

#[test]
fn failing_runs_and_a_worker_that_never_ran_are_said() {
    let c = count(10, None);
    let mut facts = Facts { within_seconds: 60, count: Some(&c), ..Facts::default() };
    let f = assess("embed", &facts, &[], now());
    assert_eq!((f.breached, f.age_seconds), (true, Some(7200)), "since something is pending, never succeeded");
    assert!(f.reason.as_deref().is_some_and(|r| r.starts_with("Never ran")), "{f:?}");
    facts.recent = vec![RunState::Failed; 4].into_iter().chain([RunState::Succeeded]).collect();
    facts.last_success = Some(now() - Duration::seconds(3600));
    let f = assess("embed", &facts, &[], now());
    assert_eq!(f.age_seconds, Some(3600), "since the last success, later than the backlog's start");
    assert!(f.reason.as_deref().is_some_and(|r| r.starts_with("Last 4 runs failed")), "{f:?}");
    facts.within_seconds = 86_400;
    let fresh = assess("embed", &facts, &[], now());
    assert_eq!((fresh.breached, fresh.reason), (false, None));
    let empty = count(0, None);
    let idle = Facts { within_seconds: 1, count: Some(&empty), ..Facts::default() };
    assert_eq!(assess("embed", &idle, &[], now()).age_seconds, None, "nothing pending is fresh");
    assert_eq!(
        (spoken(30), spoken(600), spoken(3 * 3600), spoken(86_400 * 3)),
        ("30 s".into(), "10 min".into(), "3 h".into(), "3 d".into())
    );
}
