//! A worker's history over its last days (success rate, duration percentiles, items and outcomes per day), the
//! figures behind the panel's charts.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::get,
};
use scrinalia_shared::history::{MAX_DAYS, WorkerHistory};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{
    auth::Viewer,
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::QueryArgs,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/workers/{name}/history", get(worker_history))
}

/// The window of a history.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// How many calendar days (UTC, today included), 1 to 90; 7 when absent.
    days: Option<String>,
}

impl HistoryQuery {
    fn days(&self) -> ApiResult<u32> {
        let Some(text) = self.days.as_deref().filter(|d| !d.is_empty()) else { return Ok(7) };
        text.parse::<u32>().ok().filter(|d| (1..=MAX_DAYS).contains(d)).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_query",
                format!("`days` must be a whole number from 1 to {MAX_DAYS}, not {}.", quote(text)),
            )
        })
    }
}

#[utoipa::path(get, path = "/api/workers/{name}/history", tag = "workers",
    params(("name" = String, Path, description = "The worker's name"), HistoryQuery),
    responses((status = 200, body = WorkerHistory), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody, description = "Unknown worker")),
    security(("bearer" = [])))]
pub(crate) async fn worker_history(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<HistoryQuery>,
) -> ApiResult<Json<WorkerHistory>> {
    let spec = state.catalogue().worker(&name).ok_or_else(|| ApiError::unknown_worker(&name))?;
    let days = query.days()?;
    Ok(Json(state.db().worker_history(&spec.name, days).await?))
}
