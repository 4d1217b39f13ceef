//! The daemon registry: which daemons are active, draining or gone (a daemon whose heartbeat is older than
//! `daemon.gone_after_seconds` by the database clock is reported gone even before a daemon marks it so), and
//! asking one to drain.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::IntoResponse,
    routing::{get, post},
};
use chrono::{DateTime, Utc};
use scrinalia_shared::db::{Daemon, DaemonState};
use serde::Serialize;
use utoipa::ToSchema;
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

/// A daemon as the API reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DaemonView {
    /// Its id (new at every start).
    pub id: Uuid,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// Its version.
    pub version: String,
    /// How many runs it takes at once.
    pub capacity: i32,
    /// Which workers it takes; empty means all.
    pub workers: Vec<String>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// Seconds since its last heartbeat (database clock).
    pub heartbeat_age_seconds: f64,
    /// How many runs it holds now.
    pub runs_in_flight: i64,
    /// `active`, `draining` or `gone`.
    pub state: DaemonState,
    /// When someone asked it to drain.
    pub drain_requested_at: Option<DateTime<Utc>>,
    /// Who asked it to drain.
    pub drain_requested_by: Option<String>,
    /// When it stopped (or was found gone).
    pub stopped_at: Option<DateTime<Utc>>,
}

/// Every daemon alive or stopped within the last day.
#[derive(Debug, Serialize, ToSchema)]
pub struct DaemonsView {
    /// Newest first.
    pub daemons: Vec<DaemonView>,
}

/// The view of `d` at database time `now`.
pub fn daemon_view(state: &AppState, d: Daemon, now: DateTime<Utc>) -> DaemonView {
    let age = (now - d.heartbeat_at).num_milliseconds().max(0) as f64 / 1000.0;
    let stale = age > state.settings().daemon.gone_after_seconds as f64;
    DaemonView {
        id: d.id,
        host: d.host,
        pid: d.pid,
        version: d.version,
        capacity: d.capacity,
        workers: d.workers,
        started_at: d.started_at,
        heartbeat_at: d.heartbeat_at,
        heartbeat_age_seconds: age,
        runs_in_flight: d.runs_in_flight,
        state: if stale { DaemonState::Gone } else { d.state },
        drain_requested_at: d.drain_requested_at,
        drain_requested_by: d.drain_requested_by,
        stopped_at: d.stopped_at,
    }
}

/// Every daemon's view, read with the database clock.
pub async fn daemon_views(state: &AppState) -> ApiResult<Vec<DaemonView>> {
    let (daemons, now) = tokio::try_join!(state.db().list_daemons(), state.db().now())?;
    Ok(daemons.into_iter().map(|d| daemon_view(state, d, now)).collect())
}

#[utoipa::path(get, path = "/api/daemons", tag = "daemons",
    responses((status = 200, body = DaemonsView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_daemons(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<DaemonsView>> {
    Ok(Json(DaemonsView { daemons: daemon_views(&state).await? }))
}

#[utoipa::path(post, path = "/api/daemons/{id}/drain", tag = "daemons",
    params(("id" = Uuid, Path, description = "The daemon's id (a UUID)")),
    responses((status = 202, body = DaemonView, description = "The daemon will finish its runs and claim no more"),
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
    let gone = || {
        ApiError::conflict("daemon_gone", format!("Daemon {id} is gone; there is nothing to drain."))
            .with("daemon_id", id)
    };
    let (daemon, now) = tokio::try_join!(state.db().get_daemon(id), state.db().now())?;
    let daemon = daemon.ok_or_else(|| ApiError::not_found("unknown_daemon", format!("There is no daemon {id}.")))?;
    if daemon_view(&state, daemon, now).state == DaemonState::Gone {
        return Err(gone());
    }
    let drained = state.db().request_drain(id, &caller.name).await?.ok_or_else(gone)?;
    tracing::info!(daemon.id = %id, actor = %caller.name, "drain requested");
    Ok((StatusCode::ACCEPTED, Json(daemon_view(&state, drained, now))))
}
