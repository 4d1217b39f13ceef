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
//!   the tables are still there, no file appears where an injected command would create one;
//! - tags that are not short words, or more than ten, get a 400 naming the tag.
//!
//! Nothing answers 5xx, nothing panics, and the API and the daemon are alive at the end of every test.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{Engine, Role, runs::RunFilter};
use scrinalia_testkit::stack::Stack;
use scrinalia_tests::{
    Binaries, ConfigFile, Reply, TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER},
    backend_tests,
    daemon_harness::{probe, probe_events, with_defaults},
    demo_worker, eventually, free_port,
};
use serde_json::{Value, json};

mod bodies;
mod metacharacters;
mod paths;
mod tags;
mod tokens;

use bodies::oversized_bodies_get_413;
use metacharacters::metacharacters_are_stored_verbatim_or_refused_and_reach_a_worker_verbatim;
use paths::traversal_and_bad_ids_get_a_sentence;
use tags::tags_that_are_not_short_words_or_too_many_get_a_sentence;
use tokens::writes_refuse_missing_malformed_and_low_role_tokens;

backend_tests!(
    writes_refuse_missing_malformed_and_low_role_tokens,
    traversal_and_bad_ids_get_a_sentence,
    oversized_bodies_get_413,
    metacharacters_are_stored_verbatim_or_refused_and_reach_a_worker_verbatim,
    tags_that_are_not_short_words_or_too_many_get_a_sentence,
);

/// How long the registry waits for a silent daemon (the tests' `daemon.gone_after_seconds`).
const GONE_AFTER: Duration = Duration::from_secs(6);

/// `api.body_limit_bytes` of these tests.
const BODY_LIMIT: usize = 4096;

/// Starts the real API (and a daemon when `with_daemon`) on `t` with the configuration below.
async fn start(t: &TestDb, with_daemon: bool) -> Stack {
    let stack = Stack::start(&Binaries::of_this_test(), t.dir.path(), &config(t), with_daemon).await;
    stack.unwrap_or_else(|e| panic!("{e:#}"))
}

/// The configuration of one stack: a small body limit, one token per role, a model server on a closed port, and
/// three probe workers (`probe-1` with an engine and preset chosen here, `probe-2` and `probe-3` without).
fn config(t: &TestDb) -> ConfigFile {
    let bin = demo_worker();
    let quick = [("duration_ms", json!(0)), ("progress_steps", json!(1)), ("output_lines", json!(1))];
    let probe = |name: &str| with_defaults(probe(&bin, name, 60), &quick);
    let mut first = probe("probe-1");
    (first.engine, first.preset) = (Some("local".into()), Some("fast".into()));
    let engine = Engine {
        kind: "ollama".into(),
        url: Some(format!("http://127.0.0.1:{}", free_port())),
        presets: [("fast".into(), "llama3.2:1b".into()), ("big".into(), "qwen2.5:7b".into())].into(),
        description: None,
    };
    let probe_log = t.dir.path().join("probes.jsonl").display().to_string();
    t.config()
        .test_daemon(|d| {
            (d.lease_seconds, d.poll_seconds, d.gone_after_seconds, d.drain_seconds) = (5, 1, 10, 3);
            d.worker_env = [("SCRINALIA_PROBE_LOG".to_owned(), probe_log)].into();
        })
        .with(|f| {
            f.database.max_connections = 8;
            f.api.listen = ([127, 0, 0, 1], free_port()).into();
            (f.api.body_limit_bytes, f.api.request_timeout_seconds, f.api.events_poll_ms) = (BODY_LIMIT, 20, 100);
            f.engines.insert("local".into(), engine);
        })
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
        .token("ada-admin", Role::Admin, ADMIN)
        .workers([first, probe("probe-2"), probe("probe-3")])
}

/// What these tests do with the probes of a stack.
trait Probes {
    /// Triggers a run as the operator; returns it (asserting 201).
    async fn trigger(&self, worker: &str, body: Value) -> Value;
    /// Waits for a run to reach a terminal state; returns it.
    async fn finished(&self, id: &str) -> Value;
    /// The `args` of the probe's start line of a run.
    fn probe_args(&self, run: &str) -> Option<Vec<String>>;
}

impl Probes for Stack {
    async fn trigger(&self, worker: &str, body: Value) -> Value {
        let path = format!("/api/workers/{worker}/runs");
        self.json(Method::POST, &path, OPERATOR, body).await.expect_of(
            &format!("POST {path}"),
            StatusCode::CREATED,
            None,
        )
    }

    async fn finished(&self, id: &str) -> Value {
        let path = format!("/api/runs/{id}");
        eventually(Duration::from_secs(60), &format!("run {id} to finish"), || async {
            let run = self.get(&path, VIEWER).await.expect(StatusCode::OK, None);
            run["finished_at"].is_string().then_some(run)
        })
        .await
    }

    fn probe_args(&self, run: &str) -> Option<Vec<String>> {
        let log = self.config.parent().expect("the scratch folder").join("probes.jsonl");
        probe_events(&log)
            .into_iter()
            .find(|e| e.event == "start" && e.verb == "run" && e.run_id.as_deref() == Some(run))
            .map(|e| e.args)
    }
}

/// Asserts a 4xx with the API's JSON error and a sentence that leaks no file; `what` names the request.
fn refused(reply: &Reply, what: &str) -> Value {
    let body = reply.client_error_of(what);
    assert!(!body["message"].as_str().unwrap_or_default().contains("root:x:0:0"), "{what}: a file leaked: {body}");
    body
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
    t.db.api
        .list_runs(&RunFilter { limit: 500, ..RunFilter::default() })
        .await
        .expect("the ledger can be read")
        .runs
        .len()
}
