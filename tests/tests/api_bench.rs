//! A load measurement of the real API binary on PostgreSQL, ignored by default (it takes a while and its figures
//! depend on the machine). It seeds the ledger, then sends `GET /api/workers` and `POST /api/workers/{name}/runs`
//! open-loop at a fixed rate and prints p50/p90/p99/max latencies:
//!
//! ```text
//! cargo build --release -p scrinalia-api
//! SCRINALIA_BENCH_API_BIN=$PWD/target/release/scrinalia-api \
//!   cargo test -p scrinalia-tests --test api_bench -- --ignored --nocapture
//! ```
//!
//! `SCRINALIA_BENCH_ROWS` (default 100000), `SCRINALIA_BENCH_RATE` (requests per second, default 500) and
//! `SCRINALIA_BENCH_SECONDS` (per endpoint, default 10) change the load.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use scrinalia_tests::{
    TestDb,
    api_harness::{ApiConfig, OPERATOR, VIEWER, config_toml, free_port},
    bin_path, eventually,
    fixtures::plain_config,
};
use tokio::sync::Mutex;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Inserts `rows` finished runs spread over the catalogue's workers and a year of request times.
async fn seed(t: &TestDb, rows: u64) {
    let scrinalia_shared::Database::Postgres(pool) = &t.db else { panic!("the bench runs on PostgreSQL") };
    let config = serde_json::to_value(plain_config()).expect("a config");
    sqlx::query(
        "insert into worker_runs (id, worker, state, requested_by, requested_at, arguments, config, claimed_by, \
             claimed_at, started_at, finished_at, duration_ms, exit_code, result) \
         select gen_random_uuid(), (array['tagger', 'judge', 'transfer'])[1 + i % 3], \
             (array['succeeded', 'failed', 'cancelled', 'interrupted'])[1 + i % 4], 'bench', \
             now() - make_interval(secs => i * 300), '{}'::jsonb, $2, gen_random_uuid(), \
             now() - make_interval(secs => i * 300), now() - make_interval(secs => i * 300), \
             now() - make_interval(secs => i * 300 - 60), 60000, 0, '{\"processed\": 10}'::jsonb \
         from generate_series(1, $1) as i",
    )
    .bind(i64::try_from(rows).expect("rows fit"))
    .bind(config)
    .execute(pool)
    .await
    .expect("seed the ledger");
    sqlx::query("analyze worker_runs").execute(pool).await.expect("analyze");
}

struct Figures {
    latencies: Vec<Duration>,
    statuses: std::collections::BTreeMap<u16, usize>,
}

/// Sends `make()` at `rate` per second for `seconds`, open-loop (a slow answer does not delay the next send).
async fn load<F, Fut>(rate: u64, seconds: u64, make: F) -> Figures
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = reqwest::Result<reqwest::StatusCode>> + Send + 'static,
{
    let figures = Arc::new(Mutex::new(Figures { latencies: Vec::new(), statuses: Default::default() }));
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut tasks = Vec::new();
    for i in 0..rate * seconds {
        ticker.tick().await;
        let request = make(i);
        let figures = figures.clone();
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let status = request.await.map(|s| s.as_u16()).unwrap_or(0);
            let took = start.elapsed();
            let mut figures = figures.lock().await;
            figures.latencies.push(took);
            *figures.statuses.entry(status).or_default() += 1;
        }));
    }
    for task in tasks {
        task.await.expect("a request task");
    }
    let mut figures = Arc::try_unwrap(figures).ok().expect("all tasks ended").into_inner();
    figures.latencies.sort();
    figures
}

fn report(name: &str, rate: u64, figures: &Figures) {
    let at = |q: f64| {
        let index = ((figures.latencies.len() as f64 * q).ceil() as usize).clamp(1, figures.latencies.len()) - 1;
        figures.latencies[index].as_secs_f64() * 1000.0
    };
    eprintln!(
        "{name}: {} requests at {rate}/s, statuses {:?}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        figures.latencies.len(),
        figures.statuses,
        at(0.50),
        at(0.90),
        at(0.99),
        at(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a load measurement; run by hand (see the module documentation)"]
async fn latency_of_the_worker_view_and_of_triggers_under_load() {
    let rows = env_number("SCRINALIA_BENCH_ROWS", 100_000);
    let rate = env_number("SCRINALIA_BENCH_RATE", 500);
    let seconds = env_number("SCRINALIA_BENCH_SECONDS", 10);
    let t = TestDb::postgres().await;
    let started = Instant::now();
    seed(&t, rows).await;
    eprintln!("seeded {rows} finished runs in {:?}", started.elapsed());

    let port = free_port();
    let config = ApiConfig { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..ApiConfig::default() };
    let path = t.dir.path().join("bench.toml");
    std::fs::write(&path, config_toml(&t.url, t.dir.path(), &config)).expect("write the configuration");
    let bin =
        std::env::var_os("SCRINALIA_BENCH_API_BIN").map(PathBuf::from).unwrap_or_else(|| bin_path("scrinalia-api"));
    eprintln!("API binary: {}", bin.display());
    let mut api = tokio::process::Command::new(bin)
        .args(["--config", &path.display().to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the API");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build().expect("a client");
    eventually(Duration::from_secs(30), "the API to be ready", || {
        let request = client.get(format!("{base}/readyz")).send();
        async move { request.await.ok().filter(|r| r.status().is_success()) }
    })
    .await;
    // Warm the connections and the server's statement caches.
    for _ in 0..200 {
        client.get(format!("{base}/api/workers")).bearer_auth(VIEWER).send().await.expect("warm-up");
    }

    let view = load(rate, seconds, |_| {
        let request = client.get(format!("{base}/api/workers")).bearer_auth(VIEWER).send();
        async move { request.await.map(|r| r.status()) }
    })
    .await;
    report("GET /api/workers", rate, &view);

    // Triggers: mostly 409 (one run in flight per worker); a canceller frees the workers every 20 ms so that
    // the 201 path is measured too.
    let scrinalia_shared::Database::Postgres(pool) = t.db.clone() else { unreachable!() };
    let canceller = tokio::spawn(async move {
        loop {
            let _ =
                sqlx::query("update worker_runs set state = 'cancelled', finished_at = now() where state = 'queued'")
                    .execute(&pool)
                    .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let workers = ["tagger", "judge", "transfer"];
    let trigger = load(rate, seconds, |i| {
        let worker = workers[(i % 3) as usize];
        let request = client.post(format!("{base}/api/workers/{worker}/runs")).bearer_auth(OPERATOR).send();
        async move { request.await.map(|r| r.status()) }
    })
    .await;
    canceller.abort();
    report("POST /api/workers/{name}/runs", rate, &trigger);

    api.start_kill().expect("stop the API");
    let _ = api.wait().await;
    assert!(!view.statuses.keys().any(|s| *s >= 500 || *s == 0), "no failures: {:?}", view.statuses);
    assert!(!trigger.statuses.keys().any(|s| *s >= 500 || *s == 0), "no failures: {:?}", trigger.statuses);
    t.cleanup().await;
}
