//! A worker's history chart renders: after real runs of a probe (three that succeed, one that fails), its card's
//! History section draws one bar per day for 7 and for 30 days, today's bar the items the API counts, today's
//! stack of outcomes, the success rate, the two duration percentiles, CPU per day, and what the runs cost (each
//! reports tokens and a cost) in a table of today and the window.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::json;

use super::{
    docs_screenshot, open_cards,
    stack::{Access, Stack},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_history_chart_renders_its_days_and_figures() {
    let stack = Stack::start(Kind::Sqlite, Access::AnonymousAdmin).await;
    for exit_code in [0, 0, 3, 0] {
        let body = json!({"options": {"duration_ms": 150, "progress_steps": 4, "exit_code": exit_code,
                                      "report_usage": true, "items": 4}});
        let (status, run) = stack.post("/api/workers/probe-1/runs", body).await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        let id = run["id"].as_str().expect("a run id").to_owned();
        eventually(PATIENCE, "the run to end", || async {
            stack.get(&format!("/api/runs/{id}")).await?["finished_at"].is_string().then_some(())
        })
        .await;
    }
    let week = stack.get("/api/workers/probe-1/history?days=7").await.expect("the history");
    assert_eq!(
        (week["runs"].clone(), week["succeeded"].clone(), week["failed"].clone()),
        (json!(4), json!(3), json!(1))
    );
    // Four steps each: the results' `processed` of the three successes, the last progress of the failure.
    assert_eq!(week["items"], 16, "{week}");

    let browser = stack.open_panel("history").await;
    open_cards(&browser, &["probe-1"]).await;
    let card = "#history-probe-1";
    browser.click(&format!("{card} summary")).await;
    let bars = format!("{card} figure[data-chart=\"items\"] rect.bar");
    browser.wait_for(&bars).await;
    assert_eq!(browser.find_all(&bars).await.len(), 7, "one bar per day");
    let today = week["per_day"][6]["day"].as_str().expect("today").to_owned();
    let last = format!("{bars}[data-key=\"{today}\"]");
    assert_eq!(browser.attr(&last, "data-value").await.as_deref(), Some("16"));
    let values = browser
        .js(&format!("return [...document.querySelectorAll('{bars}')].map((b) => Number(b.dataset.value));"), vec![])
        .await;
    assert_eq!(values, json!([0, 0, 0, 0, 0, 0, 16]), "no items before today");
    // The day's title says it in words (a tooltip, and what a screen reader reads).
    let tip = browser.js(&format!("return document.querySelector('{last} title').textContent;"), vec![]).await;
    assert!(tip.as_str().is_some_and(|t| t.ends_with(": 16 items")), "{tip}");
    let stack_of_today = format!("{card} figure[data-chart=\"outcomes\"] g.stack[data-key=\"{today}\"]");
    assert_eq!(browser.attr(&stack_of_today, "data-total").await.as_deref(), Some("4"));
    let parts = browser.find_all(&format!("{stack_of_today} rect.segment")).await.len();
    assert_eq!(parts, 2, "succeeded and failed");
    assert_eq!(browser.find_all(&format!("{card} figure[data-chart=\"outcomes\"] g.stack")).await.len(), 7);
    assert_eq!(
        browser.attr(&format!("{card} g.meter[data-key=\"rate\"]"), "data-value").await.as_deref(),
        Some("0.75")
    );
    let text = browser.text(&format!("{card} figure[data-chart=\"success\"]")).await.unwrap_or_default();
    assert!(text.contains("75.0 %"), "the rate in words: {text:?}");
    for key in ["p50", "p95"] {
        let shown = browser.attr(&format!("{card} g.meter[data-key=\"{key}\"]"), "data-value").await;
        assert_eq!(shown, week["durations"][format!("{key}_ms")].as_i64().map(|v| v.to_string()), "{key}");
    }
    assert!(browser.find(&format!("{card} svg[role=\"img\"] title")).await.is_some(), "each chart is titled");
    // What the runs cost: each reported 1200 tokens in, 300 out and 0.0042 EUR, failed or not, and 4 items.
    assert_eq!((week["usage"]["runs"].clone(), week["usage"]["tokens_in"].clone()), (json!(4), json!(4800)), "{week}");
    assert_eq!(browser.find_all(&format!("{card} figure[data-chart=\"cpu\"] rect.bar")).await.len(), 7);
    let usage = format!("{card} table[data-chart=\"usage\"]");
    let cell = |day: &str, field: &str| format!("{usage} tr[data-day=\"{day}\"] td[data-field=\"{field}\"]");
    assert_eq!(browser.text(&cell(&today, "tokens")).await.as_deref(), Some("4,800 in\n1,200 out"));
    assert_eq!(browser.text(&cell("window", "cost")).await.as_deref(), Some("0.0168 EUR"));
    let window = format!("{usage} tr[data-day=\"window\"]");
    assert_eq!(browser.attr(&window, "data-runs").await.as_deref(), Some("4"));
    let per_item = browser.text(&format!("{usage} tr.per-item[data-day=\"window\"] td")).await.unwrap_or_default();
    assert!(per_item.starts_with("300 tokens in, 75 out · 0.00105 EUR · "), "{per_item:?}");
    browser.js(&format!("document.querySelector('{card}').scrollIntoView();"), vec![]).await;
    docs_screenshot(&browser, "worker-history").await;

    // Thirty days: thirty bars, today's the same.
    browser.click(&format!("{card} input[value=\"30\"]")).await;
    browser.wait_for(&format!("{card}[data-days=\"30\"]")).await;
    assert_eq!(browser.find_all(&bars).await.len(), 30);
    assert_eq!(browser.attr(&last, "data-value").await.as_deref(), Some("16"));

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
