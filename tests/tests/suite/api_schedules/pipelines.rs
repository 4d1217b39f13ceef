//! A pipeline run through the API: refused before it starts, started with its first step queued, refused
//! while in flight, cancelled with its step, started again with a step's arguments, and scheduled.

use axum::http::{StatusCode, header};
use scrinalia_tests::{
    TestDb,
    api_harness::{OPERATOR, VIEWER},
};
use serde_json::json;
use uuid::Uuid;

use super::{api_of, message, uuid_of};

pub(super) async fn a_pipeline_run_starts_its_first_step_refuses_a_second_and_cancels(t: &TestDb) {
    let api = api_of(t).await;
    let pipelines = api.get("/api/pipelines", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(
        pipelines,
        json!([{"name": "p", "description": "Transfer, then tag.", "steps": ["transfer", "tagger"], "last_run": null}])
    );
    assert_eq!(api.get("/api/pipelines/p/runs", VIEWER).await.expect(StatusCode::OK, None), json!([]));

    // Refused before anything starts: an unknown pipeline, arguments for a worker that is no step, a step's
    // arguments that do not fit.
    let body = api.post("/api/pipelines/nope/runs", OPERATOR, None).await;
    assert!(message(&body.expect(StatusCode::NOT_FOUND, Some("pipeline_not_found"))).contains("\"nope\""));
    api.get("/api/pipelines/nope/runs", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("pipeline_not_found"));
    let stranger = json!({"arguments": {"judge": {}}});
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(stranger)).await;
    let answer = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(message(&answer).contains("\"judge\"") && message(&answer).contains("transfer, tagger"), "{answer}");
    let unfit = json!({"arguments": {"tagger": {"options": {"colour": "red"}}}});
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(unfit)).await;
    let answer = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(message(&answer).contains("Step 2 (tagger)") && message(&answer).contains("colour"), "{answer}");
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(json!({"arguments": [1]}))).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(json!({"steps": {}}))).await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    assert_eq!(api.get("/api/pipelines/p/runs", VIEWER).await.expect(StatusCode::OK, None), json!([]));

    // Started (no body at all): its first step's run is queued.
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, None).await;
    let started = reply.expect(StatusCode::CREATED, None);
    let id = uuid_of(&started["id"]);
    assert_eq!(reply.headers[header::LOCATION], format!("/api/pipeline-runs/{id}").as_str());
    assert_eq!(started["pipeline"], "p");
    assert_eq!(started["state"], "running");
    assert_eq!(started["steps"], json!(["transfer", "tagger"]));
    assert_eq!(started["step"], 0);
    assert_eq!(started["requested_by"], "otto-operator");
    // Its step is requested, so it waits for what that run waits for: this test starts no daemon.
    assert_eq!(started["waiting"]["code"], "no_daemon", "{started}");
    let runs = started["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{started}");
    assert_eq!(runs[0]["worker"], "transfer");
    assert_eq!(runs[0]["state"], "queued");
    assert_eq!(runs[0]["pipeline_step"], 0);
    assert_eq!(uuid_of(&runs[0]["pipeline_run_id"]), id);
    let step_run = uuid_of(&runs[0]["id"]);
    assert_eq!(uuid_of(&started["current_run"]), step_run);

    // A second start is refused, naming the run in flight.
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, None).await;
    let conflict = reply.expect(StatusCode::CONFLICT, Some("pipeline_in_flight"));
    assert!(message(&conflict).contains(&id.to_string()) && message(&conflict).contains("step 1 of 2"), "{conflict}");
    assert_eq!(uuid_of(&conflict["pipeline_run_id"]), id);

    let read = api.get(&format!("/api/pipeline-runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(read, started);
    let listed = api.get("/api/pipelines/p/runs?limit=5", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(listed.as_array().map(|r| r.iter().map(|r| uuid_of(&r["id"])).collect::<Vec<_>>()), Some(vec![id]));
    assert!(listed[0].get("runs").is_none(), "the list has plain pipeline runs: {listed}");
    let pipelines = api.get("/api/pipelines", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(uuid_of(&pipelines[0]["last_run"]["id"]), id);
    let reply = api.get("/api/pipelines/p/runs?limit=501", VIEWER).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));

    // Cancelled: its queued step at once, and the pipeline run with it.
    let cancelled =
        api.post(&format!("/api/pipeline-runs/{id}/cancel"), OPERATOR, None).await.expect(StatusCode::OK, None);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["cancel_requested_by"], "otto-operator");
    assert!(cancelled["finished_at"].is_string());
    assert!(cancelled["error"].as_str().is_some_and(|e| e.contains("otto-operator")), "{cancelled}");
    assert_eq!(cancelled["runs"][0]["state"], "cancelled");
    let step = api.get(&format!("/api/runs/{step_run}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(step["state"], "cancelled");
    assert_eq!(step["cancel_requested_by"], "otto-operator");
    // Again: it already ended, and is answered unchanged.
    let again = api.post(&format!("/api/pipeline-runs/{id}/cancel"), OPERATOR, None).await.expect(StatusCode::OK, None);
    assert_eq!(again, cancelled);

    // The pipeline is free again; a start with arguments for a step.
    let body = json!({"arguments": {"transfer": {}, "tagger": {"options": {"batch_size": 3}}}});
    let second = api.post("/api/pipelines/p/runs", OPERATOR, Some(body)).await.expect(StatusCode::CREATED, None);
    assert_eq!(second["arguments"]["tagger"], json!({"options": {"batch_size": 3}}));
    let listed = api.get("/api/pipelines/p/runs", VIEWER).await.expect(StatusCode::OK, None);
    let order: Vec<Uuid> = listed.as_array().expect("runs").iter().map(|r| uuid_of(&r["id"])).collect();
    assert_eq!(order, [uuid_of(&second["id"]), id], "newest first");

    let unknown = Uuid::now_v7();
    let reply = api.get(&format!("/api/pipeline-runs/{unknown}"), VIEWER).await;
    assert!(
        message(&reply.expect(StatusCode::NOT_FOUND, Some("pipeline_run_not_found"))).contains(&unknown.to_string())
    );
    let reply = api.post(&format!("/api/pipeline-runs/{unknown}/cancel"), OPERATOR, None).await;
    reply.expect(StatusCode::NOT_FOUND, Some("pipeline_run_not_found"));
    api.get("/api/pipeline-runs/not-a-uuid", VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));

    // A schedule of the pipeline.
    let schedule = json!({"name": "p-nightly", "pipeline": "p", "cron": "@daily",
        "arguments": {"tagger": {"options": {"batch_size": 2}}}, "reason": "every night"});
    let created = api.post("/api/schedules", OPERATOR, Some(schedule)).await.expect(StatusCode::CREATED, None);
    assert_eq!((&created["target_kind"], &created["target"]), (&json!("pipeline"), &json!("p")));
}
