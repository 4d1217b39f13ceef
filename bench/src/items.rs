//! What item lines cost a run: a probe prints `--lines` item lines at full speed (B) against the same probe
//! printing free-text lines of the same length (A, which the daemon only logs), alternating for `--rounds`
//! rounds on one daemon: the run's wall time (the ledger's started → finished, which includes writing the last
//! batch), how long each line took the worker to write and flush (never held up by the database), and the
//! daemon's peak resident memory. Then the reads of a run of 10,000 items, 50 failed: `GET /api/runs/{id}` and
//! its failures page, p99 over `--reads` requests each. On PostgreSQL and on SQLite.

use std::{path::Path, time::Instant};

use anyhow::{Context, bail};
use clap::Args;
use scrinalia_shared::{RunState, config::DaemonSettings};
use scrinalia_testkit::{FreshDb, Kind, Process, free_port, process::Ready, try_eventually};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    counts::Backend,
    env::{ConfigSpec, Env, VIEWER, request, status_mib, with_db},
    report::{Bound, Figure, Samples},
};

/// Options of `scrinalia-bench items`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Lines printed by each run.
    #[arg(long, default_value_t = 1_000_000)]
    pub lines: i64,
    /// A/B pairs of runs.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Requests of each read.
    #[arg(long, default_value_t = 300)]
    pub reads: usize,
    /// The databases (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Backend::Postgres, Backend::Sqlite])]
    pub backends: Vec<Backend>,
}

impl Default for Opts {
    fn default() -> Self {
        Self { lines: 1_000_000, rounds: 3, reads: 300, backends: vec![Backend::Postgres, Backend::Sqlite] }
    }
}

impl Opts {
    /// The smallest run that exercises every part.
    pub fn quick() -> Self {
        Self { lines: 2_000, rounds: 1, reads: 20, backends: vec![Backend::Postgres, Backend::Sqlite] }
    }
}

const BENCH: &str = "items";

/// Measures each backend.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for backend in &opts.backends {
        let kind = match backend {
            Backend::Postgres => Kind::Postgres,
            Backend::Sqlite => Kind::Sqlite,
        };
        let dir = env.folder(&format!("items-{}", kind.name()))?;
        figures.extend(with_db(env, kind, &dir, async |db| measure(env, db, &dir, kind, opts).await).await?);
    }
    Ok(figures)
}

/// One run's figures: its wall time and its writes.
struct Pass {
    wall_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

async fn measure(env: &Env, db: &FreshDb, dir: &Path, kind: Kind, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let port = free_port();
    let probes = dir.join("probes.jsonl");
    let daemon = DaemonSettings {
        worker_env: [("SCRINALIA_PROBE_LOG".to_owned(), probes.display().to_string())].into(),
        queue_count_interval_seconds: 3600,
        ..DaemonSettings::default()
    };
    // The daemon says it started (info); a run's output lines are not echoed to its own log (the runner's info), so
    // the text baseline costs what it costs in production: the run log alone.
    let log_filter = "warn,scrinalia_daemon=info,scrinalia_daemon::runner=warn";
    let spec =
        ConfigSpec { probes: 1, daemon, api_listen: Some(([127, 0, 0, 1], port).into()), log_filter, limits: false };
    let (path, settings) = spec.load(env, db, dir, "bench")?;
    let program = env.bin("scrinalia-daemon");
    let daemon = Process::start_ready(&program, "daemon", dir, &path, &[], &[], Ready::Line("daemon started")).await?;
    let backend = kind.name();
    let (mut text, mut items) = (Vec::new(), Vec::new());
    for round in 1..=opts.rounds {
        for as_text in [true, false] {
            let options = json!({ "items": opts.lines, "item_text": as_text });
            let (pass, _) = pass(db, &settings.catalogue, &probes, options).await?;
            let what = if as_text { "text lines" } else { "item lines" };
            eprintln!(
                "items: {backend} round {round}: {} {what}: {:.0} ms, writes p99 {:.3} ms, max {:.1} ms",
                opts.lines, pass.wall_ms, pass.p99_ms, pass.max_ms
            );
            if as_text { text.push(pass) } else { items.push(pass) }
        }
    }
    let peak = status_mib(daemon.pid().as_raw(), "VmHWM")?;
    let median = |passes: &[Pass], f: fn(&Pass) -> f64| Samples::from_ms(passes.iter().map(f)).p50();
    let ratio = median(&items, |p| p.wall_ms) / median(&text, |p| p.wall_ms);
    let runs = |passes: &[Pass], f: fn(&Pass) -> f64| {
        passes.iter().map(|p| format!("{:.3}", f(p))).collect::<Vec<_>>().join(" / ")
    };
    let lines = opts.lines;
    let mut figures = vec![
        Figure::info(
            BENCH,
            backend,
            format!("{lines} item lines: wall time ÷ {lines} text lines (medians)"),
            ratio,
            "×",
        )
        .target(Bound::Below(1.10))
        .detail(format!("items {} ms, text {} ms", runs(&items, |p| p.wall_ms), runs(&text, |p| p.wall_ms))),
        Figure::info(
            BENCH,
            backend,
            "a line's write, p99 (worker clock, item lines)",
            median(&items, |p| p.p99_ms),
            "ms",
        )
        .target(Bound::Below(10.0))
        .detail(format!("runs {}; text lines {}", runs(&items, |p| p.p99_ms), runs(&text, |p| p.p99_ms))),
        Figure::info(
            BENCH,
            backend,
            "a line's write, max (worker clock, item lines)",
            items.iter().map(|p| p.max_ms).fold(0.0, f64::max),
            "ms",
        )
        .target(Bound::Below(250.0))
        .detail(format!("runs {}; text lines {}", runs(&items, |p| p.max_ms), runs(&text, |p| p.max_ms))),
        Figure::info(BENCH, backend, "the daemon's peak resident memory (VmHWM)", peak, "MiB")
            .target(Bound::Below(64.0)),
    ];
    drop(daemon);
    figures.extend(reads(env, db, dir, &path, &settings.catalogue, &probes, port, opts.reads, backend).await?);
    Ok(figures)
}

/// Runs probe-1 with `options` to its end; its wall time and what its ledger says of its writes.
async fn pass(
    db: &FreshDb,
    catalogue: &scrinalia_shared::Catalogue,
    probes: &Path,
    options: Value,
) -> anyhow::Result<(Pass, Uuid)> {
    let run = db.db.api.request_run(catalogue, request("probe-1", options)).await?;
    let ended = try_eventually(std::time::Duration::from_secs(600), "the run to end", || async {
        Ok(db.db.api.get_run(run.id).await?.filter(|r| r.state.is_terminal()))
    })
    .await?;
    if ended.state != RunState::Succeeded {
        bail!("the run ended {}: {:?}", ended.state, ended.error);
    }
    let wall_ms = ended.duration_ms.context("a finished run has a duration")? as f64;
    let writes = probe_writes(probes, run.id)?;
    let ms = |key: &str| writes[key].as_f64().with_context(|| format!("the probe's {key}"));
    Ok((Pass { wall_ms, p99_ms: ms("p99_ms")?, max_ms: ms("max_ms")? }, run.id))
}

/// The `writes` of the probe ledger's end line of run `id`.
fn probe_writes(probes: &Path, id: Uuid) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(probes).context("the probe log")?;
    let id = id.to_string();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "end" && e["run_id"] == id.as_str())
        .map(|e| e["writes"].clone())
        .context("the probe's end line")
}

/// A run of 10,000 items, 50 failed; then its detail and its failures page through the API, one at a time.
#[allow(clippy::too_many_arguments)]
async fn reads(
    env: &Env,
    db: &FreshDb,
    dir: &Path,
    path: &Path,
    catalogue: &scrinalia_shared::Catalogue,
    probes: &Path,
    port: u16,
    count: usize,
    backend: &'static str,
) -> anyhow::Result<Vec<Figure>> {
    let program = env.bin("scrinalia-daemon");
    let daemon =
        Process::start_ready(&program, "daemon-reads", dir, path, &[], &[], Ready::Line("daemon started")).await?;
    let options = json!({ "items": 10_000, "failed_every": 200 });
    let (_, run) = pass(db, catalogue, probes, options).await?;
    drop(daemon);
    let base = format!("http://127.0.0.1:{port}");
    let readyz = format!("{base}/readyz");
    let _api =
        Process::start_ready(&env.bin("scrinalia-api"), "api", dir, path, &[], &[], Ready::Http(&readyz)).await?;
    let client = reqwest::Client::builder().build()?;
    let mut figures = Vec::new();
    for (name, url) in [
        ("GET /api/runs/{id}", format!("{base}/api/runs/{run}")),
        ("GET /api/runs/{id}/items?outcome=failed (50 a page)", format!("{base}/api/runs/{run}/items?outcome=failed")),
    ] {
        for _ in 0..20 {
            client.get(&url).bearer_auth(VIEWER).send().await?.error_for_status()?.bytes().await?;
        }
        let mut samples = Vec::with_capacity(count);
        for _ in 0..count {
            let started = Instant::now();
            client.get(&url).bearer_auth(VIEWER).send().await?.error_for_status()?.bytes().await?;
            samples.push(started.elapsed());
        }
        let samples = Samples::from_durations(samples);
        eprintln!("items: {backend} {name} at 10,000 items: {}", samples.summary());
        figures.push(
            Figure::info(BENCH, backend, format!("{name} at 10,000 items, p99"), samples.p99(), "ms")
                .target(Bound::Below(50.0))
                .detail(samples.summary()),
        );
    }
    Ok(figures)
}
