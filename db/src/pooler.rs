//! Working through a pooler in transaction mode (PgBouncer `pool_mode = transaction`, `database.pooler =
//! "transaction"`), where each transaction may get a different server connection and nothing may outlive one.
//!
//! Two things in sqlx 0.9 break there, and `statement_cache_capacity(0)` alone fixes neither:
//! - every statement with parameters is prepared under a name (`sqlx_s_N`, numbered per client connection)
//!   even with the cache off, and never closed, so the next client handed that server connection meets
//!   `prepared statement "sqlx_s_1" already exists`;
//! - a statement is prepared (Parse, Describe, Sync) and then run (Bind, Execute, Sync) in two round trips:
//!   outside a transaction the pooler may hand the second to another server connection, which does not know
//!   the statement (or knows another client's).
//!
//! So behind a pooler every statement the layer runs on the pool ([`PgExec`], the pool its code sees) goes in
//! a transaction of its own (`BEGIN`, the statement, `COMMIT`, all awaited before the caller sees the rows, so
//! what it wrote is visible to its next statement on any connection), which pins one server connection for
//! both round trips, and unnamed, so it leaves nothing behind. The layer's own transactions
//! ([`begin_pooled`]) start with `DEALLOCATE ALL`, which drops the named statements an earlier client's
//! transaction left on that server connection, so their names cannot collide. A statement costs two more
//! round trips than on a direct connection.
//!
//! Nothing else in this layer keeps session state: locks are transaction-scoped (`pg_advisory_xact_lock`), no
//! `SET` outlives a transaction, no temporary tables; LISTEN needs a session and uses the direct
//! `database.listen_url` (see [`FeedSource`]).

use std::ops::Deref;

use futures::{FutureExt, StreamExt, TryStreamExt, future::BoxFuture, stream::BoxStream};
use sqlx::{
    Either, Execute, Executor, Postgres, SqlStr,
    error::BoxDynError,
    postgres::{PgArguments, PgConnectOptions, PgPool, PgPoolOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo},
};

use crate::{DatabaseSettings, Pooler};

/// How the layer's own transactions begin behind a pooler (see the module's documentation).
const BEGIN_POOLED: &str = "BEGIN; DEALLOCATE ALL";

/// The PostgreSQL pool as the layer's statements see it: on a direct connection the pool itself; behind a pooler,
/// each statement in a transaction of its own, unnamed (see the module's documentation). Derefs to the pool.
#[derive(Debug, Clone)]
pub(crate) struct PgExec {
    pool: PgPool,
    pooled: bool,
    /// Behind a pooler with a statement timeout: what begins each transaction, `SET LOCAL` included (on a direct
    /// connection the timeout is the session's, set when it connects).
    begin_limited: Option<String>,
}

impl PgExec {
    /// The pool `pool`, behind `pooler`.
    pub(crate) fn new(pool: PgPool, pooler: Pooler) -> Self {
        Self { pool, pooled: pooler == Pooler::Transaction, begin_limited: None }
    }

    /// Behind a pooler, every transaction of this pool (its own and each statement's) begins with `SET LOCAL
    /// statement_timeout`, which ends with the transaction and so never reaches another client of the pooler.
    pub(crate) fn limited(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.begin_limited = timeout
            .filter(|_| self.pooled)
            .map(|t| format!("BEGIN; SET LOCAL statement_timeout = {}", t.as_millis().max(1)));
        self
    }

    /// Begins a statement's own transaction behind a pooler.
    async fn begin_statement(&self) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
        match &self.begin_limited {
            Some(begin) => self.pool.begin_with(sqlx::AssertSqlSafe(begin.clone())).await,
            None => self.pool.begin().await,
        }
    }
}

/// Begins one of the layer's transactions on `pool`.
pub(crate) async fn begin(pool: &PgExec) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
    match (&pool.begin_limited, pool.pooled) {
        (Some(begin), _) => pool.pool.begin_with(sqlx::AssertSqlSafe(format!("{begin}; DEALLOCATE ALL"))).await,
        (None, true) => pool.pool.begin_with(BEGIN_POOLED).await,
        (None, false) => pool.pool.begin().await,
    }
}

impl Deref for PgExec {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.pool
    }
}

/// A statement run without a server-side name: it cannot outlive its transaction nor meet another's name.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(self) -> SqlStr {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement> {
        self.0.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

impl<'p> Executor<'p> for &'_ PgExec {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, sqlx::Result<Either<PgQueryResult, PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return (&self.pool).fetch_many(query);
        }
        let exec = self.clone();
        // Read to the end inside the transaction: it must be committed before the caller acts on the rows.
        let all = async move {
            let mut tx = exec.begin_statement().await?;
            let items: Vec<_> = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(items)
        };
        all.map(|items| match items {
            Ok(items) => futures::stream::iter(items.into_iter().map(Ok)).left_stream(),
            Err(e) => futures::stream::once(async move { Err(e) }).right_stream(),
        })
        .flatten_stream()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, sqlx::Result<Option<PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return (&self.pool).fetch_optional(query);
        }
        let exec = self.clone();
        async move {
            let mut tx = exec.begin_statement().await?;
            let row = (&mut *tx).fetch_optional(Unnamed(query)).await?;
            tx.commit().await?;
            Ok(row)
        }
        .boxed()
    }

    fn prepare_with<'e>(self, sql: SqlStr, parameters: &'e [PgTypeInfo]) -> BoxFuture<'e, sqlx::Result<PgStatement>>
    where
        'p: 'e,
    {
        (&self.pool).prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, sqlx::Result<sqlx::Describe<Postgres>>>
    where
        'p: 'e,
    {
        (&self.pool).describe(sql)
    }
}
/// Where a PostgreSQL change feed hears of changes.
#[derive(Debug, Clone)]
pub(crate) enum FeedSource {
    /// LISTEN on a connection of this pool: the main pool (no pooler) or one on `database.listen_url`.
    Listen(PgPool),
    /// Poll: the pooler cannot carry a LISTEN and no direct URL is set.
    Poll,
}

/// Why a feed polls instead of listening, for the log and health.
pub const POLLED_WARNING: &str = "events are polled, not listened for: database.pooler is \"transaction\" and no \
    direct database.listen_url is set, so changes arrive up to a poll interval late";

/// The connect options of the main pool: without a statement cache behind a pooler.
pub(crate) fn connect_options(options: PgConnectOptions, settings: &DatabaseSettings) -> PgConnectOptions {
    match settings.pooler {
        Pooler::None => options,
        Pooler::Transaction => options.statement_cache_capacity(0),
    }
}

/// Where the change feed listens, given the main pool.
pub(crate) fn feed_source(
    pool: &PgPool,
    settings: &DatabaseSettings,
    application_name: &str,
) -> sqlx::Result<FeedSource> {
    match (settings.pooler, settings.listen_url.as_deref()) {
        (Pooler::None, _) => Ok(FeedSource::Listen(pool.clone())),
        (Pooler::Transaction, Some(url)) => {
            let options = url.parse::<PgConnectOptions>()?.application_name(&format!("{application_name} listener"));
            // Lazy: a process that never subscribes opens no direct connection; one listener at a time each.
            let direct = PgPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(pool.options().get_acquire_timeout())
                .connect_lazy_with(options);
            Ok(FeedSource::Listen(direct))
        }
        (Pooler::Transaction, None) => {
            tracing::warn!(warning = POLLED_WARNING, "change feed: no direct LISTEN URL behind the pooler");
            Ok(FeedSource::Poll)
        }
    }
}
