//! A run's tags show on its row of the ledger as small labels, each a link to the runs that carry it: a click
//! lists exactly those (kept in the hash); the Tag field filters the same way; the run's page lists its tags.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::{Value, json};

use super::stack::{Access, Stack};

const LETTERS: &str = "collection:1921-letters";

async fn requested(stack: &Stack, worker: &str, body: Value) -> String {
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
async fn a_runs_tags_show_as_links_to_the_runs_that_carry_them() {
    let stack = Stack::start(Kind::Sqlite, Access::AnonymousAdmin).await;
    let quick = json!({"duration_ms": 50});
    let tagged = requested(&stack, "probe-1", json!({"options": quick, "tags": [LETTERS, "batch:7"]})).await;
    let plain = requested(&stack, "probe-3", json!({"options": quick})).await;

    let browser = stack.open_panel("tags").await;
    browser.click("nav.views a[data-nav=\"runs\"]").await;
    browser.wait_for(&format!("#ledger tr[data-run=\"{plain}\"]")).await;
    browser.wait_for(&format!("#ledger tr[data-run=\"{tagged}\"] ul.tags a.tag")).await;
    let labels = browser
        .js(
            "return [...document.querySelectorAll(`#ledger tr[data-run=\"${arguments[0]}\"] a.tag`)].map((a) => a.textContent);",
            vec![json!(tagged)],
        )
        .await;
    assert_eq!(labels, json!([LETTERS, "batch:7"]), "the row's tags, in order");
    assert!(browser.find(&format!("#ledger tr[data-run=\"{plain}\"] ul.tags")).await.is_none(), "no tags, no list");

    // A click on a tag lists the runs that carry it, and the hash keeps it.
    browser.click(&format!("#ledger tr[data-run=\"{tagged}\"] a.tag")).await;
    let found = browser
        .wait("only the tagged run", || async {
            let ids = rows(&browser).await;
            (ids.len() == 1).then_some(ids)
        })
        .await;
    assert_eq!(found, [tagged.as_str()]);
    let url = browser.client.current_url().await.expect("the url");
    assert!(url.fragment().is_some_and(|f| f.contains("tag=collection%3A1921-letters")), "kept in the hash: {url}");
    let field = browser.js("return document.querySelector('#filter-tag').value;", vec![]).await;
    assert_eq!(field, json!(LETTERS), "the field shows the filter");

    // The Tag field filters the same way.
    browser.goto(&format!("{}/#/runs", stack.base)).await;
    browser.wait_for(&format!("#ledger tr[data-run=\"{plain}\"]")).await;
    browser.type_into("#filter-tag", "batch:7").await;
    browser.click("form.filters button[type=\"submit\"]").await;
    browser
        .wait("only the run tagged batch:7", || async {
            let ids = rows(&browser).await;
            (ids == [tagged.as_str()]).then_some(())
        })
        .await;

    // The run's page lists its tags.
    browser.goto(&format!("{}/#/runs/{tagged}", stack.base)).await;
    let shown = browser.wait_for_text("main", "batch:7").await;
    assert!(shown.contains(LETTERS), "{shown}");
    browser.wait_for(&format!("a.tag[href=\"#/runs?tag={}\"]", "collection%3A1921-letters")).await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
