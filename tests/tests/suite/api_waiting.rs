//! "Why is this waiting?" reproduced with the real API and real daemons, on both backends, and read back from
//! `GET /api/runs/{id}`: no daemon; every capable daemon at capacity (naming its run); no daemon can take the
//! worker (naming the label it lacks); a resource at capacity (naming its holder); a retry's backoff (with its
//! time); every daemon draining.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{ResourceSpec, RetryOn, RetryPolicy, Role};
use scrinalia_testkit::{Binaries, probes::probe, stack::Stack};
use scrinalia_tests::{
    ConfigFile, TestDb,
    api_harness::{OPERATOR, VIEWER},
    backend_tests,
    daemon_harness::Setup,
    demo_worker, eventually, free_port, start_daemon,
};
use serde_json::{Value, json};

backend_tests!(each_waiting_reason_is_read_back_through_the_api,);

/// The tests' probes and two more: probe-2 needs a `gpu` daemon, probe-3 and probe-5 share one `model-server`
/// slot, probe-1 is retried a minute after it fails; daemons of `capacity`.
fn config(t: &TestDb, port: u16, capacity: u32) -> ConfigFile {
    let bin = demo_worker();
    Setup::config(t, move |d| d.capacity = capacity)
        .with(move |f| {
            f.api.listen = ([127, 0, 0, 1], port).into();
            f.workers.push(probe(&bin, "probe-4", 120));
            f.workers.push(probe(&bin, "probe-5", 120));
            f.resources = vec![ResourceSpec { name: "model-server".into(), capacity: 1, description: None }];
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
    eventually(Duration::from_secs(20), "the long run starts", || async {
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
    for daemon in t.db.list_daemons(Duration::from_secs(60)).await.expect("daemons") {
        t.db.request_drain(daemon.id, "test", Duration::from_secs(60)).await.expect("drain");
    }
    let waiting = waits_for(&stack, &second, "all_draining").await;
    assert_eq!(waiting["daemons"].as_array().map(Vec::len), Some(2), "{waiting}");
    drop((small, big));
}
