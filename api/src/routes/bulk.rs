//! Bulk actions by filter: `POST /api/runs/bulk` with the ledger's filter (the same fields, values and parsing
//! as `GET /api/runs`) and an action. A dry run answers the count, a sample and a snapshot; the real call needs
//! the count it was shown and a reason, and stores the action as a job the daemons work (the API only stores
//! it: its requests time out, a thousand reruns do not fit in one). Its progress is read at
//! `GET /api/runs/bulk/{id}`, and `GET /api/runs/bulk` lists them, newest first: their audit trail.

use std::collections::BTreeMap;

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use scrinalia_shared::{
    BulkAction, BulkActions, BulkPreview, BulkRequest,
    bulk::{BulkError, NewBulkAction},
    runs::RunFilter,
};
use scrinalia_wire::{Reason, ReasonError};
use serde_json::Value;
use utoipa::IntoParams;
use uuid::Uuid;

use super::runs::RunsQuery;
use crate::{
    auth::{Operator, Viewer},
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::{JsonBody, Limit, PageLimit},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/runs/bulk", get(list_bulk_actions).post(bulk_action))
        .route("/api/runs/bulk/{id}", get(get_bulk_action))
}

/// The ledger filter of a bulk action: the fields of `GET /api/runs`'s query, each a string, parsed as that
/// query is. A field it does not know is refused (a typo must not widen the set), and so is no field at all.
fn parse_filter(given: &BTreeMap<String, Value>) -> ApiResult<RunFilter> {
    let bad = |message: String| ApiError::bad_request("invalid_filter", message);
    let known: Vec<String> = RunsQuery::into_params(|| None).into_iter().map(|p| p.name).collect();
    for (key, value) in given {
        if key == "after" {
            return Err(bad("`after` pages a list; a bulk action takes every run its filter matches.".to_owned()));
        }
        if !known.contains(key) {
            let filters: Vec<&str> = known.iter().map(String::as_str).filter(|k| *k != "after").collect();
            return Err(bad(format!(
                "{} is not a filter of the ledger; the filters are {}.",
                quote(key),
                filters.join(", ")
            )));
        }
        if !(value.is_string() || value.is_null()) {
            return Err(bad(format!(
                "The filter's `{key}` must be a string, as in GET /api/runs's query, not {value}."
            )));
        }
    }
    if !given.values().any(|v| v.as_str().is_some_and(|s| !s.trim().is_empty())) {
        return Err(ApiError::bad_request(
            "filter_required",
            "A bulk action needs a filter: give at least one of the ledger's filters (worker, state, from, to, \
             requested_by, q, id, …); it never acts on every run.",
        ));
    }
    let object = given.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let query: RunsQuery =
        serde_json::from_value(Value::Object(object)).map_err(|e| bad(format!("The filter cannot be read: {e}.")))?;
    query.filter(Limit(1))
}

#[utoipa::path(post, path = "/api/runs/bulk", tag = "runs",
    request_body(content = BulkRequest, description = "The ledger filter (the fields of `GET /api/runs`'s query), the action, and either `dry_run: true` or the `expect_count` (and `snapshot`) the dry run answered with a `reason`"),
    responses(
        (status = 200, body = BulkPreview, description = "A dry run: the count, the newest matching runs and the snapshot to confirm with"),
        (status = 202, body = BulkAction, description = "Stored: the daemons work it; follow it at the location", headers(("Location" = String))),
        (status = 400, body = ErrorBody, description = "`filter_required` (a bulk action needs a filter), `invalid_filter`, `invalid_query`, `action_required`, `reason_required` (a bulk action needs a reason), `count_required`, `too_many_runs`, `nothing_matches`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`bulk_count_changed`: the filter now matches another number of runs at or before the snapshot than the count confirmed"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "The body does not have the expected fields")),
    security(("bearer" = [])))]
pub(crate) async fn bulk_action(
    Operator(caller): Operator,
    State(state): State<AppState>,
    JsonBody(request): JsonBody<BulkRequest>,
) -> ApiResult<Response> {
    let filter = parse_filter(&request.filter)?;
    let action = request.action.ok_or_else(|| {
        ApiError::bad_request("action_required", "A bulk action needs an `action`: cancel, rerun or resume.")
    })?;
    if request.dry_run {
        let preview = state.db().bulk_preview(&filter, action).await?;
        return Ok(Json(preview).into_response());
    }
    let reason = Reason::new(request.reason.as_deref(), "the runs change").map_err(|e| match e {
        ReasonError::Required { .. } => ApiError::bad_request(
            "reason_required",
            "A bulk action needs a reason: say in `reason` why; it is kept with the action, its audit record.",
        ),
        e => e.into(),
    })?;
    let expect_count = request.expect_count.ok_or_else(|| {
        ApiError::bad_request(
            "count_required",
            "A bulk action needs the count its dry run answered, as `expect_count` (with its `snapshot`): send \
             `dry_run: true` first.",
        )
    })?;
    let filter_json = serde_json::to_value(&request.filter).unwrap_or(Value::Null);
    let new = NewBulkAction {
        filter: &filter,
        filter_json: &filter_json,
        action,
        expect_count,
        snapshot: request.snapshot,
        reason: &reason,
        requested_by: &caller.name,
    };
    let stored = state.db().start_bulk(&new).await?;
    tracing::info!(bulk_id = %stored.id, action = %action, actor = %caller.name, count = stored.total,
        reason = %reason, filter = %filter_json, "bulk action requested");
    let location = format!("/api/runs/bulk/{}", stored.id);
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], Json(stored)).into_response())
}

#[utoipa::path(get, path = "/api/runs/bulk", tag = "runs", params(PageLimit),
    responses((status = 200, body = BulkActions, description = "Bulk actions, newest first: who asked, when, the filter, the count and the reason, and how far each got"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_bulk_actions(
    _: Viewer,
    State(state): State<AppState>,
    Limit(limit): PageLimit,
) -> ApiResult<Json<BulkActions>> {
    Ok(Json(BulkActions { actions: state.db().bulk_actions(limit).await? }))
}

#[utoipa::path(get, path = "/api/runs/bulk/{id}", tag = "runs", params(("id" = Uuid, Path, description = "The bulk action's id (a UUID)")),
    responses((status = 200, body = BulkAction, description = "The action, its progress (total, done, skipped, failed) and why runs were skipped or failed"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn get_bulk_action(
    _: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<BulkAction>> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::invalid_id("bulk action", &id))?;
    let action = state.db().bulk_action(id).await?;
    action.map(Json).ok_or_else(|| {
        ApiError::not_found("unknown_bulk_action", format!("There is no bulk action {id}.")).with("bulk_id", id)
    })
}

impl From<BulkError> for ApiError {
    fn from(e: BulkError) -> Self {
        let message = e.to_string();
        match e {
            BulkError::TooMany => Self::bad_request("too_many_runs", message),
            BulkError::NothingMatches(_) => Self::bad_request("nothing_matches", message),
            BulkError::CountChanged { expected, found } => {
                Self::conflict("bulk_count_changed", message).with("expected", expected).with("found", found)
            }
            BulkError::Database(e) => e.into(),
        }
    }
}
