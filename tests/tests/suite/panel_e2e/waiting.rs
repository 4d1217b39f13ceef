//! An operator after a daemon stopped: two runs it cut short with their checkpoints, one resumed and one restarted
//! from their run pages; the new runs queued with no daemon left, each saying why on its run page and on its
//! worker's card; a pipeline run whose first step waits for one of them, saying so on its page.

use std::time::Duration;

use nix::sys::signal::Signal;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::{Value, json};

use super::stack::{Access, Stack};

/// The sentence of `no_daemon`, as `GET /api/runs/{id}` says it.
const NO_DAEMON: &str = "No daemon is running; it starts when one does.";

/// A long run of `worker` that reports a checkpoint every two seconds; returns its id once one is stored.
async fn checkpointed_run(stack: &Stack, worker: &str) -> String {
    let long = json!({"options": {"duration_ms": 60_000, "checkpoints": 30}});
    let (status, run) = stack.post(&format!("/api/workers/{worker}/runs"), long).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    eventually(PATIENCE, &format!("a checkpoint of {worker}'s run"), || async {
        stack.get(&format!("/api/runs/{id}")).await?["checkpoint_at"].is_string().then_some(())
    })
    .await;
    id
}

/// Opens run `id` and continues it with the button of `how` (`resume` or `restart`); returns the new run's id,
/// once its page shows it queued, continuing `id`, with the reason it waits.
async fn continue_from_its_page(
    stack: &Stack,
    browser: &scrinalia_tests::browser::Browser,
    id: &str,
    how: &str,
) -> String {
    browser.goto(&format!("{}/#/runs/{id}", stack.base)).await;
    browser.wait_for(".view-head[data-state=\"interrupted\"]").await;
    for button in ["resume", "restart"] {
        let selector = format!(".run-summary button.{button}");
        browser.wait_for(&selector).await;
        assert_eq!(browser.is_enabled(&selector).await, Some(true), "{button} is offered on {id}");
    }
    browser.screenshot(&format!("interrupted-{how}")).await;
    browser.click(&format!(".run-summary button.{how}")).await;
    let new = browser
        .wait("the new run's page", || async {
            let url = browser.client.current_url().await.ok()?;
            let next = url.fragment()?.strip_prefix("/runs/")?.to_owned();
            (next != id).then_some(next)
        })
        .await;
    browser.wait_for(".view-head[data-state=\"queued\"]").await;
    let waiting = browser.wait_for_text(".run-summary span.waiting[data-code=\"no_daemon\"]", NO_DAEMON).await;
    assert_eq!(waiting, NO_DAEMON);
    // The chain: the cut run, then this one continuing it.
    browser
        .wait("both runs in the chain", || async { (browser.find_all("#run-chain li").await.len() == 2).then_some(()) })
        .await;
    let first = browser.text(&format!("#run-chain li[data-run=\"{id}\"]")).await.unwrap_or_default();
    assert!(first.contains("interrupted"), "{first:?}");
    let this = browser.text(&format!("#run-chain li[data-run=\"{new}\"]")).await.unwrap_or_default();
    assert!(this.contains("(this run)") && this.contains(&format!("({how})")), "{this:?}");
    let summary = browser.text(".run-summary").await.unwrap_or_default();
    assert!(summary.contains(&format!("{} ({how})", &id[..8])), "Continues names the cut run: {summary:?}");
    let shown = stack.get(&format!("/api/runs/{new}")).await.expect("the new run");
    assert_eq!((shown["follows"].as_str(), shown["follows_as"].as_str()), (Some(id), Some(how)), "{shown}");
    browser.screenshot(&format!("{how}-waiting")).await;
    new
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_daemon_stops_cut_runs_are_continued_and_queued_runs_say_why_they_wait() {
    let mut stack = Stack::start(Kind::Postgres, Access::AnonymousAdmin).await;
    let one = checkpointed_run(&stack, "probe-1").await;
    let two = checkpointed_run(&stack, "probe-2").await;

    // Two signals: the daemon stops its runs now (they end `interrupted`, their checkpoints kept) and exits.
    stack.daemon.signal(Signal::SIGTERM);
    stack.daemon.wait_for("signal received", Duration::from_secs(10)).await.expect("the first signal");
    stack.daemon.signal(Signal::SIGTERM);
    stack.daemon.wait(PATIENCE).await;
    eventually(PATIENCE, "both runs interrupted and no daemon alive", || async {
        for id in [&one, &two] {
            (stack.get(&format!("/api/runs/{id}")).await?["state"] == "interrupted").then_some(())?;
        }
        let daemons = stack.get("/api/daemons").await?;
        daemons["daemons"].as_array()?.iter().all(|d| d["state"] == "gone").then_some(())
    })
    .await;

    let browser = stack.open_panel("waiting").await;
    let resumed = continue_from_its_page(&stack, &browser, &one, "resume").await;
    let restarted = continue_from_its_page(&stack, &browser, &two, "restart").await;

    // Each worker's card says why its queued run waits, in the same words, with the code to match on.
    browser.goto(&format!("{}/#/workers", stack.base)).await;
    super::open_cards(&browser, &["probe-1", "probe-2"]).await;
    for (worker, run) in [("probe-1", &resumed), ("probe-2", &restarted)] {
        let card = format!("article[data-worker=\"{worker}\"] .in-flight[data-run=\"{run}\"]");
        let line = browser.wait_for_text(&format!("{card} p.waiting[data-code=\"no_daemon\"]"), NO_DAEMON).await;
        assert_eq!(line, NO_DAEMON, "{worker}'s card");
        let text = browser.text(&card).await.unwrap_or_default();
        assert!(!text.to_lowercase().contains("waiting for a daemon"), "the reason, not generic words: {text:?}");
    }
    let api: Value = stack.get("/api/workers").await.expect("the workers");
    let card = api["workers"].as_array().and_then(|w| w.iter().find(|w| w["name"] == "probe-1")).cloned();
    assert_eq!(card.as_ref().map(|c| c["waiting"]["code"].clone()), Some(json!("no_daemon")), "{card:?}");
    browser.screenshot("cards-waiting").await;

    // A pipeline run whose first step's worker has the resumed run queued: the step waits for it, and says so.
    let (status, started) = stack.post("/api/pipelines/probes/runs", json!({})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{started}");
    assert!(started["current_run"].is_null(), "the step is not requested while probe-1 is busy: {started}");
    browser.goto(&format!("{}/#/pipelines/runs/{}", stack.base, started["id"].as_str().expect("an id"))).await;
    let line =
        browser.wait_for_text("#pipeline-waiting[data-code=\"pipeline_step\"]", "waits for worker probe-1").await;
    assert!(
        line.contains(&format!("run {resumed} (queued)")) && line.contains("That run is queued: No daemon is running"),
        "{line:?}"
    );
    browser.click("#pipeline-waiting a").await;
    browser.wait_for(&format!(".view-head[data-state=\"queued\"] code[title=\"{resumed}\"]")).await;
    browser.screenshot("pipeline-step-waiting").await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
