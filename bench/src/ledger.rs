//! The panel's reads over a ledger of `--rows` (10,000,000) runs, on PostgreSQL through the real API binary:
//! `GET /api/workers`, the runs list's first page, a page filtered by worker, state and day, a deep cursor page
//! (70 % of the way back), and a run's detail, each loaded open loop at `--rate` (500) requests a second for
//! `--seconds` (20); latency runs from each request's due time (see `http`). Figures: p50, p99 and max of each.
//! The ledger is seeded by `seed::history` (a year of runs over `--workers` (40) workers), then the API starts.

use std::time::Duration;

use chrono::{DurationRound as _, TimeDelta, Utc};
use clap::Args;
use scrinalia_shared::runs::Cursor;
use scrinalia_testkit::{FreshDb, Kind, Process, free_port, process::Ready};
use sqlx::{Connection as _, PgConnection};
use uuid::Uuid;

use crate::{
    env::{ConfigSpec, Env, VIEWER, resolved, with_db},
    http::open_loop,
    report::{Bound, Figure},
    seed::{self, History},
};

/// Options of `scrinalia-bench ledger`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Runs in the ledger.
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: u64,
    /// Workers in the catalogue.
    #[arg(long, default_value_t = 40)]
    pub workers: usize,
    /// Requests per second of each open loop.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// Seconds of each load.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
}

impl Default for Opts {
    fn default() -> Self {
        Self { rows: 10_000_000, workers: 40, rate: 500, seconds: 20 }
    }
}

const BENCH: &str = "ledger";

/// Seeds the ledger, starts the API, and loads each read.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let dir = env.folder("ledger")?;
    with_db(env, Kind::Postgres, &dir, async |db| measure(env, db, &dir, opts).await).await
}

/// The id and request time of seeded run `i`.
pub async fn seeded(url: &str, i: u64) -> anyhow::Result<(Uuid, chrono::DateTime<Utc>)> {
    let mut conn = PgConnection::connect(url).await?;
    let row = sqlx::query_as("select id, requested_at from worker_runs where id = md5($1::text)::uuid")
        .bind(i.to_string())
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(row)
}

async fn measure(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let port = free_port();
    let spec = ConfigSpec {
        probes: opts.workers,
        api_listen: Some(([127, 0, 0, 1], port).into()),
        log_filter: "warn",
        ..ConfigSpec::default()
    };
    let (path, settings) = spec.load(env, db, dir, "bench")?;
    let config = serde_json::to_value(resolved(&settings, "probe-1")?)?;
    let spacing = 365.0 * 86_400.0 / opts.rows as f64;
    seed::history(&db.url, &config, History { rows: opts.rows, workers: opts.workers, spacing, end_ago: 60.0 }).await?;
    // A run with progress reports that retries an older one, and a cursor 70 % of the way back.
    let detail = (opts.rows / 2).div_ceil(9_700) * 9_700;
    let (run, _) = seeded(&db.url, detail.min(opts.rows)).await?;
    let (deep_id, deep_at) = seeded(&db.url, opts.rows * 7 / 10).await?;
    let deep = Cursor { requested_at: deep_at, id: deep_id }.encode();
    let day = (Utc::now() - TimeDelta::days(100)).duration_trunc(TimeDelta::days(1))?;
    let next = day + TimeDelta::days(1);
    let time = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let filtered = format!("/api/runs?worker=probe-7&state=failed&from={}&to={}", time(day), time(next));
    let base = format!("http://127.0.0.1:{port}");
    let readyz = format!("{base}/readyz");
    let api =
        Process::start_ready(&env.bin("scrinalia-api"), "api", dir, &path, &[], &[], Ready::Http(&readyz)).await?;
    let client = reqwest::Client::builder().build()?;
    let reads = [
        ("GET /api/workers", "/api/workers".to_owned()),
        ("GET /api/runs (first page)", "/api/runs".to_owned()),
        ("GET /api/runs?worker&state&from&to (one worker's failed runs of one day)", filtered),
        ("GET /api/runs?after (a deep cursor page, 70 % back)", format!("/api/runs?after={deep}")),
        ("GET /api/runs/{id} (a run's detail)", format!("/api/runs/{run}")),
    ];
    let rows = seed_label(opts.rows);
    let mut figures = Vec::new();
    for (what, path) in reads {
        let url = format!("{base}{path}");
        // Warm the connections, the API's prepared statements and PostgreSQL's cache of the pages they read.
        for _ in 0..200 {
            let answer = client.get(&url).bearer_auth(VIEWER).send().await?;
            anyhow::ensure!(answer.status().is_success(), "{what}: {}", answer.status());
            answer.bytes().await?;
        }
        let load = open_loop(&client, &url, opts.rate, opts.seconds).await;
        load.check(what)?;
        let l = &load.latencies;
        eprintln!("ledger: {what} at {}/s over {rows} runs: {}", opts.rate, l.summary());
        let setup = format!("{what} over {rows} runs, {} requests/s open loop", opts.rate);
        figures.push(
            Figure::info(BENCH, "PostgreSQL", format!("{setup}: p99"), l.p99(), "ms")
                .target(Bound::Below(10.0))
                .detail(format!("{} · {} bytes a response", l.summary(), load.bytes)),
        );
        figures.push(Figure::info(BENCH, "PostgreSQL", format!("{setup}: p50"), l.p50(), "ms"));
        figures.push(Figure::info(BENCH, "PostgreSQL", format!("{setup}: max"), l.max(), "ms"));
    }
    api.stop(Duration::from_secs(5)).await;
    Ok(figures)
}

/// `10,000,000`.
pub fn seed_label(rows: u64) -> String {
    let digits = rows.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
