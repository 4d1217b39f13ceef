//! Sharded runs against one run: on PostgreSQL, with N daemons of one slot each (N = 2 and 4), a probe over a
//! fixed corpus of items that pauses after each item of its share (`item_ms`, as a model call per document
//! would: this machine's cores are not the limit), run once whole and once as `shards = N`. Measured: the wall
//! time of each (the ledger's `requested_at` → `finished_at`, database clock), the speed-up, and what a child's
//! pickup costs (its `requested_at` → its worker's start) against the plain run's.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use scrinalia_shared::{Run, RunState, config::DaemonSettings};
use scrinalia_testkit::{FreshDb, Kind, Process, process::Ready, try_eventually};
use serde_json::json;

use crate::{
    env::{ConfigSpec, Env, request, with_db},
    report::{Bound, Figure, Samples, number},
};

/// Options of `scrinalia-bench shards`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// The numbers of daemons (each with one slot) and of shards, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [2, 4])]
    pub daemons: Vec<u32>,
    /// Items in the corpus.
    #[arg(long, default_value_t = 400)]
    pub items: u32,
    /// The pause after each item, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub item_ms: u32,
    /// Runs of each kind (whole, sharded) per number of daemons.
    #[arg(long, default_value_t = 2)]
    pub trials: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self { daemons: vec![2, 4], items: 400, item_ms: 20, trials: 2 }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { daemons: vec![2], items: 20, item_ms: 5, trials: 1 }
    }
}

const BENCH: &str = "shards";

/// Runs the bench for each number of daemons.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for &daemons in &opts.daemons {
        let dir = env.folder(&format!("shards-{daemons}"))?;
        figures
            .extend(with_db(env, Kind::Postgres, &dir, async |db| trials(env, db, &dir, opts, daemons).await).await?);
    }
    Ok(figures)
}

async fn trials(
    env: &Env,
    db: &FreshDb,
    dir: &std::path::Path,
    opts: &Opts,
    daemons: u32,
) -> anyhow::Result<Vec<Figure>> {
    let spec = ConfigSpec {
        probes: 1,
        daemon: DaemonSettings { capacity: 1, queue_count_interval_seconds: 3600, ..DaemonSettings::default() },
        ..ConfigSpec::default()
    };
    let (path, settings) = spec.load(env, db, dir, "bench")?;
    let program = env.bin("scrinalia-daemon");
    let mut processes: Vec<Process> = Vec::new();
    for i in 0..daemons {
        let ready = Ready::Line("daemon started");
        processes.push(Process::start_ready(&program, &format!("daemon-{i}"), dir, &path, &[], &[], ready).await?);
    }
    // A request for shards needs the worker's description (whether it takes a shard).
    try_eventually(Duration::from_secs(30), "a daemon to describe probe-1", || async {
        Ok(db.db.api.description("probe-1").await?.and_then(|d| d.description).map(drop))
    })
    .await?;
    let options = json!({ "items": opts.items, "item_ms": opts.item_ms });
    let (mut whole, mut sharded, mut pickups, mut child_pickups) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..opts.trials {
        let plain = run_to_end(db, &settings, request("probe-1", options.clone())).await?;
        whole.push(wall_ms(&plain)?);
        pickups.push(pickup_ms(&plain)?);
        let mut split = request("probe-1", options.clone());
        split.arguments.shards = Some(i64::from(daemons));
        let parent = run_to_end(db, &settings, split).await?;
        sharded.push(wall_ms(&parent)?);
        for child in db.db.api.run_children(parent.id).await? {
            child_pickups.push(pickup_ms(&child)?);
        }
        eprintln!(
            "shards: {daemons} daemons: whole {} s, {daemons} shards {} s",
            number(whole.last().copied().unwrap_or_default() / 1000.0),
            number(sharded.last().copied().unwrap_or_default() / 1000.0)
        );
    }
    for process in processes {
        process.stop(Duration::from_secs(10)).await;
    }
    let (whole, sharded) = (Samples::from_ms(whole), Samples::from_ms(sharded));
    let (pickups, child_pickups) = (Samples::from_ms(pickups), Samples::from_ms(child_pickups));
    let speedup = whole.p50() / sharded.p50();
    let target = if daemons == 2 { Some(Bound::Above(1.8)) } else { None };
    let corpus = format!("{} items, {} ms each", opts.items, opts.item_ms);
    let mut figures = vec![
        Figure::info(BENCH, "PostgreSQL", format!("one run over {corpus}, wall time p50"), whole.p50() / 1000.0, "s")
            .detail(whole.summary()),
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("{daemons} shards on {daemons} daemons (1 slot each), wall time p50"),
            sharded.p50() / 1000.0,
            "s",
        )
        .detail(sharded.summary()),
    ];
    let mut speed = Figure::info(BENCH, "PostgreSQL", format!("speed-up of {daemons} shards"), speedup, "×");
    if let Some(bound) = target {
        speed = speed.target(bound);
    }
    figures.push(speed);
    figures.push(
        Figure::info(BENCH, "PostgreSQL", "request → worker started, p50, the whole run", pickups.p50(), "ms")
            .detail(pickups.summary()),
    );
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("request → worker started, p50, each child of {daemons}"),
            child_pickups.p50(),
            "ms",
        )
        .detail(child_pickups.summary()),
    );
    Ok(figures)
}

/// Requests `request` and waits for its end; the run as it ended, which must have succeeded.
async fn run_to_end(
    db: &FreshDb,
    settings: &scrinalia_shared::Settings,
    request: scrinalia_shared::runs::RunRequest,
) -> anyhow::Result<Run> {
    let run = db.db.api.request_run(&settings.catalogue, request).await?;
    let ended = try_eventually(Duration::from_secs(600), "the run to end", || async {
        Ok(db.db.api.get_run(run.id).await?.filter(|r| r.state.is_terminal()))
    })
    .await?;
    if ended.state != RunState::Succeeded {
        bail!("run {} ended {}: {:?}", ended.id, ended.state, ended.error);
    }
    Ok(ended)
}

fn wall_ms(run: &Run) -> anyhow::Result<f64> {
    let finished = run.finished_at.context("an ended run has its end")?;
    Ok((finished - run.requested_at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0)
}

fn pickup_ms(run: &Run) -> anyhow::Result<f64> {
    let started = run.started_at.context("a run that succeeded has started")?;
    Ok((started - run.requested_at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0)
}
