//! What every request handler shares: the settings, the database pool, the run-log store, an HTTP client for
//! health checks, the live-event fan-out and the process's shutdown token. Cheap to clone.

use std::{sync::Arc, time::Duration};

use scrinalia_shared::{Catalogue, Database, Settings, logstore::LogStore};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::live::LiveEvent;

/// The state of the API, shared by every request.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    settings: Settings,
    db: Database,
    logs: Result<LogStore, String>,
    http: reqwest::Client,
    events: broadcast::Sender<LiveEvent>,
    live_ready: watch::Sender<bool>,
    shutdown: CancellationToken,
}

impl AppState {
    /// Builds the state. A run-log store that cannot be opened does not stop the API: the health check and the
    /// log endpoint report why.
    pub fn new(settings: Settings, db: Database) -> Self {
        let logs = LogStore::open(&settings.object_store).map_err(|e| e.to_string());
        if let Err(e) = &logs {
            tracing::warn!(error = %e, "run-log store unavailable");
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(3))
            .build()
            .unwrap_or_default();
        let (events, _) = broadcast::channel(1024);
        let (live_ready, _) = watch::channel(false);
        Self(Arc::new(Inner { settings, db, logs, http, events, live_ready, shutdown: CancellationToken::new() }))
    }

    /// The configuration.
    pub fn settings(&self) -> &Settings {
        &self.0.settings
    }

    /// The worker catalogue.
    pub fn catalogue(&self) -> &Catalogue {
        &self.0.settings.catalogue
    }

    /// The database.
    pub fn db(&self) -> &Database {
        &self.0.db
    }

    /// The run-log store, or why it could not be opened.
    pub fn logs(&self) -> Result<&LogStore, &str> {
        self.0.logs.as_ref().map_err(String::as_str)
    }

    /// The client used to reach model servers.
    pub fn http(&self) -> &reqwest::Client {
        &self.0.http
    }

    /// The sender of live events (one listener per process feeds it).
    pub fn events(&self) -> &broadcast::Sender<LiveEvent> {
        &self.0.events
    }

    /// Whether this process's live-event listener is listening (set by the listener).
    pub fn live_ready(&self) -> &watch::Sender<bool> {
        &self.0.live_ready
    }

    /// Waits until the live-event listener hears every change (or the process shuts down).
    pub async fn wait_live_ready(&self) {
        let mut ready = self.0.live_ready.subscribe();
        tokio::select! {
            _ = ready.wait_for(|r| *r) => {}
            () = self.0.shutdown.cancelled() => {}
        }
    }

    /// Cancelled when the process shuts down; live streams end on it.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.0.shutdown
    }
}
