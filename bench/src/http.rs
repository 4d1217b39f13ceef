//! `GET /api/workers` and `GET /api/runs` of the real API binary on PostgreSQL, over a ledger of `--rows`
//! (100,000) finished runs spread over a catalogue of `--workers` (12, the demo catalogue's size) probes and a
//! year of request times.
//!
//! - Open loop at `--rate` (500) requests a second for `--seconds` (10): request `i` is due at `start + i/rate`
//!   and its latency runs from that due time, not from when it was actually sent, so a stalled server (or
//!   client) cannot hide its queueing delay (no coordinated omission).
//! - Closed loop: `--connections` (32) clients each sending the next request as soon as the previous answer is
//!   read, for `--seconds`; requests per second is the most the API answers on this machine (the bench's client
//!   shares the CPUs with the API and PostgreSQL).
//! - Triggers: `POST /api/workers/{name}/runs` open loop at `--rate`, each answered 201 or 409 (one run in flight
//!   per worker; the bench cancels the queued ones every 20 ms, as no daemon runs them).

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use scrinalia_testkit::{FreshDb, Kind, Process, free_port, process::Ready};
use sqlx::PgPool;
use tokio::{task::JoinSet, time::Instant};

use crate::{
    env::{ConfigSpec, Env, OPERATOR, VIEWER, resolved, with_db},
    report::{Bound, Figure, Samples, number},
};

/// Options of `scrinalia-bench http`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Finished runs in the ledger.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Workers in the catalogue.
    #[arg(long, default_value_t = 12)]
    pub workers: usize,
    /// Requests per second of the open loop.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// Seconds of each load.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Concurrent clients of the closed loop.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self { rows: 100_000, workers: 12, rate: 500, seconds: 10, connections: 32 }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { rows: 1_000, workers: 12, rate: 50, seconds: 1, connections: 4 }
    }
}

const BENCH: &str = "http";

/// Seeds the ledger, starts the API, and loads both endpoints.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let dir = env.folder("http")?;
    with_db(env, Kind::Postgres, &dir, async |db| measure(env, db, &dir, opts).await).await
}

/// Writes `rows` finished runs, each with an end reason, which the schema requires of an ended run
/// (`worker_runs_end_reason_when_ended`): the one its state implies, and for the failed ones `exit_status`, the
/// reason the end-reason migration gives a failure whose sentence says nothing more.
async fn seed(pool: &PgPool, config: serde_json::Value, rows: u64, workers: usize) -> anyhow::Result<()> {
    sqlx::query(
        "insert into worker_runs (id, worker, state, end_reason, requested_by, requested_at, arguments, config, \
             claimed_by, claimed_at, started_at, finished_at, duration_ms, exit_code, result, log_key) \
         select gen_random_uuid(), 'probe-' || (1 + i % $3), \
             (array['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled', 'interrupted'])[1 + i % 6], \
             (array['exit_status', 'exit_status', 'exit_status', 'exit_status', 'cancelled', \
                 'owner_lost'])[1 + i % 6], \
             'bench', \
             now() - make_interval(secs => i * 315), '{}'::jsonb, $2, gen_random_uuid(), \
             now() - make_interval(secs => i * 315 - 1), now() - make_interval(secs => i * 315 - 1), \
             now() - make_interval(secs => i * 315 - 61), 60000, 0, '{\"processed\": 10, \"failed\": 0}'::jsonb, \
             'runs/probe/' || i \
         from generate_series(1, $1) as i",
    )
    .bind(i64::try_from(rows)?)
    .bind(config)
    .bind(i32::try_from(workers)?)
    .execute(pool)
    .await?;
    sqlx::query("vacuum analyze worker_runs").execute(pool).await?;
    Ok(())
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
    // The bench's own pool on the database, for its seeding and its canceller.
    let pool = PgPool::connect(&db.url).await?;
    let started = std::time::Instant::now();
    seed(&pool, serde_json::to_value(resolved(&settings, "probe-1")?)?, opts.rows, opts.workers).await?;
    eprintln!("http: seeded {} finished runs in {:.1} s", opts.rows, started.elapsed().as_secs_f64());
    let base = format!("http://127.0.0.1:{port}");
    let readyz = format!("{base}/readyz");
    let api =
        Process::start_ready(&env.bin("scrinalia-api"), "api", dir, &path, &[], &[], Ready::Http(&readyz)).await?;
    let client = reqwest::Client::builder().build()?;
    let mut figures = Vec::new();
    for (endpoint, target) in [("/api/workers", Some(10.0)), ("/api/runs", None)] {
        let url = format!("{base}{endpoint}");
        // Warm the connections and the API's prepared statements.
        for _ in 0..200 {
            client.get(&url).bearer_auth(VIEWER).send().await?.bytes().await?;
        }
        let open = open_loop(&client, &url, opts.rate, opts.seconds).await;
        open.check(endpoint)?;
        eprintln!("http: GET {endpoint} at {}/s: {}", opts.rate, open.latencies.summary());
        let mut figure = Figure::info(
            BENCH,
            "PostgreSQL",
            format!("GET {endpoint} p99 at {} requests/s (open loop)", opts.rate),
            open.latencies.p99(),
            "ms",
        )
        .detail(format!("{} · {} bytes a response", open.latencies.summary(), open.bytes));
        if let Some(limit) = target {
            figure = figure.target(Bound::Below(limit));
        }
        figures.push(figure);
        let closed = closed_loop(&client, &url, opts.connections, opts.seconds).await;
        closed.check(endpoint)?;
        let rate = closed.latencies.len() as f64 / opts.seconds as f64;
        eprintln!(
            "http: GET {endpoint} with {} clients: {} requests/s, {}",
            opts.connections,
            number(rate),
            closed.latencies.summary()
        );
        figures.push(
            Figure::info(
                BENCH,
                "PostgreSQL",
                format!("GET {endpoint} requests/s, {} clients back to back (closed loop)", opts.connections),
                rate,
                "requests/s",
            )
            .detail(closed.latencies.summary()),
        );
    }
    // Triggers under the same load: mostly 409 (one run in flight per worker, and no daemon runs them), so the
    // bench cancels the queued requests every 20 ms and the 201 path is measured too. A cancelled run carries its
    // end reason (the schema refuses an ended run without one), as the API's own cancellation writes it.
    let canceller = tokio::spawn({
        let pool = pool.clone();
        async move {
            loop {
                let _ = sqlx::query(
                    "update worker_runs set state = 'cancelled', end_reason = 'cancelled', finished_at = now() \
                     where state = 'queued'",
                )
                .execute(&pool)
                .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let workers = opts.workers as u64;
    let triggers = open_loop_with(opts.rate, opts.seconds, |i| {
        client
            .post(format!("{base}/api/workers/probe-{}/runs", i % workers + 1))
            .bearer_auth(OPERATOR)
            .header("content-type", "application/json")
            .body("{}")
    })
    .await;
    canceller.abort();
    triggers.check("/api/workers/{name}/runs")?;
    eprintln!("http: POST /api/workers/{{name}}/runs at {}/s: {}", opts.rate, triggers.latencies.summary());
    figures.push(
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("POST /api/workers/{{name}}/runs p99 at {} requests/s (open loop, 201 or 409)", opts.rate),
            triggers.latencies.p99(),
            "ms",
        )
        .detail(triggers.latencies.summary()),
    );
    api.stop(Duration::from_secs(5)).await;
    pool.close().await;
    Ok(figures)
}

/// What a load got back.
pub(crate) struct Outcome {
    pub(crate) latencies: Samples,
    pub(crate) failures: Vec<String>,
    pub(crate) bytes: usize,
}

impl Outcome {
    pub(crate) fn check(&self, endpoint: &str) -> anyhow::Result<()> {
        match self.failures.first() {
            Some(first) => bail!("{} of the requests to {endpoint} failed, e.g. {first}", self.failures.len()),
            None => Ok(()),
        }
    }
}

/// One GET, its body read to the end; the size of a successful answer, or why it failed.
async fn get(client: &reqwest::Client, url: &str) -> Result<usize, String> {
    call(client.get(url).bearer_auth(VIEWER)).await
}

/// One request, its body read to the end; the size of the answer, or why it failed (a 409 is an answer: the
/// worker has a run in flight).
async fn call(request: reqwest::RequestBuilder) -> Result<usize, String> {
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    if status.is_success() || status == reqwest::StatusCode::CONFLICT {
        Ok(body.len())
    } else {
        Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
    }
}

/// Sends `request(i)` at `rate` a second for `seconds`; each latency runs from the request's due time.
async fn open_loop_with(rate: u64, seconds: u64, request: impl Fn(u64) -> reqwest::RequestBuilder) -> Outcome {
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now() + Duration::from_millis(5);
    let mut tasks = JoinSet::new();
    for i in 0..rate * seconds {
        let due = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        let request = request(i);
        tasks.spawn(async move {
            let answer = call(request).await;
            (due.elapsed(), answer)
        });
    }
    collect(tasks).await
}

pub(crate) async fn open_loop(client: &reqwest::Client, url: &str, rate: u64, seconds: u64) -> Outcome {
    open_loop_with(rate, seconds, |_| client.get(url).bearer_auth(VIEWER)).await
}

async fn closed_loop(client: &reqwest::Client, url: &str, connections: usize, seconds: u64) -> Outcome {
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = JoinSet::new();
    for _ in 0..connections {
        let (client, url) = (client.clone(), url.to_owned());
        tasks.spawn(async move {
            let mut out = Vec::new();
            while Instant::now() < end {
                let sent = Instant::now();
                let answer = get(&client, &url).await;
                out.push((sent.elapsed(), answer));
            }
            out
        });
    }
    let mut all = Vec::new();
    while let Some(Ok(out)) = tasks.join_next().await {
        all.extend(out);
    }
    summarise(all)
}

async fn collect(mut tasks: JoinSet<(Duration, Result<usize, String>)>) -> Outcome {
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(one) => all.push(one),
            Err(e) => all.push((Duration::ZERO, Err(e.to_string()))),
        }
    }
    summarise(all)
}

fn summarise(all: Vec<(Duration, Result<usize, String>)>) -> Outcome {
    let bytes = all.iter().find_map(|(_, a)| a.as_ref().ok().copied()).unwrap_or(0);
    let failures = all.iter().filter_map(|(_, a)| a.as_ref().err().cloned()).collect();
    Outcome { latencies: Samples::from_durations(all.into_iter().map(|(d, _)| d)), failures, bytes }
}
