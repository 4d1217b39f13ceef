use std::collections::BTreeMap;

use chrono::{TimeZone, Utc};
use serde_json::json;
use uuid::Uuid;

use super::{Facts, choose, not_preemptible};
use crate::{Catalogue, Daemon, db::preemption::Holder, db::preemption::Waiter};

fn catalogue(scope: &str) -> Catalogue {
    let capacity = if scope == "daemon" { 0 } else { 1 };
    let workers = serde_json::from_value(json!([
        {"name": "embed", "command": ["e"], "resources": ["gpu"], "preemptible": true},
        {"name": "tags", "command": ["t"], "resources": ["gpu"]},
        {"name": "ocr", "command": ["o"], "resources": ["gpu"], "labels": ["scanner"]}
    ]))
    .expect("workers");
    let resources = serde_json::from_value(json!([
        {"name": "gpu", "capacity": capacity, "scope": scope, "preempt_after_seconds": 10}
    ]))
    .expect("resources");
    Catalogue { workers, resources, ..Catalogue::default() }
}

fn daemon(id: Uuid, labels: &[&str], gpus: u32) -> Daemon {
    serde_json::from_value(json!({
        "id": id, "host": "h", "pid": 1, "version": "v", "started_at": "2026-12-07T00:00:00Z",
        "heartbeat_at": "2026-12-07T00:00:00Z", "state": "active", "capacity": 4, "runs_in_flight": 1, "workers": [],
        "heartbeat_age_seconds": 0.5, "drain_requested_at": null, "drain_requested_by": null, "stopped_at": null,
        "labels": labels, "resources": {"gpu": gpus}
    }))
    .expect("a daemon")
}

fn holder(worker: &str, priority: i16, daemon: Uuid, checkpoint: bool) -> Holder {
    Holder {
        resource: "gpu".into(),
        run_id: Uuid::now_v7(),
        worker: worker.into(),
        priority,
        daemon_id: Some(daemon),
        has_checkpoint: checkpoint,
        preempt_requested_at: None,
        preempted_for: None,
        claimed_at: Some(Utc.with_ymd_and_hms(2026, 12, 7, 1, 0, 0).single().expect("a time")),
    }
}

fn waiter(worker: &str, priority: i16, waited: f64) -> Waiter {
    Waiter { id: Uuid::now_v7(), worker: worker.into(), priority, waited_seconds: waited }
}

fn run(catalogue: &Catalogue, daemons: &[Daemon], holders: &[Holder], waiters: &[Waiter]) -> Vec<(Uuid, Uuid)> {
    let not: BTreeMap<String, &'static str> =
        [("tags".to_owned(), "it is not declared preemptible in the catalogue")].into();
    choose(&Facts { catalogue, daemons, holders, waiters, not_preemptible: &not })
}

#[test]
fn an_urgent_run_that_waited_long_enough_preempts_the_lowest_preemptible_holder_with_a_checkpoint() {
    let catalogue = catalogue("global");
    let d = Uuid::now_v7();
    let daemons = [daemon(d, &[], 0)];
    let batch = holder("embed", 10, d, true);
    let urgent = waiter("ocr", 90, 12.0);
    assert_eq!(
        run(&catalogue, &daemons, std::slice::from_ref(&batch), std::slice::from_ref(&urgent)),
        vec![(batch.run_id, urgent.id)]
    );

    let early = waiter("ocr", 90, 5.0);
    assert!(
        run(&catalogue, &daemons, std::slice::from_ref(&batch), &[early]).is_empty(),
        "not before preempt_after_seconds"
    );
    let equal = waiter("ocr", 10, 60.0);
    assert!(
        run(&catalogue, &daemons, std::slice::from_ref(&batch), &[equal]).is_empty(),
        "only a higher priority preempts"
    );
    let fresh = holder("embed", 10, d, false);
    assert!(
        run(&catalogue, &daemons, &[fresh], std::slice::from_ref(&urgent)).is_empty(),
        "never before a first checkpoint"
    );
    let pinned = holder("tags", 10, d, true);
    assert!(
        run(&catalogue, &daemons, &[pinned], std::slice::from_ref(&urgent)).is_empty(),
        "a non-preemptible holder stays"
    );
    let asked = Holder { preempt_requested_at: batch.claimed_at, preempted_for: Some(urgent.id), ..batch.clone() };
    assert!(run(&catalogue, &daemons, &[asked], std::slice::from_ref(&urgent)).is_empty(), "asked once");
}

#[test]
fn one_holder_yields_for_one_waiter_and_the_most_urgent_waiter_goes_first() {
    let mut catalogue = catalogue("global");
    catalogue.resources[0].capacity = 2;
    let d = Uuid::now_v7();
    let daemons = [daemon(d, &[], 0)];
    let (low, lower) = (holder("embed", 30, d, true), holder("embed", 20, d, true));
    let (urgent, more) = (waiter("ocr", 60, 20.0), waiter("ocr", 95, 11.0));
    let chosen = run(&catalogue, &daemons, &[low.clone(), lower.clone()], &[more.clone(), urgent.clone()]);
    assert_eq!(chosen, vec![(lower.run_id, more.id), (low.run_id, urgent.id)]);
    let room = run(&catalogue, &daemons, &[low], &[more]);
    assert!(room.is_empty(), "a resource with room needs no preemption");
}

#[test]
fn a_daemon_scoped_slot_is_preempted_only_where_the_waiter_could_take_it() {
    let catalogue = catalogue("daemon");
    let (plain, scanner) = (Uuid::now_v7(), Uuid::now_v7());
    let daemons = [daemon(plain, &[], 1), daemon(scanner, &["scanner"], 1)];
    let on_plain = holder("embed", 10, plain, true);
    let on_scanner = holder("embed", 10, scanner, true);
    let urgent = waiter("ocr", 90, 30.0);
    let chosen = run(&catalogue, &daemons, &[on_plain, on_scanner.clone()], std::slice::from_ref(&urgent));
    assert_eq!(chosen, vec![(on_scanner.run_id, urgent.id)], "ocr needs the scanner label");
}

#[test]
fn a_worker_is_preemptible_only_when_declared_and_its_code_checkpoints_and_yields() {
    use scrinalia_wire::worker::Capabilities;
    let both = Capabilities { checkpoints: true, yields: true, ..Capabilities::default() };
    assert_eq!(not_preemptible(true, Some(both)), None);
    assert!(not_preemptible(false, Some(both)).is_some_and(|w| w.contains("not declared preemptible")));
    assert!(not_preemptible(true, None).is_some_and(|w| w.contains("not described itself")));
    let no_yield = Capabilities { checkpoints: true, ..Capabilities::default() };
    assert!(not_preemptible(true, Some(no_yield)).is_some_and(|w| w.contains("`yield`")));
    let no_checkpoints = Capabilities { yields: true, ..Capabilities::default() };
    assert!(not_preemptible(true, Some(no_checkpoints)).is_some_and(|w| w.contains("`checkpoints`")));
}
