//! The test harness: a fresh PostgreSQL database or a fresh SQLite file per test (with a scratch folder), the
//! `backend_tests!` macro that runs a test on both, and the harnesses of the API (in-process), the daemon, the
//! chaos suite, the browser and moto, and Server-Sent Events read whole ([`sse`]), all over the workspace's test
//! kit (`scrinalia-testkit`).
//!
//! PostgreSQL comes from `SCRINALIA_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`, the CI
//! server). A test that cannot reach it fails with a sentence saying so; it is never skipped silently.

pub mod api_harness;
pub mod browser;
pub mod chaos;
pub mod daemon_harness;
pub mod fixtures;
pub mod idp;
pub mod moto;
pub mod pgbouncer;
pub mod sse;
pub mod system;

use std::path::PathBuf;

pub use scrinalia_testkit::Stores;
pub use scrinalia_testkit::{Binaries, ConfigFile, Kind, Process, Reply, eventually, free_port, process::Ready};
use scrinalia_testkit::{FreshDb, config};
use sqlx::{Connection, PgConnection};
use tempfile::TempDir;

/// The server the PostgreSQL tests create their databases on.
pub fn postgres_admin_url() -> String {
    std::env::var("SCRINALIA_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Terminates the connections to the PostgreSQL test database at `url` from an admin connection, as a failover or
/// an operator would: all of them, or only those whose `application_name` is `program`. Returns how many, once
/// every one of them is gone: `pg_terminate_backend` only signals a backend, which exits in its own time.
pub async fn terminate_connections(url: &str, program: Option<&str>) -> i64 {
    let name = url.rsplit('/').next().expect("a database name");
    let mut admin = PgConnection::connect(&postgres_admin_url()).await.expect("an admin connection");
    let terminated: Vec<i32> = sqlx::query_scalar(
        "select coalesce(array_agg(pid) filter (where pg_terminate_backend(pid)), '{}') from pg_stat_activity \
         where datname = $1 and pid <> pg_backend_pid() and ($2::text is null or application_name = $2)",
    )
    .bind(name)
    .bind(program)
    .fetch_one(&mut admin)
    .await
    .expect("terminate the connections");
    let admin = &tokio::sync::Mutex::new(admin);
    eventually(std::time::Duration::from_secs(30), "the terminated connections to be gone", || async {
        let left: i64 = sqlx::query_scalar("select count(*) from pg_stat_activity where pid = any($1)")
            .bind(&terminated)
            .fetch_one(&mut *admin.lock().await)
            .await
            .expect("read pg_stat_activity");
        (left == 0).then_some(())
    })
    .await;
    i64::try_from(terminated.len()).expect("a count")
}

/// A fresh, migrated database for one test, with a scratch folder for files.
pub struct TestDb {
    /// The API's store and the daemon's, over one pool (see [`Stores`]).
    pub db: Stores,
    /// Its URL, for configuration files of the real binaries.
    pub url: String,
    /// Which backend.
    pub kind: Kind,
    /// A scratch folder removed at the end (kept when `SCRINALIA_KEEP_TEST_FILES` is set).
    pub dir: TempDir,
    fresh: FreshDb,
}

impl TestDb {
    /// A fresh database of `kind`.
    pub async fn new(kind: Kind) -> Self {
        let dir = scratch();
        let fresh = FreshDb::create(kind, &postgres_admin_url(), "scrinalia_test", dir.path(), 20)
            .await
            .unwrap_or_else(|e| panic!("The {} tests need a fresh database: {e:#}", kind.name()));
        Self { db: fresh.db.clone(), url: fresh.url.clone(), kind, dir, fresh }
    }

    /// A fresh PostgreSQL database, named by a UUID and migrated.
    pub async fn postgres() -> Self {
        Self::new(Kind::Postgres).await
    }

    /// A fresh SQLite file in a scratch folder, migrated.
    pub async fn sqlite() -> Self {
        Self::new(Kind::Sqlite).await
    }

    /// Another pool on the same database (a second process's view).
    pub async fn another_pool(&self) -> Stores {
        self.fresh.another_pool(20).await.expect("another pool")
    }

    /// Runs raw `sql` on a connection of its own (what no domain operation does); returns the rows affected.
    pub async fn execute(&self, sql: &str) -> anyhow::Result<u64> {
        self.fresh.execute(sql).await
    }

    /// A configuration file on this database with its run logs in the scratch folder.
    pub fn config(&self) -> ConfigFile {
        ConfigFile::new(&self.url, self.dir.path())
    }

    /// Writes `config` as `<scratch>/<name>.toml`; returns its path.
    pub fn write_config(&self, config: &ConfigFile, name: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.toml"));
        config.write(&path).expect("write the configuration");
        path
    }

    /// Drops the PostgreSQL database (after closing every connection). Not called when a test panics, so a
    /// failed test's database is kept for inspection.
    pub async fn cleanup(self) {
        if std::env::var_os("SCRINALIA_KEEP_TEST_FILES").is_none() {
            self.fresh.drop_database().await;
        } else {
            self.db.close().await;
        }
    }
}

fn scratch() -> TempDir {
    let mut dir = tempfile::Builder::new().prefix("scrinalia-test-").tempdir().expect("a scratch folder");
    // Kept with its files (the folder is still a `TempDir`, so callers need not know).
    dir.disable_cleanup(std::env::var_os("SCRINALIA_KEEP_TEST_FILES").is_some());
    dir
}

/// The path of one of the workspace's binaries (`cargo build --workspace` builds them; `scripts/test` does).
pub fn bin_path(name: &str) -> PathBuf {
    Binaries::of_this_test().path(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The workspace's demo worker, whose probes the tests run.
pub fn demo_worker() -> PathBuf {
    bin_path("scrinalia-demo-worker")
}

/// The daemon settings of the tests (see [`config::test_daemon`]).
pub fn test_daemon() -> scrinalia_shared::config::DaemonSettings {
    config::test_daemon()
}

/// Declares each listed `async fn name(db: &TestDb)` twice: `postgres::name` and `sqlite::name`, each on a fresh
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

/// Starts the workspace binary `bin` with `args` and `env`, its output to `<dir>/<name>.log`; readiness is the
/// caller's to wait for.
pub fn start(bin: &str, name: &str, dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Process {
    Process::start(&bin_path(bin), name, dir, args, env).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Starts `scrinalia-api` on `config` and waits until `http://127.0.0.1:<port>/readyz` answers.
pub async fn start_api(
    dir: &std::path::Path,
    name: &str,
    config: &std::path::Path,
    port: u16,
    env: &[(&str, &str)],
) -> Process {
    let ready = format!("http://127.0.0.1:{port}/readyz");
    Process::start_ready(&bin_path("scrinalia-api"), name, dir, config, &["serve"], env, Ready::Http(&ready))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Starts `scrinalia-daemon` on `config` and waits until it says it started (it is registered then).
pub async fn start_daemon(
    dir: &std::path::Path,
    name: &str,
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> Process {
    Process::start_ready(&bin_path("scrinalia-daemon"), name, dir, config, &[], env, Ready::Line("daemon started"))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}
