//! The HTTP server under the router: hyper's HTTP/1 connection driven here rather than by `axum::serve`, because
//! that one runs hyper without a timer, so a client that never finishes its headers held its socket (and a file
//! descriptor) for ever, and nothing capped the connections. Here each connection has a header-read timeout
//! (which hyper also starts while an idle keep-alive connection waits for its next request, so it is the idle
//! timeout too), and at most `api.connection_limit` connections are served at once: the next ones are not
//! accepted until one closes, so they wait in the kernel's listen backlog (and are refused by the kernel only
//! when that backlog is full). A response being streamed (live events, a followed log) is not timed: the
//! header timer runs only while hyper waits for a request's head.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, extract::ConnectInfo, http::Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

/// What bounds the connections of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a client may take to send a request's head (and an idle connection to start its next one).
    pub header_read_timeout: Duration,
    /// How many connections are served at once.
    pub connections: usize,
}

/// Serves `router` on `listener` until `stop` is cancelled; then accepts nothing more, asks every connection to
/// close once its response in progress is sent (live streams end on the same token), and waits for them.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, stop: CancellationToken) {
    let permits = Arc::new(Semaphore::new(limits.connections));
    let connections = TaskTracker::new();
    let mut full = false;
    loop {
        // The permit is taken before the accept: beyond the cap a connection stays in the backlog, unaccepted.
        let permit = tokio::select! {
            () = stop.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        if permits.available_permits() == 0 && !full {
            tracing::warn!(limit = limits.connections, "the connection limit is reached; new connections wait");
        }
        full = permits.available_permits() == 0;
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted: not fatal.
                    tracing::warn!(error = %e, "cannot accept a connection; trying again shortly");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Live events are small writes that must leave at once.
        let _ = stream.set_nodelay(true);
        let (router, stop) = (router.clone(), stop.clone());
        connections.spawn(async move {
            connection(stream, peer, router, limits, stop).await;
            drop(permit);
        });
    }
    connections.close();
    connections.wait().await;
}

/// Serves one connection until it closes, or until `stop`, when it is closed gracefully.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    // The authentication reads the peer's address (the loopback rule), as `into_make_service_with_connect_info`
    // would have given it.
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move { Ok::<_, Infallible>(router.oneshot(request).await.unwrap_or_else(|never| match never {})) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let done = tokio::select! {
        done = conn.as_mut() => done,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = done {
        // A header timeout, a client gone mid-request: the client's doing, so not a warning.
        tracing::debug!(peer = %peer, error = %e, "connection closed with an error");
    }
}
