//! The demo catalogue (`deploy/demo.toml`) run until its poison documents are quarantined, through the real
//! daemon and API on both backends: the summaries fail `doc-0024` (an empty OCR text) and `doc-0027` (longer
//! than the model's context) on every run and still succeed, and after three runs in a row (its
//! `quarantine_after`) the fourth is given them to skip and leaves them untouched.

use std::{path::Path, time::Duration};

use reqwest::{Method, StatusCode};
use scrinalia_shared::{Role, Settings};
use scrinalia_testkit::stack::Stack;
use scrinalia_tests::{
    Binaries, TestDb,
    api_harness::{OPERATOR, VIEWER},
    backend_tests, eventually, free_port,
};
use serde_json::{Value, json};

backend_tests!(the_demo_runs_until_its_poison_documents_are_quarantined);

const WAIT: Duration = Duration::from_secs(120);

async fn run(stack: &Stack, worker: &str) -> Value {
    let run = stack.json(Method::POST, &format!("/api/workers/{worker}/runs"), OPERATOR, json!({})).await;
    let path = format!("/api/runs/{}", run.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id"));
    let ended = eventually(WAIT, "the run's end", || async {
        let run = stack.get(&path, VIEWER).await.expect(StatusCode::OK, None);
        (!matches!(run["state"].as_str(), Some("queued" | "running"))).then_some(run)
    })
    .await;
    assert_eq!(ended["state"], "succeeded", "{worker}: {ended:#}");
    ended
}

fn journal_mentions(data: &Path, worker: &str, document: &str) -> bool {
    let journal = std::fs::read_to_string(data.join("results").join(format!("{worker}.jsonl"))).unwrap_or_default();
    journal.lines().any(|l| l.contains(&format!("\"{document}\"")))
}

async fn the_demo_runs_until_its_poison_documents_are_quarantined(t: &TestDb) {
    let dir = t.dir.path();
    let data = dir.join("demo");
    let demo =
        Settings::load_from(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml")), Vec::new())
            .unwrap_or_else(|e| panic!("deploy/demo.toml: {e}"));
    let workers: Vec<_> = ["transfer", "language-detect", "summarize"]
        .iter()
        .map(|w| demo.catalogue.worker(w).unwrap_or_else(|| panic!("the demo's {w}")).clone())
        .collect();
    let after = workers[2].quarantine_after.expect("the demo quarantines the summaries' poison documents");
    let config = t
        .config()
        .test_daemon(|d| {
            d.poll_seconds = 1;
            d.worker_env = [("SCRINALIA_DEMO_DATA".to_owned(), data.display().to_string())].into();
        })
        .with(|f| {
            f.api.listen = ([127, 0, 0, 1], free_port()).into();
            f.engines = demo.catalogue.engines.clone();
        })
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
        .workers(workers);
    let stack = Stack::start(&Binaries::of_this_test(), dir, &config, true).await.unwrap_or_else(|e| panic!("{e:#}"));

    // The first transfer sets up the data folder; then 30 documents have arrived (the poison ones are 24 and 27).
    run(&stack, "transfer").await;
    let schedule = json!({"started_at": 1_000_000_000, "initial": 20, "every_seconds": 20, "cap": 30});
    std::fs::write(data.join("staging.json"), schedule.to_string()).expect("rewrite the arrivals");
    run(&stack, "transfer").await;
    run(&stack, "language-detect").await;

    for n in 1..=after {
        let summaries = run(&stack, "summarize").await;
        let items = &summaries["items"];
        assert_eq!(items["failed"], 2, "run {n}: {items}");
        let classes: Vec<&str> = items["classes"]
            .as_array()
            .expect("classes")
            .iter()
            .filter(|c| c["outcome"] == "failed")
            .filter_map(|c| c["class"].as_str())
            .collect();
        assert_eq!(classes.len(), 2, "{items}");
        assert!(classes.contains(&"ocr_empty") && classes.contains(&"ctx_overflow"), "{items}");
    }
    let quarantine = stack.get("/api/workers/summarize/quarantine", VIEWER).await.expect(StatusCode::OK, None);
    let ids: Vec<&str> =
        quarantine["items"].as_array().expect("items").iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(ids, ["doc-0024", "doc-0027"], "{quarantine:#}");

    // The next run is given them to skip: reported skipped, never touched (the summaries' journal lacks them).
    let next = run(&stack, "summarize").await;
    assert_eq!((next["items"]["skipped"].as_i64(), next["items"]["failed"].as_i64()), (Some(2), Some(0)), "{next:#}");
    for poison in ["doc-0024", "doc-0027"] {
        assert!(!journal_mentions(&data, "summarize", poison), "{poison} untouched");
    }
    assert!(journal_mentions(&data, "summarize", "doc-0025"), "the others are summarised");
}
