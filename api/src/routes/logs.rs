//! A run's output, streamed from the object store object by object (the objects under the run's prefix, in key
//! order, concatenated), so that a log of any size passes through the API in small blocks. `?tail=N` starts at
//! the last N lines (found by reading backwards from the end); a `Range: bytes=…` header answers 206 with that
//! part. With `?follow=true` the response stays open and sends new output while the run is in flight, and ends
//! when the run has ended and its last output has been sent; such a followed log is a live stream
//! (`crate::streams`: it counts against the caller's share and ends when the caller's token is revoked).

use std::time::Duration;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use chrono::{SecondsFormat, Utc};
use futures::{StreamExt, stream::BoxStream};
use object_store::path::Path as Key;
use scrinalia_shared::logstore::{Cursor, LogStore, Next, Snapshot, dropped_line};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::{
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::QueryArgs,
    routes::runs::parse_run_id,
    state::AppState,
    streams::Watcher,
};

mod range;

/// How often a followed log looks for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(400);

/// The header that says how many bytes of the stored log come before what the response holds (with `tail`).
const OMITTED: &str = "x-log-omitted-bytes";

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/runs/{id}/log", get(run_log))
}

/// Options of the log endpoint.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// `true` keeps the response open while the run is in flight.
    follow: Option<String>,
    /// Only the last N lines (with `follow`: the last N lines, then what comes).
    #[param(value_type = Option<u64>, minimum = 0)]
    tail: Option<String>,
}

#[utoipa::path(get, path = "/api/runs/{id}/log", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The run's id (a UUID)"), LogQuery,
        ("Range" = Option<String>, Header, description = "One byte range of the log as stored now: `bytes=a-b`, \
            `bytes=a-` or `bytes=-n`; not with `tail` or `follow`")),
    responses(
        (status = 200, content_type = "text/plain", body = String, description = "The run's output, streamed",
            headers(("x-log-omitted-bytes" = u64, description = "Bytes of the stored log before what this \
                response holds (more than 0 when `tail` left some out)"),
                ("accept-ranges" = String, description = "`bytes`"))),
        (status = 206, content_type = "text/plain", body = String, description = "The asked range of the output",
            headers(("content-range" = String, description = "`bytes a-b/size`"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 416, body = ErrorBody, description = "The range starts past the end of the log",
            headers(("content-range" = String, description = "`bytes */size`"))),
        (status = 429, body = ErrorBody, description = "`follow`: the caller holds `api.streams_per_caller` \
            streams already"),
        (status = 503, body = ErrorBody, description = "The run-log store cannot be opened")),
    security(("bearer" = [])))]
pub(crate) async fn run_log(
    watcher: Watcher,
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    QueryArgs(query): QueryArgs<LogQuery>,
) -> ApiResult<Response> {
    let id = parse_run_id(&id)?;
    let follow = match query.follow.as_deref() {
        None | Some("" | "false" | "0" | "no") => false,
        Some("true" | "1" | "yes") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("`follow` must be true or false, not {}.", quote(other)),
            ));
        }
    };
    let tail = match query.tail.as_deref().map(str::trim) {
        None => None,
        Some(text) => {
            Some(text.parse::<u64>().ok().filter(|_| text.bytes().all(|b| b.is_ascii_digit())).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_query",
                    format!("`tail` must be a number of lines (0 or more), not {}.", quote(text)),
                )
            })?)
        }
    };
    let wanted = match headers.get(header::RANGE) {
        None => None,
        Some(value) => {
            let value = value.to_str().map_err(|_| {
                ApiError::bad_request("invalid_range", "The Range header must be plain text, as in `bytes=0-1023`.")
            })?;
            Some(range::parse(value).map_err(|message| ApiError::bad_request("invalid_range", message))?)
        }
    };
    if wanted.is_some() && (follow || tail.is_some()) {
        return Err(ApiError::bad_request(
            "invalid_range",
            "A Range header reads a part of the log as it is stored; it cannot be combined with `tail` or `follow`.",
        ));
    }
    let run = state.db().get_run(id).await?.ok_or_else(|| ApiError::unknown_run(id))?;
    let store = state
        .logs()
        .map_err(|e| {
            ApiError::unavailable("log_store_unavailable", format!("The run-log store cannot be opened: {e}."))
        })?
        .clone();
    let read_failed = |e: object_store::Error| anyhow::anyhow!("read the log of run {id}: {}", store.explain(&e));
    let prefix = store.run_prefix(&run.worker, id);
    let snapshot = store.snapshot(&prefix).await.map_err(read_failed)?;

    if let Some(wanted) = wanted {
        let Some(bytes) = wanted.resolve(snapshot.size) else {
            let message = format!("The range starts past the end of the log, which holds {} bytes now.", snapshot.size);
            let mut response =
                ApiError::client(StatusCode::RANGE_NOT_SATISFIABLE, "range_not_satisfiable", message).into_response();
            response.headers_mut().insert(header::CONTENT_RANGE, number(&format!("bytes */{}", snapshot.size)));
            return Ok(response);
        };
        let content_range = format!("bytes {}-{}/{}", bytes.start, bytes.end - 1, snapshot.size);
        let length = bytes.end - bytes.start;
        let body = strict_body(store.stream(snapshot.pieces(bytes), true), id, run.worker);
        let mut response = text_response(body);
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        response.headers_mut().insert(header::CONTENT_RANGE, number(&content_range));
        response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        return Ok(response);
    }

    let start = match tail {
        Some(lines) => store.tail_start(&snapshot, lines).await.map_err(read_failed)?,
        None => 0,
    };
    let body = if !follow || run.state.is_terminal() {
        lenient_body(store.clone(), store.stream(snapshot.pieces(start..snapshot.size), false), id, run.worker)
    } else {
        let body = follow_body(state.clone(), store, prefix, snapshot, start, id, run.worker);
        Body::from_stream(watcher.watch(&state, body)?)
    };
    let mut response = text_response(body);
    response.headers_mut().insert(OMITTED, HeaderValue::from(start));
    response.headers_mut().insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    Ok(response)
}

fn number(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("bytes */0"))
}

fn text_response(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A promised range: a read that fails aborts the response, so that the client sees it incomplete rather than
/// wrong.
fn strict_body(pieces: BoxStream<'static, Result<Bytes, object_store::Error>>, id: Uuid, worker: String) -> Body {
    Body::from_stream(pieces.map(move |piece| {
        piece.map_err(|e| {
            tracing::warn!(run_id = %id, worker = %worker, error = %e, "a range of the log cannot be read");
            std::io::Error::other(e)
        })
    }))
}

/// The log as text: a read that fails ends it with a line saying so.
fn lenient_body(
    store: LogStore,
    mut pieces: BoxStream<'static, Result<Bytes, object_store::Error>>,
    id: Uuid,
    worker: String,
) -> Body {
    Body::from_stream(async_stream::stream! {
        while let Some(piece) = pieces.next().await {
            match piece {
                Ok(bytes) => yield Ok::<Bytes, std::io::Error>(bytes),
                Err(e) => {
                    let e = store.explain(&e);
                    tracing::warn!(run_id = %id, worker = %worker, error = %e, "the log cannot be read");
                    yield Ok(Bytes::from(format!("\n[scrinalia: the log cannot be read: {e}]\n")));
                    break;
                }
            }
        }
    })
}

/// Sends the log from byte `start` of `first`, then what the next listings add, until the run has ended.
fn follow_body(
    state: AppState,
    store: LogStore,
    prefix: Key,
    first: Snapshot,
    start: u64,
    id: Uuid,
    worker: String,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let token = state.shutdown_token().clone();
    let mut cursor = Cursor::at(&first, start);
    let mut listed = Some(first);
    async_stream::stream! {
        // After the run ends, one more read a poll later catches a last chunk flushed just after the end.
        let mut last_pass = false;
        let mut broken = false;
        loop {
            // Read the state before the output, so that output written just before the run ended is still sent.
            let ended = match state.db().get_run(id).await {
                Ok(run) => run.is_none_or(|r| r.state.is_terminal()),
                Err(e) => {
                    tracing::warn!(run_id = %id, worker = %worker, error = %e, "log follow: cannot read the run");
                    false
                }
            };
            let snapshot = match listed.take() {
                Some(snapshot) => Ok(snapshot),
                None => store.snapshot(&prefix).await,
            };
            let mut failure = None;
            match snapshot {
                Ok(snapshot) => {
                    for next in cursor.advance(&snapshot) {
                        let piece = match next {
                            Next::Dropped => {
                                yield Ok::<Bytes, std::io::Error>(Bytes::from(dropped_line(&now())));
                                continue;
                            }
                            Next::Piece(piece) => piece,
                        };
                        let mut bytes = store.stream(vec![piece], false);
                        while let Some(read) = bytes.next().await {
                            match read {
                                Ok(b) => yield Ok(b),
                                Err(e) => {
                                    failure = Some(e);
                                    break;
                                }
                            }
                        }
                        if failure.is_some() {
                            break;
                        }
                    }
                }
                Err(e) => failure = Some(e),
            }
            if let Some(e) = failure {
                let e = store.explain(&e);
                tracing::warn!(run_id = %id, worker = %worker, error = %e, "log follow: cannot read the log");
                yield Ok(Bytes::from(format!("\n[scrinalia: the log cannot be read: {e}]\n")));
                broken = true;
            }
            if broken {
                break;
            }
            if ended {
                if last_pass {
                    break;
                }
                last_pass = true;
            }
            tokio::select! {
                () = tokio::time::sleep(FOLLOW_POLL) => {}
                () = token.cancelled() => break,
            }
        }
    }
}
