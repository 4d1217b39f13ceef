//! What every request handler shares: the settings, the database, the run-log store, an HTTP client for
//! health checks, the live-event fan-out and the process's shutdown token. Cheap to clone.

use std::{sync::Arc, time::Duration};

use scrinalia_shared::{ApiStore, Catalogue, Settings, changes::Topic, logstore::LogStore};
use tokio_util::sync::CancellationToken;

use crate::{auth::AuthState, live::Live};

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
        Self(Arc::new(Inner { settings, db, logs, http, live, auth, shutdown: CancellationToken::new() }))
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

    /// Relays the database's changes to the live events until the process shuts down (its caller spawns it).
    pub fn live_relay(&self) -> impl Future<Output = ()> + Send + 'static {
        let (live, db, stop) = (self.0.live.clone(), self.0.db.clone(), self.0.shutdown.clone());
        let topic = Topic::Events { sqlite_poll: Duration::from_millis(self.0.settings.api.events_poll_ms) };
        async move { live.relay_until(db, topic, stop).await }
    }

    /// What authentication keeps between requests (the service tokens' map).
    pub fn auth(&self) -> &AuthState {
        &self.0.auth
    }

    /// Cancelled when the process shuts down; live streams end on it.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.0.shutdown
    }
}
