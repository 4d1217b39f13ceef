//! A worker's quarantine: the documents that failed in `quarantine_after` runs in a row, which its later runs
//! skip, with their last errors; and their release, one or all, by an operator with a reason (audited).

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, post},
};
use scrinalia_shared::{items::MAX_ID_BYTES, quarantine::QuarantineError};
use scrinalia_wire::{QuarantineView, Reason, ReleaseBody};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    auth::{Operator, Viewer},
    error::{ApiError, ApiResult, ErrorBody},
    extract::JsonBody,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workers/{name}/quarantine", get(get_quarantine))
        .route("/api/workers/{name}/quarantine/release", post(release))
}

#[utoipa::path(get, path = "/api/workers/{name}/quarantine", tag = "workers",
    params(("name" = String, Path, description = "The worker's name")),
    responses((status = 200, body = QuarantineView), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown worker")),
    security(("bearer" = [])))]
pub(crate) async fn get_quarantine(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<QuarantineView>> {
    Ok(Json(state.db().quarantine(state.catalogue(), &name).await?))
}

/// What a release did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Released {
    /// How many items were released.
    pub released: u64,
}

#[utoipa::path(post, path = "/api/workers/{name}/quarantine/release", tag = "workers",
    params(("name" = String, Path, description = "The worker's name")),
    request_body(content = ReleaseBody, description = "The item (every quarantined one when absent) and the reason"),
    responses((status = 200, body = Released), (status = 400, body = ErrorBody, description = "No reason, or an item id no item has"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown worker, or the item is not quarantined"),
        (status = 409, body = ErrorBody, description = "`no_quarantine`: the worker has no quarantine"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "The body does not have the expected fields")),
    security(("bearer" = [])))]
pub(crate) async fn release(
    Operator(caller): Operator,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> ApiResult<Json<Released>> {
    let reason = Reason::new(body.reason.as_deref(), "the quarantine")?;
    let item = body.item.as_deref().filter(|i| !i.is_empty());
    if let Some(item) = item.filter(|i| i.len() > MAX_ID_BYTES || i.contains('\0')) {
        return Err(ApiError::bad_request(
            "invalid_item",
            format!(
                "No item has the id {}: an item id takes at most {MAX_ID_BYTES} bytes and no NUL character.",
                crate::error::quote(&item.chars().take(80).collect::<String>())
            ),
        ));
    }
    let released = state.db().release_quarantine(state.catalogue(), &name, item, &caller.name, &reason).await?;
    tracing::info!(worker = %name, item, released, actor = %caller.name, "quarantine released");
    Ok(Json(Released { released }))
}

impl From<QuarantineError> for ApiError {
    fn from(e: QuarantineError) -> Self {
        let message = e.to_string();
        match e {
            QuarantineError::UnknownWorker(_) => Self::not_found("unknown_worker", message),
            QuarantineError::Off(_) => Self::conflict("no_quarantine", message),
            QuarantineError::NotQuarantined { .. } => Self::not_found("not_quarantined", message),
            QuarantineError::Database(e) => e.into(),
        }
    }
}
