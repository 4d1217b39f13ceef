//! Overrides: a partial change of a worker's persisted override (absent keeps, `null` clears), validated by the
//! same rules as a run's arguments under the row's lock; clearing it; and the audit trail of every change.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, put},
};
use scrinalia_shared::overrides::OverrideState;
use scrinalia_wire::{AuditView, OverrideChange, OverrideView, ReasonBody};

use crate::{
    auth::{Admin, Viewer},
    error::{ApiResult, ErrorBody},
    extract::{JsonBody, Limit, QueryArgs, TrailLimit},
    routes::workers::find_worker,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/override", put(set_override).delete(clear_override))
        .route("/api/workers/{name}/audit", get(audit_trail))
}

/// A worker's override after `state`, and what a run without arguments resolves to now.
fn view_of(worker: &str, state: OverrideState) -> OverrideView {
    let (effective, effective_error) = match state.effective {
        Ok(config) => (Some(config), None),
        Err(e) => (None, Some(e.to_string())),
    };
    OverrideView { worker: worker.to_owned(), override_: state.stored, effective, effective_error }
}

#[utoipa::path(put, path = "/api/workers/{name}/override", tag = "overrides",
    params(("name" = String, Path, description = "The worker's name")),
    request_body = OverrideChange,
    responses((status = 200, body = OverrideView), (status = 400, body = ErrorBody, description = "Missing reason or invalid values"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn set_override(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(change): JsonBody<OverrideChange>,
) -> ApiResult<Json<OverrideView>> {
    let changed = state.db().change_override(state.catalogue(), &name, &caller.name, &change).await?;
    tracing::info!(worker = %name, actor = %caller.name, cleared = changed.stored.is_none(), "override changed");
    Ok(Json(view_of(&name, changed)))
}

#[utoipa::path(delete, path = "/api/workers/{name}/override", tag = "overrides",
    params(("name" = String, Path, description = "The worker's name"), ReasonBody),
    request_body(content = Option<ReasonBody>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = OverrideView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn clear_override(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<ReasonBody>,
    JsonBody(body): JsonBody<ReasonBody>,
) -> ApiResult<Json<OverrideView>> {
    let reason = body.or_query(query);
    let cleared = state.db().clear_override(state.catalogue(), &name, &caller.name, reason.as_deref()).await?;
    tracing::info!(worker = %name, actor = %caller.name, cleared = true, "override changed");
    Ok(Json(view_of(&name, cleared)))
}

#[utoipa::path(get, path = "/api/workers/{name}/audit", tag = "overrides",
    params(("name" = String, Path, description = "The worker's name"), TrailLimit),
    responses((status = 200, body = AuditView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn audit_trail(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Limit(limit): TrailLimit,
) -> ApiResult<Json<AuditView>> {
    let spec = find_worker(&state, &name)?;
    let entries = state.db().audit_trail(&spec.name, limit).await?;
    Ok(Json(AuditView { worker: spec.name.clone(), entries }))
}
