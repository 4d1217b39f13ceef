//! A daemon's death → its run `interrupted`: two daemons on PostgreSQL with a `--lease` (5 s) lease; a long
//! probe run starts on one of them, which is then killed with SIGKILL (at a different point of its renewal
//! cycle in each trial); the sibling's recovery marks the run `interrupted`. Measured from the kill (bench
//! clock) to the run's `finished_at` (database clock, same host), and from the lease's expiry to it.

use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::Utc;
use clap::Args;
use nix::sys::signal::Signal;
use scrinalia_shared::{RunState, config::DaemonSettings};
use scrinalia_testkit::{FreshDb, Kind, Process, process::Ready, try_eventually};

use crate::{
    env::{ConfigSpec, Env, request, with_db},
    report::{Bound, Figure, Samples, number},
};

/// Options of `scrinalia-bench recovery`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// The daemons' lease, in seconds (at least 3).
    #[arg(long, default_value_t = 5)]
    pub lease: u64,
    /// How many daemons die.
    #[arg(long, default_value_t = 3)]
    pub trials: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self { lease: 5, trials: 3 }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { lease: 3, trials: 1 }
    }
}

const BENCH: &str = "recovery";

/// Runs the trials.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let dir = env.folder("recovery")?;
    with_db(env, Kind::Postgres, &dir, async |db| trials(env, db, &dir, opts).await).await
}

async fn trials(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let spec = ConfigSpec {
        probes: 3,
        daemon: DaemonSettings {
            lease_seconds: opts.lease,
            queue_count_interval_seconds: 3600,
            ..DaemonSettings::default()
        },
        ..ConfigSpec::default()
    };
    let (path, settings) = spec.load(env, db, dir, "bench")?;
    let lease = Duration::from_secs(opts.lease);
    let gone_after = settings.daemon.gone_after();
    let program = env.bin("scrinalia-daemon");
    let mut daemons: Vec<Process> = Vec::new();
    let (mut after_death, mut after_expiry) = (Vec::new(), Vec::new());
    for trial in 0..opts.trials {
        while daemons.len() < 2 {
            let name = format!("daemon-{trial}-{}", daemons.len());
            let ready = Ready::Line("daemon started");
            daemons.push(Process::start_ready(&program, &name, dir, &path, &[], &[], ready).await?);
        }
        let long = request("probe-1", serde_json::json!({ "duration_ms": 50_000 }));
        let run = db.db.api.request_run(&settings.catalogue, long).await?;
        let running = try_eventually(Duration::from_secs(20), "the run to start", || async {
            Ok(db.db.api.get_run(run.id).await?.filter(|r| r.started_at.is_some()))
        })
        .await?;
        let owner = running.daemon_id.context("a claimed run has its daemon")?;
        let pid = db.db.api.get_daemon(owner, gone_after).await?.context("the owner is registered")?.pid;
        let index =
            daemons.iter().position(|d| d.pid().as_raw() == pid).context("the owner is one of the bench's daemons")?;
        // Die at a different point of the renewal cycle (every lease/3) in each trial.
        let offset = lease / 3 * u32::try_from(trial % 3)? / 3;
        tokio::time::sleep(Duration::from_millis(300) + offset).await;
        let victim = daemons.remove(index);
        victim.try_signal(Signal::SIGKILL)?;
        let killed_at = Utc::now();
        drop(victim);
        let expiry = db.db.api.get_run(run.id).await?.and_then(|r| r.lease_expires_at).context("a lease")?;
        let ended = try_eventually(lease * 3, "the run to be interrupted", || async {
            Ok(db.db.api.get_run(run.id).await?.filter(|r| r.state.is_terminal()))
        })
        .await?;
        if ended.state != RunState::Interrupted {
            bail!("the run ended {} instead of interrupted: {:?}", ended.state, ended.error);
        }
        let finished = ended.finished_at.context("an end")?;
        let ms = |d: chrono::TimeDelta| d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0;
        after_death.push(ms(finished - killed_at));
        after_expiry.push(ms(finished - expiry));
        eprintln!(
            "recovery: trial {}: killed → interrupted {} ms (lease expiry → interrupted {} ms)",
            trial + 1,
            number(ms(finished - killed_at)),
            number(ms(finished - expiry))
        );
    }
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
    let death = Samples::from_ms(after_death);
    let expiry = Samples::from_ms(after_expiry);
    let limit = (opts.lease + 2) as f64;
    Ok(vec![
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("SIGKILL of a daemon → its run interrupted, worst of {} (lease {} s)", opts.trials, opts.lease),
            death.max() / 1000.0,
            "s",
        )
        .target(Bound::Below(limit))
        .detail(format!("each: {} s", death_list(&death))),
        Figure::info(BENCH, "PostgreSQL", "lease expiry → interrupted, worst", expiry.max(), "ms")
            .detail(expiry.summary()),
    ])
}

fn death_list(samples: &Samples) -> String {
    (0..samples.len())
        .map(|i| number(samples.quantile((i + 1) as f64 / samples.len() as f64) / 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}
