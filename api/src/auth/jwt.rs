//! OpenID Connect access tokens: a bearer that looks like a JWT is checked against `[auth.oidc]` — the header's
//! algorithm against the allow-list (public-key algorithms only: never `none`, never HMAC, so the issuer's public
//! key can never serve as a shared secret), its `kid` against the issuer's published keys (JWKS, cached; fetched
//! again when older than `jwks_max_age_seconds`, or for an unknown `kid` at most once per
//! `jwks_refetch_seconds`), then the signature, `exp`/`nbf` (with the leeway), `iss`, `aud` and `sub`.
//!
//! The caller is the person, named `Display Name <subject>`: the display name (`display_name_claim`, else
//! `preferred_username`) for people reading the audit trail, the issuer's stable subject so that two people with
//! one name, or a renamed person, stay apart. Their role is the highest that a value of `roles_claim` maps to in
//! `[auth.groups]`. Every refusal is a 401 whose sentence says why; the header and claims are read unverified only
//! to word those sentences, never to decide.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::{PoisonError, RwLock},
    time::{Duration, Instant},
};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind, jwk::Jwk};
use scrinalia_shared::{
    Role,
    config::{OidcSettings, role_of},
};
use serde_json::Value;

use crate::error::ApiError;

/// The longest display name kept in an identity.
const MAX_DISPLAY: usize = 100;

/// Whether a bearer has the shape of a JWT (three dot-separated parts; the signature may be empty, as in an
/// `alg: none` token, which is then refused by name).
pub fn looks_like_jwt(token: &str) -> bool {
    !token.starts_with("scr_") && token.split('.').count() == 3 && !token.starts_with('.')
}

/// The issuer's keys as last read.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, DecodingKey>,
    read: Option<Instant>,
}

/// The checker of one issuer's access tokens, with its cache of keys.
pub struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    keys: RwLock<Keys>,
    /// When the keys were last fetched (or tried) and why that failed; held while a fetch is under way.
    fetching: tokio::sync::Mutex<Fetching>,
}

/// The last fetch of the keys.
#[derive(Debug, Default)]
struct Fetching {
    at: Option<Instant>,
    error: Option<String>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc").field("issuer", &self.settings.issuer).finish_non_exhaustive()
    }
}

/// A person the token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// `Display Name <subject>`.
    pub name: String,
    /// The highest mapped role.
    pub role: Role,
}

fn refused(message: impl Into<String>) -> ApiError {
    ApiError::Unauthorized(message.into())
}

/// A part of a JWT as JSON, unverified.
fn part(token: &str, index: usize) -> Option<Value> {
    let text = token.split('.').nth(index)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A claim by dotted path (`realm_access.roles`).
fn claim<'a>(claims: &'a Value, path: &str) -> Option<&'a Value> {
    claims.get(path).or_else(|| path.split('.').try_fold(claims, |v, key| v.get(key)))
}

/// Text fit for an audit trail: no control, bidirectional or invisible characters, at most `max` characters.
fn clean(text: &str, max: usize) -> String {
    scrinalia_shared::names::clean_name(text, max)
}

/// The most of a JWKS read: an issuer publishes a few keys, a few kilobytes.
const MAX_JWKS_BYTES: usize = 1 << 20;

fn time_of(claims: &Value, name: &str) -> String {
    claims
        .get(name)
        .and_then(Value::as_i64)
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map_or_else(|| "an unreadable time".to_owned(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

impl Oidc {
    /// The checker for `settings` (validated at load); `http` fetches the keys.
    pub fn new(settings: OidcSettings, http: reqwest::Client) -> Self {
        Self { settings, http, keys: RwLock::default(), fetching: tokio::sync::Mutex::default() }
    }

    /// Checks an access token; the person it names, with their role from `groups`.
    pub async fn verify(&self, token: &str, groups: &BTreeMap<String, Role>) -> Result<Person, ApiError> {
        let s = &self.settings;
        let header = part(token, 0).ok_or_else(|| {
            refused("The bearer token looks like a JWT, but its header is not base64url-encoded JSON.")
        })?;
        let alg_name = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if !s.algorithms.iter().any(|a| a == alg_name) {
            return Err(refused(format!(
                "The access token's algorithm {alg_name:?} is not allowed; this API accepts {} only.",
                s.algorithms.join(", ")
            )));
        }
        let alg: Algorithm =
            alg_name.parse().map_err(|_| refused(format!("The algorithm {alg_name:?} is unknown.")))?;
        let kid = header.get("kid").and_then(Value::as_str).unwrap_or("").to_owned();
        let key = self.key(&kid).await?;
        if key.family() != alg.family() {
            return Err(refused(format!(
                "The access token says it is signed with {alg_name}, but the issuer's key {kid:?} is not a key of that kind."
            )));
        }
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.leeway = s.leeway_seconds;
        validation.validate_nbf = true;
        validation.set_issuer(&[&s.issuer]);
        validation.set_audience(&[&s.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let unverified = part(token, 1).unwrap_or(Value::Null);
        let claims = match jsonwebtoken::decode::<Value>(token, &key, &validation) {
            Ok(data) => data.claims,
            Err(e) => return Err(refused(self.why(e.kind(), &unverified, &kid))),
        };
        let subject = claims.get("sub").and_then(Value::as_str).map(|s| clean(s, 200)).unwrap_or_default();
        if subject.is_empty() {
            return Err(refused("The access token's `sub` claim is empty: it names nobody."));
        }
        let display = [s.display_name_claim.as_str(), "preferred_username"]
            .iter()
            .find_map(|c| claim(&claims, c).and_then(Value::as_str).map(|d| clean(d, MAX_DISPLAY)))
            .filter(|d| !d.is_empty());
        let name = match display {
            Some(d) => format!("{d} <{subject}>"),
            None => format!("<{subject}>"),
        };
        let values: Vec<&str> = match claim(&claims, &s.roles_claim) {
            Some(Value::String(one)) => vec![one.as_str()],
            Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        match role_of(groups, values.iter().copied()) {
            Some(role) => Ok(Person { name, role }),
            None => Err(no_role(&name, &s.roles_claim, &values)),
        }
    }

    /// The sentence of a refusal by the library.
    fn why(&self, kind: &ErrorKind, claims: &Value, kid: &str) -> String {
        let s = &self.settings;
        match kind {
            ErrorKind::ExpiredSignature => format!(
                "The access token expired at {} (with a leeway of {} s); get a new one from the issuer.",
                time_of(claims, "exp"),
                s.leeway_seconds
            ),
            ErrorKind::ImmatureSignature => {
                format!("The access token is not valid before {} (its `nbf`).", time_of(claims, "nbf"))
            }
            ErrorKind::InvalidIssuer => format!(
                "The access token was issued by {}, not by the issuer this API trusts ({:?}).",
                claims.get("iss").map_or_else(|| "nobody".to_owned(), Value::to_string),
                s.issuer
            ),
            ErrorKind::InvalidAudience => format!(
                "The access token is meant for {}, not for this API (its audience is {:?}).",
                claims.get("aud").map_or_else(|| "no audience".to_owned(), Value::to_string),
                s.audience
            ),
            ErrorKind::InvalidSignature => {
                format!("The access token's signature does not verify with the issuer's key {kid:?}.")
            }
            ErrorKind::MissingRequiredClaim(c) => {
                format!("The access token has no `{c}` claim, which this API requires.")
            }
            ErrorKind::InvalidClaimFormat(c) => format!("The access token's `{c}` claim is malformed."),
            ErrorKind::InvalidAlgorithm => "The access token's algorithm does not match the issuer's key.".to_owned(),
            other => format!("The access token cannot be read ({other:?})."),
        }
    }

    /// The key `kid`, fetching the issuer's keys when they are older than `jwks_max_age_seconds` or do not have
    /// `kid`, at most once per `jwks_refetch_seconds` (a stream of tokens with made-up `kid`s does not become a
    /// stream of fetches).
    async fn key(&self, kid: &str) -> Result<DecodingKey, ApiError> {
        let s = &self.settings;
        let max_age = Duration::from_secs(s.jwks_max_age_seconds);
        if let (Some(key), true) = self.cached(kid, max_age) {
            return Ok(key);
        }
        let mut last = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let (found, fresh) = self.cached(kid, max_age);
        if let (Some(key), true) = (&found, fresh) {
            return Ok(key.clone());
        }
        if last.at.is_none_or(|at| at.elapsed() >= Duration::from_secs(s.jwks_refetch_seconds)) {
            last.at = Some(Instant::now());
            match self.fetch().await {
                Ok(keys) => {
                    tracing::info!(issuer = %s.issuer, keys = keys.len(), "read the issuer's keys");
                    last.error = None;
                    *self.keys.write().unwrap_or_else(PoisonError::into_inner) =
                        Keys { by_kid: keys, read: Some(Instant::now()) };
                }
                Err(e) => {
                    tracing::warn!(issuer = %s.issuer, error = %e, "cannot read the issuer's keys; using those read before, if any");
                    last.error = Some(e);
                }
            }
        }
        if let Some(key) = self.cached(kid, Duration::MAX).0.or(found) {
            return Ok(key);
        }
        match (&last.error, self.has_keys()) {
            (Some(e), false) => Err(ApiError::unavailable(
                "oidc_keys_unavailable",
                format!("The issuer's keys cannot be read right now ({e}); try again shortly."),
            )),
            _ => Err(self.unknown(kid)),
        }
    }

    fn has_keys(&self) -> bool {
        !self.keys.read().unwrap_or_else(PoisonError::into_inner).by_kid.is_empty()
    }

    fn unknown(&self, kid: &str) -> ApiError {
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let mut known: Vec<&str> = keys.by_kid.keys().map(String::as_str).collect();
        known.sort_unstable();
        refused(format!(
            "The access token is signed with the key {kid:?}, which the issuer does not publish (its keys: {}).",
            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
        ))
    }

    /// The cached key `kid` (a token without a `kid` takes the issuer's only key), and whether the cache is
    /// younger than `max_age`.
    fn cached(&self, kid: &str, max_age: Duration) -> (Option<DecodingKey>, bool) {
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let fresh = keys.read.is_some_and(|at| at.elapsed() < max_age);
        let key = match (kid, keys.by_kid.len()) {
            ("", 1) => keys.by_kid.values().next().cloned(),
            _ => keys.by_kid.get(kid).cloned(),
        };
        (key, fresh)
    }

    /// Reads the issuer's keys (`jwks_url` or `jwks_file`): the public keys with a `kid`, each usable for
    /// signatures; symmetric keys are ignored.
    async fn fetch(&self) -> Result<HashMap<String, DecodingKey>, String> {
        let s = &self.settings;
        let body: Value = match (&s.jwks_url, &s.jwks_file) {
            (Some(url), _) => {
                let response = self.http.get(url).send().await.map_err(|e| format!("{url}: {e}"))?;
                if response.status().is_redirection() {
                    return Err(format!(
                        "{url} answered {} (a redirect, not followed): configure the keys' final URL",
                        response.status()
                    ));
                }
                let response = response.error_for_status().map_err(|e| format!("{url}: {e}"))?;
                let bytes = read_bounded(response, MAX_JWKS_BYTES).await.map_err(|e| format!("{url}: {e}"))?;
                serde_json::from_slice(&bytes).map_err(|e| format!("{url} is not a JWKS: {e}"))?
            }
            (None, Some(path)) => read_file(path).await?,
            (None, None) => return Err("neither jwks_url nor jwks_file is configured".to_owned()),
        };
        let mut keys = HashMap::new();
        for value in body.get("keys").and_then(Value::as_array).into_iter().flatten() {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else { continue };
            if value.get("kty").and_then(Value::as_str) == Some("oct")
                || value.get("use").and_then(Value::as_str) == Some("enc")
            {
                continue;
            }
            if let Ok(key) = DecodingKey::from_jwk(&jwk) {
                keys.insert(jwk.common.key_id.clone().unwrap_or_default(), key);
            }
        }
        Ok(keys)
    }
}

/// The body of `response`, refused once it passes `max` bytes (an issuer that sends without end is not read
/// into memory).
async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let too_big = || format!("the answer is larger than {max} bytes, which no set of keys is");
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn read_file(path: &Path) -> Result<Value, String> {
    let text = tokio::fs::read(path).await.map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{} is not a JWKS: {e}", path.display()))
}

/// 403 for a person none of whose groups maps to a role.
pub fn no_role(name: &str, source: &str, values: &[&str]) -> ApiError {
    let groups = if values.is_empty() {
        format!("no {source} are given")
    } else {
        format!("none of {} maps to a role", values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", "))
    };
    ApiError::client(
        axum::http::StatusCode::FORBIDDEN,
        "no_role",
        format!("You are signed in as {name}, but {groups}; an admin maps groups to roles in [auth.groups]."),
    )
}
