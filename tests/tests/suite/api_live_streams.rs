//! Many panels on one API process, the real `scrinalia-api` binary over plain TCP, on PostgreSQL and SQLite:
//! - 1,000 open live-event streams each hear every run event (triggered and cancelled through the API), with
//!   the process's resident memory under a bound; the figures (memory, and the p99 of an event's delivery to all
//!   of them) are printed.
//! - A client that sends its request and then stops reading (a small receive buffer, nothing read) while
//!   40,000 events fly does not hold up the others: they hear every event, none is told to resync, the
//!   memory stays bounded; and when the slow client reads at last, its stream says `resync` (it fell behind: the
//!   panel reads everything again) and goes on with the next events.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use scrinalia_tests::{
    Kind, Process, TestDb,
    api_harness::{ApiConfig, OPERATOR, VIEWER, config_file},
    backend_tests, eventually, free_port,
    sse::{Decoder, Event, EventStream, http1_body},
    start_api,
};
use serde_json::Value;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpSocket, TcpStream},
    task::JoinHandle,
};

backend_tests!(
    a_thousand_live_streams_each_hear_every_event_with_bounded_memory,
    a_client_that_stops_reading_holds_up_no_other_and_is_told_to_resync
);

/// The resident memory the API may reach with 1,000 streams open (a generous bound: it is tens of MB).
const MAX_RSS_MIB: f64 = 200.0;

/// This process's open-file limits (soft, hard), from `/proc/self/limits`.
fn open_files() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a line of open files");
    let mut numbers = line.split_whitespace().filter_map(|w| w.parse::<u64>().ok());
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(u64::MAX))
}

/// Raises this process's open-file limit to its hard limit (with `prlimit`; the API it starts inherits it):
/// 1,000 streams are 1,000 sockets on each side.
fn raise_open_files() {
    let (soft, hard) = open_files();
    if soft < hard {
        let pid = std::process::id().to_string();
        let status = std::process::Command::new("prlimit")
            .args(["--pid", &pid, &format!("--nofile={hard}:{hard}")])
            .status()
            .expect("run prlimit (util-linux)");
        assert!(status.success(), "prlimit could not raise the open-file limit");
    }
    let (soft, _) = open_files();
    assert!(soft >= 2_500, "the test needs 2,500 open files (`ulimit -n`), it may have {soft}");
}

/// Starts the API on `t`; returns it and its address.
async fn api(t: &TestDb) -> (Process, SocketAddr) {
    let port = free_port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let config = ApiConfig { listen, ..ApiConfig::default() };
    let mut file = config_file(&t.url, t.dir.path(), &config);
    // One line per request at info: 1,000 streams need no debug lines.
    "info".clone_into(&mut file.file.telemetry.log_filter);
    let path = t.write_config(&file, "api");
    (start_api(t.dir.path(), "api", &path, port, &[]).await, listen)
}

/// The API's resident memory, in MiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_mib(api: &Process) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", api.pid())).expect("the API's status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a VmRSS line");
    kb / 1024.0
}

/// What one stream received: its whole events so far, and how many of each name.
#[derive(Default)]
struct Seen {
    events: Vec<Event>,
    names: HashMap<String, usize>,
}

/// Opens `GET /api/events` on a raw connection (with a receive buffer of `recv_buffer` bytes when given).
async fn subscribe(addr: SocketAddr, recv_buffer: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).expect("a receive buffer size");
    }
    let mut stream = socket.connect(addr).await.expect("connect to the API");
    let request = format!(
        "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {VIEWER}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send the request");
    stream
}

/// A stream read by a task of its own, as fast as the API sends.
struct Reader {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Reader {
    fn spawn(stream: TcpStream) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut body = http1_body(stream, 16 * 1024);
                let mut decoder = Decoder::default();
                while let Some(Ok(bytes)) = body.next().await {
                    let events = decoder.feed(&bytes);
                    let mut seen = seen.lock().expect("the stream's events");
                    for event in events {
                        *seen.names.entry(event.name.clone()).or_default() += 1;
                        seen.events.push(event);
                    }
                }
            }
        });
        Self { seen, task }
    }

    /// Whether a whole event named `name` whose data holds `needle` arrived.
    fn has(&self, name: &str, needle: &str) -> bool {
        self.seen.lock().expect("the stream's events").events.iter().any(|e| e.name == name && e.data.contains(needle))
    }

    /// How many whole events named `name` arrived.
    fn count(&self, name: &str) -> usize {
        self.seen.lock().expect("the stream's events").names.get(name).copied().unwrap_or(0)
    }

    /// When the first whole event named `name` whose data holds `needle` arrived.
    fn first(&self, name: &str, needle: &str) -> Option<Instant> {
        let seen = self.seen.lock().expect("the stream's events");
        seen.events.iter().find(|e| e.name == name && e.data.contains(needle)).map(|e| e.at)
    }
}

/// Waits until every reader heard a whole event named `name` whose data holds `needle`.
async fn all_have(readers: &[Reader], name: &str, needle: &str, within: Duration) {
    eventually(within, &format!("{} streams to hear {name} {needle}", readers.len()), || async {
        readers.iter().all(|r| r.has(name, needle)).then_some(())
    })
    .await;
}

/// The p-th percentile of `values` (sorted in place).
fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// Triggers a run of `worker` through the API; returns its id.
async fn trigger(client: &reqwest::Client, base: &str, worker: &str) -> String {
    let response =
        client.post(format!("{base}/api/workers/{worker}/runs")).bearer_auth(OPERATOR).send().await.expect("trigger");
    assert_eq!(response.status(), reqwest::StatusCode::CREATED);
    let run: Value = response.json().await.expect("the run");
    run["id"].as_str().expect("an id").to_owned()
}

async fn a_thousand_live_streams_each_hear_every_event_with_bounded_memory(t: &TestDb) {
    raise_open_files();
    let (api, addr) = api(t).await;
    let base = format!("http://{addr}");
    let idle = rss_mib(&api);
    let mut readers = Vec::new();
    for _ in 0..1_000 {
        readers.push(Reader::spawn(subscribe(addr, None).await));
    }
    all_have(&readers, "ready", "", Duration::from_secs(30)).await;
    let open = rss_mib(&api);

    let client = reqwest::Client::new();
    let mut delivery = Vec::new();
    for round in 0..10 {
        let sent = Instant::now();
        let run = trigger(&client, &base, "transfer").await;
        let queued = format!("\"run\":\"{run}\",\"worker\":\"transfer\",\"state\":\"queued\"");
        all_have(&readers, "run", &queued, Duration::from_secs(20)).await;
        let cancel = client.post(format!("{base}/api/runs/{run}/cancel")).bearer_auth(OPERATOR).send().await;
        assert_eq!(cancel.expect("cancel").status(), reqwest::StatusCode::ACCEPTED, "round {round}");
        let cancelled = format!("\"run\":\"{run}\",\"worker\":\"transfer\",\"state\":\"cancelled\"");
        all_have(&readers, "run", &cancelled, Duration::from_secs(20)).await;
        // The time from the trigger to the last of the 1,000 streams hearing it.
        let last = readers.iter().map(|r| r.first("run", &queued).expect("heard")).max().expect("readers");
        delivery.push(last.duration_since(sent).as_secs_f64() * 1000.0);
    }
    let loaded = rss_mib(&api);
    for reader in &readers {
        assert_eq!(reader.count("resync"), 0, "no stream fell behind with 20 events");
        let queued = reader
            .seen
            .lock()
            .expect("the stream's events")
            .events
            .iter()
            .filter(|e| e.name == "run" && e.data.contains("\"worker\":\"transfer\",\"state\":\"queued\""))
            .count();
        assert_eq!(queued, 10, "every stream heard every run");
    }
    let p99 = percentile(&mut delivery, 99.0);
    eprintln!(
        "{}: 1,000 streams: RSS {idle:.1} MiB idle, {open:.1} MiB with the streams open, {loaded:.1} MiB after 20 \
         events; delivery of an event to all 1,000: p50 {:.1} ms, p99 {p99:.1} ms",
        t.kind.name(),
        percentile(&mut delivery, 50.0)
    );
    assert!(loaded < MAX_RSS_MIB, "the API holds 1,000 streams in {loaded:.1} MiB, over {MAX_RSS_MIB} MiB");
    for reader in readers {
        reader.task.abort();
    }
    api.stop(Duration::from_secs(5)).await;
}

/// Writes `n` runs of `worker` straight into the ledger, already succeeded (each is one `run` event). On
/// SQLite they end a little ahead of the clock: the poller finds ended runs by their end time, and a poll that
/// starts while this statement is still committing must not pass them by.
async fn burst(t: &TestDb, worker: &str, n: usize) {
    let sql = match t.kind {
        Kind::Postgres => format!(
            "insert into worker_runs (id, worker, state, end_reason, requested_by, config, finished_at) \
             select gen_random_uuid(), '{worker}', 'succeeded', 'exit_status', 'burst', '{{}}', now() \
             from generate_series(1, {n})"
        ),
        Kind::Sqlite => format!(
            "insert into worker_runs (id, worker, state, end_reason, requested_by, config, finished_at) \
             with recursive s(i) as (select 1 union all select i + 1 from s where i < {n}) \
             select randomblob(16), '{worker}', 'succeeded', 'exit_status', 'burst', '{{}}', \
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+0.3 seconds') from s"
        ),
    };
    t.execute(&sql).await.expect("a burst of runs");
}

async fn a_client_that_stops_reading_holds_up_no_other_and_is_told_to_resync(t: &TestDb) {
    raise_open_files();
    let (api, addr) = api(t).await;
    // The slow client: a receive buffer of a few kB, read only up to its `ready`.
    let mut slow = EventStream::new(http1_body(subscribe(addr, Some(4096)).await, 64 * 1024));
    slow.until(Duration::from_secs(10), "the slow stream's ready", |e| {
        e.iter().any(|e| e.name == "ready").then_some(())
    })
    .await;
    let mut readers = Vec::new();
    for _ in 0..10 {
        readers.push(Reader::spawn(subscribe(addr, None).await));
    }
    all_have(&readers, "ready", "", Duration::from_secs(10)).await;
    let before = rss_mib(&api);

    // 40,000 events, 400 at a time: more than the stream's buffer of 1,024 events and what the sockets hold
    // (the kernel lets a send buffer grow to 4 MiB). A burst goes once every reading stream has heard all the
    // bursts but the last, so that however slow the machine, a reading stream is never more than two bursts (800
    // events, within its buffer) behind, while the slow client falls ever further behind.
    const EVENTS: usize = 40_000;
    const BURST: usize = 400;
    let heard = "\"worker\":\"transfer\",\"state\":\"succeeded\"";
    let all_heard = async |count: usize| {
        eventually(Duration::from_secs(30), &format!("every fast stream to hear {count} events"), || async {
            readers.iter().all(|r| r.count("run") >= count).then_some(())
        })
        .await;
    };
    let started = Instant::now();
    for sent in (BURST..=EVENTS).step_by(BURST) {
        burst(t, "transfer", BURST).await;
        all_heard(sent - BURST).await;
    }
    all_heard(EVENTS).await;
    let took = started.elapsed();
    let after = rss_mib(&api);
    for reader in &readers {
        let seen = reader.seen.lock().expect("the stream's events");
        let runs = seen.events.iter().filter(|e| e.name == "run" && e.data.contains(heard)).count();
        assert_eq!(runs, EVENTS, "each event once");
        assert_eq!(seen.names.get("resync"), None, "a fast stream is not held up by the slow one");
    }
    eprintln!(
        "{}: 40,000 events to 10 streams in {:.1} s beside a client that reads nothing; RSS {before:.1} → {after:.1} MiB",
        t.kind.name(),
        took.as_secs_f64()
    );
    assert!(after - before < 50.0, "a client that reads nothing grows the API from {before:.1} to {after:.1} MiB");

    // The slow client reads at last: what the sockets held, then `resync`, then the events that follow.
    let resync = slow
        .until(Duration::from_secs(10), "the slow stream's resync", |e| e.iter().position(|e| e.name == "resync"))
        .await;
    let missed = EVENTS - slow.events[..resync].iter().filter(|e| e.name == "run" && e.data.contains(heard)).count();
    assert!(missed > 0, "the slow stream missed events, so it was told to resync");
    let why = slow.events[resync].json();
    assert!(why.to_string().contains("fell behind"), "the resync says why: {why}");
    // What the stream still held from before is read first; a run of another worker is what came after.
    burst(t, "judge", 1).await;
    slow.until(Duration::from_secs(10), "the next event after the resync", |e| {
        e[resync + 1..].iter().any(|e| e.name == "run" && e.data.contains("\"worker\":\"judge\"")).then_some(())
    })
    .await;
    eprintln!("{}: the slow stream missed {missed} of {EVENTS} events and was told to resync", t.kind.name());
    for reader in readers {
        reader.task.abort();
    }
    api.stop(Duration::from_secs(5)).await;
}
