//! A sharded run in the panel, against the real API and daemon (SQLite) with an operator's token: the parent's page
//! lists a row per shard with its state and a bar of its progress, each linking to the child, whose page says which
//! shard of which run it is; the resources view shows the daemon-scoped GPU the shards took, per daemon.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_tests::{
    Kind,
    browser::Browser,
    daemon_harness::{daemon_gpu, probe},
    demo_worker, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::json;

use super::sign_in;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_page_has_a_row_per_shard_and_a_childs_page_names_its_parent() {
    // The probe needs a GPU of the daemon, which has one: the shards run one after another.
    let mut needs_gpu = probe(&demo_worker(), "probe-1", 120);
    needs_gpu.resources = vec!["gpu".into()];
    let system = System::start(Kind::Sqlite, |c| {
        c.worker(needs_gpu).with(|f| {
            f.resources = vec![daemon_gpu()];
            f.daemon.resources = [("gpu".to_owned(), 1)].into();
        })
    })
    .await;
    eventually(Duration::from_secs(30), "the daemon to describe probe-1", || async {
        let worker = system.http(Method::GET, "/api/workers/probe-1", VIEWER, None).await.ok()?.json();
        worker["described"]["described_at"].as_str().map(drop)
    })
    .await;
    let body = json!({"shards": 3, "options": {"items": 9, "progress_steps": 3, "duration_ms": 300}});
    let reply = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await.expect("answer");
    let id = reply.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    let detail = eventually(Duration::from_secs(60), "the parent to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        (run["state"] == "succeeded").then_some(run)
    })
    .await;
    let child = detail["children"][2]["id"].as_str().expect("a child").to_owned();

    let browser = Browser::start("shards", system.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/runs/{id}", system.api_url)).await;
    sign_in(&browser, OPERATOR, "operator").await;
    browser.wait_for_text("#run-shards", "Shard 2").await;
    let rows = browser.find_all("#run-shards li[data-state=\"succeeded\"]").await;
    assert_eq!(rows.len(), 3, "a row per shard, each succeeded");
    assert!(browser.find(&format!("#run-shards a[href=\"#/runs/{child}\"]")).await.is_some(), "rows link children");
    browser.screenshot("run-shards").await;

    browser.click(&format!("#run-shards a[href=\"#/runs/{child}\"]")).await;
    browser.wait_for_text("#run-shard-of", "Shard 2 of 3").await;
    let parent = format!("#run-shard-of a[href=\"#/runs/{id}\"]");
    assert!(browser.find(&parent).await.is_some(), "the child links its parent");

    // The GPU, a resource of each daemon: its slots per daemon, and no capacity form.
    browser.goto(&format!("{}/#/resources", system.api_url)).await;
    let line = browser.wait_for_text("article[data-resource=\"gpu\"] .resource-daemons li", "of 1 held").await;
    assert!(line.contains("0 of 1 held"), "every shard ended, the slot is free: {line}");
    browser.wait_for_text("article[data-resource=\"gpu\"]", "Its capacity is each daemon's daemon.resources").await;
    assert!(browser.find("article[data-resource=\"gpu\"] form").await.is_none(), "no capacity form");
    browser.screenshot("resources-gpu").await;
    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    system.cleanup().await;
}
