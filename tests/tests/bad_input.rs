//! Bad input against the real binaries over HTTP, on a fresh PostgreSQL database and a fresh SQLite file, with
//! a real daemon running the probe workers (`scrinalia-demo-worker`), so that option values reach a worker's
//! arguments:
//!
//! - every write (trigger, cancel, set and clear an override, drain) refuses a missing, malformed or unknown
//!   token (401) and a role too low (403), and refused requests change nothing;
//! - path traversal, NUL, unicode and very long names and ids, and ids that are not UUIDs, get a 4xx JSON error
//!   with a sentence;
//! - bodies over `api.body_limit_bytes` get 413, with or without a `Content-Length`;
//! - SQL and shell metacharacters, newlines, argument look-alikes and NUL in every string field (worker name,
//!   engine, preset, option names and values, override reason, every query parameter) are either stored
//!   verbatim (2xx) or refused with a sentence (4xx); a string option value reaches the probe's argv verbatim;
//!   the tables are still there, no file appears where an injected command would create one.
//!
//! Nothing answers 5xx, nothing panics, and the API and the daemon are alive at the end of every test.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use reqwest::{
    Method, StatusCode,
    header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, WWW_AUTHENTICATE},
};
use scrinalia_shared::{
    auth::hash_token,
    db::{RunFilter, RunState},
};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER, free_port},
    backend_tests, bin_path,
    daemon_harness::alive,
    eventually,
    process::Process,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

backend_tests!(
    writes_refuse_missing_malformed_and_low_role_tokens,
    traversal_and_bad_ids_get_a_sentence,
    oversized_bodies_get_413,
    metacharacters_are_stored_verbatim_or_refused_and_reach_a_worker_verbatim,
);

/// `api.body_limit_bytes` of these tests.
const BODY_LIMIT: usize = 4096;

/// The real API and (optionally) a real daemon over one test database.
struct Stack {
    api: Process,
    daemon: Option<Process>,
    port: u16,
    base: String,
    client: reqwest::Client,
    probe_log: PathBuf,
}

/// An answer.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("{} answered a body that is not JSON ({e}): {}", self.status, self.text))
    }

    /// Asserts a 2xx with `status`; returns the JSON body.
    fn ok(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        self.json()
    }

    /// Asserts an error with `status` and `code` whose message is a sentence; returns the body.
    fn error(&self, status: StatusCode, code: &str) -> Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        let body = self.client_error();
        assert_eq!(body["code"], code, "unexpected code: {body}");
        body
    }

    /// Asserts any 4xx with the API's JSON error body and a sentence; returns the body.
    fn client_error(&self) -> Value {
        assert!(self.status.is_client_error(), "expected a 4xx, got {}: {}", self.status, self.text);
        let body = self.json();
        assert!(body["code"].as_str().is_some_and(|c| !c.is_empty()), "no code: {body}");
        let message = body["message"].as_str().unwrap_or_else(|| panic!("no message: {body}"));
        assert!(message.ends_with('.') && message.len() > 10, "the message is not a sentence: {message:?}");
        assert!(!message.contains("root:x:0:0"), "a file leaked: {message}");
        body
    }
}

/// How a request authenticates.
#[derive(Clone)]
enum Auth {
    None,
    Bearer(&'static str),
    Raw(HeaderValue),
}

impl Stack {
    /// Starts the API (and a daemon when `with_daemon`) on `t`, and waits until both are ready.
    async fn start(t: &TestDb, with_daemon: bool) -> Self {
        let dir = t.dir.path();
        let port = free_port();
        let probe_log = dir.join("probes.jsonl");
        let config = dir.join("bad-input.toml");
        std::fs::write(&config, config_toml(t, port, &probe_log)).expect("write the configuration");
        let config = config.display().to_string();
        let api = Process::start("scrinalia-api", "api", dir, &["--config", &config, "serve"], &[]);
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("a client");
        let ready = format!("{base}/readyz");
        eventually(Duration::from_secs(30), &format!("the API to be ready:\n{}", api.output()), || {
            let request = client.get(&ready).send();
            async move { request.await.ok().filter(|r| r.status() == StatusCode::OK) }
        })
        .await;
        let daemon =
            with_daemon.then(|| Process::start("scrinalia-daemon", "daemon", dir, &["--config", &config], &[]));
        let stack = Self { api, daemon, port, base, client, probe_log };
        if stack.daemon.is_some() {
            stack.daemon_id().await;
        }
        stack
    }

    /// Sends a request; asserts it is not a 5xx.
    async fn send(&self, method: Method, path: &str, auth: Auth, body: Option<Vec<u8>>) -> Reply {
        let mut request = self.client.request(method.clone(), format!("{}{path}", self.base));
        match auth {
            Auth::None => {}
            Auth::Bearer(token) => request = request.bearer_auth(token),
            Auth::Raw(value) => request = request.header(AUTHORIZATION, value),
        }
        if let Some(body) = body {
            request = request.header(CONTENT_TYPE, "application/json").body(body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let (status, headers) = (response.status(), response.headers().clone());
        let text = response.text().await.unwrap_or_else(|e| panic!("{method} {path}: read the body: {e}"));
        assert!(!status.is_server_error(), "{method} {path} → {status}: {text}");
        Reply { status, headers, text }
    }

    async fn get(&self, path: &str, token: &'static str) -> Reply {
        self.send(Method::GET, path, Auth::Bearer(token), None).await
    }

    async fn json(&self, method: Method, path: &str, token: &'static str, body: Value) -> Reply {
        self.send(method, path, Auth::Bearer(token), Some(body.to_string().into_bytes())).await
    }

    /// Sends `request` as raw bytes (a path or a header that an HTTP client would normalise or refuse, or a
    /// body the server stops reading); returns the status and the body. Asserts it is not a 5xx. The answer is
    /// read while the request is still being written, since the server may answer (413) before reading it all.
    async fn raw(&self, request: Vec<u8>) -> (u16, String) {
        let exchange = async {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.expect("connect");
            let (mut reader, mut writer) = stream.into_split();
            let writing = tokio::spawn(async move {
                // The server may close before reading all of a large request.
                let _ = writer.write_all(&request).await;
                writer
            });
            let mut answer = Vec::new();
            let _ = reader.read_to_end(&mut answer).await;
            writing.abort();
            answer
        };
        let answer = tokio::time::timeout(Duration::from_secs(20), exchange).await.expect("an answer in time");
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no HTTP status line in {answer:?}"));
        assert!(status < 500, "a raw request answered {status}: {answer}");
        let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
        (status, body)
    }

    /// A raw request with an admin token, `Connection: close` and a JSON body.
    async fn raw_request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body.as_bytes());
        self.raw(request).await
    }

    /// The id of the (first) active daemon, waiting for it to register.
    async fn daemon_id(&self) -> String {
        let what =
            format!("the daemon to register:\n{}", self.daemon.as_ref().map(Process::output).unwrap_or_default());
        eventually(Duration::from_secs(30), &what, || async {
            let daemons = self.get("/api/daemons", VIEWER).await.ok(StatusCode::OK);
            daemons["daemons"]
                .as_array()
                .and_then(|d| d.iter().find(|d| d["state"] == "active"))
                .and_then(|d| d["id"].as_str().map(str::to_owned))
        })
        .await
    }

    /// Triggers a run as the operator; returns it (asserting 201).
    async fn trigger(&self, worker: &str, body: Value) -> Value {
        self.json(Method::POST, &format!("/api/workers/{worker}/runs"), OPERATOR, body).await.ok(StatusCode::CREATED)
    }

    /// Waits for a run to reach a terminal state; returns it.
    async fn finished(&self, id: &str) -> Value {
        let path = format!("/api/runs/{id}");
        eventually(Duration::from_secs(60), &format!("run {id} to finish"), || async {
            let run = self.get(&path, VIEWER).await.ok(StatusCode::OK);
            run["finished_at"].is_string().then_some(run)
        })
        .await
    }

    /// The `args` of the probe's start line of a run.
    fn probe_args(&self, run: &str) -> Option<Vec<String>> {
        let ledger = std::fs::read_to_string(&self.probe_log).unwrap_or_default();
        ledger.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|line| {
            (line["event"] == "start" && line["verb"] == "run" && line["run_id"] == run)
                .then(|| serde_json::from_value(line["args"].clone()).expect("args are strings"))
        })
    }

    /// Asserts that the API and the daemon are alive and answering, and that neither panicked nor logged an
    /// internal error.
    async fn assert_healthy(&mut self) {
        assert!(self.api.child.try_wait().expect("the API's status").is_none(), "the API died:\n{}", self.api.output());
        self.get("/readyz", VIEWER).await.ok(StatusCode::OK);
        let api = self.api.output();
        assert!(!api.contains("panicked"), "the API panicked:\n{api}");
        assert!(!api.contains("request failed"), "the API answered an internal error:\n{api}");
        if let Some(daemon) = &mut self.daemon {
            assert!(daemon.child.try_wait().expect("the daemon's status").is_none(), "the daemon died");
            assert!(alive(daemon.pid().as_raw()), "the daemon is not running:\n{}", daemon.output());
            assert!(!daemon.output().contains("panicked"), "the daemon panicked:\n{}", daemon.output());
        }
    }
}

/// The configuration of one stack: a small body limit, one token per role, a model server on a closed port, and
/// three probe workers (`probe-1` with an engine and preset chosen here, `probe-2` and `probe-3` without).
fn config_toml(t: &TestDb, port: u16, probe_log: &Path) -> String {
    let bin = bin_path("scrinalia-demo-worker");
    let options = r#"options = [
  { name = "duration_ms", type = "integer", default = 0 },
  { name = "exit_code", type = "integer" },
  { name = "crash", type = "boolean" },
  { name = "ignore_sigterm", type = "boolean" },
  { name = "progress_steps", type = "integer", default = 1 },
  { name = "output_lines", type = "integer", default = 1 },
  { name = "note", type = "string" },
]"#;
    let probe = |name: &str, engine: &str| {
        format!(
            "[[workers]]\nname = \"{name}\"\ncommand = [{:?}, \"{name}\"]\ntimeout_seconds = 60\n{engine}{options}\n\n",
            bin.display().to_string()
        )
    };
    format!(
        r#"[database]
url = {url:?}
max_connections = 8

[api]
listen = "{listen}"
body_limit_bytes = {BODY_LIMIT}
request_timeout_seconds = 20
events_poll_ms = 100

[daemon]
capacity = 3
lease_seconds = 5
poll_seconds = 1
heartbeat_seconds = 1
gone_after_seconds = 10
cancel_grace_seconds = 1
drain_seconds = 3
queue_count_interval_seconds = 3600

[daemon.worker_env]
SCRINALIA_PROBE_LOG = {probe_log:?}

[object_store]
kind = "local"
path = {store:?}

[telemetry]
log_filter = "info"

[auth]
tokens = [
  {{ name = "vera-viewer", role = "viewer", hash = "{viewer}" }},
  {{ name = "otto-operator", role = "operator", hash = "{operator}" }},
  {{ name = "ada-admin", role = "admin", hash = "{admin}" }},
]

[engines.local]
kind = "ollama"
url = "http://127.0.0.1:{closed}"
presets = {{ fast = "llama3.2:1b", big = "qwen2.5:7b" }}

{probe_1}{probe_2}{probe_3}"#,
        url = t.url,
        listen = SocketAddr::from(([127, 0, 0, 1], port)),
        probe_log = probe_log.display().to_string(),
        store = t.dir.path().join("run-logs").display().to_string(),
        viewer = hash_token(VIEWER),
        operator = hash_token(OPERATOR),
        admin = hash_token(ADMIN),
        closed = free_port(),
        probe_1 = probe("probe-1", "engine = \"local\"\npreset = \"fast\"\n"),
        probe_2 = probe("probe-2", ""),
        probe_3 = probe("probe-3", ""),
    )
}

/// Percent-encodes every byte except the unreserved ones (RFC 3986), for a path segment or a query value.
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// How many runs the ledger holds, read through the database layer (which also proves the table exists).
async fn run_count(t: &TestDb) -> usize {
    t.db.list_runs(&RunFilter { limit: 500, ..RunFilter::default() }).await.expect("the ledger can be read").runs.len()
}

async fn writes_refuse_missing_malformed_and_low_role_tokens(t: &TestDb) {
    let mut stack = Stack::start(t, true).await;
    let daemon = stack.daemon_id().await;
    // A run that keeps running, so that a cancellation that got through would show.
    let running = stack.trigger("probe-2", json!({"options": {"duration_ms": 60_000, "note": "keep me"}})).await;
    let run = running["id"].as_str().expect("an id").to_owned();
    eventually(Duration::from_secs(30), "the long run to start", || async {
        let r = stack.get(&format!("/api/runs/{run}"), VIEWER).await.ok(StatusCode::OK);
        (r["state"] == "running").then_some(())
    })
    .await;

    let override_body = json!({"options": {"note": "refused"}, "reason": "a refused change"}).to_string();
    let trigger_body = json!({"options": {"note": "refused"}}).to_string();
    let writes: Vec<(Method, String, Option<String>, &str)> = vec![
        (Method::POST, "/api/workers/probe-1/runs".into(), Some(trigger_body), "operator"),
        (Method::POST, format!("/api/runs/{run}/cancel"), None, "operator"),
        (Method::PUT, "/api/workers/probe-1/override".into(), Some(override_body), "admin"),
        (Method::DELETE, "/api/workers/probe-1/override?reason=refused".into(), None, "admin"),
        (Method::POST, format!("/api/daemons/{daemon}/drain"), None, "admin"),
    ];
    let long = format!("Bearer {}", "a".repeat(64 * 1024));
    let malformed: Vec<(&str, Auth)> = vec![
        ("no header", Auth::None),
        ("Bearer", Auth::Raw(HeaderValue::from_static("Bearer"))),
        ("Bearer and a space", Auth::Raw(HeaderValue::from_static("Bearer "))),
        ("Basic x", Auth::Raw(HeaderValue::from_static("Basic x"))),
        ("Basic with the admin token", Auth::Raw(HeaderValue::from_str(&format!("Basic {ADMIN}")).expect("a value"))),
        ("a tab instead of a space", Auth::Raw(HeaderValue::from_str(&format!("Bearer\t{ADMIN}")).expect("a value"))),
        ("garbage bytes", Auth::Raw(HeaderValue::from_bytes(b"\xff\xfe\x80 Bearer \xc3").expect("a value"))),
        ("a non-ASCII token", Auth::Raw(HeaderValue::from_bytes(b"Bearer \xc3\xa9t\xc3\xa9").expect("a value"))),
        ("a 64 KiB token", Auth::Raw(HeaderValue::from_str(&long).expect("a value"))),
        ("an unknown token", Auth::Bearer("scr_not_a_known_token")),
        (
            "the admin token and one more byte",
            Auth::Raw(HeaderValue::from_str(&format!("Bearer {ADMIN}x")).expect("v")),
        ),
        (
            "the admin token's hash",
            Auth::Raw(HeaderValue::from_str(&format!("Bearer {}", hash_token(ADMIN))).expect("v")),
        ),
        ("SQL in the token", Auth::Raw(HeaderValue::from_static("Bearer ' or 1=1 --"))),
    ];
    for (method, path, body, needed) in &writes {
        let body = || body.clone().map(String::into_bytes);
        for (what, auth) in &malformed {
            let reply = stack.send(method.clone(), path, auth.clone(), body()).await;
            reply.error(StatusCode::UNAUTHORIZED, "unauthorized");
            assert_eq!(reply.headers[WWW_AUTHENTICATE], "Bearer", "{method} {path} with {what}");
        }
        let mut too_low = vec![("viewer", VIEWER)];
        if *needed == "admin" {
            too_low.push(("operator", OPERATOR));
        }
        for (role, token) in too_low {
            let reply = stack.send(method.clone(), path, Auth::Bearer(token), body()).await;
            let error = reply.error(StatusCode::FORBIDDEN, "forbidden");
            assert_eq!(error["required_role"], *needed, "{method} {path} as {role}");
            let message = error["message"].as_str().expect("a message");
            assert!(message.starts_with(&format!("This needs the {needed} role;")), "{message}");
        }
        // Header bytes an HTTP client refuses to send: the server refuses them before the API sees them.
        for header in [&b"Bearer \x00"[..], b"Bearer a\x01b", b"Bearer \x1b[31m"] {
            let mut request =
                format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ").into_bytes();
            request.extend_from_slice(header);
            request.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
            let (status, _) = stack.raw(request).await;
            assert!((400..500).contains(&status), "{method} {path} with control bytes → {status}");
        }
        // A header far over the server's limit.
        let huge = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\r\n",
            "a".repeat(1 << 20)
        );
        let (status, _) = stack.raw(huge.into_bytes()).await;
        assert!((400..500).contains(&status), "{method} {path} with a 1 MiB header → {status}");
    }

    // Nothing changed: one run, still running; no override, no audit entry; the daemon is not draining.
    assert_eq!(run_count(t).await, 1, "no refused trigger created a run");
    let still = stack.get(&format!("/api/runs/{run}"), VIEWER).await.ok(StatusCode::OK);
    assert_eq!((still["state"].as_str(), still["cancel_requested_at"].is_null()), (Some("running"), true));
    assert!(t.db.get_override("probe-1").await.expect("read the override").is_none());
    assert!(t.db.audit_trail("probe-1", 10).await.expect("read the audit trail").is_empty());
    let daemons = stack.get("/api/daemons", VIEWER).await.ok(StatusCode::OK);
    assert!(daemons["daemons"][0]["drain_requested_at"].is_null(), "no refused drain got through: {daemons}");
    stack.assert_healthy().await;

    // The same requests with the right role go through (the daemon drains last).
    stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"note": "n"}, "reason": "r"}))
        .await
        .ok(StatusCode::OK);
    stack
        .send(Method::DELETE, "/api/workers/probe-1/override?reason=r", Auth::Bearer(ADMIN), None)
        .await
        .ok(StatusCode::OK);
    stack
        .send(Method::POST, &format!("/api/runs/{run}/cancel"), Auth::Bearer(OPERATOR), None)
        .await
        .ok(StatusCode::ACCEPTED);
    stack.finished(&run).await;
    stack
        .send(Method::POST, &format!("/api/daemons/{daemon}/drain"), Auth::Bearer(ADMIN), None)
        .await
        .ok(StatusCode::ACCEPTED);
    let daemon = stack.daemon.as_mut().expect("a daemon");
    assert_eq!(daemon.wait(Duration::from_secs(30)).await, Some(0), "a drained daemon exits 0:\n{}", daemon.output());
    stack.daemon = None;
    stack.assert_healthy().await;
}

async fn traversal_and_bad_ids_get_a_sentence(t: &TestDb) {
    let mut stack = Stack::start(t, false).await;
    // Path segments exactly as sent on the wire.
    let long = "a".repeat(10_000);
    let names = [
        "..%2F..%2Fetc%2Fpasswd",
        "..%2F..",
        "..",
        "%2E%2E",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "..%5C..%5Cwindows",
        "%00",
        "probe-1%00",
        "probe-1%00..%2F..",
        "probe-1%2F..%2Fprobe-2",
        "probe-1%20",
        "PROBE-1",
        "%C3%A9t%C3%A9",
        "%F0%9F%92%A9",
        "%E2%80%AEprobe-1",
        "%FF%FE",
        "%C0%AE%C0%AE",
        "%25252e%25252e",
        "%24(id)",
        "%3B%20id",
        long.as_str(),
    ];
    let override_body = r#"{"options": {"note": "x"}, "reason": "traversal"}"#;
    for name in names {
        for (method, path, body) in [
            ("GET", format!("/api/workers/{name}"), ""),
            ("POST", format!("/api/workers/{name}/runs"), ""),
            ("PUT", format!("/api/workers/{name}/override"), override_body),
            ("DELETE", format!("/api/workers/{name}/override?reason=r"), ""),
            ("GET", format!("/api/workers/{name}/audit"), ""),
        ] {
            let (status, text) = stack.raw_request(method, &path, body).await;
            let reply =
                Reply { status: StatusCode::from_u16(status).expect("a status"), headers: HeaderMap::new(), text };
            let error = reply.client_error();
            if status == 404 {
                assert!(
                    ["unknown_worker", "not_found"].contains(&error["code"].as_str().unwrap_or_default()),
                    "{error}"
                );
            } else {
                assert_eq!(status, 400, "{method} {path}: {error}");
            }
        }
    }
    let unknown =
        stack.get("/api/workers/..%2F..%2Fetc%2Fpasswd", VIEWER).await.error(StatusCode::NOT_FOUND, "unknown_worker");
    assert_eq!(unknown["message"], "There is no worker \"../../etc/passwd\"; GET /api/workers lists the workers.");

    let ids = [
        "123",
        "..%2F..%2Fetc%2Fpasswd",
        "..",
        "%2E%2E",
        "%00",
        "01a22988-3816-77bf-b581-6534d03cbe47%00",
        "01a22988-3816-77bf-b581-6534d03cbe4",
        "01a22988-3816-77bf-b581-6534d03cbe47a",
        "00000000-0000-0000-0000-00000000000g",
        "%C3%A9",
        "%FF",
        "%27%20or%201%3D1%20--",
        "%24(id)",
        "null",
        "-1",
        long.as_str(),
    ];
    for id in ids {
        for (method, path) in [
            ("GET", format!("/api/runs/{id}")),
            ("GET", format!("/api/runs/{id}/log")),
            ("POST", format!("/api/runs/{id}/cancel")),
            ("POST", format!("/api/daemons/{id}/drain")),
        ] {
            let (status, text) = stack.raw_request(method, &path, "").await;
            let reply =
                Reply { status: StatusCode::from_u16(status).expect("a status"), headers: HeaderMap::new(), text };
            let error = reply.client_error();
            assert_eq!(status, 400, "{method} {path}: {error}");
            assert!(["invalid_id", "bad_request"].contains(&error["code"].as_str().unwrap_or_default()), "{error}");
        }
    }
    // Long input is quoted cut, not repeated in full.
    for path in [format!("/api/workers/{long}"), format!("/api/runs/{long}")] {
        let error = stack.get(&path, VIEWER).await.client_error();
        assert!(error["message"].as_str().is_some_and(|m| m.len() < 200), "{error}");
    }
    let error =
        stack.get("/api/runs/..%2F..%2Fetc%2Fpasswd", VIEWER).await.error(StatusCode::BAD_REQUEST, "invalid_id");
    assert_eq!(error["message"], "\"../../etc/passwd\" is not a valid run id; ids are UUIDs.");
    // Well-formed but unknown ids are 404s.
    let unknown = Uuid::now_v7();
    stack.get(&format!("/api/runs/{unknown}"), VIEWER).await.error(StatusCode::NOT_FOUND, "unknown_run");
    stack.get(&format!("/api/runs/{unknown}/log"), VIEWER).await.error(StatusCode::NOT_FOUND, "unknown_run");
    stack
        .send(Method::POST, &format!("/api/runs/{unknown}/cancel"), Auth::Bearer(OPERATOR), None)
        .await
        .error(StatusCode::NOT_FOUND, "unknown_run");
    stack
        .send(Method::POST, &format!("/api/daemons/{unknown}/drain"), Auth::Bearer(ADMIN), None)
        .await
        .error(StatusCode::NOT_FOUND, "unknown_daemon");
    // Traversal outside the API's routes.
    for path in [
        "/api/../../etc/passwd",
        "/api/%2E%2E/%2E%2E/etc/passwd",
        "/..%2F..%2Fetc%2Fpasswd",
        "/api/runs/../../../etc/passwd",
    ] {
        let (status, text) = stack.raw_request("GET", path, "").await;
        assert!((400..500).contains(&status) && !text.contains("root:x:0:0"), "GET {path} → {status}: {text}");
    }

    assert_eq!(run_count(t).await, 0, "no request created a run");
    assert!(t.db.list_overrides().await.expect("read the overrides").is_empty(), "no request set an override");
    let store = t.dir.path().join("run-logs");
    let empty = !store.exists() || store.read_dir().is_ok_and(|mut d| d.next().is_none());
    assert!(empty, "nothing was written to the run-log store");
    stack.assert_healthy().await;
}

async fn oversized_bodies_get_413(t: &TestDb) {
    let mut stack = Stack::start(t, false).await;
    let over = |n: usize| json!({"options": {"note": "x".repeat(n)}, "reason": "big"}).to_string();
    let writes =
        ["POST /api/workers/probe-1/runs", "PUT /api/workers/probe-1/override", "DELETE /api/workers/probe-1/override"];
    // Just over the limit, through an HTTP client.
    for write in writes {
        let (method, path) = write.split_once(' ').expect("method and path");
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let reply = stack.send(method, path, Auth::Bearer(ADMIN), Some(over(BODY_LIMIT).into_bytes())).await;
        let error = reply.error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
        assert_eq!(error["message"], format!("The request body is larger than the limit of {BODY_LIMIT} bytes."));
    }
    // Far over it: the server answers before reading it all, so the answer is read while the body is sent.
    for size in [64 * 1024, 4 * 1024 * 1024] {
        for write in writes {
            let (method, path) = write.split_once(' ').expect("method and path");
            let (status, body) = stack.raw_request(method, path, &over(size)).await;
            assert_eq!(status, 413, "{write} with {size} bytes: {body}");
            let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
            assert_eq!(error["code"], "body_too_large");
        }
    }
    // Without a Content-Length (chunked), the limit holds while the body streams in; the body is all spaces, so
    // only the limit can refuse it.
    for write in writes {
        let (method, path) = write.split_once(' ').expect("method and path");
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .into_bytes();
        for _ in 0..64 {
            request.extend_from_slice(format!("400\r\n{}\r\n", " ".repeat(1024)).as_bytes());
        }
        request.extend_from_slice(b"0\r\n\r\n");
        let (status, body) = stack.raw(request).await;
        assert_eq!(status, 413, "{write}, chunked: {body}");
    }
    // Endpoints that read no body ignore one (and never fail because of it).
    let unknown = Uuid::now_v7();
    let big = " ".repeat(64 * 1024);
    let (status, _) = stack.raw_request("POST", &format!("/api/runs/{unknown}/cancel"), &big).await;
    assert_eq!(status, 404);
    let (status, _) = stack.raw_request("POST", &format!("/api/daemons/{unknown}/drain"), &big).await;
    assert_eq!(status, 404);
    // Just under the limit is read (and judged on its content).
    let under = json!({"options": {"note": "x".repeat(BODY_LIMIT - 40)}}).to_string();
    assert!(under.len() <= BODY_LIMIT);
    let reply =
        stack.send(Method::POST, "/api/workers/probe-1/runs", Auth::Bearer(OPERATOR), Some(under.into_bytes())).await;
    reply.ok(StatusCode::CREATED);

    assert_eq!(run_count(t).await, 1, "only the body under the limit created a run");
    assert!(t.db.get_override("probe-1").await.expect("read the override").is_none());
    stack.assert_healthy().await;
}

/// Hostile text for every string field. `canary` is a file that only an interpreting shell would create, and
/// `keep` a folder that only an interpreting shell would remove.
fn hostile(canary: &Path, keep: &Path) -> Vec<String> {
    let (canary, keep) = (canary.display(), keep.display());
    vec![
        "'; drop table worker_runs; --".into(),
        "\" or 1=1 --".into(),
        "\\".into(),
        "\\'; select pg_sleep(5); --".into(),
        "x'); delete from worker_overrides; --".into(),
        format!("$(touch {canary})"),
        format!("`touch {canary}`"),
        "`id`".into(),
        format!("; touch {canary}"),
        format!("&& touch {canary} &"),
        format!("; rm -rf {keep}"),
        "| cat /etc/passwd".into(),
        "line one\nline two\r\nline three".into(),
        "--crash".into(),
        "--exit_code=3".into(),
        "-e".into(),
        "%s%n%x%p".into(),
        "{{7*7}} ${7*7} #{7*7}".into(),
        "é ñ 漢字 💩 \u{202e}rtl".into(),
        "\u{7f}\u{1b}[31mred\u{1b}[0m\u{8}".into(),
        " \t leading and trailing whitespace \t ".into(),
        "../../etc/passwd".into(),
        "x".repeat(1500),
    ]
}

async fn metacharacters_are_stored_verbatim_or_refused_and_reach_a_worker_verbatim(t: &TestDb) {
    let mut stack = Stack::start(t, true).await;
    let canary = std::env::temp_dir().join(format!("scrinalia-pwned-{}", Uuid::new_v4()));
    let keep = t.dir.path().join("keep-me");
    std::fs::create_dir(&keep).expect("create the folder that must survive");
    let values = hostile(&canary, &keep);

    // Worker names in the path: unknown workers, quoted.
    for value in &values {
        let name = pct(value);
        for (method, path) in [
            (Method::GET, format!("/api/workers/{name}")),
            (Method::POST, format!("/api/workers/{name}/runs")),
            (Method::PUT, format!("/api/workers/{name}/override")),
            (Method::DELETE, format!("/api/workers/{name}/override?reason=r")),
            (Method::GET, format!("/api/workers/{name}/audit")),
        ] {
            let body = (method == Method::PUT).then(|| br#"{"options": {"note": "x"}, "reason": "r"}"#.to_vec());
            let reply = stack.send(method.clone(), &path, Auth::Bearer(ADMIN), body).await;
            reply.error(StatusCode::NOT_FOUND, "unknown_worker");
        }
    }

    // Engine, preset and option names: refused with a sentence, in a run request and in an override.
    for value in &values {
        for body in [
            json!({"engine": value}),
            json!({"preset": value}),
            json!({"engine": "local", "preset": value}),
            json!({"options": {value.as_str(): "x"}}),
            json!({"options": {"duration_ms": value}}),
            json!({"options": {"crash": value}}),
        ] {
            let reply = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, body.clone()).await;
            reply.error(StatusCode::BAD_REQUEST, "invalid_arguments");
            let mut change = body;
            change["reason"] = json!("metacharacters");
            let reply = stack.json(Method::PUT, "/api/workers/probe-1/override", ADMIN, change).await;
            reply.error(StatusCode::BAD_REQUEST, "invalid_override");
        }
    }

    // Query parameters: refused with a sentence.
    let run_filters = ["worker", "state", "from", "to", "after", "limit"];
    for value in &values {
        for key in run_filters {
            let reply = stack.get(&format!("/api/runs?{key}={}", pct(value)), VIEWER).await;
            let error = reply.error(StatusCode::BAD_REQUEST, "invalid_query");
            assert!(error["message"].as_str().is_some_and(|m| m.contains(&format!("`{key}`"))), "{error}");
        }
        let reply = stack.get(&format!("/api/workers/probe-1/audit?limit={}", pct(value)), VIEWER).await;
        reply.error(StatusCode::BAD_REQUEST, "invalid_query");
    }

    // String option values: stored verbatim, and passed verbatim to the worker as one argument. Three lanes, one
    // per probe (one run in flight per worker).
    let checks = ["probe-1", "probe-2", "probe-3"].into_iter().enumerate().map(|(lane, worker)| {
        let stack = &stack;
        let mine: Vec<&String> = values.iter().skip(lane).step_by(3).collect();
        async move {
            for value in mine {
                let run = stack.trigger(worker, json!({"options": {"note": value}})).await;
                assert_eq!(run["arguments"]["options"]["note"], json!(value), "the request is stored verbatim");
                assert_eq!(run["config"]["options"]["note"]["value"], json!(value));
                let id = run["id"].as_str().expect("an id").to_owned();
                let done = stack.finished(&id).await;
                assert_eq!(done["state"], "succeeded", "{worker} with note {value:?}: {done}");
                assert_eq!(done["arguments"]["options"]["note"], json!(value), "read back verbatim");
                let args = stack.probe_args(&id).unwrap_or_else(|| panic!("no probe start line for run {id}"));
                let at = args.iter().position(|a| a == "--note").unwrap_or_else(|| panic!("no --note in {args:?}"));
                assert_eq!(
                    args.get(at + 1),
                    Some(value),
                    "the worker got the value verbatim as one argument: {args:?}"
                );
            }
        }
    });
    futures::future::join_all(checks).await;

    // The override reason and option values (set, then cleared through `?reason=`): stored verbatim (the reason
    // trimmed, as documented), and an overridden value reaches the worker verbatim too.
    for (i, value) in values.iter().enumerate() {
        let change = json!({"options": {"note": value}, "reason": value});
        let view = stack.json(Method::PUT, "/api/workers/probe-3/override", ADMIN, change).await.ok(StatusCode::OK);
        assert_eq!(view["override"]["values"]["options"]["note"], json!(value));
        assert_eq!(view["effective"]["options"]["note"]["value"], json!(value));
        let audit = stack.get("/api/workers/probe-3/audit?limit=1", VIEWER).await.ok(StatusCode::OK);
        assert_eq!(audit["entries"][0]["reason"], json!(value.trim()), "the reason is stored verbatim");
        if i % 4 == 0 {
            let run = stack.trigger("probe-3", json!({})).await;
            let id = run["id"].as_str().expect("an id").to_owned();
            assert_eq!(run["config"]["options"]["note"], json!({"value": value, "source": "override"}));
            assert_eq!(stack.finished(&id).await["state"], "succeeded");
            let args = stack.probe_args(&id).expect("a probe start line");
            let at = args.iter().position(|a| a == "--note").expect("--note");
            assert_eq!(args.get(at + 1), Some(value), "{args:?}");
        }
        let cleared = stack
            .send(
                Method::DELETE,
                &format!("/api/workers/probe-3/override?reason={}", pct(value)),
                Auth::Bearer(ADMIN),
                None,
            )
            .await
            .ok(StatusCode::OK);
        assert!(cleared["override"].is_null());
        let audit = stack.get("/api/workers/probe-3/audit?limit=1", VIEWER).await.ok(StatusCode::OK);
        assert_eq!(audit["entries"][0]["reason"], json!(value.trim()));
    }

    // NUL (which JSON allows as \u0000): a worker's arguments cannot hold it and PostgreSQL cannot store it, so
    // it is refused with a sentence on both backends (it used to be a 500 on PostgreSQL).
    let nul = "before\u{0}after";
    let error =
        stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"options": {"note": nul}})).await;
    let error = error.error(StatusCode::BAD_REQUEST, "invalid_arguments");
    assert!(error["message"].as_str().is_some_and(|m| m.contains("NUL")), "{error}");
    let reply = stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"note": nul}, "reason": "r"}))
        .await;
    reply.error(StatusCode::BAD_REQUEST, "invalid_override");
    let reply = stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"note": "ok"}, "reason": nul}))
        .await;
    reply.error(StatusCode::BAD_REQUEST, "reason_invalid");
    let reply =
        stack.send(Method::DELETE, "/api/workers/probe-1/override?reason=a%00b", Auth::Bearer(ADMIN), None).await;
    reply.error(StatusCode::BAD_REQUEST, "reason_invalid");
    let reply = stack.json(Method::DELETE, "/api/workers/probe-1/override", ADMIN, json!({"reason": nul})).await;
    reply.error(StatusCode::BAD_REQUEST, "reason_invalid");
    for body in [json!({"engine": nul}), json!({"preset": nul}), json!({"options": {nul: 1}})] {
        stack
            .json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, body)
            .await
            .error(StatusCode::BAD_REQUEST, "invalid_arguments");
    }
    for key in run_filters {
        stack.get(&format!("/api/runs?{key}=a%00b"), VIEWER).await.error(StatusCode::BAD_REQUEST, "invalid_query");
    }
    // A long value of the wrong type made of multi-byte characters is quoted, cut by characters (it used to panic).
    let wide = "é".repeat(60);
    let reply = stack
        .json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"options": {"duration_ms": wide}}))
        .await;
    let error = reply.error(StatusCode::BAD_REQUEST, "invalid_arguments");
    assert!(error["message"].as_str().is_some_and(|m| m.contains("must be a whole number, not string")), "{error}");
    let reply = stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"crash": wide}, "reason": "r"}))
        .await;
    reply.error(StatusCode::BAD_REQUEST, "invalid_override");
    // A hostile trace context is not kept.
    let response = stack
        .client
        .post(format!("{}/api/workers/probe-2/runs", stack.base))
        .bearer_auth(OPERATOR)
        .header("traceparent", "00-'; drop table worker_runs; --")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::CREATED);
    let run: Value = response.json().await.expect("a run");
    let trace = run["trace_context"].as_str().expect("a trace context");
    assert!(trace.starts_with("00-") && !trace.contains(';'), "a fresh trace context: {trace}");
    stack.finished(run["id"].as_str().expect("an id")).await;

    // The tables are all there and hold what was written; no injected command ran.
    let runs = t.db.list_runs(&RunFilter { limit: 500, ..RunFilter::default() }).await.expect("the ledger").runs;
    assert!(runs.len() > values.len(), "{} runs", runs.len());
    assert!(runs.iter().all(|r| r.state == RunState::Succeeded), "every run succeeded");
    assert!(t.db.list_overrides().await.expect("the overrides").is_empty());
    assert_eq!(t.db.audit_trail("probe-3", 1000).await.expect("the audit trail").len(), 2 * values.len());
    assert!(!t.db.list_daemons().await.expect("the daemons").is_empty());
    assert!(!canary.exists(), "{} exists: a value was run by a shell", canary.display());
    assert!(keep.is_dir(), "{} was removed: a value was run by a shell", keep.display());
    stack.assert_healthy().await;
}
