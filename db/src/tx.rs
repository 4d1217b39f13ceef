//! The transaction value: a workflow that must be atomic opens a [`Tx`] on the [`Database`], passes it to the
//! statement functions of this crate, and commits it; dropping it uncommitted rolls it back. [`On`] is where one
//! statement runs: the pool (autocommitted; behind a pooler, in a transaction of its own) or a transaction.
//!
//! How each backend begins: a transaction that writes takes SQLite's write lock at once (`BEGIN IMMEDIATE`), so
//! a read-modify-write never interleaves with another writer and never has to upgrade its lock (which SQLite
//! answers with SQLITE_BUSY); behind a pooler, PostgreSQL's begin also drops the named statements an earlier
//! client left on the server connection (see `pooler`). Locks on a key are transaction-scoped advisory locks on
//! PostgreSQL; on SQLite the write lock already serialises every writer.

use sqlx::{PgConnection, Postgres, Sqlite, SqliteConnection};

use crate::{Backend, Database, DbError, Result, database::Pool, pooler};

/// An open transaction on either backend. Commit it with [`Tx::commit`]; dropped uncommitted, it rolls back.
#[derive(Debug)]
pub struct Tx {
    conn: TxConn,
}

/// The transaction behind a [`Tx`].
#[derive(Debug)]
pub(crate) enum TxConn {
    Postgres(sqlx::Transaction<'static, Postgres>),
    Sqlite(sqlx::Transaction<'static, Sqlite>),
}

/// Where a statement runs: on the pool, one statement committed on its own, or inside a transaction. Statement
/// functions take `impl Into<On>`, so a caller passes `&db` or `&mut tx`.
#[derive(Debug)]
pub enum On<'c> {
    /// The pool of a database.
    Pool(&'c Database),
    /// An open transaction.
    Tx(&'c mut Tx),
}

impl<'c> From<&'c Database> for On<'c> {
    fn from(db: &'c Database) -> Self {
        On::Pool(db)
    }
}

impl<'c> From<&'c mut Tx> for On<'c> {
    fn from(tx: &'c mut Tx) -> Self {
        On::Tx(tx)
    }
}

/// The executor of an [`On`], by backend and kind, for [`run!`].
pub(crate) enum Exec<'c> {
    PgPool(&'c pooler::PgExec),
    SqlitePool(&'c sqlx::SqlitePool),
    PgTx(&'c mut PgConnection),
    SqliteTx(&'c mut SqliteConnection),
}

impl<'c> On<'c> {
    /// Which backend the statement goes to.
    pub fn backend(&self) -> Backend {
        match self {
            On::Pool(db) => db.backend(),
            On::Tx(tx) => tx.backend(),
        }
    }

    pub(crate) fn exec(self) -> Exec<'c> {
        match self {
            On::Pool(db) => match db.pool() {
                Pool::Postgres(pool) => Exec::PgPool(pool),
                Pool::Sqlite(pool) => Exec::SqlitePool(pool),
            },
            On::Tx(tx) => match &mut tx.conn {
                TxConn::Postgres(t) => Exec::PgTx(t),
                TxConn::Sqlite(t) => Exec::SqliteTx(t),
            },
        }
    }
}

/// Runs `$body` with `$exec` bound to the executor of `$on` (an `impl Into<On>`) and `$text` to the text of the
/// statement `$sql` in its dialect: the same code, compiled for each backend, on a pool or in a transaction.
/// Evaluates to the body's `sqlx::Result`, converted to this crate's.
macro_rules! run {
    ($on:expr, $sql:expr, |$exec:ident, $text:ident| $body:expr) => {{
        let sql: $crate::dialect::Sql = $sql;
        let on: $crate::On<'_> = $on.into();
        let done: sqlx::Result<_> = match on.exec() {
            $crate::tx::Exec::PgPool($exec) => {
                let $text: &'static str = sql.postgres;
                $body
            }
            $crate::tx::Exec::SqlitePool($exec) => {
                let $text: &'static str = sql.sqlite;
                $body
            }
            $crate::tx::Exec::PgTx($exec) => {
                let $text: &'static str = sql.postgres;
                $body
            }
            $crate::tx::Exec::SqliteTx($exec) => {
                let $text: &'static str = sql.sqlite;
                $body
            }
        };
        done.map_err($crate::DbError::from)
    }};
}
pub(crate) use run;

impl Database {
    /// Begins a transaction that will write. On SQLite it holds the database's write lock from its first
    /// statement (`BEGIN IMMEDIATE`); on PostgreSQL a connection found cut is replaced before anything happened,
    /// since trying again is then always safe (an API pool does not ping connections before use).
    pub async fn begin_write(&self) -> Result<Tx> {
        let conn = match self.pool() {
            Pool::Postgres(pool) => {
                let mut attempt = 1;
                loop {
                    match pooler::begin(pool).await.map_err(DbError::from) {
                        Err(e) if e.is_connection_lost() && attempt <= pool.options().get_max_connections() => {
                            attempt += 1;
                        }
                        other => break TxConn::Postgres(other?),
                    }
                }
            }
            Pool::Sqlite(pool) => TxConn::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
        };
        Ok(Tx { conn })
    }

    /// Begins a transaction that only reads: one consistent snapshot for several statements (SQLite: a deferred
    /// `BEGIN`, which takes no write lock).
    pub async fn begin_read(&self) -> Result<Tx> {
        let conn = match self.pool() {
            Pool::Postgres(pool) => TxConn::Postgres(pooler::begin(pool).await?),
            Pool::Sqlite(pool) => TxConn::Sqlite(pool.begin().await?),
        };
        Ok(Tx { conn })
    }
}

impl Tx {
    /// Which backend it is on.
    pub fn backend(&self) -> Backend {
        match self.conn {
            TxConn::Postgres(_) => Backend::Postgres,
            TxConn::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Commits it.
    pub async fn commit(self) -> Result<()> {
        match self.conn {
            TxConn::Postgres(t) => t.commit().await?,
            TxConn::Sqlite(t) => t.commit().await?,
        }
        Ok(())
    }

    /// Rolls it back (as dropping it does, but awaited, so the connection is clean before the caller goes on).
    pub async fn rollback(self) -> Result<()> {
        match self.conn {
            TxConn::Postgres(t) => t.rollback().await?,
            TxConn::Sqlite(t) => t.rollback().await?,
        }
        Ok(())
    }

    /// Makes every other transaction that locks `key` wait until this one ends: it serialises edits of a key
    /// even when no row exists yet (PostgreSQL: a transaction-scoped advisory lock; SQLite: the write lock
    /// already does).
    pub async fn lock(&mut self, key: &str) -> Result<()> {
        if let TxConn::Postgres(t) = &mut self.conn {
            sqlx::query("select pg_advisory_xact_lock(hashtext('scrinalia.' || $1))")
                .bind(key)
                .execute(&mut **t)
                .await?;
        }
        Ok(())
    }

    /// Takes the lock of `key` if no other transaction holds it, without waiting; whether it was taken (always
    /// on SQLite, whose write lock this transaction holds already).
    pub async fn try_lock(&mut self, key: &str) -> Result<bool> {
        match &mut self.conn {
            TxConn::Postgres(t) => {
                Ok(sqlx::query_scalar("select pg_try_advisory_xact_lock(hashtext('scrinalia.' || $1))")
                    .bind(key)
                    .fetch_one(&mut **t)
                    .await?)
            }
            TxConn::Sqlite(_) => Ok(true),
        }
    }
}
