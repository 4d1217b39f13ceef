//! OpenTelemetry with the real binaries: an OTLP/HTTP receiver inside the test (protobuf bodies, decoded with
//! `opentelemetry-proto`) gets the spans of the API and the daemon, and one trace runs from the API's trigger
//! request through the daemon's run span into the worker (the probe records the `TRACEPARENT` it was given).
//! Without the `OTEL_*` variables nothing is exported and no exporter thread exists.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, http::header, response::IntoResponse, routing::post};
use nix::sys::signal::Signal;
use opentelemetry_proto::tonic::{
    collector::{metrics::v1::ExportMetricsServiceRequest, trace::v1::ExportTraceServiceRequest},
    common::v1::{AnyValue, KeyValue, any_value},
    metrics::v1::metric,
};
use prost::Message as _;
use scrinalia_shared::RunState;
use scrinalia_tests::{
    Process, TestDb,
    daemon_harness::{Setup, wait_finished},
    eventually, free_port,
};
use serde_json::{Value, json};
use uuid::Uuid;

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct SpanSeen {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: Vec<(String, String)>,
}

impl SpanSeen {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// One exported data point of a sum or gauge, flattened.
#[derive(Debug, Clone)]
struct PointSeen {
    service: String,
    metric: String,
    attributes: Vec<(String, String)>,
    value: f64,
}

#[derive(Default)]
struct Received {
    spans: Vec<SpanSeen>,
    points: Vec<PointSeen>,
    bodies: usize,
}

/// A tiny OTLP/HTTP receiver: `POST /v1/traces` and `POST /v1/metrics` with protobuf bodies.
struct Receiver {
    url: String,
    received: Arc<Mutex<Received>>,
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn pairs(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

fn service(resource: Option<&opentelemetry_proto::tonic::resource::v1::Resource>) -> String {
    let attributes = resource.map(|r| pairs(&r.attributes)).unwrap_or_default();
    attributes.into_iter().find(|(k, _)| k == "service.name").map(|(_, v)| v).unwrap_or_default()
}

async fn traces(State(received): State<Arc<Mutex<Received>>>, body: Bytes) -> impl IntoResponse {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf trace export");
    let mut received = received.lock().expect("lock");
    received.bodies += 1;
    for resource in request.resource_spans {
        let service = service(resource.resource.as_ref());
        for scope in resource.scope_spans {
            for span in scope.spans {
                received.spans.push(SpanSeen {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: pairs(&span.attributes),
                });
            }
        }
    }
    ([(header::CONTENT_TYPE, "application/x-protobuf")], Vec::<u8>::new())
}

async fn metrics(State(received): State<Arc<Mutex<Received>>>, body: Bytes) -> impl IntoResponse {
    let request = ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf metrics export");
    let mut received = received.lock().expect("lock");
    received.bodies += 1;
    for resource in request.resource_metrics {
        let service = service(resource.resource.as_ref());
        for scope in resource.scope_metrics {
            for m in scope.metrics {
                let points: Vec<(Vec<(String, String)>, f64)> = match m.data {
                    Some(metric::Data::Sum(sum)) => {
                        sum.data_points.iter().map(|p| (pairs(&p.attributes), number(p))).collect()
                    }
                    Some(metric::Data::Gauge(g)) => {
                        g.data_points.iter().map(|p| (pairs(&p.attributes), number(p))).collect()
                    }
                    Some(metric::Data::Histogram(h)) => {
                        h.data_points.iter().map(|p| (pairs(&p.attributes), p.count as f64)).collect()
                    }
                    _ => Vec::new(),
                };
                for (attributes, value) in points {
                    received.points.push(PointSeen {
                        service: service.clone(),
                        metric: m.name.clone(),
                        attributes,
                        value,
                    });
                }
            }
        }
    }
    ([(header::CONTENT_TYPE, "application/x-protobuf")], Vec::<u8>::new())
}

fn number(point: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint) -> f64 {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    match point.value {
        Some(Value::AsDouble(d)) => d,
        Some(Value::AsInt(i)) => i as f64,
        None => f64::NAN,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Receiver {
    async fn start() -> Self {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
        let addr: SocketAddr = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url: format!("http://{addr}"), received }
    }

    fn spans(&self) -> Vec<SpanSeen> {
        self.received.lock().expect("lock").spans.clone()
    }

    fn points(&self) -> Vec<PointSeen> {
        self.received.lock().expect("lock").points.clone()
    }
}

/// Starts the API on the daemons' configuration (same database and catalogue), anonymous callers as operators.
fn start_api(setup: &Setup, port: u16, env: &[(&str, &str)]) -> Process {
    let listen = format!("127.0.0.1:{port}");
    let mut env = env.to_vec();
    env.extend([("SCRINALIA__API__LISTEN", listen.as_str()), ("SCRINALIA__AUTH__ANONYMOUS_ROLE", "operator")]);
    let config = setup.config.display().to_string();
    scrinalia_tests::start("scrinalia-api", "api", &setup.dir, &["--config", &config, "serve"], &env)
}

async fn wait_ready(api: &Process, base: &str) {
    let client = reqwest::Client::new();
    let ready = format!("{base}/readyz");
    eventually(Duration::from_secs(30), &format!("the API to be ready:\n{}", api.output()), || {
        let request = client.get(&ready).send();
        async move { request.await.ok().filter(|r| r.status() == reqwest::StatusCode::OK) }
    })
    .await;
}

/// Triggers `probe-1` through the API (with the caller's `traceparent` when given) and waits for it to succeed.
async fn trigger(base: &str, db: &TestDb, traceparent: Option<&str>, api: &Process, daemon: &Process) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/api/workers/probe-1/runs"))
        .json(&json!({"options": {"duration_ms": 300, "output_lines": 1}}));
    if let Some(tp) = traceparent {
        request = request.header("traceparent", tp);
    }
    let response = request.send().await.expect("trigger");
    assert_eq!(response.status(), reqwest::StatusCode::CREATED, "{}", api.output());
    let run: Value = response.json().await.expect("the run");
    let id: Uuid = run["id"].as_str().and_then(|s| s.parse().ok()).expect("a run id");
    let done = wait_finished(&db.db.api, id, Duration::from_secs(30)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    run
}

/// `00-<trace>-<span>-<flags>` → (trace, span).
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "not a traceparent: {traceparent}");
    (parts[1].to_owned(), parts[2].to_owned())
}

/// Threads of `pid` named like the OpenTelemetry SDK's exporter threads (`/proc/<pid>/task/*/comm`, 15 chars).
fn exporter_threads(pid: i32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .filter(|c| c.starts_with("OpenTelemetry"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_api_request_through_the_daemon_into_the_worker() {
    let db = TestDb::postgres().await;
    let receiver = Receiver::start().await;
    let setup = Setup::new(&db, |_| {});
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ];
    let mut daemon = setup.start_daemon("daemon", &otel);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut api = start_api(&setup, port, &otel);
    wait_ready(&api, &base).await;
    for process in [&api, &daemon] {
        // The daemon is not waited for before the API, so its exporters may still be starting on a busy machine.
        let pid = process.pid().as_raw();
        let seen = eventually(Duration::from_secs(10), "both exporter threads", || async {
            let threads = exporter_threads(pid);
            (threads.len() >= 2).then_some(threads)
        })
        .await;
        assert_eq!(seen.len(), 2, "{}: a span and a metrics exporter thread: {seen:?}", process.name);
    }

    // 1. No traceparent: the API's request span starts the trace, and the run stores its context.
    let first = trigger(&base, &db, None, &api, &daemon).await;
    // 2. The caller's traceparent: the API's span continues it.
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let second = trigger(&base, &db, Some(caller), &api, &daemon).await;

    // Spans are flushed on exit.
    for process in [&mut api, &mut daemon] {
        process.signal(Signal::SIGTERM);
        assert_eq!(process.wait(Duration::from_secs(20)).await, Some(0), "{}", process.output());
    }
    let spans = receiver.spans();

    for (run, caller) in [(&first, None), (&second, Some(caller))] {
        let run_id = run["id"].as_str().expect("id");
        let stored = run["trace_context"].as_str().expect("a stored trace context");
        let (trace, api_span_id) = ids(stored);
        let in_trace: Vec<&SpanSeen> = spans.iter().filter(|s| s.trace_id == trace).collect();
        let api_span = in_trace
            .iter()
            .find(|s| s.span_id == api_span_id)
            .unwrap_or_else(|| panic!("the stored context {stored} is the API's own span; trace:\n{in_trace:#?}"));
        assert_eq!(api_span.service, "scrinalia-api");
        assert_eq!(api_span.name, "POST /api/workers/{name}/runs");
        match caller {
            None => assert_eq!(api_span.parent_span_id, "", "a new trace starts at the API: {api_span:?}"),
            Some(tp) => {
                let (caller_trace, caller_span) = ids(tp);
                assert_eq!(trace, caller_trace, "the API continues the caller's trace");
                assert_eq!(api_span.parent_span_id, caller_span, "the API's span is the caller's child");
            }
        }

        let daemon_span = in_trace
            .iter()
            .find(|s| s.service == "scrinalia-daemon" && s.name == "run")
            .unwrap_or_else(|| panic!("the daemon's run span is in the trace:\n{in_trace:#?}"));
        assert_eq!(daemon_span.attribute("run_id"), Some(run_id), "{daemon_span:?}");
        assert_eq!(daemon_span.attribute("worker"), Some("probe-1"), "{daemon_span:?}");
        assert_eq!(daemon_span.parent_span_id, api_span.span_id, "the run span is a child of the API's span");

        let (start, _) = setup.probe_run(run_id.parse().expect("uuid"));
        let given = start.expect("the probe's start line").traceparent.expect("a TRACEPARENT");
        let (worker_trace, worker_parent) = ids(&given);
        assert_eq!(worker_trace, trace, "the worker joins the same trace");
        assert_eq!(worker_parent, daemon_span.span_id, "the worker's parent is the daemon's run span");
    }

    // Metrics went out over OTLP too: the daemon's run counter and the API's database gauges.
    let points = receiver.points();
    let finished = points.iter().any(|p| {
        p.service == "scrinalia-daemon"
            && p.metric == "scrinalia_runs_finished"
            && p.attributes.contains(&("worker".into(), "probe-1".into()))
            && p.attributes.contains(&("outcome".into(), "succeeded".into()))
            && p.value >= 2.0
    });
    assert!(finished, "scrinalia_runs_finished from the daemon: {points:#?}");
    let alive = points.iter().any(|p| p.service == "scrinalia-api" && p.metric == "scrinalia_daemons_alive");
    assert!(alive, "scrinalia_daemons_alive from the API: {points:#?}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_otel_variables_nothing_is_exported_and_no_exporter_thread_runs() {
    let db = TestDb::sqlite().await;
    let setup = Setup::new(&db, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let api = start_api(&setup, port, &[]);
    wait_ready(&api, &base).await;
    let run = trigger(&base, &db, None, &api, &daemon).await;
    for process in [&api, &daemon] {
        let threads = exporter_threads(process.pid().as_raw());
        assert!(threads.is_empty(), "{} runs exporter threads: {threads:?}", process.name);
    }
    // The logs are read once the processes have stopped: an exporter would also speak as it shuts down.
    for process in [api, daemon] {
        let (name, log) = (process.name.clone(), process.log.clone());
        process.stop(Duration::from_secs(20)).await;
        let log = std::fs::read_to_string(log).expect("the log");
        assert!(!log.contains("OpenTelemetry"), "{name}:\n{log}");
    }
    // The worker still joins the caller's (here: the API's generated) trace context.
    let stored = run["trace_context"].as_str().expect("a stored trace context").to_owned();
    let (start, _) = setup.probe_run(run["id"].as_str().and_then(|s| s.parse().ok()).expect("uuid"));
    assert_eq!(start.expect("a start line").traceparent.as_deref(), Some(stored.as_str()));
    db.cleanup().await;
}
