//! A curator's visit with anonymous admin access: the workers in catalogue order with where each value comes
//! from, a run watched live to its end (progress, the 409 of a second press, the chores), the runs view and a
//! run's detail and log, a run with explicit arguments, a cancel, and the last daemon stopping.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::Browser};
use serde_json::json;

use super::{
    DISAGREEMENTS, NOT_READY, open_cards, press_disabled,
    stack::{Access, Stack},
};

/// The value of the `<progress>` bar of `worker`'s run in flight, if it shows one with a known total.
async fn progress_of(browser: &Browser, worker: &str) -> Option<f64> {
    let bar =
        browser.find(&format!("article[data-worker={worker:?}] .in-flight[data-state=\"running\"] progress")).await?;
    bar.attr("max").await.ok()??;
    // `value` reflects the bar's property as an attribute (WebDriver's property call returns only strings).
    bar.attr("value").await.ok()??.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_runs_a_worker_and_watches_it_to_the_end_without_a_reload() {
    let stack = Stack::start(Kind::Postgres, Access::AnonymousAdmin).await;
    // A long run to watch, with many progress steps: the probe's own defaults end it in 200 ms.
    let long = json!({"options": {"duration_ms": 9000, "progress_steps": 18, "output_lines": 3},
        "reason": "e2e: a run long enough to watch"});
    let (status, body) = stack.send(reqwest::Method::PUT, "/api/workers/probe-1/override", long).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let browser = stack.open_panel("curator").await;

    // Workers in catalogue order, each value marked with where it comes from.
    browser.wait_for("#who[data-role=\"admin\"]").await;
    open_cards(&browser, &["probe-1", "probe-2", "probe-3"]).await;
    let order = browser
        .js("return [...document.querySelectorAll('article.worker')].map((a) => a.dataset.worker);", vec![])
        .await;
    assert_eq!(order, json!(["probe-1", "probe-2", "probe-3"]), "catalogue order");
    let engine = browser.text("article[data-worker=\"probe-1\"] dd[data-field=\"engine\"]").await.unwrap_or_default();
    assert!(engine.contains("local") && engine.contains("default"), "engine with its source: {engine:?}");
    let model = browser.text("article[data-worker=\"probe-1\"] dd[data-field=\"model\"]").await.unwrap_or_default();
    assert!(model.contains("tiny-model"), "model: {model:?}");
    browser.wait_for_text("article[data-worker=\"probe-2\"] dd[data-field=\"engine\"]", "external").await;
    browser.wait_for_text("article[data-worker=\"probe-2\"] .engine-source", "LLM_CHECK cleaning rule").await;
    let tags = browser.text("article[data-worker=\"probe-2\"] .tags").await.unwrap_or_default();
    assert!(tags.contains("quality") && tags.contains("cleaning rules"), "axis and governance: {tags:?}");

    // The health strip and the queue snapshot the daemon measured (with its age).
    browser.wait_for("#health li[data-check=\"database\"][data-status=\"ok\"]").await;
    browser.wait_for("#health li[data-check=\"daemons\"][data-status=\"ok\"]").await;
    let model_server =
        browser.wait_for_text("#health li[data-check^=\"model_server\"][data-status=\"down\"]", "Model server").await;
    assert!(model_server.len() > "Model server ollama".len() + 5, "a red check says why: {model_server:?}");
    browser.wait_for_text("article[data-worker=\"probe-1\"] .queue", "pending").await;
    browser.wait_for_text("article[data-worker=\"probe-1\"] .queue", "measured").await;

    // What each probe's code said: readiness, where its catalogue entry disagrees, and its description.
    let ready = browser.wait_for_text("article[data-worker=\"probe-1\"] .readiness-line", "ready").await;
    assert!(ready.contains("checked") && ready.contains("by daemon"), "when and by whom: {ready:?}");
    assert!(browser.find("article[data-worker=\"probe-1\"] .badge.readiness[data-ready=\"ready\"]").await.is_some());
    assert!(browser.find("article[data-worker=\"probe-1\"] .disagreements").await.is_none(), "probe-1 agrees");
    let not_ready = browser.wait_for_text("article[data-worker=\"probe-3\"] .readiness-line", NOT_READY).await;
    assert!(not_ready.contains("not ready"), "{not_ready:?}");
    let disagreements = browser.wait_for_text("article[data-worker=\"probe-3\"] .disagreements", "code wins").await;
    for sentence in DISAGREEMENTS {
        assert!(disagreements.contains(sentence), "{sentence:?} is missing from {disagreements:?}");
    }
    let described = browser.wait_for_text("article[data-worker=\"probe-1\"] .described", "Code described").await;
    assert!(described.contains("by daemon"), "by which daemon: {described:?}");
    // The code's bounds guide the number fields.
    let exit_code = "#worker-probe-1-opt-exit_code";
    browser.wait_for(exit_code).await;
    let bounds = (browser.attr(exit_code, "min").await, browser.attr(exit_code, "max").await);
    assert_eq!(bounds, (Some("0".to_owned()), Some("255".to_owned())), "min and max of exit_code");

    // Run is enabled once the panel knows a daemon is alive.
    let run_button = "article[data-worker=\"probe-1\"] button.run";
    browser
        .wait("the Run button of probe-1 to be enabled", || async {
            browser.is_enabled(run_button).await?.then_some(())
        })
        .await;
    browser.screenshot("workers").await;
    browser.js("window.__e2eNoReload = 'still the same page'; return true;", vec![]).await;

    // Press Run: the run appears in flight and its progress bar moves.
    browser.click(run_button).await;
    let first = browser
        .wait("probe-1's progress bar to show progress", || async {
            progress_of(&browser, "probe-1").await.filter(|v| *v > 0.0)
        })
        .await;
    browser
        .wait("probe-1's progress bar to move", || async {
            progress_of(&browser, "probe-1").await.filter(|v| *v > first)
        })
        .await;
    let text = browser.text("article[data-worker=\"probe-1\"] .progress-text").await.unwrap_or_default();
    assert!(text.contains("/ 18") && text.contains("per s"), "done / total and rate: {text:?}");
    browser.screenshot("workers-running").await;

    // While it runs, Run is disabled with the reason; a stale panel that presses it anyway (as two curators at
    // once would) gets the API's 409 sentence next to the worker, in an alert.
    assert_eq!(browser.is_enabled(run_button).await, Some(false), "Run is disabled");
    browser.wait_for_text("article[data-worker=\"probe-1\"] .reason", "already running").await;
    press_disabled(&browser, run_button).await;
    let alert = browser.wait_for_text("#worker-probe-1-alert", "already has a run in flight").await;
    assert!(alert.contains("probe-1"), "the 409 sentence names the worker: {alert:?}");
    assert_eq!(browser.attr("#worker-probe-1-alert", "role").await.as_deref(), Some("alert"));
    assert!(browser.find("article[data-worker=\"probe-1\"] .in-flight button.cancel").await.is_some(), "Cancel");
    browser.screenshot("workers-409").await;

    // The chores: each button shows the API's sentence, and what the daemon then stores reaches the card by
    // itself (a `worker` event), without a reload.
    browser.click("article[data-worker=\"probe-1\"] button.chore-count").await;
    let asked = browser.wait_for_text("#worker-probe-1-chore-message", "A count of the queue of probe-1").await;
    assert!(asked.contains("within a few seconds"), "a daemon takes it: {asked:?}");
    let described_at = || browser.attr("article[data-worker=\"probe-3\"] .described", "data-described-at");
    let before = described_at().await.expect("probe-3 was described");
    browser.click("article[data-worker=\"probe-3\"] button.chore-describe").await;
    browser.wait_for_text("#worker-probe-3-chore-message", "A description of probe-3 was asked for").await;
    browser
        .wait("probe-3's new description on its card", || async { described_at().await.filter(|at| *at != before) })
        .await;
    let checked_at = || browser.attr("article[data-worker=\"probe-3\"] .readiness-line", "data-checked-at");
    let before = checked_at().await.expect("probe-3 was checked");
    browser.click("article[data-worker=\"probe-3\"] button.chore-check").await;
    browser.wait_for_text("#worker-probe-3-chore-message", "A check of probe-3 was asked for").await;
    browser.wait("probe-3's new check on its card", || async { checked_at().await.filter(|at| *at != before) }).await;
    browser.wait_for_text("article[data-worker=\"probe-3\"] .readiness-line", NOT_READY).await;
    browser.js("document.querySelector('#worker-probe-3-chore-message').scrollIntoView(); return true;", vec![]).await;
    browser.screenshot("workers-chores").await;

    // The runs view, reached by the navigation (no reload), shows it running, then succeeded: live.
    browser.click("nav.views a[data-nav=\"runs\"]").await;
    let row = "#ledger tr[data-worker=\"probe-1\"]";
    let seen = browser.wait("probe-1's run in the ledger", || browser.attr(row, "data-state")).await;
    assert_eq!(seen, "running", "the run is seen in flight first\n{}", stack.logs());
    browser.wait_for(&format!("{row}[data-state=\"succeeded\"]")).await;
    let cells = browser.text(row).await.unwrap_or_default();
    assert!(cells.contains("processed 18") && cells.contains(" s"), "outcome and duration: {cells:?}");
    let marker = browser.js("return window.__e2eNoReload ?? null;", vec![]).await;
    assert_eq!(marker, json!("still the same page"), "the page was not reloaded");
    browser.screenshot("runs").await;

    // Its detail: resolved configuration with sources, result counts, daemon, and the whole log.
    browser.click(&format!("{row} td:last-child a")).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    browser.wait_for_text("#run-log", "probe-1: stdout line 3 of 3").await;
    browser.wait_for_text("#log-state", "complete").await;
    let config = browser.text("tr[data-field=\"duration_ms\"]").await.unwrap_or_default();
    assert!(config.contains("9000") && config.contains("override"), "resolved option with its source: {config:?}");
    // Beside the resolved model, the one the probe reported it used: the same one here.
    let model = browser.text("#run-config tr[data-field=\"model\"]").await.unwrap_or_default();
    assert_eq!(model.matches("tiny-model").count(), 2, "resolved and reported: {model:?}");
    assert!(browser.find("#run-config tr[data-differs=\"true\"]").await.is_none(), "nothing differs");
    let counts = browser.text("table.counts").await.unwrap_or_default();
    assert!(counts.contains("processed") && counts.contains("18"), "result counts: {counts:?}");
    let facts = browser.text("dl.facts").await.unwrap_or_default();
    assert!(facts.contains("Daemon") && facts.contains(" on "), "the daemon and its host: {facts:?}");
    browser.screenshot("run-detail").await;

    // Run with explicit arguments from the form, then follow that run's log live from its detail view.
    browser.click("nav.views a[data-nav=\"workers\"]").await;
    browser.click("article[data-worker=\"probe-3\"] details.run-options summary").await;
    // A value out of the option's bounds: the API refuses it with a sentence, shown like any refusal.
    browser.type_into("#worker-probe-3-opt-output_lines", "-1").await;
    browser.click("article[data-worker=\"probe-3\"] .run-form button[type=\"submit\"]").await;
    browser.wait_for_text("#worker-probe-3-alert", "Option \"output_lines\" must be at least 0, not -1.").await;
    browser.type_into("#worker-probe-3-opt-duration_ms", "3000").await;
    browser.type_into("#worker-probe-3-opt-output_lines", "4").await;
    browser.click("article[data-worker=\"probe-3\"] .run-form button[type=\"submit\"]").await;
    browser.click("article[data-worker=\"probe-3\"] .in-flight a").await;
    browser.wait_for("#run-log[data-following=\"true\"]").await;
    browser.wait_for_text("#run-log", "probe-3: stdout line 4 of 4").await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    browser.wait_for_text("#log-state", "complete").await;
    let explicit = browser.text("tr[data-field=\"duration_ms\"]").await.unwrap_or_default();
    assert!(explicit.contains("3000") && explicit.contains("explicit"), "an explicit argument: {explicit:?}");

    // The ledger's filters: only probe-3's run.
    browser.goto(&format!("{}/#/runs?worker=probe-3", stack.base)).await;
    browser.wait_for("#ledger tr[data-worker=\"probe-3\"][data-state=\"succeeded\"]").await;
    assert!(browser.find("#ledger tr[data-worker=\"probe-1\"]").await.is_none(), "the worker filter applies");

    // Cancel from the panel: the run in flight ends `cancelled`.
    browser.click("nav.views a[data-nav=\"workers\"]").await;
    browser
        .wait("Run of probe-1 to be enabled again", || async { browser.is_enabled(run_button).await?.then_some(()) })
        .await;
    browser.click(run_button).await;
    browser.click("article[data-worker=\"probe-1\"] .in-flight[data-state=\"running\"] button.cancel").await;
    browser.wait_for("article[data-worker=\"probe-1\"] .last[data-state=\"cancelled\"]").await;

    // When the last daemon stops, Run is disabled with the reason and the health strip turns red.
    stack.daemon.signal(nix::sys::signal::Signal::SIGTERM);
    browser.wait_for_text("article[data-worker=\"probe-3\"] .reason", "No daemon is alive").await;
    assert_eq!(browser.is_enabled(run_button).await, Some(false), "Run is disabled");
    browser.wait_for("#health li[data-check=\"daemons\"][data-status=\"down\"]").await;
    browser.screenshot("workers-no-daemon").await;

    let allowed = browser.assert_no_console_errors(&[409, 400]).await;
    assert_eq!(allowed.len(), 2, "exactly the provoked 409 and 400 were logged: {allowed:#?}");
    browser.close().await;
    stack.stop().await;
}
