//! Pipelines: the catalogue's pipelines with their last runs, starting a run of one (every step's configuration
//! resolved at once; one run in flight per pipeline), its runs, one pipeline run with its steps' runs, and
//! cancelling one.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};
use scrinalia_wire::{PipelineRun, PipelineRunView, PipelineView, StartPipeline};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    auth::{Operator, Viewer},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{JsonBody, Limit, PageLimit},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/pipelines", get(list_pipelines))
        .route("/api/pipelines/{name}/runs", get(list_pipeline_runs).post(start_pipeline))
        .route("/api/pipeline-runs/{id}", get(get_pipeline_run))
        .route("/api/pipeline-runs/{id}/cancel", post(cancel_pipeline_run))
}

/// Parses a pipeline run id from a path, or answers 400.
fn parse_pipeline_run_id(id: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| ApiError::invalid_id("pipeline run", id))
}

/// `view` with why it waits, computed now.
async fn explained(state: &AppState, mut view: PipelineRunView) -> ApiResult<PipelineRunView> {
    view.waiting = state.db().pipeline_waiting(state.catalogue(), &view, state.gone_after()).await?;
    Ok(view)
}

#[utoipa::path(get, path = "/api/pipelines", tag = "pipelines",
    responses((status = 200, body = [PipelineView], description = "The catalogue's pipelines in order, each with its run in flight or its last run"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_pipelines(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<Vec<PipelineView>>> {
    Ok(Json(state.db().pipelines(state.catalogue()).await?))
}

#[utoipa::path(post, path = "/api/pipelines/{name}/runs", tag = "pipelines",
    params(("name" = String, Path, description = "The pipeline's name")),
    request_body(content = Option<StartPipeline>, description = "Arguments by step worker; the body may be empty"),
    responses(
        (status = 201, body = PipelineRunView, description = "The pipeline run, its first step requested", headers(("Location" = String))),
        (status = 400, body = ErrorBody, description = "`invalid_arguments`: arguments for a worker that is not a step, or a step's arguments that do not fit; \
            `invalid_tags`: a tag that is not a short word, or more than 10"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`pipeline_not_found`"),
        (status = 409, body = ErrorBody, description = "`pipeline_in_flight` (with `pipeline_run_id`): the pipeline already has a run in flight; \
            `invalid_override`: a step's stored override no longer fits the catalogue"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn start_pipeline(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<StartPipeline>,
) -> ApiResult<impl IntoResponse> {
    let arguments = body.arguments.unwrap_or(Value::Null);
    let view = state.db().start_pipeline(state.catalogue(), &name, &caller.name, &arguments, &body.tags).await?;
    let view = explained(&state, view).await?;
    let run = &view.pipeline_run;
    tracing::info!(pipeline = %run.pipeline, pipeline_run = %run.id, actor = %caller.name, action = "start",
        run_id = ?run.current_run, "pipeline run started");
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/api/pipeline-runs/{}", run.id))], Json(view)))
}

#[utoipa::path(get, path = "/api/pipelines/{name}/runs", tag = "pipelines",
    params(("name" = String, Path, description = "The pipeline's name"), PageLimit),
    responses((status = 200, body = [PipelineRun], description = "Its runs, newest first"),
        (status = 400, body = ErrorBody, description = "`invalid_query`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`pipeline_not_found`: not in the catalogue, and no run of it is kept")),
    security(("bearer" = [])))]
pub(crate) async fn list_pipeline_runs(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Limit(limit): PageLimit,
) -> ApiResult<Json<Vec<PipelineRun>>> {
    let runs = state.db().pipeline_runs(Some(&name), limit).await?;
    // A pipeline removed from the catalogue keeps its history readable.
    if runs.is_empty() && state.catalogue().pipeline(&name).is_none() {
        return Err(ApiError::unknown_pipeline(&name));
    }
    Ok(Json(runs))
}

#[utoipa::path(get, path = "/api/pipeline-runs/{id}", tag = "pipelines",
    params(("id" = Uuid, Path, description = "The pipeline run's id (a UUID)")),
    responses((status = 200, body = PipelineRunView, description = "The pipeline run with its steps' runs (retries included), oldest first"),
        (status = 400, body = ErrorBody, description = "`invalid_id`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`pipeline_run_not_found`")),
    security(("bearer" = [])))]
pub(crate) async fn get_pipeline_run(
    _: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<PipelineRunView>> {
    let id = parse_pipeline_run_id(&id)?;
    let view = state.db().pipeline_run(id).await?.ok_or_else(|| ApiError::unknown_pipeline_run(id))?;
    Ok(Json(explained(&state, view).await?))
}

#[utoipa::path(post, path = "/api/pipeline-runs/{id}/cancel", tag = "pipelines",
    params(("id" = Uuid, Path, description = "The pipeline run's id (a UUID)")),
    responses((status = 200, body = PipelineRunView, description = "The pipeline run after the request: its current step is cancelled \
            (at once when queued; its daemon stops it when running) and the pipeline run ends `cancelled` once that step has ended. \
            A pipeline run that already ended is answered unchanged."),
        (status = 400, body = ErrorBody, description = "`invalid_id`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`pipeline_run_not_found`")),
    security(("bearer" = [])))]
pub(crate) async fn cancel_pipeline_run(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<PipelineRunView>> {
    let id = parse_pipeline_run_id(&id)?;
    let view =
        state.db().cancel_pipeline_run(id, &caller.name).await?.ok_or_else(|| ApiError::unknown_pipeline_run(id))?;
    let view = explained(&state, view).await?;
    let run = &view.pipeline_run;
    tracing::info!(pipeline = %run.pipeline, pipeline_run = %id, actor = %caller.name, action = "cancel",
        state = %run.state, "pipeline run cancellation");
    Ok(Json(view))
}
