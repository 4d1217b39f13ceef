//! The test harness: a fresh PostgreSQL database or a fresh SQLite file per test, configuration files for the
//! real binaries, and helpers to start, stop, freeze and kill those binaries.
//!
//! PostgreSQL comes from `SCRINALIA_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`, the CI
//! server). A test that cannot reach it fails with a sentence saying so; it is never skipped silently.

pub mod api_harness;
pub mod browser;
pub mod chaos;
pub mod daemon_harness;
pub mod fixtures;
pub mod moto;
pub mod process;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use scrinalia_shared::{Database, Settings, config::DatabaseSettings};
use sqlx::{Connection, Executor, PgConnection};
use tempfile::TempDir;
use uuid::Uuid;

/// The server the PostgreSQL tests create their databases on.
pub fn postgres_admin_url() -> String {
    std::env::var("SCRINALIA_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Terminates the connections to the PostgreSQL test database at `url` from an admin connection, as a failover or
/// an operator would: all of them, or only those whose `application_name` is `program`. Returns how many.
pub async fn terminate_connections(url: &str, program: Option<&str>) -> i64 {
    let name = url.rsplit('/').next().expect("a database name");
    let mut admin = PgConnection::connect(&postgres_admin_url()).await.expect("an admin connection");
    sqlx::query_scalar(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity \
         where datname = $1 and pid <> pg_backend_pid() and ($2::text is null or application_name = $2)",
    )
    .bind(name)
    .bind(program)
    .fetch_one(&mut admin)
    .await
    .expect("terminate the connections")
}

/// Which backend a test database uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A fresh PostgreSQL database.
    Postgres,
    /// A fresh SQLite file.
    Sqlite,
}

/// A fresh, migrated database for one test, with a scratch folder for files.
pub struct TestDb {
    /// The pool.
    pub db: Database,
    /// Its URL, for configuration files of the real binaries.
    pub url: String,
    /// Which backend.
    pub kind: Kind,
    /// A scratch folder removed at the end (kept when `SCRINALIA_KEEP_TEST_FILES` is set).
    pub dir: TempDir,
    pg_name: Option<String>,
}

impl TestDb {
    /// A fresh database of `kind`.
    pub async fn new(kind: Kind) -> Self {
        match kind {
            Kind::Postgres => Self::postgres().await,
            Kind::Sqlite => Self::sqlite().await,
        }
    }

    /// A fresh PostgreSQL database, named by a UUID and migrated.
    pub async fn postgres() -> Self {
        let admin = postgres_admin_url();
        let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
            panic!(
                "The PostgreSQL tests need a server at {admin} (set SCRINALIA_TEST_PG to use another): {e}. \
                 Start PostgreSQL, or see README.md."
            )
        });
        let name = format!("scrinalia_test_{}", Uuid::new_v4().simple());
        conn.execute(sqlx::AssertSqlSafe(format!("create database {name}"))).await.expect("create the test database");
        let url = match admin.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("SCRINALIA_TEST_PG must end with a database name"),
        };
        let db = connect(&url).await;
        Self { db, url, kind: Kind::Postgres, dir: scratch(), pg_name: Some(name) }
    }

    /// A fresh SQLite file in a scratch folder, migrated.
    pub async fn sqlite() -> Self {
        let dir = scratch();
        let url = format!("sqlite://{}", dir.path().join("scrinalia.sqlite").display());
        let db = connect(&url).await;
        Self { db, url, kind: Kind::Sqlite, dir, pg_name: None }
    }

    /// Another pool on the same database (a second process's view).
    pub async fn another_pool(&self) -> Database {
        connect(&self.url).await
    }

    /// Drops the PostgreSQL database (after closing every connection). Not called when a test panics, so a
    /// failed test's database is kept for inspection.
    pub async fn cleanup(self) {
        self.db.close().await;
        if let Some(name) = &self.pg_name
            && std::env::var_os("SCRINALIA_KEEP_TEST_FILES").is_none()
            && let Ok(mut conn) = PgConnection::connect(&postgres_admin_url()).await
        {
            let _ = conn.execute(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)"))).await;
        }
    }
}

async fn connect(url: &str) -> Database {
    let settings = DatabaseSettings { url: url.to_owned(), max_connections: 20, ..DatabaseSettings::default() };
    let db = Database::connect(&settings).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    db.migrate().await.expect("apply the migrations");
    db
}

fn scratch() -> TempDir {
    let mut dir = tempfile::Builder::new().prefix("scrinalia-test-").tempdir().expect("a scratch folder");
    // Kept with its files (the folder is still a `TempDir`, so callers need not know).
    dir.disable_cleanup(std::env::var_os("SCRINALIA_KEEP_TEST_FILES").is_some());
    dir
}

/// The path of one of the workspace's binaries (`cargo build --workspace` builds them; `scripts/test` does).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `cargo build --workspace` first (scripts/test does)", path.display());
    path
}

/// Loads a configuration from TOML text written to `dir`, as the binaries would.
pub fn settings_from(dir: &Path, toml: &str) -> Settings {
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).expect("write the configuration");
    Settings::load_from(Some(&path), Vec::new()).unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `check` every 20 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Declares each listed `async fn name(db: TestDb)` twice: `postgres::name` and `sqlite::name`, each on a fresh
/// database.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::TestDb::postgres().await;
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::TestDb::sqlite().await;
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}
