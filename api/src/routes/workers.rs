//! The worker view: the catalogue in order, each worker with its effective configuration (and where each value
//! comes from), its options as its code and the catalogue declare them (and where the two disagree), its last
//! description, readiness and queue measurement, its run in flight and its last finished run. It reads
//! snapshots and never runs a worker: a constant number of queries, whatever the number of workers.

use std::collections::{BTreeMap, HashMap};

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::get,
};
use chrono::{DateTime, Utc};
use scrinalia_shared::{
    EffectiveWorker, WorkerSpec, daemons, freshness, overrides::OverrideState, runs::not_preemptible,
};
use scrinalia_wire::{
    BacklogFiresView, Daemon, Engine, Override, QueueCount, Readiness, Run, RunState, Waiting, WorkerDescription,
    WorkerView, WorkersView,
};
use uuid::Uuid;

use crate::{
    auth::Viewer,
    error::{ApiError, ApiResult, ErrorBody},
    extract::{Limit, TrailLimit},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers", get(list_workers))
        .route("/api/workers/{name}", get(get_worker))
        .route("/api/workers/{name}/backlog-fires", get(backlog_fires))
}

#[utoipa::path(get, path = "/api/workers/{name}/backlog-fires", tag = "workers",
    params(("name" = String, Path, description = "The worker's name"), TrailLimit),
    responses((status = 200, body = BacklogFiresView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn backlog_fires(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Limit(limit): TrailLimit,
) -> ApiResult<Json<BacklogFiresView>> {
    let spec = find_worker(&state, &name)?;
    let (stored, fires) =
        tokio::try_join!(state.db().get_override(&spec.name), state.db().backlog_fires(&spec.name, limit))?;
    let values = stored.map(|o| o.values).unwrap_or_default();
    let trigger = scrinalia_shared::resolve::backlog_trigger(spec, &values).ok().flatten().map(|t| t.value);
    Ok(Json(BacklogFiresView { worker: spec.name.clone(), trigger, fires }))
}

#[utoipa::path(get, path = "/api/workers", tag = "workers",
    responses((status = 200, body = WorkersView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_workers(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<WorkersView>> {
    let specs: Vec<&WorkerSpec> = state.catalogue().workers.iter().collect();
    let (workers, engines, now) = worker_views(&state, &specs).await?;
    Ok(Json(WorkersView { workers, engines, now }))
}

#[utoipa::path(get, path = "/api/workers/{name}", tag = "workers",
    params(("name" = String, Path, description = "The worker's name")),
    responses((status = 200, body = WorkerView), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn get_worker(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<WorkerView>> {
    let spec = find_worker(&state, &name)?;
    let (mut views, _, _) = worker_views(&state, &[spec]).await?;
    views.pop().map(Json).ok_or_else(|| ApiError::unknown_worker(&name))
}

/// The catalogue entry of `name`, or 404.
pub fn find_worker<'a>(state: &'a AppState, name: &str) -> ApiResult<&'a WorkerSpec> {
    state.catalogue().worker(name).ok_or_else(|| ApiError::unknown_worker(name))
}

/// The views of `specs` and the engines they can use (the catalogue's, with the presets their code declares),
/// from ten queries run at once, whatever their number, then three more (the daemons, the resources' holders,
/// the clock) when a run is queued, to say why it waits, and one when a run is running, for its items.
pub async fn worker_views(
    state: &AppState,
    specs: &[&WorkerSpec],
) -> ApiResult<(Vec<WorkerView>, BTreeMap<String, Engine>, DateTime<Utc>)> {
    let db = state.db();
    let names: Vec<String> = specs.iter().map(|w| w.name.clone()).collect();
    let (overrides, counts, in_flight, finished, now, descriptions, readiness, mut quarantined, daemons, paused) = tokio::try_join!(
        db.list_overrides(),
        db.queue_counts(),
        db.runs_in_flight(),
        db.last_finished(&names),
        db.now(),
        db.descriptions(),
        db.readiness(),
        db.quarantined_counts(state.catalogue()),
        db.list_daemons(state.gone_after()),
        db.worker_pauses(),
    )?;
    let mut paused: HashMap<String, scrinalia_wire::WorkerPause> = paused.into_iter().collect();
    // The items of the running runs, in one statement for all of them, and only when a run is running.
    let running = in_flight.iter().any(|r| r.state == RunState::Running);
    let items = async { if running { db.running_items().await } else { Ok(HashMap::new()) } };
    let waits = db.why_each_waits(state.catalogue(), &in_flight, &names, state.gone_after());
    let (mut waiting, mut running_items) = tokio::try_join!(waits, items)?;
    let mut shards_notes = shards_notes(&in_flight, &waiting);
    let mut overrides: HashMap<String, Override> = overrides.into_iter().map(|o| (o.worker.clone(), o)).collect();
    let mut counts: HashMap<String, QueueCount> = counts.into_iter().map(|c| (c.worker.clone(), c)).collect();
    // A worker's run in flight is a plain run or a sharded run's parent, never one of its children.
    let mut in_flight: HashMap<String, Run> =
        in_flight.into_iter().filter(|r| r.parent_id.is_none()).map(|r| (r.worker.clone(), r)).collect();
    let mut finished: HashMap<String, Run> = finished.into_iter().map(|r| (r.worker.clone(), r)).collect();
    let mut descriptions: HashMap<String, WorkerDescription> =
        descriptions.into_iter().map(|d| (d.worker.clone(), d)).collect();
    let mut readiness: HashMap<String, Readiness> = readiness.into_iter().map(|r| (r.worker.clone(), r)).collect();
    let targets: Vec<(&WorkerSpec, u64)> =
        specs.iter().filter_map(|s| freshness::target(s, overrides.get(&s.name)).map(|t| (*s, t))).collect();
    let mut freshness = db.freshness(&targets, &counts, &in_flight, &daemons, now).await?;
    let mut engines = state.catalogue().engines.clone();
    let views = specs
        .iter()
        .map(|spec| {
            let described = descriptions.remove(&spec.name);
            let worker =
                EffectiveWorker::of(state.catalogue(), spec, described.as_ref().and_then(|d| d.description.as_ref()));
            for (name, engine) in &worker.engines {
                engines.entry(name.clone()).or_insert_with(|| engine.clone()).presets.extend(engine.presets.clone());
            }
            let stored = overrides.remove(&spec.name);
            let limit_notes = limit_notes_of(spec, stored.as_ref(), &daemons);
            let capabilities =
                described.as_ref().and_then(|d| d.description.as_ref()).map(|d| d.capabilities.unwrap_or_default());
            let preemption_note = not_preemptible(spec.preemptible, capabilities)
                .filter(|_| spec.preemptible)
                .map(|why| format!("Declared preemptible, but its runs are not preempted: {why}."));
            let config = OverrideState::of(&worker, stored);
            let (effective, effective_error) = match config.effective {
                Ok(config) => (Some(config), None),
                Err(e) => (None, Some(e.to_string())),
            };
            WorkerView {
                name: spec.name.clone(),
                title: spec.title.clone(),
                axis: spec.axis.clone(),
                governance: spec.governance.clone(),
                stamp: spec.stamp.clone(),
                description: spec.description.clone(),
                effective,
                effective_error,
                override_: config.stored,
                engine_configurable: worker.engine_configurable(),
                engine_source: worker.spec.engine_source.clone(),
                engine_source_url: spec.engine_source_url.clone(),
                options: worker.spec.options,
                disagreements: worker.disagreements,
                described,
                readiness: readiness.remove(&spec.name),
                queue: counts.remove(&spec.name),
                waiting: in_flight.get(&spec.name).and_then(|r| waiting.remove(&r.id)),
                // Only the figures of the run the card shows (not of a run that has ended since).
                running_items: in_flight.get(&spec.name).and_then(|r| running_items.remove(&r.id)),
                shards_note: in_flight.get(&spec.name).and_then(|r| shards_notes.remove(&r.id)),
                preemption_note,
                in_flight: in_flight.remove(&spec.name),
                last_finished: finished.remove(&spec.name),
                quarantined: quarantined.remove(&spec.name).unwrap_or(0),
                limit_notes,
                paused: paused.remove(&spec.name),
                freshness: freshness.remove(&spec.name),
            }
        })
        .collect();
    Ok((views, engines, now))
}

/// Where the shards of each sharded run in flight stand, by parent: "4 shards: 3 running, 1 queued", and why a
/// queued one waits, from the children among `in_flight` (a shard that has ended is no longer in flight).
fn shards_notes(in_flight: &[Run], waiting: &HashMap<Uuid, Waiting>) -> HashMap<Uuid, String> {
    let mut notes = HashMap::new();
    for parent in in_flight.iter().filter(|r| r.is_parent()) {
        let children: Vec<&Run> = in_flight.iter().filter(|c| c.parent_id == Some(parent.id)).collect();
        let running = children.iter().filter(|c| c.state == RunState::Running).count();
        let queued: Vec<&&Run> = children.iter().filter(|c| c.state == RunState::Queued).collect();
        let shards = parent.shards.unwrap_or_default();
        let ended = usize::try_from(shards).unwrap_or(0).saturating_sub(children.len());
        let mut note = format!("{shards} shards: {running} running, {} queued", queued.len());
        if ended > 0 {
            note.push_str(&format!(", {ended} ended"));
        }
        if let Some(why) = queued.iter().find_map(|c| waiting.get(&c.id)) {
            note.push_str(&format!(" (a queued shard waits: {})", why.message));
        }
        notes.insert(parent.id, note);
    }
    notes
}

/// What the live daemons say of `spec`'s limits, its override's (`memory_max`, `cpu_max`) over the catalogue's.
pub fn limit_notes_of(spec: &WorkerSpec, stored: Option<&Override>, daemons: &[Daemon]) -> Vec<String> {
    let memory_max = stored.and_then(|o| o.values.memory_max.as_ref()).or(spec.memory_max.as_ref()).is_some();
    let cpu_max = stored.and_then(|o| o.values.cpu_max).or(spec.cpu_max);
    daemons::limit_notes(&spec.name, memory_max, cpu_max, daemons)
}
