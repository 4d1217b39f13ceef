//! Who is calling, in this order: a bearer that looks like a JWT is an OpenID Connect access token (`jwt`); any
//! other bearer is matched against the configured hashes and then the service tokens an admin created (`tokens`,
//! kept current by a background task); without a bearer, a trusted proxy may name the person (`proxy`); else the
//! anonymous role when one is configured (only for loopback peers unless `anonymous_loopback_only = false`, and
//! not through a proxy unless allowed). A request counts as proxied when it carries a forwarding header or comes
//! from an address of `[auth.proxy].trusted`: the headers alone say nothing when the proxy sends none, and a proxy
//! on the same host makes every request a loopback one, so a configured proxy's address is never anonymous. Handlers take [`Viewer`], [`Operator`] or [`Admin`], which reject a caller below that role before
//! anything else is read.

pub mod jwt;
pub mod proxy;
pub mod tokens;

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{
    extract::{ConnectInfo, FromRequestParts},
    http::{header, request::Parts},
};
use scrinalia_shared::{
    auth::{Role, hash_token, hashes_equal},
    config::{AuthSettings, Peer},
    tokens::{Check, TokenMap},
};
use tokio::sync::Notify;

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

/// What authentication keeps between requests: the map of service tokens (and what wakes its refresher), the
/// OpenID Connect issuer's keys and the proxy's trusted addresses.
#[derive(Debug)]
pub struct AuthState {
    tokens: Arc<TokenMap>,
    tokens_changed: Arc<Notify>,
    oidc: Option<jwt::Oidc>,
    trusted: Vec<Peer>,
}

impl AuthState {
    /// The state for `settings` (validated at load); the service tokens' map starts empty until its first
    /// refresh, and the issuer's keys are read at the first access token.
    pub fn new(settings: &AuthSettings) -> Self {
        // The issuer's keys: a redirect is not followed (the configured URL is the one trusted, and https to
        // it must not turn into http elsewhere), and the body read is bounded (`jwt`).
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let oidc = settings.oidc.clone().map(|o| jwt::Oidc::new(o, http));
        let trusted: Vec<Peer> =
            settings.proxy.iter().flat_map(|p| &p.trusted).filter_map(|t| Peer::parse(t).ok()).collect();
        if let Some(o) = &settings.oidc {
            tracing::info!(issuer = %o.issuer, audience = %o.audience, "OpenID Connect access tokens are accepted");
        }
        if let Some(p) = &settings.proxy {
            tracing::info!(trusted = ?p.trusted, user_header = %p.user_header, secret_header = ?p.secret_header,
                "a trusted proxy may name people");
            let wide: Vec<&Peer> =
                trusted.iter().filter(|t| t.prefix() < scrinalia_shared::config::WIDEST_TRUST_PREFIX).collect();
            if !wide.is_empty() {
                tracing::warn!(trusted = ?p.trusted, secret_header = ?p.secret_header,
                    "auth.proxy.allow_wide_trust is set: a network wider than a /8 may name people in the proxy's \
                     headers; anyone there can name themselves admin unless the secret header proves the proxy");
            }
        }
        Self { tokens: Arc::new(TokenMap::default()), tokens_changed: Arc::new(Notify::new()), oidc, trusted }
    }

    /// The service tokens as this process knows them.
    pub fn tokens(&self) -> &TokenMap {
        &self.tokens
    }

    /// Notified when the service tokens changed or may have (the live relay hears it on the change feed): the
    /// refresher then reads them at once. A notification sent while the refresher is busy is kept for its next
    /// wait, so none is lost.
    pub fn tokens_changed(&self) -> &Arc<Notify> {
        &self.tokens_changed
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name, the person (`Ada Lovelace <subject>`, `ada (via proxy)`), or `anonymous`; recorded as
    /// the actor of every write.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// How it signed in.
    pub kind: CallerKind,
}

/// How a caller signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerKind {
    /// A configured or a service token.
    Token,
    /// A person: an OpenID Connect access token, or a trusted proxy.
    Person,
    /// No token, with the anonymous role.
    Anonymous,
}

impl Caller {
    /// Identifies the caller of a request.
    pub async fn identify(parts: &Parts, state: &AppState) -> Result<Self, ApiError> {
        let auth = &state.settings().auth;
        let peer: Option<IpAddr> = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(p)| p.ip());
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
                .map(str::trim)
                .ok_or_else(|| {
                    ApiError::Unauthorized("The Authorization header must be `Bearer <token>`.".to_owned())
                })?;
            if !jwt::looks_like_jwt(token) {
                return Self::by_hash(token, auth, state.auth().tokens());
            }
            let Some(oidc) = &state.auth().oidc else {
                return Err(ApiError::Unauthorized(
                    "The bearer token is a JWT, but this API accepts no OpenID Connect access tokens ([auth.oidc] \
                     is not configured)."
                        .to_owned(),
                ));
            };
            let person = oidc.verify(token, &auth.groups).await?;
            return Ok(Self { name: person.name, role: person.role, kind: CallerKind::Person });
        }
        if let Some(proxy) = &auth.proxy
            && let Some(person) = proxy::person(parts, peer, proxy, &state.auth().trusted, &auth.groups)
        {
            let (name, role) = person?;
            return Ok(Self { name, role, kind: CallerKind::Person });
        }
        let loopback = peer.is_some_and(|ip| ip.to_canonical().is_loopback());
        let proxied = FORWARDING
            .iter()
            .find(|h| parts.headers.contains_key(**h))
            .map(|header| format!("it carries {header}"))
            .or_else(|| {
                (auth.proxy.is_some() && proxy::is_trusted(peer, &state.auth().trusted))
                    .then(|| "it comes from an address of [auth.proxy].trusted".to_owned())
            });
        match (auth.anonymous_role, proxied) {
            (Some(_), Some(why)) if !auth.anonymous_through_proxy => Err(ApiError::Unauthorized(format!(
                "This request came through a proxy ({why}), and anonymous access is not granted through a \
                 proxy: send `Authorization: Bearer <token>`."
            ))),
            (Some(role), _) if loopback || !auth.anonymous_loopback_only => {
                Ok(Self { name: "anonymous".to_owned(), role, kind: CallerKind::Anonymous })
            }
            _ => Err(ApiError::Unauthorized(
                "This endpoint needs a bearer token: send `Authorization: Bearer <token>`.".to_owned(),
            )),
        }
    }

    /// A `scr_…` bearer: a configured token, else a service token of the map.
    fn by_hash(token: &str, auth: &AuthSettings, map: &TokenMap) -> Result<Self, ApiError> {
        let hash = hash_token(token);
        // Every configured hash is compared, so timing does not reveal which one matched.
        let mut found = None;
        for configured in &auth.tokens {
            if hashes_equal(&hash, &configured.hash) && found.is_none() {
                found = Some(Self { name: configured.name.clone(), role: configured.role, kind: CallerKind::Token });
            }
        }
        if let Some(caller) = found {
            return Ok(caller);
        }
        match map.check(&hash) {
            Check::Accepted { name, role } => Ok(Self { name, role, kind: CallerKind::Token }),
            Check::Expired { name, at } => Err(ApiError::Unauthorized(format!(
                "The bearer token {name:?} expired at {}; ask an admin for a new one.",
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ))),
            Check::Revoked { name, at } => Err(ApiError::Unauthorized(format!(
                "The bearer token {name:?} was revoked at {}; ask an admin for a new one.",
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ))),
            Check::Unknown => Err(ApiError::Unauthorized("The bearer token is not one this API accepts.".to_owned())),
            Check::Stale => Err(ApiError::unavailable(
                "tokens_unavailable",
                "The service tokens cannot be checked right now (the database has not answered for seconds); \
                 try again shortly.",
            )),
        }
    }

    /// Refuses the caller unless it has at least `needed`.
    pub fn require(self, needed: Role) -> Result<Self, ApiError> {
        if self.role >= needed { Ok(self) } else { Err(ApiError::forbidden(needed, &self.describe(), self.role)) }
    }

    fn describe(&self) -> String {
        match self.kind {
            CallerKind::Anonymous => "an anonymous caller".to_owned(),
            CallerKind::Token => format!("the token {:?}", self.name),
            CallerKind::Person => self.name.clone(),
        }
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
                Caller::identify(parts, state).await?.require($role).map(Self)
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
