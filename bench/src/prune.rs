//! What a retention pass costs the claims running beside it: the daemon's claim function (`claim_batch`,
//! capacity 1, on a dedicated connection, as in `resources`) drains backlogs of `--claims` (100) requests, timed
//! claim by claim, first with nothing else running (A), then while `DaemonStore::prune_pass` (the pass every daemon's
//! pruner runs, with the shipped `[retention]` settings) deletes a ledger of `--rows` (1,000,000) finished runs
//! requested 400 days ago and more (every one past its retention, but the last 100 of each worker), batch by
//! batch (B). B drains backlog after backlog until the pass ends.

use std::time::Instant;

use anyhow::bail;
use clap::Args;
use scrinalia_daemon::main_loop::claim_batch;
use scrinalia_shared::{config::DaemonSettings, logstore::LogStore, runs::Placement};
use scrinalia_testkit::{FreshDb, Kind};
use uuid::Uuid;

use crate::{
    env::{ConfigSpec, Env, resolved, seed_backlog, with_db},
    ledger::seed_label,
    report::{Bound, Figure, Samples},
    seed::{self, History},
};

/// Options of `scrinalia-bench claim-during-prune`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Finished runs past their retention, pruned by the pass.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Requests drained per backlog (one probe worker each).
    #[arg(long, default_value_t = 100)]
    pub claims: usize,
    /// Backlogs drained without a pass (A).
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self { rows: 1_000_000, claims: 100, rounds: 20 }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { rows: 2_000, claims: 10, rounds: 1 }
    }
}

const BENCH: &str = "claim-during-prune";

/// Seeds the old ledger, then A, then B.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let dir = env.folder("claim-during-prune")?;
    with_db(env, Kind::Postgres, &dir, async |db| measure(env, db, &dir, opts).await).await
}

/// Drains one backlog, pushing each claim's time (ms) to `samples`.
async fn drain(
    db: &FreshDb,
    claims: &scrinalia_shared::DaemonStore,
    settings: &scrinalia_shared::Settings,
    placement: &Placement,
    n: usize,
    samples: &mut Vec<f64>,
) -> anyhow::Result<()> {
    seed_backlog(db, settings, n).await?;
    let id = Uuid::now_v7();
    let mut claimed = 0;
    loop {
        let started = Instant::now();
        let got = claim_batch(claims, id, &settings.daemon, placement, 0).await?;
        if got.is_empty() {
            break;
        }
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        claimed += got.len();
    }
    if claimed != n {
        bail!("{claimed} claims for a backlog of {n}");
    }
    // The claimed runs go (through the index of running rows); the old ledger stays for the pass.
    db.execute("delete from worker_runs where state = 'running'").await?;
    Ok(())
}

async fn measure(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let daemon = DaemonSettings { capacity: 1, ..DaemonSettings::default() };
    let (_, settings) =
        ConfigSpec { probes: opts.claims, daemon, ..ConfigSpec::default() }.load(env, db, dir, "bench")?;
    let config = serde_json::to_value(resolved(&settings, "probe-1")?)?;
    let history = History { rows: opts.rows, workers: opts.claims, spacing: 1.0, end_ago: 400.0 * 86_400.0 };
    seed::history(&db.url, &config, history).await?;
    let placement = Placement::of(&settings.catalogue, Vec::new());
    let claims = db.db.daemon.dedicated().await?;
    let mut a = Vec::new();
    for _ in 0..opts.rounds {
        drain(db, &claims, &settings, &placement, opts.claims, &mut a).await?;
    }
    let logs = LogStore::open(&settings.object_store)?;
    let pruner = tokio::spawn({
        let (db, retention) = (db.db.daemon.clone(), settings.retention.clone());
        async move {
            let started = Instant::now();
            let counts = db.prune_pass(&retention, &logs, Uuid::now_v7(), &|| false).await;
            (counts, started.elapsed())
        }
    });
    let mut b = Vec::new();
    let mut backlogs = 0;
    // At least one backlog, even when a small pass ends before it starts.
    loop {
        drain(db, &claims, &settings, &placement, opts.claims, &mut b).await?;
        backlogs += 1;
        if pruner.is_finished() {
            break;
        }
    }
    let (counts, took) = pruner.await?;
    let Some(counts) = counts? else { bail!("the prune pass did not run (its lease was not free)") };
    claims.close().await;
    let (a, b) = (Samples::from_ms(a), Samples::from_ms(b));
    let rows = seed_label(opts.rows);
    eprintln!("claim-during-prune: A (no pass): {}", a.summary());
    eprintln!(
        "claim-during-prune: B (during a pass that pruned {} runs and {} progress reports in {:.1} s, {backlogs} \
         backlogs): {}",
        counts.runs,
        counts.progress,
        took.as_secs_f64(),
        b.summary()
    );
    let setup = format!("one claim of one run, backlogs of {}", opts.claims);
    Ok(vec![
        Figure::info(BENCH, "PostgreSQL", format!("{setup}, no prune running (A): p99"), a.p99(), "ms")
            .detail(a.summary()),
        Figure::info(BENCH, "PostgreSQL", format!("{setup}, while a pass prunes {rows} runs (B): p99"), b.p99(), "ms")
            .target(Bound::Below(5.0))
            .detail(b.summary()),
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("the prune pass: runs deleted ({} s, {} progress reports)", took.as_secs(), counts.progress),
            counts.runs as f64,
            "runs",
        ),
    ])
}
