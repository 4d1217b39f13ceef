//! The database layer, private to this crate: a [`Database`] handle over PostgreSQL (production) or SQLite (the
//! embedded default), and the statements, by table: [`runs`], [`overrides`], [`daemons`], [`queue_counts`], and
//! the change feed ([`feed`]). The public operations live in the crate's domain modules (`crate::runs`, …);
//! nothing outside this crate names a pool or `sqlx`.
//!
//! Each statement is written once ([`dialect::sql!`]) and run on whichever pool the handle holds
//! ([`on_pool!`] compiles the same code for both). Where the dialects really differ (the claim's `skip locked`,
//! how a progress report is written, how an override edit is serialised), both texts sit side by side in the
//! same function.
//!
//! Why statements are checked by running them rather than by sqlx's `query!` macros: a macro checks a statement
//! against one live database (or its offline cache) of one backend at compile time, and ours run on two, with
//! fragments rendered per dialect. Every statement here is instead run against both real backends by the test
//! suite (each domain operation has a PostgreSQL and a SQLite test), which checks its SQL, its parameter
//! binding and the decoding of its rows into the wire types on both, and needs no database to build.
//!
//! Leases and every other time come from the database clock.

pub(crate) mod chores;
pub(crate) mod daemons;
pub(crate) mod descriptions;
pub(crate) mod dialect;
pub(crate) mod ends;
pub(crate) mod feed;
pub(crate) mod history;
pub(crate) mod ledger;
pub(crate) mod overrides;
pub(crate) mod pipelines;
pub(crate) mod plans;
pub(crate) mod pooler;
pub(crate) mod queue_counts;
pub(crate) mod resource_overrides;
pub(crate) mod resources;
pub(crate) mod retention;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod tokens;
pub(crate) mod webhooks;

use std::{
    str::FromStr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use sqlx::{
    migrate::{MigrateError, Migrator},
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous},
};
use uuid::Uuid;

use crate::{
    RunState,
    config::{DatabaseSettings, Pooler},
};

/// The PostgreSQL migrations.
static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");
/// The SQLite migrations.
static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// What can go wrong in the database layer. Outcomes the caller acts on (a conflict, a lost lease) are typed;
/// everything else is a database error.
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

/// The pool behind a [`Database`].
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    /// PostgreSQL (each statement in a transaction of its own behind a pooler, see `pooler`).
    Postgres(pooler::PgExec),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// A connection pool to either backend, with the domain operations of this crate as methods. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Database {
    pool: Pool,
    own_writes: OwnWrites,
    /// PostgreSQL: where the change feed listens, or that it polls (SQLite: unused).
    feed: pooler::FeedSource,
    /// `database.pooler`, which the dedicated pools follow too.
    pooler: Pooler,
}

/// Runs `$body` with `$pool` bound to the pool of `$db`: the same code, compiled for each backend. With a
/// statement, `$text` is bound to its text in the pool's dialect.
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db.pool() {
            $crate::db::Pool::Postgres($pool) => $body,
            $crate::db::Pool::Sqlite($pool) => $body,
        }
    };
    ($db:expr, $sql:expr, |$pool:ident, $text:ident| $body:expr) => {
        match $db.pool() {
            $crate::db::Pool::Postgres($pool) => {
                let $text: &'static str = $sql.postgres;
                $body
            }
            $crate::db::Pool::Sqlite($pool) => {
                let $text: &'static str = $sql.sqlite;
                $body
            }
        }
    };
}
pub(crate) use on_pool;

/// Evaluates `$call`, a statement that is safe to repeat, again when its connection was cut while it ran (a
/// server restart, a terminated backend), so that a request in flight at that moment gets its answer instead of
/// an error. Each failed try uses up one cut connection (the pool drops it), so a pool whose every idle
/// connection was cut is through them in at most its size, then opens a fresh one. Not for writes whose
/// repetition would change the outcome.
macro_rules! retrying {
    ($db:expr, $call:expr) => {{
        let mut attempt = 1;
        loop {
            match $call {
                Err(e) if e.is_connection_lost() && attempt < $db.tries_on_lost_connection() => {
                    tracing::warn!(error = %e, attempt, "database connection lost during a statement; trying it again");
                    attempt += 1;
                }
                other => break other,
            }
        }
    }};
}
pub(crate) use retrying;

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
        let mut feed = pooler::FeedSource::Poll;
        let pool = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)?.application_name(application_name);
            let options = pooler::connect_options(options, settings);
            let pool_options = PgPoolOptions::new()
                .max_connections(settings.max_connections)
                .test_before_acquire(pings == Pings::BeforeEachUse)
                .acquire_timeout(acquire);
            let pool = pool_options.connect_with(options).await?;
            feed = pooler::feed_source(&pool, settings, application_name)?;
            Pool::Postgres(pooler::PgExec::new(pool, settings.pooler))
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
            let pool_options =
                SqlitePoolOptions::new().max_connections(settings.max_connections.max(2)).acquire_timeout(acquire);
            // Processes that open a new file at the same moment race to switch it to WAL, which takes the
            // database's lock before the busy timeout applies: the loser is told "database is locked" and tries
            // again (seen with three daemons started together on a file that did not exist yet).
            let mut attempt: u32 = 0;
            let pool = loop {
                match pool_options.clone().connect_with(options.clone()).await {
                    Err(sqlx::Error::Database(e)) if is_sqlite_busy(e.code().as_deref()) && attempt < 20 => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                    }
                    other => break other?,
                }
            };
            Pool::Sqlite(pool)
        } else {
            return Err(DbError::UnsupportedUrl(crate::config::redact_url(url)));
        };
        Ok(Self { pool, own_writes: OwnWrites::default(), feed, pooler: settings.pooler })
    }

    /// Applies pending migrations. Safe when several processes start at once: PostgreSQL serialises them with
    /// an advisory lock; on SQLite a process that loses the race retries and finds them applied.
    /// Behind a pooler the migrations run on the direct `database.listen_url` when there is one; without one
    /// the session advisory lock cannot be used (it would stay on whichever server connection took it), so
    /// processes that race there retry, as on SQLite.
    pub async fn migrate(&self) -> Result<()> {
        match (&self.pool, &self.feed) {
            (Pool::Postgres(_), pooler::FeedSource::Listen(direct)) if self.is_pooled() => {
                Ok(POSTGRES_MIGRATOR.run(direct).await?)
            }
            (Pool::Postgres(pool), _) if self.is_pooled() => {
                let pool: &PgPool = pool;
                let mut migrator = Migrator { migrations: POSTGRES_MIGRATOR.migrations.clone(), ..Migrator::DEFAULT };
                migrator.set_locking(false);
                let mut attempt = 0;
                loop {
                    match migrator.run(pool).await {
                        Ok(()) => return Ok(()),
                        Err(e) if attempt < 5 => {
                            attempt += 1;
                            tracing::debug!(error = %e, attempt, "migrations raced another process; trying again");
                            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            (Pool::Postgres(pool), _) => Ok(POSTGRES_MIGRATOR.run(&**pool).await?),
            (Pool::Sqlite(pool), _) => {
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
        match &self.pool {
            Pool::Postgres(pool) => {
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
                Ok(Self {
                    pool: Pool::Postgres(pooler::PgExec::new(dedicated, self.pooler)),
                    own_writes: self.own_writes.clone(),
                    feed: self.feed.clone(),
                    pooler: self.pooler,
                })
            }
            Pool::Sqlite(_) => Ok(self.clone()),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Postgres(_) => Backend::Postgres,
            Pool::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        on_pool!(self, |pool| pool.close().await)
    }

    /// Runs a trivial query; used by health and readiness.
    pub async fn ping(&self) -> Result<()> {
        retrying!(
            self,
            on_pool!(self, |pool| sqlx::query("select 1").execute(pool).await.map(drop)).map_err(DbError::from)
        )
    }

    /// The database's clock.
    pub async fn now(&self) -> Result<chrono::DateTime<chrono::Utc>> {
        const NOW: dialect::Sql = dialect::sql!("select ", now);
        retrying!(
            self,
            on_pool!(self, NOW, |pool, sql| sqlx::query_scalar(sql).fetch_one(pool).await).map_err(DbError::from)
        )
    }

    /// The text of `sql` in this database's dialect.
    pub(crate) fn text(&self, sql: dialect::Sql) -> &'static str {
        match self.pool {
            Pool::Postgres(_) => sql.postgres,
            Pool::Sqlite(_) => sql.sqlite,
        }
    }

    /// Whether the connections go through a pooler in transaction mode (`database.pooler`).
    pub fn is_pooled(&self) -> bool {
        self.backend() == Backend::Postgres && self.pooler == Pooler::Transaction
    }

    /// Why the change feed polls instead of listening on PostgreSQL, if it does (for the log and health).
    pub fn feed_polled(&self) -> Option<&'static str> {
        match (&self.pool, &self.feed) {
            (Pool::Postgres(_), pooler::FeedSource::Poll) => Some(pooler::POLLED_WARNING),
            _ => None,
        }
    }

    pub(crate) fn feed_source(&self) -> &pooler::FeedSource {
        &self.feed
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn own_writes(&self) -> &OwnWrites {
        &self.own_writes
    }

    /// How many times a statement safe to repeat is tried when its connection is lost: once per connection the
    /// pool can hold, plus one on a fresh connection.
    pub(crate) fn tries_on_lost_connection(&self) -> u32 {
        match &self.pool {
            Pool::Postgres(pool) => pool.options().get_max_connections() + 1,
            Pool::Sqlite(_) => 2,
        }
    }
}

/// How each backend begins a transaction that will write, and serialises the transactions about one key.
pub(crate) trait Dialect: sqlx::Database {
    /// Begins a transaction that writes.
    async fn begin_write(pool: &sqlx::Pool<Self>) -> Result<sqlx::Transaction<'static, Self>>;
    /// Makes every other transaction that locks `key` wait until this one ends.
    async fn lock(tx: &mut sqlx::Transaction<'static, Self>, key: &str) -> Result<()>;
    /// Takes the lock of `key` if no other transaction holds it, without waiting; whether it was taken.
    async fn try_lock(tx: &mut sqlx::Transaction<'static, Self>, key: &str) -> Result<bool>;
}

impl Dialect for sqlx::Postgres {
    /// Begins on another connection when the first one is found cut: nothing has happened yet, so trying again
    /// is always safe (an API pool does not ping connections before use, see `Pings`).
    async fn begin_write(pool: &PgPool) -> Result<sqlx::Transaction<'static, Self>> {
        let mut attempt = 1;
        loop {
            match pooler::begin(pool).await.map_err(DbError::from) {
                Err(e) if e.is_connection_lost() && attempt <= pool.options().get_max_connections() => attempt += 1,
                other => return other,
            }
        }
    }

    /// A transaction-scoped advisory lock: it serialises edits of a key even when no row exists yet.
    async fn lock(tx: &mut sqlx::Transaction<'static, Self>, key: &str) -> Result<()> {
        sqlx::query("select pg_advisory_xact_lock(hashtext('scrinalia.' || $1))").bind(key).execute(&mut **tx).await?;
        Ok(())
    }

    async fn try_lock(tx: &mut sqlx::Transaction<'static, Self>, key: &str) -> Result<bool> {
        let taken = sqlx::query_scalar("select pg_try_advisory_xact_lock(hashtext('scrinalia.' || $1))")
            .bind(key)
            .fetch_one(&mut **tx)
            .await?;
        Ok(taken)
    }
}

impl Dialect for sqlx::Sqlite {
    /// `BEGIN IMMEDIATE` takes the database's write lock at once, so a read-modify-write cannot interleave with
    /// another writer and never has to upgrade its lock (which SQLite answers with SQLITE_BUSY).
    async fn begin_write(pool: &SqlitePool) -> Result<sqlx::Transaction<'static, Self>> {
        Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// The write lock taken by `begin_write` already serialises every writer.
    async fn lock(_: &mut sqlx::Transaction<'static, Self>, _: &str) -> Result<()> {
        Ok(())
    }

    /// Always taken: the transaction holds the database's write lock already.
    async fn try_lock(_: &mut sqlx::Transaction<'static, Self>, _: &str) -> Result<bool> {
        Ok(true)
    }
}

/// File changes this long after one of this process's periodic writes are taken to be that write's.
const OWN_WRITE_ECHO: Duration = Duration::from_millis(5);

/// This process's periodic writes (heartbeats, queue counts) in progress or just done, so that the SQLite change
/// feed of the same process does not take their echo on the database files for another process's change (which
/// would cost a daemon a claim query after every heartbeat). A request written at that very moment is seen by the
/// next change or the slow poll instead.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnWrites(Arc<Mutex<(u32, Option<Instant>)>>);

impl OwnWrites {
    /// Marks a write in progress until the guard is dropped.
    pub(crate) fn begin(&self) -> OwnWrite<'_> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
        OwnWrite(self)
    }

    /// Whether a file change now is the echo of one of our writes.
    pub(crate) fn echoing(&self) -> bool {
        let (in_flight, last_end) = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        in_flight > 0 || last_end.is_some_and(|end| end.elapsed() < OWN_WRITE_ECHO)
    }
}

/// A periodic write of this process in progress.
pub(crate) struct OwnWrite<'a>(&'a OwnWrites);

impl Drop for OwnWrite<'_> {
    fn drop(&mut self) {
        let mut state = self.0.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        state.1 = Some(Instant::now());
    }
}

/// SQLite's "busy" and "locked" result codes, extended codes included.
fn is_sqlite_busy(code: Option<&str>) -> bool {
    code.and_then(|c| c.parse::<u32>().ok()).is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

/// A unique violation of the one-run-in-flight index.
pub(crate) fn is_in_flight_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation()
        && d.constraint().is_none_or(|c| c == "worker_runs_one_in_flight"))
}
