//! "Why is this waiting?" reproduced with the real API and real daemons, on both backends, and read back from
//! `GET /api/runs/{id}`: no daemon; every capable daemon at capacity (naming its run); no daemon can take the
//! worker (naming the label it lacks); a resource at capacity (naming its holder); a retry's backoff (with its
//! time); every daemon draining. Then from `GET /api/pipeline-runs/{id}` (a queued step's own reason; a step
//! whose worker has a run in flight, naming that run) and from the worker cards of `GET /api/workers`.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{ResourceSpec, RetryOn, RetryPolicy, Role, catalogue::PipelineSpec};
use scrinalia_testkit::{
    Binaries,
    probes::probe,
    stack::{Auth, Stack},
};
use scrinalia_tests::{
    ConfigFile, TestDb,
    api_harness::{OPERATOR, VIEWER},
    backend_tests,
    daemon_harness::Setup,
    demo_worker, eventually, free_port, start_daemon,
};
use serde_json::{Value, json};

backend_tests!(each_waiting_reason_is_read_back_through_the_api, a_pipeline_step_and_a_worker_card_say_why_they_wait);

/// The tests' probes and two more: probe-2 needs a `gpu` daemon, probe-3 and probe-5 share one `model-server`
/// slot, probe-1 is retried a minute after it fails; daemons of `capacity`.
fn config(t: &TestDb, port: u16, capacity: u32) -> ConfigFile {
    let bin = demo_worker();
    Setup::config(t, move |d| d.capacity = capacity)
        .with(move |f| {
            f.api.listen = ([127, 0, 0, 1], port).into();
            f.workers.push(probe(&bin, "probe-4", 120));
            f.workers.push(probe(&bin, "probe-5", 120));
            f.resources = vec![ResourceSpec {
                name: "model-server".into(),
                capacity: 1,
                description: None,
                scope: Default::default(),
                starts_per_minute: None,
                preempt_after_seconds: None,
                preempt_grace_seconds: None,
            }];
            for w in &mut f.workers {
                match w.name.as_str() {
                    "probe-1" => {
                        w.retry = Some(RetryPolicy {
                            max_attempts: 2,
                            initial_delay_seconds: 60.0,
                            factor: 1.0,
                            max_delay_seconds: 60.0,
                            jitter: 0.0,
                            on: vec![RetryOn::Failed],
                            resume: false,
                        });
                    }
                    "probe-2" => w.labels = vec!["gpu".into()],
                    "probe-3" | "probe-5" => w.resources = vec!["model-server".into()],
                    _ => {}
                }
            }
        })
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
}

async fn trigger(stack: &Stack, worker: &str, options: Value) -> String {
    let path = format!("/api/workers/{worker}/runs");
    let reply = stack.json(Method::POST, &path, OPERATOR, json!({"options": options})).await;
    reply.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned()
}

/// The run's `waiting` once its code is `code`.
async fn waits_for(stack: &Stack, id: &str, code: &str) -> Value {
    eventually(Duration::from_secs(20), &format!("run {id} waiting: {code}"), || async {
        let run = stack.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
        (run["waiting"]["code"] == code).then(|| run["waiting"].clone())
    })
    .await
}

async fn state_of(stack: &Stack, id: &str) -> Value {
    stack.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None)["state"].clone()
}

async fn each_waiting_reason_is_read_back_through_the_api(t: &TestDb) {
    let port = free_port();
    let one = config(t, port, 1);
    let stack =
        Stack::start(&Binaries::of_this_test(), t.dir.path(), &one, false).await.unwrap_or_else(|e| panic!("{e:#}"));

    let long = trigger(&stack, "probe-4", json!({"duration_ms": 60_000})).await;
    let waiting = waits_for(&stack, &long, "no_daemon").await;
    assert!(waiting["message"].as_str().is_some_and(|m| m.contains("No daemon is running")), "{waiting}");

    // One daemon of capacity 1, busy with that long run.
    let small = start_daemon(t.dir.path(), "small", &stack.config, &[]).await;
    eventually(Duration::from_secs(30), "the long run starts", || async {
        (state_of(&stack, &long).await == "running").then_some(())
    })
    .await;
    let held = trigger(&stack, "probe-3", json!({"duration_ms": 60_000})).await;
    let waiting = waits_for(&stack, &held, "capable_daemons_full").await;
    assert_eq!(waiting["runs"], json!([long]), "names the run that holds the capacity: {waiting}");
    let gpu = trigger(&stack, "probe-2", json!({})).await;
    let waiting = waits_for(&stack, &gpu, "no_capable_daemon").await;
    assert!(waiting["message"].as_str().is_some_and(|m| m.contains("lacks the label gpu")), "{waiting}");

    // A second daemon, of capacity 2: it takes probe-3, which holds the one model-server slot.
    let big_config = config(t, port, 2);
    let big_path = t.dir.path().join("big.toml");
    big_config.write(&big_path).expect("write");
    let big = start_daemon(t.dir.path(), "big", &big_path, &[]).await;
    eventually(Duration::from_secs(20), "probe-3 holds the model server", || async {
        (state_of(&stack, &held).await == "running").then_some(())
    })
    .await;
    let second = trigger(&stack, "probe-5", json!({})).await;
    let waiting = waits_for(&stack, &second, "resource_full").await;
    assert_eq!(waiting["runs"], json!([held]), "names the holder: {waiting}");
    assert!(waiting["message"].as_str().is_some_and(|m| m.contains("model-server (capacity 1)")), "{waiting}");

    // A failed run's retry waits out its backoff.
    let failing = trigger(&stack, "probe-1", json!({"exit_code": 3})).await;
    let retry = eventually(Duration::from_secs(20), "the retry", || async {
        let run = stack.get(&format!("/api/runs/{failing}"), VIEWER).await.expect(StatusCode::OK, None);
        run["chain"]
            .as_array()?
            .iter()
            .find(|r| r["id"] != failing.as_str())
            .map(|r| r["id"].as_str().map(str::to_owned))?
    })
    .await;
    let waiting = waits_for(&stack, &retry, "not_before").await;
    assert!(
        waiting["until"].is_string() && waiting["message"].as_str().is_some_and(|m| m.contains("attempt 2")),
        "{waiting}"
    );

    // Every daemon draining: nothing new is taken.
    for daemon in t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons") {
        t.db.api.request_drain(daemon.id, "test", Duration::from_secs(60)).await.expect("drain");
    }
    let waiting = waits_for(&stack, &second, "all_draining").await;
    assert_eq!(waiting["daemons"].as_array().map(Vec::len), Some(2), "{waiting}");
    drop((small, big));
}

/// The pipeline run's `waiting` once its code is `code`.
/// The worker cards of `GET /api/workers`, by name.
async fn worker_cards(stack: &Stack) -> std::collections::HashMap<String, Value> {
    let view = stack.get("/api/workers", VIEWER).await.expect(StatusCode::OK, None);
    let workers = view["workers"].as_array().expect("workers").iter();
    workers.map(|w| (w["name"].as_str().expect("a name").to_owned(), w.clone())).collect()
}

async fn a_pipeline_step_and_a_worker_card_say_why_they_wait(t: &TestDb) {
    let port = free_port();
    let config = config(t, port, 2).with(|f| {
        f.pipelines = vec![PipelineSpec {
            name: "pair".into(),
            description: None,
            steps: vec!["probe-1".into(), "probe-4".into()],
            tags: Vec::new(),
        }];
    });
    let stack =
        Stack::start(&Binaries::of_this_test(), t.dir.path(), &config, false).await.unwrap_or_else(|e| panic!("{e:#}"));

    // No daemon: a long run of probe-4, and a pipeline run whose first step is queued.
    let long = trigger(&stack, "probe-4", json!({"duration_ms": 60_000})).await;
    let arguments = json!({"arguments": {"probe-1": {"options": {"duration_ms": 50}},
        "probe-4": {"options": {"duration_ms": 50}}}});
    let started = stack.json(Method::POST, "/api/pipelines/pair/runs", OPERATOR, arguments).await;
    let started = started.expect(StatusCode::CREATED, None);
    let pipeline = started["id"].as_str().expect("an id").to_owned();
    let step = started["current_run"].as_str().expect("step 1 is requested").to_owned();
    assert_eq!(started["waiting"]["code"], "no_daemon", "the queued step's own reason, at once: {started}");
    let own = waits_for(&stack, &step, "no_daemon").await;
    let note = format!("It is step 1 of pipeline run {pipeline}");
    assert!(own["message"].as_str().is_some_and(|m| m.contains(&note)), "the step's run names its pipeline: {own}");

    // The worker cards say why their queued runs wait, with the same reasons; a card with none says nothing.
    let cards = worker_cards(&stack).await;
    assert_eq!(cards["probe-4"]["in_flight"]["id"], long.as_str());
    assert_eq!(cards["probe-4"]["waiting"]["code"], "no_daemon", "{}", cards["probe-4"]);
    assert_eq!(cards["probe-1"]["waiting"], own, "the card's reason is the run's");
    assert!(cards["probe-2"].get("waiting").is_none(), "no queued run, no reason: {}", cards["probe-2"]);
    let one = stack.get("/api/workers/probe-4", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(one["waiting"]["code"], "no_daemon", "{one}");

    // A daemon takes both; step 1 ends and step 2 cannot be requested: its worker runs the long run.
    let daemon = start_daemon(t.dir.path(), "daemon", &stack.config, &[]).await;
    eventually(Duration::from_secs(30), "the long run starts", || async {
        (state_of(&stack, &long).await == "running").then_some(())
    })
    .await;
    // Until the pipeline run is read after step 1's end moved it on, its reason may be that step 1 ended (the
    // pipeline row and its runs are two reads): wait for the reason that names the run in flight.
    let waiting = eventually(Duration::from_secs(20), "step 2 waiting for probe-4's run", || async {
        let view = stack.get(&format!("/api/pipeline-runs/{pipeline}"), VIEWER).await.expect(StatusCode::OK, None);
        let waiting = &view["waiting"];
        (waiting["code"] == "pipeline_step" && waiting["runs"] != Value::Null).then(|| waiting.clone())
    })
    .await;
    assert_eq!(waiting["runs"], json!([long]), "names the run in flight: {waiting}");
    let message = waiting["message"].as_str().unwrap_or_default();
    assert!(message.contains("Step 2 (probe-4) waits for worker probe-4's run"), "{waiting}");
    assert!(message.contains(&format!("run {long} (running) to end")), "{waiting}");
    let cards = worker_cards(&stack).await;
    assert!(cards["probe-4"].get("waiting").is_none(), "a running run does not wait: {}", cards["probe-4"]);

    // Once the long run ends, the step is requested and the pipeline run ends, with nothing to wait for.
    let cancel = stack.send(Method::POST, &format!("/api/runs/{long}/cancel"), Auth::Bearer(OPERATOR), None).await;
    cancel.expect(StatusCode::ACCEPTED, None);
    let done = eventually(Duration::from_secs(30), "the pipeline run to succeed", || async {
        let view = stack.get(&format!("/api/pipeline-runs/{pipeline}"), VIEWER).await.expect(StatusCode::OK, None);
        (view["state"] == "succeeded").then_some(view)
    })
    .await;
    assert!(done["waiting"].is_null(), "{done}");
    drop(daemon);
}
