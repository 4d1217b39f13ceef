//! The database as each process may use it. [`Store`] is the part every process shares (the clock, one run, the
//! change feed, the catalogue's stored descriptions, …); [`ApiStore`] adds what an API process does (request,
//! cancel, continue, change overrides, read the ledger) and [`DaemonStore`] what a daemon does (claim, lease,
//! finish, recover, fire schedules, prune). The API holds an `ApiStore` and the daemon a `DaemonStore`, so
//! neither can reach the other's operations through the type it holds; `tests/tests/suite/architecture.rs`
//! checks that no file of `api/src` names the daemon's store and no file of `daemon/src` the API's.
//!
//! The operations themselves live in the domain modules (`runs`, `pipelines`, `schedules`, …) as methods of
//! [`Store`] visible to this crate only; the façades forward to them, so each façade's file is the list of what
//! its process may do.

use std::{ops::Deref, time::Duration};

use crate::{Backend, Database, DbError, Pings, changes::ChangeFeed, changes::Topic, config::DatabaseSettings};

mod api;
mod daemon;

pub use api::ApiStore;
pub use daemon::DaemonStore;

/// The part of the database every process uses. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) db: Database,
}

impl Store {
    /// Opens a pool on `settings` (see [`Database::connect_as`]), naming its connections `application_name` on
    /// PostgreSQL; `pings` says how the pool checks its idle connections.
    pub async fn connect(settings: &DatabaseSettings, application_name: &str, pings: Pings) -> Result<Self, DbError> {
        Ok(Self { db: Database::connect_as(settings, application_name, pings).await? })
    }

    /// As `connect`, each statement bounded by `statement_timeout` on PostgreSQL (see
    /// [`Database::connect_limited`]; migrations are not).
    pub(crate) async fn connect_limited(
        settings: &DatabaseSettings,
        application_name: &str,
        pings: Pings,
        statement_timeout: Option<std::time::Duration>,
    ) -> Result<Self, DbError> {
        Ok(Self { db: Database::connect_limited(settings, application_name, pings, statement_timeout).await? })
    }

    /// Applies pending migrations (safe when several processes start at once).
    pub async fn migrate(&self) -> Result<(), DbError> {
        self.db.migrate().await
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        self.db.backend()
    }

    /// Whether the connections go through a pooler in transaction mode (`database.pooler`).
    pub fn is_pooled(&self) -> bool {
        self.db.is_pooled()
    }

    /// Why the change feed polls instead of listening on PostgreSQL, if it does (for the log and health).
    pub fn feed_polled(&self) -> Option<&'static str> {
        self.db.feed_polled()
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Runs a trivial query; used by health and readiness.
    pub async fn ping(&self) -> Result<(), DbError> {
        self.db.ping().await
    }

    /// The database's clock: every lease, fire time and age is read off it.
    pub async fn now(&self) -> Result<chrono::DateTime<chrono::Utc>, DbError> {
        self.db.now().await
    }

    /// Starts a change feed of `topic` on a connection of its own.
    pub fn changes(&self, topic: Topic) -> Result<ChangeFeed, DbError> {
        self.db.changes(topic)
    }
}

/// How long until `seconds` from now, read off the database clock (zero when it is past; `None` stays `None`).
pub(crate) fn wait_of(seconds: Option<f64>) -> Option<Duration> {
    seconds.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX))
}

/// Forwards each listed method of a façade to the [`Store`] method of the same name, with the same documentation.
/// A façade's list is what its process may do; the operation itself is written once, in its domain module.
macro_rules! forward {
    ($(
        $(#[$meta:meta])*
        $vis:vis async fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
    )*) => {
        $(
            $(#[$meta])*
            $vis async fn $name(&self $(, $arg: $ty)*) -> $ret {
                self.store.$name($($arg),*).await
            }
        )*
    };
}
use forward;

impl Deref for ApiStore {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

impl Deref for DaemonStore {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}
