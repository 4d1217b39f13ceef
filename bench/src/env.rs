//! What every bench needs: its own database (a fresh PostgreSQL database `scrinalia_bench_<uuid>`, dropped at
//! the end, or a fresh SQLite file), configuration files with a generated catalogue of no-op probe workers, the
//! real release binaries started as child processes, and readings of `/proc`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, bail};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use scrinalia_shared::{
    Database, ExplicitArgs, Settings,
    auth::hash_token,
    config::DatabaseSettings,
    db::{NewRun, Run},
    resolve,
};
use sqlx::{Connection, Executor, PgConnection};
use tempfile::TempDir;
use tokio::process::{Child, Command};
use uuid::Uuid;

/// The viewer token of the bench's API.
pub const VIEWER: &str = "scr_bench_viewer_token";
/// The operator token of the bench's API.
pub const OPERATOR: &str = "scr_bench_operator_token";

/// Where the binaries and the database server are, and a scratch folder for this invocation.
pub struct Env {
    /// The folder holding `scrinalia-daemon`, `scrinalia-api` and `scrinalia-demo-worker`.
    pub bin_dir: PathBuf,
    /// A PostgreSQL URL whose server the bench may create databases on.
    pub pg_admin: String,
    /// Scratch files (configurations, logs, SQLite files, run logs).
    pub scratch: PathBuf,
    /// Removes the scratch folder at the end, unless kept.
    _guard: Option<TempDir>,
}

/// The binaries the bench starts.
pub const BINARIES: [&str; 3] = ["scrinalia-daemon", "scrinalia-api", "scrinalia-demo-worker"];

impl Env {
    /// Checks that the binaries are there.
    pub fn new(bin_dir: PathBuf, pg_admin: String, keep: bool) -> anyhow::Result<Self> {
        for name in BINARIES {
            let path = bin_dir.join(name);
            if !path.is_file() {
                bail!(
                    "{} is missing. Build the release binaries first: `cargo build --release --workspace` \
                     (or pass --bin-dir with the folder that holds {}).",
                    path.display(),
                    BINARIES.join(", ")
                );
            }
        }
        let guard = tempfile::Builder::new().prefix("scrinalia-bench-").tempdir().context("a scratch folder")?;
        let (scratch, guard) = if keep {
            let kept = guard.keep();
            eprintln!("scratch files kept in {}", kept.display());
            (kept, None)
        } else {
            (guard.path().to_path_buf(), Some(guard))
        };
        Ok(Self { bin_dir, pg_admin, scratch, _guard: guard })
    }

    /// The path of one of the binaries.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// A fresh folder for one bench.
    pub fn folder(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.scratch.join(format!("{name}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        Ok(dir)
    }
}

/// Which database a bench runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
}

impl Backend {
    /// The name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::Sqlite => "SQLite",
        }
    }
}

/// A fresh, migrated database of one bench.
pub struct BenchDb {
    /// A pool on it (the bench's own view, like another process's).
    pub db: Database,
    /// Its URL, for configuration files.
    pub url: String,
    /// Which backend.
    pub backend: Backend,
    /// The PostgreSQL database's name, to drop it.
    pg_name: Option<String>,
    admin: String,
}

impl BenchDb {
    /// A fresh database: `scrinalia_bench_<uuid>` on the PostgreSQL server, or a SQLite file in `dir`.
    pub async fn new(env: &Env, backend: Backend, dir: &Path) -> anyhow::Result<Self> {
        let (url, pg_name) = match backend {
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&env.pg_admin).await.with_context(|| {
                    format!(
                        "connect to PostgreSQL at {} (pass --pg with a server the bench may create databases on)",
                        env.pg_admin
                    )
                })?;
                let name = format!("scrinalia_bench_{}", Uuid::new_v4().simple());
                conn.execute(sqlx::AssertSqlSafe(format!("create database {name}")))
                    .await
                    .context("create the bench database")?;
                let _ = conn.close().await;
                let Some((server, _)) = env.pg_admin.rsplit_once('/') else {
                    bail!("--pg must end with a database name")
                };
                (format!("{server}/{name}"), Some(name))
            }
            Backend::Sqlite => (format!("sqlite://{}", dir.join("scrinalia.sqlite").display()), None),
        };
        let db = match pool(&url, 20).await {
            Ok(db) => db,
            Err(e) => {
                if let Some(name) = &pg_name {
                    drop_pg(&env.pg_admin, name).await;
                }
                return Err(e);
            }
        };
        Ok(Self { db, url, backend, pg_name, admin: env.pg_admin.clone() })
    }

    /// Another pool on the same database, with `connections` connections.
    pub async fn another_pool(&self, connections: u32) -> anyhow::Result<Database> {
        pool(&self.url, connections).await
    }

    /// The PostgreSQL pool, for the bench's own SQL (seeding, statistics).
    pub fn pg(&self) -> Option<&sqlx::PgPool> {
        match &self.db {
            Database::Postgres(p) => Some(p),
            Database::Sqlite(_) => None,
        }
    }

    /// Closes the pool and drops the PostgreSQL database (connections of killed processes included).
    pub async fn drop_database(&self) {
        self.db.close().await;
        if let Some(name) = &self.pg_name {
            drop_pg(&self.admin, name).await;
        }
    }

    /// The name of the PostgreSQL database.
    pub fn pg_name(&self) -> Option<&str> {
        self.pg_name.as_deref()
    }
}

async fn drop_pg(admin: &str, name: &str) {
    match PgConnection::connect(admin).await {
        Ok(mut conn) => {
            if let Err(e) =
                conn.execute(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)"))).await
            {
                eprintln!("could not drop the bench database {name}: {e}");
            }
            let _ = conn.close().await;
        }
        Err(e) => eprintln!("could not drop the bench database {name}: {e}"),
    }
}

async fn pool(url: &str, connections: u32) -> anyhow::Result<Database> {
    let settings =
        DatabaseSettings { url: url.to_owned(), max_connections: connections, ..DatabaseSettings::default() };
    let db = Database::connect(&settings).await.with_context(|| format!("connect to {}", settings.redacted_url()))?;
    db.migrate().await.context("apply the migrations")?;
    Ok(db)
}

/// Runs `body` on a fresh database, dropping it afterwards whatever happened.
pub async fn with_db<T>(
    env: &Env,
    backend: Backend,
    dir: &Path,
    body: impl AsyncFnOnce(&BenchDb) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let db = BenchDb::new(env, backend, dir).await?;
    let result = body(&db).await;
    db.drop_database().await;
    result
}

/// What a configuration file holds besides the database.
#[derive(Debug, Clone)]
pub struct ConfigSpec {
    /// `probe-1` … `probe-<probes>`, each a no-op (`duration_ms`, `progress_steps`, `output_lines` default 0).
    pub probes: usize,
    /// `[daemon]` keys over the shipped defaults (TOML values).
    pub daemon: Vec<(&'static str, String)>,
    /// `database.max_connections`, when not the default.
    pub max_connections: Option<u32>,
    /// `api.listen`, when an API is started.
    pub api_listen: Option<std::net::SocketAddr>,
    /// `telemetry.log_filter`.
    pub log_filter: &'static str,
}

impl Default for ConfigSpec {
    fn default() -> Self {
        Self { probes: 20, daemon: Vec::new(), max_connections: None, api_listen: None, log_filter: "info" }
    }
}

/// Writes `<dir>/<name>.toml` and loads it as the binaries will.
pub fn write_config(
    env: &Env,
    db: &BenchDb,
    dir: &Path,
    name: &str,
    spec: &ConfigSpec,
) -> anyhow::Result<(PathBuf, Settings)> {
    use std::fmt::Write as _;
    let mut toml = String::with_capacity(200 * spec.probes + 1024);
    let _ = writeln!(toml, "[database]\nurl = {:?}", db.url);
    if let Some(n) = spec.max_connections {
        let _ = writeln!(toml, "max_connections = {n}");
    }
    if let Some(listen) = spec.api_listen {
        let _ = writeln!(toml, "\n[api]\nlisten = \"{listen}\"");
    }
    let _ = writeln!(toml, "\n[daemon]");
    for (key, value) in &spec.daemon {
        let _ = writeln!(toml, "{key} = {value}");
    }
    let _ = writeln!(
        toml,
        "\n[object_store]\nkind = \"local\"\npath = {:?}\n\n[telemetry]\nlog_filter = {:?}\n",
        dir.join("run-logs").display().to_string(),
        spec.log_filter
    );
    let _ = writeln!(
        toml,
        "[auth]\ntokens = [\n  {{ name = \"bench-viewer\", role = \"viewer\", hash = \"{}\" }},\n  {{ name = \"bench-operator\", role = \"operator\", hash = \"{}\" }},\n]\n",
        hash_token(VIEWER),
        hash_token(OPERATOR)
    );
    let worker = env.bin("scrinalia-demo-worker").display().to_string();
    for i in 1..=spec.probes {
        let _ = writeln!(
            toml,
            "[[workers]]\nname = \"probe-{i}\"\ncommand = [{worker:?}, \"probe-{i}\"]\ntimeout_seconds = 60\noptions = [\
             {{ name = \"duration_ms\", type = \"integer\", default = 0 }}, \
             {{ name = \"progress_steps\", type = \"integer\", default = 0 }}, \
             {{ name = \"output_lines\", type = \"integer\", default = 0 }}]\n"
        );
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).with_context(|| format!("write {}", path.display()))?;
    let settings = Settings::load_from(Some(&path), Vec::new()).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((path, settings))
}

/// A request for `worker` with its catalogue defaults, resolved as the API resolves it.
pub fn new_run(settings: &Settings, worker: &str, options: serde_json::Value) -> anyhow::Result<NewRun> {
    let spec = settings.catalogue.worker(worker).with_context(|| format!("{worker} is not in the catalogue"))?;
    let options = options.as_object().cloned().unwrap_or_default().into_iter().collect();
    let explicit = ExplicitArgs { options, ..ExplicitArgs::default() };
    let config = resolve(&settings.catalogue, spec, &explicit, None)?;
    Ok(NewRun {
        id: Uuid::now_v7(),
        worker: worker.to_owned(),
        requested_by: "bench".to_owned(),
        arguments: explicit,
        config,
        trace_context: None,
    })
}

/// Inserts `n` queued requests, one per worker `probe-1` … `probe-<n>`, in one statement (PostgreSQL) or one
/// transaction (SQLite), as a backlog waiting for daemons.
pub async fn seed_backlog(db: &BenchDb, settings: &Settings, n: usize) -> anyhow::Result<()> {
    let runs: Vec<NewRun> =
        (1..=n).map(|i| new_run(settings, &format!("probe-{i}"), serde_json::json!({}))).collect::<Result<_, _>>()?;
    match &db.db {
        Database::Postgres(pool) => {
            let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
            let workers: Vec<String> = runs.iter().map(|r| r.worker.clone()).collect();
            let arguments: Vec<serde_json::Value> =
                runs.iter().map(|r| serde_json::to_value(&r.arguments)).collect::<Result<_, _>>()?;
            let configs: Vec<serde_json::Value> =
                runs.iter().map(|r| serde_json::to_value(&r.config)).collect::<Result<_, _>>()?;
            sqlx::query(
                "insert into worker_runs (id, worker, requested_by, arguments, config) \
                 select id, worker, 'bench', arguments, config \
                 from unnest($1::uuid[], $2::text[], $3::jsonb[], $4::jsonb[]) as r(id, worker, arguments, config)",
            )
            .bind(&ids)
            .bind(&workers)
            .bind(&arguments)
            .bind(&configs)
            .execute(pool)
            .await
            .context("seed the backlog")?;
            sqlx::query("analyze worker_runs").execute(pool).await?;
        }
        Database::Sqlite(pool) => {
            let mut tx = pool.begin().await?;
            for run in &runs {
                sqlx::query("insert into worker_runs (id, worker, requested_by, arguments, config) values (?1, ?2, 'bench', ?3, ?4)")
                    .bind(run.id)
                    .bind(&run.worker)
                    .bind(sqlx::types::Json(&run.arguments))
                    .bind(sqlx::types::Json(&run.config))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await.context("seed the backlog")?;
        }
    }
    Ok(())
}

/// Runs of the ledger, as the bench reads them after a measurement.
pub async fn runs(db: &Database, ids: &[Uuid]) -> anyhow::Result<Vec<Run>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(db.get_run(*id).await?.with_context(|| format!("run {id} is missing"))?);
    }
    Ok(out)
}

/// A real binary started by the bench; its output goes to a log file. Killed when dropped.
pub struct Proc {
    /// The child.
    pub child: Child,
    /// Its combined output.
    pub log: PathBuf,
    /// A name for messages.
    pub name: String,
}

impl Proc {
    /// Starts `bin` with `args` and extra `env`, its output to `<dir>/<name>.log`.
    pub fn start(bin: &Path, name: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        Ok(Self { child, log, name: name.to_owned() })
    }

    /// Starts a daemon on `config`.
    pub fn daemon(
        env: &Env,
        name: &str,
        dir: &Path,
        config: &Path,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let config = config.display().to_string();
        Self::start(&env.bin("scrinalia-daemon"), name, dir, &["--config", &config], extra_env)
    }

    /// Its pid.
    pub fn pid(&self) -> anyhow::Result<i32> {
        self.child.id().and_then(|id| i32::try_from(id).ok()).with_context(|| format!("{} is not running", self.name))
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its output contains `needle`.
    pub async fn wait_for(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.output().contains(needle) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("{} exited ({status}) before saying {needle:?}:\n{}", self.name, tail(&self.output()));
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{} did not say {needle:?} within {timeout:?}:\n{}", self.name, tail(&self.output()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends a signal.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        kill(Pid::from_raw(self.pid()?), signal).with_context(|| format!("signal {signal} to {}", self.name))
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) {
        let _ = self.signal(Signal::SIGTERM);
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The last lines of a log, for error messages.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// CPU time of a process so far (user + system, its own and its reaped children's), from `/proc/<pid>/stat`.
pub fn cpu_time(pid: i32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> =
        stat.rsplit_once(") ").map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    // After the command: state is field 3, so utime (14), stime (15), cutime (16), cstime (17) are at 11..=14.
    let ticks: u64 =
        fields.get(11..15).context("a short /proc/<pid>/stat")?.iter().map(|f| f.parse::<u64>().unwrap_or(0)).sum();
    // /proc counts in USER_HZ, which Linux fixes at 100 for user space.
    Ok(Duration::from_millis(ticks * 10))
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in MiB.
pub fn status_mib(pid: i32, key: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line =
        status.lines().find(|l| l.starts_with(key)).with_context(|| format!("no {key} in /proc/{pid}/status"))?;
    let kb: f64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).context("a kB value")?;
    Ok(kb / 1024.0)
}

/// Polls `check` every 10 ms until it returns `Some`, or fails with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
