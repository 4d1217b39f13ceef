//! The worker view: the catalogue in order, each worker with its effective configuration (and where each value
//! comes from), its declared options, its last queue measurement, its run in flight and its last finished run.
//! It reads snapshots and never counts: a constant number of queries, whatever the number of workers.

use std::collections::{BTreeMap, HashMap};

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::get,
};
use chrono::{DateTime, Utc};
use scrinalia_shared::{
    Engine, OptionSpec, Override, QueueCount, ResolvedConfig, Run, WorkerSpec, overrides::OverrideState,
};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    auth::Viewer,
    error::{ApiError, ApiResult, ErrorBody},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/workers", get(list_workers)).route("/api/workers/{name}", get(get_worker))
}

/// Every worker, in catalogue order, and the engines they can use.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkersView {
    /// Workers in catalogue order.
    pub workers: Vec<WorkerView>,
    /// Engines by name, with their presets (preset → model) and where they are called.
    pub engines: BTreeMap<String, Engine>,
    /// The database clock when this was read.
    pub now: DateTime<Utc>,
}

/// One worker as the panel shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerView {
    /// Its unique name.
    pub name: String,
    /// A short human title.
    pub title: Option<String>,
    /// The axis of the archive it works on.
    pub axis: String,
    /// Who governs its output.
    pub governance: String,
    /// The stamp it leaves on each unit.
    pub stamp: String,
    /// A sentence for people.
    pub description: Option<String>,
    /// The configuration a run without arguments would use now, each field with its source.
    pub effective: Option<ResolvedConfig>,
    /// Why the effective configuration cannot be resolved (a stored override that no longer fits the catalogue).
    pub effective_error: Option<String>,
    /// The stored override, if any.
    #[serde(rename = "override")]
    pub override_: Option<Override>,
    /// Whether engine and preset can be chosen here.
    pub engine_configurable: bool,
    /// When they cannot: where the engine comes from.
    pub engine_source: Option<String>,
    /// A link to where the engine is configured.
    pub engine_source_url: Option<String>,
    /// The options the worker accepts, for the panel's form.
    pub options: Vec<OptionSpec>,
    /// The last queue measurement, with its age.
    pub queue: Option<QueueCount>,
    /// The run queued or running, if any.
    pub in_flight: Option<Run>,
    /// The last finished run, if any.
    pub last_finished: Option<Run>,
}

#[utoipa::path(get, path = "/api/workers", tag = "workers",
    responses((status = 200, body = WorkersView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_workers(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<WorkersView>> {
    let specs: Vec<&WorkerSpec> = state.catalogue().workers.iter().collect();
    let (workers, now) = worker_views(&state, &specs).await?;
    Ok(Json(WorkersView { workers, engines: state.catalogue().engines.clone(), now }))
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
    let (mut views, _) = worker_views(&state, &[spec]).await?;
    views.pop().map(Json).ok_or_else(|| ApiError::unknown_worker(&name))
}

/// The catalogue entry of `name`, or 404.
pub fn find_worker<'a>(state: &'a AppState, name: &str) -> ApiResult<&'a WorkerSpec> {
    state.catalogue().worker(name).ok_or_else(|| ApiError::unknown_worker(name))
}

/// The views of `specs`, from five queries run at once, whatever their number.
pub async fn worker_views(state: &AppState, specs: &[&WorkerSpec]) -> ApiResult<(Vec<WorkerView>, DateTime<Utc>)> {
    let db = state.db();
    let names: Vec<String> = specs.iter().map(|w| w.name.clone()).collect();
    let (overrides, counts, in_flight, finished, now) = tokio::try_join!(
        db.list_overrides(),
        db.queue_counts(),
        db.runs_in_flight(),
        db.last_finished(&names),
        db.now(),
    )?;
    let mut overrides: HashMap<String, Override> = overrides.into_iter().map(|o| (o.worker.clone(), o)).collect();
    let mut counts: HashMap<String, QueueCount> = counts.into_iter().map(|c| (c.worker.clone(), c)).collect();
    let mut in_flight: HashMap<String, Run> = in_flight.into_iter().map(|r| (r.worker.clone(), r)).collect();
    let mut finished: HashMap<String, Run> = finished.into_iter().map(|r| (r.worker.clone(), r)).collect();
    let views = specs
        .iter()
        .map(|spec| {
            let config = OverrideState::of(state.catalogue(), spec, overrides.remove(&spec.name));
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
                engine_configurable: spec.engine_configurable(),
                engine_source: spec.engine_source.clone(),
                engine_source_url: spec.engine_source_url.clone(),
                options: spec.options.clone(),
                queue: counts.remove(&spec.name),
                in_flight: in_flight.remove(&spec.name),
                last_finished: finished.remove(&spec.name),
            }
        })
        .collect();
    Ok((views, now))
}
