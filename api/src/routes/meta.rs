//! Liveness (`/healthz`), readiness (`/readyz`: the database answers), and the JSON answers for unknown routes.

use std::time::Duration;

use axum::{
    Json, Router,
    extract::State,
    http::Uri,
    response::{IntoResponse, Response},
    routing::get,
};
use scrinalia_wire::StatusBody;

use crate::{
    error::{ApiError, ErrorBody},
    state::AppState,
};

/// How long readiness waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, body = StatusBody, description = "The process is alive")))]
pub(crate) async fn healthz() -> Json<StatusBody> {
    Json(StatusBody { status: "alive".to_owned(), warning: None })
}

#[utoipa::path(get, path = "/readyz", tag = "meta",
    responses((status = 200, body = StatusBody, description = "The database answers"),
        (status = 503, body = ErrorBody, description = "The database does not answer")))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let failure = match tokio::time::timeout(READY_TIMEOUT, state.db().ping()).await {
        Ok(Ok(())) => {
            let warning = state.db().feed_polled().map(str::to_owned);
            return Json(StatusBody { status: "ready".to_owned(), warning }).into_response();
        }
        Ok(Err(e)) => format!("The database does not answer: {e}."),
        Err(_) => format!("The database did not answer within {} seconds.", READY_TIMEOUT.as_secs()),
    };
    ApiError::unavailable("not_ready", failure).into_response()
}

/// The answer for a route that does not exist.
pub(crate) async fn not_found(uri: Uri) -> ApiError {
    ApiError::no_route(uri.path())
}
