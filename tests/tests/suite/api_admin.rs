//! Overrides (and the proof that the view and the next run agree), the audit trail, daemons and draining,
//! live events across two API instances, and the meta endpoints, in-process on PostgreSQL and SQLite.

use std::time::Duration;

use axum::{
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use scrinalia_api::{AppState, app};
use scrinalia_shared::{Change, DaemonState, daemons::NewDaemon};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, TestApi, VIEWER, config_file},
    backend_tests,
    fixtures::{LONG_LEASE, succeeded},
    sse::EventStream,
};
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

backend_tests!(
    an_override_set_through_the_api_is_what_the_view_shows_and_the_next_run_uses,
    invalid_override_changes_are_400_and_change_nothing,
    daemons_are_listed_with_their_state_and_can_be_drained,
    live_events_report_a_run_triggered_through_another_api_instance,
    liveness_readiness_openapi_and_unknown_routes,
);

async fn an_override_set_through_the_api_is_what_the_view_shows_and_the_next_run_uses(t: &TestDb) {
    let api = TestApi::new(t).await;
    let put = |body: Value| api.send(Method::PUT, "/api/workers/tagger/override", Some(ADMIN), Some(body));
    let change = json!({"preset": "big", "options": {"batch_size": 25, "verify": true}, "reason": "bigger model for the backlog"});
    let set = put(change).await.expect(StatusCode::OK, None);
    assert_eq!(set["override"]["values"], json!({"preset": "big", "options": {"batch_size": 25, "verify": true}}));
    assert_eq!(set["override"]["updated_by"], "ada-admin");
    assert_eq!(set["effective"]["preset"], json!({"value": "big", "source": "override"}));

    let view = api.get("/api/workers", VIEWER).await.expect(StatusCode::OK, None);
    let tagger = &view["workers"][0];
    assert_eq!(tagger["effective"], set["effective"], "the view shows what the change answered");
    assert_eq!(tagger["override"]["values"]["preset"], "big");
    let run = api.trigger("tagger", None).await;
    assert_eq!(run["config"], tagger["effective"], "the next run resolves to exactly what the view shows");
    assert_eq!(run["config"]["model"], "qwen2.5:7b");
    assert_eq!(run["config"]["options"]["verify"], json!({"value": true, "source": "override"}));
    assert_eq!(run["config"]["options"]["mode"], json!({"value": "quick", "source": "default"}));

    // Explicit arguments still win over the override.
    let id = run["id"].as_str().and_then(|s| s.parse::<Uuid>().ok()).expect("an id");
    let daemon = Uuid::now_v7();
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    t.db.daemon.finish_run(id, daemon, &succeeded()).await.expect("finish");
    let explicit = api.trigger("tagger", Some(json!({"options": {"batch_size": 3}}))).await;
    assert_eq!(explicit["config"]["options"]["batch_size"], json!({"value": 3, "source": "explicit"}));
    assert_eq!(explicit["config"]["preset"]["source"], "override");

    // A partial change: null clears the preset, the options stay.
    let partial = put(json!({"preset": null, "options": {"verify": null}, "reason": "back to the fast model"})).await;
    let partial = partial.expect(StatusCode::OK, None);
    assert_eq!(partial["override"]["values"], json!({"options": {"batch_size": 25}}));
    assert_eq!(partial["effective"]["preset"], json!({"value": "fast", "source": "default"}));

    let cleared =
        api.send(Method::DELETE, "/api/workers/tagger/override?reason=clean%20slate", Some(ADMIN), None).await;
    let cleared = cleared.expect(StatusCode::OK, None);
    assert!(cleared["override"].is_null());
    assert_eq!(cleared["effective"]["options"]["batch_size"]["source"], "default");
    let body_reason = json!({"reason": "nothing to clear, recorded anyway"});
    api.send(Method::DELETE, "/api/workers/transfer/override", Some(ADMIN), Some(body_reason))
        .await
        .expect(StatusCode::OK, None);

    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 3, "{audit}");
    let reasons: Vec<&str> = entries.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons, ["clean slate", "back to the fast model", "bigger model for the backlog"], "newest first");
    assert!(entries.iter().all(|e| e["actor"] == "ada-admin" && e["at"].is_string()));
    assert_eq!(entries[0]["action"], "clear");
    assert_eq!(entries[0]["before"], json!({"options": {"batch_size": 25}}));
    assert!(entries[0]["after"].is_null());
    assert_eq!(entries[1]["before"], json!({"preset": "big", "options": {"batch_size": 25, "verify": true}}));
    assert!(entries[2]["before"].is_null());
    assert_eq!(entries[2]["action"], "set");
    let limited = api.get("/api/workers/tagger/audit?limit=1", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(limited["entries"].as_array().map(Vec::len), Some(1));
    api.get("/api/workers/tagger/audit?limit=0", VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
    api.get("/api/workers/nobody/audit", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
}

async fn invalid_override_changes_are_400_and_change_nothing(t: &TestDb) {
    let api = TestApi::new(t).await;
    let put = |worker: &'static str, body: Value| {
        let api = api.clone();
        async move { api.send(Method::PUT, &format!("/api/workers/{worker}/override"), Some(ADMIN), Some(body)).await }
    };
    put("tagger", json!({"preset": "big"})).await.expect(StatusCode::BAD_REQUEST, Some("reason_required"));
    put("tagger", json!({"preset": "big", "reason": "   "}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("reason_required"));
    let long = "x".repeat(2001);
    put("tagger", json!({"preset": "big", "reason": long}))
        .await
        .expect(StatusCode::BAD_REQUEST, Some("reason_too_long"));
    for (worker, body, expected) in [
        ("tagger", json!({"options": {"batch_size": "x"}, "reason": "r"}), "must be a whole number"),
        ("tagger", json!({"options": {"colour": "red"}, "reason": "r"}), "has no option \"colour\""),
        ("tagger", json!({"preset": "huge", "reason": "r"}), "has no preset \"huge\""),
        ("tagger", json!({"engine": "spacy", "reason": "r"}), "has no preset \"fast\""),
        ("judge", json!({"engine": "local", "reason": "r"}), "is not configurable here"),
    ] {
        let error = put(worker, body.clone()).await.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
        assert!(error["message"].as_str().is_some_and(|m| m.contains(expected)), "{body} → {error}");
    }
    put("tagger", json!({"presets": "big", "reason": "r"}))
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    put("tagger", json!({"preset": 5, "reason": "r"}))
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    put("nobody", json!({"preset": "big", "reason": "r"})).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    let delete = api.send(Method::DELETE, "/api/workers/tagger/override", Some(ADMIN), None).await;
    delete.expect(StatusCode::BAD_REQUEST, Some("reason_required"));

    let audit = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(audit["entries"], json!([]), "a refused change leaves no trace");
    let view = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert!(view["override"].is_null());
}

fn new_daemon(host: &str) -> NewDaemon {
    NewDaemon {
        id: Uuid::now_v7(),
        host: host.into(),
        pid: 4242,
        version: "9.9.9".into(),
        capacity: 2,
        workers: vec![],
        labels: vec![],
        limits: Default::default(),
        resources: Default::default(),
    }
}

async fn daemons_are_listed_with_their_state_and_can_be_drained(t: &TestDb) {
    // Daemons that never heartbeat here: one registered at the start stays alive for the API for 30 s, however
    // slow the machine is until the drain.
    let api = TestApi::new(t).await;
    let live = t.db.daemon.register_daemon(&new_daemon("host-a")).await.expect("register");
    let stopped = t.db.daemon.register_daemon(&new_daemon("host-b")).await.expect("register");
    t.db.daemon.mark_daemon_stopped(stopped.id).await.expect("stop");
    api.trigger("tagger", None).await;
    t.db.daemon.claim_runs(live.id, LONG_LEASE, 1, None).await.expect("claim");

    let body = api.get("/api/daemons", VIEWER).await.expect(StatusCode::OK, None);
    let daemons = body["daemons"].as_array().expect("daemons");
    let find = |id: Uuid| daemons.iter().find(|d| d["id"] == id.to_string()).cloned().expect("listed");
    let a = find(live.id);
    assert_eq!(
        (a["host"].clone(), a["pid"].clone(), a["version"].clone()),
        (json!("host-a"), json!(4242), json!("9.9.9"))
    );
    assert_eq!(a["state"], "active");
    assert_eq!(a["runs_in_flight"], 1);
    assert!(a["started_at"].is_string() && a["heartbeat_at"].is_string());
    assert!(a["heartbeat_age_seconds"].as_f64().is_some_and(|age| age < 30.0));
    assert_eq!(find(stopped.id)["state"], "gone");

    let drained = api.post(&format!("/api/daemons/{}/drain", live.id), ADMIN, None).await;
    let drained = drained.expect(StatusCode::ACCEPTED, None);
    assert_eq!(drained["state"], "draining");
    assert_eq!(drained["drain_requested_by"], "ada-admin");
    api.post(&format!("/api/daemons/{}/drain", stopped.id), ADMIN, None)
        .await
        .expect(StatusCode::CONFLICT, Some("daemon_gone"));
    let unknown = format!("/api/daemons/{}/drain", Uuid::now_v7());
    api.post(&unknown, ADMIN, None).await.expect(StatusCode::NOT_FOUND, Some("unknown_daemon"));
    api.post("/api/daemons/host-a/drain", ADMIN, None).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));

    // A daemon that stopped heartbeating is reported gone by the database clock, before anyone marks it: by an
    // API that waits 2 s, after more than 2 s of silence (a deliberate pause; a longer one changes nothing).
    let config = ApiConfig { heartbeat_and_gone_after: (1, 2), ..ApiConfig::default() };
    let api = TestApi::with(t, &config).await;
    let silent = t.db.daemon.register_daemon(&new_daemon("host-c")).await.expect("register");
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let body = api.get("/api/daemons", VIEWER).await.expect(StatusCode::OK, None);
    let state = body["daemons"].as_array().and_then(|d| d.iter().find(|d| d["id"] == silent.id.to_string()).cloned());
    assert_eq!(state.expect("listed")["state"], "gone");
    // A registry that waits a minute sees the row as stored: still active.
    let stored = t.db.api.get_daemon(silent.id, Duration::from_secs(60)).await.expect("read").expect("a row");
    assert_eq!(stored.state, DaemonState::Active, "the API only reports; it marks nothing");
    api.post(&format!("/api/daemons/{}/drain", silent.id), ADMIN, None)
        .await
        .expect(StatusCode::CONFLICT, Some("daemon_gone"));
}

async fn live_events_report_a_run_triggered_through_another_api_instance(t: &TestDb) {
    let watcher = TestApi::new(t).await;
    let listener = tokio::spawn(watcher.state.live_relay());
    let other_config = config_file(&t.url, t.dir.path(), &ApiConfig::default());
    let settings = other_config.load(&t.dir.path().join("other.toml")).expect("a configuration");
    let other_pool = t.another_pool().await;
    let other = app(AppState::new(settings, other_pool.api.clone()));

    let request =
        Request::get("/api/events").header(header::AUTHORIZATION, format!("Bearer {VIEWER}")).body(Body::empty());
    let response = watcher.router.clone().oneshot(request.expect("a request")).await.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut stream = EventStream::new(response.into_body().into_data_stream());
    let ready = stream.event(Duration::from_secs(5), "ready", |_| true).await;
    assert_eq!(ready["kinds"], json!(Change::PANEL_KINDS), "ready names the events that follow: {ready}");

    let trigger =
        Request::post("/api/workers/transfer/runs").header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"));
    let created = other.oneshot(trigger.body(Body::empty()).expect("a request")).await.expect("a response");
    assert_eq!(created.status(), StatusCode::CREATED);
    let run: Value =
        serde_json::from_slice(&created.into_body().collect().await.expect("a body").to_bytes()).expect("json");
    let id = run["id"].as_str().expect("an id");
    let event = stream.event(Duration::from_secs(5), "run", |e| e["run"] == id).await;
    assert_eq!(event, json!({"kind": "run", "run": id, "worker": "transfer", "state": "queued"}));

    watcher.state.shutdown_token().cancel();
    assert!(stream.ends_within(Duration::from_secs(5)).await, "the stream ends on shutdown");
    listener.await.expect("the listener stops");
    other_pool.close().await;
}

async fn liveness_readiness_openapi_and_unknown_routes(t: &TestDb) {
    let api = TestApi::new(t).await;
    let no_token = |method: Method, path: &'static str| api.send(method, path, None, None);
    assert_eq!(no_token(Method::GET, "/healthz").await.expect(StatusCode::OK, None), json!({"status": "alive"}));
    assert_eq!(no_token(Method::GET, "/readyz").await.expect(StatusCode::OK, None), json!({"status": "ready"}));

    let doc = no_token(Method::GET, "/api/openapi.json").await.expect(StatusCode::OK, None);
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "OpenAPI 3.1: {}", doc["openapi"]);
    for (path, method) in [
        ("/api/workers", "get"),
        ("/api/workers/{name}", "get"),
        ("/api/workers/{name}/runs", "post"),
        ("/api/runs", "get"),
        ("/api/runs/{id}", "get"),
        ("/api/runs/{id}/cancel", "post"),
        ("/api/runs/{id}/log", "get"),
        ("/api/workers/{name}/override", "put"),
        ("/api/workers/{name}/override", "delete"),
        ("/api/workers/{name}/audit", "get"),
        ("/api/daemons", "get"),
        ("/api/daemons/{id}/drain", "post"),
        ("/api/health", "get"),
        ("/api/events", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/api/openapi.json", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "the document describes {method} {path}");
    }
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    let events = doc["paths"]["/api/events"]["get"]["description"].as_str().unwrap_or_default();
    for kind in Change::PANEL_KINDS {
        assert!(events.contains(&format!("`{kind}`")), "the document names the event {kind}: {events}");
    }
    assert!(doc["components"]["schemas"]["Change"].is_object(), "the payloads' schema is in the document");
    assert!(doc["components"]["schemas"]["Run"].is_object() && doc["components"]["schemas"]["ErrorBody"].is_object());
    // Every route that takes a page size documents it the same way: a query parameter with its bounds.
    for (path, max, default) in [
        ("/api/runs", 500, 50),
        ("/api/pipelines/{name}/runs", 500, 50),
        ("/api/webhooks/deliveries", 500, 50),
        ("/api/workers/{name}/audit", 1000, 100),
        ("/api/resources/{name}/audit", 1000, 100),
        ("/api/schedules/{key}/fires", 1000, 100),
        ("/api/schedules/{key}/audit", 1000, 100),
    ] {
        let parameters = doc["paths"][path]["get"]["parameters"].as_array().cloned().unwrap_or_default();
        let limit = parameters.iter().find(|p| p["name"] == "limit").unwrap_or_else(|| panic!("{path}: no limit"));
        let schema = &limit["schema"];
        assert_eq!(
            (&limit["in"], &schema["type"], &schema["minimum"], &schema["maximum"], &schema["default"]),
            (&json!("query"), &json!("integer"), &json!(1), &json!(max), &json!(default)),
            "{path}: {limit}"
        );
    }

    api.get("/api/nothing", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("not_found"));
    no_token(Method::GET, "/nothing/here").await.expect(StatusCode::NOT_FOUND, Some("not_found"));
    let wrong = api.send(Method::DELETE, "/api/workers", Some(ADMIN), None).await;
    let body = wrong.expect(StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"));
    assert!(wrong.headers.contains_key(header::ALLOW), "{body}");
    api.send(Method::PATCH, "/api/runs", Some(ADMIN), None)
        .await
        .expect(StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"));

    // Readiness fails with a sentence when the database does not answer.
    let config = config_file(&t.url, t.dir.path(), &ApiConfig::default());
    let settings = config.load(&t.dir.path().join("down.toml")).expect("a configuration");
    let closed = t.another_pool().await;
    closed.close().await;
    let down = TestApi { state: AppState::new(settings, closed.api.clone()), ..api.clone() };
    let down = TestApi { router: app(down.state.clone()), ..down };
    down.send(Method::GET, "/readyz", None, None).await.expect(StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"));
    let workers = down.get("/api/workers", VIEWER).await;
    assert_eq!(workers.status, StatusCode::SERVICE_UNAVAILABLE, "{}", workers.text());
    down.send(Method::GET, "/healthz", None, None).await.expect(StatusCode::OK, None);
}
