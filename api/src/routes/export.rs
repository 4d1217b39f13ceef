//! The export of what retention is about to prune: `GET /api/runs/export?before=…` streams, as JSON lines, the
//! runs that a prune pass would delete now (by the `[retention]` settings this API was started with, which are
//! the daemons' in a shared configuration), so that an archive that must keep records writes them elsewhere
//! first. Streamed page by page on a keyset, so that exporting years of history keeps the API's memory flat.

use axum::{
    Router,
    body::Body,
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{
    auth::Viewer,
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::QueryArgs,
    state::AppState,
};

/// Runs per page read from the database.
const PAGE: u32 = 500;

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/runs/export", get(export_runs))
}

/// What to export.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// Only runs that finished before this time (RFC 3339, or a date `YYYY-MM-DD`, meaning its midnight UTC).
    before: Option<String>,
    /// Only this worker's runs.
    worker: Option<String>,
}

/// A time or a date (its midnight, UTC).
pub fn parse_before(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc)).ok().or_else(|| {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)).map(|t| t.and_utc())
    })
}

#[utoipa::path(get, path = "/api/runs/export", tag = "runs", params(ExportQuery),
    responses(
        (status = 200, content_type = "application/x-ndjson", body = scrinalia_shared::Run,
            description = "One run per line (JSON lines), oldest finished first: the runs that retention would \
                prune now. A read that fails part-way aborts the response, so an export is never silently short."),
        (status = 400, body = ErrorBody, description = "`before` is missing or not a time, or `worker` is not a name"),
        (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn export_runs(
    _: Viewer,
    State(state): State<AppState>,
    QueryArgs(query): QueryArgs<ExportQuery>,
) -> ApiResult<Response> {
    let bad = |message: String| ApiError::bad_request("invalid_query", message);
    let before = match query.before.as_deref().filter(|b| !b.is_empty()) {
        None => return Err(bad("`before` is required: an RFC 3339 time or a date such as 2026-01-31.".to_owned())),
        Some(b) => parse_before(b).ok_or_else(|| {
            bad(format!("`before` must be an RFC 3339 time or a date such as 2026-01-31, not {}.", quote(b)))
        })?,
    };
    let worker = query.worker.filter(|w| !w.is_empty());
    if let Some(w) = worker.as_deref().filter(|w| !scrinalia_shared::catalogue::is_identifier(w)) {
        return Err(bad(format!("`worker` must be a worker name, not {}.", quote(w))));
    }
    // The first page is read before answering, so that a database that is down gets a proper error status.
    let settings = state.settings().retention.clone();
    let first = state.db().prunable_runs(&settings, Some(before), worker.as_deref(), None, PAGE).await?;
    let body = Body::from_stream(async_stream::stream! {
        let mut page = first;
        loop {
            let mut lines = Vec::new();
            for run in &page {
                match serde_json::to_vec(run) {
                    Ok(mut line) => {
                        line.push(b'\n');
                        lines.extend(line);
                    }
                    Err(e) => {
                        yield Err(std::io::Error::other(e));
                        return;
                    }
                }
            }
            yield Ok::<Vec<u8>, std::io::Error>(lines);
            let last = page.last().and_then(|r| r.finished_at.map(|f| (f, r.id)));
            let (Some(last), true) = (last, page.len() == PAGE as usize) else { break };
            match state.db().prunable_runs(&settings, Some(before), worker.as_deref(), Some(last), PAGE).await {
                Ok(next) => page = next,
                Err(e) => {
                    tracing::warn!(error = %e, "the export of prunable runs failed part-way; the response is aborted");
                    yield Err(std::io::Error::other(e));
                    return;
                }
            }
        }
    });
    let mut response = body.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    Ok(response)
}
