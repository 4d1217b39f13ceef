//! The CLI and the API share one set of JSON types (`scrinalia-wire`). Against the real `scrinalia-api` and
//! `scrinalia-daemon` on a fresh database of each backend, every answer the CLI parses is fetched as the CLI asks
//! for it and read into the wire type the CLI reads it into, then written back: the JSON must come out exactly as
//! the API sent it. A field the API renamed, added, dropped or retyped would not survive that round trip, so this
//! fails where the CLI would silently lose a field. Each shape is checked with its optional parts present (a
//! description, readiness, a queue count, a checkpoint, a rerun's diff, why a run waits, an error's details).
//!
//! The endpoints covered, and the type each is read into:
//! - `GET /api/workers` → `WorkersView` (also what `scrinalia overrides` lists); `GET /api/workers/{name}` →
//!   `WorkerView`
//! - `POST /api/workers/{name}/describe`, `/count`, `/check` → `ChoreRequested`
//! - `POST /api/workers/{name}/runs` → `Run`; `GET /api/runs` (with and without `limit`) → `RunPage`;
//!   `GET /api/runs/{id}` → `RunDetail`; `POST /api/runs/{id}/cancel` → `CancelView`;
//!   `POST /api/runs/{id}/resume`, `/restart`, `/rerun` → `Run`
//! - `PUT` and `DELETE /api/workers/{name}/override` → `OverrideView`; `GET /api/workers/{name}/audit` →
//!   `AuditView`
//! - `GET /api/resources` → `ResourcesView`; `PUT /api/resources/{name}` → `ResourceView`;
//!   `GET /api/resources/{name}/audit` → `ResourceAudit`
//! - `POST /api/schedules/preview` → `SchedulePreview`; `POST /api/schedules`, `GET`/`PUT /api/schedules/{key}`,
//!   `POST /api/schedules/{key}/pause`, `/resume` → `ScheduleView`; `GET /api/schedules` → `[ScheduleView]`;
//!   `GET /api/schedules/{key}/fires` → `[ScheduleFire]`; `GET /api/schedules/{key}/audit` →
//!   `[ScheduleAuditEntry]`; `DELETE /api/schedules/{key}` → `Schedule`
//! - `GET /api/pipelines` → `[PipelineView]`; `POST /api/pipelines/{name}/runs`, `GET /api/pipeline-runs/{id}`,
//!   `POST /api/pipeline-runs/{id}/cancel` → `PipelineRunView`; `GET /api/pipelines/{name}/runs` →
//!   `[PipelineRun]`
//! - `POST /api/tokens` → `CreatedToken`; `GET /api/tokens` → `ServiceTokens`; `DELETE /api/tokens/{id}` →
//!   `ServiceToken`
//! - `GET /api/daemons` → `DaemonsView`; `POST /api/daemons/{id}/drain` → `Daemon`; `GET /api/health` →
//!   `HealthView`
//! - any error (here a 409 `run_in_flight` with its extra fields, and a 404) → `ErrorBody`
//!
//! The CLI also streams `GET /api/runs/{id}/log` (text) and `GET /api/runs/export` (JSON lines it copies as they
//! come, never parses); neither is read into a type, so neither is here.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{ResourceSpec, catalogue::PipelineSpec};
use scrinalia_tests::{
    Kind, Reply,
    daemon_harness::{probe, with_defaults},
    demo_worker, eventually,
    system::{ADMIN, OPERATOR, System, VIEWER},
};
use scrinalia_wire::{
    AuditView, CancelView, ChoreRequested, CreateTokenBody, CreatedToken, Daemon, DaemonState, DaemonsView, Engine,
    ErrorBody, ExplicitArgs, HealthView, OverrideChange, OverrideView, PipelineRun, PipelineRunView, PipelineView,
    PreviewInput, ReasonBody, ResourceAudit, ResourceChange, ResourceView, ResourcesView, Run, RunDetail, RunPage,
    Schedule, ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView, ServiceToken,
    ServiceTokens, WaitCode, WorkerView, WorkersView,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use uuid::Uuid;

/// How long a probe run or a daemon's chore may take to show.
const PATIENCE: Duration = Duration::from_secs(30);

/// The system: three probes (probe-3 holds the resource `model-server`), the pipeline `chain` of probe-1 then
/// probe-2, and an engine nobody checks over the network, so that every list the CLI reads has an entry.
async fn start(kind: Kind) -> System {
    let bin = demo_worker();
    let defaults = [("output_lines", json!(2)), ("exit_code", json!(0))];
    let [one, two, mut three] =
        ["probe-1", "probe-2", "probe-3"].map(|n| with_defaults(probe(&bin, n, 120), &defaults));
    three.resources = vec!["model-server".into()];
    System::start(kind, |config| {
        config
            .with(|f| {
                f.pipelines = vec![PipelineSpec {
                    name: "chain".into(),
                    description: Some("probe-1, then probe-2".into()),
                    steps: vec!["probe-1".into(), "probe-2".into()],
                    tags: Vec::new(),
                }];
                f.resources = vec![ResourceSpec {
                    name: "model-server".into(),
                    capacity: 1,
                    description: Some("One model server.".into()),
                    scope: Default::default(),
                    starts_per_minute: None,
                    preempt_after_seconds: None,
                    preempt_grace_seconds: None,
                }];
                let engine = Engine {
                    kind: "none".into(),
                    url: None,
                    presets: [("small".to_owned(), "tiny-model".to_owned())].into(),
                    description: Some("Loaded inside the worker.".into()),
                };
                f.engines = [("local".to_owned(), engine)].into();
            })
            .workers([one, two, three])
    })
    .await
}

/// Reads `json` as a `T` and writes it back: the `T`, or why that did not give the very JSON the API sent.
fn read_whole<T: DeserializeOwned + Serialize>(json: &Value) -> Result<T, String> {
    let parsed: T = serde_json::from_value(json.clone())
        .map_err(|e| format!("the API's JSON does not parse as the CLI's type: {e}\n{json:#}"))?;
    let again = serde_json::to_value(&parsed).map_err(|e| format!("cannot write it back: {e}"))?;
    if &again != json {
        let lines = differences(json, &again, "").join("\n");
        return Err(format!("the CLI's type does not read the API's JSON whole:\n{lines}"));
    }
    Ok(parsed)
}

/// [`read_whole`], or a panic naming `what` was read.
fn round_trip<T: DeserializeOwned + Serialize>(what: &str, json: &Value) -> T {
    read_whole(json).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Where `sent` and `read` (the same JSON after the round trip) differ, one line per path.
fn differences(sent: &Value, read: &Value, path: &str) -> Vec<String> {
    match (sent, read) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter()
                .flat_map(|k| match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => differences(x, y, &format!("{path}/{k}")),
                    (Some(x), None) => vec![format!("{path}/{k}: sent {x}, lost by the CLI's type")],
                    (None, Some(y)) => vec![format!("{path}/{k}: not sent, but the CLI's type writes {y}")],
                    (None, None) => Vec::new(),
                })
                .collect()
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).enumerate().flat_map(|(i, (x, y))| differences(x, y, &format!("{path}[{i}]"))).collect()
        }
        (a, b) if a == b => Vec::new(),
        (a, b) => vec![format!("{path}: sent {a}, read back as {b}")],
    }
}

/// Sends a request as `token` and asserts `status`; returns the JSON answer.
async fn call(
    system: &System,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
    status: StatusCode,
) -> Value {
    let reply: Reply =
        system.http(method.clone(), path, token, body).await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    assert_eq!(reply.status, status, "{method} {path}: {}", reply.text());
    reply.json()
}

/// `GET path` as the viewer, read as a `T` with the round trip.
async fn get<T: DeserializeOwned + Serialize>(system: &System, path: &str) -> T {
    round_trip(&format!("GET {path}"), &call(system, Method::GET, path, VIEWER, None, StatusCode::OK).await)
}

/// `method path` with `body` as `token`, answered `status`, read as a `T` with the round trip.
async fn send<T: DeserializeOwned + Serialize>(
    system: &System,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
    status: StatusCode,
) -> T {
    let what = format!("{method} {path}");
    round_trip(&what, &call(system, method, path, token, body, status).await)
}

/// The JSON of a request body the CLI sends.
fn body(value: impl Serialize) -> Option<Value> {
    Some(serde_json::to_value(value).expect("a request body"))
}

/// Waits for run `id` to end; returns its detail, read with the round trip.
async fn ended(system: &System, id: Uuid) -> RunDetail {
    let path = format!("/api/runs/{id}");
    let json = eventually(PATIENCE, &format!("run {id} to end"), || async {
        let json = call(system, Method::GET, &path, VIEWER, None, StatusCode::OK).await;
        json["state"].as_str().and_then(|s| s.parse::<scrinalia_wire::RunState>().ok()).filter(|s| s.is_terminal())?;
        Some(json)
    })
    .await;
    round_trip(&format!("GET {path}"), &json)
}

async fn every_answer_the_cli_reads_is_its_wire_type_whole(kind: Kind) {
    let system = start(kind).await;

    // Workers, once the daemon has described and checked probe-1 (so those parts are there to be read).
    let json = eventually(PATIENCE, "probe-1 described and checked", || async {
        let json = call(&system, Method::GET, "/api/workers/probe-1", VIEWER, None, StatusCode::OK).await;
        (json["described"]["described_at"].is_string() && json["readiness"].is_object()).then_some(json)
    })
    .await;
    let probe_1: WorkerView = round_trip("GET /api/workers/probe-1", &json);
    // The check itself: a field the API renamed, required or optional, or added, is caught.
    for (from, to) in [("engine_configurable", "engine_choosable"), ("effective_error", "config_error"), ("", "new")] {
        let mut renamed = json.clone();
        let object = renamed.as_object_mut().expect("an object");
        let value = object.remove(from).unwrap_or(Value::Null);
        object.insert(to.to_owned(), value);
        assert!(read_whole::<WorkerView>(&renamed).is_err(), "{from} renamed {to} must not read whole");
    }
    assert!(probe_1.described.is_some() && probe_1.readiness.is_some(), "{probe_1:?}");
    for chore in ["describe", "count", "check"] {
        let path = format!("/api/workers/probe-1/{chore}");
        let asked: ChoreRequested = send(&system, Method::POST, &path, OPERATOR, None, StatusCode::ACCEPTED).await;
        assert!(asked.taken, "{asked:?}");
    }
    eventually(PATIENCE, "probe-1's queue counted", || async {
        let json = call(&system, Method::GET, "/api/workers", VIEWER, None, StatusCode::OK).await;
        json["workers"][0]["queue"].is_object().then_some(())
    })
    .await;
    let workers: WorkersView = get(&system, "/api/workers").await;
    assert_eq!(workers.workers.len(), 3);
    assert!(workers.engines.contains_key("local"), "{:?}", workers.engines);

    // An override (so that a rerun has a diff), its trail; a run that fails after two checkpoints, then its
    // resume, a restart of that, and a rerun of that once the override is cleared.
    let change = OverrideChange {
        options: [("output_lines".to_owned(), json!(3))].into(),
        reason: Some("more lines for the round trip".into()),
        ..OverrideChange::default()
    };
    let set: OverrideView =
        send(&system, Method::PUT, "/api/workers/probe-1/override", ADMIN, body(&change), StatusCode::OK).await;
    assert!(set.override_.is_some(), "{set:?}");
    let failing = ExplicitArgs {
        options: [("duration_ms", json!(300)), ("checkpoints", json!(2)), ("exit_code", json!(1))]
            .map(|(k, v)| (k.to_owned(), v))
            .into(),
        ..ExplicitArgs::default()
    };
    let first: Run =
        send(&system, Method::POST, "/api/workers/probe-1/runs", OPERATOR, body(&failing), StatusCode::CREATED).await;
    let first = ended(&system, first.id).await;
    assert!(first.run.checkpoint.is_some() && !first.progress_history.is_empty(), "{first:?}");
    let mut last = first.run.id;
    for how in ["resume", "restart"] {
        let path = format!("/api/runs/{last}/{how}");
        let next: Run = send(&system, Method::POST, &path, OPERATOR, None, StatusCode::CREATED).await;
        last = ended(&system, next.id).await.run.id;
    }
    let cleared: OverrideView = send(
        &system,
        Method::DELETE,
        "/api/workers/probe-1/override",
        ADMIN,
        body(ReasonBody::new("back to the defaults")),
        StatusCode::OK,
    )
    .await;
    assert!(cleared.override_.is_none(), "{cleared:?}");
    let trail: AuditView = get(&system, "/api/workers/probe-1/audit?limit=5").await;
    assert_eq!(trail.entries.len(), 2, "{trail:?}");
    let rerun: Run =
        send(&system, Method::POST, &format!("/api/runs/{last}/rerun"), OPERATOR, None, StatusCode::CREATED).await;
    let rerun = ended(&system, rerun.id).await;
    assert!(rerun.changed_since.as_ref().is_some_and(|c| !c.is_empty()), "the rerun's diff: {rerun:?}");
    assert_eq!(rerun.chain.len(), 4, "{rerun:?}");
    let page: RunPage = get(&system, "/api/runs?limit=2").await;
    assert!(page.next.is_some() && page.runs.len() == 2, "{page:?}");
    let _: RunPage = get(&system, "/api/runs?worker=probe-1").await;

    // A run in flight: a second request is refused with the details of the first; then it is cancelled.
    let long = body(json!({"options": {"duration_ms": 30_000}}));
    let running: Run =
        send(&system, Method::POST, "/api/workers/probe-2/runs", OPERATOR, long.clone(), StatusCode::CREATED).await;
    let refused: ErrorBody =
        send(&system, Method::POST, "/api/workers/probe-2/runs", OPERATOR, long, StatusCode::CONFLICT).await;
    assert_eq!((refused.code.as_str(), refused.details.get("run_id")), ("run_in_flight", Some(&json!(running.id))));
    let missing: ErrorBody =
        send(&system, Method::GET, &format!("/api/runs/{}", Uuid::now_v7()), VIEWER, None, StatusCode::NOT_FOUND).await;
    assert_eq!(missing.code, "unknown_run");
    let path = format!("/api/runs/{}/cancel", running.id);
    let _: CancelView = send(&system, Method::POST, &path, OPERATOR, None, StatusCode::ACCEPTED).await;
    ended(&system, running.id).await;

    // Resources.
    let resources: ResourcesView = get(&system, "/api/resources").await;
    assert_eq!(resources.resources.len(), 1);
    let capacity = ResourceChange { capacity: Some(Some(2)), reason: Some("a second GPU".into()) };
    let _: ResourceView =
        send(&system, Method::PUT, "/api/resources/model-server", ADMIN, body(&capacity), StatusCode::OK).await;
    let audit: ResourceAudit = get(&system, "/api/resources/model-server/audit?limit=3").await;
    assert_eq!(audit.entries.len(), 1);

    // A schedule of probe-3 that fires every second, until it has fired.
    let preview = PreviewInput { cron: "0 3 * * *".into(), time_zone: Some("Europe/Berlin".into()) };
    let _: SchedulePreview =
        send(&system, Method::POST, "/api/schedules/preview", VIEWER, body(&preview), StatusCode::OK).await;
    let mut input = ScheduleInput {
        name: "every-second".into(),
        worker: Some("probe-3".into()),
        cron: "* * * * * *".into(),
        arguments: Some(json!({"options": {"duration_ms": 50}})),
        reason: Some("fires for the round trip".into()),
        ..ScheduleInput::default()
    };
    let created: ScheduleView =
        send(&system, Method::POST, "/api/schedules", OPERATOR, body(&input), StatusCode::CREATED).await;
    let key = created.schedule.id;
    let fires_path = format!("/api/schedules/{key}/fires?limit=5");
    eventually(PATIENCE, "the schedule to fire", || async {
        let fires = call(&system, Method::GET, &fires_path, VIEWER, None, StatusCode::OK).await;
        fires.as_array().is_some_and(|f| !f.is_empty()).then_some(())
    })
    .await;
    let reason = || body(ReasonBody::new("enough fires"));
    for action in ["pause", "resume", "pause"] {
        let path = format!("/api/schedules/{key}/{action}");
        let _: ScheduleView = send(&system, Method::POST, &path, OPERATOR, reason(), StatusCode::OK).await;
    }
    input.enabled = Some(false);
    input.reason = Some("paused for good".into());
    let path = format!("/api/schedules/{key}");
    let replaced: ScheduleView = send(&system, Method::PUT, &path, OPERATOR, body(&input), StatusCode::OK).await;
    assert!(replaced.last_fire.is_some(), "{replaced:?}");
    let _: ScheduleView = get(&system, "/api/schedules/every-second").await;
    let listed: Vec<ScheduleView> = get(&system, "/api/schedules").await;
    assert_eq!(listed.len(), 1);
    let fires: Vec<ScheduleFire> = get(&system, &fires_path).await;
    assert!(!fires.is_empty());
    let audit: Vec<ScheduleAuditEntry> = get(&system, &format!("/api/schedules/{key}/audit?limit=10")).await;
    assert_eq!(audit.len(), 5, "create, pause, resume, pause, change: {audit:?}");
    let _: Schedule = send(&system, Method::DELETE, &path, OPERATOR, reason(), StatusCode::OK).await;

    // A pipeline run, held on its first step, then cancelled.
    let start = body(json!({"arguments": {"probe-1": {"options": {"duration_ms": 30_000}}}}));
    let started: PipelineRunView =
        send(&system, Method::POST, "/api/pipelines/chain/runs", OPERATOR, start, StatusCode::CREATED).await;
    let id = started.pipeline_run.id;
    let pipelines: Vec<PipelineView> = get(&system, "/api/pipelines").await;
    assert!(pipelines[0].last_run.is_some(), "{pipelines:?}");
    let runs: Vec<PipelineRun> = get(&system, "/api/pipelines/chain/runs?limit=5").await;
    assert_eq!(runs.len(), 1);
    let _: PipelineRunView = get(&system, &format!("/api/pipeline-runs/{id}")).await;
    let path = format!("/api/pipeline-runs/{id}/cancel");
    let _: PipelineRunView = send(&system, Method::POST, &path, OPERATOR, None, StatusCode::OK).await;
    let path = format!("/api/pipeline-runs/{id}");
    eventually(PATIENCE, "the pipeline run cancelled", || async {
        let json = call(&system, Method::GET, &path, VIEWER, None, StatusCode::OK).await;
        (json["state"] == "cancelled"
            && json["runs"].as_array().is_some_and(|r| r.iter().all(|r| r["state"] == "cancelled")))
        .then_some(())
    })
    .await;
    let _: PipelineRunView = get(&system, &path).await;

    // Service tokens.
    let new = CreateTokenBody {
        name: "round-trip".into(),
        role: Some("viewer".into()),
        expires_at: Some("2999-01-01".into()),
    };
    let created: CreatedToken =
        send(&system, Method::POST, "/api/tokens", ADMIN, body(&new), StatusCode::CREATED).await;
    let listed: ServiceTokens = send(&system, Method::GET, "/api/tokens", ADMIN, None, StatusCode::OK).await;
    assert_eq!(listed.tokens.len(), 1);
    let path = format!("/api/tokens/{}", created.token.id);
    let _: ServiceToken = send(&system, Method::DELETE, &path, ADMIN, None, StatusCode::OK).await;

    // The service; then, with the daemon drained (stopped), a run that waits says why.
    let health: HealthView = get(&system, "/api/health").await;
    assert!(health.checks.iter().any(|c| c.name == "worker:probe-1"), "{health:?}");
    let daemons: DaemonsView = get(&system, "/api/daemons").await;
    let daemon = daemons.daemons.iter().find(|d| d.state == DaemonState::Active).expect("the active daemon").id;
    let path = format!("/api/daemons/{daemon}/drain");
    let _: Daemon = send(&system, Method::POST, &path, ADMIN, None, StatusCode::ACCEPTED).await;
    eventually(PATIENCE, "the drained daemon to stop", || async {
        let json = call(&system, Method::GET, "/api/daemons", VIEWER, None, StatusCode::OK).await;
        let daemons: DaemonsView = round_trip("GET /api/daemons", &json);
        daemons.daemons.iter().any(|d| d.id == daemon && d.stopped_at.is_some()).then_some(())
    })
    .await;
    let queued: Run =
        send(&system, Method::POST, "/api/workers/probe-1/runs", OPERATOR, None, StatusCode::CREATED).await;
    let detail: RunDetail = get(&system, &format!("/api/runs/{}", queued.id)).await;
    let waiting = detail.waiting.expect("why the run waits");
    assert!(matches!(waiting.code, WaitCode::AllDraining | WaitCode::NoDaemon), "{waiting:?}");
    let probe_1: WorkerView = get(&system, "/api/workers/probe-1").await;
    assert!(probe_1.waiting.is_some(), "{probe_1:?}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_answer_the_cli_reads_is_its_wire_type_whole() {
    every_answer_the_cli_reads_is_its_wire_type_whole(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_answer_the_cli_reads_is_its_wire_type_whole() {
    every_answer_the_cli_reads_is_its_wire_type_whole(Kind::Postgres).await;
}
