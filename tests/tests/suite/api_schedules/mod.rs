//! The API of schedules, pipelines and retries, in-process on PostgreSQL and SQLite: a schedule's whole life
//! (create, read by name and by id, replace, pause, resume, delete) with its audit trail and fires; every bad
//! definition answered 400 with a sentence naming what is wrong, 409 on a taken name, 404 on an unknown one,
//! 403 for a viewer's write; the preview; a pipeline run started, refused while in flight and cancelled; a retry
//! policy set by override; and a run's retry chain, with the manual trigger refused while a retry waits. The
//! helpers and the OpenAPI check are here, each kind of test in its own file.

mod lifecycle;
mod pipelines;
mod preview;
mod refusals;
mod retries;

use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use lifecycle::{
    a_deleted_schedule_keeps_its_fires_and_audit_trail_readable_by_id,
    a_schedule_is_created_read_replaced_paused_resumed_and_deleted_with_its_audit_trail,
};
use pipelines::a_pipeline_run_starts_its_first_step_refuses_a_second_and_cancels;
use preview::the_preview_is_the_next_three_fire_times;
use refusals::{
    bad_schedules_are_400_with_a_sentence_naming_what_is_wrong,
    taken_names_unknown_schedules_and_roles_are_409_404_and_403,
};
use retries::{
    a_retry_policy_set_by_override_is_audited_and_shown_with_its_source,
    a_trigger_while_a_retry_waits_is_409_naming_it_and_a_run_shows_its_chain,
};
use scrinalia_api::{AppState, app};
use scrinalia_shared::catalogue::PipelineSpec;
use scrinalia_tests::{
    TestDb,
    api_harness::{ApiConfig, TestApi, config_file},
    backend_tests,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    a_schedule_is_created_read_replaced_paused_resumed_and_deleted_with_its_audit_trail,
    a_deleted_schedule_keeps_its_fires_and_audit_trail_readable_by_id,
    bad_schedules_are_400_with_a_sentence_naming_what_is_wrong,
    taken_names_unknown_schedules_and_roles_are_409_404_and_403,
    the_preview_is_the_next_three_fire_times,
    a_pipeline_run_starts_its_first_step_refuses_a_second_and_cancels,
    a_retry_policy_set_by_override_is_audited_and_shown_with_its_source,
    a_trigger_while_a_retry_waits_is_409_naming_it_and_a_run_shows_its_chain,
    the_document_describes_the_schedule_and_pipeline_routes,
);

/// The test API over `t` (the harness's catalogue: `tagger`, `judge`, `transfer`) with the pipeline `p` of
/// steps `transfer` then `tagger`.
async fn api_of(t: &TestDb) -> TestApi {
    let pipeline = PipelineSpec {
        name: "p".into(),
        description: Some("Transfer, then tag.".into()),
        steps: vec!["transfer".into(), "tagger".into()],
        tags: Vec::new(),
    };
    let config = config_file(&t.url, t.dir.path(), &ApiConfig::default()).with(|f| f.pipelines = vec![pipeline]);
    let settings = config.load(&t.dir.path().join("config.toml")).expect("a valid configuration");
    let state = AppState::new(settings, t.db.api.clone());
    TestApi { router: app(state.clone()), state, peer: std::net::SocketAddr::from(([127, 0, 0, 1], 40000)) }
}

fn uuid_of(v: &Value) -> Uuid {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a UUID, not {v}"))
}

fn time_of(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("an RFC 3339 time, not {v}"))
}

/// The fire times of `upcoming`, asserting there are three, each after the one before.
fn three_increasing(upcoming: &Value) -> Vec<DateTime<Utc>> {
    let times: Vec<DateTime<Utc>> = upcoming.as_array().expect("upcoming").iter().map(time_of).collect();
    assert_eq!(times.len(), 3, "three upcoming fire times: {upcoming}");
    assert!(times.windows(2).all(|w| w[0] < w[1]), "increasing: {upcoming}");
    times
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

async fn put(api: &TestApi, path: &str, token: &str, body: Value) -> scrinalia_tests::Reply {
    api.send(Method::PUT, path, Some(token), Some(body)).await
}

async fn delete(api: &TestApi, path: &str, token: &str, body: Option<Value>) -> scrinalia_tests::Reply {
    api.send(Method::DELETE, path, Some(token), body).await
}

fn nightly() -> Value {
    json!({
        "name": "nightly-tags",
        "worker": "tagger",
        "cron": "0 3 * * *",
        "time_zone": "Europe/Berlin",
        "arguments": {"options": {"batch_size": 5}},
        "reason": "tag what came in during the day",
    })
}

async fn the_document_describes_the_schedule_and_pipeline_routes(t: &TestDb) {
    let api = api_of(t).await;
    let doc = api.send(Method::GET, "/api/openapi.json", None, None).await.expect(StatusCode::OK, None);
    let routes = [
        ("/api/schedules", "get", &[200, 401, 403][..]),
        ("/api/schedules", "post", &[201, 400, 401, 403, 409, 422]),
        ("/api/schedules/preview", "post", &[200, 400, 401, 403]),
        ("/api/schedules/{key}", "get", &[200, 401, 403, 404]),
        ("/api/schedules/{key}", "put", &[200, 400, 401, 403, 404, 409]),
        ("/api/schedules/{key}", "delete", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/pause", "post", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/resume", "post", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/fires", "get", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/audit", "get", &[200, 400, 401, 403, 404]),
        ("/api/pipelines", "get", &[200, 401, 403]),
        ("/api/pipelines/{name}/runs", "post", &[201, 400, 401, 403, 404, 409]),
        ("/api/pipelines/{name}/runs", "get", &[200, 400, 401, 403, 404]),
        ("/api/pipeline-runs/{id}", "get", &[200, 400, 401, 403, 404]),
        ("/api/pipeline-runs/{id}/cancel", "post", &[200, 400, 401, 403, 404]),
        ("/api/runs/{id}", "get", &[200, 400, 401, 404]),
    ];
    for (path, method, statuses) in routes {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "the document describes {method} {path}");
        for status in statuses {
            assert!(operation["responses"][status.to_string()].is_object(), "{method} {path} documents {status}");
        }
    }
    let schemas = &doc["components"]["schemas"];
    for schema in ["ScheduleView", "ScheduleInput", "ScheduleFire", "ScheduleAuditEntry", "SchedulePreview"] {
        assert!(schemas[schema].is_object(), "the document has the schema {schema}");
    }
    for schema in ["PipelineView", "PipelineRun", "PipelineRunView", "RunDetail"] {
        assert!(schemas[schema].is_object(), "the document has the schema {schema}");
    }
    let detail = serde_json::to_string(&schemas["RunDetail"]).unwrap_or_default();
    assert!(detail.contains("\"chain\""), "RunDetail has the chain: {detail}");
}
