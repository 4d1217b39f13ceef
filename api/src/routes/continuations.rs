//! Continuing a run that ended, as a new run linked to it: resume it from its last checkpoint or restart it from
//! nothing, both with its configuration (the database lets a run be resumed or restarted once), or rerun it with
//! its explicit arguments resolved today, all of it or only the items it reported failed, optionally with other
//! arguments (a JSON body of a trigger's shape, whose fields replace the earlier run's). Operators and above.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{StatusCode, header},
    routing::post,
};
use scrinalia_shared::{FollowKind, Run, runs::FollowError};
use scrinalia_wire::ExplicitArgs;

use super::runs::parse_run_id;
use crate::{
    auth::{Caller, Operator},
    error::{ApiError, ApiResult, ErrorBody},
    extract::JsonBody,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/runs/{id}/resume", post(resume_run))
        .route("/api/runs/{id}/restart", post(restart_run))
        .route("/api/runs/{id}/rerun", post(rerun_run))
        .route("/api/runs/{id}/rerun-failed", post(rerun_failed))
}

#[utoipa::path(post, path = "/api/runs/{id}/resume", tag = "runs",
    params(("id" = Uuid, Path, description = "The interrupted or failed run's id (a UUID)")),
    responses(
        (status = 201, body = Run, description = "The new run, queued; its worker gets the checkpoint in `SCRINALIA_CHECKPOINT`", headers(("Location" = String))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`unknown_run`, or its worker is no longer in the catalogue"),
        (status = 409, body = ErrorBody, description = "`not_continuable` (not interrupted or failed), `no_checkpoint`, `already_continued` (naming the run that did), `run_in_flight`")),
    security(("bearer" = [])))]
pub(crate) async fn resume_run(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Created> {
    continue_run(&state, &caller, &id, FollowKind::Resume, ExplicitArgs::default()).await
}

#[utoipa::path(post, path = "/api/runs/{id}/restart", tag = "runs",
    params(("id" = Uuid, Path, description = "The interrupted or failed run's id (a UUID)")),
    responses(
        (status = 201, body = Run, description = "The new run, queued; its worker gets the earlier run's id in `SCRINALIA_RESTART_OF`", headers(("Location" = String))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`unknown_run`, or its worker is no longer in the catalogue"),
        (status = 409, body = ErrorBody, description = "`not_continuable` (not interrupted or failed), `already_continued` (naming the run that did), `run_in_flight`")),
    security(("bearer" = [])))]
pub(crate) async fn restart_run(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Created> {
    continue_run(&state, &caller, &id, FollowKind::Restart, ExplicitArgs::default()).await
}

#[utoipa::path(post, path = "/api/runs/{id}/rerun", tag = "runs",
    params(("id" = Uuid, Path, description = "The finished run's id (a UUID)")),
    request_body(content = Option<ExplicitArgs>, description = "Other arguments, optional, of a trigger's shape: each field given replaces the earlier run's (an option replaces that option; its other options are kept). No body or `{}`: the earlier run's arguments as they were"),
    responses(
        (status = 201, body = Run, description = "The new run, queued: the earlier run's explicit arguments (with the body's over them) resolved with today's overrides and defaults; `GET /api/runs/{id}` of it shows `changed_since`", headers(("Location" = String))),
        (status = 400, body = ErrorBody, description = "`invalid_arguments`: the arguments do not resolve against today's catalogue (an unknown option, a wrong type or bound, an unknown engine or preset); `malformed_json`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`unknown_run`, or its worker is no longer in the catalogue"),
        (status = 409, body = ErrorBody, description = "`not_continuable` (the run has not ended), `run_in_flight`, `invalid_override`"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "The body does not have the expected fields")),
    security(("bearer" = [])))]
pub(crate) async fn rerun_run(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(changes): JsonBody<ExplicitArgs>,
) -> ApiResult<Created> {
    continue_run(&state, &caller, &id, FollowKind::Rerun, changes).await
}

#[utoipa::path(post, path = "/api/runs/{id}/rerun-failed", tag = "runs",
    params(("id" = Uuid, Path, description = "The finished run's id (a UUID)")),
    request_body(content = Option<ExplicitArgs>, description = "Other arguments, optional, of a trigger's shape (a different preset, say): each field given replaces the earlier run's (an option replaces that option; its other options are kept). No body or `{}`: the earlier run's arguments as they were. The scope is the failed items either way"),
    responses(
        (status = 201, body = Run, description = "The new run, queued: a rerun scoped to exactly the items the earlier run reported failed, given to its worker in `SCRINALIA_ITEMS_ONLY`", headers(("Location" = String))),
        (status = 400, body = ErrorBody, description = "`invalid_arguments`: the arguments do not resolve against today's catalogue (an unknown option, a wrong type or bound, an unknown engine or preset); `malformed_json`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`unknown_run`, or its worker is no longer in the catalogue"),
        (status = 409, body = ErrorBody, description = "`not_continuable` (the run has not ended), `no_failures`, `no_scope` (its worker cannot take a scope), `run_in_flight`, `invalid_override`"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "The body does not have the expected fields")),
    security(("bearer" = [])))]
pub(crate) async fn rerun_failed(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(changes): JsonBody<ExplicitArgs>,
) -> ApiResult<Created> {
    continue_run(&state, &caller, &id, FollowKind::RerunFailed, changes).await
}

/// Continues run `id` as `how`; `changes` (a rerun's body, empty otherwise) go over its explicit arguments.
async fn continue_run(
    state: &AppState,
    caller: &Caller,
    id: &str,
    how: FollowKind,
    changes: ExplicitArgs,
) -> ApiResult<Created> {
    let id = parse_run_id(id)?;
    let run = state.db().continue_run_with(state.catalogue(), id, how, &caller.name, &changes).await?;
    // Which fields the caller changed; the merged arguments themselves are the new run's record.
    let changed = changed_fields(&changes);
    tracing::info!(run_id = %run.id, follows = %id, how = %how, worker = %run.worker, actor = %caller.name, changed = %changed, "run continued");
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/api/runs/{}", run.id))], Json(run)))
}

/// The fields `changes` gives, as `engine,preset,options.items`, for the log (empty: none).
fn changed_fields(changes: &ExplicitArgs) -> String {
    let named = [("engine", changes.engine.is_some()), ("preset", changes.preset.is_some())];
    let mut fields: Vec<String> = named.iter().filter(|(_, given)| *given).map(|(f, _)| (*f).to_owned()).collect();
    fields.extend(changes.options.keys().map(|name| format!("options.{name}")));
    if changes.retry.is_some() {
        fields.push("retry".to_owned());
    }
    fields.join(",")
}

/// A created run, with its location.
type Created = (StatusCode, [(header::HeaderName, String); 1], Json<Run>);

impl From<FollowError> for ApiError {
    fn from(e: FollowError) -> Self {
        let message = e.to_string();
        match e {
            FollowError::NotFound(id) => Self::unknown_run(id),
            FollowError::WrongState { run_id, state, .. } => {
                Self::conflict("not_continuable", message).with("run_id", run_id).with("state", state)
            }
            FollowError::NoCheckpoint(run_id) => Self::conflict("no_checkpoint", message).with("run_id", run_id),
            FollowError::AlreadyContinued { run_id, by, how } => Self::conflict("already_continued", message)
                .with("run_id", run_id)
                .with("continued_by", by)
                .with("how", how),
            FollowError::NoFailures(run_id) => Self::conflict("no_failures", message).with("run_id", run_id),
            FollowError::NoScope(_) => Self::conflict("no_scope", message),
            FollowError::Shard { run_id, parent } => {
                Self::conflict("shard_of_run", message).with("run_id", run_id).with("parent_id", parent)
            }
            FollowError::TakesNoArguments { run_id, .. } => {
                Self::bad_request("invalid_arguments", message).with("run_id", run_id)
            }
            FollowError::Request(e) => e.into(),
        }
    }
}
