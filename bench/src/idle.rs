//! An idle daemon, with the shipped defaults (capacity 3, heartbeat 5 s, poll 10 s, lease 30 s, queue counts
//! every 60 s) and a catalogue of three probes: one on PostgreSQL and one on SQLite, side by side, measured over
//! `--seconds` (30) after a settling time.
//!
//! - CPU: user + system time from `/proc/<pid>/stat` (the daemon's threads and its reaped children), over the
//!   window.
//! - Resident memory: `VmRSS` (and the peak, `VmHWM`) from `/proc/<pid>/status` at the end.
//! - Queries: every statement the daemon sends, counted from its own statement log (sqlx logs each one at debug
//!   level under `sqlx::query`; the daemon runs with `RUST_LOG=info,sqlx::query=debug`), on both backends; on
//!   PostgreSQL also `xact_commit + xact_rollback` of the bench database in `pg_stat_database` (read from
//!   another database, so the reading does not count; a backend reports these counters up to a second late,
//!   and autovacuum's visits count too, so this is a cross-check).

use std::time::Duration;

use clap::Args;
use scrinalia_testkit::{Kind, Process};
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

/// Measures both daemons at once.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let (pg_dir, sqlite_dir) = (env.folder("idle-pg")?, env.folder("idle-sqlite")?);
    with_db(env, Kind::Postgres, &pg_dir, async |pg| {
        with_db(env, Kind::Sqlite, &sqlite_dir, async |sqlite| {
            let spec = ConfigSpec { probes: 3, ..ConfigSpec::default() };
            let (pg_config, _) = spec.load(env, pg, &pg_dir, "bench")?;
            let (sqlite_config, _) = spec.load(env, sqlite, &sqlite_dir, "bench")?;
            // The bench's own pools close first: a backend reports its counters when it ends, which must not fall
            // into the window.
            pg.db.close().await;
            sqlite.db.close().await;
            let log = [("RUST_LOG", "info,sqlx::query=debug")];
            let program = env.bin("scrinalia-daemon");
            let daemon = |dir: &std::path::Path, config: &std::path::Path| {
                let config = config.display().to_string();
                Process::start(&program, "daemon", dir, &["--config", &config], &log)
            };
            // Both start before either is waited for, so that they settle side by side.
            let mut daemons =
                [(Kind::Postgres, daemon(&pg_dir, &pg_config)?), (Kind::Sqlite, daemon(&sqlite_dir, &sqlite_config)?)];
            for (_, d) in &mut daemons {
                d.wait_for("daemon started", Duration::from_secs(20)).await?;
            }
            tokio::time::sleep(Duration::from_secs(opts.settle)).await;
            eprintln!("idle: measuring both daemons for {} s", opts.seconds);
            let pg_name = pg.pg_name().unwrap_or_default().to_owned();
            let mut admin = PgConnection::connect(&env.pg_admin).await?;
            let before_pg = transactions(&mut admin, &pg_name).await?;
            let before: Vec<(Duration, usize)> = daemons
                .iter()
                .map(|(_, d)| Ok((cpu_time(d.pid().as_raw())?, statements(&d.output()))))
                .collect::<anyhow::Result<_>>()?;
            tokio::time::sleep(Duration::from_secs(opts.seconds)).await;
            let window = opts.seconds as f64;
            let after_pg = transactions(&mut admin, &pg_name).await?;
            let _ = admin.close().await;
            let mut figures = Vec::new();
            for ((backend, daemon), (cpu_before, statements_before)) in daemons.iter().zip(before) {
                let pid = daemon.pid().as_raw();
                let cpu = (cpu_time(pid)? - cpu_before).as_secs_f64() / window * 100.0;
                let (rss, peak) = (status_mib(pid, "VmRSS:")?, status_mib(pid, "VmHWM:")?);
                let made = statements(&daemon.output()) - statements_before;
                let rate = made as f64 / window;
                let name = backend.name();
                eprintln!(
                    "idle: {name}: CPU {cpu:.2} %, {} MiB resident, {made} statements in {window} s",
                    number(rss)
                );
                figures.push(
                    Figure::info(BENCH, name, "idle daemon: CPU (of one core)", cpu, "%")
                        .detail(format!("over {window} s")),
                );
                figures.push(
                    Figure::info(BENCH, name, "idle daemon: resident memory (VmRSS)", rss, "MiB")
                        .target(Bound::Below(20.0))
                        .detail(format!("peak (VmHWM) {} MiB", number(peak))),
                );
                let mut queries =
                    Figure::info(BENCH, name, "idle daemon: queries/s (its statement log)", rate, "queries/s")
                        .target(Bound::Below(1.0))
                        .detail(format!("{made} statements in {window} s"));
                if *backend == Kind::Postgres {
                    let xacts = after_pg - before_pg;
                    queries.detail = format!(
                        "{} · pg_stat_database: {xacts} transactions = {}/s",
                        queries.detail,
                        number(xacts as f64 / window)
                    );
                }
                figures.push(queries);
            }
            for (_, daemon) in daemons {
                daemon.stop(Duration::from_secs(10)).await;
            }
            Ok(figures)
        })
        .await
    })
    .await
}

/// sqlx logs every statement it sends (target `sqlx::query`, with a `summary=` field).
fn statements(log: &str) -> usize {
    log.lines().filter(|l| l.contains("summary=")).count()
}

async fn transactions(admin: &mut PgConnection, database: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("select (xact_commit + xact_rollback)::bigint from pg_stat_database where datname = $1")
        .bind(database)
        .fetch_one(&mut *admin)
        .await?)
}
