//! Items through real daemons and probes, on both backends: a run reporting 10,000 items keeps the counts and
//! every failure in a few batches, and the API pages through them; malformed item lines are counted, the first
//! ten said in the run's log, and the run goes on; every item printed before a stored checkpoint is stored with
//! it; a batch sent again changes nothing, a batch of a run that is not the daemon's is refused, and items go
//! with their run; a resume chain's failures are shown and rerun together, each once.

use std::time::Duration;

use axum::http::StatusCode;
use scrinalia_shared::{FollowKind, RunState, items::Gatherer};
use scrinalia_tests::{
    TestDb,
    api_harness::{TestApi, VIEWER},
    backend_tests,
    daemon_harness::{Setup, wait_finished, wait_run},
    fixtures::LONG_LEASE,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    a_run_reporting_ten_thousand_items_keeps_the_counts_and_every_failure,
    malformed_item_lines_are_counted_and_the_run_succeeds,
    every_item_printed_before_a_stored_checkpoint_is_stored_with_it,
    a_batch_sent_again_is_counted_once_and_only_the_owner_writes,
    a_resume_chain_counts_its_failures_once_and_a_rerun_of_its_failures_gets_them_all,
);

fn count(summary: &Value, outcome: &str, class: &str) -> i64 {
    let classes = summary["classes"].as_array().expect("classes");
    classes
        .iter()
        .find(|c| c["outcome"] == outcome && c["class"] == class)
        .map_or(0, |c| c["count"].as_i64().expect("present"))
}

async fn a_run_reporting_ten_thousand_items_keeps_the_counts_and_every_failure(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let _daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&t.db.api, "probe-1", json!({"items": 10_000, "failed_every": 200})).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(60)).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");

    // One statement (on SQLite one transaction) per batch, each at most a few hundred lines.
    let batches = t.db.api.item_batches(run.id).await.expect("batches");
    assert!((1..=100).contains(&batches), "10,000 items in {batches} batches: at most one per 100 items");

    let api = TestApi::new(t).await;
    let detail = api.get(&format!("/api/runs/{}", run.id), VIEWER).await.expect(StatusCode::OK, None);
    let items = &detail["items"];
    assert_eq!((items["succeeded"].as_i64(), items["failed"].as_i64()), (Some(9_950), Some(50)), "{items}");
    assert_eq!((items["skipped"].as_i64(), items["refused"].as_i64()), (Some(0), Some(0)));
    let by_class = ["ocr_empty", "ctx_overflow", "timeout"].map(|c| count(items, "failed", c));
    assert_eq!(by_class, [17, 17, 16], "three classes in turn");

    // The failures, 50 a page: exactly the 50, each with its class and error, in id order.
    let path = format!("/api/runs/{}/items?outcome=failed&limit=50", run.id);
    let page = api.get(&path, VIEWER).await.expect(StatusCode::OK, None);
    let failed = page["items"].as_array().expect("items");
    let ids: Vec<String> = failed.iter().map(|i| i["id"].as_str().expect("present").to_owned()).collect();
    let expected: Vec<String> = (1..=50).map(|i| format!("item-{:06}", i * 200)).collect();
    assert_eq!(ids, expected);
    assert_eq!(failed[0]["class"], "ocr_empty");
    assert_eq!(failed[0]["error"], "item 200 failed with ocr_empty, as asked");
    assert!(page.get("next_after").is_none(), "one page holds them all: {}", page["next_after"]);

    // Paged by 20: three pages, the last one short.
    let mut after = String::new();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let path = format!("/api/runs/{}/items?outcome=failed&limit=20&after={after}", run.id);
        let page = api.get(&path, VIEWER).await.expect(StatusCode::OK, None);
        seen.extend(
            page["items"].as_array().expect("present").iter().map(|i| i["id"].as_str().expect("present").to_owned()),
        );
        after = page["next_after"].as_str().unwrap_or_default().to_owned();
    }
    assert_eq!((seen, after.as_str()), (expected, ""));

    // Searched by id, without regard to case; succeeded items are kept only up to the bound (100 by default).
    let path = format!("/api/runs/{}/items?search=ITEM-0098&outcome=failed", run.id);
    let found = api.get(&path, VIEWER).await.expect(StatusCode::OK, None);
    let found: Vec<_> = found["items"].as_array().expect("present").iter().map(|i| i["id"].clone()).collect();
    assert_eq!(found, [json!("item-009800")]);
    let kept = api.get(&format!("/api/runs/{}/items?outcome=succeeded&limit=500", run.id), VIEWER).await;
    let kept = kept.expect(StatusCode::OK, None);
    assert_eq!(kept["items"].as_array().expect("present").len(), 100, "the default keeps 100 successes one by one");

    // Bad input: a sentence, never a 500.
    let bad = api.get(&format!("/api/runs/{}/items?outcome=done", run.id), VIEWER).await;
    let bad = bad.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
    assert!(bad["message"].as_str().expect("present").contains("succeeded, failed or skipped"), "{bad}");
    let unknown = api.get(&format!("/api/runs/{}/items", Uuid::now_v7()), VIEWER).await;
    unknown.expect(StatusCode::NOT_FOUND, Some("unknown_run"));
}

async fn malformed_item_lines_are_counted_and_the_run_succeeds(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let _daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&t.db.api, "probe-1", json!({"malformed_items": 1000, "items": 10})).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(60)).await;
    assert_eq!(run.state, RunState::Succeeded, "a malformed item line is never fatal: {run:?}");
    let summary = t.db.api.item_summary(run.id).await.expect("summary").expect("items");
    assert_eq!((summary.refused, summary.succeeded), (1000, 10));
    assert_eq!(
        summary.classes.iter().find(|c| c.outcome == "refused").map(|c| c.class.as_str()),
        Some("unknown_outcome")
    );
    let log = setup.run_log(&run);
    assert_eq!(log.matches("an item line was refused (unknown_outcome)").count(), 10, "the first ten are said");
    assert!(log.contains("further refused item lines are only counted"), "{log}");
}

async fn every_item_printed_before_a_stored_checkpoint_is_stored_with_it(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let _daemon = setup.start_daemon("daemon", &[]);
    let options = json!({"items": 4000, "failed_every": 7, "checkpoints": 8, "duration_ms": 4000});
    let run = setup.request(&t.db.api, "probe-1", options).await;
    // Whenever a checkpoint is seen, the items printed before it are stored: the probe prints item block j, then
    // checkpoint j, so checkpoint `step` stands for `step * 500` items.
    let mut checked = 0;
    while checked < 8 {
        let seen = wait_run(&t.db.api, run.id, Duration::from_secs(30), "a new checkpoint", |r| {
            r.checkpoint.as_ref().and_then(|c| c["step"].as_i64()).is_some_and(|s| s > checked) || r.state.is_terminal()
        })
        .await;
        let Some(step) = seen.checkpoint.as_ref().and_then(|c| c["items"].as_i64().zip(c["step"].as_i64())) else {
            break;
        };
        let summary = t.db.api.item_summary(run.id).await.expect("summary").unwrap_or_default();
        assert!(
            summary.succeeded + summary.failed >= step.0,
            "checkpoint {} stands for {} items, {} are stored",
            step.1,
            step.0,
            summary.succeeded + summary.failed
        );
        checked = step.1;
        if seen.state.is_terminal() {
            break;
        }
    }
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(30)).await;
    assert_eq!(run.state, RunState::Succeeded);
    let summary = t.db.api.item_summary(run.id).await.expect("summary").expect("items");
    assert_eq!((summary.succeeded, summary.failed), (4000 - 571, 571));
}

async fn a_batch_sent_again_is_counted_once_and_only_the_owner_writes(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let run = setup.request(&t.db.api, "probe-1", json!({})).await;
    let daemon = Uuid::now_v7();
    let claimed = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    let mut gatherer = Gatherer::new(10);
    for i in 0..300 {
        let outcome = if i % 3 == 0 { "failed" } else { "succeeded" };
        gatherer
            .offer(scrinalia_shared::items::parse(&json!({"id": format!("d{i}"), "outcome": outcome, "class": "x"})));
    }
    let batch = gatherer.take().expect("a batch");
    t.db.daemon.write_items(run.id, daemon, &batch).await.expect("written");
    t.db.daemon.write_items(run.id, daemon, &batch).await.expect("sent again: no error");
    let summary = t.db.api.item_summary(run.id).await.expect("summary").expect("items");
    assert_eq!((summary.failed, summary.succeeded), (100, 200), "counted once");
    let kept = t.db.api.run_items(run.id, None, None, None, 500).await.expect("items");
    assert_eq!(kept.items.len(), 110, "every failure and the first ten successes");

    // Another daemon's batch is refused, with a checkpoint or without.
    gatherer.offer(scrinalia_shared::items::parse(&json!({"id": "late", "outcome": "failed"})));
    let late = gatherer.take().expect("a batch");
    let stranger = Uuid::now_v7();
    let refused = t.db.daemon.write_items(run.id, stranger, &late).await;
    assert!(matches!(refused, Err(scrinalia_shared::DbError::LeaseLost { .. })), "{refused:?}");
    let refused = t.db.daemon.checkpoint_with_items(run.id, stranger, Some(&late), &json!({"step": 1})).await;
    assert!(matches!(refused, Err(scrinalia_shared::DbError::LeaseLost { .. })), "{refused:?}");
    t.db.daemon.checkpoint_with_items(run.id, daemon, Some(&late), &json!({"step": 1})).await.expect("the owner's");
    let summary = t.db.api.item_summary(run.id).await.expect("summary").expect("items");
    assert_eq!(summary.failed, 101);
    assert_eq!(t.db.api.get_run(run.id).await.expect("present").expect("present").checkpoint, Some(json!({"step": 1})));
}

/// A run killed after its second checkpoint (items 1–20 stored, four of them failed) is resumed; the resume goes
/// on after item 20 and fails four more. The resumed run shows its own four and its chain's eight, and a rerun of
/// its failures is given all eight, once each.
async fn a_resume_chain_counts_its_failures_once_and_a_rerun_of_its_failures_gets_them_all(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let _daemon = setup.start_daemon("daemon", &[]);
    let options = json!({"items": 40, "failed_every": 5, "checkpoints": 4, "duration_ms": 6000});
    let first = setup.request(&t.db.api, "probe-1", options).await;
    let started = setup.probe_started(first.id, Duration::from_secs(30)).await;
    wait_run(&t.db.api, first.id, Duration::from_secs(30), "its second checkpoint", |r| {
        r.checkpoint.as_ref().and_then(|c| c["items"].as_i64()) == Some(20)
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(started.pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill the probe");
    let first = wait_finished(&t.db.api, first.id, Duration::from_secs(30)).await;
    assert_eq!(first.state, RunState::Failed, "{first:?}");

    let catalogue = &setup.settings.catalogue;
    let resumed = t.db.api.continue_run(catalogue, first.id, FollowKind::Resume, "otto").await.expect("resumed");
    let id = resumed.id;
    let second = wait_finished(&t.db.api, id, Duration::from_secs(60)).await;
    assert_eq!(second.state, RunState::Succeeded, "{second:?}");

    let api = TestApi::new(t).await;
    let detail = api.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    let items = &detail["items"];
    assert_eq!((items["failed"].as_i64(), items["succeeded"].as_i64()), (Some(4), Some(16)), "{items}");
    let chain = &items["chain"];
    assert_eq!(
        (chain["runs"].as_i64(), chain["failed"].as_i64(), chain["skipped"].as_i64()),
        (Some(2), Some(8), Some(0))
    );
    assert_eq!(count(chain, "failed", "ocr_empty") + count(chain, "failed", "ctx_overflow"), 6, "{chain}");
    let own = api.get(&format!("/api/runs/{}", first.id), VIEWER).await.expect(StatusCode::OK, None);
    assert!(own["items"].get("chain").is_none(), "a run that resumes nothing has no chain: {}", own["items"]);

    let rerun = t.db.api.continue_run(catalogue, id, FollowKind::RerunFailed, "otto").await.expect("a rerun").id;
    let expected: Vec<String> = (1..=8).map(|i| format!("item-{:06}", i * 5)).collect();
    assert_eq!(t.db.daemon.run_scope(rerun).await.expect("its scope"), expected, "the chain's failures, once each");
    let third = wait_finished(&t.db.api, rerun, Duration::from_secs(60)).await;
    assert_eq!(third.state, RunState::Succeeded, "{third:?}");
    let summary = t.db.api.item_summary(rerun).await.expect("summary").expect("items");
    assert_eq!((summary.failed, summary.succeeded), (8, 0), "it processed exactly the eight");
}
