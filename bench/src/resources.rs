//! What a shared resource adds to a claim: the daemon's own claim function (`claim_batch`, capacity 1, so one
//! run per claim) drains a backlog of `--claims` requests, one per probe worker, on one dedicated connection,
//! timing every claim; once with a catalogue where no worker holds a resource (A), once where every worker holds
//! a `model-server` of a capacity no claim reaches (B: the claim path with the resource check, its advisory lock
//! and its hold, never refused), and once more like B but with the backlog's priorities spread from 0 to 100 (C:
//! the ordered pick across workers that priorities bring, issue 27; B has every request at the default 50). A, B
//! and C alternate for `--rounds` rounds in the same window, on PostgreSQL and on SQLite.

use std::time::Instant;

use anyhow::bail;
use clap::Args;
use scrinalia_daemon::main_loop::claim_batch;
use scrinalia_shared::{ResourceSpec, config::DaemonSettings, runs::Placement};
use scrinalia_testkit::{FreshDb, Kind};
use uuid::Uuid;

use crate::{
    counts::Backend,
    drain::reset,
    env::{ConfigSpec, Env, seed_backlog, with_db},
    report::{Figure, Samples},
};

/// Options of `scrinalia-bench resources`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Requests drained per pass (one probe worker each).
    #[arg(long, default_value_t = 1000)]
    pub claims: usize,
    /// A/B pairs of passes.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The databases (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Backend::Postgres, Backend::Sqlite])]
    pub backends: Vec<Backend>,
}

impl Default for Opts {
    fn default() -> Self {
        Self { claims: 1000, rounds: 3, backends: vec![Backend::Postgres, Backend::Sqlite] }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { claims: 20, rounds: 1, ..Self::default() }
    }
}

const BENCH: &str = "resources";

/// Runs the A/B passes on each backend.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for backend in &opts.backends {
        let kind = match backend {
            Backend::Postgres => Kind::Postgres,
            Backend::Sqlite => Kind::Sqlite,
        };
        let dir = env.folder(&format!("resources-{}", kind.name().to_lowercase()))?;
        figures.extend(with_db(env, kind, &dir, async |db| passes(env, db, &dir, opts).await).await?);
    }
    Ok(figures)
}

async fn passes(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let daemon = DaemonSettings { capacity: 1, ..DaemonSettings::default() };
    let (_, settings) =
        ConfigSpec { probes: opts.claims, daemon, ..ConfigSpec::default() }.load(env, db, dir, "bench")?;
    let plain = Placement::of(&settings.catalogue, Vec::new());
    let mut holding = settings.catalogue.clone();
    holding.resources = vec![ResourceSpec {
        name: "model-server".into(),
        capacity: 1_000_000,
        description: None,
        scope: Default::default(),
        starts_per_minute: None,
        preempt_after_seconds: None,
        preempt_grace_seconds: None,
    }];
    for worker in &mut holding.workers {
        worker.resources = vec!["model-server".into()];
    }
    let held = Placement::of(&holding, Vec::new());
    let claims = match db.kind {
        Kind::Postgres => db.db.daemon.dedicated().await?,
        Kind::Sqlite => db.another_pool(2).await?.daemon,
    };
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..opts.rounds {
        for (placement, samples, spread) in [(&plain, &mut a, false), (&held, &mut b, false), (&held, &mut c, true)] {
            reset(db).await?;
            seed_backlog(db, &settings, opts.claims).await?;
            if spread {
                spread_priorities(db).await?;
            }
            let id = Uuid::now_v7();
            let mut claimed = 0;
            loop {
                let started = Instant::now();
                let got = claim_batch(&claims, id, &settings.daemon, placement, 0).await?;
                if got.is_empty() {
                    break;
                }
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
                claimed += got.len();
            }
            if claimed != opts.claims {
                bail!("{claimed} claims for a backlog of {}", opts.claims);
            }
        }
    }
    claims.close().await;
    let backend = db.kind.name();
    let (a, b, c) = (Samples::from_ms(a), Samples::from_ms(b), Samples::from_ms(c));
    eprintln!("resources: {backend}: A {} · B {} · C {}", a.summary(), b.summary(), c.summary());
    let setup = format!("one claim of one run, {} runs a pass, {} A/B rounds", opts.claims, opts.rounds);
    Ok(vec![
        Figure::info(BENCH, backend, format!("{setup}: no resource (A), p50"), a.p50(), "ms").detail(a.summary()),
        Figure::info(BENCH, backend, format!("{setup}: holding a resource (B), p50"), b.p50(), "ms")
            .detail(b.summary()),
        Figure::info(BENCH, backend, format!("{setup}: B − A, p50"), b.p50() - a.p50(), "ms"),
        Figure::info(BENCH, backend, format!("{setup}: B − A, p99"), b.p99() - a.p99(), "ms"),
        Figure::info(BENCH, backend, format!("{setup}: holding, priorities 0–100 (C), p50"), c.p50(), "ms")
            .detail(c.summary()),
        Figure::info(BENCH, backend, format!("{setup}: C − B, p50"), c.p50() - b.p50(), "ms"),
        Figure::info(BENCH, backend, format!("{setup}: C − B, p99"), c.p99() - b.p99(), "ms"),
    ])
}

/// Gives the backlog's requests priorities spread at random over 0 to 100.
async fn spread_priorities(db: &FreshDb) -> anyhow::Result<()> {
    match db.kind {
        Kind::Postgres => {
            db.execute("update worker_runs set priority = floor(random() * 101)::int").await?;
            db.execute("analyze worker_runs").await?;
        }
        Kind::Sqlite => {
            db.execute("update worker_runs set priority = abs(random()) % 101").await?;
        }
    }
    Ok(())
}
