//! Extractors whose rejections are [`ApiError`]s: a JSON body (an empty body means "all defaults"), a query
//! string, a page size (`?limit=`), and the W3C trace context of a request.

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Query, Request},
    http::{StatusCode, header, request::Parts},
};
use scrinalia_shared::telemetry;
use serde::{Deserialize, de::DeserializeOwned};
use utoipa::{
    IntoParams,
    openapi::{
        KnownFormat, ObjectBuilder, SchemaFormat, Type,
        path::{Parameter, ParameterBuilder, ParameterIn},
    },
};

use crate::{
    error::{ApiError, ApiResult, quote, sentence},
    state::AppState,
};

/// A JSON body. An empty body deserialises as `T::default()`, so `POST …/runs` needs no body at all; but a body
/// declared as something else (a form's `application/x-www-form-urlencoded`, even empty) is refused first, so a
/// plain HTML form never passes for a JSON request.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::client(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!(
                        "The request body is larger than the limit of {} bytes.",
                        state.settings().api.body_limit_bytes
                    ),
                )
            } else {
                ApiError::bad_request("unreadable_body", "The request body could not be read.")
            }
        })?;
        if let Some(ct) = content_type.filter(|ct| !is_json(ct)) {
            return Err(ApiError::client(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("The request body must be JSON (Content-Type: application/json), not {ct:?}."),
            ));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        serde_json::from_slice(&bytes).map(Self).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => ApiError::client(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_body",
                format!("The request body does not have the expected fields: {}", sentence(&e)),
            ),
            _ => {
                ApiError::bad_request("malformed_json", format!("The request body is not valid JSON: {}", sentence(&e)))
            }
        })
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// A query string. Handlers keep their query fields as text and parse them, so that each bad value gets its own
/// sentence; this only rejects a query string that cannot be decoded at all.
#[derive(Debug)]
pub struct QueryArgs<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for QueryArgs<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state).await.map(|Query(q)| Self(q)).map_err(|e| {
            ApiError::bad_request(
                "invalid_query",
                format!("The query string cannot be read: {}", sentence(e.body_text())),
            )
        })
    }
}

/// How many entries a list answers: `?limit=`, a whole number from 1 to `MAX`, `DEFAULT` when absent. Every
/// route that takes a limit takes it through this, so each says and refuses it with the same words; a route
/// reads it beside its other query fields (it reads only `limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit<const DEFAULT: u32, const MAX: u32>(pub u32);

/// The size of a page of runs, pipeline runs or webhook deliveries.
pub type PageLimit = Limit<50, 500>;

/// How many progress reports of a run (`GET /api/runs/{id}` shows the last [`PROGRESS_SHOWN`]).
pub type ProgressLimit = Limit<500, 5000>;

/// How many of a run's last progress reports its detail holds.
pub const PROGRESS_SHOWN: u32 = 500;

/// How many entries of an audit trail or a schedule's fires.
pub type TrailLimit = Limit<100, 1000>;

impl<const DEFAULT: u32, const MAX: u32> Limit<DEFAULT, MAX> {
    /// The limit `given` in a query string (absent: the default), or a 400 that says what is allowed.
    pub fn parse(given: Option<&str>) -> ApiResult<Self> {
        let Some(text) = given else { return Ok(Self(DEFAULT)) };
        text.parse::<u32>().ok().filter(|n| (1..=MAX).contains(n)).map(Self).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_query",
                format!("`limit` must be a whole number from 1 to {MAX}, not {}.", quote(text)),
            )
        })
    }
}

/// The one field of the query string a [`Limit`] reads, as text so that a bad value gets its sentence.
#[derive(Debug, Default, Deserialize)]
struct LimitQuery {
    limit: Option<String>,
}

impl<S: Send + Sync, const DEFAULT: u32, const MAX: u32> FromRequestParts<S> for Limit<DEFAULT, MAX> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let QueryArgs(query) = QueryArgs::<LimitQuery>::from_request_parts(parts, state).await?;
        Self::parse(query.limit.as_deref())
    }
}

impl<const DEFAULT: u32, const MAX: u32> IntoParams for Limit<DEFAULT, MAX> {
    // Always in the query, whatever the operation would guess: a limit is never a path segment or a header.
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let schema = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
            .minimum(Some(1))
            .maximum(Some(MAX))
            .default(Some(DEFAULT.into()));
        let parameter = ParameterBuilder::new()
            .name("limit")
            .parameter_in(ParameterIn::Query)
            .description(Some(format!("How many entries, 1 to {MAX} (default {DEFAULT}).")))
            .schema(Some(schema));
        vec![parameter.build()]
    }
}

/// The W3C trace context a run stores. When spans are exported, the request's own span (a child of the caller's
/// `traceparent`, if any), so the daemon's run span becomes its child; otherwise the caller's `traceparent` when
/// it is valid, else a new trace.
#[derive(Debug, Clone)]
pub struct TraceParent(pub String);

impl<S: Send + Sync> FromRequestParts<S> for TraceParent {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(own) = telemetry::traceparent_of(&tracing::Span::current()) {
            return Ok(Self(own));
        }
        let given = parts.headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::trim);
        Ok(Self(match given.filter(|v| is_valid_traceparent(v)) {
            Some(v) => v.to_ascii_lowercase(),
            None => new_traceparent(),
        }))
    }
}

/// Whether `v` is a valid W3C `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`).
pub fn is_valid_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    match parts.as_slice() {
        [version, trace, parent, flags, rest @ ..] => {
            hex(version, 2)
                && !version.eq_ignore_ascii_case("ff")
                && (rest.is_empty() || *version != "00")
                && hex(trace, 32)
                && nonzero(trace)
                && hex(parent, 16)
                && nonzero(parent)
                && hex(flags, 2)
        }
        _ => false,
    }
}

/// A fresh, sampled trace context.
pub fn new_traceparent() -> String {
    let trace = uuid::Uuid::new_v4().simple().to_string();
    let span = uuid::Uuid::new_v4().simple().to_string();
    format!("00-{trace}-{}-01", &span[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_has_its_default_and_its_bounds() {
        assert_eq!(PageLimit::parse(None).ok(), Some(Limit(50)));
        assert_eq!(TrailLimit::parse(Some("1000")).ok(), Some(Limit(1000)));
        for bad in ["0", "501", "ten", "", "-1", " 5"] {
            let Err(ApiError::Client { code, message, .. }) = PageLimit::parse(Some(bad)) else {
                panic!("{bad:?} is refused")
            };
            assert_eq!(code, "invalid_query");
            assert!(message.starts_with("`limit` must be a whole number from 1 to 500, not \""), "{message}");
        }
    }

    #[test]
    fn traceparents_are_checked_as_the_w3c_spec_says() {
        assert!(is_valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_valid_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
        assert!(!is_valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
        assert!(!is_valid_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));
        assert!(!is_valid_traceparent("garbage"));
        assert!(is_valid_traceparent(&new_traceparent()));
    }
}
