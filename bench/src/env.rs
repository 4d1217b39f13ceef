//! What every bench needs besides the test kit (`scrinalia-testkit`: fresh databases, typed configuration files,
//! the real binaries as processes): where the binaries and the PostgreSQL server are, a scratch folder, the
//! bench's catalogue of no-op probe workers, its own SQL for seeding a backlog, and readings of `/proc`.

use std::{
    path::{Path, PathBuf},
    str::FromStr as _,
    time::Duration,
};

use anyhow::{Context as _, bail};
use scrinalia_shared::{
    ExplicitArgs, OptionType, ResolvedConfig, Role, Run, Settings, Store, WorkerSpec, config::DaemonSettings, resolve,
    runs::RunRequest,
};
use scrinalia_testkit::{
    ConfigFile, FreshDb, Kind,
    config::{option, worker},
};
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteSynchronous},
};
use tempfile::TempDir;
use uuid::Uuid;

/// The viewer token of the bench's API.
pub const VIEWER: &str = "scr_bench_viewer_token";
/// The operator token of the bench's API.
pub const OPERATOR: &str = "scr_bench_operator_token";

/// Where the binaries and the database server are, and a scratch folder for this invocation.
pub struct Env {
    /// The folder holding `scrinalia-daemon`, `scrinalia-api` and `scrinalia-demo-worker`.
    pub bin_dir: PathBuf,
    /// A PostgreSQL URL whose server the bench may add (and drop) databases on.
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

/// Runs `body` on a fresh database (`scrinalia_bench_<uuid>` on the PostgreSQL server, or a SQLite file in
/// `dir`), dropping it afterwards whatever happened.
pub async fn with_db<T>(
    env: &Env,
    kind: Kind,
    dir: &Path,
    body: impl AsyncFnOnce(&FreshDb) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let db = FreshDb::create(kind, &env.pg_admin, "scrinalia_bench", dir, 20)
        .await
        .context("pass --pg with a PostgreSQL server the bench may add databases on")?;
    let result = body(&db).await;
    db.drop_database().await;
    result
}

/// What a configuration file holds besides the database.
#[derive(Debug, Clone)]
pub struct ConfigSpec {
    /// `probe-1` … `probe-<probes>`, each a no-op (`duration_ms`, `progress_steps`, `output_lines` default 0).
    pub probes: usize,
    /// `[daemon]`: the shipped defaults unless a bench changes some.
    pub daemon: DaemonSettings,
    /// `api.listen`, when an API is started.
    pub api_listen: Option<std::net::SocketAddr>,
    /// `telemetry.log_filter`.
    pub log_filter: &'static str,
    /// Give every probe `memory_max = "1GiB"` and `cpu_max = 1`, so that each run gets a cgroup of its own.
    pub limits: bool,
}

impl Default for ConfigSpec {
    fn default() -> Self {
        Self { probes: 20, daemon: DaemonSettings::default(), api_listen: None, log_filter: "info", limits: false }
    }
}

impl ConfigSpec {
    /// Writes `<dir>/<name>.toml` for the database `db` and loads it as the binaries will.
    pub fn load(&self, env: &Env, db: &FreshDb, dir: &Path, name: &str) -> anyhow::Result<(PathBuf, Settings)> {
        let program = env.bin("scrinalia-demo-worker").display().to_string();
        let file = ConfigFile::new(&db.url, dir)
            .with(|f| {
                f.daemon = self.daemon.clone();
                if let Some(listen) = self.api_listen {
                    f.api.listen = listen;
                }
                self.log_filter.clone_into(&mut f.telemetry.log_filter);
            })
            .token("bench-viewer", Role::Viewer, VIEWER)
            .token("bench-operator", Role::Operator, OPERATOR)
            .workers((1..=self.probes).map(|i| probe(&program, &format!("probe-{i}"), self.limits)));
        let path = dir.join(format!("{name}.toml"));
        let settings = file.load(&path)?;
        Ok((path, settings))
    }
}

/// A no-op probe: the demo worker's `probe-<n>`, every steering option the bench uses at 0.
fn probe(program: &str, name: &str, limits: bool) -> WorkerSpec {
    let mut spec = worker(name, &[program, name]);
    spec.timeout_seconds = 60;
    if limits {
        spec.memory_max = Some(scrinalia_shared::catalogue::MemoryMax(serde_json::json!("1GiB")));
        spec.cpu_max = Some(1.0);
    }
    spec.options = ["duration_ms", "progress_steps", "output_lines"]
        .into_iter()
        .map(|o| option(o, OptionType::Integer, Some(serde_json::json!(0))))
        .collect();
    // What the items bench steers: how many item lines, how many fail, and their text stand-in.
    spec.options.push(option("items", OptionType::Integer, None));
    spec.options.push(option("failed_every", OptionType::Integer, None));
    spec.options.push(option("item_text", OptionType::Boolean, None));
    spec
}

/// The options that make a probe a no-op, given explicitly with every request of the bench: the probes declare
/// their own defaults in their code (200 ms, and some output), which win over the catalogue's once a daemon has
/// described them, so the catalogue's zeros alone steer only runs that start before that.
pub const NO_OP: &str = r#"{"options": {"duration_ms": 0, "progress_steps": 0, "output_lines": 0}}"#;

/// A request by `bench` for `worker`: a no-op ([`NO_OP`]) with `options` over it.
pub fn request(worker: &str, options: serde_json::Value) -> RunRequest {
    RunRequest {
        worker: worker.to_owned(),
        requested_by: "bench".to_owned(),
        arguments: arguments(options),
        trace_context: None,
        tags: Vec::new(),
    }
}

/// [`NO_OP`]'s arguments with `options` over them.
fn arguments(options: serde_json::Value) -> ExplicitArgs {
    let mut arguments: ExplicitArgs = serde_json::from_str(NO_OP).expect("the no-op arguments");
    arguments.options.extend(options.as_object().cloned().unwrap_or_default());
    arguments
}

/// The configuration a request for `worker` with its catalogue defaults runs with, resolved as the API resolves
/// it, for rows the bench writes itself.
pub fn resolved(settings: &Settings, worker: &str) -> anyhow::Result<ResolvedConfig> {
    let spec = settings.catalogue.worker(worker).with_context(|| format!("{worker} is not in the catalogue"))?;
    let worker = scrinalia_shared::EffectiveWorker::from_catalogue(&settings.catalogue, spec);
    Ok(resolve(&worker, &arguments(serde_json::json!({})), None)?)
}

/// A pool of the bench's own on a SQLite file, for its own SQL. It writes as the scheduler's pools do: the file
/// is in WAL mode already (a lasting setting), and synchronous stays FULL.
pub async fn sqlite_pool(db: &FreshDb) -> anyhow::Result<SqlitePool> {
    let options = SqliteConnectOptions::from_str(&db.url)?.synchronous(SqliteSynchronous::Full);
    Ok(SqlitePool::connect_with(options).await?)
}

/// Inserts `n` queued requests, one per worker `probe-1` … `probe-<n>`, in one statement (PostgreSQL) or one
/// transaction (SQLite), as a backlog waiting for daemons.
pub async fn seed_backlog(db: &FreshDb, settings: &Settings, n: usize) -> anyhow::Result<()> {
    let workers: Vec<String> = (1..=n).map(|i| format!("probe-{i}")).collect();
    let ids: Vec<Uuid> = workers.iter().map(|_| Uuid::now_v7()).collect();
    let arguments = serde_json::to_value(arguments(serde_json::json!({})))?;
    let configs: Vec<serde_json::Value> =
        workers.iter().map(|w| Ok(serde_json::to_value(resolved(settings, w)?)?)).collect::<anyhow::Result<_>>()?;
    match db.kind {
        Kind::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await?;
            let arguments = vec![arguments; n];
            sqlx::query(
                "insert into worker_runs (id, worker, requested_by, arguments, config) \
                 select id, worker, 'bench', arguments, config \
                 from unnest($1::uuid[], $2::text[], $3::jsonb[], $4::jsonb[]) as r(id, worker, arguments, config)",
            )
            .bind(&ids)
            .bind(&workers)
            .bind(&arguments)
            .bind(&configs)
            .execute(&pool)
            .await
            .context("seed the backlog")?;
            sqlx::query("analyze worker_runs").execute(&pool).await?;
            pool.close().await;
        }
        Kind::Sqlite => {
            let pool = sqlite_pool(db).await?;
            let mut tx = pool.begin().await?;
            for ((id, worker), config) in ids.iter().zip(&workers).zip(&configs) {
                sqlx::query("insert into worker_runs (id, worker, requested_by, arguments, config) values (?1, ?2, 'bench', ?3, ?4)")
                    .bind(id)
                    .bind(worker)
                    .bind(sqlx::types::Json(&arguments))
                    .bind(sqlx::types::Json(config))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await.context("seed the backlog")?;
            pool.close().await;
        }
    }
    Ok(())
}

/// Runs of the ledger, as the bench reads them after a measurement.
pub async fn runs(db: &Store, ids: &[Uuid]) -> anyhow::Result<Vec<Run>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(db.get_run(*id).await?.with_context(|| format!("run {id} is missing"))?);
    }
    Ok(out)
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

impl Env {
    /// Like [`Env::new`], for a bench that starts only the `binaries` named (a folder built with
    /// `cargo build --release -p scrinalia-daemon` has no API).
    pub fn needing(bin_dir: PathBuf, pg_admin: String, keep: bool, binaries: &[&str]) -> anyhow::Result<Self> {
        for name in binaries {
            let path = bin_dir.join(name);
            if !path.is_file() {
                bail!(
                    "{} is missing. Build the release binaries first: `cargo build --release {}` (or pass --bin-dir \
                     with the folder that holds {}).",
                    path.display(),
                    binaries.iter().map(|b| format!("-p {b}")).collect::<Vec<_>>().join(" "),
                    binaries.join(", ")
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
}

/// Writes `file` to `path` with only the keys named in `keep` (`("daemon", &["queue_count_interval_seconds"])`;
/// for an array of tables such as `workers`, the keys of each), and loads it as the binaries will.
///
/// The file is still built as the settings types, so a renamed setting is a compile error and a key named here
/// that the settings lack (or leave unset) is an error, but every setting left out takes the binary's own
/// default: a daemon built before or after a setting was added (the daemon refuses keys it does not know) reads
/// the same file. Only strings, numbers, booleans and arrays of them can be picked.
pub fn write_only(file: &ConfigFile, keep: &[(&str, &[&str])], path: &Path) -> anyhow::Result<Settings> {
    use serde_json::Value;
    fn scalar(at: &str, value: &Value) -> anyhow::Result<String> {
        Ok(match value {
            // A JSON string's escapes (\", \\, \n, \uXXXX, …) are all TOML's too.
            Value::String(_) | Value::Number(_) | Value::Bool(_) => value.to_string(),
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|i| scalar(at, i)).collect::<anyhow::Result<_>>()?;
                format!("[{}]", items.join(", "))
            }
            Value::Null | Value::Object(_) => bail!("`{at}` is unset or a table; only plain values can be picked"),
        })
    }
    let table = |header: &str, section: &str, value: &Value, keys: &[&str]| -> anyhow::Result<String> {
        let mut out = format!("{header}\n");
        for key in keys {
            let at = format!("{section}.{key}");
            let value = value.get(*key).with_context(|| format!("the settings have no `{at}`"))?;
            out.push_str(&format!("{key} = {}\n", scalar(&at, value)?));
        }
        Ok(out)
    };
    let full = serde_json::to_value(&file.file).context("serialise the settings")?;
    let mut text = String::new();
    for (section, keys) in keep {
        let value = full.get(*section).with_context(|| format!("the settings have no `{section}`"))?;
        match value {
            Value::Array(items) => {
                for item in items {
                    text.push_str(&table(&format!("\n[[{section}]]"), section, item, keys)?);
                }
            }
            Value::Object(_) => text.push_str(&table(&format!("\n[{section}]"), section, value, keys)?),
            _ => bail!("`{section}` is not a section"),
        }
    }
    std::fs::write(path, text.trim_start()).with_context(|| format!("write {}", path.display()))?;
    Settings::load_from(Some(path), Vec::new()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs `body` with the URL of an empty database (`scrinalia_bench_<uuid>` on the PostgreSQL server, or a SQLite
/// file in `dir`, in WAL mode), dropping it afterwards whatever happened. Nothing is migrated: the binaries
/// migrate it themselves, so that they may come from another version than the bench (whose migrations a daemon
/// built before them would refuse). The SQLite file exists before they start: daemons started together on a
/// missing file race to create it, and the losers fail to connect.
pub async fn with_empty_db<T>(
    env: &Env,
    kind: Kind,
    dir: &Path,
    body: impl AsyncFnOnce(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    use sqlx::{Connection as _, Executor as _, PgConnection};
    match kind {
        Kind::Sqlite => {
            let url = format!("sqlite://{}", dir.join("scrinalia.sqlite").display());
            let options = SqliteConnectOptions::from_str(&url)?
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            sqlx::SqliteConnection::connect_with(&options).await.context("create the SQLite file")?.close().await?;
            body(&url).await
        }
        Kind::Postgres => {
            let mut admin = PgConnection::connect(&env.pg_admin)
                .await
                .context("pass --pg with a PostgreSQL server the bench may add databases on")?;
            let name = format!("scrinalia_bench_{}", Uuid::new_v4().simple());
            admin.execute(sqlx::AssertSqlSafe(format!("create database {name}"))).await.context("create database")?;
            let (server, _) = env.pg_admin.rsplit_once('/').context("the --pg URL must end with a database name")?;
            let result = body(&format!("{server}/{name}")).await;
            // The admin connection may have been cut meanwhile: a fresh one drops the database.
            let _ = admin.close().await;
            let mut admin = PgConnection::connect(&env.pg_admin).await?;
            admin.execute(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)"))).await?;
            let _ = admin.close().await;
            result
        }
    }
}
