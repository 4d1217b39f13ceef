//! Bulk actions by filter against the real `scrinalia-api` and `scrinalia-daemon` on PostgreSQL and SQLite. A
//! rerun of 500 failed runs over 5 workers that match a filter (10 others do not): the dry run says 500, the
//! real call with that count makes 5 runs, one per worker from its newest matching run, and reports the 495
//! others skipped with the reason; a run requested after the dry run is left out by its snapshot. A cancel of
//! 500 queued runs cancels exactly those, worked by the daemon in batches; a call whose set changed since its
//! dry run is a 409. Viewers cannot act; no filter, no reason or an unknown filter field is a 400 with its
//! sentence; the action is audited as one (who, when, the filter, the count, the reason).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{
    EndReason, Run, RunState,
    runs::{Finish, RunRequest},
};
use scrinalia_testkit::config::worker;
use scrinalia_tests::{
    Kind, Reply, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};
use uuid::Uuid;

/// The workers the daemon of these tests takes: none of the workers acted on, so their runs stay as made.
const KEPT: &str = "kept";

/// The system with a catalogue of `names` (commands that are never run) and `kept`, its daemon taking `kept`
/// only.
async fn start(kind: Kind, names: &[String]) -> System {
    let specs: Vec<_> = names.iter().map(|n| worker(n, &["true"])).chain([worker(KEPT, &["true"])]).collect();
    System::start(kind, |config| config.with(|f| f.daemon.workers = vec![KEPT.to_owned()]).workers(specs)).await
}

async fn post(system: &System, token: &str, body: Value) -> Reply {
    system.http(Method::POST, "/api/runs/bulk", token, Some(body)).await.expect("the API answers")
}

async fn get(system: &System, path: &str) -> Value {
    system.http(Method::GET, path, VIEWER, None).await.expect("the API answers").expect(StatusCode::OK, None)
}

fn request(worker: &str, by: &str) -> RunRequest {
    RunRequest {
        worker: worker.to_owned(),
        requested_by: by.to_owned(),
        arguments: Default::default(),
        trace_context: None,
        tags: Vec::new(),
    }
}

/// Makes a run of `worker`, requested by `by`, that failed with `error` (claimed and ended by a daemon of the
/// test's own, as a real one would).
async fn failed(system: &System, worker: &str, by: &str, error: &str) -> Run {
    let stores = &system.db.db;
    let catalogue = scrinalia_tests::fixtures::catalogue_of(&[worker]);
    let run = stores.api.request_run(&catalogue, request(worker, by)).await.expect("a request");
    let daemon = Uuid::now_v7();
    let only = [worker.to_owned()];
    let claimed = stores.daemon.claim_runs(daemon, Duration::from_secs(600), 1, Some(&only)).await.expect("claim");
    assert_eq!(claimed.len(), 1, "the request is claimed");
    let finish = Finish {
        reason: EndReason::ExitStatus,
        exit_code: Some(1),
        error: Some(error.to_owned()),
        result: None,
        usage: None,
    };
    stores.daemon.finish_run(run.id, daemon, &finish).await.expect("finish")
}

/// Waits until bulk action `id` is done; returns it, with every state of it seen on the way.
async fn finished(system: &System, id: &str) -> (Value, Vec<Value>) {
    let seen = std::sync::Mutex::new(Vec::new());
    let done = eventually(Duration::from_secs(60), "the bulk action to be done", || async {
        let view = get(system, &format!("/api/runs/bulk/{id}")).await;
        seen.lock().expect("seen").push(view.clone());
        (view["state"] == "done").then_some(view)
    })
    .await;
    (done, seen.into_inner().expect("seen"))
}

fn message(body: &Value) -> String {
    body["message"].as_str().unwrap_or_default().to_lowercase()
}

async fn a_bulk_rerun_makes_one_run_per_worker_and_skips_the_others(kind: Kind) {
    let workers: Vec<String> = (0..5).map(|i| format!("embed-{i}")).collect();
    let system = start(kind, &workers).await;
    let refused = "connection refused by the model server";
    // 100 matching failed runs per worker, and 10 that fail otherwise; the workers' runs made in parallel.
    let per_worker = workers.iter().map(|w| {
        let system = &system;
        async move {
            let mut newest = None;
            for i in 0..102 {
                let error = if i % 51 == 50 { "out of memory" } else { refused };
                let run = failed(system, w, "nightly", error).await;
                if error == refused {
                    newest = Some(run.id);
                }
            }
            newest.expect("a matching run")
        }
    });
    let newest: Vec<Uuid> = futures::future::join_all(per_worker).await;
    let filter = json!({"state": "failed", "q": "connection refused"});

    let reply = post(&system, OPERATOR, json!({"filter": filter, "action": "rerun", "dry_run": true})).await;
    let preview = reply.expect(StatusCode::OK, None);
    assert_eq!(preview["count"], 500, "{preview}");
    assert_eq!(preview["workers"], 5, "{preview}");
    assert_eq!(preview["sample"].as_array().map(Vec::len), Some(10), "{preview}");
    assert_eq!(preview["sample"][0]["state"], "failed");
    let snapshot = preview["snapshot"].clone();
    let newest_ids: Vec<String> = newest.iter().map(Uuid::to_string).collect();
    assert!(newest_ids.iter().any(|id| snapshot["id"] == id.as_str()), "the snapshot is the newest matching run");

    // Refusals: a viewer; no filter; an unknown field; no reason; no count; another count.
    post(&system, VIEWER, json!({"filter": filter, "action": "rerun", "dry_run": true}))
        .await
        .expect(StatusCode::FORBIDDEN, Some("forbidden"));
    let body = post(&system, OPERATOR, json!({"action": "rerun", "expect_count": 500, "reason": "r"}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("filter_required"));
    assert!(message(&body).contains("a bulk action needs a filter"), "{body}");
    let body = post(&system, OPERATOR, json!({"filter": {"state": ""}, "action": "cancel", "dry_run": true}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("filter_required"));
    assert!(message(&body).contains("a bulk action needs a filter"), "{body}");
    let body = post(&system, OPERATOR, json!({"filter": {"wroker": "embed-0"}, "action": "rerun", "dry_run": true}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("invalid_filter"));
    assert!(message(&body).contains("not a filter of the ledger"), "{body}");
    let body = post(&system, OPERATOR, json!({"filter": filter, "action": "rerun", "expect_count": 500}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("reason_required"));
    assert!(message(&body).contains("a bulk action needs a reason"), "{body}");
    post(&system, OPERATOR, json!({"filter": filter, "action": "rerun", "reason": "model server is back"}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("count_required"));
    let body = post(
        &system,
        OPERATOR,
        json!({"filter": filter, "action": "rerun", "expect_count": 499, "snapshot": snapshot, "reason": "back"}),
    )
    .await
    .expect(StatusCode::CONFLICT, Some("bulk_count_changed"));
    assert_eq!((body["expected"].clone(), body["found"].clone()), (json!(499), json!(500)), "{body}");

    // A run that matches, requested after the dry run: the snapshot leaves it out.
    let later = failed(&system, &workers[0], "nightly", refused).await;
    let reason = "the model server is back: retry last night's failures";
    let real =
        json!({"filter": filter, "action": "rerun", "expect_count": 500, "snapshot": snapshot, "reason": reason});
    let reply = post(&system, OPERATOR, real).await;
    let stored = reply.expect(StatusCode::ACCEPTED, None);
    let id = stored["id"].as_str().expect("an id").to_owned();
    assert_eq!(reply.headers["location"], format!("/api/runs/bulk/{id}").as_str());
    assert_eq!(stored["total"], 500);

    let (done, _) = finished(&system, &id).await;
    assert_eq!((done["total"].clone(), done["done"].clone()), (json!(500), json!(5)), "{done}");
    assert_eq!((done["skipped"].clone(), done["failed"].clone()), (json!(495), json!(0)), "{done}");
    let reasons = done["reasons"].as_array().expect("reasons");
    assert_eq!(reasons.len(), 5, "one reason per worker: {done}");
    for reason in reasons {
        assert_eq!(reason["count"], 99);
        assert!(reason["sentence"].as_str().is_some_and(|s| s.contains("in this action was rerun")), "{reason}");
    }

    // Exactly one rerun per worker, of its newest matching run at the snapshot.
    let page = get(&system, "/api/runs?state=queued&limit=500").await;
    let reruns: Vec<&Value> =
        page["runs"].as_array().expect("runs").iter().filter(|r| r["follows_as"] == "rerun").collect();
    assert_eq!(reruns.len(), 5, "{page}");
    for (worker, newest) in workers.iter().zip(&newest) {
        let of: Vec<_> = reruns.iter().filter(|r| r["worker"] == worker.as_str()).collect();
        assert_eq!(of.len(), 1, "one rerun of {worker}");
        assert_eq!(of[0]["follows"], newest.to_string(), "the rerun of {worker} follows its newest matching run");
        assert_eq!(of[0]["requested_by"], "otto");
    }
    assert!(reruns.iter().all(|r| r["follows"] != later.id.to_string()), "the run after the snapshot was not acted on");

    // The audit: one action, naming who, the filter, the count and the reason.
    let list = get(&system, "/api/runs/bulk").await;
    let actions = list["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 1, "{list}");
    let audited = &actions[0];
    assert_eq!(audited["filter"], filter);
    assert_eq!(audited["expect_count"], 500);
    assert_eq!(audited["reason"], reason);
    assert_eq!(audited["requested_by"], "otto");
    assert_eq!(audited["action"], "rerun");
    assert_eq!(audited["snapshot"], snapshot);

    // The CLI: the dry run (the run requested since counts now), a refusal without a confirmation, the progress.
    let filter_flags = ["runs", "bulk", "--action", "rerun", "--state", "failed", "--error", "connection refused"];
    system.cli(&[&filter_flags[..], &["--dry-run"]].concat()).await.expect(0).has(&["501 runs of 5 workers match"]);
    system.cli(&[&filter_flags[..], &["--reason", "again"]].concat()).await.expect(2);
    system.cli(&["runs", "bulk-status", &id]).await.expect(0).has(&["500 runs have an outcome (5 done, 495 skipped"]);
    system.cleanup().await;
}

async fn a_bulk_cancel_cancels_exactly_the_matching_runs_and_a_changed_set_is_a_conflict(kind: Kind) {
    let workers: Vec<String> = (0..510).map(|i| format!("q-{i:03}")).collect();
    let system = start(kind, &workers).await;
    let catalogue = scrinalia_tests::fixtures::catalogue_of(&workers.iter().map(String::as_str).collect::<Vec<_>>());
    let mut matching = Vec::new();
    for (i, w) in workers.iter().enumerate() {
        let by = if i < 500 { "loader" } else { "someone-else" };
        let run = system.db.db.api.request_run(&catalogue, request(w, by)).await.expect("a request");
        if i < 500 {
            matching.push(run.id);
        }
    }
    let filter = json!({"state": "queued", "requested_by": "loader"});
    let preview = post(&system, OPERATOR, json!({"filter": filter, "action": "cancel", "dry_run": true}))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(preview["count"], 500, "{preview}");
    let snapshot = preview["snapshot"].clone();

    // One of them is cancelled on its own: the set at the snapshot is no longer the one shown.
    let gone = matching.remove(17);
    system.http(Method::POST, &format!("/api/runs/{gone}/cancel"), OPERATOR, None).await.expect("cancel");
    let real = |count: u64, snapshot: &Value| {
        json!({"filter": filter, "action": "cancel", "expect_count": count, "snapshot": snapshot,
            "reason": "the loader queued the wrong collection"})
    };
    let body =
        post(&system, OPERATOR, real(500, &snapshot)).await.expect(StatusCode::CONFLICT, Some("bulk_count_changed"));
    assert!(message(&body).contains("now matches 499 runs"), "{body}");

    let preview = post(&system, OPERATOR, json!({"filter": filter, "action": "cancel", "dry_run": true}))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(preview["count"], 499);
    let stored = post(&system, OPERATOR, real(499, &preview["snapshot"])).await.expect(StatusCode::ACCEPTED, None);
    let (done, seen) = finished(&system, stored["id"].as_str().expect("an id")).await;
    assert_eq!((done["total"].clone(), done["done"].clone()), (json!(499), json!(499)), "{done}");
    assert_eq!((done["skipped"].clone(), done["failed"].clone()), (json!(0), json!(0)), "{done}");
    for view in &seen {
        let counted = ["done", "skipped", "failed"].iter().map(|k| view[k].as_i64().unwrap_or(0)).sum::<i64>();
        assert!(counted <= 499 && counted % 100 == 0 || counted == 499, "progress moves a batch at a time: {view}");
    }

    let cancelled = get(&system, "/api/runs?state=cancelled&limit=500").await;
    let mut ids: Vec<String> = cancelled["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    let mut expected: Vec<String> = matching.iter().chain([&gone]).map(Uuid::to_string).collect();
    expected.sort();
    assert_eq!(ids, expected, "exactly the matching runs are cancelled");
    let still = get(&system, "/api/runs?state=queued&limit=500").await;
    let queued: Vec<&Value> = still["runs"].as_array().expect("runs").iter().collect();
    assert_eq!(queued.len(), 10, "the others stay queued: {still}");
    assert!(queued.iter().all(|r| r["requested_by"] == "someone-else"));
    let one = system.db.db.api.get_run(matching[0]).await.expect("read").expect("a run");
    assert_eq!((one.state, one.cancel_requested_by.as_deref()), (RunState::Cancelled, Some("otto")));
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_bulk_rerun_makes_one_run_per_worker_and_skips_the_others() {
    a_bulk_rerun_makes_one_run_per_worker_and_skips_the_others(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_bulk_rerun_makes_one_run_per_worker_and_skips_the_others() {
    a_bulk_rerun_makes_one_run_per_worker_and_skips_the_others(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_bulk_cancel_cancels_exactly_the_matching_runs_and_a_changed_set_is_a_conflict() {
    a_bulk_cancel_cancels_exactly_the_matching_runs_and_a_changed_set_is_a_conflict(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_bulk_cancel_cancels_exactly_the_matching_runs_and_a_changed_set_is_a_conflict() {
    a_bulk_cancel_cancels_exactly_the_matching_runs_and_a_changed_set_is_a_conflict(Kind::Sqlite).await;
}
