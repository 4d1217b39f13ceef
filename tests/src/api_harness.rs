//! Helpers for the API tests: a configuration with a small catalogue and one token per role, the API router
//! driven in-process (`app(state).oneshot(request)`), and a free port for the real binary.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::ConnectInfo,
    http::{HeaderMap, Method, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use scrinalia_api::{AppState, app};
use scrinalia_shared::auth::hash_token;
use serde_json::Value;
use tower::ServiceExt;

use crate::{TestDb, settings_from};

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
    pub anonymous: Option<(&'static str, bool)>,
    /// `api.cors_origins`.
    pub cors_origins: Vec<String>,
    /// `api.body_limit_bytes`.
    pub body_limit_bytes: usize,
    /// `daemon.heartbeat_seconds` and `daemon.gone_after_seconds`.
    pub heartbeat_and_gone_after: (u64, u64),
    /// `database.max_connections`.
    pub max_connections: u32,
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
        }
    }
}

/// The configuration file's text: the database of `db`, the catalogue below and one token per role.
///
/// Workers, in order: `tagger` (engine `local`, preset `fast`, four options), `judge` (engine configured
/// elsewhere), `transfer` (no engine, no options).
pub fn config_toml(db_url: &str, dir: &Path, config: &ApiConfig) -> String {
    let store = config.object_store_path.clone().unwrap_or_else(|| dir.join("run-logs"));
    let anonymous = match config.anonymous {
        Some((role, loopback_only)) => {
            format!("anonymous_role = {role:?}\nanonymous_loopback_only = {loopback_only}\n")
        }
        None => String::new(),
    };
    let cors: Vec<String> = config.cors_origins.iter().map(|o| format!("{o:?}")).collect();
    format!(
        r#"
[database]
url = {db_url:?}
max_connections = {max_connections}

[api]
listen = "{listen}"
cors_origins = [{cors}]
body_limit_bytes = {body_limit}
request_timeout_seconds = 10
events_poll_ms = 100

[daemon]
heartbeat_seconds = {heartbeat}
gone_after_seconds = {gone_after}

[object_store]
kind = "local"
path = {store:?}

[telemetry]
log_filter = "info,scrinalia_api=debug"

[auth]
{anonymous}
tokens = [
  {{ name = "vera-viewer", role = "viewer", hash = "{viewer}" }},
  {{ name = "otto-operator", role = "operator", hash = "{operator}" }},
  {{ name = "ada-admin", role = "admin", hash = "{admin}" }},
]

[engines.local]
kind = "ollama"
url = {ollama:?}
presets = {{ fast = "llama3.2:1b", big = "qwen2.5:7b", embed = "nomic-embed-text" }}

[engines.spacy]
kind = "none"
presets = {{ small = "en_core_web_sm" }}

[[workers]]
name = "tagger"
title = "Tagging"
axis = "enrichment"
governance = "curator review"
stamp = "tags_v1"
description = "Tags documents."
command = ["true"]
engine = "local"
preset = "fast"
options = [
  {{ name = "batch_size", type = "integer", default = 10 }},
  {{ name = "mode", type = "string", choices = ["quick", "full"], default = "quick" }},
  {{ name = "verify", type = "boolean" }},
  {{ name = "threshold", type = "number", default = 0.5 }},
]

[[workers]]
name = "judge"
title = "Conflict judge"
axis = "quality"
governance = "automatic"
stamp = "judged_v1"
command = ["true"]
engine = "local"
preset = "big"
engine_source = "The judge uses the model configured in the archive's own settings."
engine_source_url = "https://archive.invalid/settings"

[[workers]]
name = "transfer"
title = "Staging to archive transfer"
axis = "ingest"
governance = "automatic"
stamp = "archived_v1"
command = ["true"]
"#,
        max_connections = config.max_connections,
        listen = config.listen,
        cors = cors.join(", "),
        body_limit = config.body_limit_bytes,
        heartbeat = config.heartbeat_and_gone_after.0,
        gone_after = config.heartbeat_and_gone_after.1,
        viewer = hash_token(VIEWER),
        operator = hash_token(OPERATOR),
        admin = hash_token(ADMIN),
        ollama = config.ollama_url,
    )
}

/// A port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
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

/// An answer.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{} answered a body that is not JSON ({e}): {}", self.status, self.text()))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts the status, and that an error has the API's JSON shape and `code`; returns the body.
    pub fn expect(&self, status: StatusCode, code: Option<&str>) -> Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text());
        let body = self.json();
        if let Some(code) = code {
            assert_eq!(body["code"], code, "unexpected error code: {body}");
            let message = body["message"].as_str().unwrap_or_else(|| panic!("no message: {body}"));
            assert!(message.ends_with('.') && message.len() > 10, "the message is not a sentence: {message:?}");
        }
        body
    }
}

impl TestApi {
    /// The API over `db` with the default test configuration.
    pub async fn new(db: &TestDb) -> Self {
        Self::with(db, &ApiConfig::default()).await
    }

    /// The API over `db` with `config`.
    pub async fn with(db: &TestDb, config: &ApiConfig) -> Self {
        let settings = settings_from(db.dir.path(), &config_toml(&db.url, db.dir.path(), config));
        let state = AppState::new(settings, db.db.clone());
        Self { router: app(state.clone()), state, peer: SocketAddr::from(([127, 0, 0, 1], 40000)) }
    }

    /// Sends a request as it is.
    pub async fn call(&self, mut request: Request<Body>) -> Reply {
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let response = self.router.clone().oneshot(request).await.expect("the router never fails");
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
