//! A run's priority and expiry through the API, in-process on PostgreSQL and SQLite: a priority out of 0–100 or
//! an expiry below a second is a 400 whose sentence names the key; an operator may lower a run's priority but
//! raising it above the worker's needs the admin role (403 with a sentence); an audited override sets the
//! worker's, which runs then carry with its source; the run records its priority and when it expires.

use axum::http::{Method, StatusCode};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, TestApi, VIEWER},
    backend_tests,
};
use serde_json::{Value, json};

backend_tests!(
    priorities_and_expiries_are_checked_resolved_and_raised_only_by_admins,
    health_and_the_worker_card_say_why_a_preemptible_worker_is_not_preempted,
);

async fn health_and_the_worker_card_say_why_a_preemptible_worker_is_not_preempted(t: &TestDb) {
    let api = TestApi::with(t, &ApiConfig { preemptible: vec!["tagger"], ..ApiConfig::default() }).await;
    let why = "its code has not described itself, so whether it can yield is not known";
    let card = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    let note = format!("Declared preemptible, but its runs are not preempted: {why}.");
    assert_eq!(card["preemption_note"], json!(note), "{card}");
    let other = api.get("/api/workers/judge", VIEWER).await.expect(StatusCode::OK, None);
    assert!(other.get("preemption_note").is_none(), "not declared preemptible, nothing to say: {other}");
    let health = api.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
    let checks = health["checks"].as_array().expect("checks");
    let tagger = checks.iter().find(|c| c["name"] == "worker:tagger").expect("the tagger's check");
    assert_eq!(tagger["status"], "degraded", "{tagger}");
    assert_eq!(tagger["details"]["preemptible"], false, "{tagger}");
    let error = tagger["error"].as_str().unwrap_or_default();
    assert!(error.contains(&format!("It is declared preemptible, but its runs are not preempted: {why}")), "{tagger}");
}

async fn priorities_and_expiries_are_checked_resolved_and_raised_only_by_admins(t: &TestDb) {
    let api = TestApi::new(t).await;
    let trigger = |token: &'static str, body: Value| {
        let api = api.clone();
        async move { api.send(Method::POST, "/api/workers/tagger/runs", Some(token), Some(body)).await }
    };
    let cancel = |run: &Value| {
        let (api, id) = (api.clone(), run["id"].as_str().expect("an id").to_owned());
        async move {
            api.send(Method::POST, &format!("/api/runs/{id}/cancel"), Some(OPERATOR), None)
                .await
                .expect(StatusCode::ACCEPTED, None);
        }
    };

    // Out of range: a 400 naming the key, and nothing queued.
    for (body, says) in [
        (json!({"priority": 101}), "priority must be a whole number from 0 to 100"),
        (json!({"priority": -1}), "priority must be a whole number from 0 to 100"),
        (json!({"expires_after_seconds": 0}), "expires_after_seconds must be at least 1"),
        (json!({"expires_after_seconds": -3}), "expires_after_seconds must be at least 1"),
    ] {
        let what = body.to_string();
        let refused = trigger(ADMIN, body).await.expect_of(&what, StatusCode::BAD_REQUEST, Some("invalid_arguments"));
        assert!(refused["message"].as_str().is_some_and(|m| m.starts_with(says)), "{what} → {refused}");
    }
    let none = api.get("/api/runs?worker=tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(none["runs"], json!([]), "a refused request queues nothing");

    // The default is 50; an operator may lower it, not raise it.
    let effective = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None)["effective"].clone();
    assert_eq!(effective["priority"], json!({"value": 50, "source": "default"}), "{effective}");
    let raised =
        trigger(OPERATOR, json!({"priority": 80})).await.expect(StatusCode::FORBIDDEN, Some("priority_needs_admin"));
    let message = raised["message"].as_str().unwrap_or_default();
    assert!(message.contains("above its priority 50 (to 80) needs the admin role"), "{raised}");
    let lowered = trigger(OPERATOR, json!({"priority": 20, "expires_after_seconds": 600})).await;
    let lowered = lowered.expect(StatusCode::CREATED, None);
    assert_eq!(lowered["priority"], 20, "{lowered}");
    assert_eq!(lowered["config"]["priority"], json!({"value": 20, "source": "explicit"}));
    assert_eq!(lowered["config"]["expires_after_seconds"], json!({"value": 600, "source": "explicit"}));
    let requested = chrono::DateTime::parse_from_rfc3339(lowered["requested_at"].as_str().expect("a time"));
    let expires = chrono::DateTime::parse_from_rfc3339(lowered["expires_at"].as_str().expect("an expiry"));
    let after = expires.expect("RFC 3339") - requested.expect("RFC 3339");
    assert!((599_000..=601_000).contains(&after.num_milliseconds()), "expires 600 s after the request: {lowered}");
    let detail = api.get(&format!("/api/runs/{}", lowered["id"].as_str().expect("an id")), VIEWER).await;
    let detail = detail.expect(StatusCode::OK, None);
    let waiting = detail["waiting"]["message"].as_str().unwrap_or_default();
    assert!(waiting.contains("It expires at") && waiting.contains("if no daemon has claimed it by then"), "{detail}");
    cancel(&lowered).await;

    // An admin may raise it; the run records it.
    let urgent = trigger(ADMIN, json!({"priority": 90})).await.expect(StatusCode::CREATED, None);
    assert_eq!((&urgent["priority"], &urgent["config"]["priority"]["source"]), (&json!(90), &json!("explicit")));
    assert!(urgent.get("expires_at").is_none(), "no expiry asked for, none set: {urgent}");
    cancel(&urgent).await;

    // An audited override sets the worker's priority: runs without one carry it, and it is the operators' ceiling.
    let put = |body: Value| {
        let api = api.clone();
        async move { api.send(Method::PUT, "/api/workers/tagger/override", Some(ADMIN), Some(body)).await }
    };
    let bad = put(json!({"priority": 101, "reason": "r"})).await;
    let bad = bad.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
    assert!(bad["message"].as_str().is_some_and(|m| m.starts_with("priority must be")), "{bad}");
    let bad = put(json!({"expires_after_seconds": 0, "reason": "r"})).await;
    let bad = bad.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
    assert!(bad["message"].as_str().is_some_and(|m| m.starts_with("expires_after_seconds must be")), "{bad}");
    let set = put(json!({"priority": 70, "expires_after_seconds": 3600, "reason": "tags first at night"})).await;
    let set = set.expect(StatusCode::OK, None);
    assert_eq!(set["effective"]["priority"], json!({"value": 70, "source": "override"}), "{set}");
    let plain = api.trigger("tagger", None).await;
    assert_eq!((&plain["priority"], &plain["config"]["priority"]["source"]), (&json!(70), &json!("override")));
    assert_eq!(plain["config"]["expires_after_seconds"], json!({"value": 3600, "source": "override"}));
    cancel(&plain).await;
    let at_ceiling = trigger(OPERATOR, json!({"priority": 70})).await.expect(StatusCode::CREATED, None);
    cancel(&at_ceiling).await;
    trigger(OPERATOR, json!({"priority": 71})).await.expect(StatusCode::FORBIDDEN, Some("priority_needs_admin"));
    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    let entry = &audit["entries"][0];
    assert_eq!(entry["after"], json!({"priority": 70, "expires_after_seconds": 3600}), "{audit}");
    assert_eq!(entry["reason"], "tags first at night");
}
