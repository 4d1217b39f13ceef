//! Health of everything a run depends on: the database, each Ollama model server (reachable, and every preset's
//! model present, the presets the workers' code declares included), the run-log store (a probe key written, read
//! and deleted, at most once every few seconds: its outcome is reused for `state::CACHE_FOR`), the daemons
//! (alive by heartbeat) and each worker (ready as its last `check` said, and whether its catalogue entry agrees
//! with its code, and whether it keeps its freshness target). The checks run at once, each bounded in time; the answer is always 200 with the status in the
//! body, so that a panel can show what is down even when most things are.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use axum::{Json, Router, extract::State, routing::get};
use object_store::PutPayload;
use std::collections::{BTreeMap, HashMap};

use scrinalia_shared::EffectiveWorker;
use scrinalia_wire::{Check, DaemonState, Engine, Freshness, HealthView, Readiness, Status, WorkerPause};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{auth::Viewer, error::ErrorBody, state::AppState};

/// The longest any one check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(4);

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/health", get(health))
}

#[utoipa::path(get, path = "/api/health", tag = "health",
    responses((status = 200, body = HealthView, description = "Always 200; the status is in the body"),
        (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn health(_: Viewer, State(state): State<AppState>) -> Json<HealthView> {
    Json(check_all(&state).await)
}

/// Runs every check at once.
pub async fn check_all(state: &AppState) -> HealthView {
    let started = Instant::now();
    let facts = tokio::time::timeout(CHECK_TIMEOUT, async {
        tokio::try_join!(
            state.db().effective_workers(state.catalogue()),
            state.db().readiness(),
            state.db().quarantined_counts(state.catalogue()),
            state.db().list_overrides(),
            state.db().list_daemons(state.gone_after()),
            state.db().worker_pauses(),
            state.db().freshness_now(state.catalogue(), state.gone_after()),
        )
    })
    .await;
    let (workers, readiness, mut quarantined, overrides, registry, mut paused, freshness) = match facts {
        Ok(Ok((workers, readiness, quarantined, overrides, registry, paused, freshness))) => {
            (workers, Some(readiness), quarantined, overrides, registry, paused.into_iter().collect(), freshness)
        }
        // The database check says why; the workers' checks are left out rather than guessed.
        _ => (
            state.catalogue().workers.iter().map(|w| EffectiveWorker::from_catalogue(state.catalogue(), w)).collect(),
            None,
            HashMap::new(),
            Vec::new(),
            Vec::new(),
            HashMap::new(),
            Vec::new(),
        ),
    };
    let mut freshness: HashMap<String, Freshness> = freshness.into_iter().collect();
    let mut engines: BTreeMap<String, Engine> = state.catalogue().engines.clone();
    for worker in &workers {
        for (name, engine) in &worker.engines {
            engines.entry(name.clone()).or_insert_with(|| engine.clone()).presets.extend(engine.presets.clone());
        }
    }
    let mut checks: Vec<std::pin::Pin<Box<dyn Future<Output = Check> + Send + '_>>> = vec![
        Box::pin(timed("database".to_owned(), database(state))),
        Box::pin(timed("object_store".to_owned(), object_store(state))),
        Box::pin(timed("daemons".to_owned(), daemons(state))),
    ];
    for (name, engine) in engines.iter().filter(|(_, e)| e.kind == "ollama") {
        checks.push(Box::pin(timed(format!("model_server:{name}"), model_server(state, name, engine))));
    }
    let mut checks = futures::future::join_all(checks).await;
    if let Some(readiness) = readiness {
        let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
        let mut readiness: HashMap<String, Readiness> = readiness.into_iter().map(|r| (r.worker.clone(), r)).collect();
        checks.extend(workers.iter().map(|w| {
            let quarantined = quarantined.remove(w.name()).unwrap_or(0);
            let stored = overrides.iter().find(|o| o.worker == w.name());
            let limits = super::workers::limit_notes_of(&w.spec, stored, &registry);
            let paused = paused.remove(w.name());
            let fresh = freshness.remove(w.name());
            worker_check(w, readiness.remove(w.name()), (quarantined, limits, paused, fresh), latency_ms)
        }));
    }
    let status = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    HealthView { status, checks, version: scrinalia_shared::VERSION.to_owned() }
}

/// A worker: down when its check says it is not ready, degraded when its check failed, its catalogue entry
/// disagrees with its code or a host does not enforce one of its limits (its runs go on there without it), ok
/// otherwise (also before its first check). Its quarantined documents are told in its details (`quarantined`,
/// and a `note` sentence), and so is a `cpu_max` clamped to a host's cores (`limits`): informational. A worker
/// that paused itself (after `pause_after_failures` failed runs in a row) is degraded: something it needs is
/// likely broken; one paused by hand is only told (`paused`, and a `note`), since a person meant it.
fn worker_check(
    worker: &EffectiveWorker,
    readiness: Option<Readiness>,
    (quarantined, limits, paused, freshness): (i64, Vec<String>, Option<WorkerPause>, Option<Freshness>),
    latency_ms: f64,
) -> Check {
    let name = worker.name();
    let mut problems = Vec::new();
    let mut status = Status::Ok;
    if let Some(problem) = readiness.as_ref().and_then(Readiness::problem) {
        status =
            if readiness.as_ref().is_some_and(|r| r.ready == Some(false)) { Status::Down } else { Status::Degraded };
        problems.push(format!("Worker {name} is not ready: {problem}"));
    }
    if !worker.disagreements.is_empty() {
        status = status.max(Status::Degraded);
        problems.push(format!("Its catalogue entry disagrees with its code: {}", worker.disagreements.join("; ")));
    }
    let unenforced: Vec<&String> = limits.iter().filter(|l| l.contains("not enforced")).collect();
    if !unenforced.is_empty() {
        status = status.max(Status::Degraded);
        let list: Vec<&str> = unenforced.iter().map(|l| l.as_str()).collect();
        problems.push(format!("A limit is not kept, its runs go on without it: {}", list.join("; ")));
    }
    // A worker declared preemptible whose code cannot yield holds its resource however urgent the waiter.
    let capabilities = worker.described.as_ref().map(|d| d.capabilities.unwrap_or_default());
    let not_preempted = scrinalia_shared::runs::not_preemptible(worker.spec.preemptible, capabilities)
        .filter(|_| worker.spec.preemptible);
    if let Some(why) = not_preempted {
        status = status.max(Status::Degraded);
        problems.push(format!("It is declared preemptible, but its runs are not preempted: {why}"));
    }
    let pause_sentence = paused.as_ref().map(|p| scrinalia_shared::pauses::refusal(name, p));
    if let Some(sentence) = pause_sentence.as_ref().filter(|_| paused.as_ref().is_some_and(|p| p.automatic)) {
        status = status.max(Status::Degraded);
        problems.push(sentence.clone());
    }
    if let Some(why) = freshness.as_ref().filter(|f| f.breached).and_then(|f| f.reason.as_deref()) {
        status = status.max(Status::Degraded);
        problems.push(format!("Its freshness target is breached: {why}"));
    }
    let mut details = json!({
        "ready": readiness.as_ref().and_then(|r| r.ready),
        "preemptible": worker.spec.preemptible && not_preempted.is_none(),
        "checked_at": readiness.as_ref().map(|r| r.checked_at),
        "disagreements": worker.disagreements,
        "quarantined": quarantined,
        "limits": limits,
        "paused": paused,
        "freshness": freshness,
    });
    if quarantined > 0 {
        let documents = if quarantined == 1 { "document is" } else { "documents are" };
        details["note"] = json!(format!(
            "{quarantined} {documents} quarantined: its runs skip them until they are released (scrinalia quarantine list {name})."
        ));
    }
    if let Some(sentence) = pause_sentence.filter(|_| paused.as_ref().is_some_and(|p| !p.automatic)) {
        let note = match details["note"].as_str() {
            Some(quarantine) => format!("{sentence} {quarantine}"),
            None => sentence,
        };
        details["note"] = json!(note);
    }
    let problems: Vec<&str> = problems.iter().map(|p| p.trim_end().trim_end_matches('.')).collect();
    let error = (!problems.is_empty()).then(|| crate::error::sentence(problems.join(". ")));
    Check { name: format!("worker:{name}"), status, latency_ms, error, details }
}

type Outcome = (Status, Option<String>, Value);

async fn timed(name: String, check: impl Future<Output = Outcome>) -> Check {
    let start = Instant::now();
    let (status, error, details) = match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(outcome) => outcome,
        Err(_) => (
            Status::Down,
            Some(format!("The check did not finish within {} seconds.", CHECK_TIMEOUT.as_secs())),
            Value::Null,
        ),
    };
    if let Some(e) = &error {
        tracing::debug!(check = %name, status = ?status, error = %e, "health check failed");
    }
    let latency_ms = (start.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    Check { name, status, latency_ms, error, details }
}

async fn database(state: &AppState) -> Outcome {
    match state.db().ping().await {
        // Behind a pooler with no direct LISTEN URL every live event comes up to a poll interval late: it works,
        // in part, and the operator should know why.
        Ok(()) if state.db().is_pooled() => match state.db().feed_polled() {
            Some(why) => (
                Status::Degraded,
                Some(crate::error::sentence(format!("The database answers, but {why}"))),
                json!({"pooler": "transaction", "events": "polled"}),
            ),
            None => (Status::Ok, None, json!({"pooler": "transaction", "events": "listened"})),
        },
        Ok(()) => (Status::Ok, None, Value::Null),
        Err(e) => (Status::Down, Some(format!("The database cannot be reached: {e}.")), Value::Null),
    }
}

async fn object_store(state: &AppState) -> Outcome {
    let store = match state.logs() {
        Ok(store) => store,
        Err(e) => return (Status::Down, Some(format!("The run-log store cannot be opened: {e}.")), Value::Null),
    };
    let key = store.probe_key();
    let payload = b"scrinalia health probe".to_vec();
    let probe = async {
        store
            .store()
            .put(&key, PutPayload::from(payload.clone()))
            .await
            .map_err(|e| format!("cannot be written: {}", store.explain(&e)))?;
        let read = store.store().get(&key).await.map_err(|e| format!("cannot be read: {}", store.explain(&e)))?;
        let bytes = read.bytes().await.map_err(|e| format!("cannot be read: {}", store.explain(&e)))?;
        if bytes.as_ref() != payload.as_slice() {
            return Err("returned something else than what was written".to_owned());
        }
        store.store().delete(&key).await.map_err(|e| format!("cannot delete what it wrote: {}", store.explain(&e)))
    };
    // Reused for a few seconds, failures included: a health check polled by many panels and monitors must not
    // turn into a stream of writes to the store.
    let outcome = state.object_store_probe().get(async { Ok::<_, std::convert::Infallible>(probe.await) }).await;
    match outcome.unwrap_or_else(|never| match never {}) {
        Ok(()) => (Status::Ok, None, Value::Null),
        Err(e) => (Status::Down, Some(format!("The run-log store {e}.")), Value::Null),
    }
}

async fn daemons(state: &AppState) -> Outcome {
    let views = match state.db().list_daemons(state.gone_after()).await {
        Ok(views) => views,
        Err(_) => return (Status::Down, Some("The daemon registry cannot be read.".to_owned()), Value::Null),
    };
    let alive = views.iter().filter(|d| d.state != DaemonState::Gone).count();
    let active = views.iter().filter(|d| d.state == DaemonState::Active).count();
    let details = json!({ "alive": alive, "active": active, "draining": alive - active });
    if alive == 0 {
        let e = "No daemon is alive: requested runs wait in the queue until one starts.";
        (Status::Down, Some(e.to_owned()), details)
    } else if active == 0 {
        (Status::Degraded, Some("Every live daemon is draining: no new run will start.".to_owned()), details)
    } else {
        (Status::Ok, None, details)
    }
}

/// Ollama's answer to `GET /api/tags`.
#[derive(Debug, Deserialize)]
struct Tags {
    models: Vec<TagModel>,
}

#[derive(Debug, Deserialize)]
struct TagModel {
    #[serde(default)]
    name: String,
    #[serde(default)]
    model: String,
}

/// Ollama names a model without a tag `<name>:latest`.
fn canonical(model: &str) -> String {
    if model.contains(':') { model.to_owned() } else { format!("{model}:latest") }
}

async fn model_server(state: &AppState, name: &str, engine: &Engine) -> Outcome {
    let Some(base) = engine.url.as_deref().map(|u| u.trim_end_matches('/')) else {
        return (Status::Down, Some(format!("Engine {name} has no url to check.")), Value::Null);
    };
    let server = format!("The model server of engine {name} at {base}");
    let response = match state.http().get(format!("{base}/api/tags")).send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() => {
            return (Status::Down, Some(format!("{server} did not answer in time.")), Value::Null);
        }
        Err(e) => return (Status::Down, Some(format!("{server} cannot be reached: {}.", root_cause(&e))), Value::Null),
    };
    if !response.status().is_success() {
        let e = format!("{server} answered {} to GET /api/tags.", response.status());
        return (Status::Down, Some(e), Value::Null);
    }
    let tags: Tags = match response.json().await {
        Ok(tags) => tags,
        Err(e) => {
            let e = format!("{server} did not answer with Ollama's model list: {}.", root_cause(&e));
            return (Status::Down, Some(e), Value::Null);
        }
    };
    let present: Vec<String> = tags.models.iter().flat_map(|m| [canonical(&m.name), canonical(&m.model)]).collect();
    let missing: Vec<(&String, &String)> =
        engine.presets.iter().filter(|(_, model)| !present.contains(&canonical(model))).collect();
    let details = json!({
        "models": tags.models.iter().map(|m| if m.name.is_empty() { &m.model } else { &m.name }).collect::<Vec<_>>(),
        "missing": missing.iter().map(|(_, m)| m).collect::<Vec<_>>(),
    });
    if missing.is_empty() {
        return (Status::Ok, None, details);
    }
    let list: Vec<String> = missing.iter().map(|(preset, model)| format!("{model} (preset {preset})")).collect();
    let e = format!(
        "{server} does not have {}: {}; pull {} with `ollama pull`.",
        if missing.len() == 1 { "this model" } else { "these models" },
        list.join(", "),
        if missing.len() == 1 { "it" } else { "them" },
    );
    (Status::Degraded, Some(e), details)
}

/// The innermost cause of an error, which is the readable part of a network error ("Connection refused").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}
