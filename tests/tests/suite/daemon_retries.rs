//! Retries run by real daemons, on both backends: a failed run is retried as a new, linked run with the backoff
//! of its policy (the delays read from the ledger, and no daemon claims a retry before its time); a cancelled run
//! is never retried; a waiting retry holds its worker (a manual request gets the conflict naming it) and
//! cancelling it ends the chain.

use std::time::Duration;

use scrinalia_shared::{RetryOn, RetryPolicy, Run, RunState, Source, overrides::OverrideChange, runs::RequestError};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, wait_run},
    eventually, start_daemon,
};
use serde_json::json;

backend_tests!(
    a_failed_run_is_retried_with_its_backoff_until_its_attempts_are_used,
    a_cancelled_run_is_never_retried,
    a_waiting_retry_holds_its_worker_and_cancelling_it_ends_the_chain,
);

fn policy(max_attempts: u32, initial: f64) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_delay_seconds: initial,
        factor: 2.0,
        max_delay_seconds: 120.0,
        jitter: 0.0,
        on: vec![RetryOn::Failed],
        resume: false,
    }
}

/// The tests' configuration with `probe-1` retried by the catalogue's policy.
fn setup(t: &TestDb) -> Setup {
    let config = Setup::config(t, |_| {}).with(|f| {
        let probe = f.workers.iter_mut().find(|w| w.name == "probe-1").expect("probe-1");
        probe.retry = Some(policy(3, 1.0));
    });
    Setup::with(t, config)
}

async fn chain_of(t: &TestDb, run: &Run) -> Vec<Run> {
    t.db.api.run_chain(run.id).await.expect("the chain")
}

fn seconds(d: chrono::Duration) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

async fn a_failed_run_is_retried_with_its_backoff_until_its_attempts_are_used(t: &TestDb) {
    let setup = setup(t);
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let first = setup.request(&t.db.api, "probe-1", json!({"exit_code": 3})).await;
    assert_eq!(first.config.retry.as_ref().map(|r| r.source), Some(Source::Default), "the catalogue's policy");
    let chain = eventually(Duration::from_secs(30), "three failed attempts", || async {
        let chain = chain_of(t, &first).await;
        (chain.len() == 3 && chain.iter().all(|r| r.state.is_terminal())).then_some(chain)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(chain_of(t, &first).await.len(), 3, "no fourth attempt: max_attempts is 3");
    daemon.stop(Duration::from_secs(10)).await;

    for (i, run) in chain.iter().enumerate() {
        assert_eq!(run.state, RunState::Failed, "attempt {}: {run:?}", i + 1);
        assert_eq!(run.attempt, i32::try_from(i + 1).expect("small"));
        assert_eq!(run.arguments, first.arguments, "a retry keeps the arguments");
    }
    // The delays, read from the ledger: 1 s then 2 s (factor 2, no jitter) after the attempt before ended, on the
    // database clock; no daemon claimed a retry before its time.
    for (pair, expected) in chain.windows(2).zip([1.0, 2.0]) {
        let (before, retry) = (&pair[0], &pair[1]);
        assert_eq!(retry.retry_of, Some(before.id));
        let not_before = retry.not_before.expect("a retry has a not-before time");
        let delay = seconds(not_before - before.finished_at.expect("ended"));
        assert!((delay - expected).abs() < 0.05, "retry {} waits {delay} s, not {expected} s", retry.attempt);
        let claimed = retry.claimed_at.expect("claimed");
        assert!(claimed >= not_before, "retry {} claimed at {claimed}, before {not_before}", retry.attempt);
        assert!(seconds(claimed - not_before) < 1.0, "claimed {} s after its time", seconds(claimed - not_before));
    }
}

async fn a_cancelled_run_is_never_retried(t: &TestDb) {
    let setup = setup(t);
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    // It would fail after 30 s; it is cancelled while it runs.
    let run = setup.request(&t.db.api, "probe-1", json!({"exit_code": 3, "duration_ms": 30000})).await;
    wait_run(&t.db.api, run.id, Duration::from_secs(20), "it starts", |r| r.started_at.is_some()).await;
    t.db.api.request_cancel(run.id, "ada").await.expect("cancel").expect("the run");
    let ended = wait_run(&t.db.api, run.id, Duration::from_secs(20), "it ends", |r| r.state.is_terminal()).await;
    assert_eq!(ended.state, RunState::Cancelled);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(chain_of(t, &run).await.len(), 1, "no retry of a cancelled run");
    assert!(t.db.api.runs_in_flight().await.expect("in flight").is_empty());
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_waiting_retry_holds_its_worker_and_cancelling_it_ends_the_chain(t: &TestDb) {
    let setup = setup(t);
    let catalogue = &setup.settings.catalogue;
    // probe-2's policy is an audited override: retry once, a minute later.
    let change = OverrideChange {
        retry: Some(Some(policy(2, 60.0))),
        reason: Some("flaky model server: retry once".into()),
        ..OverrideChange::default()
    };
    t.db.api.change_override(catalogue, "probe-2", "ada", &change).await.expect("the override");
    let audit = t.db.api.audit_trail("probe-2", 10).await.expect("audit");
    assert_eq!(audit[0].after.as_ref().and_then(|a| a.retry.clone()), Some(policy(2, 60.0)), "{audit:?}");
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let first = setup.request(&t.db.api, "probe-2", json!({"exit_code": 3})).await;
    assert_eq!(first.config.retry.as_ref().map(|r| r.source), Some(Source::Override));
    let retry = eventually(Duration::from_secs(20), "the retry waits", || async {
        chain_of(t, &first).await.into_iter().find(|r| r.attempt == 2)
    })
    .await;
    assert_eq!(retry.state, RunState::Queued);
    let refused = t.db.api.request_run(
        catalogue,
        scrinalia_shared::runs::RunRequest {
            worker: "probe-2".into(),
            requested_by: "bob".into(),
            arguments: Default::default(),
            trace_context: None,
            tags: Vec::new(),
        },
    );
    match refused.await {
        Err(e @ RequestError::InFlight { .. }) => {
            assert!(e.to_string().contains(&retry.id.to_string()), "the conflict names the waiting retry: {e}");
        }
        other => panic!("a manual request while a retry waits: {other:?}"),
    }
    t.db.api.request_cancel(retry.id, "bob").await.expect("cancel").expect("the retry");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let chain = chain_of(t, &first).await;
    let states: Vec<RunState> = chain.iter().map(|r| r.state).collect();
    assert_eq!(states, [RunState::Failed, RunState::Cancelled], "cancelling the retry ends the chain");
    assert!(t.db.api.runs_in_flight().await.expect("in flight").is_empty(), "the worker is free again");
    daemon.stop(Duration::from_secs(10)).await;
}
