//! Service tokens, managed without a restart (admin only): create one (its secret is answered this once), list
//! them without secrets, revoke one. Every API process honours or refuses a change within a second
//! (`scrinalia_shared::tokens` says how); this process applies its own changes at once.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::IntoResponse,
    routing::{delete, get},
};
use scrinalia_shared::tokens::{NewToken, TokenError, parse_expiry, parse_role};
use scrinalia_wire::{CreateTokenBody, CreatedToken, ServiceToken, ServiceTokens};
use uuid::Uuid;

use crate::{
    auth::Admin,
    error::{ApiError, ApiResult, ErrorBody},
    extract::JsonBody,
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/tokens", get(list_tokens).post(create_token))
        .route("/api/tokens/{id}", delete(revoke_token))
}

impl From<TokenError> for ApiError {
    fn from(e: TokenError) -> Self {
        match e {
            TokenError::Database(e) => e.into(),
            TokenError::NotFound(id) => Self::not_found("token_not_found", e.to_string()).with("id", id),
            TokenError::NameTaken(ref name) | TokenError::NameReserved(ref name) => {
                let name = name.clone();
                Self::conflict("token_name_taken", e.to_string()).with("name", name)
            }
            TokenError::AlreadyRevoked { .. } => Self::conflict("token_revoked", e.to_string()),
            TokenError::InvalidName(_) | TokenError::UnsafeName { .. } => {
                Self::bad_request("invalid_token_name", e.to_string())
            }
            TokenError::InvalidRole(_) => Self::bad_request("invalid_role", e.to_string()),
            TokenError::InvalidExpiry(_) | TokenError::ExpiryPassed(_) => {
                Self::bad_request("invalid_expiry", e.to_string())
            }
        }
    }
}

#[utoipa::path(post, path = "/api/tokens", tag = "tokens", request_body = CreateTokenBody,
    responses((status = 201, body = CreatedToken, description = "The token, with its secret: shown this once"),
        (status = 400, body = ErrorBody, description = "A bad name, role or expiry"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "Not an admin"),
        (status = 409, body = ErrorBody, description = "`token_name_taken`: the name is taken"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "`invalid_body`: not JSON of this shape")),
    security(("bearer" = [])))]
pub(crate) async fn create_token(
    Admin(caller): Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CreateTokenBody>,
) -> ApiResult<impl IntoResponse> {
    let role = body.role.as_deref().ok_or_else(|| {
        ApiError::bad_request("invalid_role", "Give the token a role: \"viewer\", \"operator\" or \"admin\".")
    })?;
    let token = NewToken {
        name: body.name.trim().to_owned(),
        role: parse_role(role)?,
        expires_at: body.expires_at.as_deref().map(parse_expiry).transpose()?,
    };
    let reserved: Vec<&str> = state.settings().auth.tokens.iter().map(|t| t.name.as_str()).collect();
    let created = state.db().create_token(&token, &caller.name, &reserved).await?;
    state.auth().tokens().created(&created);
    tracing::info!(token.id = %created.token.id, token.name = %created.token.name, token.role = %created.token.role,
        actor = %caller.name, "service token created");
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(get, path = "/api/tokens", tag = "tokens",
    responses((status = 200, body = ServiceTokens, description = "Every service token, oldest first, without secrets"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "Not an admin")),
    security(("bearer" = [])))]
pub(crate) async fn list_tokens(_: Admin, State(state): State<AppState>) -> ApiResult<Json<ServiceTokens>> {
    Ok(Json(ServiceTokens { tokens: state.db().list_tokens().await? }))
}

#[utoipa::path(delete, path = "/api/tokens/{id}", tag = "tokens",
    params(("id" = Uuid, Path, description = "The token's id (a UUID)")),
    responses((status = 200, body = ServiceToken, description = "Revoked: refused by every API process within a second"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "Not an admin"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`token_revoked`: it was revoked already")),
    security(("bearer" = [])))]
pub(crate) async fn revoke_token(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ServiceToken>> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::invalid_id("token", &id))?;
    let revoked = state.db().revoke_token(id, &caller.name).await?;
    state.auth().tokens().revoked(&revoked);
    tracing::info!(token.id = %id, token.name = %revoked.name, actor = %caller.name, "service token revoked");
    Ok(Json(revoked))
}
