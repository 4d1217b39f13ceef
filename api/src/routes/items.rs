//! A run's items: one page at a time of what happened to each document, of one outcome, searchable by id (the
//! figures are in the run's detail).

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::get,
};
use scrinalia_wire::ItemPage;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{
    auth::Viewer,
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::{Limit, PageLimit, QueryArgs},
    routes::runs::parse_run_id,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/runs/{id}/items", get(run_items))
}

/// Which of a run's items.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// Only items of this outcome: `succeeded`, `failed` or `skipped`.
    outcome: Option<String>,
    /// Only items whose id contains this text (without regard to case).
    search: Option<String>,
    /// Only items after this id: the `next_after` of the page before.
    after: Option<String>,
}

/// The longest search text or `after` accepted: an item id is at most 512 bytes.
const MAX_QUERY_TEXT: usize = 512;

#[utoipa::path(get, path = "/api/runs/{id}/items", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The run's id (a UUID)"), ItemsQuery, PageLimit),
    responses((status = 200, body = ItemPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn run_items(
    _: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    QueryArgs(query): QueryArgs<ItemsQuery>,
    Limit(limit): PageLimit,
) -> ApiResult<Json<ItemPage>> {
    let id = parse_run_id(&id)?;
    let outcome = match query.outcome.as_deref() {
        None | Some("") => None,
        Some(outcome @ ("succeeded" | "failed" | "skipped")) => Some(outcome),
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("`outcome` must be succeeded, failed or skipped, not {}.", quote(other)),
            ));
        }
    };
    for (name, text) in [("search", &query.search), ("after", &query.after)] {
        if text.as_ref().is_some_and(|t| t.len() > MAX_QUERY_TEXT) {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("`{name}` may take at most {MAX_QUERY_TEXT} bytes: an item id is never longer."),
            ));
        }
        if text.as_ref().is_some_and(|t| t.contains('\0')) {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("`{name}` must not contain a NUL character: no item id holds one."),
            ));
        }
    }
    let after = query.after.as_deref().filter(|a| !a.is_empty());
    let (run, page) = tokio::try_join!(
        state.db().get_run(id),
        state.db().run_items(id, outcome, query.search.as_deref(), after, limit)
    )?;
    run.ok_or_else(|| ApiError::unknown_run(id))?;
    Ok(Json(page))
}
