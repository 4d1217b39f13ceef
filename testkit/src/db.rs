//! A fresh, migrated database for one test or one benchmark: a PostgreSQL database named by a UUID on the
//! server at an admin URL (dropped at the end, its connections included), or a SQLite file in a given folder.
//! Raw SQL for what no domain operation does (seeding a backlog, breaking the append-only trail on purpose) goes
//! through [`FreshDb::execute`] and [`FreshDb::scalar`], on a connection of their own.
//!
//! A test or a benchmark plays both processes, so it holds [`Stores`]: the API's store and the daemon's over one
//! pool, each with what its process may do.

use std::path::Path;

use anyhow::Context as _;
use scrinalia_shared::{ApiStore, DaemonStore, Pings, Store, config::DatabaseSettings};
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};
use uuid::Uuid;

/// Which backend a database uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A fresh PostgreSQL database.
    Postgres,
    /// A fresh SQLite file.
    Sqlite,
}

impl Kind {
    /// The backend's name, for tables and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::Sqlite => "SQLite",
        }
    }
}

/// The API's store and the daemon's over one pool, for a caller that plays both processes on one database (a
/// test, a benchmark): `api` requests, cancels, continues and reads, `daemon` claims, leases, finishes,
/// recovers, fires and prunes; what both do ([`Store`]: the clock, one run, the change feed, …) is reached
/// through either. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stores {
    /// What an API process may do.
    pub api: ApiStore,
    /// What a daemon may do.
    pub daemon: DaemonStore,
}

impl Stores {
    /// Both stores over `store`'s pool.
    pub fn over(store: Store) -> Self {
        Self { api: ApiStore::new(store.clone()), daemon: DaemonStore::new(store) }
    }

    /// Both stores over a pool of one connection of its own that is not pinged before each use (see
    /// [`DaemonStore::dedicated`]), for a caller that times each statement; on SQLite, the same pool.
    pub async fn dedicated(&self) -> anyhow::Result<Self> {
        let dedicated = self.daemon.dedicated().await.context("a dedicated connection")?;
        Ok(Self::over(Store::clone(&dedicated)))
    }

    /// Closes the pool both share.
    pub async fn close(&self) {
        self.api.close().await;
    }
}

/// A fresh database.
pub struct FreshDb {
    /// Both stores over one pool on it.
    pub db: Stores,
    /// Its URL, for configuration files of the real binaries.
    pub url: String,
    /// Which backend.
    pub kind: Kind,
    /// PostgreSQL: the admin URL and the database's name, to drop it.
    pg: Option<(String, String)>,
}

impl FreshDb {
    /// A fresh database of `kind`: `<prefix>_<uuid>` on the PostgreSQL server at `pg_admin`, or
    /// `<dir>/scrinalia.sqlite`; migrated, with a pool of `connections`.
    pub async fn create(
        kind: Kind,
        pg_admin: &str,
        prefix: &str,
        dir: &Path,
        connections: u32,
    ) -> anyhow::Result<Self> {
        let (url, pg) = match kind {
            Kind::Postgres => {
                let mut conn = PgConnection::connect(pg_admin).await.with_context(|| {
                    format!("no PostgreSQL server at {pg_admin} (set SCRINALIA_TEST_PG to use another; see README.md)")
                })?;
                let name = format!("{prefix}_{}", Uuid::new_v4().simple());
                conn.execute(sqlx::AssertSqlSafe(format!("create database {name}")))
                    .await
                    .context("create database")?;
                let _ = conn.close().await;
                let (server, _) = pg_admin.rsplit_once('/').context("the admin URL must end with a database name")?;
                (format!("{server}/{name}"), Some((pg_admin.to_owned(), name)))
            }
            Kind::Sqlite => (format!("sqlite://{}", dir.join("scrinalia.sqlite").display()), None),
        };
        match pool(&url, connections).await {
            Ok(db) => Ok(Self { db, url, kind, pg }),
            Err(e) => {
                if let Some((admin, name)) = &pg {
                    drop_pg(admin, name).await;
                }
                Err(e)
            }
        }
    }

    /// Another pool on the same database (another process's view), with `connections` connections.
    pub async fn another_pool(&self, connections: u32) -> anyhow::Result<Stores> {
        pool(&self.url, connections).await
    }

    /// The PostgreSQL database's name.
    pub fn pg_name(&self) -> Option<&str> {
        self.pg.as_ref().map(|(_, name)| name.as_str())
    }

    /// Runs `sql` on a connection of its own; returns the rows it affected.
    pub async fn execute(&self, sql: &str) -> anyhow::Result<u64> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        Ok(match self.kind {
            Kind::Postgres => PgConnection::connect(&self.url).await?.execute(sql).await?.rows_affected(),
            Kind::Sqlite => SqliteConnection::connect(&self.url).await?.execute(sql).await?.rows_affected(),
        })
    }

    /// The one number `sql` selects, on a connection of its own.
    pub async fn scalar(&self, sql: &str) -> anyhow::Result<i64> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        Ok(match self.kind {
            Kind::Postgres => sqlx::query_scalar(sql).fetch_one(&mut PgConnection::connect(&self.url).await?).await?,
            Kind::Sqlite => sqlx::query_scalar(sql).fetch_one(&mut SqliteConnection::connect(&self.url).await?).await?,
        })
    }

    /// Closes the pool and drops the PostgreSQL database, connections of killed processes included.
    pub async fn drop_database(&self) {
        self.db.close().await;
        if let Some((admin, name)) = &self.pg {
            drop_pg(admin, name).await;
        }
    }
}

async fn drop_pg(admin: &str, name: &str) {
    if let Ok(mut conn) = PgConnection::connect(admin).await {
        let _ = conn.execute(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)"))).await;
        let _ = conn.close().await;
    }
}

/// A migrated pool of `connections` on `url`, its connections pinged before each use (as the daemon's are, so
/// that both stores may use it) and named `scrinalia` on PostgreSQL.
async fn pool(url: &str, connections: u32) -> anyhow::Result<Stores> {
    let settings =
        DatabaseSettings { url: url.to_owned(), max_connections: connections, ..DatabaseSettings::default() };
    let store = Store::connect(&settings, "scrinalia", Pings::BeforeEachUse)
        .await
        .with_context(|| format!("connect to {}", settings.redacted_url()))?;
    store.migrate().await.context("apply the migrations")?;
    Ok(Stores::over(store))
}
