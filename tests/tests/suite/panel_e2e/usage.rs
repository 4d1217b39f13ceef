//! What a run cost and what a host does not keep of a worker's limits, in the panel, against the real API and
//! daemon (SQLite) with an operator's token: the run page of a probe that burns CPU and reports its tokens and cost
//! shows its usage, named for how it was measured; on a daemon with cgroups off, the card of a worker with a
//! `memory_max` says the host does not enforce it.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_tests::{
    Kind,
    browser::Browser,
    daemon_harness::probe,
    demo_worker, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::json;

use super::sign_in;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_usage_is_on_its_page_and_an_unkept_limit_on_its_workers_card() {
    let mut limited = probe(&demo_worker(), "probe-2", 120);
    limited.memory_max = Some(serde_json::from_value(json!("256MiB")).expect("a size"));
    let plain = probe(&demo_worker(), "probe-1", 120);
    let system =
        System::start(Kind::Sqlite, |c| c.worker(plain).worker(limited).with(|f| f.daemon.cgroups = false)).await;
    let body = json!({"options": {"report_usage": true, "burn_cpu_ms": 300}});
    let reply = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await.expect("answer");
    let id = reply.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    eventually(Duration::from_secs(60), "the run to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        (run["state"] == "succeeded").then_some(())
    })
    .await;

    let browser = Browser::start("usage", system.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/runs/{id}", system.api_url)).await;
    sign_in(&browser, OPERATOR, "operator").await;
    let caption = browser.wait_for_text("table.usage caption", "Usage").await;
    assert_eq!(caption, "Usage (measured by rusage)");
    let table = browser.wait_for_text("table.usage", "Tokens in").await;
    let lines: Vec<&str> = table.lines().collect();
    for said in ["Tokens in 1,200", "Tokens out 300", "Cost 0.0042 EUR"] {
        assert!(lines.contains(&said), "{said:?} in {table:?}");
    }
    for row in ["Wall time ", "CPU ", "Peak of its largest process "] {
        assert!(lines.iter().any(|l| l.starts_with(row)), "{row:?} in {table:?}");
    }
    browser.screenshot("run-usage").await;

    browser.goto(&format!("{}/#/workers", system.api_url)).await;
    super::open_cards(&browser, &["probe-1", "probe-2"]).await;
    let note = browser.wait_for_text("article[data-worker=\"probe-2\"] .limit-notes", "not enforced").await;
    assert!(note.starts_with("memory_max not enforced on host ") && note.contains("daemon.cgroups = false"), "{note}");
    assert!(browser.find("article[data-worker=\"probe-1\"] .limit-notes").await.is_none(), "no limit, no note");
    browser.screenshot("worker-card-limit-notes").await;

    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    system.cleanup().await;
}
