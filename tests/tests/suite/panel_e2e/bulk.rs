//! An admin reruns every failed run from the runs view: filtered by state, "Select all matching" shows the dry
//! run's count (12, over two workers), the confirmation names the action and the count and refuses no reason
//! before anything is sent, and the progress line follows the job until it is done: 2 runs made (single flight,
//! one per worker) and 10 skipped, each worker's reason listed. The API's audit and ledger agree. A view without a
//! filter offers no bulk action and says why; a viewer sees none.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::{Value, json};

use super::{
    ADMIN_TOKEN, VIEWER_TOKEN, sign_in,
    stack::{Access, Stack},
};

/// How many failed runs each worker gets.
const PER_WORKER: usize = 6;

/// Makes `PER_WORKER` failed runs of `worker`, one after the other (a worker has one run in flight at a time).
async fn fail_runs(stack: &Stack, worker: &str) {
    for _ in 0..PER_WORKER {
        let body = json!({"options": {"duration_ms": 20, "exit_code": 3, "output_lines": 0}});
        let (status, run) = stack.post(&format!("/api/workers/{worker}/runs"), body).await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        let id = run["id"].as_str().expect("a run id").to_owned();
        eventually(PATIENCE, "the run to fail", || async {
            (stack.get(&format!("/api/runs/{id}")).await?["state"] == "failed").then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_all_matching_reruns_the_failed_runs_with_a_confirmation_and_its_progress() {
    let stack = Stack::start(Kind::Sqlite, Access::Tokens).await;
    futures::future::join(fail_runs(&stack, "probe-1"), fail_runs(&stack, "probe-2")).await;

    // A viewer sees no bulk action.
    let browser = stack.open_panel("bulk").await;
    sign_in(&browser, VIEWER_TOKEN, "viewer").await;
    browser.goto(&format!("{}/#/runs?state=failed", stack.base)).await;
    browser.wait_for("#ledger tr[data-state=\"failed\"]").await;
    assert!(browser.find("#bulk-select").await.is_none(), "no bulk action for a viewer");
    browser.click("#session button.link").await;
    sign_in(&browser, ADMIN_TOKEN, "admin").await;

    // Without a filter, the button is disabled and says why.
    browser.goto(&format!("{}/#/runs", stack.base)).await;
    browser.wait_for("#bulk-select").await;
    assert_eq!(browser.is_enabled("#bulk-select").await, Some(false), "no bulk action without a filter");
    browser.wait_for_text("#bulk-why", "a bulk action needs a filter").await;

    // Filtered by state: the dry run's count, the action picked, the confirmation.
    browser.goto(&format!("{}/#/runs?state=failed", stack.base)).await;
    browser.wait_for("#ledger tr[data-state=\"failed\"]").await;
    browser.wait_for("#bulk-select:not([disabled])").await;
    browser.click("#bulk-select").await;
    let shown = browser.wait_for_text("#bulk-count[data-count=\"12\"]", "12 runs").await;
    assert!(shown.contains("2 workers"), "the API's sentence, naming the workers: {shown:?}");
    let pick = "const s = document.querySelector('#bulk-action'); s.value = arguments[0]; \
                s.dispatchEvent(new Event('change')); return true;";
    browser.js(pick, vec![json!("cancel")]).await;
    browser.wait_for_text("#bulk-question", "Cancel 12 runs matching state=failed?").await;
    browser.js(pick, vec![json!("rerun")]).await;
    let question = browser.wait_for_text("#bulk-question", "Rerun").await;
    assert_eq!(question, "Rerun 12 runs matching state=failed?");
    assert_eq!(browser.text("#bulk-confirm").await.as_deref(), Some("Rerun 12 runs"));
    browser.click("#bulk-confirm").await;
    browser.wait_for_text("#bulk-alert:not([hidden])", "Give a reason").await;
    assert_eq!(stack.get("/api/runs/bulk").await.expect("the list")["actions"], json!([]), "nothing was sent");
    let reason = "the model server is back";
    browser.type_into("#bulk-reason", reason).await;
    browser.click("#bulk-confirm").await;

    // The progress, until done: one run per worker, the others skipped with their reason.
    browser.wait_for("#bulk-progress[data-state=\"done\"]").await;
    let line = browser.text("#bulk-progress .bulk-counts").await.unwrap_or_default();
    assert_eq!(line, "2 done, 10 skipped, 0 failed of 12 runs");
    let reasons = browser.find_all("#bulk-progress li[data-outcome=\"skipped\"]").await;
    assert_eq!(reasons.len(), 2, "one reason per worker");
    let text = browser.text("#bulk-progress .bulk-reasons").await.unwrap_or_default();
    assert!(text.contains("5 skipped: ") && text.contains("in this action was rerun"), "{text:?}");
    browser.screenshot("bulk-done").await;

    // The API: the action audited as confirmed, and two reruns, one per worker.
    let list = stack.get("/api/runs/bulk").await.expect("the list");
    let action = &list["actions"][0];
    assert_eq!(action["filter"], json!({"state": "failed"}), "{list}");
    assert_eq!((action["expect_count"].clone(), action["reason"].clone()), (json!(12), json!(reason)));
    assert_eq!((action["requested_by"].clone(), action["action"].clone()), (json!("e2e-admin"), json!("rerun")));
    let id = action["id"].as_str().expect("an id");
    let job = stack.get(&format!("/api/runs/bulk/{id}")).await.expect("the job");
    assert_eq!((job["done"].clone(), job["skipped"].clone()), (json!(2), json!(10)), "{job}");
    let ledger = stack.get("/api/runs?limit=100").await.expect("the ledger");
    let reruns: Vec<&Value> =
        ledger["runs"].as_array().expect("runs").iter().filter(|r| r["follows_as"] == "rerun").collect();
    let mut workers: Vec<&str> = reruns.iter().filter_map(|r| r["worker"].as_str()).collect();
    workers.sort_unstable();
    assert_eq!(workers, ["probe-1", "probe-2"], "{ledger}");

    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    stack.stop().await;
}
