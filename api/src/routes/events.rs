//! `GET /api/events`: Server-Sent Events of run, queue, daemon and override changes, whichever API process (or
//! daemon) made them. Each event's name is its kind (`Change::PANEL_KINDS`: `run`, `queue`, `daemon`, `override`,
//! or `resync` when changes may have been missed and the client should read everything again) and its data the
//! JSON of the `Change`; every stream opens with `ready`. A stream counts against its caller's
//! `api.streams_per_caller` and ends within seconds of its token's revocation or expiry (`crate::streams`).

use std::{convert::Infallible, time::Duration};

use axum::{
    Router,
    extract::State,
    http::HeaderValue,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::get,
};
use scrinalia_shared::Change;
use tokio::sync::broadcast::error::RecvError;

use crate::{error::ApiResult, error::ErrorBody, live::LiveEvent, state::AppState, streams::Watcher};

/// How often an idle stream sends a comment, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/events", get(events))
}

#[utoipa::path(get, path = "/api/events", tag = "events",
    responses((status = 200, content_type = "text/event-stream", body = String,
        description = "Events named `ready` (first; `{\"kind\":\"ready\",\"kinds\":[…]}` lists the names that follow), \
            then run, queue, daemon, override or resync, with a JSON payload such as \
            {\"kind\":\"run\",\"run\":\"…\",\"worker\":\"…\",\"state\":\"running\"} or \
            {\"kind\":\"override\",\"worker\":\"…\",\"actor\":\"…\",\"action\":\"set\"}; the first event is `ready`"),
        (status = 401, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "The caller holds `api.streams_per_caller` streams already")),
    security(("bearer" = [])))]
pub(crate) async fn events(watcher: Watcher, State(state): State<AppState>) -> ApiResult<Response> {
    let watched = state.clone();
    let mut receiver = state.live().subscribe();
    let token = state.shutdown_token().clone();
    let stream = async_stream::stream! {
        // `ready` means this process's change feed hears every change from now on.
        state.live().wait_ready(&token).await;
        // It names the kinds of event that follow, so that a client listens for exactly those.
        let ready = serde_json::json!({ "kind": "ready", "kinds": Change::PANEL_KINDS });
        yield Ok::<Event, Infallible>(Event::default().event("ready").data(ready.to_string()));
        loop {
            let event = tokio::select! {
                () = token.cancelled() => break,
                received = receiver.recv() => match received {
                    Ok(event) => event,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "live events: a slow client missed events");
                        LiveEvent::of(&Change::resync("this client fell behind"))
                    }
                    Err(RecvError::Closed) => break,
                },
            };
            yield Ok(Event::default().event(event.kind).data(event.data.as_ref()));
        }
    };
    let stream = watcher.watch(&watched, stream)?;
    let mut response =
        Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive")).into_response();
    // Tells reverse proxies such as nginx not to buffer the stream.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
