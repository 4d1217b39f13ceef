//! Schedules: create, read, replace, pause, resume and delete a cron schedule of a worker or a pipeline (every
//! change audited with its actor and reason), preview an expression's next fire times, and read a schedule's
//! fires and audit trail. The daemons fire them; this only writes and reads their definitions.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};
use scrinalia_wire::{
    PreviewInput, ReasonBody, Schedule, ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView,
};

use crate::{
    auth::{Operator, Viewer},
    error::{ApiResult, ErrorBody},
    extract::{JsonBody, Limit, QueryArgs, TrailLimit},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/schedules", get(list_schedules).post(create_schedule))
        // A schedule may be named "preview": GET, PUT and DELETE of this path are that schedule's.
        .route(
            "/api/schedules/preview",
            post(preview_schedule).get(get_named_preview).put(replace_named_preview).delete(delete_named_preview),
        )
        .route("/api/schedules/{key}", get(get_schedule).put(replace_schedule).delete(delete_schedule))
        .route("/api/schedules/{key}/pause", post(pause_schedule))
        .route("/api/schedules/{key}/resume", post(resume_schedule))
        .route("/api/schedules/{key}/fires", get(schedule_fires))
        .route("/api/schedules/{key}/audit", get(schedule_audit))
}

#[utoipa::path(get, path = "/api/schedules", tag = "schedules",
    responses((status = 200, body = [ScheduleView], description = "Every schedule by name, with its next three fire times and its last fire"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_schedules(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<Vec<ScheduleView>>> {
    Ok(Json(state.db().schedules().await?))
}

#[utoipa::path(post, path = "/api/schedules", tag = "schedules",
    request_body = ScheduleInput,
    responses(
        (status = 201, body = ScheduleView, description = "The schedule, created", headers(("Location" = String))),
        (status = 400, body = ErrorBody, description = "`invalid_cron` (with the `field` at fault), `invalid_time_zone`, \
            `invalid_schedule` (name, target, unknown worker or pipeline, arguments that do not fit), `reason_required`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`schedule_name_taken`: another schedule has this name"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "The body does not have the expected fields (an unknown field included)")),
    security(("bearer" = [])))]
pub(crate) async fn create_schedule(
    Operator(caller): Operator,
    State(state): State<AppState>,
    JsonBody(input): JsonBody<ScheduleInput>,
) -> ApiResult<impl IntoResponse> {
    let view = state.db().create_schedule(state.catalogue(), &caller.name, &input).await?;
    let s = &view.schedule;
    tracing::info!(schedule = %s.name, schedule_id = %s.id, actor = %caller.name, action = "create",
        target_kind = %s.target_kind, target = %s.target, cron = %s.cron, time_zone = %s.time_zone,
        next_fire_at = ?s.next_fire_at, "schedule changed");
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/api/schedules/{}", s.id))], Json(view)))
}

#[utoipa::path(post, path = "/api/schedules/preview", tag = "schedules",
    request_body = PreviewInput,
    responses((status = 200, body = SchedulePreview, description = "The next three fire times after now (database clock)"),
        (status = 400, body = ErrorBody, description = "`invalid_cron` (with the `field` at fault) or `invalid_time_zone`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn preview_schedule(
    _: Viewer,
    State(state): State<AppState>,
    JsonBody(input): JsonBody<PreviewInput>,
) -> ApiResult<Json<SchedulePreview>> {
    let now = state.db().now().await?;
    Ok(Json(scrinalia_shared::schedules::preview(&input.cron, input.time_zone.as_deref(), now)?))
}

#[utoipa::path(get, path = "/api/schedules/{key}", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name")),
    responses((status = 200, body = ScheduleView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found`")),
    security(("bearer" = [])))]
pub(crate) async fn get_schedule(
    _: Viewer,
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> ApiResult<Json<ScheduleView>> {
    Ok(Json(state.db().schedule(&key).await?))
}

#[utoipa::path(put, path = "/api/schedules/{key}", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name")),
    request_body = ScheduleInput,
    responses((status = 200, body = ScheduleView, description = "The schedule, replaced; its next fire time is computed again from now"),
        (status = 400, body = ErrorBody, description = "As for `POST /api/schedules`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found`"),
        (status = 409, body = ErrorBody, description = "`schedule_name_taken`: another schedule has the new name"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn replace_schedule(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(key): Path<String>,
    JsonBody(input): JsonBody<ScheduleInput>,
) -> ApiResult<Json<ScheduleView>> {
    let view = state.db().replace_schedule(state.catalogue(), &key, &caller.name, &input).await?;
    let s = &view.schedule;
    tracing::info!(schedule = %s.name, schedule_id = %s.id, actor = %caller.name, action = "change",
        target_kind = %s.target_kind, target = %s.target, cron = %s.cron, time_zone = %s.time_zone,
        next_fire_at = ?s.next_fire_at, "schedule changed");
    Ok(Json(view))
}

/// What a pause and a resume take: the caller, the schedule's key and the reason (the body's, else `?reason=`).
/// axum extracts a tuple in order, as it would the same extractors given to the handler one by one, so both
/// routes refuse a bad request exactly as before.
type Toggle = (Operator, State<AppState>, Path<String>, QueryArgs<ReasonBody>, JsonBody<ReasonBody>);

/// Pauses or resumes a schedule: the handler of both routes, which differ only in the state they set.
async fn set_enabled(
    (Operator(caller), State(state), Path(key), QueryArgs(query), JsonBody(body)): Toggle,
    enabled: bool,
) -> ApiResult<Json<ScheduleView>> {
    let reason = body.or_query(query);
    let view = state.db().set_schedule_enabled(&key, enabled, &caller.name, reason.as_deref()).await?;
    let s = &view.schedule;
    let action = if enabled { "resume" } else { "pause" };
    tracing::info!(schedule = %s.name, schedule_id = %s.id, actor = %caller.name, action,
        next_fire_at = ?s.next_fire_at, "schedule changed");
    Ok(Json(view))
}

#[utoipa::path(post, path = "/api/schedules/{key}/pause", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name"), ReasonBody),
    request_body(content = Option<ReasonBody>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = ScheduleView, description = "The schedule, paused: no next fire time"),
        (status = 400, body = ErrorBody, description = "`reason_required`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found`"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn pause_schedule(request: Toggle) -> ApiResult<Json<ScheduleView>> {
    set_enabled(request, false).await
}

#[utoipa::path(post, path = "/api/schedules/{key}/resume", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name"), ReasonBody),
    request_body(content = Option<ReasonBody>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = ScheduleView, description = "The schedule, resumed: it fires from now on (what fell while it was paused is not a missed fire)"),
        (status = 400, body = ErrorBody, description = "`reason_required`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found`"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn resume_schedule(request: Toggle) -> ApiResult<Json<ScheduleView>> {
    set_enabled(request, true).await
}

#[utoipa::path(delete, path = "/api/schedules/{key}", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name"), ReasonBody),
    request_body(content = Option<ReasonBody>, description = "The reason, unless given as `?reason=`"),
    responses((status = 200, body = Schedule, description = "The schedule as it was; its fires and audit trail stay readable by id"),
        (status = 400, body = ErrorBody, description = "`reason_required`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found`"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn delete_schedule(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(key): Path<String>,
    QueryArgs(query): QueryArgs<ReasonBody>,
    JsonBody(body): JsonBody<ReasonBody>,
) -> ApiResult<Json<Schedule>> {
    let reason = body.or_query(query);
    let deleted = state.db().delete_schedule(&key, &caller.name, reason.as_deref()).await?;
    tracing::info!(schedule = %deleted.name, schedule_id = %deleted.id, actor = %caller.name, action = "delete",
        "schedule changed");
    Ok(Json(deleted))
}

/// The name of a schedule whose path is also the preview's.
const PREVIEW: &str = "preview";

async fn get_named_preview(viewer: Viewer, state: State<AppState>) -> ApiResult<Json<ScheduleView>> {
    get_schedule(viewer, state, Path(PREVIEW.to_owned())).await
}

async fn replace_named_preview(
    operator: Operator,
    state: State<AppState>,
    body: JsonBody<ScheduleInput>,
) -> ApiResult<Json<ScheduleView>> {
    replace_schedule(operator, state, Path(PREVIEW.to_owned()), body).await
}

async fn delete_named_preview(
    operator: Operator,
    state: State<AppState>,
    query: QueryArgs<ReasonBody>,
    body: JsonBody<ReasonBody>,
) -> ApiResult<Json<Schedule>> {
    delete_schedule(operator, state, Path(PREVIEW.to_owned()), query, body).await
}

#[utoipa::path(get, path = "/api/schedules/{key}/fires", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name (by id also after it was deleted)"), TrailLimit),
    responses((status = 200, body = [ScheduleFire], description = "Its fires, newest first"),
        (status = 400, body = ErrorBody, description = "`invalid_query`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found` (a name no schedule has)")),
    security(("bearer" = [])))]
pub(crate) async fn schedule_fires(
    _: Viewer,
    State(state): State<AppState>,
    Path(key): Path<String>,
    Limit(limit): TrailLimit,
) -> ApiResult<Json<Vec<ScheduleFire>>> {
    Ok(Json(state.db().schedule_fires(&key, limit).await?))
}

#[utoipa::path(get, path = "/api/schedules/{key}/audit", tag = "schedules",
    params(("key" = String, Path, description = "The schedule's id or name (by id also after it was deleted)"), TrailLimit),
    responses((status = 200, body = [ScheduleAuditEntry], description = "Who changed what, when and why (before and after); newest first"),
        (status = 400, body = ErrorBody, description = "`invalid_query`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`schedule_not_found` (a name no schedule has)")),
    security(("bearer" = [])))]
pub(crate) async fn schedule_audit(
    _: Viewer,
    State(state): State<AppState>,
    Path(key): Path<String>,
    Limit(limit): TrailLimit,
) -> ApiResult<Json<Vec<ScheduleAuditEntry>>> {
    Ok(Json(state.db().schedule_audit(&key, limit).await?))
}
