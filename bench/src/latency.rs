//! Request → claimed and request → worker started against an otherwise idle daemon, one request every
//! `--spacing-ms` (20 ms), each to a worker with nothing in flight (the catalogue's 20 probes in turn, so a
//! worker's previous run ended long before).
//!
//! - PostgreSQL, ledger clock: the bench requests each run itself (`ApiStore::request_run` on a connection of
//!   its own, as the API does) and reads `requested_at → claimed_at` and `requested_at → started_at` from the
//!   ledger afterwards: the database's own timestamps, no client in the figure.
//! - PostgreSQL through the HTTP API, client clock: `POST /api/workers/{name}/runs` to the real API; the figure
//!   runs from just before the POST is sent to the moment the claim's commit is heard on `LISTEN
//!   scrinalia_events` (the runs trigger notifies every state change at commit), so it includes the HTTP hop,
//!   the API's work, and the notification's delivery to the bench.
//! - SQLite, ledger clock, as on PostgreSQL (SQLite's timestamps have millisecond resolution).
//! - The machine's floors, without the scheduler: `SELECT 1`, a one-row commit and `GET /api/me`, each 20 ms
//!   apart and back to back (what a process answering after an idle spell costs on this machine), and a
//!   breakdown of the PostgreSQL pass (the request's two round trips, the override read and the insert, as the API
//!   makes them; from its return to the claim's commit heard).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use scrinalia_shared::{ApiStore, Run, RunState, Settings, Store, config::DaemonSettings, runs::RequestError};
use scrinalia_testkit::{FreshDb, Kind, Process, free_port, process::Ready, try_eventually};
use serde::Deserialize;
use sqlx::postgres::PgListener;
use tokio::time::Instant;
use uuid::Uuid;

use crate::{
    env::{ConfigSpec, Env, NO_OP, OPERATOR, request, runs, sqlite_pool, with_db},
    report::{Bound, Figure, Samples},
};

/// Options of `scrinalia-bench latency`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Measured requests per pass.
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// Requests sent first and left out of the figures.
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Milliseconds between two requests.
    #[arg(long, default_value_t = 20)]
    pub spacing_ms: u64,
    /// Round trips timed for each machine floor, spaced and back to back.
    #[arg(long, default_value_t = 100)]
    pub floor_samples: usize,
    /// Give every probe limits (`memory_max = "1GiB"`, `cpu_max = 1`): each run gets a cgroup of its own, whose
    /// cost on request → worker started is issue 26's figure (compare against a pass without).
    #[arg(long)]
    pub limits: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self { requests: 200, warmup: 20, spacing_ms: 20, floor_samples: 100, limits: false }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        // Fewer requests than probes: no probe is asked twice in a pass, however slow its first run.
        Self { requests: 10, warmup: 2, spacing_ms: 50, floor_samples: 10, limits: false }
    }
}

const PROBES: usize = 20;
const BENCH: &str = "latency";

/// Runs the three passes.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let dir = env.folder("latency-pg")?;
    figures.extend(with_db(env, Kind::Postgres, &dir, async |db| postgres(env, db, &dir, opts).await).await?);
    let dir = env.folder("latency-sqlite")?;
    figures.extend(with_db(env, Kind::Sqlite, &dir, async |db| sqlite(env, db, &dir, opts).await).await?);
    Ok(figures)
}

pub(crate) fn config(port: Option<u16>, limits: bool) -> ConfigSpec {
    ConfigSpec {
        probes: PROBES,
        limits,
        daemon: DaemonSettings { capacity: 8, ..DaemonSettings::default() },
        api_listen: port.map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p))),
        ..ConfigSpec::default()
    }
}

pub(crate) async fn start_daemon(
    env: &Env,
    dir: &std::path::Path,
    config: &std::path::Path,
) -> anyhow::Result<Process> {
    let program = env.bin("scrinalia-daemon");
    let daemon = Process::start_ready(&program, "daemon", dir, config, &[], &[], Ready::Line("daemon started")).await?;
    // Let the start-up work pass (the first round of queue counts: one process per probe, 50 ms apart).
    tokio::time::sleep(Duration::from_millis(50 * PROBES as u64 + 1500)).await;
    Ok(daemon)
}

async fn postgres(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let port = free_port();
    let (path, settings) = config(Some(port), opts.limits).load(env, db, dir, "bench")?;
    let mut figures = machine_floors(db, opts.floor_samples).await?;
    // The pickup issue's target is relative to this machine: the spaced commit's p50 plus 0.2 ms.
    let commit = figures.iter().find(|f| f.what.starts_with(SPACED_COMMIT)).map(|f| f.value);
    let daemon = start_daemon(env, dir, &path).await?;

    eprintln!("latency: PostgreSQL, {} requests {} ms apart, inserted by the bench", opts.requests, opts.spacing_ms);
    let producer = db.db.dedicated().await?.api;
    // The ledger figures come from a pass in which the daemon is the only listener: PostgreSQL wakes every
    // listening backend of the database at each commit that notifies, so the bench's own LISTEN would put one
    // more process on the 2 CPUs at the very moment it measures.
    let inserted = direct_pass(&producer, &settings, opts).await?;
    let ids: Vec<Uuid> = inserted[opts.warmup..].iter().map(|i| i.id).collect();
    let ledger = finished(&db.db.api, &ids).await?;
    figures.extend(ledger_figures(Kind::Postgres, "", &ledger, Some(commit)));
    eprintln!("latency: PostgreSQL again, the bench listening, for the breakdown");
    let heard = Heard::listen(&db.url).await?;
    let inserted = direct_pass(&producer, &settings, opts).await?;
    producer.close().await;
    let measured = &inserted[opts.warmup..];
    let ids: Vec<Uuid> = measured.iter().map(|i| i.id).collect();
    let listened = finished(&db.db.api, &ids).await?;
    figures.extend(ledger_figures(Kind::Postgres, " (the bench listening too)", &listened, None));
    // Where the time goes: the producer's request (as the API makes it: the worker's override read, then the insert
    // and its commit), then everything after the commit (the notification to the daemon, its claim and the
    // claim's commit, and the claim's notification to the bench).
    let inserts = Samples::from_durations(measured.iter().map(|i| i.returned - i.before));
    let after_commit = Samples::from_durations(heard.claims_after(measured.iter().map(|i| (i.id, i.returned))).await?);
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            "breakdown: the request (override read, insert and commit), p50 (bench clock)",
            inserts.p50(),
            "ms",
        )
        .detail(inserts.summary()),
    );
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            "breakdown: insert committed → claim committed, heard by LISTEN, p50 (bench clock)",
            after_commit.p50(),
            "ms",
        )
        .detail(after_commit.summary()),
    );

    eprintln!("latency: PostgreSQL through the HTTP API, {} requests {} ms apart", opts.requests, opts.spacing_ms);
    let base = format!("http://127.0.0.1:{port}");
    let readyz = format!("{base}/readyz");
    let api =
        Process::start_ready(&env.bin("scrinalia-api"), "api", dir, &path, &[], &[], Ready::Http(&readyz)).await?;
    let client = reqwest::Client::builder().build()?;
    figures.extend(api_floors(&client, &base, opts.floor_samples).await?);
    let sent = http_pass(&client, &base, opts).await?;
    let measured = &sent[opts.warmup..];
    let ids: Vec<Uuid> = measured.iter().map(|s| s.id).collect();
    let ledger = finished(&db.db.api, &ids).await?;
    let client_claimed = Samples::from_durations(heard.claims_after(measured.iter().map(|s| (s.id, s.before))).await?);
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            "HTTP request → claim committed p50 (client clock: before the POST → claim heard by LISTEN)",
            client_claimed.p50(),
            "ms",
        )
        .target(Bound::Below(1.5))
        .detail(client_claimed.summary()),
    );
    let responses = Samples::from_durations(measured.iter().map(|s| s.answered - s.before));
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            "POST /api/workers/{name}/runs answered p50 (client clock)",
            responses.p50(),
            "ms",
        )
        .detail(responses.summary()),
    );
    let wall = Samples::from_ms(
        measured.iter().zip(&ledger).filter_map(|(s, run)| run.claimed_at.map(|c| ms(c - s.before_wall))),
    );
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            "HTTP request → claimed p50 (before the POST, wall clock → ledger claimed_at)",
            wall.p50(),
            "ms",
        )
        .detail(wall.summary()),
    );
    figures.extend(ledger_figures(Kind::Postgres, " (requests through the API)", &ledger, None));
    heard.stop();
    api.stop(Duration::from_secs(5)).await;
    daemon.stop(Duration::from_secs(10)).await;
    Ok(figures)
}

async fn sqlite(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let (path, settings) = config(None, opts.limits).load(env, db, dir, "bench")?;
    let floors = machine_floors(db, opts.floor_samples).await?;
    let daemon = start_daemon(env, dir, &path).await?;
    eprintln!("latency: SQLite, {} requests {} ms apart, inserted by the bench", opts.requests, opts.spacing_ms);
    let producer = db.another_pool(2).await?.api;
    let inserted = direct_pass(&producer, &settings, opts).await?;
    producer.close().await;
    let ids: Vec<Uuid> = inserted[opts.warmup..].iter().map(|i| i.id).collect();
    let ledger = finished(&db.db.api, &ids).await?;
    let mut figures = floors;
    figures.extend(ledger_figures(Kind::Sqlite, "", &ledger, Some(None)));
    daemon.stop(Duration::from_secs(10)).await;
    Ok(figures)
}

/// What this machine charges any process that answers after an idle spell, measured without the scheduler: the
/// same round trip 20 ms apart (each process on the path has gone idle) and back to back. The gap is the
/// wake-up cost every step of request → claimed pays (the producer's backend, the listening backend, the
/// daemon, the claiming backend).
async fn machine_floors(db: &FreshDb, samples: usize) -> anyhow::Result<Vec<Figure>> {
    let name = db.kind.name();
    let mut figures = Vec::new();
    match db.kind {
        Kind::Postgres => {
            use sqlx::Connection as _;
            let mut conn = sqlx::PgConnection::connect(&db.url).await?;
            sqlx::query("create table bench_commit (id bigserial primary key, at timestamptz not null default now())")
                .execute(&mut conn)
                .await?;
            for (what, sql) in
                [("SELECT 1", "select 1"), ("one-row insert and commit", "insert into bench_commit default values")]
            {
                let once = async || -> anyhow::Result<()> {
                    sqlx::query(sql).execute(&mut conn).await?;
                    Ok(())
                };
                figures.extend(floors_of(name, what, samples, once).await?);
            }
            sqlx::query("drop table bench_commit").execute(&mut conn).await?;
            let _ = conn.close().await;
        }
        Kind::Sqlite => {
            let pool = &sqlite_pool(db).await?;
            sqlx::query("create table bench_commit (id integer primary key, at text)").execute(pool).await?;
            let insert = "insert into bench_commit (at) values (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))";
            let once = async || -> anyhow::Result<()> {
                sqlx::query(insert).execute(pool).await?;
                Ok(())
            };
            figures.extend(floors_of(name, "one-row insert and commit", samples, once).await?);
            sqlx::query("drop table bench_commit").execute(pool).await?;
            pool.close().await;
        }
    }
    Ok(figures)
}

/// `GET /api/me` (no database: the token and the answer) 20 ms apart and back to back.
async fn api_floors(client: &reqwest::Client, base: &str, samples: usize) -> anyhow::Result<Vec<Figure>> {
    let once = async || -> anyhow::Result<()> {
        let answer = client.get(format!("{base}/api/me")).bearer_auth(OPERATOR).send().await?;
        answer.error_for_status()?.bytes().await?;
        Ok(())
    };
    floors_of("PostgreSQL", "GET /api/me (no database)", samples, once).await
}

/// Times `once` `samples` times 20 ms apart, then `samples` times back to back: the two floor figures of `what`.
async fn floors_of(
    backend: &'static str,
    what: &str,
    samples: usize,
    mut once: impl AsyncFnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for spaced in [true, false] {
        let mut took = Vec::new();
        for _ in 0..samples {
            if spaced {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let start = Instant::now();
            once().await?;
            took.push(start.elapsed());
        }
        figures.push(floor(backend, what, spaced, &Samples::from_durations(took)));
    }
    Ok(figures)
}

fn floor(backend: &'static str, what: &str, spaced: bool, samples: &Samples) -> Figure {
    let how = if spaced { "20 ms apart" } else { "back to back" };
    eprintln!("latency: machine: {what} ({backend}), {how}: {}", samples.summary());
    Figure::info(BENCH, backend, format!("machine: {what}, round trip p50, {how} (bench clock)"), samples.p50(), "ms")
        .detail(samples.summary())
}

/// A request inserted by the bench.
pub(crate) struct Inserted {
    pub(crate) id: Uuid,
    before: Instant,
    returned: Instant,
}

/// Inserts `warmup + requests` requests `spacing` apart on a fixed schedule; returns them in order.
pub(crate) async fn direct_pass(
    producer: &ApiStore,
    settings: &Settings,
    opts: &Opts,
) -> anyhow::Result<Vec<Inserted>> {
    let spacing = Duration::from_millis(opts.spacing_ms);
    let start = Instant::now();
    let mut ids = Vec::new();
    for i in 0..opts.warmup + opts.requests {
        tokio::time::sleep_until(start + spacing * u32::try_from(i)?).await;
        let request = request(&format!("probe-{}", i % PROBES + 1), serde_json::json!({}));
        let before = Instant::now();
        let inserted = producer.request_run(&settings.catalogue, request).await;
        let returned = Instant::now();
        match inserted {
            Ok(run) => ids.push(Inserted { id: run.id, before, returned }),
            Err(RequestError::InFlight { worker, .. }) => {
                bail!("{worker} still had a run in flight {} ms later", PROBES as u64 * opts.spacing_ms)
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(ids)
}

/// One request sent through the API.
struct Sent {
    id: Uuid,
    before: Instant,
    before_wall: DateTime<Utc>,
    answered: Instant,
}

#[derive(Deserialize)]
struct Created {
    id: Uuid,
}

async fn http_pass(client: &reqwest::Client, base: &str, opts: &Opts) -> anyhow::Result<Vec<Sent>> {
    let spacing = Duration::from_millis(opts.spacing_ms);
    let start = Instant::now();
    let mut sent = Vec::new();
    for i in 0..opts.warmup + opts.requests {
        tokio::time::sleep_until(start + spacing * u32::try_from(i)?).await;
        let url = format!("{base}/api/workers/probe-{}/runs", i % PROBES + 1);
        let request = client.post(url).bearer_auth(OPERATOR).header("content-type", "application/json").body(NO_OP);
        let (before, before_wall) = (Instant::now(), Utc::now());
        let response = request.send().await?;
        let answered = Instant::now();
        let status = response.status();
        if status != reqwest::StatusCode::CREATED {
            bail!("POST answered {status}: {}", response.text().await.unwrap_or_default());
        }
        let created: Created = response.json().await?;
        sent.push(Sent { id: created.id, before, before_wall, answered });
    }
    Ok(sent)
}

/// When the claim of each run was heard on `scrinalia_events`.
struct Heard {
    claimed: Arc<Mutex<HashMap<Uuid, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Deserialize)]
struct Event {
    kind: String,
    run: Option<Uuid>,
    state: Option<String>,
}

impl Heard {
    async fn listen(url: &str) -> anyhow::Result<Self> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen("scrinalia_events").await?;
        let claimed = Arc::new(Mutex::new(HashMap::new()));
        let map = claimed.clone();
        let task = tokio::spawn(async move {
            while let Ok(n) = listener.recv().await {
                let at = Instant::now();
                if let Ok(Event { kind, run: Some(run), state: Some(state) }) = serde_json::from_str(n.payload())
                    && kind == "run"
                    && state == "running"
                    && let Ok(mut map) = map.lock()
                {
                    map.entry(run).or_insert(at);
                }
            }
        });
        Ok(Self { claimed, task })
    }

    /// For each `(run, since)`: how long after `since` its claim was heard (waiting for the last ones).
    async fn claims_after(&self, runs: impl Iterator<Item = (Uuid, Instant)>) -> anyhow::Result<Vec<Duration>> {
        let runs: Vec<(Uuid, Instant)> = runs.collect();
        try_eventually(Duration::from_secs(10), "the claims' notifications", || async {
            let heard = self.claimed.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            Ok(runs
                .iter()
                .map(|(id, since)| heard.get(id).map(|at| at.saturating_duration_since(*since)))
                .collect::<Option<Vec<_>>>())
        })
        .await
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// Waits for every run to end; returns them in order.
pub(crate) async fn finished(db: &Store, ids: &[Uuid]) -> anyhow::Result<Vec<Run>> {
    try_eventually(Duration::from_secs(60), "every run to end", || async {
        let all = runs(db, ids).await?;
        Ok(all.iter().all(|r| r.state.is_terminal()).then_some(all))
    })
    .await
    .and_then(|all| {
        let failed: Vec<&Run> = all.iter().filter(|r| r.state != RunState::Succeeded).collect();
        match failed.first() {
            Some(r) => {
                Err(anyhow::anyhow!("{} runs did not succeed, e.g. {} {}: {:?}", failed.len(), r.id, r.state, r.error))
            }
            None => Ok(all),
        }
    })
    .context("the latency runs")
}

pub(crate) fn ms(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

/// The leading words of the machine's spaced one-row commit figure (see `floors_of`).
const SPACED_COMMIT: &str = "machine: one-row insert and commit, round trip p50, 20 ms apart";

/// The ledger's figures of one pass. `targets`: `None` for a pass without targets, else the machine's spaced
/// commit p50 if it was measured (PostgreSQL's request → claimed p50 target is that commit + 0.2 ms; 0.8 ms
/// without it).
fn ledger_figures(backend: Kind, suffix: &str, ledger: &[Run], targets: Option<Option<f64>>) -> Vec<Figure> {
    let claimed = Samples::from_ms(ledger.iter().filter_map(|r| r.claimed_at.map(|c| ms(c - r.requested_at))));
    let started = Samples::from_ms(ledger.iter().filter_map(|r| r.started_at.map(|s| ms(s - r.requested_at))));
    let name = backend.name();
    let mut figures = Vec::new();
    let mut p50 = Figure::info(
        BENCH,
        name,
        format!("request → claimed p50 (ledger requested_at → claimed_at){suffix}"),
        claimed.p50(),
        "ms",
    )
    .detail(claimed.summary());
    let mut p99 = Figure::info(BENCH, name, format!("request → claimed p99 (ledger){suffix}"), claimed.p99(), "ms");
    let mut started_p50 = Figure::info(
        BENCH,
        name,
        format!("request → worker started p50 (ledger requested_at → started_at){suffix}"),
        started.p50(),
        "ms",
    )
    .detail(started.summary());
    match (backend, targets) {
        (_, None) => {}
        (Kind::Postgres, Some(commit)) => {
            p50 = p50.target(Bound::Below(commit.map_or(0.8, |c| c + 0.2)));
            p99 = p99.target(Bound::Below(2.0));
            started_p50 = started_p50.target(Bound::Below(4.0));
        }
        (Kind::Sqlite, Some(_)) => p50 = p50.target(Bound::Below(5.0)),
    }
    figures.push(p50);
    figures.push(p99);
    figures.push(started_p50);
    figures.push(Figure::info(
        BENCH,
        name,
        format!("request → worker started p99 (ledger){suffix}"),
        started.p99(),
        "ms",
    ));
    figures
}
