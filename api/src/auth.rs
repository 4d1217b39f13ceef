//! Who is calling: a bearer token matched against the configured hashes, or the anonymous role when one is
//! configured (optionally only for loopback peers). Handlers take [`Viewer`], [`Operator`] or [`Admin`], which
//! reject a caller below that role before anything else is read.

use std::net::SocketAddr;

use axum::{
    extract::{ConnectInfo, FromRequestParts},
    http::{header, request::Parts},
};
use scrinalia_shared::auth::{Role, hash_token, hashes_equal};

use crate::{error::ApiError, state::AppState};

/// The headers a proxy adds: a request that carries one did not come from the peer it came from, so the
/// loopback rule says nothing about who sent it.
const FORWARDING: [&str; 6] =
    ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "via"];

/// What anonymous access grants, for the start-up log: `None` when there is none.
pub fn anonymous_grant(auth: &scrinalia_shared::config::AuthSettings) -> Option<String> {
    let role = auth.anonymous_role?;
    let from = if auth.anonymous_loopback_only { "from the loopback interface" } else { "from any address" };
    let proxy = if auth.anonymous_through_proxy { "proxied requests included" } else { "not through a proxy" };
    Some(format!("requests without a token get the {role} role {from}, {proxy}"))
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name, or `anonymous`; recorded as the actor of every write.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

impl Caller {
    /// Identifies the caller of a request.
    pub fn identify(parts: &Parts, state: &AppState) -> Result<Self, ApiError> {
        let auth = &state.settings().auth;
        match parts.headers.get(header::AUTHORIZATION) {
            Some(value) => {
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
                    .map(str::trim)
                    .ok_or_else(|| {
                        ApiError::Unauthorized("The Authorization header must be `Bearer <token>`.".to_owned())
                    })?;
                let hash = hash_token(token);
                // Every configured hash is compared, so timing does not reveal which one matched.
                let mut found = None;
                for configured in &auth.tokens {
                    if hashes_equal(&hash, &configured.hash) && found.is_none() {
                        found = Some(Self { name: configured.name.clone(), role: configured.role });
                    }
                }
                found.ok_or_else(|| ApiError::Unauthorized("The bearer token is not one this API accepts.".to_owned()))
            }
            None => {
                let loopback = parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .is_some_and(|ConnectInfo(peer)| peer.ip().is_loopback());
                let forwarded = FORWARDING.iter().find(|h| parts.headers.contains_key(**h));
                match (auth.anonymous_role, forwarded) {
                    (Some(_), Some(header)) if !auth.anonymous_through_proxy => Err(ApiError::Unauthorized(format!(
                        "This request came through a proxy (it carries {header}), and anonymous access is not \
                         granted through a proxy: send `Authorization: Bearer <token>`."
                    ))),
                    (Some(role), _) if loopback || !auth.anonymous_loopback_only => {
                        Ok(Self { name: "anonymous".to_owned(), role })
                    }
                    _ => Err(ApiError::Unauthorized(
                        "This endpoint needs a bearer token: send `Authorization: Bearer <token>`.".to_owned(),
                    )),
                }
            }
        }
    }

    /// Refuses the caller unless it has at least `needed`.
    pub fn require(self, needed: Role) -> Result<Self, ApiError> {
        if self.role >= needed { Ok(self) } else { Err(ApiError::forbidden(needed, &self.describe(), self.role)) }
    }

    fn describe(&self) -> String {
        if self.name == "anonymous" { "an anonymous caller".to_owned() } else { format!("the token {:?}", self.name) }
    }
}

macro_rules! role_extractor {
    ($(#[$doc:meta])* $name:ident, $role:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub Caller);

        impl FromRequestParts<AppState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
                Caller::identify(parts, state)?.require($role).map(Self)
            }
        }
    };
}

role_extractor!(
    /// A caller with at least the viewer role (reads).
    Viewer,
    Role::Viewer
);
role_extractor!(
    /// A caller with at least the operator role (triggers and cancels runs).
    Operator,
    Role::Operator
);
role_extractor!(
    /// A caller with the admin role (edits overrides, drains daemons).
    Admin,
    Role::Admin
);
