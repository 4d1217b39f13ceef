//! What bounds a live stream (`GET /api/events`, a followed log): a caller may hold at most
//! `api.streams_per_caller` of them at once (the next is answered 429), and each is re-checked every
//! [`RECHECK_EVERY`] against what authentication knows without asking the database — the service tokens' map,
//! which its refresher keeps within a second of the database (on the change feed's word, or by polling), and a
//! JWT's `exp` — so that a stream ends soon after its token is revoked or expires instead of outliving it by
//! hours. A configured token, a proxied person and the anonymous role have nothing that ends while the process
//! runs.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::{
    extract::FromRequestParts,
    http::{StatusCode, header, request::Parts},
};
use base64::Engine;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use scrinalia_shared::{
    auth::{hash_token, hashes_equal},
    tokens::Check,
};

use crate::{
    auth::{Caller, Viewer, jwt},
    error::ApiError,
    state::AppState,
};

/// How often a stream's caller is checked again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// The open streams of this process, by caller.
#[derive(Debug)]
pub struct Streams {
    per_caller: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl Streams {
    /// At most `per_caller` streams per caller.
    pub fn new(per_caller: usize) -> Self {
        Self { per_caller, open: Arc::default() }
    }

    /// Counts one more stream of `caller`, or refuses it with a 429 when the caller holds its share already.
    fn open(&self, caller: &Caller) -> Result<Slot, ApiError> {
        let key = format!("{:?}:{}", caller.kind, caller.name);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key.clone()).or_default();
        if *count >= self.per_caller {
            return Err(ApiError::client(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!(
                    "{} has {} live streams open already, the most one caller may hold (api.streams_per_caller); \
                     close one first.",
                    caller.name, self.per_caller
                ),
            )
            .with("limit", self.per_caller));
        }
        *count += 1;
        Ok(Slot { open: self.open.clone(), key })
    }
}

/// One stream counted against its caller; dropped with the stream.
#[derive(Debug)]
struct Slot {
    open: Arc<Mutex<HashMap<String, usize>>>,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// What can end a caller's right to a stream while it is open.
#[derive(Debug, Clone)]
enum Ends {
    /// Nothing does (a configured token, a proxied person, the anonymous role).
    Never,
    /// A service token: its revocation or expiry, as the map says.
    ServiceToken(String),
    /// An OpenID Connect access token: its `exp`.
    At(DateTime<Utc>),
}

/// A caller with at least the viewer role who asks for a live stream, with what may end its right to it.
#[derive(Debug)]
pub struct Watcher {
    caller: Caller,
    ends: Ends,
}

impl FromRequestParts<AppState> for Watcher {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        // The role is checked first, as for every route; the bearer is then read again only to know what ends it.
        let Viewer(caller) = Viewer::from_request_parts(parts, state).await?;
        let bearer = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        let ends = match bearer {
            None => Ends::Never,
            Some(token) if jwt::looks_like_jwt(token) => expiry(token).map_or(Ends::Never, Ends::At),
            Some(token) => {
                let hash = hash_token(token);
                let configured = state.settings().auth.tokens.iter().any(|t| hashes_equal(&hash, &t.hash));
                if configured { Ends::Never } else { Ends::ServiceToken(hash) }
            }
        };
        Ok(Self { caller, ends })
    }
}

/// The `exp` of a JWT that was verified already (so its payload is read without checking it again).
fn expiry(token: &str) -> Option<DateTime<Utc>> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    DateTime::from_timestamp(claims.get("exp")?.as_i64()?, 0)
}

impl Watcher {
    /// Why the caller may no longer watch, if that is so now.
    fn ended(&self, state: &AppState) -> Option<&'static str> {
        match &self.ends {
            Ends::Never => None,
            Ends::At(at) => (Utc::now() >= *at).then_some("the access token expired"),
            Ends::ServiceToken(hash) => match state.auth().tokens().check(hash) {
                Check::Revoked { .. } => Some("the token was revoked"),
                Check::Expired { .. } => Some("the token expired"),
                Check::Unknown => Some("the token is no longer known"),
                // A map that cannot be refreshed says nothing of this token: the stream goes on.
                Check::Accepted { .. } | Check::Stale => None,
            },
        }
    }

    /// Takes one of the caller's streams (429 when it holds its share), and bounds `stream` by it: the stream
    /// ends when the caller's token is revoked or expires, checked every [`RECHECK_EVERY`].
    pub fn watch<S>(self, state: &AppState, stream: S) -> Result<impl Stream<Item = S::Item> + Send + use<S>, ApiError>
    where
        S: Stream + Send + 'static,
        S::Item: Send,
    {
        let slot = state.streams().open(&self.caller)?;
        let state = state.clone();
        Ok(async_stream::stream! {
            let _slot = slot;
            let mut stream = std::pin::pin!(stream);
            let mut tick = tokio::time::interval(RECHECK_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let next = tokio::select! {
                    item = stream.next() => Some(item),
                    _ = tick.tick() => None,
                };
                match next {
                    Some(Some(item)) => yield item,
                    Some(None) => break,
                    None => {
                        if let Some(why) = self.ended(&state) {
                            tracing::info!(caller = %self.caller.name, why, "live stream ended: {why}");
                            break;
                        }
                    }
                }
            }
        })
    }
}
