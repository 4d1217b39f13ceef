//! The daemon registry: which daemons are active, draining or gone (by the database clock: a daemon silent for
//! longer than `daemon.gone_after_seconds` is gone even before a daemon marks it so), and asking one to drain.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::IntoResponse,
    routing::{get, post},
};
use scrinalia_wire::{Daemon, DaemonsView};
use uuid::Uuid;

use crate::{
    auth::{Admin, Viewer},
    error::{ApiError, ApiResult, ErrorBody},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/daemons", get(list_daemons)).route("/api/daemons/{id}/drain", post(drain_daemon))
}

#[utoipa::path(get, path = "/api/daemons", tag = "daemons",
    responses((status = 200, body = DaemonsView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_daemons(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<DaemonsView>> {
    Ok(Json(DaemonsView { daemons: state.db().list_daemons(state.gone_after()).await? }))
}

#[utoipa::path(post, path = "/api/daemons/{id}/drain", tag = "daemons",
    params(("id" = Uuid, Path, description = "The daemon's id (a UUID)")),
    responses((status = 202, body = Daemon, description = "The daemon will finish its runs and claim no more"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`daemon_gone`: the daemon is gone")),
    security(("bearer" = [])))]
pub(crate) async fn drain_daemon(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::invalid_id("daemon", &id))?;
    let draining = state.db().request_drain(id, &caller.name, state.gone_after()).await?;
    tracing::info!(daemon.id = %id, actor = %caller.name, "drain requested");
    Ok((StatusCode::ACCEPTED, Json(draining)))
}
