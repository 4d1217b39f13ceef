//! Cross-cutting layers: each request's span (continuing the caller's trace), the request timeout, CORS for the
//! configured origins only, and the rewriting of any error answered by the framework itself (405, 413, ...) into
//! the API's JSON error body.

use std::time::Duration;

use axum::{
    body::to_bytes,
    extract::{MatchedPath, Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use scrinalia_shared::telemetry;
use serde_json::Map;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::{
    error::{ApiError, error_response, sentence},
    state::AppState,
};

/// The span of one request: `method` and `route` (the matched pattern, so the span name stays bounded), a child
/// of the caller's `traceparent` when spans are exported. A run triggered here stores this span's context
/// ([`crate::extract::TraceParent`]), so the daemon's run span continues the same trace.
pub fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    let method = request.method();
    let route = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    let span = tracing::info_span!(
        "request",
        method = %method,
        route = route.unwrap_or_else(|| request.uri().path()),
        otel.name = name,
        otel.kind = "server",
        http.response.status_code = tracing::field::Empty,
    );
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    telemetry::continue_trace(&span, header("traceparent"), header("tracestate"));
    span
}

/// Records the status on the request's span.
pub fn record_status<B>(response: &axum::http::Response<B>, _latency: Duration, span: &tracing::Span) {
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        telemetry::mark_failed(span, response.status().to_string());
    }
}

/// Abandons a request that takes longer than `api.request_timeout_seconds` to produce its response. Live
/// streams (events, a followed log) answer at once and then stream their body, which this does not limit.
pub async fn timeout(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let seconds = state.settings().api.request_timeout_seconds;
    match tokio::time::timeout(Duration::from_secs(seconds), next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(timeout_seconds = seconds, "request timed out");
            let message = format!("The request took longer than {seconds} seconds and was abandoned; try again.");
            ApiError::unavailable("timeout", message).into_response()
        }
    }
}

/// Rewrites an error response that is not JSON (one the framework produced) into a JSON error body.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_owned()).unwrap_or_default();
    let (code, message) = match status {
        // The router adds the `Allow` header after this layer has run, so the sentence points to it.
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            format!("This endpoint does not accept {method}; the Allow header lists the methods it accepts."),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ("body_too_large", "The request body is too large.".to_owned()),
        StatusCode::NOT_FOUND => ("not_found", "There is nothing here.".to_owned()),
        s if s.is_server_error() => ("internal", "Something went wrong on the server.".to_owned()),
        _ if text.is_empty() => ("bad_request", "The request is not valid.".to_owned()),
        _ => ("bad_request", format!("The request is not valid: {}", sentence(text))),
    };
    let mut rewritten = error_response(status, code, message, Map::new());
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            rewritten.headers_mut().insert(name, value.clone());
        }
    }
    *rewritten.status_mut() = status;
    rewritten
}

/// A CORS layer allowing exactly `origins`, or none when the list is empty (no CORS headers at all).
pub fn cors(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<HeaderValue> =
        origins.iter().filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()).collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::HeaderName::from_static("traceparent"),
            ])
            .expose_headers([header::LOCATION])
            .max_age(Duration::from_secs(600)),
    )
}
