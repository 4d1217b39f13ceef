//! An operator's schedules and pipelines: a schedule made through a worker's card with its live preview, paused
//! with a reason; a pipeline run with each step's run, a 409 and a cancel; and a retried run's chain.

use reqwest::StatusCode;
use scrinalia_tests::Kind;
use serde_json::json;

use super::{
    open_cards, press_disabled,
    stack::{Access, Stack},
};

/// An operator schedules a worker through its card's form (the live preview shows three fire times, a bad
/// expression the API's sentence under the field), sees it listed with its next fires, pauses it with a reason; a
/// schedule made elsewhere reaches its card live. A pipeline is run from its card and its run shows each step's
/// run; a second run while one is in flight shows the 409 sentence, and the run in flight is cancelled from its
/// detail. A run that is retried shows its chain and when the retry waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_schedules_a_worker_with_a_live_preview_and_runs_a_pipeline() {
    let stack = Stack::start(Kind::Sqlite, Access::AnonymousAdmin).await;
    let browser = stack.open_panel("schedules").await;
    browser.wait_for("#who[data-role=\"admin\"]").await;
    open_cards(&browser, &["probe-1", "probe-2"]).await;
    let card = "article[data-worker=\"probe-1\"]";
    browser.wait_for_text(&format!("{card} section.schedules"), "No schedule.").await;

    // The form's live preview: the API's sentence under the field for a bad expression, three times for a good one.
    browser.click(&format!("{card} details.schedule-new summary")).await;
    browser.type_into("#worker-probe-1-sched-cron", "61 * * * *").await;
    let error = browser.wait_for_text("#worker-probe-1-sched-cron-error", "minute 61 is out of range").await;
    assert!(error.contains("61 * * * *"), "the sentence names the expression: {error:?}");
    browser.type_into("#worker-probe-1-sched-cron", "0 3 * * *").await;
    browser.type_into("#worker-probe-1-sched-zone", "Europe/Berlin").await;
    let previewed = browser
        .wait("three fire times in the preview", || async {
            let times = browser.find_all("#worker-probe-1-sched-preview ol.upcoming li").await;
            let text = browser.text("#worker-probe-1-sched-preview").await?;
            (times.len() == 3 && text.contains("Europe/Berlin")).then_some(text)
        })
        .await;
    assert!(previewed.contains("03:00:00 Europe/Berlin"), "the fires in the schedule's zone: {previewed:?}");
    assert_eq!(browser.attr("#worker-probe-1-sched-cron-error", "hidden").await.as_deref(), Some("true"));
    browser.screenshot("schedule-form").await;
    browser.type_into("#worker-probe-1-sched-name", "nightly-probe").await;
    browser.type_into("#worker-probe-1-sched-opt-duration_ms", "500").await;
    browser.click(&format!("{card} .schedule-form button[type=\"submit\"]")).await;
    browser.wait_for_text("#worker-probe-1-sched-alert", "Give a reason").await;
    browser.type_into("#worker-probe-1-sched-reason", "e2e: a nightly probe").await;
    browser.click(&format!("{card} .schedule-form button[type=\"submit\"]")).await;

    // Listed in the worker's card, with its next three fires as the server computed them.
    let item = format!("{card} li.schedule[data-schedule=\"nightly-probe\"]");
    let listed = browser.wait_for_text(&format!("{item}[data-enabled=\"true\"]"), "0 3 * * *").await;
    for part in ["Europe/Berlin", "enabled", "duration_ms=500", "overlap skip", "Not fired yet."] {
        assert!(listed.contains(part), "{part:?} is missing from {listed:?}");
    }
    assert_eq!(browser.find_all(&format!("{item} ol.upcoming li")).await.len(), 3, "three fire times");
    let shown = stack.get("/api/schedules/nightly-probe").await.expect("the schedule");
    let first = browser.attr(&format!("{item} ol.upcoming li"), "data-at").await;
    assert_eq!(first.as_deref(), shown["upcoming"][0].as_str(), "the server's fire times");
    browser.screenshot("schedule-listed").await;

    // Paused with a reason, asked for as the override form asks for one.
    browser.click(&format!("{item} button.schedule-pause")).await;
    browser.click(&format!("{item} form.schedule-reason button[type=\"submit\"]")).await;
    browser.wait_for_text(&format!("{item} .alert"), "Give a reason").await;
    browser.type_into(&format!("{item} .reason-input"), "e2e: not tonight").await;
    browser.click(&format!("{item} form.schedule-reason button[type=\"submit\"]")).await;
    let paused = browser.wait_for_text(&format!("{item}[data-enabled=\"false\"]"), "paused").await;
    assert!(paused.contains("nothing fires until resumed"), "{paused:?}");
    assert!(browser.find(&format!("{item} button.schedule-resume")).await.is_some(), "Resume is offered");
    let audit = stack.get("/api/schedules/nightly-probe/audit").await.expect("the audit trail");
    assert_eq!((audit[0]["action"].as_str(), audit[0]["reason"].as_str()), (Some("pause"), Some("e2e: not tonight")));

    // A schedule made elsewhere reaches its worker's card by itself (a `schedule` event).
    let made = json!({"name": "made-elsewhere", "worker": "probe-2", "cron": "@daily", "reason": "e2e: by the API"});
    let (status, body) = stack.post("/api/schedules", made).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    browser.wait_for("article[data-worker=\"probe-2\"] li.schedule[data-schedule=\"made-elsewhere\"]").await;

    // A pipeline run from its card: its detail lists each step with its run.
    browser.click("nav.views a[data-nav=\"pipelines\"]").await;
    let pipeline = "article[data-pipeline=\"probes\"]";
    let steps = browser.wait_for_text(&format!("{pipeline} ol.steps"), "probe-2").await;
    assert!(steps.contains("probe-1"), "{steps:?}");
    browser.wait_for_text(&format!("{pipeline} .last"), "Never run.").await;
    browser.click(&format!("{pipeline} button.run")).await;
    browser.click(&format!("{pipeline} .last a")).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    for step in ["0", "1"] {
        browser.wait_for(&format!("#pipeline-steps tr[data-step=\"{step}\"][data-state=\"succeeded\"] a")).await;
    }
    let rows = browser.text("#pipeline-steps tbody").await.unwrap_or_default();
    assert!(rows.contains("probe-1") && rows.contains("probe-2"), "both steps: {rows:?}");
    browser.screenshot("pipeline-run").await;
    // A step's run says which pipeline run and step it is.
    browser.click("#pipeline-steps tr[data-step=\"1\"] a").await;
    let lineage = browser.wait_for_text("#run-lineage", "step 2").await;
    assert!(lineage.contains("pipeline run"), "{lineage:?}");

    // A run in flight (started elsewhere): Run is disabled with the reason; a stale panel that presses it anyway
    // gets the 409 sentence, and the run in flight is cancelled from its detail.
    let long = json!({"arguments": {"probe-1": {"options": {"duration_ms": 30000}}}});
    let (status, body) = stack.post("/api/pipelines/probes/runs", long).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    browser.click("nav.views a[data-nav=\"pipelines\"]").await;
    browser.wait_for_text(&format!("{pipeline} .reason"), "in flight").await;
    let run_button = format!("{pipeline} button.run");
    assert_eq!(browser.is_enabled(&run_button).await, Some(false), "Run is disabled");
    press_disabled(&browser, &run_button).await;
    let alert = browser.wait_for_text("#pipeline-probes-alert", "already has a run in flight").await;
    assert!(alert.contains(body["id"].as_str().expect("its id")), "the 409 names the run in flight: {alert:?}");
    browser.click("#pipeline-probes-alert a").await;
    browser.wait_for(".view-head[data-state=\"running\"]").await;
    browser.click("#pipeline-cancel").await;
    browser.wait_for(".view-head[data-state=\"cancelled\"]").await;

    // A run that fails is retried after a backoff: both attempts show the chain, the retry when it may start.
    let failing = json!({"options": {"exit_code": 3, "duration_ms": 20},
        "retry": {"max_attempts": 2, "initial_delay_seconds": 120}});
    let (status, run) = stack.post("/api/workers/probe-3/runs", failing).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    browser.goto(&format!("{}/#/runs/{}", stack.base, run["id"].as_str().expect("id"))).await;
    browser
        .wait("the retry in the chain", || async { (browser.find_all("#run-chain li").await.len() == 2).then_some(()) })
        .await;
    browser.wait_for_text("#run-lineage", "1 of 2").await;
    browser.click("#run-chain li[data-attempt=\"2\"] a").await;
    let retry = browser.wait_for_text("#run-lineage", "2 of 2").await;
    assert!(retry.contains("waits until") && retry.contains("this run"), "{retry:?}");
    browser.screenshot("run-retry-chain").await;

    browser.assert_no_console_errors(&[400, 409]).await;
    browser.close().await;
    stack.stop().await;
}
