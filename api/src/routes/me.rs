//! `GET /api/me`: who the caller is and which role it has, so that a client (the web panel, the archive's SPA)
//! shows only the controls that role allows. It grants nothing: every write still checks the role itself.
//! `GET /api/signin`: how a person can sign in, read before anyone has, so it needs no token.

use axum::{Json, Router, extract::State, routing::get};
use scrinalia_wire::{MeView, OidcSignIn, SignInView};

use crate::{auth::Viewer, error::ErrorBody, state::AppState};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/me", get(me)).route("/api/signin", get(signin))
}

#[utoipa::path(get, path = "/api/signin", tag = "meta",
    responses((status = 200, body = SignInView, description = "How a person signs in to the panel")))]
pub(crate) async fn signin(State(state): State<AppState>) -> Json<SignInView> {
    let oidc = state.settings().auth.oidc.as_ref().and_then(|o| {
        o.panel.as_ref().map(|p| OidcSignIn {
            issuer: o.issuer.clone(),
            client_id: p.client_id.clone(),
            authorization_endpoint: p.authorization_endpoint.clone(),
            token_endpoint: p.token_endpoint.clone(),
            scope: p.scope.clone(),
        })
    });
    Json(SignInView { oidc })
}

#[utoipa::path(get, path = "/api/me", tag = "meta",
    responses((status = 200, body = MeView, description = "The caller's name and role"),
        (status = 401, body = ErrorBody, description = "No token (and no anonymous role), or an unknown token")),
    security(("bearer" = [])))]
pub(crate) async fn me(Viewer(caller): Viewer) -> Json<MeView> {
    Json(MeView { name: caller.name, role: caller.role })
}
