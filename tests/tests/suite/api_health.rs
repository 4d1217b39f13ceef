//! `GET /api/health` on PostgreSQL and SQLite: a stopped model server, a model missing from a stub that speaks
//! Ollama's real `GET /api/tags`, a run-log store that cannot be opened or written, and no live daemon, each
//! reported with a readable sentence; and all green when everything answers. Always 200.

use axum::{Json, Router, http::StatusCode, routing::get};
use scrinalia_shared::daemons::NewDaemon;
use scrinalia_tests::{
    TestDb,
    api_harness::{ApiConfig, TestApi, VIEWER},
    backend_tests,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    health_reports_a_stopped_model_server_an_unopenable_store_and_no_daemon,
    health_reports_a_model_missing_from_ollamas_tags,
    health_is_ok_when_everything_answers_and_reports_a_store_that_stops_being_writable,
);

/// A stub of Ollama's `GET /api/tags`, answering the real format with `models`; returns its base URL.
async fn ollama_stub(models: &[&str]) -> String {
    let models: Vec<Value> = models
        .iter()
        .map(|m| {
            json!({
                "name": m, "model": m, "modified_at": "2025-05-01T10:00:00.000000000Z", "size": 1_321_098_329u64,
                "digest": "baf6a787fdffd633537aa2eb51cfd54cb93ff08e28040095462bb63daf552878",
                "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                    "parameter_size": "1.2B", "quantization_level": "Q8_0"}
            })
        })
        .collect();
    let body = json!({ "models": models });
    let app = Router::new().route("/api/tags", get(move || async move { Json(body) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the stub");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn health(api: &TestApi) -> Value {
    let body = api.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
    for check in body["checks"].as_array().expect("checks") {
        assert!(check["latency_ms"].as_f64().is_some(), "{check}");
        match check["status"].as_str() {
            Some("ok") => assert!(check["error"].is_null(), "{check}"),
            Some("degraded" | "down") => {
                let error = check["error"].as_str().unwrap_or_else(|| panic!("a failed check says why: {check}"));
                assert!(
                    error.ends_with('.') && error.chars().next().is_some_and(char::is_uppercase),
                    "a sentence: {error}"
                );
            }
            other => panic!("unexpected status {other:?}"),
        }
    }
    body
}

fn check<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

fn error_of(body: &Value, name: &str) -> String {
    check(body, name)["error"].as_str().unwrap_or_default().to_owned()
}

async fn register_daemon(t: &TestDb) -> Uuid {
    let new = NewDaemon {
        id: Uuid::now_v7(),
        host: "h".into(),
        pid: 1,
        version: "v".into(),
        capacity: 1,
        workers: vec![],
        labels: vec![],
        limits: Default::default(),
        resources: Default::default(),
    };
    t.db.daemon.register_daemon(&new).await.expect("register").id
}

async fn health_reports_a_stopped_model_server_an_unopenable_store_and_no_daemon(t: &TestDb) {
    let file = t.dir.path().join("a-regular-file");
    std::fs::write(&file, "not a folder").expect("a file");
    let config = ApiConfig { object_store_path: Some(file.join("run-logs")), ..ApiConfig::default() };
    let api = TestApi::with(t, &config).await;
    let body = health(&api).await;
    assert_eq!(body["status"], "down");
    assert_eq!(check(&body, "database")["status"], "ok");

    assert_eq!(check(&body, "model_server:local")["status"], "down");
    let error = error_of(&body, "model_server:local");
    assert!(error.starts_with("The model server of engine local at http://127.0.0.1:"), "{error}");
    assert!(error.contains("cannot be reached") && error.to_lowercase().contains("refused"), "{error}");
    assert!(
        body["checks"].as_array().is_some_and(|c| c.iter().all(|c| c["name"] != "model_server:spacy")),
        "kind none is not checked"
    );

    assert_eq!(check(&body, "object_store")["status"], "down");
    let error = error_of(&body, "object_store");
    assert!(error.starts_with("The run-log store cannot be opened: ") && error.contains("Not a directory"), "{error}");

    assert_eq!(check(&body, "daemons")["status"], "down");
    assert_eq!(error_of(&body, "daemons"), "No daemon is alive: requested runs wait in the queue until one starts.");

    let run = api.trigger("transfer", None).await;
    let log = api.get(&format!("/api/runs/{}/log", run["id"].as_str().expect("id")), VIEWER).await;
    log.expect(StatusCode::SERVICE_UNAVAILABLE, Some("log_store_unavailable"));
}

async fn health_reports_a_model_missing_from_ollamas_tags(t: &TestDb) {
    let url = ollama_stub(&["llama3.2:1b", "nomic-embed-text:latest", "mistral:7b"]).await;
    let api = TestApi::with(t, &ApiConfig { ollama_url: url.clone(), ..ApiConfig::default() }).await;
    register_daemon(t).await;
    let body = health(&api).await;
    let server = check(&body, "model_server:local");
    assert_eq!(server["status"], "degraded");
    assert_eq!(
        error_of(&body, "model_server:local"),
        format!(
            "The model server of engine local at {url} does not have this model: qwen2.5:7b (preset big); pull it with `ollama pull`."
        )
    );
    assert_eq!(server["details"]["missing"], json!(["qwen2.5:7b"]));
    assert_eq!(body["status"], "degraded");
    assert_eq!(check(&body, "object_store")["status"], "ok");
    assert_eq!(check(&body, "daemons")["status"], "ok");
}

async fn health_is_ok_when_everything_answers_and_reports_a_store_that_stops_being_writable(t: &TestDb) {
    let url = ollama_stub(&["llama3.2:1b", "qwen2.5:7b", "nomic-embed-text"]).await;
    let api = TestApi::with(t, &ApiConfig { ollama_url: url, ..ApiConfig::default() }).await;
    let daemon = register_daemon(t).await;
    let body = health(&api).await;
    assert_eq!(body["status"], "ok", "{body}");
    let names: Vec<&str> =
        body["checks"].as_array().expect("checks").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "database",
            "object_store",
            "daemons",
            "model_server:local",
            "worker:tagger",
            "worker:judge",
            "worker:transfer"
        ],
        "one check per worker, ok before any check of theirs ran"
    );
    assert_eq!(check(&body, "daemons")["details"], json!({"alive": 1, "active": 1, "draining": 0}));
    let probes = t.dir.path().join("run-logs").join("health");
    assert!(probes.read_dir().map_or(true, |mut d| d.next().is_none()), "the probe key was deleted");

    t.db.api.request_drain(daemon, "test", std::time::Duration::from_secs(30)).await.expect("drain");
    let body = health(&api).await;
    assert_eq!(check(&body, "daemons")["status"], "degraded");
    assert_eq!(error_of(&body, "daemons"), "Every live daemon is draining: no new run will start.");

    let store = t.dir.path().join("run-logs");
    std::fs::remove_dir_all(&store).expect("remove the store");
    std::fs::write(&store, "now a file").expect("a file in its place");
    // The probe's outcome is reused for 5 s (state::CACHE_FOR), so the failure shows within that.
    let body =
        scrinalia_tests::eventually(std::time::Duration::from_secs(10), "the store's failure to show", || async {
            let body = health(&api).await;
            (check(&body, "object_store")["status"] == "down").then_some(body)
        })
        .await;
    let error = error_of(&body, "object_store");
    assert!(error.starts_with("The run-log store cannot be written: "), "{error}");
}
