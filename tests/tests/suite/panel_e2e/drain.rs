//! An admin drains a live daemon from the Daemons view and watches it go: a viewer sees the daemons but no Drain;
//! the admin's Drain asks for a confirmation, then the row shows `draining` with its run still in flight, and
//! once that run has ended the real daemon exits and its row turns `gone`, without a reload.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::json;

use super::{
    ADMIN_TOKEN, VIEWER_TOKEN, docs_screenshot, sign_in,
    stack::{Access, Stack},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_drains_a_daemon_from_the_daemons_view_and_watches_it_go() {
    let mut stack = Stack::start(Kind::Sqlite, Access::Tokens).await;
    let daemons = stack.get("/api/daemons").await.expect("the daemons");
    let daemon = daemons["daemons"][0].clone();
    let id = daemon["id"].as_str().expect("a daemon id").to_owned();
    let row = format!("#daemons tr[data-daemon=\"{id}\"]");

    // A run long enough to watch the drain wait for it.
    let long = json!({"options": {"duration_ms": 8000, "progress_steps": 8}});
    let (status, run) = stack.post("/api/workers/probe-1/runs", long).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run_id = run["id"].as_str().expect("a run id").to_owned();
    eventually(PATIENCE, "the run to be running", || async {
        (stack.get(&format!("/api/runs/{run_id}")).await?["state"] == "running").then_some(())
    })
    .await;

    // A viewer sees the daemon, its version, labels, state and run in flight, but no Drain.
    let browser = stack.open_panel("daemons").await;
    sign_in(&browser, VIEWER_TOKEN, "viewer").await;
    browser.click("nav.views a[data-nav=\"daemons\"]").await;
    browser.wait_for(&format!("{row}[data-state=\"active\"][data-in-flight=\"1\"]")).await;
    let text = browser.text(&row).await.unwrap_or_default();
    let version = daemon["version"].as_str().expect("a version");
    let host = daemon["host"].as_str().expect("a host");
    assert!(text.contains(version) && text.contains(host), "version and host: {text:?}");
    assert!(text.contains("1 of 3"), "runs in flight of its capacity: {text:?}");
    assert!(text.contains("s ago") || text.contains("just now"), "the heartbeat's age: {text:?}");
    assert!(!browser.find_all(&format!("{row} .labels li")).await.is_empty(), "its labels, its host's included");
    assert!(browser.find_all("button.drain").await.is_empty(), "a viewer sees no Drain button");

    // The admin drains it, after a confirmation that can be declined.
    browser.click("#session button.link").await;
    browser.wait_for("#who[data-role=\"none\"]").await;
    sign_in(&browser, ADMIN_TOKEN, "admin").await;
    browser.click("nav.views a[data-nav=\"daemons\"]").await;
    browser.click(&format!("{row} button.drain")).await;
    browser.wait_for_text(&format!("{row} .drain-ask"), "It finishes its run in flight").await;
    browser.click(&format!("{row} button.drain-never")).await;
    browser.wait_for(&format!("{row} button.drain")).await;
    assert_eq!(stack.get("/api/daemons").await.expect("the daemons")["daemons"][0]["state"], "active");
    browser.click(&format!("{row} button.drain")).await;
    browser.wait_for(&format!("{row} button.drain-confirm")).await;
    docs_screenshot(&browser, "daemons-drain-confirm").await;
    browser.click(&format!("{row} button.drain-confirm")).await;

    // Draining, with its run still in flight, and who asked.
    browser.wait_for(&format!("{row}[data-state=\"draining\"][data-in-flight=\"1\"]")).await;
    let text = browser.wait_for_text(&row, "still running").await;
    assert!(text.contains("drain asked by e2e-admin"), "who asked: {text:?}");
    assert!(browser.find(&format!("{row} button.drain")).await.is_none(), "no second Drain");
    docs_screenshot(&browser, "daemons-draining").await;

    // The run ends as it would have (a drain lets it finish), the daemon exits, and its row turns gone.
    browser.wait_for(&format!("{row}[data-state=\"gone\"][data-in-flight=\"0\"]")).await;
    let code = stack.daemon.wait(PATIENCE).await;
    assert_eq!(code, Some(0), "the drained daemon exits cleanly\n{}", stack.logs());
    let ended = stack.get(&format!("/api/runs/{run_id}")).await.expect("the run");
    assert_eq!(ended["state"], "succeeded", "{ended}");
    browser.wait_for_text(&format!("{row} .daemon-actions"), "stopped").await;
    docs_screenshot(&browser, "daemons-gone").await;

    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    stack.stop().await;
}
