//! A run's output, read from the object store: every object under the run's prefix, in key order, concatenated.
//! With `?follow=true` the response stays open and sends new output while the run is in flight, and ends when
//! the run has ended and its last output has been sent.

use std::{collections::HashMap, time::Duration};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures::TryStreamExt;
use object_store::{ObjectMeta, path::Path as Key};
use scrinalia_shared::logstore::LogStore;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{
    auth::Viewer,
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::QueryArgs,
    routes::runs::parse_run_id,
    state::AppState,
};

/// How often a followed log looks for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(400);

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
}

#[utoipa::path(get, path = "/api/runs/{id}/log", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The run's id (a UUID)"), LogQuery),
    responses((status = 200, content_type = "text/plain", body = String, description = "The run's output"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The run-log store cannot be opened")),
    security(("bearer" = [])))]
pub(crate) async fn run_log(
    _: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
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
    let run = state.db().get_run(id).await?.ok_or_else(|| ApiError::unknown_run(id))?;
    let store = state.logs().map_err(|e| {
        ApiError::unavailable("log_store_unavailable", format!("The run-log store cannot be opened: {e}."))
    })?;
    let mut reader = LogReader::new(store.clone(), store.run_prefix(&run.worker, id));
    if !follow || run.state.is_terminal() {
        let text =
            reader.read_new().await.map_err(|e| anyhow::anyhow!("read the log of run {id}: {}", store.explain(&e)))?;
        return Ok(text_response(Body::from(text)));
    }
    let token = state.shutdown_token().clone();
    let worker = run.worker;
    let stream = async_stream::stream! {
        // After the run ends, one more read a poll later catches a last chunk flushed just after the end.
        let mut last_pass = false;
        loop {
            // Read the state before the output, so that output written just before the run ended is still sent.
            let ended = match state.db().get_run(id).await {
                Ok(run) => run.is_none_or(|r| r.state.is_terminal()),
                Err(e) => {
                    tracing::warn!(run_id = %id, worker = %worker, error = %e, "log follow: cannot read the run");
                    false
                }
            };
            match reader.read_new().await {
                Ok(chunk) if !chunk.is_empty() => yield Ok::<Bytes, std::io::Error>(chunk),
                Ok(_) => {}
                Err(e) => {
                    let e = reader.store.explain(&e);
                    tracing::warn!(run_id = %id, worker = %worker, error = %e, "log follow: cannot read the log");
                    yield Ok(Bytes::from(format!("\n[scrinalia: the log cannot be read: {e}]\n")));
                    break;
                }
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
    };
    Ok(text_response(Body::from_stream(stream)))
}

fn text_response(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

/// Reads a run's log objects incrementally: what was already returned is not returned again, and an object
/// that grew returns only its new bytes.
struct LogReader {
    store: LogStore,
    prefix: Key,
    sent: HashMap<Key, u64>,
}

impl LogReader {
    fn new(store: LogStore, prefix: Key) -> Self {
        Self { store, prefix, sent: HashMap::new() }
    }

    async fn read_new(&mut self) -> Result<Bytes, object_store::Error> {
        let listed: Result<Vec<ObjectMeta>, _> = self.store.store().list(Some(&self.prefix)).try_collect().await;
        let mut objects = match listed {
            Ok(objects) => objects,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        let mut out = Vec::new();
        for meta in objects {
            let sent = self.sent.get(&meta.location).copied().unwrap_or(0);
            if meta.size > sent {
                out.extend_from_slice(&self.store.store().get_range(&meta.location, sent..meta.size).await?);
                self.sent.insert(meta.location, meta.size);
            }
        }
        Ok(Bytes::from(out))
    }
}
