//! `GET /api/events`: Server-Sent Events of run, queue, daemon and override changes, whichever API process (or
//! daemon) made them. Each event's name is its kind (`run`, `queue`, `daemon`, `override`, or `resync` when changes
//! may have been missed and the client should read everything again) and its data the JSON payload.

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
use tokio::sync::broadcast::error::RecvError;

use crate::{auth::Viewer, error::ErrorBody, live::LiveEvent, state::AppState};

/// How often an idle stream sends a comment, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/events", get(events))
}

#[utoipa::path(get, path = "/api/events", tag = "events",
    responses((status = 200, content_type = "text/event-stream", body = String,
        description = "Events named run, queue, daemon, override or resync, with a JSON payload such as \
            {\"kind\":\"run\",\"run\":\"…\",\"worker\":\"…\",\"state\":\"running\"} or \
            {\"kind\":\"override\",\"worker\":\"…\",\"actor\":\"…\",\"action\":\"set\"}; the first event is `ready`"),
        (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn events(_: Viewer, State(state): State<AppState>) -> Response {
    let mut receiver = state.events().subscribe();
    let token = state.shutdown_token().clone();
    let stream = async_stream::stream! {
        // `ready` means this process's listener hears every change from now on.
        state.wait_live_ready().await;
        yield Ok::<Event, Infallible>(Event::default().event("ready").data("{\"kind\":\"ready\"}"));
        loop {
            let event = tokio::select! {
                () = token.cancelled() => break,
                received = receiver.recv() => match received {
                    Ok(event) => event,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "live events: a slow client missed events");
                        LiveEvent::resync("this client fell behind")
                    }
                    Err(RecvError::Closed) => break,
                },
            };
            yield Ok(Event::default().event(event.kind.as_str()).data(event.data.as_ref()));
        }
    };
    let mut response =
        Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive")).into_response();
    // Tells reverse proxies such as nginx not to buffer the stream.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
