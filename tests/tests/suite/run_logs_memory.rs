//! Reading a 1 GiB run log keeps the API's memory flat: the log is written straight into the local store's
//! folder in its layout (1,024 objects of 1 MiB, no worker needed), then read whole, by its tail and by a byte
//! range through the real `scrinalia-api` binary while its resident memory (`VmRSS` of `/proc/<pid>/status`) is
//! sampled. The peak is printed (`--nocapture` shows it) and must stay under 100 MB.

use std::{
    io::Write,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use reqwest::{StatusCode, header};
use scrinalia_shared::Role;
use scrinalia_tests::{
    TestDb,
    daemon_harness::probe,
    demo_worker, free_port,
    system::{OPERATOR, VIEWER},
};
use serde_json::json;

/// Objects of the log, and the size of each.
const OBJECTS: u64 = 1024;
const OBJECT_BYTES: u64 = 1024 * 1024;
/// The bound of the API's resident memory while it reads.
const BOUND: u64 = 100_000_000;

/// `VmRSS` of process `pid`, in bytes.
fn resident(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().strip_suffix(" kB"));
    kib.and_then(|k| k.trim().parse::<u64>().ok()).map_or(0, |k| k * 1024)
}

/// Samples the resident memory of `pid` every 10 ms until dropped; keeps the peak.
struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: i32) -> Self {
        let (peak, stop) = (Arc::new(AtomicU64::new(resident(pid))), Arc::new(AtomicBool::new(false)));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(resident(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self { peak, stop, thread: Some(thread) }
    }

    fn peak(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the sampler");
        }
        self.peak.load(Ordering::Relaxed)
    }
}

/// Writes the log: numbered lines in the daemon's format, each object exactly [`OBJECT_BYTES`] long (its last line
/// padded to fit).
fn write_log(folder: &Path) {
    std::fs::create_dir_all(folder).expect("the run's log folder");
    let size = usize::try_from(OBJECT_BYTES).expect("small");
    let mut object = Vec::with_capacity(size);
    for seq in 0..OBJECTS {
        object.clear();
        let mut line = 0;
        while object.len() + 200 < size {
            writeln!(object, "2026-01-01T00:00:00.000Z stdout object {seq:04} line {line:06} {}", "x".repeat(40))
                .expect("a line");
            line += 1;
        }
        write!(object, "2026-01-01T00:00:00.000Z stdout object {seq:04} ends ").expect("the last line");
        object.resize(size - 1, b'x');
        object.push(b'\n');
        std::fs::write(folder.join(format!("{seq:08}.log")), &object).expect("an object");
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_1_gib_log_keeps_the_api_resident_memory_flat() {
    let t = TestDb::sqlite().await;
    let port = free_port();
    let config = t
        .config()
        .worker(probe(&demo_worker(), "probe-1", 120))
        .token("otto", Role::Operator, OPERATOR)
        .token("vera", Role::Viewer, VIEWER)
        .with(|f| f.api.listen = ([127, 0, 0, 1], port).into());
    let path = t.write_config(&config, "config");
    let api = scrinalia_tests::start_api(t.dir.path(), "api", &path, port, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();

    // A queued run (no daemon runs here) whose log is written by hand.
    let run: serde_json::Value = http
        .post(format!("{base}/api/workers/probe-1/runs"))
        .bearer_auth(OPERATOR)
        .json(&json!({}))
        .send()
        .await
        .expect("trigger")
        .json()
        .await
        .expect("a run");
    let id = run["id"].as_str().expect("an id").to_owned();
    let folder = t.dir.path().join("run-logs").join("runs").join("probe-1").join(&id);
    let written = Instant::now();
    let writer = folder.clone();
    tokio::task::spawn_blocking(move || write_log(&writer)).await.expect("write the log");
    let size = OBJECTS * OBJECT_BYTES;
    eprintln!("wrote a {} MiB log in {:.1?}", mib(size), written.elapsed());

    let pid = api.pid().as_raw();
    let before = resident(pid);
    let mut sampler = Sampler::start(pid);
    let started = Instant::now();
    let response =
        http.get(format!("{base}/api/runs/{id}/log")).bearer_auth(VIEWER).send().await.expect("read the log");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.bytes_stream();
    let (mut received, mut last) = (0u64, 0u8);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("a piece of the log");
        received += chunk.len() as u64;
        last = chunk.last().copied().unwrap_or(last);
    }
    let took = started.elapsed();
    assert_eq!((received, last), (size, b'\n'), "the whole log came through");

    let tail = http
        .get(format!("{base}/api/runs/{id}/log?tail=1000"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .expect("read the tail");
    let omitted: u64 =
        tail.headers()["x-log-omitted-bytes"].to_str().ok().and_then(|v| v.parse().ok()).expect("a number");
    let tail = tail.text().await.expect("the tail");
    assert_eq!(tail.lines().count(), 1000);
    assert_eq!(omitted + tail.len() as u64, size);
    assert!(tail.lines().last().is_some_and(|l| l.contains(&format!("object {:04} ", OBJECTS - 1))), "the end");
    let range = http
        .get(format!("{base}/api/runs/{id}/log"))
        .bearer_auth(VIEWER)
        .header(header::RANGE, format!("bytes={}-{}", size / 2 - 10, size / 2 + 9))
        .send()
        .await
        .expect("read a range");
    assert_eq!(range.status(), StatusCode::PARTIAL_CONTENT);
    let middle = range.bytes().await.expect("the range");
    assert_eq!(middle.len(), 20);
    assert_eq!(middle[9], b'\n', "byte {} ends object {}", size / 2 - 1, OBJECTS / 2 - 1);
    let peak = sampler.peak();

    let rate = mib(size) / took.as_secs_f64();
    eprintln!(
        "measured: the API's resident memory was {:.1} MiB before and peaked at {:.1} MiB ({peak} bytes) while \
         streaming the {} MiB log in {took:.1?} ({rate:.0} MiB/s), then its last 1,000 lines and a byte range",
        mib(before),
        mib(peak),
        mib(size)
    );
    assert!(peak < BOUND, "the API's resident memory peaked at {peak} bytes, over {BOUND}");

    drop(api);
    std::fs::remove_dir_all(&folder).expect("remove the log");
    t.cleanup().await;
}
