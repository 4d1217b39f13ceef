//! Draining a backlog of `--backlog` (10,000) requests, one per worker of a generated catalogue of as many
//! no-op probe workers (`probe-1` … `probe-10000`; one run in flight per worker is the rule, so a backlog needs
//! as many workers as requests).
//!
//! - The claim path alone: the daemon's claim loop needs a whole daemon around it, so the bench drives the
//!   daemon's own claim function, `scrinalia_daemon::main_loop::claim_batch` (the one its main loop calls:
//!   one statement claiming as many requests as there are free slots) on a `DaemonStore::dedicated()` connection
//!   per simulated daemon, in a loop until the backlog is empty. No process starts and claimed runs are
//!   simply counted, so every claim finds all `--capacity` slots free.
//! - The full path: real `scrinalia-daemon` processes (capacity `--capacity`) start real supervisors and
//!   no-op probes and write the ledger; runs per second come from the ledger (first request → last end).

use std::{path::Path, time::Duration};

use anyhow::{Context as _, bail};
use clap::Args;
use scrinalia_daemon::main_loop::claim_batch;
use scrinalia_shared::{Settings, config::DaemonSettings};
use scrinalia_testkit::{FreshDb, Kind, Process};
use tokio::time::Instant;
use uuid::Uuid;

use crate::{
    env::{ConfigSpec, Env, cpu_time, seed_backlog, sqlite_pool, with_db},
    report::{Bound, Figure, number},
};

/// Options of `scrinalia-bench drain`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Requests in the backlog (and probe workers in the catalogue).
    #[arg(long, default_value_t = 10_000)]
    pub backlog: usize,
    /// Each daemon's capacity (runs at once), hence the size of a claim when every slot is free.
    #[arg(long, default_value_t = 32)]
    pub capacity: u32,
    /// The full path stops after this many seconds and reports the rate so far.
    #[arg(long, default_value_t = 80)]
    pub full_seconds: u64,
    /// Skip the full path (real daemons and processes).
    #[arg(long)]
    pub claims_only: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self { backlog: 10_000, capacity: 32, full_seconds: 80, claims_only: false }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { backlog: 50, capacity: 8, full_seconds: 60, claims_only: false }
    }
}

const BENCH: &str = "drain";
/// The backlog of the single-row claim passes.
const SINGLE_ROW_BACKLOG: usize = 3_000;

/// Runs the claim path on both backends, then the full path on PostgreSQL.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let dir = env.folder("drain-pg")?;
    figures.extend(
        with_db(env, Kind::Postgres, &dir, async |db| {
            let (path, settings) = config(opts).load(env, db, &dir, "bench")?;
            let mut figures = Vec::new();
            for (daemons, capacity) in [(1, opts.capacity), (3, opts.capacity), (1, 1), (3, 1)] {
                figures.push(
                    claim_path(
                        db,
                        &settings,
                        daemons,
                        capacity,
                        opts.backlog,
                        capacity == opts.capacity && daemons == 3,
                    )
                    .await?,
                );
            }
            if !opts.claims_only {
                for daemons in [1, 3] {
                    figures.extend(full_path(env, db, &dir, &path, daemons, opts).await?);
                }
            }
            Ok(figures)
        })
        .await?,
    );
    let dir = env.folder("drain-sqlite")?;
    figures.extend(
        with_db(env, Kind::Sqlite, &dir, async |db| {
            let (_, settings) = config(opts).load(env, db, &dir, "bench")?;
            let mut figures = Vec::new();
            for daemons in [1, 3] {
                figures.push(claim_path(db, &settings, daemons, opts.capacity, opts.backlog, false).await?);
            }
            Ok(figures)
        })
        .await?,
    );
    Ok(figures)
}

fn config(opts: &Opts) -> ConfigSpec {
    ConfigSpec {
        probes: opts.backlog,
        // Queue counts of 10,000 workers every hour, 50 ms apart: about 20 short processes a second per daemon.
        daemon: DaemonSettings {
            capacity: opts.capacity,
            queue_count_interval_seconds: 3600,
            ..DaemonSettings::default()
        },
        ..ConfigSpec::default()
    }
}

/// Empties the ledger.
pub(crate) async fn reset(db: &FreshDb) -> anyhow::Result<()> {
    match db.kind {
        Kind::Postgres => {
            // Every table that refers to the runs goes too (progress, resource holds, webhook events and their
            // deliveries, and whatever a later migration adds): TRUNCATE refuses to leave a reference dangling.
            db.execute("truncate worker_runs cascade").await?;
        }
        Kind::Sqlite => {
            db.execute("delete from run_progress").await?;
            db.execute("delete from worker_runs").await?;
        }
    }
    Ok(())
}

async fn claim_path(
    db: &FreshDb,
    settings: &Settings,
    daemons: usize,
    capacity: u32,
    backlog: usize,
    with_target: bool,
) -> anyhow::Result<Figure> {
    // Single-row claims are slow enough that a part of the backlog says as much as all of it.
    let backlog = if capacity == 1 { backlog.min(SINGLE_ROW_BACKLOG) } else { backlog };
    reset(db).await?;
    seed_backlog(db, settings, backlog).await?;
    let mut daemon_settings = settings.daemon.clone();
    daemon_settings.capacity = capacity;
    let mut connections = Vec::new();
    for _ in 0..daemons {
        // Each simulated daemon claims on a connection of its own, as a daemon does (`Context::claims`); on
        // SQLite each gets a pool of its own, as a separate process would.
        connections.push(match db.kind {
            Kind::Postgres => db.db.daemon.dedicated().await?,
            Kind::Sqlite => db.another_pool(2).await?.daemon,
        });
    }
    let placement = scrinalia_daemon::placement_of(settings);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for claims in connections.clone() {
        let daemon_settings = daemon_settings.clone();
        let placement = placement.clone();
        tasks.spawn(async move {
            let (id, mut claimed, mut statements) = (Uuid::now_v7(), 0usize, 0usize);
            loop {
                let got = claim_batch(&claims, id, &daemon_settings, &placement, 0).await?;
                statements += 1;
                if got.is_empty() {
                    return anyhow::Ok((claimed, statements));
                }
                claimed += got.len();
            }
        });
    }
    let (mut claimed, mut statements) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (c, s) = done??;
        claimed += c;
        statements += s;
    }
    let elapsed = start.elapsed();
    for c in connections {
        c.close().await;
    }
    if claimed != backlog {
        bail!("{claimed} claims for a backlog of {backlog}");
    }
    let running = count_state(db, "running").await?;
    if running != backlog as i64 {
        bail!("{running} runs running after {backlog} claims");
    }
    let rate = claimed as f64 / elapsed.as_secs_f64();
    eprintln!(
        "drain: claim path, {}, {daemons} daemon(s), up to {capacity} per claim: {} claims/s",
        db.kind.name(),
        number(rate)
    );
    let what = format!(
        "claim path alone: claims/s, {daemons} daemon{}, up to {capacity} per claim (capacity {capacity})",
        if daemons == 1 { "" } else { "s" }
    );
    let mut figure = Figure::info(BENCH, db.kind.name(), what, rate, "claims/s")
        .detail(format!("{claimed} claims in {:.2} s, {statements} statements", elapsed.as_secs_f64()));
    if with_target {
        figure = figure.target(Bound::Above(10_000.0));
    }
    Ok(figure)
}

async fn count_state(db: &FreshDb, state: &str) -> anyhow::Result<i64> {
    Ok(match db.kind {
        Kind::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await?;
            let count = sqlx::query_scalar("select count(*) from worker_runs where state = $1")
                .bind(state)
                .fetch_one(&pool)
                .await?;
            pool.close().await;
            count
        }
        Kind::Sqlite => {
            let pool = sqlite_pool(db).await?;
            let count = sqlx::query_scalar("select count(*) from worker_runs where state = ?1")
                .bind(state)
                .fetch_one(&pool)
                .await?;
            pool.close().await;
            count
        }
    })
}

#[derive(sqlx::FromRow)]
struct Span {
    done: i64,
    succeeded: i64,
    daemons: i64,
    claims_s: Option<f64>,
    starts_s: Option<f64>,
    ends_s: Option<f64>,
}

async fn full_path(
    env: &Env,
    db: &FreshDb,
    dir: &Path,
    config: &Path,
    daemons: usize,
    opts: &Opts,
) -> anyhow::Result<Vec<Figure>> {
    anyhow::ensure!(db.kind == Kind::Postgres, "the full path runs on PostgreSQL");
    // The bench's own pool, opened before the daemons start, for its progress polls and the ledger's figures.
    let pool = &sqlx::PgPool::connect(&db.url).await?;
    reset(db).await?;
    let config_arg = config.display().to_string();
    let mut procs = Vec::new();
    for i in 0..daemons {
        let name = format!("drain-{daemons}-daemon-{i}");
        procs.push(Process::start(&env.bin("scrinalia-daemon"), &name, dir, &["--config", &config_arg], &[])?);
    }
    for p in &mut procs {
        p.wait_for("daemon started", Duration::from_secs(60)).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    eprintln!("drain: full path, {daemons} daemon(s) of capacity {}, {} requests", opts.capacity, opts.backlog);
    let settings = Settings::load_from(Some(config), Vec::new()).map_err(|e| anyhow::anyhow!("{e}"))?;
    seed_backlog(db, &settings, opts.backlog).await?;
    let deadline = Instant::now() + Duration::from_secs(opts.full_seconds);
    let mut done = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        done = sqlx::query_scalar::<_, i64>("select count(*) from worker_runs where finished_at is not null")
            .fetch_one(pool)
            .await?;
        if done as usize >= opts.backlog {
            break;
        }
    }
    // CPU of each daemon with its reaped children: its supervisors, their probes, and its queue counts.
    let mut cpu = Duration::ZERO;
    for p in &procs {
        cpu += cpu_time(p.pid().as_raw())?;
    }
    for p in procs {
        p.stop(Duration::from_secs(10)).await;
    }
    let span: Span = sqlx::query_as(
        "select count(*) filter (where finished_at is not null) as done, \
             count(*) filter (where state = 'succeeded') as succeeded, \
             count(distinct claimed_by) as daemons, \
             extract(epoch from max(claimed_at) - min(requested_at))::float8 as claims_s, \
             extract(epoch from max(started_at) - min(requested_at))::float8 as starts_s, \
             extract(epoch from max(finished_at) - min(requested_at))::float8 as ends_s \
         from worker_runs",
    )
    .fetch_one(pool)
    .await
    .context("read the drain's ledger")?;
    let complete = span.done as usize >= opts.backlog;
    if span.succeeded != span.done {
        let failed: Option<String> = sqlx::query_scalar(
            "select error from worker_runs where finished_at is not null and state <> 'succeeded' limit 1",
        )
        .fetch_optional(pool)
        .await?
        .flatten();
        bail!("{} of {} finished runs did not succeed, e.g.: {failed:?}", span.done - span.succeeded, span.done);
    }
    let plural = if daemons == 1 { "" } else { "s" };
    let runs_rate = span.done as f64 / span.ends_s.unwrap_or(f64::NAN);
    let claims: i64 =
        sqlx::query_scalar("select count(*) from worker_runs where claimed_at is not null").fetch_one(pool).await?;
    pool.close().await;
    let claim_rate = claims as f64 / span.claims_s.unwrap_or(f64::NAN);
    let note = if complete {
        String::new()
    } else {
        format!(" (stopped after {} s: {done} of {} done)", opts.full_seconds, opts.backlog)
    };
    eprintln!("drain: full path, {daemons} daemon(s): {} runs/s{note}", number(runs_rate));
    Ok(vec![
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("full path: runs/s (no-op probes), {daemons} daemon{plural} of capacity {}", opts.capacity),
            runs_rate,
            "runs/s",
        )
        .detail(format!(
            "{} runs requested → ended in {:.1} s; last start at {:.1} s; {} daemons claimed; daemons' CPU (with \
                 supervisors, probes, queue counts) {:.1} ms a run{note}",
            span.done,
            span.ends_s.unwrap_or(f64::NAN),
            span.starts_s.unwrap_or(f64::NAN),
            span.daemons,
            cpu.as_secs_f64() * 1000.0 / span.done.max(1) as f64
        )),
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("full path: claims/s, {daemons} daemon{plural}"),
            claim_rate,
            "claims/s",
        )
        .detail(format!("{claims} claims in {:.1} s (claims wait for free slots)", span.claims_s.unwrap_or(f64::NAN))),
    ])
}
