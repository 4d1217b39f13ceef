//! Many panels on one API process: `--count` (1,000) live-event streams (`GET /api/events`, each on a raw
//! connection of its own, read as fast as it comes) on the real API binary over PostgreSQL. Figures: the API's
//! resident memory idle, with the streams open and after the events; and the delivery of an event to all of
//! them: `--events` (100) runs written to the ledger `--spacing-ms` (100) apart, each timed from its commit to
//! the moment the last stream has read it (bench clock).

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::Args;
use scrinalia_testkit::{FreshDb, Kind, Process, free_port, process::Ready, try_eventually};
use sqlx::PgPool;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    time::Instant,
};
use uuid::Uuid;

use crate::{
    env::{ConfigSpec, Env, VIEWER, status_mib, with_db},
    report::{Figure, Samples},
};

/// Options of `scrinalia-bench streams`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Open streams.
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    /// Events timed.
    #[arg(long, default_value_t = 100)]
    pub events: usize,
    /// Milliseconds between two events.
    #[arg(long, default_value_t = 100)]
    pub spacing_ms: u64,
}

impl Default for Opts {
    fn default() -> Self {
        Self { count: 1000, events: 100, spacing_ms: 100 }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self { count: 10, events: 5, spacing_ms: 50 }
    }
}

const BENCH: &str = "streams";

/// Opens the streams, writes the events, reads the figures.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let dir = env.folder("streams")?;
    with_db(env, Kind::Postgres, &dir, async |db| measure(env, db, &dir, opts).await).await
}

/// When each run id first arrived on one stream, and whether `ready` did.
#[derive(Default)]
struct Heard {
    ready: bool,
    runs: HashMap<Uuid, Instant>,
}

/// Reads one stream until it ends, noting each `"run":"<id>"` as it arrives.
async fn read(mut stream: TcpStream, heard: Arc<Mutex<Heard>>) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut tail = String::new();
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let at = Instant::now();
        tail.push_str(&String::from_utf8_lossy(&buf[..n]));
        let Ok(mut heard) = heard.lock() else { return };
        heard.ready |= tail.contains("event: ready");
        let mut rest = tail.as_str();
        while let Some(start) = rest.find("\"run\":\"") {
            let id = rest.get(start + 7..start + 43);
            match id.and_then(|id| Uuid::parse_str(id).ok()) {
                Some(id) => {
                    heard.runs.entry(id).or_insert(at);
                    rest = &rest[start + 43..];
                }
                None => break,
            }
        }
        // Keep only what may be the start of an id cut by this read.
        let keep = tail.len().saturating_sub(64);
        tail = tail[tail.floor_char_boundary(keep)..].to_owned();
    }
}

async fn subscribe(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.context("connect to the API (is `ulimit -n` high enough?)")?;
    let request = format!(
        "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {VIEWER}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    Ok(stream)
}

async fn measure(env: &Env, db: &FreshDb, dir: &std::path::Path, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let spec = ConfigSpec { probes: 3, api_listen: Some(addr), log_filter: "warn", ..ConfigSpec::default() };
    let (path, _) = spec.load(env, db, dir, "bench")?;
    let readyz = format!("http://{addr}/readyz");
    let api =
        Process::start_ready(&env.bin("scrinalia-api"), "api", dir, &path, &[], &[], Ready::Http(&readyz)).await?;
    let pid = api.pid().as_raw();
    let idle = status_mib(pid, "VmRSS")?;
    let mut streams = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..opts.count {
        let heard = Arc::new(Mutex::new(Heard::default()));
        tasks.push(tokio::spawn(read(subscribe(addr).await?, heard.clone())));
        streams.push(heard);
    }
    let all = |f: &dyn Fn(&Heard) -> bool| streams.iter().all(|h| h.lock().is_ok_and(|h| f(&h)));
    try_eventually(Duration::from_secs(60), "every stream's ready", || async { Ok(all(&|h| h.ready).then_some(())) })
        .await?;
    let open = status_mib(pid, "VmRSS")?;
    eprintln!("streams: {} open; API RSS {idle:.1} MiB idle, {open:.1} MiB with them", opts.count);

    let pool = PgPool::connect(&db.url).await?;
    let mut written = Vec::new();
    let start = Instant::now();
    for i in 0..opts.events {
        tokio::time::sleep_until(start + Duration::from_millis(opts.spacing_ms) * u32::try_from(i)?).await;
        let id = Uuid::now_v7();
        sqlx::query(
            "insert into worker_runs (id, worker, state, end_reason, requested_by, config, finished_at) \
             values ($1, 'probe-1', 'succeeded', 'exit_status', 'bench', '{}', now())",
        )
        .bind(id)
        .execute(&pool)
        .await?;
        written.push((id, Instant::now()));
    }
    try_eventually(Duration::from_secs(60), "every event on every stream", || async {
        Ok(all(&|h| written.iter().all(|(id, _)| h.runs.contains_key(id))).then_some(()))
    })
    .await?;
    let loaded = status_mib(pid, "VmRSS")?;
    let peak = status_mib(pid, "VmHWM")?;
    let mut delivery = Vec::new();
    for (id, committed) in &written {
        let mut last = *committed;
        for heard in &streams {
            let Ok(heard) = heard.lock() else { bail!("a stream's record is poisoned") };
            last = last.max(heard.runs[id]);
        }
        delivery.push(last.duration_since(*committed));
    }
    for task in tasks {
        task.abort();
    }
    pool.close().await;
    api.stop(Duration::from_secs(5)).await;
    let delivery = Samples::from_durations(delivery);
    eprintln!(
        "streams: {} events to {} streams: {}; RSS {loaded:.1} MiB after, peak {peak:.1} MiB",
        opts.events,
        opts.count,
        delivery.summary()
    );
    let n = opts.count;
    Ok(vec![
        Figure::info(BENCH, "PostgreSQL", "API resident memory, idle", idle, "MiB"),
        Figure::info(BENCH, "PostgreSQL", format!("API resident memory, {n} streams open"), open, "MiB"),
        Figure::info(BENCH, "PostgreSQL", format!("API resident memory, {n} streams after the events"), loaded, "MiB")
            .detail(format!("peak (VmHWM) {peak:.1} MiB")),
        Figure::info(
            BENCH,
            "PostgreSQL",
            format!("an event's delivery to all {n} streams (commit → the last stream read it): p99"),
            delivery.p99(),
            "ms",
        )
        .detail(delivery.summary()),
        Figure::info(BENCH, "PostgreSQL", format!("an event's delivery to all {n} streams: p50"), delivery.p50(), "ms"),
    ])
}
