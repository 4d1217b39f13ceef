//! The limits of a worker's runs (`memory_max`, `cpu_max`, `stall_seconds`) overridden through the API,
//! in-process on PostgreSQL and SQLite: each change audited with its reason and resolved onto the next run's
//! configuration with its source, a `null` giving it back to the catalogue; each bad value a 400 whose sentence
//! names the key, leaving nothing changed; and a run's own arguments cannot set a limit.

use axum::http::{Method, StatusCode};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, TestApi, VIEWER},
    backend_tests,
};
use serde_json::{Value, json};

backend_tests!(limit_overrides_are_audited_resolved_onto_runs_and_bad_ones_refused_with_a_sentence,);

async fn limit_overrides_are_audited_resolved_onto_runs_and_bad_ones_refused_with_a_sentence(t: &TestDb) {
    let api = TestApi::new(t).await;
    let put = |body: Value| {
        let api = api.clone();
        async move { api.send(Method::PUT, "/api/workers/tagger/override", Some(ADMIN), Some(body)).await }
    };
    let effective =
        || async { api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None)["effective"].clone() };
    let before = effective().await;
    for key in ["memory_max_bytes", "cpu_max", "stall_seconds"] {
        assert!(before.get(key).is_none(), "the catalogue sets no {key}: {before}");
    }

    let set = put(json!({"memory_max": "512MiB", "cpu_max": 0.5, "stall_seconds": 30, "reason": "a leaking model"}))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(set["override"]["values"], json!({"memory_max": "512MiB", "cpu_max": 0.5, "stall_seconds": 30}));
    let resolved = json!({
        "memory_max_bytes": {"value": 536_870_912, "source": "override"},
        "cpu_max": {"value": 0.5, "source": "override"},
        "stall_seconds": {"value": 30, "source": "override"},
    });
    for (key, value) in resolved.as_object().expect("an object") {
        assert_eq!(&set["effective"][key], value, "{key} in the answer: {set}");
        assert_eq!(&effective().await[key], value, "{key} in the worker's view");
    }
    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    let entry = &audit["entries"][0];
    assert_eq!(
        (&entry["action"], &entry["actor"], &entry["reason"]),
        (&json!("set"), &json!("ada-admin"), &json!("a leaking model")),
        "{audit}"
    );
    assert_eq!(entry["after"], json!({"memory_max": "512MiB", "cpu_max": 0.5, "stall_seconds": 30}), "{audit}");

    // The next run carries them, resolved, with their source.
    let run = api.trigger("tagger", None).await;
    for (key, value) in resolved.as_object().expect("an object") {
        assert_eq!(&run["config"][key], value, "{key} on the run: {run}");
    }

    // Each bad value: a 400 whose sentence names the key, and nothing changed.
    for (body, key, says) in [
        (json!({"memory_max": "lots"}), "memory_max", "a whole number and a binary unit"),
        (json!({"memory_max": "0"}), "memory_max", "at least 1MiB"),
        (json!({"memory_max": -1}), "memory_max", "cannot be negative"),
        (json!({"memory_max": "-4GiB"}), "memory_max", "cannot be negative"),
        (json!({"memory_max": "2G"}), "memory_max", "\"2GiB\""),
        (json!({"cpu_max": 0}), "cpu_max", "more than 0 cores"),
        (json!({"cpu_max": -1}), "cpu_max", "more than 0 cores"),
        (json!({"cpu_max": 1024.5}), "cpu_max", "at most 1024 cores"),
        (json!({"stall_seconds": 0}), "stall_seconds", "at least 1 second"),
        (json!({"stall_seconds": -5}), "stall_seconds", "at least 1 second"),
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

    // A run's arguments cannot set a limit: only the catalogue and an audited override do.
    let refused = api.post("/api/workers/tagger/runs", OPERATOR, Some(json!({"stall_seconds": 5})));
    let refused = refused.await.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(
        refused["message"].as_str().is_some_and(|m| m.starts_with("stall_seconds is a limit of the worker")),
        "{refused}"
    );

    // `null` gives one back to the catalogue (which sets none), and that change is audited too.
    let cleared = put(json!({"memory_max": null, "reason": "fixed the leak"})).await.expect(StatusCode::OK, None);
    assert_eq!(cleared["override"]["values"], json!({"cpu_max": 0.5, "stall_seconds": 30}));
    assert!(cleared["effective"].get("memory_max_bytes").is_none(), "{cleared}");
    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(audit["entries"][0]["reason"], "fixed the leak");
    assert_eq!(audit["entries"][0]["before"]["memory_max"], "512MiB");
}
