//! Asking for a worker's chore now, as an operator: describe it again (its code was deployed), count its queue,
//! check that it has what it needs. The API only records the request; one of the daemons that take the worker
//! does the chore within about a second, and requests made before it starts are all answered by it.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::post,
};
use scrinalia_wire::{ChoreKind, ChoreRequested, DaemonState};

use crate::{
    auth::Operator,
    error::{ApiError, ApiResult, ErrorBody},
    routes::workers::find_worker,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/describe", post(describe_worker))
        .route("/api/workers/{name}/count", post(count_worker))
        .route("/api/workers/{name}/check", post(check_worker))
}

#[utoipa::path(post, path = "/api/workers/{name}/describe", tag = "workers",
    params(("name" = String, Path, description = "The worker's name")),
    responses((status = 202, body = ChoreRequested), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn describe_worker(
    caller: Operator,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<ChoreRequested>)> {
    request(caller, &state, &name, ChoreKind::Describe).await
}

#[utoipa::path(post, path = "/api/workers/{name}/count", tag = "workers",
    params(("name" = String, Path, description = "The worker's name")),
    responses((status = 202, body = ChoreRequested), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn count_worker(
    caller: Operator,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<ChoreRequested>)> {
    request(caller, &state, &name, ChoreKind::Count).await
}

#[utoipa::path(post, path = "/api/workers/{name}/check", tag = "workers",
    params(("name" = String, Path, description = "The worker's name")),
    responses((status = 202, body = ChoreRequested), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn check_worker(
    caller: Operator,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<ChoreRequested>)> {
    request(caller, &state, &name, ChoreKind::Check).await
}

async fn request(
    Operator(caller): Operator,
    state: &AppState,
    name: &str,
    kind: ChoreKind,
) -> ApiResult<(StatusCode, Json<ChoreRequested>)> {
    let spec = find_worker(state, name)?;
    let db = state.db();
    let gone_after = state.settings().daemon.gone_after();
    let workers = [spec.name.clone()];
    let (mut chores, daemons) = tokio::try_join!(db.request_chore(&workers, kind), db.list_daemons(gone_after))?;
    let taken = daemons
        .iter()
        .any(|d| d.state == DaemonState::Active && (d.workers.is_empty() || d.workers.contains(&spec.name)));
    let what = match kind {
        ChoreKind::Describe => "A description",
        ChoreKind::Count => "A count of the queue",
        ChoreKind::Check => "A check",
    };
    let message = if taken {
        format!("{what} of {} was asked for; a daemon that takes it does it within a few seconds.", spec.name)
    } else {
        format!("{what} of {} was asked for, but no active daemon takes this worker; it waits for one.", spec.name)
    };
    tracing::info!(worker = %spec.name, chore = %kind, actor = %caller.name, taken, "chore asked for");
    let chore = chores.pop().ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the chore request stored no row")))?;
    Ok((StatusCode::ACCEPTED, Json(ChoreRequested { chore, taken, message })))
}
