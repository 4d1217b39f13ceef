//! Pausing a worker by hand and resuming it (an operator, with a reason; audited), and reading whether it is
//! paused with its pause history. While a worker is paused no run of it is requested: a Run is a 409
//! `worker_paused` (see `scrinalia_shared::pauses`).

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, post},
};
use scrinalia_shared::pauses::PauseError;
use scrinalia_wire::{PauseView, Reason, ReasonBody, ReasonError};

use crate::{
    auth::{Operator, Viewer},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{JsonBody, Limit, QueryArgs, TrailLimit},
    routes::workers::find_worker,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/pause", post(pause_worker))
        .route("/api/workers/{name}/resume", post(resume_worker))
        .route("/api/workers/{name}/pauses", get(pause_history))
}

/// What a pause and a resume take: the caller, the worker's name and the reason (the body's, else `?reason=`).
type Toggle = (Operator, State<AppState>, Path<String>, QueryArgs<ReasonBody>, JsonBody<ReasonBody>);

/// The reason of a pause (`pausing`) or a resume, checked: a missing one is refused with its own sentence.
fn reason_of(given: Option<&str>, worker: &str, pausing: bool) -> ApiResult<Reason> {
    Reason::new(given, "the worker's pause").map_err(|e| match e {
        ReasonError::Required { .. } => {
            let (what, why) = if pausing { ("pause", "is paused") } else { ("resume", "is resumed") };
            ApiError::bad_request(
                "reason_required",
                format!("A {what} needs a reason: say in `reason` why worker {worker} {why}; it is kept in its pause history."),
            )
        }
        other => other.into(),
    })
}

impl From<PauseError> for ApiError {
    fn from(e: PauseError) -> Self {
        match e {
            PauseError::AlreadyPaused { ref pause, .. } => {
                let pause = pause.clone();
                Self::conflict("worker_paused", e.to_string()).with("paused", pause)
            }
            PauseError::NotPaused { .. } => Self::conflict("worker_not_paused", e.to_string()),
        }
    }
}

/// Pauses or resumes a worker: the handler of both routes.
async fn toggle(
    (Operator(caller), State(state), Path(name), QueryArgs(query), JsonBody(body)): Toggle,
    pausing: bool,
) -> ApiResult<Json<PauseView>> {
    let spec = find_worker(&state, &name)?;
    let reason = reason_of(body.or_query(query).as_deref(), &spec.name, pausing)?;
    let db = state.db();
    if pausing {
        db.pause_worker(&spec.name, &caller.name, reason.as_str()).await??;
    } else {
        db.resume_worker(&spec.name, &caller.name, reason.as_str()).await??;
    }
    let action = if pausing { "pause" } else { "resume" };
    tracing::info!(worker = %spec.name, actor = %caller.name, action, reason = %reason, "worker pause changed");
    view(&state, &spec.name, 100).await.map(Json)
}

async fn view(state: &AppState, worker: &str, limit: u32) -> ApiResult<PauseView> {
    let db = state.db();
    let (paused, history) = tokio::try_join!(db.worker_pause(worker), db.pause_history(worker, limit))?;
    Ok(PauseView { worker: worker.to_owned(), paused, history })
}

#[utoipa::path(post, path = "/api/workers/{name}/pause", tag = "workers",
    params(("name" = String, Path, description = "The worker's name"), ReasonBody),
    request_body(content = Option<ReasonBody>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = PauseView, description = "The worker, paused: no run of it is requested until it is resumed; its queued retries are cancelled"),
        (status = 400, body = ErrorBody, description = "`reason_required`: a pause needs a reason"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`worker_paused`: it is paused already (since when, by whom, why)"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn pause_worker(request: Toggle) -> ApiResult<Json<PauseView>> {
    toggle(request, true).await
}

#[utoipa::path(post, path = "/api/workers/{name}/resume", tag = "workers",
    params(("name" = String, Path, description = "The worker's name"), ReasonBody),
    request_body(content = Option<ReasonBody>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = PauseView, description = "The worker, resumed: its runs are requested again, and its failures in a row count from 0"),
        (status = 400, body = ErrorBody, description = "`reason_required`: a resume needs a reason"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`worker_not_paused`: it is not paused"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn resume_worker(request: Toggle) -> ApiResult<Json<PauseView>> {
    toggle(request, false).await
}

#[utoipa::path(get, path = "/api/workers/{name}/pauses", tag = "workers",
    params(("name" = String, Path, description = "The worker's name"), TrailLimit),
    responses((status = 200, body = PauseView, description = "Whether it is paused, and every pause and resume, newest first"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn pause_history(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Limit(limit): TrailLimit,
) -> ApiResult<Json<PauseView>> {
    let spec = find_worker(&state, &name)?;
    view(&state, &spec.name, limit).await.map(Json)
}
