//! Pause on repeated failure, with a real API and real daemons, on both backends: `pause_after_failures`
//! failed runs in a row (retries included) pause the worker in the end of the last one; a Run is then a 409
//! `worker_paused` saying since when, by whom, why and how to resume; a schedule's fires are recorded skipped
//! ("paused"); viewers cannot pause or resume; a resume by an operator with a reason restores everything (a
//! schedule fires again, a Run is accepted); the history keeps both. Interrupted and cancelled runs neither count
//! nor reset the streak, and a pause by hand cancels the worker's queued retries ("paused").

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{
    RetryOn, RetryPolicy, Role, RunState, overrides::OverrideChange, pauses::PauseAction, runs::RequestError,
};
use scrinalia_testkit::stack::Stack;
use scrinalia_tests::{
    Binaries, TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER},
    backend_tests,
    daemon_harness::{Setup, wait_run},
    eventually, free_port, start_daemon,
};
use serde_json::{Value, json};

backend_tests!(
    failed_runs_in_a_row_pause_the_worker_until_an_operator_resumes_it,
    interruptions_and_cancellations_do_not_count_and_a_pause_by_hand_cancels_queued_retries,
);

fn policy(max_attempts: u32, initial: f64) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_delay_seconds: initial,
        factor: 1.0,
        max_delay_seconds: 120.0,
        jitter: 0.0,
        on: vec![RetryOn::Failed],
        resume: false,
    }
}

/// The worker's view over HTTP.
async fn worker(stack: &Stack, name: &str) -> Value {
    stack.get(&format!("/api/workers/{name}"), VIEWER).await.expect(StatusCode::OK, None)
}

async fn failed_runs_in_a_row_pause_the_worker_until_an_operator_resumes_it(t: &TestDb) {
    let config = Setup::config(t, |d| d.poll_seconds = 1)
        .with(|f| {
            f.api.listen = ([127, 0, 0, 1], free_port()).into();
            let probe = f.workers.iter_mut().find(|w| w.name == "probe-1").expect("probe-1");
            probe.pause_after_failures = Some(3);
            probe.retry = Some(policy(5, 0.3));
            f.pipelines = vec![scrinalia_shared::catalogue::PipelineSpec {
                name: "one".into(),
                description: None,
                steps: vec!["probe-1".into()],
                tags: Vec::new(),
            }];
        })
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
        .token("ada-admin", Role::Admin, ADMIN);
    let mut stack =
        Stack::start(&Binaries::of_this_test(), t.dir.path(), &config, true).await.unwrap_or_else(|e| panic!("{e:#}"));

    // A bad override is refused naming the key.
    let bad = json!({"pause_after_failures": 0, "reason": "try zero"});
    let refused = stack.json(Method::PUT, "/api/workers/probe-1/override", ADMIN, bad).await;
    let body = refused.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("pause_after_failures must be at least 1")), "{body}");

    // A run that fails, retried: the third failure in a row pauses the worker, and requests no fourth attempt.
    let first =
        stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"options": {"exit_code": 3}})).await;
    let first = first.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    let view = eventually(Duration::from_secs(60), "the worker pauses", || async {
        let w = worker(&stack, "probe-1").await;
        (!w["paused"].is_null()).then_some(w)
    })
    .await;
    let paused = &view["paused"];
    assert_eq!((paused["automatic"].as_bool(), paused["by"].as_str()), (Some(true), Some("scrinalia")), "{paused}");
    let reason = paused["reason"].as_str().expect("a reason");
    assert!(reason.starts_with("its last 3 runs failed in a row (the last, run "), "{reason}");
    assert!(view["in_flight"].is_null(), "no retry after the pausing failure: {}", view["in_flight"]);
    let chain: Vec<scrinalia_shared::Run> =
        t.db.api.run_chain(first.parse().expect("a uuid")).await.expect("the chain");
    assert_eq!(chain.len(), 3, "three attempts, the pause ended the chain: {chain:#?}");
    assert!(chain.iter().all(|r| r.state == RunState::Failed));
    assert!(reason.contains(&chain[2].id.to_string()), "the reason names the run that paused it: {reason}");

    // A Run is refused with the sentence; so is one from the CLI's path (the same route).
    let run = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({})).await;
    let body = run.expect(StatusCode::CONFLICT, Some("worker_paused"));
    let message = body["message"].as_str().expect("a sentence");
    for part in [
        "Worker probe-1 is paused",
        "automatically by scrinalia",
        "its last 3 runs failed",
        "POST /api/workers/probe-1/resume",
        "scrinalia worker resume probe-1 --reason",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message:?}");
    }
    assert_eq!(body["paused"]["automatic"], json!(true), "{body}");

    // The metric and health say so.
    let metrics = stack.get("/metrics", VIEWER).await;
    assert!(metrics.text().contains("scrinalia_worker_paused{worker=\"probe-1\"} 1"), "{}", metrics.text());
    assert!(metrics.text().contains("scrinalia_worker_paused{worker=\"probe-2\"} 0"));
    let health = stack.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
    let check = health["checks"].as_array().expect("checks").iter().find(|c| c["name"] == "worker:probe-1").cloned();
    let check = check.expect("probe-1's check");
    assert_eq!(check["status"], "degraded", "{check}");
    assert!(check["error"].as_str().is_some_and(|e| e.contains("is paused")), "{check}");

    // A schedule's fires while it is paused are recorded skipped, "paused".
    let schedule = json!({"name": "every-second", "worker": "probe-1", "cron": "* * * * * *",
        "reason": "a test fires it every second"});
    stack.json(Method::POST, "/api/schedules", OPERATOR, schedule).await.expect(StatusCode::CREATED, None);
    let fires = eventually(Duration::from_secs(30), "a fire skipped while paused", || async {
        let fires = stack.get("/api/schedules/every-second/fires", VIEWER).await.expect(StatusCode::OK, None);
        let skipped: Vec<Value> =
            fires.as_array().expect("fires").iter().filter(|f| f["outcome"] == "skipped").cloned().collect();
        (skipped.len() >= 2).then_some(skipped)
    })
    .await;
    for fire in &fires {
        let reason = fire["reason"].as_str().expect("a reason");
        assert!(reason.starts_with("paused: worker probe-1 is paused since "), "{fire}");
        assert!(fire["run_id"].is_null(), "nothing requested: {fire}");
    }

    // A pipeline's step for the paused worker waits, saying why.
    let started = stack.json(Method::POST, "/api/pipelines/one/runs", OPERATOR, json!({})).await;
    let pipeline_run = started.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    let path = format!("/api/pipeline-runs/{pipeline_run}");
    let waiting = stack.get(&path, VIEWER).await.expect(StatusCode::OK, None)["waiting"].clone();
    let message = waiting["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("Step 1 (probe-1) waits: worker probe-1 is paused since "), "{waiting}");

    // Viewers can neither pause nor resume; a resume needs a reason.
    let why = json!({"reason": "the model server is back"});
    for verb in ["pause", "resume"] {
        let path = format!("/api/workers/probe-1/{verb}");
        assert_eq!(stack.json(Method::POST, &path, VIEWER, why.clone()).await.status, StatusCode::FORBIDDEN);
    }
    let bare = stack.json(Method::POST, "/api/workers/probe-1/resume", OPERATOR, json!({})).await;
    let bare = bare.expect(StatusCode::BAD_REQUEST, Some("reason_required"));
    assert!(bare["message"].as_str().is_some_and(|m| m.starts_with("A resume needs a reason")), "{bare}");
    let again = stack.json(Method::POST, "/api/workers/probe-1/pause", OPERATOR, json!({"reason": "twice"})).await;
    again.expect(StatusCode::CONFLICT, Some("worker_paused"));

    // Resumed by an operator with a reason: the schedule fires again and runs it.
    let resumed = stack.json(Method::POST, "/api/workers/probe-1/resume", OPERATOR, why.clone()).await;
    let resumed = resumed.expect(StatusCode::OK, None);
    assert!(resumed["paused"].is_null(), "{resumed}");
    eventually(Duration::from_secs(30), "a fire requested after the resume", || async {
        let fires = stack.get("/api/schedules/every-second/fires", VIEWER).await.expect(StatusCode::OK, None);
        fires.as_array().expect("fires").iter().any(|f| f["outcome"] == "requested").then_some(())
    })
    .await;
    let pause = json!({"reason": "enough for the test"});
    stack.json(Method::POST, "/api/schedules/every-second/pause", OPERATOR, pause).await.expect(StatusCode::OK, None);
    // The pipeline's step is requested after the resume, and the pipeline run ends.
    eventually(Duration::from_secs(30), "the pipeline run's end", || async {
        let run = stack.get(&path, VIEWER).await.expect(StatusCode::OK, None);
        (run["state"] == "succeeded").then_some(())
    })
    .await;
    // A Run is accepted once the schedule's last run has ended.
    let accepted = eventually(Duration::from_secs(30), "a Run accepted", || async {
        let reply = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({})).await;
        match reply.status {
            StatusCode::CREATED => Some(reply.json()),
            _ => {
                assert_eq!(reply.client_error()["code"], "run_in_flight", "only a run in flight may refuse it");
                None
            }
        }
    })
    .await;
    let id = accepted["id"].as_str().expect("an id").to_owned();
    eventually(Duration::from_secs(30), "the run succeeds", || async {
        let run = stack.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
        (run["state"] == "succeeded").then_some(())
    })
    .await;
    assert!(worker(&stack, "probe-1").await["paused"].is_null());

    // The history keeps both, newest first, with who and why.
    let history = stack.get("/api/workers/probe-1/pauses", VIEWER).await.expect(StatusCode::OK, None);
    let entries = history["history"].as_array().expect("history");
    assert_eq!(entries.len(), 2, "{history}");
    assert_eq!((entries[0]["action"].as_str(), entries[0]["actor"].as_str()), (Some("resume"), Some("otto-operator")));
    assert_eq!(entries[0]["reason"], "the model server is back");
    assert_eq!((entries[1]["action"].as_str(), entries[1]["automatic"].as_bool()), (Some("pause"), Some(true)));
    stack.assert_healthy().await;
}

async fn interruptions_and_cancellations_do_not_count_and_a_pause_by_hand_cancels_queued_retries(t: &TestDb) {
    let config = Setup::config(t, |d| d.poll_seconds = 1).with(|f| {
        let probe = f.workers.iter_mut().find(|w| w.name == "probe-2").expect("probe-2");
        probe.stall_seconds = Some(2);
    });
    let setup = Setup::with(t, config);
    let catalogue = &setup.settings.catalogue;
    // Two failures in a row pause it, by an audited override; a failure is retried a minute later.
    let change = OverrideChange {
        pause_after_failures: Some(Some(2)),
        retry: Some(Some(policy(2, 60.0))),
        reason: Some("stop burning GPU hours on a dead model server".into()),
        ..OverrideChange::default()
    };
    t.db.api.change_override(catalogue, "probe-2", "ada", &change).await.expect("the override");
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let api = &t.db.api;
    let ended = |run: uuid::Uuid| async move {
        wait_run(api, run, Duration::from_secs(40), "it ends", |r| r.state.is_terminal()).await
    };

    // Failure 1 of 2: its retry waits a minute; cancelling it neither counts nor resets.
    let failed = setup.request(api, "probe-2", json!({"exit_code": 3})).await;
    assert_eq!(ended(failed.id).await.state, RunState::Failed);
    let retry = eventually(Duration::from_secs(20), "its retry", || async {
        api.run_chain(failed.id).await.expect("chain").into_iter().find(|r| r.attempt == 2)
    })
    .await;
    api.request_cancel(retry.id, "ada").await.expect("cancel").expect("the retry");
    // A run cancelled while it runs, and one interrupted by the stall watchdog: neither counts.
    let long = setup.request(api, "probe-2", json!({"duration_ms": 30000})).await;
    wait_run(api, long.id, Duration::from_secs(20), "it starts", |r| r.started_at.is_some()).await;
    api.request_cancel(long.id, "ada").await.expect("cancel").expect("the run");
    assert_eq!(ended(long.id).await.state, RunState::Cancelled);
    let silent = json!({"duration_ms": 20000, "progress_steps": 100, "silent_after_ms": 500});
    let stalled = setup.request(api, "probe-2", silent).await;
    assert_eq!(ended(stalled.id).await.state, RunState::Interrupted);
    assert!(api.worker_pause("probe-2").await.expect("pause").is_none(), "one failure in a row so far");

    // Failure 2 of 2: paused, and its retry is not requested.
    let second = setup.request(api, "probe-2", json!({"exit_code": 4})).await;
    assert_eq!(ended(second.id).await.state, RunState::Failed);
    let pause = api.worker_pause("probe-2").await.expect("pause").expect("paused by the second failure in a row");
    assert!(pause.automatic && pause.reason.starts_with("its last 2 runs failed in a row"), "{pause:?}");
    assert_eq!(api.run_chain(second.id).await.expect("chain").len(), 1, "no retry once paused");
    let refused = api
        .request_run(
            catalogue,
            scrinalia_shared::runs::RunRequest {
                worker: "probe-2".into(),
                requested_by: "ada".into(),
                arguments: Default::default(),
                trace_context: None,
                tags: Vec::new(),
            },
        )
        .await
        .expect_err("paused");
    assert!(matches!(refused, RequestError::Paused { .. }), "{refused}");

    // Resumed, a failure starts a new streak; a pause by hand then cancels its waiting retry, "paused".
    api.resume_worker("probe-2", "ada", "the model server is back").await.expect("db").expect("resumed");
    let third = setup.request(api, "probe-2", json!({"exit_code": 5})).await;
    assert_eq!(ended(third.id).await.state, RunState::Failed);
    assert!(api.worker_pause("probe-2").await.expect("pause").is_none(), "a resume starts the count again at 0");
    let waiting = eventually(Duration::from_secs(20), "its retry waits", || async {
        api.run_chain(third.id).await.expect("chain").into_iter().find(|r| r.attempt == 2)
    })
    .await;
    assert_eq!(waiting.state, RunState::Queued);
    api.pause_worker("probe-2", "bob", "maintenance of the model server").await.expect("db").expect("paused");
    let cancelled = api.get_run(waiting.id).await.expect("read").expect("the retry");
    assert_eq!(cancelled.state, RunState::Cancelled);
    let error = cancelled.error.unwrap_or_default();
    assert!(error.starts_with("paused: worker probe-2 was paused"), "{error}");
    daemon.stop(Duration::from_secs(10)).await;

    let history = api.pause_history("probe-2", 10).await.expect("history");
    let actions: Vec<(PauseAction, &str, bool)> =
        history.iter().map(|e| (e.action, e.actor.as_str(), e.automatic)).collect();
    assert_eq!(
        actions,
        [
            (PauseAction::Pause, "bob", false),
            (PauseAction::Resume, "ada", false),
            (PauseAction::Pause, "scrinalia", true)
        ]
    );
    assert_eq!(history[0].reason, "maintenance of the model server");
}
