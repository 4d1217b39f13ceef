//! Overrides: a partial change of a worker's persisted override (absent keeps, `null` clears), validated by the
//! same rules as a run's arguments under the row's lock; clearing it; and the audit trail of every change.

use std::collections::BTreeMap;

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, put},
};
use scrinalia_shared::{
    ExplicitArgs, ResolveError, ResolvedConfig, WorkerSpec,
    db::{AuditEntry, Override, OverridePatch},
    resolve,
    resolve::{OverrideValues, check_override},
};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    auth::{Admin, Caller, Viewer},
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::{JsonBody, QueryArgs},
    routes::{runs::check_no_nul, workers::find_worker},
    state::AppState,
};

/// The longest reason accepted.
const MAX_REASON: usize = 2000;

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/override", put(set_override).delete(clear_override))
        .route("/api/workers/{name}/audit", get(audit_trail))
}

/// A partial change of an override: for `engine`, `preset` and each option, absent keeps the current value,
/// `null` clears it (the catalogue default applies again), a value sets it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverrideChange {
    /// The engine; `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    engine: Option<Option<String>>,
    /// The preset; `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    preset: Option<Option<String>>,
    /// Option values; a `null` value clears that option's override.
    #[serde(default)]
    #[schema(value_type = Object)]
    options: BTreeMap<String, Value>,
    /// Why (required, recorded in the audit trail).
    #[serde(default)]
    reason: Option<String>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
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

fn require_reason(reason: Option<String>) -> ApiResult<String> {
    let reason = reason.map(|r| r.trim().to_owned()).unwrap_or_default();
    if reason.is_empty() {
        return Err(ApiError::bad_request(
            "reason_required",
            "A reason is required: say in `reason` why the override changes; it is kept in the audit trail.",
        ));
    }
    if reason.contains('\0') {
        return Err(ApiError::bad_request(
            "reason_invalid",
            "The reason must not contain a NUL character (\\u0000); it is kept as text in the audit trail.",
        ));
    }
    if reason.chars().count() > MAX_REASON {
        return Err(ApiError::bad_request(
            "reason_too_long",
            format!("The reason must be at most {MAX_REASON} characters."),
        ));
    }
    Ok(reason)
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
    let spec = find_worker(&state, &name)?;
    let reason = require_reason(change.reason)?;
    check_no_nul(&change.options).map_err(|m| ApiError::bad_request("invalid_override", m))?;
    let patch = OverridePatch { engine: change.engine, preset: change.preset, options: change.options };
    let catalogue = state.catalogue();
    let next = |current: Option<&OverrideValues>| {
        let next = patch.apply(current);
        check_override(catalogue, spec, &next)?;
        Ok(next)
    };
    apply(&state, spec, &caller, &reason, &next).await.map(Json)
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
    let spec = find_worker(&state, &name)?;
    let reason = require_reason(body.reason.or(query.reason))?;
    apply(&state, spec, &caller, &reason, &|_| Ok(OverrideValues::default())).await.map(Json)
}

type Next<'a> = dyn Fn(Option<&OverrideValues>) -> Result<OverrideValues, ResolveError> + Sync + 'a;

async fn apply(
    state: &AppState,
    spec: &WorkerSpec,
    caller: &Caller,
    reason: &str,
    next: &Next<'_>,
) -> ApiResult<OverrideView> {
    let stored = state
        .db()
        .change_override(&spec.name, &caller.name, reason, next)
        .await?
        .map_err(|e| ApiError::bad_request("invalid_override", e.to_string()))?;
    tracing::info!(worker = %spec.name, actor = %caller.name, cleared = stored.is_none(), "override changed");
    let (effective, effective_error) =
        match resolve(state.catalogue(), spec, &ExplicitArgs::default(), stored.as_ref().map(|o| &o.values)) {
            Ok(config) => (Some(config), None),
            Err(e) => (None, Some(e.to_string())),
        };
    Ok(OverrideView { worker: spec.name.clone(), override_: stored, effective, effective_error })
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
