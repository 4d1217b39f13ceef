//! `GET /api/me`: who the caller is and which role it has, so that a client (the web panel, the archive's SPA)
//! shows only the controls that role allows. It grants nothing: every write still checks the role itself.

use axum::{Json, Router, routing::get};
use scrinalia_shared::auth::Role;
use serde::Serialize;
use utoipa::ToSchema;

use crate::{auth::Viewer, error::ErrorBody, state::AppState};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/me", get(me))
}

/// The caller.
#[derive(Debug, Serialize, ToSchema)]
pub struct MeView {
    /// The token's name, or `anonymous` (recorded as the actor of the caller's writes).
    pub name: String,
    /// `viewer` reads; `operator` also triggers and cancels runs; `admin` also edits overrides and drains daemons.
    pub role: Role,
}

#[utoipa::path(get, path = "/api/me", tag = "meta",
    responses((status = 200, body = MeView, description = "The caller's name and role"),
        (status = 401, body = ErrorBody, description = "No token (and no anonymous role), or an unknown token")),
    security(("bearer" = [])))]
pub(crate) async fn me(Viewer(caller): Viewer) -> Json<MeView> {
    Json(MeView { name: caller.name, role: caller.role })
}
