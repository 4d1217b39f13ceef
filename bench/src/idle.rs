//! An idle daemon, with the shipped defaults (capacity 3, heartbeat 5 s, poll 10 s, lease 30 s, queue counts
//! every 60 s) and a catalogue of three probes: one on PostgreSQL and one on SQLite, side by side, measured over
//! `--seconds` (30) after a settling time. Over the same window, an idle API on PostgreSQL: no request and no
//! stream, on a database of its own (so that `pg_stat_database` separates it from the daemon's), measured once
//! its change feed listens and the token refresher relies on it.
//!
//! - CPU: user + system time from `/proc/<pid>/stat` (the daemon's threads and its reaped children), over the
//!   window.
//! - Resident memory: `VmRSS` (and the peak, `VmHWM`) from `/proc/<pid>/status` at the end.
//! - Queries: every statement the daemon (the API) sends, counted from its own statement log (sqlx logs each one
//!   at debug level under `sqlx::query`; both run with `RUST_LOG=info,sqlx::query=debug`), on both backends; on
//!   PostgreSQL also `xact_commit + xact_rollback` of the process's database in `pg_stat_database` (read from
//!   another database, so the reading does not count; a backend reports these counters up to a second late,
//!   and autovacuum's visits count too, so this is a cross-check).

use std::{path::Path, time::Duration};

use anyhow::Context as _;
use clap::Args;
use scrinalia_testkit::{FreshDb, Kind, Process, free_port, probes::whole_lines, process::Ready, try_eventually};
use sqlx::{Connection, PgConnection};

use crate::{
    env::{ConfigSpec, Env, cpu_time, status_mib, with_db},
    report::{Bound, Figure, number},
};

/// Options of `scrinalia-bench idle`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Length of the measurement window, in seconds.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Seconds between the daemon's start and the window (start-up work: migrations, the first queue counts).
    #[arg(long, default_value_t = 5)]
    pub settle: u64,
}

impl Default for Opts {
    fn default() -> Self {
        Self { seconds: 30, settle: 5 }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { seconds: 1, settle: 1 }
    }
}

const BENCH: &str = "idle";

/// What the API logs once its token refresher relies on the change feed (api/src/auth/tokens.rs).
const API_LISTENING: &str = "service tokens: re-read when the change feed says they changed";

/// The log that makes sqlx write every statement it sends.
const STATEMENT_LOG: [(&str, &str); 1] = [("RUST_LOG", "info,sqlx::query=debug")];

/// One measured process: which backend, whether it is the API, the process, and its database on PostgreSQL (for
/// `pg_stat_database`).
struct Measured {
    backend: Kind,
    api: bool,
    process: Process,
    pg_name: Option<String>,
}

/// Measures both daemons and the API at once.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let (pg_dir, sqlite_dir, api_dir) = (env.folder("idle-pg")?, env.folder("idle-sqlite")?, env.folder("idle-api")?);
    with_db(env, Kind::Postgres, &pg_dir, async |pg| {
        with_db(env, Kind::Sqlite, &sqlite_dir, async |sqlite| {
            with_db(env, Kind::Postgres, &api_dir, async |api_db| {
                let daemons = [(pg, pg_dir.as_path()), (sqlite, sqlite_dir.as_path())];
                measure(env, opts, daemons, (api_db, &api_dir)).await
            })
            .await
        })
        .await
    })
    .await
}

async fn measure(
    env: &Env,
    opts: &Opts,
    daemons: [(&FreshDb, &Path); 2],
    (api_db, api_dir): (&FreshDb, &Path),
) -> anyhow::Result<Vec<Figure>> {
    let spec = ConfigSpec { probes: 3, ..ConfigSpec::default() };
    let mut configs = Vec::new();
    for (db, dir) in daemons {
        configs.push((db, dir, spec.load(env, db, dir, "bench")?.0));
    }
    let api_port = free_port();
    let api_spec = ConfigSpec { api_listen: Some(([127, 0, 0, 1], api_port).into()), ..spec };
    let (api_config, _) = api_spec.load(env, api_db, api_dir, "bench")?;
    // The bench's own pools close first: a backend reports its counters when it ends, which must not fall into
    // the window.
    for db in [daemons[0].0, daemons[1].0, api_db] {
        db.db.close().await;
    }
    let program = env.bin("scrinalia-daemon");
    let mut measured = Vec::new();
    // The daemons start before either is waited for, so that they settle side by side.
    for (db, dir, config) in &configs {
        let config = config.display().to_string();
        let process = Process::start(&program, "daemon", dir, &["--config", &config], &STATEMENT_LOG)?;
        measured.push(Measured { backend: db.kind, api: false, process, pg_name: db.pg_name().map(str::to_owned) });
    }
    for m in &mut measured {
        m.process.wait_for("daemon started", Duration::from_secs(20)).await?;
    }
    let readyz = format!("http://127.0.0.1:{api_port}/readyz");
    let api_program = env.bin("scrinalia-api");
    let api =
        Process::start_ready(&api_program, "api", api_dir, &api_config, &[], &STATEMENT_LOG, Ready::Http(&readyz))
            .await?;
    let pg_name = api_db.pg_name().map(str::to_owned);
    let mut api = Measured { backend: Kind::Postgres, api: true, process: api, pg_name };
    api_settled(&mut api.process).await?;
    tokio::time::sleep(Duration::from_secs(opts.settle)).await;
    eprintln!("idle: measuring both daemons and the API for {} s", opts.seconds);
    let mut admin = PgConnection::connect(&env.pg_admin).await?;
    let mut before = Vec::new();
    for m in measured.iter().chain([&api]) {
        before.push(Reading::take(m, &mut admin).await?);
    }
    tokio::time::sleep(Duration::from_secs(opts.seconds)).await;
    let window = opts.seconds as f64;
    let mut figures = Vec::new();
    for (i, m) in measured.iter().chain([&api]).enumerate() {
        let after = Reading::take(m, &mut admin).await?;
        figures.extend(figures_of(m, &before[i], &after, window)?);
    }
    let _ = admin.close().await;
    for m in measured.into_iter().chain([api]) {
        m.process.stop(Duration::from_secs(10)).await;
    }
    Ok(figures)
}

/// Waits until the API's token refresher relies on the change feed, and for the read of the tokens that the
/// feed's first resync asks for, so that neither falls into the window.
async fn api_settled(api: &mut Process) -> anyhow::Result<()> {
    api.wait_for(API_LISTENING, Duration::from_secs(30)).await?;
    let api: &Process = api;
    try_eventually(Duration::from_secs(10), "the API's read of the tokens after its feed's resync", || async {
        let log = api.output();
        let after = &log[log.find(API_LISTENING).context("the line was there")?..];
        Ok(whole_lines(after).any(|l| l.contains("summary=") && l.contains("service_tokens")).then_some(()))
    })
    .await
}

/// What is read of a process at each end of the window.
struct Reading {
    cpu: Duration,
    statements: usize,
    /// PostgreSQL: its database's transactions in `pg_stat_database`.
    transactions: Option<i64>,
}

impl Reading {
    async fn take(m: &Measured, admin: &mut PgConnection) -> anyhow::Result<Self> {
        let transactions = match &m.pg_name {
            Some(name) => Some(transactions(admin, name).await?),
            None => None,
        };
        let cpu = cpu_time(m.process.pid().as_raw())?;
        Ok(Self { cpu, statements: statements(&m.process.output()), transactions })
    }
}

/// The figures of one process over the window.
fn figures_of(m: &Measured, before: &Reading, after: &Reading, window: f64) -> anyhow::Result<Vec<Figure>> {
    let api = m.api;
    let pid = m.process.pid().as_raw();
    let cpu = (after.cpu - before.cpu).as_secs_f64() / window * 100.0;
    let (rss, peak) = (status_mib(pid, "VmRSS:")?, status_mib(pid, "VmHWM:")?);
    let made = after.statements - before.statements;
    let rate = made as f64 / window;
    let (name, who) = (m.backend.name(), if api { "idle API" } else { "idle daemon" });
    eprintln!("idle: {who}, {name}: CPU {cpu:.2} %, {} MiB resident, {made} statements in {window} s", number(rss));
    let mut figures = vec![
        Figure::info(BENCH, name, format!("{who}: CPU (of one core)"), cpu, "%").detail(format!("over {window} s")),
    ];
    let memory = Figure::info(BENCH, name, format!("{who}: resident memory (VmRSS)"), rss, "MiB")
        .detail(format!("peak (VmHWM) {} MiB", number(peak)));
    // The daemon's target is the issue's; the API has none for its memory.
    figures.push(if api { memory } else { memory.target(Bound::Below(20.0)) });
    let mut queries = if api {
        Figure::info(BENCH, name, "idle API: statements/s (its statement log)", rate, "statements/s")
            .target(Bound::Below(0.5))
    } else {
        Figure::info(BENCH, name, "idle daemon: queries/s (its statement log)", rate, "queries/s")
            .target(Bound::Below(1.0))
    };
    queries = queries.detail(format!("{made} statements in {window} s"));
    if let (Some(before), Some(after)) = (before.transactions, after.transactions) {
        let xacts = after - before;
        queries.detail = format!(
            "{} · pg_stat_database: {xacts} transactions = {}/s",
            queries.detail,
            number(xacts as f64 / window)
        );
    }
    figures.push(queries);
    Ok(figures)
}

/// sqlx logs every statement it sends (target `sqlx::query`, with a `summary=` field); a process may be writing
/// the last line as the log is read, so only whole lines count.
fn statements(log: &str) -> usize {
    whole_lines(log).filter(|l| l.contains("summary=")).count()
}

async fn transactions(admin: &mut PgConnection, database: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("select (xact_commit + xact_rollback)::bigint from pg_stat_database where datname = $1")
        .bind(database)
        .fetch_one(&mut *admin)
        .await?)
}
