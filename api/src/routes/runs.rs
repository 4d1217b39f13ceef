//! Runs: trigger one (resolve the configuration, insert the request; the database allows one in flight per
//! worker), page through the ledger, read one with its progress history, and cancel one.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};
use chrono::{DateTime, Utc};
use scrinalia_shared::{
    auth::Role,
    runs::{CancelOutcome, Cursor, IdRange, RunFilter, RunRequest},
};
use scrinalia_wire::{CancelKind, CancelView, ProgressPage, Run, RunDetail, RunPage, RunState, TriggerBody};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::{
    auth::{Operator, Viewer},
    error::{ApiError, ApiResult, ErrorBody, quote, sentence},
    extract::{JsonBody, Limit, PROGRESS_SHOWN, PageLimit, ProgressLimit, QueryArgs, TraceParent},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/runs", post(trigger_run))
        .route("/api/runs", get(list_runs))
        .route("/api/runs/{id}", get(get_run))
        .route("/api/runs/{id}/progress", get(run_progress))
        .route("/api/runs/{id}/cancel", post(cancel_run))
}

/// Parses a run id from a path, or answers 400.
pub fn parse_run_id(id: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| ApiError::invalid_id("run", id))
}

#[utoipa::path(post, path = "/api/workers/{name}/runs", tag = "runs",
    params(("name" = String, Path, description = "The worker's name"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context to continue")),
    request_body(content = Option<TriggerBody>, description = "Arguments for this run and its tags; every field is optional"),
    responses(
        (status = 201, body = Run, description = "The run request, queued", headers(("Location" = String))),
        (status = 400, body = ErrorBody, description = "`invalid_arguments`: unknown option, wrong type, unknown engine or preset; \
            `invalid_tags`: a tag that is not a short word, or more than 10"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown worker"),
        (status = 409, body = ErrorBody, description = "`run_in_flight`: the worker already has a run queued or running"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "The body does not have the expected fields")),
    security(("bearer" = [])))]
pub(crate) async fn trigger_run(
    Operator(caller): Operator,
    State(state): State<AppState>,
    TraceParent(trace_context): TraceParent,
    Path(name): Path<String>,
    JsonBody(TriggerBody { arguments, tags }): JsonBody<TriggerBody>,
) -> ApiResult<impl IntoResponse> {
    if let Some(asked) = arguments.priority
        && caller.role < Role::Admin
        && let Some(default) = state.db().worker_priority(state.catalogue(), &name).await?
        && asked > i64::from(default)
    {
        return Err(ApiError::client(
            StatusCode::FORBIDDEN,
            "priority_needs_admin",
            format!(
                "Raising a run of worker {name} above its priority {default} (to {asked}) needs the admin role; \
                 {} may run it at {default} or lower.",
                caller.name
            ),
        ));
    }
    let raised = arguments.priority.is_some_and(|p| p > i64::from(scrinalia_wire::choice::DEFAULT_PRIORITY));
    let request = RunRequest {
        worker: name,
        requested_by: caller.name.clone(),
        arguments,
        trace_context: Some(trace_context),
        tags,
    };
    let run = state.db().request_run(state.catalogue(), request).await?;
    tracing::info!(run_id = %run.id, worker = %run.worker, actor = %caller.name, priority = run.priority, raised, traceparent = run.trace_context.as_deref().unwrap_or_default(), "run requested");
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/api/runs/{}", run.id))], Json(run)))
}

/// Filters of the ledger, as text so that each bad value gets its own sentence.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    /// Only this worker.
    worker: Option<String>,
    /// Only this state (queued, running, succeeded, failed, cancelled, interrupted).
    state: Option<String>,
    /// Requested at or after this time (RFC 3339).
    from: Option<String>,
    /// Requested before this time (RFC 3339).
    to: Option<String>,
    /// The `next` of the previous page.
    after: Option<String>,
    /// Only runs requested by this caller (the exact name a token or a schedule records).
    requested_by: Option<String>,
    /// Only runs whose error contains this text, whatever its case (at most 200 characters).
    q: Option<String>,
    /// Only this run: its whole id, or its first 4 or more hex digits (every run whose id starts so).
    id: Option<String>,
    /// Only runs that carry this tag (a short word such as `collection:1921-letters`).
    tag: Option<String>,
}

/// The longest `q` and `requested_by` taken.
const MAX_SEARCH_CHARS: usize = 200;

impl RunsQuery {
    pub(crate) fn filter(self, Limit(limit): PageLimit) -> ApiResult<RunFilter> {
        let bad = |message: String| ApiError::bad_request("invalid_query", message);
        let time = |key: &str, v: Option<String>| -> ApiResult<Option<DateTime<Utc>>> {
            v.map(|v| {
                DateTime::parse_from_rfc3339(&v).map(|t| t.with_timezone(&Utc)).map_err(|_| {
                    bad(format!("`{key}` must be an RFC 3339 time such as 2026-01-31T12:00:00Z, not {}.", quote(&v)))
                })
            })
            .transpose()
        };
        let worker = self.worker.filter(|w| !w.is_empty());
        if let Some(w) = worker.as_deref().filter(|w| !scrinalia_shared::catalogue::is_identifier(w)) {
            return Err(bad(format!("`worker` must be a worker name, not {}.", quote(w))));
        }
        let state = self.state.filter(|s| !s.is_empty()).map(|s| s.parse::<RunState>()).transpose();
        let after = self
            .after
            .filter(|a| !a.is_empty())
            .map(|a| {
                Cursor::decode(&a)
                    .ok_or_else(|| bad(format!("`after` must be the `next` of a previous page, not {}.", quote(&a))))
            })
            .transpose()?;
        let search = |key: &str, v: Option<String>| -> ApiResult<Option<String>> {
            let v = v.filter(|v| !v.trim().is_empty());
            match v {
                Some(v) if v.chars().count() > MAX_SEARCH_CHARS => Err(bad(format!(
                    "`{key}` may be at most {MAX_SEARCH_CHARS} characters long, not {}.",
                    v.chars().count()
                ))),
                v => Ok(v),
            }
        };
        let requested_by = search("requested_by", self.requested_by)?.map(|v| v.trim().to_owned());
        let error_contains = search("q", self.q)?;
        let ids = self
            .id
            .filter(|id| !id.trim().is_empty())
            .map(|id| {
                IdRange::parse(&id).ok_or_else(|| {
                    bad(format!(
                        "`id` must be a run id or its first {} or more hex digits (such as 0193ab12), not {}.",
                        IdRange::MIN_DIGITS,
                        quote(&id)
                    ))
                })
            })
            .transpose()?;
        let tag = self.tag.filter(|t| !t.is_empty());
        if let Some(t) = &tag {
            scrinalia_shared::tag::check_tag(t).map_err(|e| bad(format!("`tag`: {e}")))?;
        }
        Ok(RunFilter {
            tag,
            requested_by,
            error_contains,
            ids,
            worker,
            state: state.map_err(|e| bad(format!("`state`: {}", sentence(e))))?,
            from: time("from", self.from)?,
            to: time("to", self.to)?,
            after,
            limit,
        })
    }
}

#[utoipa::path(get, path = "/api/runs", tag = "runs", params(RunsQuery, PageLimit),
    responses((status = 200, body = RunPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_runs(
    _: Viewer,
    State(state): State<AppState>,
    QueryArgs(query): QueryArgs<RunsQuery>,
    limit: PageLimit,
) -> ApiResult<Json<RunPage>> {
    let filter = query.filter(limit)?;
    Ok(Json(state.db().list_runs(&filter).await?))
}

#[utoipa::path(get, path = "/api/runs/{id}", tag = "runs", params(("id" = Uuid, Path, description = "The run's id (a UUID)")),
    responses((status = 200, body = RunDetail), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn get_run(
    _: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunDetail>> {
    let id = parse_run_id(&id)?;
    // The last reports only: a day-long run has a hundred thousand of them; the rest is paged for.
    let (run, progress, chain, items, children) = tokio::try_join!(
        state.db().get_run(id),
        state.db().run_progress_page(id, None, PROGRESS_SHOWN),
        state.db().run_chain(id),
        state.db().item_summary(id),
        state.db().run_children(id)
    )?;
    let mut run = run.ok_or_else(|| ApiError::unknown_run(id))?;
    // A sharded run's progress, while it runs, and its items are its children's.
    if run.is_parent() && !run.state.is_terminal() {
        run.progress = scrinalia_shared::runs::live_progress(&children);
    }
    let items = match items {
        None if !children.is_empty() => state.db().shards_item_summary(&children).await?,
        items => items,
    };
    let (waiting, changed_since) = tokio::try_join!(
        state.db().why_waiting(state.catalogue(), &run, state.gone_after()),
        state.db().rerun_changes(&run)
    )?;
    Ok(Json(RunDetail {
        run,
        progress_history: progress.progress,
        progress_total: progress.total,
        progress_before: progress.before,
        chain,
        waiting,
        changed_since,
        items,
        children,
    }))
}

/// Where a page of progress reports ends.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProgressQuery {
    /// Only reports before this one (a `seq`: the `before` of the page after, or of the run's detail); the
    /// newest when not given.
    #[param(value_type = Option<i32>)]
    before: Option<String>,
}

#[utoipa::path(get, path = "/api/runs/{id}/progress", tag = "runs",
    params(("id" = Uuid, Path, description = "The run's id (a UUID)"), ProgressQuery, ProgressLimit),
    responses((status = 200, body = ProgressPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn run_progress(
    _: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    QueryArgs(query): QueryArgs<ProgressQuery>,
    Limit(limit): ProgressLimit,
) -> ApiResult<Json<ProgressPage>> {
    let id = parse_run_id(&id)?;
    let before = match query.before.as_deref() {
        None | Some("") => None,
        Some(text) => Some(text.parse::<i32>().map_err(|_| {
            ApiError::bad_request(
                "invalid_query",
                format!("`before` must be a progress report's `seq` (a whole number), not {}.", quote(text)),
            )
        })?),
    };
    let (run, page) = tokio::try_join!(state.db().get_run(id), state.db().run_progress_page(id, before, limit))?;
    run.ok_or_else(|| ApiError::unknown_run(id))?;
    Ok(Json(page))
}

#[utoipa::path(post, path = "/api/runs/{id}/cancel", tag = "runs", params(("id" = Uuid, Path, description = "The run's id (a UUID)")),
    responses((status = 202, body = CancelView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`run_finished`: the run already ended")),
    security(("bearer" = [])))]
pub(crate) async fn cancel_run(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let id = parse_run_id(&id)?;
    let (outcome, run) = match state.db().request_cancel(id, &caller.name).await? {
        None => return Err(ApiError::unknown_run(id)),
        Some(CancelOutcome::AlreadyFinished(run)) => {
            return Err(ApiError::conflict(
                "run_finished",
                format!("Run {id} already ended ({}); there is nothing to cancel.", run.state),
            )
            .with("run_id", id)
            .with("state", run.state));
        }
        Some(CancelOutcome::Cancelled(run)) => (CancelKind::Cancelled, run),
        Some(CancelOutcome::Requested(run)) => (CancelKind::Requested, run),
    };
    tracing::info!(run_id = %id, worker = %run.worker, actor = %caller.name, outcome = ?outcome, "run cancellation");
    Ok((StatusCode::ACCEPTED, Json(CancelView { outcome, run })))
}
