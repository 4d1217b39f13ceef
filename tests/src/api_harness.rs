//! Helpers for the API tests: a configuration with a small catalogue and one token per role, and the API router
//! driven in-process (`app(state).oneshot(request)`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use axum::{
    Router,
    body::Body,
    extract::ConnectInfo,
    http::{Method, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use scrinalia_api::{AppState, app};
use scrinalia_shared::{Engine, OptionType, Role};
use scrinalia_testkit::config::{option, worker};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{ConfigFile, Reply, TestDb, free_port};

/// The viewer's token.
pub const VIEWER: &str = "scr_test_viewer_token";
/// The operator's token.
pub const OPERATOR: &str = "scr_test_operator_token";
/// The admin's token.
pub const ADMIN: &str = "scr_test_admin_token";

/// What varies between the tests' configurations.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `api.listen`.
    pub listen: SocketAddr,
    /// The url of the `local` Ollama engine (a closed port unless a test serves a stub).
    pub ollama_url: String,
    /// `object_store.path`; `<dir>/run-logs` when `None`.
    pub object_store_path: Option<PathBuf>,
    /// `auth.anonymous_role` and `auth.anonymous_loopback_only`.
    pub anonymous: Option<(Role, bool)>,
    /// `api.cors_origins`.
    pub cors_origins: Vec<String>,
    /// `api.body_limit_bytes`.
    pub body_limit_bytes: usize,
    /// `daemon.heartbeat_seconds` and `daemon.gone_after_seconds`.
    pub heartbeat_and_gone_after: (u64, u64),
    /// `database.max_connections`.
    pub max_connections: u32,
    /// Workers the catalogue declares `preemptible`.
    pub preemptible: Vec<&'static str>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ollama_url: format!("http://127.0.0.1:{}", free_port()),
            object_store_path: None,
            anonymous: None,
            cors_origins: Vec::new(),
            body_limit_bytes: 4096,
            heartbeat_and_gone_after: (5, 30),
            max_connections: 10,
            preemptible: Vec::new(),
        }
    }
}

/// The configuration of `db`'s tests: the catalogue below and one token per role.
///
/// Workers, in order: `tagger` (engine `local`, preset `fast`, four options), `judge` (engine configured
/// elsewhere), `transfer` (no engine, no options).
pub fn config_file(db_url: &str, dir: &Path, config: &ApiConfig) -> ConfigFile {
    let mut file = ConfigFile::new(db_url, dir)
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
        .token("ada-admin", Role::Admin, ADMIN)
        .with(|f| {
            f.database.max_connections = config.max_connections;
            f.api.listen = config.listen;
            f.api.cors_origins = config.cors_origins.clone();
            f.api.body_limit_bytes = config.body_limit_bytes;
            f.api.request_timeout_seconds = 10;
            f.api.events_poll_ms = 100;
            (f.daemon.heartbeat_seconds, f.daemon.gone_after_seconds) = config.heartbeat_and_gone_after;
            if let Some(path) = &config.object_store_path {
                f.object_store.path = path.clone();
            }
            f.telemetry.log_filter = "info,scrinalia_api=debug".to_owned();
            if let Some((role, loopback_only)) = config.anonymous {
                f.auth.anonymous_role = Some(role);
                f.auth.anonymous_loopback_only = loopback_only;
            }
        });
    let presets = |p: &[(&str, &str)]| p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let local = Engine {
        kind: "ollama".into(),
        url: Some(config.ollama_url.clone()),
        presets: presets(&[("fast", "llama3.2:1b"), ("big", "qwen2.5:7b"), ("embed", "nomic-embed-text")]),
        description: None,
    };
    let spacy =
        Engine { kind: "none".into(), url: None, presets: presets(&[("small", "en_core_web_sm")]), description: None };
    file.file.engines = [("local".to_owned(), local), ("spacy".to_owned(), spacy)].into();

    let mut tagger = worker("tagger", &["true"]);
    tagger.title = Some("Tagging".into());
    tagger.axis = "enrichment".into();
    tagger.governance = "curator review".into();
    tagger.stamp = "tags_v1".into();
    tagger.description = Some("Tags documents.".into());
    (tagger.engine, tagger.preset) = (Some("local".into()), Some("fast".into()));
    let mut mode = option("mode", OptionType::String, Some(json!("quick")));
    mode.choices = Some(vec![json!("quick"), json!("full")]);
    tagger.options = vec![
        option("batch_size", OptionType::Integer, Some(json!(10))),
        mode,
        option("verify", OptionType::Boolean, None),
        option("threshold", OptionType::Number, Some(json!(0.5))),
    ];
    let mut judge = worker("judge", &["true"]);
    judge.title = Some("Conflict judge".into());
    judge.axis = "quality".into();
    judge.governance = "automatic".into();
    judge.stamp = "judged_v1".into();
    (judge.engine, judge.preset) = (Some("local".into()), Some("big".into()));
    judge.engine_source = Some("The judge uses the model configured in the archive's own settings.".into());
    judge.engine_source_url = Some("https://archive.invalid/settings".into());
    let mut transfer = worker("transfer", &["true"]);
    transfer.title = Some("Staging to archive transfer".into());
    transfer.axis = "ingest".into();
    transfer.governance = "automatic".into();
    transfer.stamp = "archived_v1".into();
    let mut workers = [tagger, judge, transfer];
    for worker in &mut workers {
        worker.preemptible = config.preemptible.contains(&worker.name.as_str());
    }
    file.workers(workers)
}

/// The API router over a test database, driven in-process.
#[derive(Clone)]
pub struct TestApi {
    /// The state (for the live-event listener and direct database access).
    pub state: AppState,
    /// The router.
    pub router: Router,
    /// The peer address every request appears to come from.
    pub peer: SocketAddr,
}

impl TestApi {
    /// The API over `db` with the default test configuration.
    pub async fn new(db: &TestDb) -> Self {
        Self::with(db, &ApiConfig::default()).await
    }

    /// The API over `db` with `config`.
    pub async fn with(db: &TestDb, config: &ApiConfig) -> Self {
        let path = db.dir.path().join("config.toml");
        let settings = config_file(&db.url, db.dir.path(), config).load(&path).expect("a valid configuration");
        let state = AppState::new(settings, db.db.api.clone());
        Self { router: app(state.clone()), state, peer: SocketAddr::from(([127, 0, 0, 1], 40000)) }
    }

    /// Sends a request as it is; returns the answer with its body still to be read (a stream, say).
    pub async fn open(&self, mut request: Request<Body>) -> axum::response::Response {
        request.extensions_mut().insert(ConnectInfo(self.peer));
        self.router.clone().oneshot(request).await.expect("the router never fails")
    }

    /// Sends a request as it is; reads the whole answer.
    pub async fn call(&self, request: Request<Body>) -> Reply {
        let response = self.open(request).await;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("read the body").to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }

    /// A request with an optional token and JSON body.
    pub async fn send(&self, method: Method, path: &str, token: Option<&str>, body: Option<Value>) -> Reply {
        let mut builder = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = match body {
            Some(v) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        self.call(builder.body(body).expect("a valid request")).await
    }

    /// `GET path` with `token`.
    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.send(Method::GET, path, Some(token), None).await
    }

    /// `POST path` with `token` and `body`.
    pub async fn post(&self, path: &str, token: &str, body: Option<Value>) -> Reply {
        self.send(Method::POST, path, Some(token), body).await
    }

    /// Triggers a run of `worker` as the operator and returns it (asserting 201).
    pub async fn trigger(&self, worker: &str, body: Option<Value>) -> Value {
        self.post(&format!("/api/workers/{worker}/runs"), OPERATOR, body).await.expect(StatusCode::CREATED, None)
    }
}

/// One operation of the API's OpenAPI document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Its method.
    pub method: Method,
    /// Its path as the document says it (`/api/runs/{id}`).
    pub template: String,
    /// Whether the document says it needs a bearer token (`security`).
    pub secured: bool,
}

impl Operation {
    /// Whether it writes (a browser's cross-site form could send it).
    pub fn writes(&self) -> bool {
        matches!(self.method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
    }

    /// `METHOD /template`, for messages and tables.
    pub fn key(&self) -> String {
        format!("{} {}", self.method, self.template)
    }

    /// Its path with each `{parameter}` replaced by `values`' entry for it (a `{parameter}` it lacks stays, and
    /// the test that forgot it fails saying so).
    pub fn path(&self, values: &[(&str, &str)]) -> String {
        values.iter().fold(self.template.clone(), |path, (name, value)| path.replace(&format!("{{{name}}}"), value))
    }
}

/// Every operation of the OpenAPI document the API at `base` serves (`/api/openapi.json`), in the document's
/// order: the tests that must cover every route read the routes from here, so a new one cannot escape them.
pub async fn openapi_operations(base: &str) -> Vec<Operation> {
    let document: Value = reqwest::get(format!("{base}/api/openapi.json"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("the API serves its OpenAPI document")
        .json()
        .await
        .expect("the document is JSON");
    let paths = document["paths"].as_object().expect("the document has paths");
    let mut operations = Vec::new();
    for (template, item) in paths {
        for (name, operation) in item.as_object().into_iter().flatten() {
            let Ok(method) = name.to_ascii_uppercase().parse::<Method>() else { continue };
            if !matches!(method, Method::GET | Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
                continue;
            }
            let secured = operation["security"].as_array().is_some_and(|s| !s.is_empty());
            operations.push(Operation { method, template: template.clone(), secured });
        }
    }
    operations
}
