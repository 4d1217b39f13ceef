//! Resume and restart through the API, in-process on PostgreSQL and SQLite: 201 with the new run and its
//! location, linked to the run it continues (a resume carrying the checkpoint); each refusal a 4xx with its code
//! and a sentence (a bad id, an unknown run, a run that did not end badly, no checkpoint, continued already, the
//! worker busy); a viewer may not continue a run.

use std::time::Duration;

use axum::http::{StatusCode, header};
use scrinalia_tests::{
    TestDb,
    api_harness::{OPERATOR, TestApi, VIEWER},
    backend_tests,
    fixtures::{LONG_LEASE, succeeded},
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(resume_and_restart_answer_201_or_a_sentence,);

fn id_of(run: &Value) -> Uuid {
    run["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a run id in {run}"))
}

/// Triggers `worker` and claims its run for a new daemon with `lease`; returns the run and the daemon.
async fn running(api: &TestApi, t: &TestDb, worker: &str, lease: Duration) -> (Uuid, Uuid) {
    let id = id_of(&api.trigger(worker, None).await);
    let daemon = Uuid::now_v7();
    let only = [worker.to_owned()];
    assert_eq!(t.db.daemon.claim_runs(daemon, lease, 1, Some(&only)).await.expect("claim").len(), 1);
    (id, daemon)
}

async fn resume_and_restart_answer_201_or_a_sentence(t: &TestDb) {
    let api = TestApi::new(t).await;
    // An interrupted run with a checkpoint: its lease ran out.
    let (cut, daemon) = running(&api, t, "tagger", Duration::from_millis(300)).await;
    t.db.daemon.store_checkpoint(cut, daemon, &json!({"batch": 7})).await.expect("checkpoint");
    tokio::time::sleep(Duration::from_millis(600)).await;
    t.db.daemon.recover_expired().await.expect("recover");

    api.post(&format!("/api/runs/{cut}/resume"), VIEWER, None).await.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    api.post("/api/runs/not-a-uuid/resume", OPERATOR, None).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
    let unknown = Uuid::now_v7();
    api.post(&format!("/api/runs/{unknown}/restart"), OPERATOR, None)
        .await
        .expect(StatusCode::NOT_FOUND, Some("unknown_run"));

    let reply = api.post(&format!("/api/runs/{cut}/resume"), OPERATOR, None).await;
    let resumed = reply.expect(StatusCode::CREATED, None);
    let id = id_of(&resumed);
    assert_eq!(reply.headers[header::LOCATION], format!("/api/runs/{id}").as_str());
    assert_eq!(resumed["follows"], cut.to_string());
    assert_eq!(resumed["follows_as"], "resume");
    assert_eq!(resumed["checkpoint"], json!({"batch": 7}));
    assert_eq!(resumed["requested_by"], "otto-operator");
    let detail = api.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    let chain: Vec<&str> = detail["chain"].as_array().expect("chain").iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(chain, [cut.to_string(), id.to_string()], "the detail shows the chain");

    let twice = api.post(&format!("/api/runs/{cut}/restart"), OPERATOR, None).await;
    let body = twice.expect(StatusCode::CONFLICT, Some("already_continued"));
    assert_eq!(body["continued_by"], id.to_string());
    assert!(body["message"].as_str().is_some_and(|m| m.contains("already resumed by run")), "{body}");

    // The resumed run finished well: it cannot be resumed (no bad end), and the worker is free again.
    let resumer = Uuid::now_v7();
    t.db.daemon.claim_runs(resumer, LONG_LEASE, 1, None).await.expect("claim");
    t.db.daemon.finish_run(id, resumer, &succeeded()).await.expect("finish");
    let body = api
        .post(&format!("/api/runs/{id}/resume"), OPERATOR, None)
        .await
        .expect(StatusCode::CONFLICT, Some("not_continuable"));
    assert_eq!(body["state"], "succeeded");

    // An interrupted run without a checkpoint: no resume, but a restart; while it is queued, the worker is busy.
    let (bare, _) = running(&api, t, "judge", Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    t.db.daemon.recover_expired().await.expect("recover");
    api.post(&format!("/api/runs/{bare}/resume"), OPERATOR, None)
        .await
        .expect(StatusCode::CONFLICT, Some("no_checkpoint"));
    let _busy = id_of(&api.trigger("judge", None).await);
    let body = api
        .post(&format!("/api/runs/{bare}/restart"), OPERATOR, None)
        .await
        .expect(StatusCode::CONFLICT, Some("run_in_flight"));
    assert!(body["run_id"].is_string(), "names the run in flight: {body}");
}
