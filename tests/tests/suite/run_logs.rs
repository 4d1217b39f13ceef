//! The run-log cap and the log's streamed reads, on a whole system (the real API, daemon and CLI, the probe of
//! `scrinalia-demo-worker`) with a small cap: a probe prints about 6 MB against a cap of 256 KiB and still
//! succeeds; its stored log is its head, a statement of the cut whose numbers are exactly what is missing, and
//! its tail; `tail=N`, byte ranges (and their refusals), `follow` and `scrinalia logs` return the right lines.
//! Once on the local folder (where the panel, in a headless Chromium, shows the last 500 lines first and the
//! whole log on asking) and once on an S3 bucket (moto's server).

use std::time::Duration;

use reqwest::{Method, StatusCode, header};
use scrinalia_shared::{
    Role,
    config::{ObjectStoreKind, Secret},
};
use scrinalia_tests::{
    ConfigFile, Kind,
    browser::Browser,
    daemon_harness::probe,
    demo_worker, eventually,
    moto::Moto,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

/// The cap of these tests.
const CAP: u64 = 256 * 1024;
/// Lines the probe prints to stdout and as many to stderr: about 6 MB of log.
const LINES: u64 = 40_000;
/// The length of a line's time in the log (`2026-01-01T00:00:00.000Z`).
const TIME_LEN: u64 = 24;

fn capped(config: ConfigFile) -> ConfigFile {
    config.worker(probe(&demo_worker(), "probe-1", 120)).with(|f| f.logs.max_bytes_per_run = CAP)
}

/// A GET of the API as the viewer, with extra headers.
async fn get(system: &System, path: &str, headers: &[(header::HeaderName, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{}{path}", system.api_url)).bearer_auth(VIEWER);
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    request.send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

async fn text(system: &System, path: &str) -> String {
    let response = get(system, path, &[]).await;
    assert_eq!(response.status(), StatusCode::OK, "GET {path}");
    response.text().await.expect("a text body")
}

/// Runs the probe to its end; returns the finished run.
async fn run_probe(system: &System) -> Value {
    let body = json!({"options": {"output_lines": LINES, "duration_ms": 2000, "progress_steps": 2}});
    let reply = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await.expect("trigger");
    let id = reply.json()["id"].as_str().expect("a run id").to_owned();
    // Followed by the CLI while it runs: the stream ends with the run, holding the head, the end and, where it
    // lacks output, a statement of the cut.
    let followed = system.cli(&["logs", &id, "--follow"]).await;
    followed.expect(0);
    for line in ["stdout probe-1: stdout line 1 of ", &format!("stderr probe-1: run {id} done")] {
        assert!(followed.stdout.contains(line), "the followed log lacks {line:?}");
    }
    let run = eventually(Duration::from_secs(60), "the run to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        (run["finished_at"].is_string()).then_some(run)
    })
    .await;
    assert_eq!(run["state"], "succeeded", "a capped log does not fail its run: {run}");
    run
}

/// The number of the probe's `<stream> line <k> of <LINES>` line, if it is one.
fn probe_line(line: &str, stream: &str) -> Option<u64> {
    let rest = line.get(TIME_LEN as usize + 1..)?.strip_prefix(&format!("{stream} probe-1: {stream} line "))?;
    rest.strip_suffix(&format!(" of {LINES}"))?.parse().ok()
}

/// How long the probe's line `k` of `stream` is in the log, with its newline.
fn line_len(stream: &str, k: u64) -> u64 {
    (format!("{stream} probe-1: {stream} line {k} of {LINES}").len() + 2) as u64 + TIME_LEN
}

/// The numbers of a statement of the cut: bytes and lines.
fn cut_numbers(line: &str) -> (u64, u64) {
    let number = |s: &str| s.replace(',', "").parse::<u64>().unwrap_or_else(|e| panic!("{s:?} in {line:?}: {e}"));
    let rest = line.split_once("scrinalia … ").map(|(_, r)| r).unwrap_or_else(|| panic!("not a cut: {line}"));
    let (bytes, rest) = rest.split_once(" bytes (").unwrap_or_else(|| panic!("no bytes in {line}"));
    let (lines, rest) = rest.split_once(" lines) ").unwrap_or_else(|| panic!("no lines in {line}"));
    assert!(rest.starts_with("cut here by the log cap of 256 KiB (logs.max_bytes_per_run)"), "{line}");
    (number(bytes), number(lines))
}

/// What the stored log of a capped run must be, read whole: head, one statement whose numbers are exactly the
/// probe's lines that are missing, tail. Returns the log.
async fn the_log_keeps_head_and_tail_and_states_the_cut(system: &System, id: &str) -> String {
    let log = text(system, &format!("/api/runs/{id}/log")).await;
    let lines: Vec<&str> = log.lines().collect();
    let cuts: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains("cut here by the log cap")).collect();
    assert_eq!(cuts.len(), 1, "one statement of the cut in {} lines", lines.len());
    let at = cuts[0];
    let (head, tail) = (lines[..at].join("\n").len() + 1, lines[at + 1..].join("\n").len() + 1);
    assert!(head as u64 <= CAP / 2 && tail as u64 <= CAP / 2, "head {head} and tail {tail} within their halves");
    assert!(lines[..at].iter().any(|l| probe_line(l, "stdout") == Some(1)), "the head holds the first line");
    assert!(lines.last().is_some_and(|l| l.ends_with(&format!("run {id} done"))), "the tail ends the log");
    assert!(lines[at].get(TIME_LEN as usize..).is_some_and(|l| l.starts_with(" scrinalia … ")), "{}", lines[at]);

    let (mut missing_lines, mut missing_bytes) = (0, 0);
    for stream in ["stdout", "stderr"] {
        let kept: Vec<u64> = lines.iter().filter_map(|l| probe_line(l, stream)).collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "{stream} keeps its order");
        // What is kept of each stream is a first part and a last part: only the middle is cut.
        let gap = kept.windows(2).position(|w| w[1] != w[0] + 1).expect("a cut in the middle");
        assert!(kept[gap + 1..].windows(2).all(|w| w[1] == w[0] + 1) && kept.last() == Some(&LINES), "{stream}");
        for k in kept[gap] + 1..kept[gap + 1] {
            missing_lines += 1;
            missing_bytes += line_len(stream, k);
        }
    }
    assert_eq!(cut_numbers(lines[at]), (missing_bytes, missing_lines), "the statement counts what is missing");
    log
}

/// `tail=`, byte ranges and their refusals on the finished log `log` of run `id`, and `scrinalia logs`.
async fn parts_of_the_log_read_right(system: &System, id: &str, log: &str) {
    let path = format!("/api/runs/{id}/log");
    let size = log.len();
    let last = |n: usize| {
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].iter().map(|l| format!("{l}\n")).collect::<String>()
    };
    for n in [0, 1, 100, 5_000, 1_000_000] {
        let response = get(system, &format!("{path}?tail={n}"), &[]).await;
        assert_eq!(response.status(), StatusCode::OK);
        let omitted = response.headers()["x-log-omitted-bytes"].to_str().expect("a number").to_owned();
        let body = response.text().await.expect("the tail");
        assert_eq!(body, last(n), "tail={n}");
        assert_eq!(omitted, (size - body.len()).to_string(), "tail={n}: the bytes before it");
    }
    assert_eq!(text(system, &format!("{path}?tail=3&follow=true")).await, last(3), "a finished run's tail, followed");

    let cut_at = log.find(" scrinalia … ").expect("the statement") - TIME_LEN as usize;
    let ranges = [
        ("bytes=0-99".to_owned(), 0..100),
        ("bytes=-50".to_owned(), size - 50..size),
        (format!("bytes={}-", size - 10), size - 10..size),
        (format!("bytes={}-{}", cut_at - 40, cut_at + 40), cut_at - 40..cut_at + 41),
        (format!("bytes=100-{}", size * 2), 100..size),
    ];
    for (range, bytes) in ranges {
        let response = get(system, &path, &[(header::RANGE, &range)]).await;
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        let content_range = response.headers()[header::CONTENT_RANGE].to_str().expect("text").to_owned();
        assert_eq!(content_range, format!("bytes {}-{}/{size}", bytes.start, bytes.end - 1), "{range}");
        assert_eq!(response.bytes().await.expect("the range"), log.as_bytes()[bytes.clone()], "{range}");
    }
    let past = get(system, &path, &[(header::RANGE, &format!("bytes={size}-"))]).await;
    assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(past.headers()[header::CONTENT_RANGE], format!("bytes */{size}").as_str());
    assert_eq!(past.json::<Value>().await.expect("an error body")["code"], "range_not_satisfiable");
    let refusals = [
        ("", Some("bytes=9-1"), "invalid_range"),
        ("", Some("bytes=0-1,5-9"), "invalid_range"),
        ("", Some("lines=1-2"), "invalid_range"),
        ("?tail=10", Some("bytes=0-9"), "invalid_range"),
        ("?tail=ten", None, "invalid_query"),
    ];
    for (query, range, code) in refusals {
        let headers: Vec<_> = range.map(|r| (header::RANGE, r)).into_iter().collect();
        let response = get(system, &format!("{path}{query}"), &headers).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query} {range:?}");
        let body: Value = response.json().await.expect("an error body");
        assert_eq!(body["code"], code, "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.ends_with('.') && message.len() > 20, "a sentence: {body}");
    }

    let cli = system.cli(&["logs", id, "--tail", "7"]).await;
    assert_eq!(cli.expect(0).stdout, last(7), "scrinalia logs --tail");
    assert_eq!(system.cli(&["logs", id]).await.expect(0).stdout, log, "scrinalia logs");
}

/// The run's view in the panel: the last 500 lines, a link to the rest, then the whole log.
async fn the_panel_shows_the_last_lines_then_the_whole_log(system: &System, id: &str, log: &str) {
    let browser = Browser::start("run-logs", system.db.dir.path(), 1280, 900).await;
    browser.goto(&format!("{}/#/runs/{id}", system.api_url)).await;
    browser.wait_for_text("#log-more", "bytes before them are not shown").await;
    browser.wait_for_text("#log-state", "complete").await;
    let shown = || async {
        let text = browser.js("return document.querySelector('#run-log').textContent;", vec![]).await;
        text.as_str().unwrap_or_default().to_owned()
    };
    let lines: Vec<&str> = log.lines().collect();
    let last: String = lines[lines.len() - 500..].iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(shown().await, last, "the panel reads the last 500 lines first");
    browser.click("#log-whole").await;
    browser
        .wait("the whole log in the panel", || async {
            (browser.find("#log-more").await.is_none() && shown().await == log).then_some(())
        })
        .await;
    browser.wait_for_text("#log-state", "complete").await;
    browser.close().await;
}

/// The object names of a capped log: chunks and one statement, no more chunks than the cap holds.
fn a_capped_layout(names: &[String]) {
    let cuts = names.iter().filter(|n| n.ends_with(".cut")).count();
    let chunks = names.iter().filter(|n| n.ends_with(".log")).count();
    assert_eq!((cuts, cuts + chunks), (1, names.len()), "{names:?}");
    // A chunk of this cap is written at 32 KiB, or after a second: the head and the tail hold a few each.
    assert!(chunks <= 16, "the store keeps only what the cap holds: {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_over_its_cap_keeps_head_and_tail_states_the_cut_and_reads_in_parts() {
    // Anonymous viewers from loopback, for the panel.
    let system = System::start(Kind::Sqlite, |config| {
        capped(config).with(|f| (f.auth.anonymous_role, f.auth.anonymous_loopback_only) = (Some(Role::Viewer), true))
    })
    .await;
    let run = run_probe(&system).await;
    let id = run["id"].as_str().expect("an id");
    let log = the_log_keeps_head_and_tail_and_states_the_cut(&system, id).await;
    let folder = system.db.dir.path().join("run-logs").join(run["log_key"].as_str().expect("a log key"));
    let files: Vec<(String, u64)> = std::fs::read_dir(&folder)
        .expect("the run's folder")
        .map(|e| e.expect("an entry"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().expect("metadata").len()))
        .collect();
    a_capped_layout(&files.iter().map(|f| f.0.clone()).collect::<Vec<_>>());
    assert_eq!(files.iter().map(|f| f.1).sum::<u64>(), log.len() as u64, "the log is what the folder holds");
    parts_of_the_log_read_right(&system, id, &log).await;
    the_panel_shows_the_last_lines_then_the_whole_log(&system, id, &log).await;
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_over_its_cap_in_an_s3_bucket_keeps_head_and_tail_and_reads_in_parts() {
    let scratch = tempfile::tempdir().expect("a folder for moto");
    let moto = Moto::start(scratch.path()).await;
    let bucket = "scrinalia-capped-logs";
    moto.create_bucket(bucket).await;
    let endpoint = moto.endpoint.clone();
    let system = System::start(Kind::Sqlite, |config| {
        capped(config).with(|f| {
            let store = &mut f.object_store;
            store.kind = ObjectStoreKind::S3;
            store.bucket = Some(bucket.to_owned());
            store.endpoint = Some(endpoint);
            store.access_key_id = Some(Secret::from("AKIASCRINALIATEST".to_owned()));
            store.secret_access_key = Some(Secret::from("scrinalia-test-secret".to_owned()));
            store.prefix = "capped".to_owned();
        })
    })
    .await;
    let run = run_probe(&system).await;
    let id = run["id"].as_str().expect("an id");
    let log = the_log_keeps_head_and_tail_and_states_the_cut(&system, id).await;
    let keys = moto.keys(bucket, &format!("capped/runs/probe-1/{id}/")).await;
    a_capped_layout(&keys);
    parts_of_the_log_read_right(&system, id, &log).await;
    system.cleanup().await;
}
