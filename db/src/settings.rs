//! `[database]`: where the ledger is, how many connections, and whether a pooler sits in front. Its `Debug`
//! and [`redact_url`] keep the password out of every log.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where the database is.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://…` or `sqlite://path` (created if missing).
    pub url: String,
    /// Connections per process.
    pub max_connections: u32,
    /// How long to wait for a connection before giving up.
    pub connect_timeout_seconds: u64,
    /// SQLite: how long a writer waits for the lock.
    pub busy_timeout_ms: u64,
    /// What sits between this process and PostgreSQL: `none` (a direct connection) or `transaction` (a pooler
    /// such as PgBouncer in transaction mode, which hands each transaction whatever server connection is free,
    /// so nothing may outlive a transaction: no cached prepared statements, no session state, no LISTEN).
    pub pooler: Pooler,
    /// With `pooler = "transaction"`: a direct `postgres://` URL (bypassing the pooler) on which the change feed
    /// LISTENs. Without one the feed polls, and the log and health say so.
    pub listen_url: Option<String>,
}

/// What sits between the processes and PostgreSQL (`database.pooler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooler {
    /// Nothing: a session is a connection.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`).
    Transaction,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: "sqlite://data/scrinalia.sqlite".to_owned(),
            max_connections: 10,
            connect_timeout_seconds: 5,
            busy_timeout_ms: 5_000,
            pooler: Pooler::None,
            listen_url: None,
        }
    }
}

impl DatabaseSettings {
    /// The URL with any password replaced, for logs and errors.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &self.redacted_url())
            .field("max_connections", &self.max_connections)
            .field("pooler", &self.pooler)
            .field("listen_url", &self.listen_url.as_deref().map(redact_url))
            .finish_non_exhaustive()
    }
}

/// Replaces the password of a URL like `postgres://user:pw@host/db` with `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((userinfo, host)) = rest.split_once('@') else { return url.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}
