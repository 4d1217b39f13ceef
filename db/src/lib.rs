//! The database layer of Scrinalia: a [`Database`] handle over PostgreSQL (production) or SQLite (the embedded
//! default), the transaction value [`Tx`], and the statements as small typed functions, by table ([`runs`],
//! [`overrides`], [`daemons`], …), plus the change feed ([`feed`]). It knows SQL and the two dialects, and no
//! rule of the domain: which statements make a workflow, and in what order, is decided by `scrinalia-shared`,
//! which opens a [`Tx`] and passes it to these functions. This crate depends on `scrinalia-wire` and its own row
//! types only, so the compiler keeps it so.
//!
//! Every statement function takes where it runs as `impl Into<On>`: the pool (`&Database`, one autocommitted
//! statement) or a transaction (`&mut Tx`). Each statement is written once ([`dialect::sql!`]) and run on
//! whichever backend the handle holds ([`run!`] compiles the same code for each backend and for a pool or a
//! transaction). Where the dialects really differ (the claim's `skip locked`, how a progress report is
//! written), both texts sit side by side in the same function.
//!
//! Why statements are checked by running them rather than by sqlx's `query!` macros: a macro checks a statement
//! against one live database (or its offline cache) of one backend at compile time, and ours run on two, with
//! fragments rendered per dialect. Every statement here is instead run against both real backends by the test
//! suite (each domain operation has a PostgreSQL and a SQLite test), which checks its SQL, its parameter
//! binding and the decoding of its rows into the wire types on both, and needs no database to build.
//!
//! Leases and every other time come from the database clock.

pub mod backlog;
pub mod bulk;
pub mod chores;
pub mod daemons;
mod database;
pub mod descriptions;
mod dialect;
pub mod ends;
pub mod feed;
pub mod history;
pub mod items;
pub mod lease;
pub mod ledger;
pub mod overrides;
pub mod pauses;
pub mod pipelines;
#[doc(hidden)]
pub mod plans;
mod pooler;
pub mod preemption;
pub mod quarantine;
pub mod queue_counts;
pub mod resource_overrides;
pub mod resources;
pub mod retention;
pub mod running_items;
pub mod runs;
pub mod schedules;
pub mod settings;
pub mod shards;
pub mod tokens;
mod tx;
pub mod webhooks;

use sqlx::migrate::MigrateError;
use uuid::Uuid;

pub use database::{Backend, Database, Pings};
pub use dialect::DbTime;
pub use lease::Lease;
pub use pooler::POLLED_WARNING;
pub use settings::{DatabaseSettings, Pooler, redact_url};
pub(crate) use tx::run;
pub use tx::{On, Tx};

/// What can go wrong in the database layer. Outcomes the caller acts on (a lost lease) are typed;
/// everything else is a database error.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The caller no longer holds the run's lease: another process recovered it, or the lease expired.
    #[error("daemon {daemon_id} no longer holds the lease of run {run_id}")]
    LeaseLost {
        /// The run.
        run_id: Uuid,
        /// The daemon that tried to write.
        daemon_id: Uuid,
    },
    /// The URL is not one this layer can open.
    #[error("unsupported database URL {0:?}: use postgres://… or sqlite://…")]
    UnsupportedUrl(String),
    /// Migrations could not be applied.
    #[error("could not apply the database migrations: {0}")]
    Migrate(#[from] MigrateError),
    /// The database answered in a way its statements should never lead to (a sentence says what).
    #[error("unexpected database state: {0}")]
    Unexpected(String),
    /// Anything else the database said.
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
}

impl DbError {
    /// Whether the connection broke under the statement (as opposed to no connection being available at all),
    /// so that the same statement on a fresh connection may well succeed.
    pub fn is_connection_lost(&self) -> bool {
        self.is_unavailable()
            && !self.is_timed_out()
            && !matches!(self, Self::Sqlx(sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed))
    }

    /// Whether the statement was cancelled by its `statement_timeout` (SQLSTATE 57014): the database answers,
    /// but this statement took too long, so repeating it at once would only wait as long again.
    pub fn is_timed_out(&self) -> bool {
        matches!(self, Self::Sqlx(sqlx::Error::Database(e)) if e.code().as_deref() == Some("57014"))
    }

    /// Whether the error means the database could not be reached (as opposed to a refused statement).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::Sqlx(sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_))
        ) || matches!(self, Self::Sqlx(sqlx::Error::Database(e)) if e.code().is_some_and(|c| c.starts_with("57") || c.starts_with("08")))
    }
}

/// The result type of this layer.
pub type Result<T, E = DbError> = std::result::Result<T, E>;

/// SQLite's "busy" and "locked" result codes, extended codes included.
fn is_sqlite_busy(code: Option<&str>) -> bool {
    code.and_then(|c| c.parse::<u32>().ok()).is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

/// A unique violation of the one-run-in-flight index.
pub(crate) fn is_in_flight_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation()
        && d.constraint().is_none_or(|c| c == "worker_runs_one_in_flight"))
}
