//! The Scrinalia HTTP API: stateless, so any number of processes can serve it. It inserts run requests and
//! reads the ledger; it never runs a worker and never marks a run interrupted.
//!
//! [`app`] builds the router from an [`AppState`] (tests drive it in-process); [`serve`] connects, migrates,
//! starts the live-event relay (and, when OTLP metrics are exported, the gauges' refresh) and serves until
//! `shutdown` completes, then waits for those tasks.

pub mod auth;
pub mod cache;
pub mod edges;
pub mod error;
pub mod extract;
pub mod live;
pub mod middleware;
pub mod openapi;
pub mod panel;
pub mod routes;
pub mod server;
pub mod state;
pub mod streams;

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use axum::{Router, extract::DefaultBodyLimit};
use scrinalia_shared::{ApiStore, Settings, telemetry::Telemetry};
pub use state::AppState;
use tokio::{net::TcpListener, task::JoinSet};

/// The panel's Content-Security-Policy: its own origin only, and the identity provider's token endpoint when the
/// panel signs people in (`[auth.oidc.panel]`), because that exchange is a fetch from the page.
fn panel_policy(settings: &Settings) -> String {
    let token_endpoint = settings.auth.oidc.as_ref().and_then(|o| o.panel.as_ref()).map(|p| &p.token_endpoint);
    panel::content_security_policy(token_endpoint.and_then(|url| panel::origin_of(url)).as_deref())
}

/// The whole API as a router. The web panel's static files can be added with one more `.merge(...)` before the
/// fallback.
pub fn app(state: AppState) -> Router {
    let routes = Router::new()
        .merge(routes::workers::router())
        .merge(routes::chores::router())
        .merge(routes::runs::router())
        .merge(routes::items::router())
        .merge(routes::quarantine::router())
        .merge(routes::export::router())
        .merge(routes::continuations::router())
        .merge(routes::bulk::router())
        .merge(routes::logs::router())
        .merge(routes::overrides::router())
        .merge(routes::pauses::router())
        .merge(routes::resources::router())
        .merge(routes::schedules::router())
        .merge(routes::pipelines::router())
        .merge(routes::daemons::router())
        .merge(routes::webhooks::router())
        .merge(routes::history::router())
        .merge(routes::health::router())
        .merge(routes::events::router())
        .merge(routes::meta::router())
        .merge(openapi::router())
        .merge(routes::me::router())
        .merge(routes::tokens::router())
        .merge(routes::metrics::router(state.settings().api.metrics && state.settings().api.metrics_listen.is_none()))
        .merge(panel::router(&panel_policy(state.settings())));
    let limit = state.settings().api.body_limit_bytes;
    let router = routes
        .fallback(routes::meta::not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::timeout))
        .layer(axum::middleware::from_fn_with_state(edges::Edges::new(state.settings()), edges::browser_checks))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(middleware::json_errors))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(middleware::request_span)
                .on_response(middleware::record_status),
        );
    let router = match middleware::cors(&state.settings().api.cors_origins) {
        Some(cors) => router.layer(cors),
        None => router,
    };
    router.layer(axum::middleware::from_fn(edges::no_store)).with_state(state)
}

/// `/metrics` alone, for `api.metrics_listen`: with the same error bodies and request spans as the API.
fn metrics_app(state: AppState) -> Router {
    routes::metrics::router(true)
        .fallback(routes::meta::not_found)
        .layer(axum::middleware::from_fn(middleware::json_errors))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(middleware::request_span)
                .on_response(middleware::record_status),
        )
        .with_state(state)
}

/// Serves the API on `settings.api.listen` until `shutdown` completes, then stops accepting, ends live streams
/// and waits for requests in progress. `telemetry` says whether metrics are exported over OTLP too.
pub async fn serve(
    settings: Settings,
    telemetry: &Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = settings.database.redacted_url();
    let timeout = Some(Duration::from_secs(settings.api.statement_timeout_seconds)).filter(|t| !t.is_zero());
    let db = ApiStore::connect_limited(&settings.database, "scrinalia-api", timeout)
        .await
        .with_context(|| format!("cannot connect to the database {url}"))?;
    db.migrate().await.context("cannot apply the database migrations")?;
    let listen = settings.api.listen;
    let state = AppState::new(settings, db.clone());
    let mut background = JoinSet::new();
    background.spawn(state.live_relay());
    // Service tokens: read once before serving, then again whenever the change feed says they changed (or every
    // 250 ms where it cannot), by a task that ends on the shutdown token.
    if let Err(e) = state.auth().tokens().refresh(state.db()).await {
        tracing::warn!(error = %e, "cannot read the service tokens yet; retrying in the background");
    }
    background.spawn(auth::tokens::refresh_task(&state));
    // OTLP: the database gauges of `/metrics`, measured every export interval and observed by the exporter.
    let _gauges = telemetry.meter("scrinalia-api").map(|meter| {
        let last = Arc::new(Mutex::new(Vec::new()));
        let gauges = scrinalia_shared::metrics::observe_gauges(&meter, routes::metrics::GAUGES, last.clone());
        background.spawn(routes::metrics::refresh(state.clone(), last));
        gauges
    });
    let listener = TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(listen = %listener.local_addr()?, database = %url, version = scrinalia_shared::VERSION, "API listening");
    match auth::anonymous_grant(&state.settings().auth) {
        Some(grant) => tracing::warn!(anonymous = %grant, "anonymous access is on: {grant}"),
        None => tracing::info!("anonymous access is off: every request needs a bearer token"),
    }
    let api = &state.settings().api;
    let limits = server::Limits {
        header_read_timeout: Duration::from_secs(api.header_read_timeout_seconds),
        connections: api.connection_limit,
    };
    let metrics = match api.metrics_listen.filter(|_| api.metrics) {
        Some(address) => {
            let listener =
                TcpListener::bind(address).await.with_context(|| format!("cannot listen on {address} for /metrics"))?;
            tracing::info!(listen = %listener.local_addr()?, "/metrics served on a listener of its own");
            Some(listener)
        }
        None => None,
    };
    let token = state.shutdown_token().clone();
    let signal = {
        let token = token.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections; live streams end");
            token.cancel();
        }
    };
    let metrics = async {
        if let Some(listener) = metrics {
            let router = metrics_app(state.clone());
            server::serve(listener, router, limits, token.clone()).await;
        }
    };
    // Ends once the shutdown signal came and every connection of both listeners closed.
    tokio::join!(signal, server::serve(listener, app(state.clone()), limits, token.clone()), metrics);
    // The live relay and the gauges' refresh end on the shutdown token; they are waited for, briefly.
    let joined =
        tokio::time::timeout(Duration::from_secs(2), async { while background.join_next().await.is_some() {} });
    if joined.await.is_err() {
        tracing::warn!("background tasks did not stop in time");
    }
    db.close().await;
    tracing::info!("API stopped");
    Ok(())
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
