//! Overrides: a partial change of a worker's persisted override (absent keeps, `null` clears), validated by the
//! same rules as a run's arguments under the row's lock; clearing it; and the audit trail of every change.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, put},
};
use scrinalia_shared::{
    AuditEntry, Override, ResolvedConfig,
    overrides::{OverrideChange, OverrideState},
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{
    auth::{Admin, Viewer},
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::{JsonBody, QueryArgs},
    routes::workers::find_worker,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/override", put(set_override).delete(clear_override))
        .route("/api/workers/{name}/audit", get(audit_trail))
}

/// The reason of a removal, in the body (or in `?reason=`).
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClearReason {
    /// Why (required, recorded in the audit trail).
    #[serde(default)]
    reason: Option<String>,
}

/// A worker's override after a change, and the configuration a run without arguments now uses.
#[derive(Debug, Serialize, ToSchema)]
pub struct OverrideView {
    /// The worker.
    pub worker: String,
    /// The stored override; absent when it is cleared.
    #[serde(rename = "override")]
    pub override_: Option<Override>,
    /// The effective configuration, each field with its source.
    pub effective: Option<ResolvedConfig>,
    /// Why the effective configuration cannot be resolved, if it cannot.
    pub effective_error: Option<String>,
}

impl OverrideView {
    fn of(worker: &str, state: OverrideState) -> Self {
        let (effective, effective_error) = match state.effective {
            Ok(config) => (Some(config), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Self { worker: worker.to_owned(), override_: state.stored, effective, effective_error }
    }
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
    Ok(Json(OverrideView::of(&name, changed)))
}

#[utoipa::path(delete, path = "/api/workers/{name}/override", tag = "overrides",
    params(("name" = String, Path, description = "The worker's name"), ClearReason),
    request_body(content = Option<ClearReason>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = OverrideView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn clear_override(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<ClearReason>,
    JsonBody(body): JsonBody<ClearReason>,
) -> ApiResult<Json<OverrideView>> {
    let reason = body.reason.or(query.reason);
    let cleared = state.db().clear_override(state.catalogue(), &name, &caller.name, reason.as_deref()).await?;
    tracing::info!(worker = %name, actor = %caller.name, cleared = true, "override changed");
    Ok(Json(OverrideView::of(&name, cleared)))
}

/// Options of the audit trail.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// How many entries, 1 to 1000 (default 100).
    limit: Option<String>,
}

/// A worker's audit trail, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    /// The worker.
    pub worker: String,
    /// Who changed what, when and why; newest first.
    pub entries: Vec<AuditEntry>,
}

#[utoipa::path(get, path = "/api/workers/{name}/audit", tag = "overrides",
    params(("name" = String, Path, description = "The worker's name"), AuditQuery),
    responses((status = 200, body = AuditView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn audit_trail(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<AuditQuery>,
) -> ApiResult<Json<AuditView>> {
    let spec = find_worker(&state, &name)?;
    let limit = match query.limit {
        None => 100,
        Some(l) => l.parse::<u32>().ok().filter(|l| (1..=1000).contains(l)).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_query",
                format!("`limit` must be a whole number from 1 to 1000, not {}.", quote(&l)),
            )
        })?,
    };
    let entries = state.db().audit_trail(&spec.name, limit).await?;
    Ok(Json(AuditView { worker: spec.name.clone(), entries }))
}
