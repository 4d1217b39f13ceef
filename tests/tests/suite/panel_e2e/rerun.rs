//! An operator reruns a finished run after an admin changed the worker's override: the run page's button makes
//! the new run, whose page shows the changed field under "Changed since", both values with their sources and the
//! override's author and reason.

use reqwest::{Method, StatusCode};
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::json;

use super::stack::{Access, Stack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_from_its_page_shows_what_changed_and_who_changed_it() {
    let stack = Stack::start(Kind::Sqlite, Access::AnonymousAdmin).await;
    let (status, run) = stack.post("/api/workers/probe-1/runs", json!({"options": {"duration_ms": 100}})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    eventually(PATIENCE, "the run to succeed", || async {
        (stack.get(&format!("/api/runs/{id}")).await?["state"] == "succeeded").then_some(())
    })
    .await;
    let change = json!({"options": {"output_lines": 7}, "reason": "more lines for the audit"});
    let (status, body) = stack.send(Method::PUT, "/api/workers/probe-1/override", change).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let browser = stack.open_panel("rerun").await;
    browser.goto(&format!("{}/#/runs/{id}", stack.base)).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    browser.wait_for(".run-summary button.rerun").await;
    browser.click(".run-summary button.rerun").await;
    let new = browser
        .wait("the rerun's page", || async {
            let url = browser.client.current_url().await.ok()?;
            let next = url.fragment()?.strip_prefix("/runs/")?.to_owned();
            (next != id).then_some(next)
        })
        .await;
    let row = "#run-changes tr[data-field=\"options.output_lines\"]";
    let text = browser.wait_for_text(row, "more lines for the audit").await;
    assert!(text.contains('2') && text.contains('7'), "before and after: {text:?}");
    assert!(text.contains("default") && text.contains("override"), "both sources: {text:?}");
    assert!(text.contains("by anonymous"), "the override's author: {text:?}");
    assert_eq!(browser.find_all("#run-changes tbody tr").await.len(), 1, "only the overridden option changed");
    let shown = stack.get(&format!("/api/runs/{new}")).await.expect("the rerun");
    assert_eq!((shown["follows"].as_str(), shown["follows_as"].as_str()), (Some(id.as_str()), Some("rerun")));
    browser.screenshot("rerun-changed-since").await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
