//! Backlog triggers and freshness targets through the API, in-process on PostgreSQL and SQLite: the four keys
//! overridden with audit and resolved into the worker's effective configuration with their source; each bad value
//! (a debounce longer than the longest wait, a zero or negative duration or threshold) a 400 whose sentence names
//! the key, leaving nothing changed; a run's arguments cannot set them; the fire history is served newest first.

use axum::http::{Method, StatusCode};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, TestApi, VIEWER},
    backend_tests,
};
use serde_json::{Value, json};

backend_tests!(backlog_keys_are_overridden_with_audit_and_bad_ones_refused_with_a_sentence,);

async fn backlog_keys_are_overridden_with_audit_and_bad_ones_refused_with_a_sentence(t: &TestDb) {
    let api = TestApi::new(t).await;
    let put = |body: Value| {
        let api = api.clone();
        async move { api.send(Method::PUT, "/api/workers/tagger/override", Some(ADMIN), Some(body)).await }
    };
    let view = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert!(view["effective"].get("backlog").is_none(), "the catalogue sets no trigger: {view}");
    assert_eq!(view["freshness"], Value::Null, "no target, no freshness: {view}");

    let set = json!({"when_pending_at_least": 50, "quiet_seconds": 30, "max_delay_seconds": 600,
        "fresh_within_seconds": 86400, "reason": "tags must be fresh by morning"});
    let set = put(set).await.expect(StatusCode::OK, None);
    assert_eq!(
        set["effective"]["backlog"],
        json!({"value": {"when_pending_at_least": 50, "quiet_seconds": 30, "max_delay_seconds": 600}, "source": "override"}),
        "{set}"
    );
    assert_eq!(set["effective"]["fresh_within_seconds"], json!({"value": 86400, "source": "override"}), "{set}");
    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(audit["entries"][0]["after"]["quiet_seconds"], 30, "{audit}");
    let view = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(view["freshness"]["within_seconds"], 86400, "{view}");
    assert_eq!(view["freshness"]["breached"], false, "nothing counted yet, nothing pending: {view}");

    for (body, key, says) in [
        (json!({"quiet_seconds": 700}), "quiet_seconds", "cannot be longer than max_delay_seconds"),
        (json!({"max_delay_seconds": 10}), "quiet_seconds", "cannot be longer than max_delay_seconds"),
        (json!({"quiet_seconds": 0}), "quiet_seconds", "at least 1 second"),
        (json!({"max_delay_seconds": -5}), "max_delay_seconds", "at least 1 second"),
        (json!({"when_pending_at_least": 0}), "when_pending_at_least", "at least 1"),
        (json!({"fresh_within_seconds": 0}), "fresh_within_seconds", "at least 1 second"),
        (json!({"fresh_within_seconds": -1}), "fresh_within_seconds", "at least 1 second"),
    ] {
        let mut change = body.clone();
        change["reason"] = json!("r");
        let what = format!("{body}");
        let error = put(change).await.expect_of(&what, StatusCode::BAD_REQUEST, Some("invalid_override"));
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(key) && message.contains(says), "{body} → {error}");
    }
    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(audit["entries"].as_array().map(Vec::len), Some(1), "a refused change leaves no trace: {audit}");

    let refused = api.post("/api/workers/tagger/runs", OPERATOR, Some(json!({"quiet_seconds": 5})));
    let refused = refused.await.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(
        refused["message"].as_str().is_some_and(|m| m.starts_with("quiet_seconds is a setting of the worker")),
        "{refused}"
    );

    let fires = api.get("/api/workers/tagger/backlog-fires", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(
        fires,
        json!({"worker": "tagger", "trigger": {"when_pending_at_least": 50, "quiet_seconds": 30, "max_delay_seconds": 600}, "fires": []})
    );
    api.get("/api/workers/nobody/backlog-fires", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    let bad_limit = api.get("/api/workers/tagger/backlog-fires?limit=0", VIEWER).await;
    bad_limit.expect(StatusCode::BAD_REQUEST, None);
}
