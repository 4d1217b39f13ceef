//! A run's items in the panel, and a worker's quarantine, against the real API and daemon with an operator's
//! token (`otto`): the probe of `scrinalia-demo-worker` reports 120 items, every second one failed in three
//! classes in turn.
//!
//! On PostgreSQL, the run's page counts the outcomes by class, lists the failed items 50 at a time with a search on
//! the id, and its Rerun failures shows the API's 409 sentence while another run of the worker is in flight, then
//! makes the scoped rerun and goes to it; a run without failures, and a worker whose describe lacks the `scope`
//! capability, have the button disabled with the sentence saying why.
//!
//! On SQLite, with `quarantine_after = 1`, one failing run quarantines its failed documents: the worker card says
//! how many (its readiness colour unchanged) and links to the quarantine, which lists each document with its
//! streak and last error; a release needs a reason, removes the document and is listed with who and why; Release
//! all empties it, and the card no longer mentions a quarantine. The run that skipped them links there too.
//!
//! On SQLite, a long run that reports items before each checkpoint is counted on its worker's card while it runs
//! ("90 items · 300/min"): the workers list says so (`running_items`), and the card reads it again while the run
//! goes on, though a checkpoint there makes no event. A run that resumes one which crashed says, under its own
//! counts, what the whole resume chain failed ("Across the resume chain of 2 runs: 4 failed (…)").

use reqwest::{Method, StatusCode};
use scrinalia_testkit::config::worker;
use scrinalia_tests::{
    Kind,
    browser::{Browser, PATIENCE},
    daemon_harness::probe,
    demo_worker, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

use super::{open_cards, sign_in};

/// A worker that reports items but whose describe does not say it takes a scope: one document succeeds, one
/// fails. Run through `sh -c`, so the daemon's verb is `$1`.
const NO_SCOPE_WORKER: &str = r#"case "$1" in
  describe) echo '{"capabilities": {"items": true}}' ;;
  check) echo '{"ready": true}' ;;
  count-pending) echo '{"pending": 0}' ;;
  run)
    echo '{"item": {"id": "doc-0001", "outcome": "succeeded"}}'
    echo '{"item": {"id": "doc-0002", "outcome": "failed", "class": "ocr_empty", "error": "The OCR text is empty."}}'
    echo '{"result": {"processed": 2}}' ;;
  *) exit 2 ;;
esac"#;

async fn get(system: &System, path: &str) -> Value {
    system.http(Method::GET, path, VIEWER, None).await.expect("an answer").expect(StatusCode::OK, None)
}

async fn post(system: &System, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = system.http(Method::POST, path, OPERATOR, body).await.expect("an answer");
    (reply.status, reply.json())
}

/// Waits until `worker`'s code has described itself (its options and capabilities are known from then on).
async fn described(system: &System, worker: &str) {
    eventually(PATIENCE, "the worker to be described", || async {
        let w = system.http(Method::GET, &format!("/api/workers/{worker}"), VIEWER, None).await.ok()?.json();
        w["described"]["described_at"].as_str().map(drop)
    })
    .await;
}

/// Queues a run of `worker` with `options`; its id.
async fn start(system: &System, worker: &str, options: Value) -> String {
    let (status, run) = post(system, &format!("/api/workers/{worker}/runs"), Some(json!({ "options": options }))).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    run["id"].as_str().expect("a run id").to_owned()
}

/// Waits for run `id` to end; its detail.
async fn ended(system: &System, id: &str) -> Value {
    eventually(PATIENCE, "the run to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        run["finished_at"].is_string().then_some(run)
    })
    .await
}

/// Runs `worker` with `options` to its end; its detail.
async fn run(system: &System, worker: &str, options: Value) -> Value {
    let id = start(system, worker, options).await;
    ended(system, &id).await
}

/// The ids of the rows of the failed items' table.
async fn shown_items(browser: &Browser) -> Vec<String> {
    let script = "return [...document.querySelectorAll('#failed-items tbody tr')].map((tr) => tr.dataset.item);";
    serde_json::from_value(browser.js(script, vec![]).await).expect("a list of ids")
}

/// Waits until the failed items' table shows `n` rows.
async fn wait_rows(browser: &Browser, n: usize) -> Vec<String> {
    browser
        .wait(&format!("{n} failed items on the page"), || async {
            let ids = shown_items(browser).await;
            (ids.len() == n).then_some(ids)
        })
        .await
}

/// Waits until Rerun failures is enabled.
async fn rerun_enabled(browser: &Browser) {
    browser
        .wait("Rerun failures to be enabled", || async { browser.is_enabled("#rerun-failed").await?.then_some(()) })
        .await;
}

/// Waits until `n` elements match `css`.
async fn wait_count(browser: &Browser, css: &str, n: usize) {
    browser.wait(&format!("{n} of {css:?}"), || async { (browser.find_all(css).await.len() == n).then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_failures_are_counted_by_class_listed_and_rerun_from_its_page() {
    let mut no_scope = worker("no-scope", &["/bin/sh", "-c", NO_SCOPE_WORKER, "sh"]);
    no_scope.timeout_seconds = 60;
    let probe = probe(&demo_worker(), "probe-1", 120);
    let system = System::start(Kind::Postgres, |c| c.worker(probe).worker(no_scope)).await;
    described(&system, "probe-1").await;
    described(&system, "no-scope").await;
    let first = run(&system, "probe-1", json!({"items": 120, "failed_every": 2})).await;
    assert_eq!(first["state"], "succeeded", "failed items do not fail the run: {first}");
    assert_eq!((first["items"]["failed"].as_i64(), first["items"]["succeeded"].as_i64()), (Some(60), Some(60)));
    let id = first["id"].as_str().expect("an id").to_owned();
    let clean = run(&system, "probe-1", json!({"items": 10})).await;
    let clean = clean["id"].as_str().expect("an id").to_owned();
    let scopeless = run(&system, "no-scope", json!({})).await;
    assert_eq!(scopeless["items"]["failed"], 1, "{scopeless}");
    let scopeless = scopeless["id"].as_str().expect("an id").to_owned();

    let browser = Browser::start("items", system.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/runs/{id}", system.api_url)).await;
    sign_in(&browser, OPERATOR, "operator").await;

    // The counts by outcome, each with its classes, largest first.
    let failed = browser.wait_for_text("#item-counts li[data-outcome=\"failed\"]", "60 failed").await;
    assert_eq!(failed, "60 failed: 20 ctx_overflow, 20 ocr_empty, 20 timeout");
    assert_eq!(browser.text("#item-counts li[data-outcome=\"succeeded\"]").await.as_deref(), Some("60 succeeded"));

    // The failed items, 50 at a time, each with its class and error.
    let page = wait_rows(&browser, 50).await;
    assert_eq!(page.first().map(String::as_str), Some("item-000002"));
    assert_eq!(page.last().map(String::as_str), Some("item-000100"));
    let row = browser.text("#failed-items tr[data-item=\"item-000004\"]").await.unwrap_or_default();
    assert!(row.contains("ctx_overflow") && row.contains("item 4 failed with ctx_overflow, as asked"), "{row:?}");
    assert_eq!(browser.text("#failed-status").await.as_deref(), Some("The first 50 of 60 failed items."));
    browser.js("document.querySelector('#run-items').scrollIntoView();", vec![]).await;
    browser.screenshot("run-items").await;
    browser.click("#failed-more").await;
    let all = wait_rows(&browser, 60).await;
    assert_eq!(all.last().map(String::as_str), Some("item-000120"));
    browser.wait_for_text("#failed-status", "All 60 failed items.").await;
    assert_eq!(browser.attr("#failed-more", "hidden").await.as_deref(), Some("true"), "no page after the last");

    // A search on the id, in any case.
    browser.type_into("#failed-search", "ITEM-00010").await;
    let found = wait_rows(&browser, 5).await;
    assert_eq!(found, ["item-000100", "item-000102", "item-000104", "item-000106", "item-000108"]);
    browser.wait_for_text("#failed-status", "5 failed items with \"ITEM-00010\" in the id.").await;
    browser.type_into("#failed-search", "doc-0024").await;
    browser.wait_for_text("#failed-status", "No failed item has \"doc-0024\" in its id.").await;
    assert!(shown_items(&browser).await.is_empty());

    // Rerun failures while another run of the worker is in flight: the API's sentence, naming that run.
    let busy = start(&system, "probe-1", json!({"duration_ms": 60_000})).await;
    eventually(PATIENCE, "the long run to be in flight", || async {
        let w = get(&system, "/api/workers/probe-1").await;
        (w["in_flight"]["id"] == busy.as_str()).then_some(())
    })
    .await;
    rerun_enabled(&browser).await;
    browser.click("#rerun-failed").await;
    let refusal = browser.wait_for_text("#rerun-failed-alert", &busy).await;
    assert_eq!(browser.attr("#rerun-failed-alert", "data-code").await.as_deref(), Some("run_in_flight"), "{refusal}");
    assert!(browser.find(&format!("#rerun-failed-alert a[href=\"#/runs/{busy}\"]")).await.is_some(), "{refusal}");
    let (status, body) = post(&system, &format!("/api/runs/{busy}/cancel"), None).await;
    assert!(status.is_success(), "{body}");
    ended(&system, &busy).await;

    // Now it makes the rerun of exactly the failures, and the panel goes to it.
    rerun_enabled(&browser).await;
    browser.click("#rerun-failed").await;
    let rerun = browser
        .wait("the rerun's page", || async {
            let url = browser.client.current_url().await.ok()?;
            let next = url.fragment()?.strip_prefix("/runs/")?.to_owned();
            (next != id).then_some(next)
        })
        .await;
    let done = ended(&system, &rerun).await;
    assert_eq!((done["follows"].as_str(), done["follows_as"].as_str()), (Some(id.as_str()), Some("rerun_failed")));
    let items = &done["items"];
    assert_eq!((items["failed"].as_i64(), items["succeeded"].as_i64()), (Some(60), Some(0)), "only the failures");
    browser.wait_for_text(".run-summary", "rerun of its failed items").await;
    browser.wait_for_text("#item-counts li[data-outcome=\"failed\"]", "60 failed:").await;
    assert!(browser.find("#item-counts li[data-outcome=\"succeeded\"]").await.is_none(), "nothing else was run");
    browser.js("document.querySelector('#run-items').scrollIntoView();", vec![]).await;
    browser.screenshot("rerun-failed").await;

    // A run without failures, and a worker that cannot take a scope: disabled, with the sentence.
    browser.goto(&format!("{}/#/runs/{clean}", system.api_url)).await;
    browser.wait_for_text("#item-counts li[data-outcome=\"succeeded\"]", "10 succeeded").await;
    browser.wait_for_text("#rerun-failed-reason", "This run has no failed items to rerun.").await;
    assert_eq!(browser.is_enabled("#rerun-failed").await, Some(false));
    assert_eq!(browser.attr("#rerun-failed", "data-blocked").await.as_deref(), Some("no_failures"));
    assert_eq!(browser.text("#item-counts li[data-outcome=\"failed\"]").await.as_deref(), Some("0 failed"));
    assert_eq!(browser.attr("#failed-box", "hidden").await.as_deref(), Some("true"), "no failed item to list");
    browser.goto(&format!("{}/#/runs/{scopeless}", system.api_url)).await;
    browser.wait_for_text("#item-counts li[data-outcome=\"failed\"]", "1 failed: 1 ocr_empty").await;
    let reason = browser.wait_for_text("#rerun-failed-reason", "cannot be given only the failed items").await;
    assert!(reason.contains("no-scope's code does not say it can take a scope"), "{reason:?}");
    assert_eq!(browser.is_enabled("#rerun-failed").await, Some(false));
    assert_eq!(browser.attr("#rerun-failed", "title").await.as_deref(), Some(reason.as_str()));
    assert_eq!(wait_rows(&browser, 1).await, ["doc-0002"]);
    // The API agrees.
    let (status, body) = post(&system, &format!("/api/runs/{scopeless}/rerun-failed"), None).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::CONFLICT, Some("no_scope")), "{body}");

    // The 401 of the panel's first look without a token, and the 409 it was made to show.
    browser.assert_no_console_errors(&[401, 409]).await;
    browser.close().await;
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_document_is_shown_on_its_worker_and_released_with_a_reason() {
    let mut spec = probe(&demo_worker(), "probe-1", 120);
    spec.quarantine_after = Some(1);
    let system = System::start(Kind::Sqlite, |c| c.worker(spec)).await;
    described(&system, "probe-1").await;
    let options = json!({"items": 100, "failed_every": 25});
    let first = run(&system, "probe-1", options.clone()).await;
    assert_eq!(first["items"]["failed"], 4, "{first}");
    let quarantine = get(&system, "/api/workers/probe-1/quarantine").await;
    assert_eq!(quarantine["quarantined"], 4, "{quarantine}");
    // The next run skips them.
    let second = run(&system, "probe-1", options).await;
    assert_eq!(second["items"]["skipped"], 4, "{second}");
    let second = second["id"].as_str().expect("an id").to_owned();

    let browser = Browser::start("quarantine", system.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/workers", system.api_url)).await;
    sign_in(&browser, OPERATOR, "operator").await;
    open_cards(&browser, &["probe-1"]).await;
    let card = "article[data-worker=\"probe-1\"]";
    let link = format!("{card} a.quarantined-link");
    assert_eq!(browser.wait_for_text(&link, "quarantined").await, "4 documents quarantined");
    // Informational: the card keeps its readiness colour.
    let readiness = get(&system, "/api/workers/probe-1").await["readiness"]["ready"].as_bool();
    assert_eq!(readiness, Some(true));
    assert_eq!(browser.attr(card, "data-ready").await.as_deref(), Some("ready"));
    browser.screenshot("worker-card-quarantined").await;
    browser.click(&link).await;

    // The quarantine: each document with its streak and last error.
    let entries = "#quarantine li.quarantined";
    wait_count(&browser, entries, 4).await;
    assert_eq!(browser.text("#quarantined-count").await.as_deref(), Some("4 documents are quarantined."));
    let fifty = "#quarantine li[data-item=\"item-000050\"]";
    let text = browser.text(fifty).await.unwrap_or_default();
    assert!(text.contains("failed in 1 run in a row"), "{text:?}");
    assert!(text.contains("ctx_overflow") && text.contains("item 50 failed with ctx_overflow, as asked"), "{text:?}");
    let first_id = first["id"].as_str().expect("an id");
    assert!(browser.find(&format!("{fifty} a[href=\"#/runs/{first_id}\"]")).await.is_some(), "the failing run");

    // A release needs a reason.
    browser.click(&format!("{fifty} button.release")).await;
    browser.click(&format!("{fifty} form.release-form button[type=\"submit\"]")).await;
    browser.wait_for_text(&format!("{fifty} .alert"), "Give a reason").await;
    browser.type_into("#release-item-000050-reason", "OCR redone by hand").await;
    browser.screenshot("quarantine-release").await;
    browser.click(&format!("{fifty} form.release-form button[type=\"submit\"]")).await;
    browser.wait_for_text("#quarantine-status", "item-000050 is released").await;
    wait_count(&browser, entries, 3).await;
    assert!(browser.find(fifty).await.is_none());
    let audit = browser.wait_for_text("#releases tbody tr[data-item=\"item-000050\"]", "OCR redone by hand").await;
    assert!(audit.contains("otto"), "who released it: {audit:?}");
    let quarantine = get(&system, "/api/workers/probe-1/quarantine").await;
    let ids: Vec<&str> =
        quarantine["items"].as_array().expect("items").iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(ids, ["item-000025", "item-000075", "item-000100"]);
    assert_eq!(
        (quarantine["releases"][0]["actor"].as_str(), quarantine["releases"][0]["reason"].as_str()),
        (Some("otto"), Some("OCR redone by hand"))
    );

    // Release all, with a reason too.
    browser.click("#release-all button.release-all").await;
    browser.type_into("#release-all-reason", "new OCR engine").await;
    browser.click("#release-all form.release-form button[type=\"submit\"]").await;
    browser.wait_for_text("#quarantined-count", "No document is quarantined.").await;
    browser.wait_for_text("#quarantine-status", "3 documents are released").await;
    assert!(browser.find_all(entries).await.is_empty());
    let all = browser.wait_for_text("#releases tbody tr[data-item=\"\"]", "new OCR engine").await;
    assert!(all.contains("all (3 documents)") && all.contains("otto"), "{all:?}");
    assert_eq!(browser.find_all("#releases tbody tr").await.len(), 2);
    assert_eq!(browser.attr("#release-all", "hidden").await.as_deref(), Some("true"), "nothing left to release");
    browser.screenshot("quarantine-released").await;

    // The card no longer mentions a quarantine.
    browser.click(".crumbs a[href=\"#/workers\"]").await;
    browser.wait_for(&format!("{card} .queue")).await;
    assert!(browser.find(&link).await.is_none(), "no quarantine to mention");

    // The run that skipped them says so, and links to the quarantine.
    browser.goto(&format!("{}/#/runs/{second}", system.api_url)).await;
    let skipped = browser.wait_for_text("#item-counts li[data-outcome=\"skipped\"]", "4 skipped").await;
    assert_eq!(skipped, "4 skipped: 4 quarantined (the worker's quarantine)");
    browser.click("#item-counts a.quarantine-link").await;
    browser.wait_for_text("#quarantined-count", "No document is quarantined.").await;

    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    system.cleanup().await;
}

/// The items a card shows, with its rate: `(items, per minute)` from its data attributes, once it shows some.
async fn card_items(browser: &Browser, card: &str) -> Option<(i64, f64)> {
    let css = format!("{card} .in-flight .running-items");
    let items = browser.attr(&css, "data-items").await?.parse().ok()?;
    let per_minute = browser.attr(&css, "data-per-minute").await?.parse().ok()?;
    Some((items, per_minute))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_runs_items_are_counted_on_its_worker_card_as_they_come() {
    let spec = probe(&demo_worker(), "probe-1", 300);
    let system = System::start(Kind::Sqlite, |c| c.worker(spec)).await;
    described(&system, "probe-1").await;
    let browser = Browser::start("running-items", system.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/workers", system.api_url)).await;
    sign_in(&browser, OPERATOR, "operator").await;
    open_cards(&browser, &["probe-1"]).await;
    let card = "article[data-worker=\"probe-1\"]";
    browser.wait_for(&format!("{card} .queue")).await;
    assert!(browser.find(&format!("{card} .running-items")).await.is_none(), "nothing runs");

    // 30 items before each of 20 checkpoints, one every 6 s: stored while the run goes on (it is cancelled long
    // before its end).
    let options =
        json!({"items": 600, "failed_every": 3, "checkpoints": 20, "duration_ms": 120_000, "progress_steps": 0});
    let id = start(&system, "probe-1", options).await;
    let counted = eventually(PATIENCE, "the workers list to count the running run's items", || async {
        let list = get(&system, "/api/workers").await;
        let w = list["workers"].as_array()?.iter().find(|w| w["name"] == "probe-1")?.clone();
        (w["in_flight"]["id"] == id.as_str() && w["running_items"]["items"].as_i64()? > 0).then_some(w)
    })
    .await;
    assert_eq!(counted["in_flight"]["state"], "running", "{counted}");
    let per_minute = counted["running_items"]["per_minute"].as_f64().expect("a rate");
    assert!(per_minute > 0.0, "{counted}");

    // The card says how many and how fast, beside the running state.
    let line = browser.wait_for_text(&format!("{card} .in-flight p"), "/min").await;
    assert!(line.starts_with("running") && line.contains(" items · "), "{line:?}");
    let (first, rate) = card_items(&browser, card).await.expect("items on the card");
    assert!(first > 0 && rate > 0.0, "{first} items, {rate}/min");
    browser.screenshot("worker-card-running-items").await;

    // No event says the next block was stored: the card reads the list again while the run has items.
    let (later, _) = browser
        .wait("the card to count the next block of items", || async {
            card_items(&browser, card).await.filter(|(n, _)| *n > first)
        })
        .await;
    let stored = get(&system, "/api/workers/probe-1").await["running_items"]["items"].as_i64().unwrap_or(0);
    assert!(later <= stored, "the card shows what was stored: {later} of {stored}");

    // Once the run has ended, the card counts nothing.
    let (status, body) = post(&system, &format!("/api/runs/{id}/cancel"), None).await;
    assert!(status.is_success(), "{body}");
    ended(&system, &id).await;
    browser
        .wait("the card to forget the items", || async {
            browser.find(&format!("{card} .running-items")).await.is_none().then_some(())
        })
        .await;

    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_runs_page_counts_the_failures_of_its_resume_chain() {
    let spec = probe(&demo_worker(), "probe-1", 120);
    let system = System::start(Kind::Sqlite, |c| c.worker(spec)).await;
    described(&system, "probe-1").await;
    // It crashes at its second checkpoint, items 1–20 stored (four failed); its resume goes on after item 20 and
    // crashes at the same point, so its own counts are not the chain's.
    let options = json!({"items": 40, "failed_every": 5, "checkpoints": 4, "progress_steps": 4, "duration_ms": 4000,
        "crash": true});
    let first = run(&system, "probe-1", options).await;
    assert_eq!(first["state"], "failed", "{first}");
    assert!(first["checkpoint"].is_object(), "a checkpoint to resume from: {first}");
    let first = first["id"].as_str().expect("an id").to_owned();
    let (status, resumed) = post(&system, &format!("/api/runs/{first}/resume"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{resumed}");
    let resumed = ended(&system, resumed["id"].as_str().expect("an id")).await;
    let chain = &resumed["items"]["chain"];
    assert_eq!(chain["runs"], 2, "{resumed}");
    let failed = chain["failed"].as_i64().expect("a count");
    assert!(failed > resumed["items"]["failed"].as_i64().unwrap_or(0), "the first run's failures too: {chain}");

    let browser = Browser::start("resume-chain", system.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/runs/{}", system.api_url, resumed["id"].as_str().expect("an id"))).await;
    sign_in(&browser, VIEWER, "viewer").await;
    // One line under the run's own counts, the chain's classes in the API's order (largest first).
    let classes: Vec<String> = chain["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .filter(|c| c["outcome"] == "failed")
        .map(|c| format!("{} {}", c["count"], c["class"].as_str().unwrap_or_default()))
        .collect();
    let skipped = chain["skipped"].as_i64().unwrap_or(0);
    let skipped = if skipped > 0 { format!(", {skipped} skipped") } else { String::new() };
    let expected = format!("Across the resume chain of 2 runs: {failed} failed ({}){skipped}", classes.join(", "));
    assert_eq!(browser.wait_for_text("#item-chain", "resume chain").await, expected);
    browser.js("document.querySelector('#run-items').scrollIntoView();", vec![]).await;
    browser.screenshot("resume-chain").await;
    let own_failed = resumed["items"]["failed"].as_i64().expect("a count");
    browser.wait_for(&format!("#item-counts li[data-outcome=\"failed\"][data-count=\"{own_failed}\"]")).await;
    // The run it resumes has no chain to count.
    browser.goto(&format!("{}/#/runs/{first}", system.api_url)).await;
    browser.wait_for(&format!("h1 code[title=\"{first}\"]")).await;
    browser.wait_for("#item-counts li[data-outcome=\"failed\"]").await;
    assert_eq!(browser.attr("#item-chain", "hidden").await.as_deref(), Some("true"), "it resumes nothing");

    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    system.cleanup().await;
}
