//! Quarantine and reruns of failures against a running system (the real API and daemon, the probe of
//! `scrinalia-demo-worker`), on both backends: three runs in a row failing a document quarantine it, the fourth
//! is given it to skip and leaves it untouched, a release with a reason restores it and is audited; a rerun of a
//! run's failures gets exactly the failed ids and processes only them, and is refused with a sentence when there
//! is nothing to rerun, the run is unknown, or the worker has a run in flight.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_tests::{
    Kind, Reply,
    daemon_harness::probe,
    demo_worker, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

async fn get(system: &System, path: &str) -> Value {
    system.http(Method::GET, path, VIEWER, None).await.expect("answer").expect(StatusCode::OK, None)
}

/// Waits until the daemon described probe-1 (what it can do is known from then on).
async fn described(system: &System) {
    eventually(Duration::from_secs(30), "the daemon to describe probe-1", || async {
        let worker = system.http(Method::GET, "/api/workers/probe-1", VIEWER, None).await.ok()?.json();
        worker["described"]["described_at"].as_str().map(drop)
    })
    .await;
}

/// Triggers probe-1 with `options` and waits for the run to end; its detail.
async fn run(system: &System, options: Value) -> Value {
    let body = json!({ "options": options });
    let reply = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await.expect("answer");
    let id = reply.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    ended(system, &id).await
}

async fn ended(system: &System, id: &str) -> Value {
    eventually(Duration::from_secs(60), "the run to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        ["succeeded", "failed", "cancelled", "interrupted"].contains(&run["state"].as_str()?).then_some(run)
    })
    .await
}

fn ids(page: &Value) -> Vec<String> {
    page["items"].as_array().expect("items").iter().map(|i| i["id"].as_str().expect("an id").to_owned()).collect()
}

async fn release(system: &System, body: Value) -> Reply {
    system.http(Method::POST, "/api/workers/probe-1/quarantine/release", OPERATOR, Some(body)).await.expect("answer")
}

async fn three_failing_runs_quarantine_an_item_and_the_fourth_skips_it(kind: Kind) {
    let mut spec = probe(&demo_worker(), "probe-1", 120);
    spec.quarantine_after = Some(3);
    let system = System::start(kind, |c| c.worker(spec)).await;
    let options = json!({"items": 30, "failed_every": 10});
    for _ in 0..3 {
        let done = run(&system, options.clone()).await;
        assert_eq!(done["state"], "succeeded", "failed items do not fail the run: {done}");
    }
    let quarantine = get(&system, "/api/workers/probe-1/quarantine").await;
    assert_eq!((quarantine["quarantine_after"].as_i64(), quarantine["quarantined"].as_i64()), (Some(3), Some(3)));
    assert_eq!(ids(&quarantine), ["item-000010", "item-000020", "item-000030"]);
    let first = &quarantine["items"][0];
    assert_eq!(first["failures"], 3);
    let errors = first["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 3, "the last three errors: {first}");
    assert_eq!(errors[0]["class"], "ocr_empty");
    // Never hidden: the worker view and health say so, and it changes no health status.
    assert_eq!(get(&system, "/api/workers/probe-1").await["quarantined"], 3);
    let health = get(&system, "/api/health").await;
    let check = health["checks"].as_array().expect("checks").iter().find(|c| c["name"] == "worker:probe-1");
    let check = check.expect("probe-1's check");
    assert_eq!(check["details"]["quarantined"], 3);
    assert!(check["details"]["note"].as_str().is_some_and(|n| n.starts_with("3 documents are quarantined")), "{check}");
    assert!(check["error"].is_null(), "informational, not a problem: {check}");

    // The fourth run is given them to skip: they are reported skipped, untouched, and their streaks stay.
    let fourth = run(&system, options.clone()).await;
    let items = &fourth["items"];
    assert_eq!(
        (items["skipped"].as_i64(), items["failed"].as_i64(), items["succeeded"].as_i64()),
        (Some(3), Some(0), Some(27))
    );
    let skipped =
        get(&system, &format!("/api/runs/{}/items?outcome=skipped", fourth["id"].as_str().expect("id"))).await;
    assert_eq!(ids(&skipped), ["item-000010", "item-000020", "item-000030"]);
    assert_eq!(skipped["items"][0]["class"], "quarantined");
    assert_eq!(
        get(&system, "/api/workers/probe-1/quarantine").await["quarantined"],
        3,
        "a skip neither counts nor resets"
    );

    // A release needs a reason, an item that is quarantined, and an operator.
    release(&system, json!({"item": "item-000010"})).await.expect(StatusCode::BAD_REQUEST, Some("reason_required"));
    let unknown = release(&system, json!({"item": "item-000011", "reason": "fixed"})).await;
    unknown.expect(StatusCode::NOT_FOUND, Some("not_quarantined"));
    let nul = release(&system, json!({"item": "item\0", "reason": "fixed"})).await;
    nul.expect(StatusCode::BAD_REQUEST, Some("invalid_item"));
    let id = fourth["id"].as_str().expect("id");
    let nul = system.http(Method::GET, &format!("/api/runs/{id}/items?after=%00"), VIEWER, None).await;
    nul.expect("answer").expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
    let body = json!({"item": "item-000010", "reason": "OCR redone by hand"});
    let viewer = system.http(Method::POST, "/api/workers/probe-1/quarantine/release", VIEWER, Some(body.clone()));
    viewer.await.expect("answer").expect(StatusCode::FORBIDDEN, Some("forbidden"));
    assert_eq!(release(&system, body).await.expect(StatusCode::OK, None)["released"], 1);
    let quarantine = get(&system, "/api/workers/probe-1/quarantine").await;
    assert_eq!(ids(&quarantine), ["item-000020", "item-000030"]);
    let audit = &quarantine["releases"][0];
    assert_eq!((audit["item"].as_str(), audit["actor"].as_str()), (Some("item-000010"), Some("otto")));
    assert_eq!(audit["reason"], "OCR redone by hand");

    // The released item is processed again (and fails again: a streak of one), the others still skipped.
    let fifth = run(&system, options).await;
    assert_eq!((fifth["items"]["failed"].as_i64(), fifth["items"]["skipped"].as_i64()), (Some(1), Some(2)));
    let all = release(&system, json!({"reason": "new OCR engine"})).await.expect(StatusCode::OK, None);
    assert_eq!(all["released"], 2);
    assert_eq!(get(&system, "/api/workers/probe-1/quarantine").await["quarantined"], 0);
    system.cleanup().await;
}

async fn a_rerun_of_the_failures_gets_exactly_the_failed_ids(kind: Kind) {
    let system = System::start(kind, |c| c.worker(probe(&demo_worker(), "probe-1", 120))).await;
    described(&system).await;
    let first = run(&system, json!({"items": 100, "failed_every": 25})).await;
    let id = first["id"].as_str().expect("id").to_owned();
    assert_eq!(first["items"]["failed"], 4);

    let path = format!("/api/runs/{id}/rerun-failed");
    let viewer = system.http(Method::POST, &path, VIEWER, None).await.expect("answer");
    viewer.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    let rerun =
        system.http(Method::POST, &path, OPERATOR, None).await.expect("answer").expect(StatusCode::CREATED, None);
    assert_eq!((rerun["follows"].as_str(), rerun["follows_as"].as_str()), (Some(id.as_str()), Some("rerun_failed")));
    let rerun = ended(&system, rerun["id"].as_str().expect("id")).await;
    assert_eq!(rerun["state"], "succeeded");
    let items = &rerun["items"];
    assert_eq!(
        (items["failed"].as_i64(), items["succeeded"].as_i64(), items["skipped"].as_i64()),
        (Some(4), Some(0), Some(0))
    );
    let processed = get(&system, &format!("/api/runs/{}/items", rerun["id"].as_str().expect("id"))).await;
    assert_eq!(ids(&processed), ["item-000025", "item-000050", "item-000075", "item-000100"], "exactly the failures");

    // Nothing to rerun, an unknown run, a bad id, a run in flight: each a sentence.
    let clean = run(&system, json!({"items": 10})).await;
    let clean_path = format!("/api/runs/{}/rerun-failed", clean["id"].as_str().expect("id"));
    let none = system.http(Method::POST, &clean_path, OPERATOR, None).await.expect("answer");
    let none = none.expect(StatusCode::CONFLICT, Some("no_failures"));
    assert!(none["message"].as_str().expect("message").contains("no failed items"), "{none}");
    let unknown_path = format!("/api/runs/{}/rerun-failed", uuid::Uuid::now_v7());
    let unknown = system.http(Method::POST, &unknown_path, OPERATOR, None).await.expect("answer");
    unknown.expect(StatusCode::NOT_FOUND, Some("unknown_run"));
    let bad = system.http(Method::POST, "/api/runs/nope/rerun-failed", OPERATOR, None).await.expect("answer");
    bad.client_error();
    let long = json!({"options": {"duration_ms": 60_000}});
    let busy = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(long)).await.expect("answer");
    let busy = busy.expect(StatusCode::CREATED, None)["id"].as_str().expect("id").to_owned();
    let refused = system.http(Method::POST, &path, OPERATOR, None).await.expect("answer");
    let refused = refused.expect(StatusCode::CONFLICT, Some("run_in_flight"));
    assert!(refused["message"].as_str().expect("message").contains(&busy), "names the run in flight: {refused}");
    system.cli(&["cancel", &busy]).await.expect(0);
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_three_failing_runs_quarantine_an_item_and_the_fourth_skips_it() {
    three_failing_runs_quarantine_an_item_and_the_fourth_skips_it(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_three_failing_runs_quarantine_an_item_and_the_fourth_skips_it() {
    three_failing_runs_quarantine_an_item_and_the_fourth_skips_it(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_rerun_of_the_failures_gets_exactly_the_failed_ids() {
    a_rerun_of_the_failures_gets_exactly_the_failed_ids(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_rerun_of_the_failures_gets_exactly_the_failed_ids() {
    a_rerun_of_the_failures_gets_exactly_the_failed_ids(Kind::Sqlite).await;
}
