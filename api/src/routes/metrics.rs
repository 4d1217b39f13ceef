//! `GET /metrics` (unless `api.metrics = false`; on `api.metrics_listen` when set, else on the API's listener;
//! with a bearer token when `api.metrics_token_hash` is set): Prometheus text of what the database says, read
//! with five cheap queries at most once every few seconds (`state::CACHE_FOR`; scrapes in between get the same
//! text): daemons by state, runs queued and running, how long the oldest request has
//! waited, the queue measurements the daemons store, how long each running run has been silent, and where each
//! worker with a freshness target stands against it. Every API
//! process reports the same values (take `max`, not `sum`, across them). What runs did (started, finished by
//! outcome, durations, queue waits, lease renewals) is counted by the daemon that ran them, on its own `/metrics`.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, header},
    response::{IntoResponse, Response},
    routing::get,
};
use scrinalia_shared::{
    Named, RunState,
    auth::{hash_token, hashes_equal},
    metrics::{CONTENT_TYPE, GaugeSeries, Labels, render_gauges},
};

use crate::{
    error::{ApiError, ApiResult, ErrorBody},
    state::AppState,
};

const DAEMONS: &str = "scrinalia_daemons";
const DAEMONS_ALIVE: &str = "scrinalia_daemons_alive";
const IN_FLIGHT: &str = "scrinalia_runs_in_flight";
const OLDEST_QUEUED: &str = "scrinalia_queue_oldest_wait_seconds";
const PENDING: &str = "scrinalia_queue_pending";
const DONE: &str = "scrinalia_queue_done";
const MEASURED_AGE: &str = "scrinalia_queue_measurement_age_seconds";
const PROGRESS_AGE: &str = "scrinalia_run_progress_age_seconds";
const PAUSED: &str = "scrinalia_worker_paused";
const FRESHNESS_AGE: &str = "scrinalia_worker_freshness_age_seconds";
const FRESHNESS_BREACHED: &str = "scrinalia_worker_freshness_breached";

/// Every gauge of `/metrics`, with its help.
pub const GAUGES: &[(&str, &str)] = &[
    (
        DAEMONS,
        "Daemons by state (active, draining, gone; gone counts those stopped or silent within the last day), \
         by the database clock",
    ),
    (DAEMONS_ALIVE, "Daemons active or draining, by the database clock"),
    (IN_FLIGHT, "Runs queued or running, by worker and state (all daemons)"),
    (OLDEST_QUEUED, "How long the oldest queued request of each worker has waited (0 when none is queued)"),
    (PENDING, "Units of work waiting, by worker, as last measured by a daemon (count-pending)"),
    (DONE, "Units of work done, by worker, when the worker reports it"),
    (MEASURED_AGE, "Seconds since each worker's queue was last measured"),
    (
        PROGRESS_AGE,
        "Seconds since the running run of each worker last reported progress (or started); 0 when none runs",
    ),
    (PAUSED, "1 while the worker is paused (by hand, or after pause_after_failures failed runs in a row), else 0"),
    (
        FRESHNESS_AGE,
        "Age of the oldest pending document of each worker with a freshness target (or the time since its last \
         successful run while anything is pending); 0 when nothing is pending",
    ),
    (FRESHNESS_BREACHED, "1 when a worker with a freshness target is older than fresh_within_seconds, else 0"),
];

/// The routes of this module; none when `enabled` is false.
pub fn router(enabled: bool) -> Router<AppState> {
    match enabled {
        true => Router::new().route("/metrics", get(metrics)),
        false => Router::new(),
    }
}

#[utoipa::path(get, path = "/metrics", tag = "meta",
    responses((status = 200, content_type = "text/plain; version=0.0.4; charset=utf-8",
            description = "Prometheus text: daemons, runs in flight and queue measurements from the database, \
                measured at most once every 5 seconds"),
        (status = 401, body = ErrorBody, description = "`api.metrics_token_hash` is set and the request does not \
            carry that bearer token"),
        (status = 503, body = ErrorBody, description = "The database does not answer")))]
pub(crate) async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if let Some(hash) = &state.settings().api.metrics_token_hash {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        if !bearer.is_some_and(|token| hashes_equal(&hash_token(token.trim()), hash)) {
            return Err(ApiError::Unauthorized(
                "/metrics needs the bearer token whose hash is api.metrics_token_hash: send `Authorization: Bearer \
                 <token>` (Prometheus: `authorization: {credentials_file: …}`)."
                    .to_owned(),
            ));
        }
    }
    let text = state.metrics_cache().get(async { measure(&state).await.map(|s| render_gauges(&s)) }).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

fn series(name: &'static str) -> GaugeSeries {
    let help = GAUGES.iter().find(|(n, _)| *n == name).map_or("", |(_, h)| h);
    GaugeSeries { name, help, samples: Vec::new() }
}

fn worker(name: &str) -> Labels {
    vec![("worker", name.to_owned())]
}

/// Reads every gauge from the database.
pub async fn measure(state: &AppState) -> ApiResult<Vec<GaugeSeries>> {
    let db = state.db();
    let (daemons, in_flight, counts, now, ages, pauses, freshness) = tokio::try_join!(
        db.list_daemons(state.gone_after()),
        db.runs_in_flight(),
        db.queue_counts(),
        db.now(),
        db.progress_ages(),
        db.worker_pauses(),
        db.freshness_now(state.catalogue(), state.gone_after()),
    )?;
    let seconds = |t: chrono::DateTime<chrono::Utc>| (now - t).num_milliseconds().max(0) as f64 / 1000.0;

    let mut by_state: BTreeMap<&str, f64> = [("active", 0.0), ("draining", 0.0), ("gone", 0.0)].into();
    for daemon in daemons {
        *by_state.entry(daemon.state.name()).or_default() += 1.0;
    }
    let mut daemons = series(DAEMONS);
    daemons.samples = by_state.iter().map(|(s, n)| (vec![("state", (*s).to_owned())], *n)).collect();
    let mut alive = series(DAEMONS_ALIVE);
    alive.samples = vec![(Vec::new(), by_state["active"] + by_state["draining"])];

    // Every catalogue worker has its series, at zero when idle, so that a change shows from the first run.
    let names: Vec<&str> = state.catalogue().workers.iter().map(|w| w.name.as_str()).collect();
    let mut runs: BTreeMap<(String, &str), f64> = BTreeMap::new();
    let mut oldest: BTreeMap<String, f64> = names.iter().map(|w| ((*w).to_owned(), 0.0)).collect();
    for name in &names {
        runs.insert(((*name).to_owned(), "queued"), 0.0);
        runs.insert(((*name).to_owned(), "running"), 0.0);
    }
    // Executions are counted: a sharded run's children, not its parent.
    for run in in_flight.into_iter().filter(|r| !r.is_parent()) {
        let state = if run.state == RunState::Queued { "queued" } else { "running" };
        *runs.entry((run.worker.clone(), state)).or_default() += 1.0;
        if run.state == RunState::Queued {
            let waited = seconds(run.requested_at);
            let slot = oldest.entry(run.worker).or_default();
            *slot = slot.max(waited);
        }
    }
    let mut in_flight = series(IN_FLIGHT);
    in_flight.samples = runs.into_iter().map(|((w, s), n)| (vec![("worker", w), ("state", s.to_owned())], n)).collect();
    let mut oldest_queued = series(OLDEST_QUEUED);
    oldest_queued.samples = oldest.into_iter().map(|(w, s)| (worker(&w), s)).collect();

    let (mut pending, mut done, mut age) = (series(PENDING), series(DONE), series(MEASURED_AGE));
    for count in counts {
        if let Some(n) = count.pending {
            pending.samples.push((worker(&count.worker), n as f64));
        }
        if let Some(n) = count.done {
            done.samples.push((worker(&count.worker), n as f64));
        }
        age.samples.push((worker(&count.worker), count.age_seconds.max(0.0)));
    }
    // At zero for every catalogue worker, so that an alert on it has a series before the first run.
    let mut silent: BTreeMap<String, f64> = names.iter().map(|w| ((*w).to_owned(), 0.0)).collect();
    for (worker, seconds) in ages {
        let slot = silent.entry(worker).or_default();
        *slot = slot.max(seconds);
    }
    let mut progress_age = series(PROGRESS_AGE);
    progress_age.samples = silent.into_iter().map(|(w, s)| (worker(&w), s)).collect();
    let mut paused = series(PAUSED);
    let mut by_worker: BTreeMap<String, f64> = names.iter().map(|w| ((*w).to_owned(), 0.0)).collect();
    for (w, _) in pauses {
        by_worker.insert(w, 1.0);
    }
    paused.samples = by_worker.into_iter().map(|(w, n)| (worker(&w), n)).collect();
    let (mut fresh_age, mut breached) = (series(FRESHNESS_AGE), series(FRESHNESS_BREACHED));
    for (name, f) in freshness {
        fresh_age.samples.push((worker(&name), f.age_seconds.unwrap_or(0) as f64));
        breached.samples.push((worker(&name), if f.breached { 1.0 } else { 0.0 }));
    }
    Ok(vec![daemons, alive, in_flight, oldest_queued, pending, done, age, progress_age, paused, fresh_age, breached])
}

/// For the OTLP export: measures every `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default) into `last`, which the
/// observable gauges read, until the process shuts down.
pub async fn refresh(state: AppState, last: Arc<Mutex<Vec<GaugeSeries>>>) {
    let every = std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(60), Duration::from_millis)
        .max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = state.shutdown_token().cancelled() => return,
            _ = tick.tick() => {}
        }
        match measure(&state).await {
            Ok(series) => {
                if let Ok(mut slot) = last.lock() {
                    *slot = series;
                }
            }
            Err(e) => tracing::debug!(error = ?e, "could not measure the gauges for the OTLP export"),
        }
    }
}
