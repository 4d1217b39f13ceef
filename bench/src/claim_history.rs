//! Whether claims slow down as the ledger grows: request → claimed (the ledger's `requested_at → claimed_at`,
//! the database's own clock) with the real daemon binary on PostgreSQL, in one invocation on one database: A with
//! an empty ledger, then `--rows` (10,000,000) finished runs of the same workers are seeded (`seed::history`,
//! within the last 80 days so that the daemon's retention prunes none of them meanwhile), then B. Each side runs
//! `--passes` (2) passes of the `latency` bench's direct pass (one request every 20 ms, each to a worker with
//! nothing in flight); the spread between A's own passes says what noise is on this machine.

use std::time::Duration;

use clap::Args;
use scrinalia_shared::Settings;
use scrinalia_testkit::{FreshDb, Kind};
use uuid::Uuid;

use crate::{
    env::{Env, resolved, with_db},
    latency::{self, direct_pass, finished, ms, start_daemon},
    ledger::seed_label,
    report::{Figure, Samples},
    seed::{self, History},
};

/// Options of `scrinalia-bench claim-history`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Runs of history seeded between A and B.
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: u64,
    /// Measured requests per pass.
    #[arg(long, default_value_t = 300)]
    pub requests: usize,
    /// Passes on each side.
    #[arg(long, default_value_t = 2)]
    pub passes: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self { rows: 10_000_000, requests: 300, passes: 2 }
    }
}

const BENCH: &str = "claim-history";
/// The `latency` bench's catalogue size (its probes), which its direct pass cycles through.
const PROBES: usize = 20;

/// Runs A, seeds, runs B.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let dir = env.folder("claim-history")?;
    with_db(env, Kind::Postgres, &dir, async |db| measure(env, db, &dir, opts).await).await
}

/// Request → claimed of `passes` passes with a fresh daemon: each pass's samples (ms).
async fn side(
    env: &Env,
    db: &FreshDb,
    dir: &std::path::Path,
    path: &std::path::Path,
    settings: &Settings,
    opts: &Opts,
) -> anyhow::Result<Vec<Vec<f64>>> {
    let daemon = start_daemon(env, dir, path).await?;
    let producer = db.db.dedicated().await?.api;
    let pass = latency::Opts { requests: opts.requests, warmup: 20, spacing_ms: 20, ..latency::Opts::default() };
    let mut passes = Vec::new();
    for _ in 0..opts.passes {
        let inserted = direct_pass(&producer, settings, &pass).await?;
        let ids: Vec<Uuid> = inserted[pass.warmup..].iter().map(|i| i.id).collect();
        let runs = finished(&db.db.api, &ids).await?;
        passes.push(runs.iter().filter_map(|r| r.claimed_at.map(|c| ms(c - r.requested_at))).collect());
    }
    producer.close().await;
    daemon.stop(Duration::from_secs(10)).await;
    Ok(passes)
}

async fn measure(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let (path, settings) = latency::config(None, false).load(env, db, dir, "bench")?;
    let a = side(env, db, dir, &path, &settings, opts).await?;
    let config = serde_json::to_value(resolved(&settings, "probe-1")?)?;
    let spacing = 80.0 * 86_400.0 / opts.rows as f64;
    seed::history(&db.url, &config, History { rows: opts.rows, workers: PROBES, spacing, end_ago: 600.0 }).await?;
    let b = side(env, db, dir, &path, &settings, opts).await?;
    let rows = seed_label(opts.rows);
    let summary = |passes: &[Vec<f64>]| Samples::from_ms(passes.concat());
    let (all_a, all_b) = (summary(&a), summary(&b));
    let p99s = |passes: &[Vec<f64>]| passes.iter().map(|p| Samples::from_ms(p.clone()).p99()).collect::<Vec<_>>();
    let (a99, b99) = (p99s(&a), p99s(&b));
    let spread = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min);
    eprintln!("claim-history: A (empty ledger): {} · pass p99s {a99:.2?}", all_a.summary());
    eprintln!("claim-history: B ({rows} runs of history): {} · pass p99s {b99:.2?}", all_b.summary());
    let setup = format!("request → claimed (ledger clock), {} passes of {} requests", opts.passes, opts.requests);
    Ok(vec![
        Figure::info(BENCH, "PostgreSQL", format!("{setup}, empty ledger (A): p50"), all_a.p50(), "ms")
            .detail(all_a.summary()),
        Figure::info(BENCH, "PostgreSQL", format!("{setup}, empty ledger (A): p99"), all_a.p99(), "ms")
            .detail(format!("p99 of each pass {a99:.2?}")),
        Figure::info(BENCH, "PostgreSQL", format!("{setup}, {rows} runs of history (B): p50"), all_b.p50(), "ms")
            .detail(all_b.summary()),
        Figure::info(BENCH, "PostgreSQL", format!("{setup}, {rows} runs of history (B): p99"), all_b.p99(), "ms")
            .detail(format!("p99 of each pass {b99:.2?}")),
        Figure::info(BENCH, "PostgreSQL", format!("{setup}: B − A, p50"), all_b.p50() - all_a.p50(), "ms"),
        Figure::info(BENCH, "PostgreSQL", format!("{setup}: B − A, p99"), all_b.p99() - all_a.p99(), "ms").detail(
            format!(
                "noise: the p99s of A's passes spread over {:.2} ms, B's over {:.2} ms",
                spread(&a99),
                spread(&b99)
            ),
        ),
    ])
}
