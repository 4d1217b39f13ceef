//! The handle on the database: opening a pool on either backend, applying the migrations, and what every
//! caller asks of the pool itself (its backend, its clock, a ping, whether it is pooled, a transaction).

use std::{
    str::FromStr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use sqlx::{
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous},
};

use crate::{DatabaseSettings, DbError, Pooler, Result, dialect, is_sqlite_busy, pooler, run};

/// The PostgreSQL migrations.
static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");
/// The SQLite migrations.
static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

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

/// A connection pool to either backend. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Database {
    pool: Pool,
    own_writes: OwnWrites,
    /// PostgreSQL: where the change feed listens, or that it polls (SQLite: unused).
    feed: pooler::FeedSource,
    /// `database.pooler`, which the dedicated pools follow too.
    pooler: Pooler,
    /// Whether the pool's statements have a statement timeout (which migrations lift).
    limited: bool,
}

/// Runs `$body` with `$pool` bound to the pool of `$db`: the same code, compiled for each backend, for what is
/// asked of a pool itself rather than of a statement (see [`run!`] for those).
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db.pool() {
            $crate::database::Pool::Postgres($pool) => $body,
            $crate::database::Pool::Sqlite($pool) => $body,
        }
    };
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
        Self::connect_limited(settings, application_name, pings, None).await
    }

    /// As `connect_as`, every statement of the pool bounded by `statement_timeout` on PostgreSQL (an API's: its
    /// reads must not hold a connection for minutes). On a direct connection it is the session's setting, given
    /// when it connects; behind a pooler a `SET LOCAL` that begins each transaction, so that it never outlives it.
    /// Migrations run without it. SQLite has no statement timeout: none is set.
    pub async fn connect_limited(
        settings: &DatabaseSettings,
        application_name: &str,
        pings: Pings,
        statement_timeout: Option<Duration>,
    ) -> Result<Self> {
        let url = settings.url.as_str();
        let acquire = Duration::from_secs(settings.connect_timeout_seconds);
        let mut feed = pooler::FeedSource::Poll;
        let pool = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)?.application_name(application_name);
            let mut options = pooler::connect_options(options, settings);
            if let Some(timeout) = statement_timeout.filter(|_| settings.pooler != Pooler::Transaction) {
                options = options.options([("statement_timeout", timeout.as_millis().max(1))]);
            }
            let pool_options = PgPoolOptions::new()
                .max_connections(settings.max_connections)
                .test_before_acquire(pings == Pings::BeforeEachUse)
                .acquire_timeout(acquire);
            let pool = pool_options.connect_with(options).await?;
            feed = pooler::feed_source(&pool, settings, application_name)?;
            Pool::Postgres(pooler::PgExec::new(pool, settings.pooler).limited(statement_timeout))
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
            return Err(DbError::UnsupportedUrl(crate::redact_url(url)));
        };
        let limited = statement_timeout.is_some();
        Ok(Self { pool, own_writes: OwnWrites::default(), feed, pooler: settings.pooler, limited })
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
            (Pool::Postgres(pool), _) if self.limited => {
                // A migration may take longer than an API's statements: run on a connection of its own whose
                // later `-c statement_timeout=0` overrides the pool's.
                let options = pool.connect_options().as_ref().clone().options([("statement_timeout", 0)]);
                let unlimited = PgPoolOptions::new().max_connections(1).connect_with(options).await?;
                let migrated = POSTGRES_MIGRATOR.run(&unlimited).await;
                unlimited.close().await;
                Ok(migrated?)
            }
            (Pool::Postgres(pool), _) => Ok(POSTGRES_MIGRATOR.run(&**pool).await?),
            (Pool::Sqlite(pool), _) => {
                // SQLite has no advisory lock: two processes starting on one file at once (the demo's API and
                // daemon) would otherwise run the same migration side by side. A lock file beside the database
                // makes the second wait and then find everything applied; the retries stay for a file without one.
                let _held = sqlite_migration_lock(pool.connect_options().get_filename()).await;
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
                    // Only a daemon asks for one, and its pool has no statement timeout.
                    limited: false,
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
        self.retrying(|| async {
            on_pool!(self, |pool| sqlx::query("select 1").execute(pool).await.map(drop)).map_err(DbError::from)
        })
        .await
    }

    /// The database's clock.
    pub async fn now(&self) -> Result<chrono::DateTime<chrono::Utc>> {
        const NOW: dialect::Sql = dialect::sql!("select ", now);
        self.retrying(|| async { run!(self, NOW, |pool, sql| sqlx::query_scalar(sql).fetch_one(pool).await) }).await
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

    /// Marks one of this process's periodic writes (a heartbeat, a queue count) as under way until the guard is
    /// dropped, so that this process's own SQLite change feed does not take it for another process's change.
    pub fn own_write(&self) -> OwnWrite<'_> {
        self.own_writes.begin()
    }

    /// Evaluates `statement`, which is safe to repeat, again when its connection was cut while it ran (a server
    /// restart, a terminated backend), so that a request in flight at that moment gets its answer instead of an
    /// error. Each failed try uses up one cut connection (the pool drops it), so a pool whose every idle
    /// connection was cut is through them in at most its size, then opens a fresh one. Not for writes whose
    /// repetition would change the outcome.
    pub async fn retrying<T, F, Fut>(&self, statement: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 1;
        loop {
            match statement().await {
                Err(e) if e.is_connection_lost() && attempt < self.tries_on_lost_connection() => {
                    tracing::warn!(error = %e, attempt, "database connection lost during a statement; trying it again");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// How many times a statement safe to repeat is tried when its connection is lost: once per connection the
    /// pool can hold, plus one on a fresh connection.
    fn tries_on_lost_connection(&self) -> u32 {
        match &self.pool {
            Pool::Postgres(pool) => pool.options().get_max_connections() + 1,
            Pool::Sqlite(_) => 2,
        }
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

/// A periodic write of this process in progress (see [`Database::own_write`]).
pub struct OwnWrite<'a>(&'a OwnWrites);

impl Drop for OwnWrite<'_> {
    fn drop(&mut self) {
        let mut state = self.0.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        state.1 = Some(Instant::now());
    }
}

/// Takes the lock of `<database>.migrate-lock` (waiting for another process's migrations), released when the
/// file returned is dropped. `None` for an in-memory database, or when the file cannot be made or locked (a
/// read-only folder): the migrations then rely on their retries alone, as the warning says.
async fn sqlite_migration_lock(database: &std::path::Path) -> Option<std::fs::File> {
    let name = database.as_os_str();
    if name.is_empty() || name == ":memory:" {
        return None;
    }
    let mut path = name.to_owned();
    path.push(".migrate-lock");
    let path = std::path::PathBuf::from(path);
    let shown = path.display().to_string();
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await;
    match locked {
        Ok(Ok(file)) => Some(file),
        Ok(Err(error)) => {
            tracing::warn!(%error, lock = %shown, "cannot lock the migrations of the SQLite file; relying on retries");
            None
        }
        Err(error) => {
            tracing::warn!(%error, lock = %shown, "cannot lock the migrations of the SQLite file; relying on retries");
            None
        }
    }
}
