//! The database layer: one interface over PostgreSQL (production) and SQLite (the embedded default). Every SQL
//! statement of the project lives in `postgres.rs` and `sqlite.rs` beside this file; callers see only these
//! methods. Leases and timestamps always use the database clock.

/// The columns of a run, in one place for every statement that returns runs (a macro, so that statements stay
/// `&'static str` and are prepared once per connection).
macro_rules! run_columns {
    () => {
        "id, worker, state, requested_by, requested_at, arguments, config, claimed_by, claimed_at, \
         lease_expires_at, started_at, finished_at, duration_ms, exit_code, error, progress, result, \
         cancel_requested_at, cancel_requested_by, trace_context, log_key, attempt"
    };
}

mod model;
mod postgres;
mod sqlite;

use std::{str::FromStr, time::Duration};

pub use model::*;
use sqlx::{
    migrate::{MigrateError, Migrator},
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous},
};
use uuid::Uuid;

use crate::{config::DatabaseSettings, resolve::OverrideValues};

/// The PostgreSQL migrations.
pub static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");
/// The SQLite migrations.
pub static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// What can go wrong in the database layer. Domain outcomes (a conflict, a lost lease) are typed so that
/// callers can answer them precisely; everything else is a database error.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A run of this worker is already queued or running.
    #[error("worker {worker:?} already has run {run_id} {state}")]
    Conflict {
        /// The worker.
        worker: String,
        /// The run in flight.
        run_id: Uuid,
        /// Its state.
        state: RunState,
        /// The daemon holding it, if running.
        daemon_id: Option<Uuid>,
    },
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
    /// Anything else the database said.
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
}

impl DbError {
    /// Whether the connection broke under the statement (as opposed to no connection being available at all),
    /// so that the same statement on a fresh connection may well succeed.
    pub fn is_connection_lost(&self) -> bool {
        self.is_unavailable() && !matches!(self, Self::Sqlx(sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed))
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

/// Which database is behind a [`Database`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
}

/// A connection pool to either backend. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Database {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

macro_rules! on_backend {
    ($self:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $self {
            Database::Postgres(pool) => postgres::$f(pool, $($arg),*).await,
            Database::Sqlite(pool) => sqlite::$f(pool, $($arg),*).await,
        }
    };
}

/// Like `on_backend!`, for statements that are safe to repeat: a statement whose connection was cut while it ran
/// (a server restart, a terminated backend) is tried again on another connection, so a request in flight at that
/// moment gets its answer instead of an error. Each failed try uses up one cut connection (the pool drops it), so
/// a pool whose every idle connection was cut is through them in at most its size, then opens a fresh one. Not for
/// writes whose repetition would change the outcome.
macro_rules! on_backend_retrying {
    ($self:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let mut attempt = 1;
        loop {
            match on_backend!($self, $f($($arg),*)) {
                Err(e) if e.is_connection_lost() && attempt < $self.tries_on_lost_connection() => {
                    tracing::warn!(error = %e, attempt, "database connection lost during a statement; trying it again");
                    attempt += 1;
                }
                other => break other,
            }
        }
    }};
}

/// How a PostgreSQL pool makes sure a connection it hands out is alive. sqlx pings every connection when it is
/// released, so what is left to guard against is one that died while idle in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pings {
    /// Ping again before each use: one more round trip per statement, and no statement ever meets a connection
    /// that died while idle (the daemon, whose fenced writes are not all safe to repeat).
    BeforeEachUse,
    /// Do not: a statement that meets a dead connection fails and is tried again on another. Only for a caller
    /// whose statements all go through the retrying path or begin with a side-effect-free step (the API).
    OnlyAfterUse,
}

impl Database {
    /// Opens a pool. SQLite files (and their folder) are created if missing, in WAL mode with synchronous
    /// writes kept on (the ledger must survive a power cut) and a busy timeout.
    pub async fn connect(settings: &DatabaseSettings) -> Result<Self> {
        Self::connect_as(settings, "scrinalia", Pings::BeforeEachUse).await
    }

    /// As `connect`, naming the connections `application_name` on PostgreSQL, so that `pg_stat_activity` tells an
    /// operator which program holds each one (a daemon's claim connection adds ` claims` to it).
    /// `pings` says how the pool checks its idle connections (PostgreSQL only; see `Pings`).
    pub async fn connect_as(settings: &DatabaseSettings, application_name: &str, pings: Pings) -> Result<Self> {
        let url = settings.url.as_str();
        let acquire = Duration::from_secs(settings.connect_timeout_seconds);
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)?.application_name(application_name);
            let pool = PgPoolOptions::new()
                .max_connections(settings.max_connections)
                .test_before_acquire(pings == Pings::BeforeEachUse)
                .acquire_timeout(acquire)
                .connect_with(options)
                .await?;
            Ok(Self::Postgres(pool))
        } else if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_millis(settings.busy_timeout_ms))
                .foreign_keys(true);
            if let Some(dir) = options.get_filename().parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
            }
            let pool = SqlitePoolOptions::new()
                .max_connections(settings.max_connections.max(2))
                .acquire_timeout(acquire)
                .connect_with(options)
                .await?;
            Ok(Self::Sqlite(pool))
        } else {
            Err(DbError::UnsupportedUrl(crate::config::redact_url(url)))
        }
    }

    /// Applies pending migrations. Safe when several processes start at once: PostgreSQL serialises them with
    /// an advisory lock; on SQLite a process that loses the race retries and finds them applied.
    pub async fn migrate(&self) -> Result<()> {
        match self {
            Self::Postgres(pool) => Ok(POSTGRES_MIGRATOR.run(pool).await?),
            Self::Sqlite(pool) => {
                let mut attempt = 0;
                loop {
                    match SQLITE_MIGRATOR.run(pool).await {
                        Ok(()) => return Ok(()),
                        Err(_) if attempt < 5 => {
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }

    /// A pool of its own holding one connection that is not pinged before each use, for a caller whose every
    /// query is latency-critical (the daemon's claims: a claim then costs one round trip, not two). A broken
    /// connection surfaces as one failed query; the next one reconnects. On SQLite, the same pool.
    pub async fn dedicated(&self) -> Result<Self> {
        match self {
            Self::Postgres(pool) => {
                // Named apart in `pg_stat_activity`: `<program> claims`.
                let options = pool.connect_options().as_ref().clone();
                let name = format!("{} claims", options.get_application_name().unwrap_or("scrinalia"));
                let options = options.application_name(&name);
                let dedicated = PgPoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .max_lifetime(None)
                    .idle_timeout(None)
                    .test_before_acquire(false)
                    .acquire_timeout(pool.options().get_acquire_timeout())
                    .connect_with(options)
                    .await?;
                Ok(Self::Postgres(dedicated))
            }
            Self::Sqlite(_) => Ok(self.clone()),
        }
    }

    /// How many times a statement safe to repeat is tried when its connection is lost: once per connection the
    /// pool can hold, plus one on a fresh connection.
    fn tries_on_lost_connection(&self) -> u32 {
        match self {
            Self::Postgres(pool) => pool.options().get_max_connections() + 1,
            Self::Sqlite(_) => 2,
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Postgres(_) => Backend::Postgres,
            Self::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        match self {
            Self::Postgres(pool) => pool.close().await,
            Self::Sqlite(pool) => pool.close().await,
        }
    }

    /// Runs a trivial query; used by health and readiness.
    pub async fn ping(&self) -> Result<()> {
        on_backend_retrying!(self, ping())
    }

    /// Inserts a run request. A second request for a worker with a run in flight is
    /// [`DbError::Conflict`], carrying the blocking run.
    pub async fn insert_run(&self, new: &NewRun) -> Result<Run> {
        for _ in 0..3 {
            if let Some(run) = on_backend_retrying!(self, try_insert_run(new))? {
                return Ok(run);
            }
            // The blocking run may have finished in between; then the insert is simply tried again.
            if let Some(blocking) = on_backend_retrying!(self, in_flight_of(&new.worker))? {
                if blocking.id == new.id {
                    // The first attempt committed before its connection was cut: the request is ours.
                    return Ok(blocking);
                }
                return Err(DbError::Conflict {
                    worker: new.worker.clone(),
                    run_id: blocking.id,
                    state: blocking.state,
                    daemon_id: blocking.daemon_id,
                });
            }
        }
        Err(DbError::Sqlx(sqlx::Error::Protocol("the in-flight run kept changing during the insert".into())))
    }

    /// Claims up to `limit` of the oldest queued requests for `daemon`, with a lease of `lease` from now
    /// (database clock), optionally only for `workers`. Committed at once; no transaction is held for the run.
    pub async fn claim_runs(
        &self,
        daemon: Uuid,
        lease: Duration,
        limit: u32,
        workers: Option<&[String]>,
    ) -> Result<Vec<Run>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut runs = on_backend!(self, claim_runs(daemon, lease, limit, workers))?;
        runs.sort_by_key(|r| (r.requested_at, r.id));
        Ok(runs)
    }

    /// Records that the worker process of a claimed run started, and where its log goes.
    pub async fn mark_started(&self, run: Uuid, daemon: Uuid, log_key: &str) -> Result<Run> {
        on_backend!(self, mark_started(run, daemon, log_key))?
            .ok_or(DbError::LeaseLost { run_id: run, daemon_id: daemon })
    }

    /// Extends the lease of a run held by `daemon` to `lease` from now. Refused ([`DbError::LeaseLost`]) when the
    /// run is no longer running under this daemon or its lease already expired.
    pub async fn renew_lease(&self, run: Uuid, daemon: Uuid, lease: Duration) -> Result<chrono::DateTime<chrono::Utc>> {
        on_backend!(self, renew_lease(run, daemon, lease))?.ok_or(DbError::LeaseLost { run_id: run, daemon_id: daemon })
    }

    /// Stores a progress report of a run held by `daemon`, and appends it to the run's progress history.
    pub async fn record_progress(&self, run: Uuid, daemon: Uuid, progress: &serde_json::Value) -> Result<()> {
        if on_backend!(self, record_progress(run, daemon, progress))? {
            Ok(())
        } else {
            Err(DbError::LeaseLost { run_id: run, daemon_id: daemon })
        }
    }

    /// Ends a run held by `daemon`. Refused ([`DbError::LeaseLost`]) when the daemon no longer holds it, so a
    /// zombie cannot overwrite the ledger.
    pub async fn finish_run(&self, run: Uuid, daemon: Uuid, finish: &Finish) -> Result<Run> {
        debug_assert!(finish.state.is_terminal());
        on_backend!(self, finish_run(run, daemon, finish))?.ok_or(DbError::LeaseLost { run_id: run, daemon_id: daemon })
    }

    /// Asks for a run to be cancelled: a queued run is cancelled at once; a running one is flagged for its daemon.
    /// `None` if there is no such run.
    pub async fn request_cancel(&self, run: Uuid, actor: &str) -> Result<Option<CancelOutcome>> {
        if let Some(changed) = on_backend_retrying!(self, request_cancel(run, actor))? {
            return Ok(Some(if changed.state == RunState::Cancelled {
                CancelOutcome::Cancelled(changed)
            } else {
                CancelOutcome::Requested(changed)
            }));
        }
        Ok(self.get_run(run).await?.map(CancelOutcome::AlreadyFinished))
    }

    /// Runs held by `daemon` whose cancellation was requested.
    pub async fn cancel_requests(&self, daemon: Uuid) -> Result<Vec<Uuid>> {
        on_backend_retrying!(self, cancel_requests(daemon))
    }

    /// Moves every running run whose lease expired to `interrupted`, with the reason. A run with a live lease is
    /// never touched, whoever holds it.
    pub async fn recover_expired(&self) -> Result<Vec<Run>> {
        on_backend!(self, recover_expired())
    }

    /// How long until the first lease of a running run expires (database clock; zero if one already has), or
    /// `None` when nothing runs: recovery is due then, not a whole period later.
    pub async fn next_lease_expiry(&self) -> Result<Option<Duration>> {
        let seconds: Option<f64> = on_backend!(self, next_lease_expiry())?;
        Ok(seconds.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)))
    }

    /// One run.
    pub async fn get_run(&self, id: Uuid) -> Result<Option<Run>> {
        on_backend_retrying!(self, get_run(id))
    }

    /// A run's progress history, oldest first.
    pub async fn run_progress(&self, id: Uuid) -> Result<Vec<ProgressEntry>> {
        on_backend_retrying!(self, run_progress(id))
    }

    /// A page of the ledger, newest first.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        let limit = filter.limit.clamp(1, 500);
        let mut runs = on_backend_retrying!(self, list_runs(filter, limit + 1))?;
        let next = (runs.len() > limit as usize).then(|| {
            runs.truncate(limit as usize);
            runs.last().map(|r| Cursor { requested_at: r.requested_at, id: r.id }.encode())
        });
        Ok(RunPage { runs, next: next.flatten() })
    }

    /// Every run queued or running.
    pub async fn runs_in_flight(&self) -> Result<Vec<Run>> {
        on_backend_retrying!(self, runs_in_flight())
    }

    /// The last finished run of each of `workers`.
    pub async fn last_finished(&self, workers: &[String]) -> Result<Vec<Run>> {
        on_backend_retrying!(self, last_finished(workers))
    }

    /// One worker's override.
    pub async fn get_override(&self, worker: &str) -> Result<Option<Override>> {
        on_backend_retrying!(self, get_override(worker))
    }

    /// Every override.
    pub async fn list_overrides(&self) -> Result<Vec<Override>> {
        on_backend_retrying!(self, list_overrides())
    }

    /// Replaces a worker's override (an empty one removes it) and appends the change to the audit trail, in one
    /// transaction. `values` is computed from the current override by `next`, under the row's lock, so two
    /// concurrent partial edits do not lose each other. Returns the override after the change.
    pub async fn change_override(
        &self,
        worker: &str,
        actor: &str,
        reason: &str,
        next: &(dyn Fn(Option<&OverrideValues>) -> Result<OverrideValues, crate::resolve::ResolveError> + Sync),
    ) -> Result<Result<Option<Override>, crate::resolve::ResolveError>> {
        on_backend!(self, change_override(worker, actor, reason, next))
    }

    /// A worker's audit trail, newest first.
    pub async fn audit_trail(&self, worker: &str, limit: u32) -> Result<Vec<AuditEntry>> {
        on_backend_retrying!(self, audit_trail(worker, limit.clamp(1, 1000)))
    }

    /// The newest audit entry of each worker whose override was ever changed: the SQLite live-event poller
    /// compares them between two polls to tell which overrides were set or cleared.
    pub async fn last_override_changes(&self) -> Result<Vec<AuditEntry>> {
        on_backend_retrying!(self, last_override_changes())
    }

    /// Registers a daemon.
    pub async fn register_daemon(&self, daemon: &NewDaemon) -> Result<Daemon> {
        on_backend!(self, register_daemon(daemon))
    }

    /// Records a heartbeat; returns the daemon's row (`state` says whether it was asked to drain), or `None` if
    /// the row is gone.
    pub async fn heartbeat(&self, daemon: Uuid) -> Result<Option<Daemon>> {
        on_backend!(self, heartbeat(daemon))
    }

    /// Asks a daemon to drain. `None` if there is no such daemon or it is gone.
    pub async fn request_drain(&self, daemon: Uuid, actor: &str) -> Result<Option<Daemon>> {
        on_backend_retrying!(self, request_drain(daemon, actor))
    }

    /// Records that a daemon stopped cleanly.
    pub async fn mark_daemon_stopped(&self, daemon: Uuid) -> Result<()> {
        on_backend!(self, mark_daemon_stopped(daemon))
    }

    /// Marks gone every daemon whose heartbeat is older than `after`; returns their ids.
    pub async fn mark_gone_daemons(&self, after: Duration) -> Result<Vec<Uuid>> {
        on_backend!(self, mark_gone_daemons(after))
    }

    /// Daemons that are alive, or stopped within the last day.
    pub async fn list_daemons(&self) -> Result<Vec<Daemon>> {
        on_backend_retrying!(self, list_daemons())
    }

    /// One daemon.
    pub async fn get_daemon(&self, id: Uuid) -> Result<Option<Daemon>> {
        on_backend_retrying!(self, get_daemon(id))
    }

    /// Stores a queue measurement (replacing the previous one).
    pub async fn store_queue_count(&self, count: &NewQueueCount) -> Result<()> {
        on_backend!(self, store_queue_count(count))
    }

    /// Every worker's last queue measurement.
    pub async fn queue_counts(&self) -> Result<Vec<QueueCount>> {
        on_backend_retrying!(self, queue_counts())
    }

    /// The database's clock, for callers that compare ages.
    pub async fn now(&self) -> Result<chrono::DateTime<chrono::Utc>> {
        on_backend_retrying!(self, now())
    }

    /// SQLite has no notifications: a dedicated connection that tells when any other connection (of this or
    /// another process) has committed. `None` on PostgreSQL, which notifies instead.
    pub async fn change_watcher(&self) -> Result<Option<ChangeWatcher>> {
        match self {
            Self::Postgres(_) => Ok(None),
            Self::Sqlite(pool) => Ok(Some(ChangeWatcher { conn: sqlite::open_watcher(pool).await? })),
        }
    }
}

/// An override as stored, before it is shaped for callers.
#[derive(sqlx::FromRow)]
struct OverrideRow {
    worker: String,
    engine: Option<String>,
    preset: Option<String>,
    options: sqlx::types::Json<std::collections::BTreeMap<String, serde_json::Value>>,
    updated_by: String,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl From<OverrideRow> for Override {
    fn from(row: OverrideRow) -> Self {
        Self {
            worker: row.worker,
            values: OverrideValues { engine: row.engine, preset: row.preset, options: row.options.0 },
            updated_by: row.updated_by,
            updated_at: row.updated_at,
        }
    }
}

/// A unique violation of the one-run-in-flight index.
fn is_in_flight_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation()
        && d.constraint().is_none_or(|c| c == "worker_runs_one_in_flight"))
}

/// A dedicated SQLite connection watching for commits by any other connection (see
/// [`Database::change_watcher`]).
#[derive(Debug)]
pub struct ChangeWatcher {
    conn: sqlx::SqliteConnection,
}

impl ChangeWatcher {
    /// A number that differs from the previous call's whenever another connection committed in between.
    pub async fn version(&mut self) -> Result<i64> {
        sqlite::data_version(&mut self.conn).await
    }

    /// Whether a queued request is visible (a read on the index of queued rows, which takes no lock).
    pub async fn queued(&mut self) -> Result<bool> {
        sqlite::any_queued(&mut self.conn).await
    }
}
