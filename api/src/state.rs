//! What every request handler shares: the settings, the database, the run-log store, an HTTP client for
//! health checks, the live-event fan-out and the process's shutdown token. Cheap to clone.

use std::{sync::Arc, time::Duration};

use scrinalia_shared::{ApiStore, Catalogue, Settings, changes::Topic, logstore::LogStore};
use tokio_util::sync::CancellationToken;

use crate::{auth::AuthState, cache::Cached, live::Live, streams::Streams};

/// How long `/metrics` and the run-log store's health probe are reused before being measured again.
pub const CACHE_FOR: Duration = Duration::from_secs(5);

/// The state of the API, shared by every request.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    settings: Settings,
    db: ApiStore,
    logs: Result<LogStore, String>,
    http: reqwest::Client,
    live: Arc<Live>,
    auth: AuthState,
    streams: Streams,
    /// `/metrics` as last rendered, so that scrapes from many Prometheus servers cost no more queries.
    metrics: Cached<String>,
    /// The run-log store's probe as last made, so that `/api/health` does not write to the store on every call.
    object_store_probe: Cached<Result<(), String>>,
    shutdown: CancellationToken,
}

impl AppState {
    /// Builds the state. A run-log store that cannot be opened does not stop the API: the health check and the
    /// log endpoint report why.
    pub fn new(settings: Settings, db: ApiStore) -> Self {
        let logs = LogStore::open(&settings.object_store).map_err(|e| e.to_string());
        if let Err(e) = &logs {
            tracing::warn!(error = %e, "run-log store unavailable");
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(3))
            .build()
            .unwrap_or_default();
        let live = Arc::new(Live::default());
        let auth = AuthState::new(&settings.auth);
        let streams = Streams::new(settings.api.streams_per_caller);
        Self(Arc::new(Inner {
            settings,
            db,
            logs,
            http,
            live,
            auth,
            streams,
            metrics: Cached::new(CACHE_FOR),
            object_store_probe: Cached::new(CACHE_FOR),
            shutdown: CancellationToken::new(),
        }))
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
    pub fn db(&self) -> &ApiStore {
        &self.0.db
    }

    /// How long a daemon may stay silent before the registry calls it gone.
    pub fn gone_after(&self) -> Duration {
        self.0.settings.daemon.gone_after()
    }

    /// The run-log store, or why it could not be opened.
    pub fn logs(&self) -> Result<&LogStore, &str> {
        self.0.logs.as_ref().map_err(String::as_str)
    }

    /// The client used to reach model servers.
    pub fn http(&self) -> &reqwest::Client {
        &self.0.http
    }

    /// This process's live events.
    pub fn live(&self) -> &Live {
        &self.0.live
    }

    /// Relays the database's changes to the live events until the process shuts down (its caller spawns it), and
    /// wakes the service tokens' refresher when they changed or may have.
    pub fn live_relay(&self) -> impl Future<Output = ()> + Send + 'static {
        let (live, db, stop) = (self.0.live.clone(), self.0.db.clone(), self.0.shutdown.clone());
        let tokens = self.0.auth.tokens_changed().clone();
        let topic = Topic::Events { sqlite_poll: Duration::from_millis(self.0.settings.api.events_poll_ms) };
        async move { live.relay_until(db, topic, tokens, stop).await }
    }

    /// What authentication keeps between requests (the service tokens' map).
    pub fn auth(&self) -> &AuthState {
        &self.0.auth
    }

    /// The live streams open, by caller.
    pub fn streams(&self) -> &Streams {
        &self.0.streams
    }

    /// `/metrics`' rendered text, kept for [`CACHE_FOR`].
    pub fn metrics_cache(&self) -> &Cached<String> {
        &self.0.metrics
    }

    /// The run-log store probe's outcome, kept for [`CACHE_FOR`].
    pub fn object_store_probe(&self) -> &Cached<Result<(), String>> {
        &self.0.object_store_probe
    }

    /// Cancelled when the process shuts down; live streams end on it.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.0.shutdown
    }
}
