//! Schedules, two measurements (`--parts lateness,idle`), on PostgreSQL and then SQLite (`--backends`):
//!
//! - **Fire lateness**: `--daemons` (3) real daemons with the shipped defaults share one database whose
//!   catalogue holds `--schedules` (20) no-op probes; once the daemons have settled (`--settle`, 5 s: start-up
//!   chores), the bench creates one schedule per probe, `* * * * * *` (every second), through
//!   `ApiStore::create_schedule` as the API does, lets `--warmup` (3) s pass, then measures `--seconds` (40) s
//!   on the database clock. A fire's lateness is its run's `requested_at − fire_at`: both are written by the
//!   database (`requested_at` is the fire transaction's start on PostgreSQL, the insert's time on SQLite, with
//!   millisecond resolution there), so no client clock is in it. A daemon fires every due schedule in one
//!   transaction, whose runs become visible at its commit, so the bench also reads when each fire was written:
//!   its record's `recorded_at − fire_at` (`clock_timestamp()` on PostgreSQL), just before the commit. Every
//!   fire whose `fire_at` falls in the window counts; the schedules are paused a second and a half after the
//!   window, so that its last fire time has fired.
//!   Also: how many fires each daemon made (`schedule_fires.fired_by`: there is no leader), the lateness of the
//!   first fire of each second (the wake-up), the spread within a second (one fire after the other), and the
//!   CPU busy in the window (`/proc/stat`; the daemons' own with their reaped supervisors and probes). For a
//!   diagnosis, `--no-runs` leaves the scheduled runs queued (the firing alone) and `--statement-log` logs the
//!   daemons' statements.
//! - **An idle daemon's queries with 1,000 schedules**: two daemons side by side, each on a database of its own
//!   with three probes and the shipped defaults, one with no schedule (A) and one with `--idle-schedules`
//!   (1,000) enabled schedules that do not come due for weeks (`<minute> <hour> 1 1 *`, spread over New Year's
//!   day), nothing queued; measured over `--idle-seconds` (60) after `--idle-settle` (15) s. Queries: every statement
//!   each daemon sends, counted from its own statement log (`RUST_LOG=info,sqlx::query=debug`: sqlx logs every
//!   statement it sends but `BEGIN` and the rollback of a dropped transaction; its pings are protocol syncs, no
//!   statement), on both backends; on PostgreSQL also `xact_commit +
//!   xact_rollback` of each database in `pg_stat_database`, read from another database, with the bench's own
//!   pools closed before the daemons start (`pg_stat_statements` is not loaded on the bench's server, and
//!   loading it means a restart with `shared_preload_libraries`, which the bench does not do). The A/B pair
//!   runs in the same window, so the machine and the server's other databases weigh on both alike.

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::{Context as _, bail, ensure};
use chrono::{DateTime, TimeDelta, Utc};
use clap::{Args, ValueEnum};
use scrinalia_shared::{FireOutcome, ScheduleFire, ScheduleInput, config::DaemonSettings};
use scrinalia_testkit::{FreshDb, Kind, Process};

use uuid::Uuid;

mod idle;

use crate::{
    counts::Backend,
    env::{ConfigSpec, Env, cpu_time, with_db},
    report::{Bound, Figure, Samples, number},
};

/// Options of `scrinalia-bench schedules`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// The measurements (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Part::Lateness, Part::Idle])]
    pub parts: Vec<Part>,
    /// The databases, one measurement per backend (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Backend::Postgres, Backend::Sqlite])]
    pub backends: Vec<Backend>,
    /// Lateness: daemons sharing the database.
    #[arg(long, default_value_t = 3)]
    pub daemons: usize,
    /// Lateness: schedules firing every second, each on a probe of its own.
    #[arg(long, default_value_t = 20)]
    pub schedules: usize,
    /// Lateness: length of the measurement window, in seconds.
    #[arg(long, default_value_t = 40)]
    pub seconds: u64,
    /// Lateness: seconds between the schedules' creation and the window.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Idle: the schedules of daemon B (daemon A has none).
    #[arg(long, default_value_t = 1000)]
    pub idle_schedules: usize,
    /// Idle: length of the measurement window, in seconds.
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Idle: seconds between the daemons' start and the window. PostgreSQL 15 may hold a backend's counters up to
    /// 10 s (`PGSTAT_IDLE_INTERVAL`) when it cannot flush them at once, so the start-up work must be well over.
    #[arg(long, default_value_t = 15)]
    pub idle_settle: u64,
    /// Lateness: run the daemons with their statement log (`RUST_LOG=info,sqlx::query=debug`) to see where a
    /// fire's time goes with `--keep`; the logging slows them.
    #[arg(long)]
    pub statement_log: bool,
    /// Lateness, a diagnosis: the daemons take only a probe no schedule fires, so no scheduled run starts (each
    /// schedule's first run stays queued and its later fires are skipped as overlapping): the firing alone, its
    /// lateness read from `schedule_fires.recorded_at − fire_at` (the clock at the fire's write).
    #[arg(long)]
    pub no_runs: bool,
    /// Lateness: seconds between the daemons' start and the schedules' creation (start-up work: the first chores).
    #[arg(long, default_value_t = 5)]
    pub settle: u64,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            parts: vec![Part::Lateness, Part::Idle],
            backends: vec![Backend::Postgres, Backend::Sqlite],
            daemons: 3,
            schedules: 20,
            seconds: 40,
            warmup: 3,
            statement_log: false,
            no_runs: false,
            idle_schedules: 1000,
            idle_seconds: 60,
            idle_settle: 15,
            settle: 5,
        }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self {
            daemons: 2,
            schedules: 2,
            seconds: 2,
            warmup: 1,
            idle_schedules: 10,
            idle_seconds: 1,
            idle_settle: 1,
            settle: 1,
            ..Self::default()
        }
    }
}

/// One of the two measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    /// Fire lateness with several daemons.
    Lateness,
    /// An idle daemon's queries with many schedules, against none.
    Idle,
}

const BENCH: &str = "schedules";

fn kind(backend: Backend) -> Kind {
    match backend {
        Backend::Postgres => Kind::Postgres,
        Backend::Sqlite => Kind::Sqlite,
    }
}

/// Runs the parts asked for, on each backend.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    ensure!(opts.daemons > 0 && opts.schedules > 0 && opts.seconds > 0, "--daemons, --schedules, --seconds > 0");
    ensure!(opts.idle_seconds > 0, "--idle-seconds must be above 0");
    let mut figures = Vec::new();
    for part in &opts.parts {
        for backend in &opts.backends {
            let kind = kind(*backend);
            let name = kind.name().to_lowercase();
            figures.extend(match part {
                Part::Lateness => {
                    let dir = env.folder(&format!("schedules-lateness-{name}"))?;
                    with_db(env, kind, &dir, async |db| lateness(env, db, &dir, opts).await).await?
                }
                Part::Idle => {
                    let (a, b) = (
                        env.folder(&format!("schedules-idle-{name}-a"))?,
                        env.folder(&format!("schedules-idle-{name}-b"))?,
                    );
                    with_db(env, kind, &a, async |db_a| {
                        with_db(env, kind, &b, async |db_b| idle::idle(env, [db_a, db_b], [&a, &b], opts).await).await
                    })
                    .await?
                }
            });
        }
    }
    Ok(figures)
}

/// Milliseconds of a database-clock difference.
fn ms(d: TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

fn start_daemons(env: &Env, dir: &Path, config: &Path, n: usize, log: &[(&str, &str)]) -> anyhow::Result<Vec<Process>> {
    let program = env.bin("scrinalia-daemon");
    let config = config.display().to_string();
    (0..n).map(|i| Process::start(&program, &format!("daemon-{i}"), dir, &["--config", &config], log)).collect()
}

async fn lateness(env: &Env, db: &FreshDb, dir: &Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let backend = db.kind.name();
    let spec = if opts.no_runs {
        let idle = format!("probe-{}", opts.schedules + 1);
        let daemon = DaemonSettings { workers: vec![idle], ..DaemonSettings::default() };
        ConfigSpec { probes: opts.schedules + 1, daemon, ..ConfigSpec::default() }
    } else {
        ConfigSpec { probes: opts.schedules, ..ConfigSpec::default() }
    };
    let (config, settings) = spec.load(env, db, dir, "bench")?;
    // All are started before any is waited for, so that they settle side by side.
    let log: &[(&str, &str)] = if opts.statement_log { &[("RUST_LOG", "info,sqlx::query=debug")] } else { &[] };
    let mut daemons = start_daemons(env, dir, &config, opts.daemons, log)?;
    for daemon in &mut daemons {
        daemon.wait_for("daemon started", Duration::from_secs(60)).await?;
    }
    tokio::time::sleep(Duration::from_secs(opts.settle)).await;
    let names: Vec<String> = (1..=opts.schedules).map(|i| format!("every-second-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let input = ScheduleInput {
            name: name.clone(),
            worker: Some(format!("probe-{}", i + 1)),
            cron: "* * * * * *".to_owned(),
            reason: Some("the bench measures how late a fire is".to_owned()),
            ..ScheduleInput::default()
        };
        db.db
            .api
            .create_schedule(&settings.catalogue, "bench", &input)
            .await
            .with_context(|| format!("create {name}"))?;
    }
    tokio::time::sleep(Duration::from_secs(opts.warmup)).await;
    eprintln!(
        "schedules: {backend}, {} schedules every second, {} daemons: measuring {} s",
        opts.schedules, opts.daemons, opts.seconds
    );
    let from = db.db.api.now().await?;
    let busy_before = cpu_busy()?;
    let daemons_before: Vec<Duration> =
        daemons.iter().map(|d| cpu_time(d.pid().as_raw())).collect::<anyhow::Result<_>>()?;
    tokio::time::sleep(Duration::from_secs(opts.seconds)).await;
    let until = db.db.api.now().await?;
    let busy = cpu_busy()?.since(&busy_before);
    let daemons_cpu: Duration = daemons
        .iter()
        .zip(&daemons_before)
        .map(|(d, before)| Ok(cpu_time(d.pid().as_raw())? - *before))
        .sum::<anyhow::Result<Duration>>()?;
    let alive = db.db.api.list_daemons(settings.daemon.gone_after()).await?;
    let who: BTreeMap<Uuid, String> = alive
        .iter()
        .filter_map(|d| daemons.iter().find(|p| p.pid().as_raw() == d.pid).map(|p| (d.id, p.name.clone())))
        .collect();
    // The last fire time of the window fires too before the schedules are paused.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for name in &names {
        db.db.api.set_schedule_enabled(name, false, "bench", Some("the window is over")).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let logs: Vec<String> = daemons.iter().map(Process::output).collect();
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }

    let mut fires: Vec<ScheduleFire> = Vec::new();
    for name in &names {
        let all = db.db.api.schedule_fires(name, 1000).await?;
        fires.extend(all.into_iter().filter(|f| f.fire_at >= from && f.fire_at < until));
    }
    if fires.is_empty() {
        bail!("no schedule fired in the window; see the daemons' logs in {}", dir.display());
    }
    // Whole seconds in [from, until): the fire times of a schedule every second.
    let seconds = (until.timestamp() - from.timestamp()) + i64::from(until.timestamp_subsec_nanos() > 0)
        - i64::from(from.timestamp_subsec_nanos() > 0);
    let expected = usize::try_from(seconds).unwrap_or(0) * opts.schedules;
    let mut late: Vec<(DateTime<Utc>, f64)> = Vec::new();
    for fire in &fires {
        if opts.no_runs {
            late.push((fire.fire_at, ms(fire.recorded_at - fire.fire_at)));
            continue;
        }
        let Some(id) = fire.run_id else { continue };
        let run = db.db.api.get_run(id).await?.with_context(|| format!("run {id} of a fire is missing"))?;
        let at = run.fire_at.context("a fired run has its fire time")?;
        late.push((at, ms(run.requested_at - at)));
    }
    let samples = Samples::from_ms(late.iter().map(|(_, l)| *l));
    // The clock when the fire was written (PostgreSQL: `clock_timestamp()`, not the transaction's start): a
    // pass's runs become visible at its commit, right after its last fire is written.
    let written = Samples::from_ms(
        fires.iter().filter(|f| f.outcome == FireOutcome::Requested).map(|f| ms(f.recorded_at - f.fire_at)),
    );
    let mut by_second: BTreeMap<DateTime<Utc>, Vec<f64>> = BTreeMap::new();
    for (at, l) in &late {
        by_second.entry(*at).or_default().push(*l);
    }
    let first = Samples::from_ms(by_second.values().map(|v| v.iter().copied().fold(f64::INFINITY, f64::min)));
    let spread = Samples::from_ms(by_second.values().map(|v| {
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), l| (lo.min(*l), hi.max(*l)));
        hi - lo
    }));
    let count = |o: FireOutcome| fires.iter().filter(|f| f.outcome == o).count();
    let mut per_daemon: BTreeMap<String, usize> = who.values().map(|n| (n.clone(), 0)).collect();
    for fire in &fires {
        let name = fire
            .fired_by
            .map_or_else(|| "nobody".to_owned(), |id| who.get(&id).cloned().unwrap_or_else(|| id.to_string()));
        *per_daemon.entry(name).or_default() += 1;
    }
    let warned: usize = logs.iter().map(|l| l.matches("could not fire the due schedules").count()).sum();
    let refused: usize = logs.iter().map(|l| l.matches("refused by the database's unique index").count()).sum();
    let mut setup = format!("{} schedules every second, {} daemons", opts.schedules, opts.daemons);
    let measure = if opts.no_runs {
        setup.push_str(", no run started");
        "fire recorded_at − fire_at"
    } else {
        "run requested_at − fire_at"
    };
    let each: Vec<String> = per_daemon.iter().map(|(n, c)| format!("{n} {c}")).collect();
    eprintln!("schedules: {backend}: lateness {}; fires by daemon: {}", samples.summary(), each.join(", "));
    let mut figures = vec![
        Figure::info(BENCH, backend, format!("{setup}: fire lateness p99 ({measure})"), samples.p99(), "ms")
            .target(Bound::Below(50.0))
            .detail(samples.summary()),
        Figure::info(BENCH, backend, format!("{setup}: fire lateness p50"), samples.p50(), "ms"),
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: fire written p99 (fire recorded_at − fire_at, clock at the write)"),
            written.p99(),
            "ms",
        )
        .target(Bound::Below(50.0))
        .detail(written.summary()),
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: the first fire of each second, lateness p50"),
            first.p50(),
            "ms",
        )
        .detail(first.summary()),
        Figure::info(BENCH, backend, format!("{setup}: a second's fires, last − first, p50"), spread.p50(), "ms")
            .detail(spread.summary()),
        Figure::info(BENCH, backend, format!("{setup}: fires in {} s", opts.seconds), fires.len() as f64, "fires")
            .detail(format!(
                "{expected} fire times in the window; requested {}, skipped {}, missed {}, waiting {} · \
                 {warned} failed looks, {refused} double fires refused by the index",
                count(FireOutcome::Requested),
                count(FireOutcome::Skipped),
                count(FireOutcome::Missed),
                count(FireOutcome::Waiting)
            )),
    ];
    let window = opts.seconds as f64;
    figures.push(
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: CPU busy in the window (all processes, /proc/stat)"),
            busy.0,
            "%",
        )
        .detail(format!(
            "of {} CPUs · the daemons with their supervisors and probes: {} % of one core",
            busy.1,
            number(daemons_cpu.as_secs_f64() / window * 100.0)
        )),
    );
    let firing = per_daemon.iter().filter(|(n, c)| **c > 0 && n.starts_with("daemon-")).count();
    figures.push(
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: daemons that fired (schedule_fires.fired_by)"),
            firing as f64,
            "daemons",
        )
        .detail(format!("fires each: {}", each.join(" · "))),
    );
    Ok(figures)
}

/// The machine's CPU time from the first line of `/proc/stat`, in USER_HZ ticks: (busy, all), and the CPUs.
#[derive(Debug, Clone, Copy)]
struct Ticks {
    busy: u64,
    all: u64,
    cpus: usize,
}

impl Ticks {
    /// The busy share since `before`, in % of all the CPUs, and how many CPUs.
    fn since(&self, before: &Self) -> (f64, usize) {
        let all = self.all.saturating_sub(before.all).max(1) as f64;
        (self.busy.saturating_sub(before.busy) as f64 / all * 100.0, self.cpus)
    }
}

fn cpu_busy() -> anyhow::Result<Ticks> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let first = stat.lines().next().context("an empty /proc/stat")?;
    // cpu user nice system idle iowait irq softirq steal (guest time is in user already).
    let fields: Vec<u64> = first.split_whitespace().skip(1).take(8).map(|f| f.parse().unwrap_or(0)).collect();
    ensure!(fields.len() == 8, "a short /proc/stat: {first}");
    let all: u64 = fields.iter().sum();
    let cpus = stat.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count();
    Ok(Ticks { busy: all - fields[3] - fields[4], all, cpus })
}
