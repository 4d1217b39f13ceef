//! A search of the ledger by error text finds the failed run it names and nothing else, keeps the other filters
//! (a state that excludes it finds nothing) and is kept in the hash; a run id's start finds that run.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::{Value, json};

use super::{
    docs_screenshot,
    stack::{Access, Stack},
};

async fn ended(stack: &Stack, worker: &str, body: Value) -> String {
    let (status, run) = stack.post(&format!("/api/workers/{worker}/runs"), body).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().expect("a run id").to_owned();
    eventually(PATIENCE, "the run to end", || async {
        let run = stack.get(&format!("/api/runs/{id}")).await?;
        run["finished_at"].is_string().then_some(())
    })
    .await;
    id
}

async fn rows(browser: &scrinalia_tests::browser::Browser) -> Vec<String> {
    let script = "return [...document.querySelectorAll('#ledger tbody tr[data-run]')].map((r) => r.dataset.run);";
    let ids = browser.js(script, vec![]).await;
    ids.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_by_error_text_finds_the_failed_run() {
    let stack = Stack::start(Kind::Postgres, Access::AnonymousAdmin).await;
    let fine = ended(&stack, "probe-1", json!({"options": {"duration_ms": 50}})).await;
    let melted = ended(
        &stack,
        "probe-1",
        json!({"options": {"duration_ms": 50, "exit_code": 3, "note": "GPU melted at batch 7"}}),
    )
    .await;
    let other = ended(&stack, "probe-3", json!({"options": {"duration_ms": 50, "exit_code": 2}})).await;
    let failed = stack.get(&format!("/api/runs/{melted}")).await.expect("the failed run");
    assert_eq!(failed["state"], "failed");
    assert!(failed["error"].as_str().is_some_and(|e| e.contains("GPU melted")), "{failed}");

    let browser = stack.open_panel("search").await;
    browser.click("nav.views a[data-nav=\"runs\"]").await;
    browser.wait_for(&format!("#ledger tr[data-run=\"{other}\"]")).await;
    assert_eq!(rows(&browser).await.len(), 3, "every run before the search");

    // Error text, in another case than the run's.
    browser.type_into("#filter-q", "gpu MELTED").await;
    browser.click("form.filters button[type=\"submit\"]").await;
    let found = browser
        .wait("only the failed run", || async {
            let ids = rows(&browser).await;
            (ids.len() == 1).then_some(ids)
        })
        .await;
    assert_eq!(found, [melted.as_str()]);
    browser.wait_for(&format!("#ledger tr[data-run=\"{melted}\"][data-state=\"failed\"]")).await;
    let text = browser.text(&format!("#ledger tr[data-run=\"{melted}\"]")).await.unwrap_or_default();
    assert!(text.contains("GPU melted"), "its error on the row, around the match: {text:?}");
    let marked = browser.text(&format!("#ledger tr[data-run=\"{melted}\"] .outcome mark")).await;
    assert_eq!(marked.as_deref(), Some("GPU melted"), "the match is marked, in the run's own case");
    let url = browser.client.current_url().await.expect("the url");
    assert!(url.fragment().is_some_and(|f| f.contains("q=gpu+MELTED")), "kept in the hash: {url}");
    docs_screenshot(&browser, "runs-search").await;

    // With the other filters: a state that excludes it finds nothing; its worker keeps it.
    browser.goto(&format!("{}/#/runs?state=succeeded&q=gpu+melted", stack.base)).await;
    browser.wait_for_text("#ledger tbody", "No runs match.").await;
    browser.goto(&format!("{}/#/runs?worker=probe-1&state=failed&q=melted", stack.base)).await;
    browser.wait_for(&format!("#ledger tr[data-run=\"{melted}\"]")).await;
    assert_eq!(rows(&browser).await, [melted.as_str()]);

    // A run id's start, in the search form.
    browser.goto(&format!("{}/#/runs", stack.base)).await;
    browser.wait_for(&format!("#ledger tr[data-run=\"{fine}\"]")).await;
    browser.type_into("#filter-id", &fine[..23]).await;
    browser.click("form.filters button[type=\"submit\"]").await;
    browser
        .wait("only the run of that id", || async {
            let ids = rows(&browser).await;
            (ids == [fine.as_str()]).then_some(())
        })
        .await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
