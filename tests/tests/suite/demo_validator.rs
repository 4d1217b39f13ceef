//! The demo's quality validator, as `deploy/demo.toml` declares it, through the real daemon and API on both
//! backends: its engine comes from the active LLM_CHECK rule in the demo data (`rules.json`), which the test
//! changes as a curator would. The view, the run's reported configuration and the absence of engine flags follow
//! the rule, and health fails with a sentence when there is none.
//!
//! The catalogue's command goes through a one-line shell wrapper that appends the arguments the daemon passed to
//! a file before it runs the demo worker, so the test sees exactly which flags the validator got.

use std::{path::Path, time::Duration};

use reqwest::{Method, StatusCode};
use scrinalia_shared::{Role, Settings};
use scrinalia_testkit::stack::Stack;
use scrinalia_tests::{
    Binaries, TestDb,
    api_harness::{OPERATOR, VIEWER},
    backend_tests, demo_worker, eventually, free_port,
};
use serde_json::{Value, json};

backend_tests!(the_demo_validator_follows_its_cleaning_rule_and_never_gets_engine_flags);

const WAIT: Duration = Duration::from_secs(60);

fn write_rules(data: &Path, rules: Value) {
    std::fs::create_dir_all(data).expect("the demo data folder");
    std::fs::write(data.join("rules.json"), json!({ "rules": rules }).to_string()).expect("write rules.json");
}

async fn worker(stack: &Stack) -> Value {
    stack.get("/api/workers/quality-validator", VIEWER).await.expect(StatusCode::OK, None)
}

async fn ask(stack: &Stack, chore: &str) {
    let path = format!("/api/workers/quality-validator/{chore}");
    stack.json(Method::POST, &path, OPERATOR, json!({})).await.expect(StatusCode::ACCEPTED, None);
}

async fn view_until(stack: &Stack, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(WAIT, what, || async {
        let view = worker(stack).await;
        done(&view).then_some(view)
    })
    .await
}

async fn run(stack: &Stack) -> Value {
    let run = stack.json(Method::POST, "/api/workers/quality-validator/runs", OPERATOR, json!({})).await;
    let path = format!("/api/runs/{}", run.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id"));
    eventually(WAIT, "the run's end", || async {
        let run = stack.get(&path, VIEWER).await.expect(StatusCode::OK, None);
        (!matches!(run["state"].as_str(), Some("queued" | "running"))).then_some(run)
    })
    .await
}

async fn the_demo_validator_follows_its_cleaning_rule_and_never_gets_engine_flags(t: &TestDb) {
    let dir = t.dir.path();
    let (data, argv) = (dir.join("demo"), dir.join("argv.log"));
    let demo =
        Settings::load_from(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml")), Vec::new())
            .unwrap_or_else(|e| panic!("deploy/demo.toml: {e}"));
    let mut validator = demo.catalogue.worker("quality-validator").expect("the demo's validator").clone();
    assert!(validator.engine.is_none() && validator.preset.is_none(), "the demo catalogue names no engine for it");
    let fixed: Vec<String> = validator.command[1..].to_vec();
    let script = format!(
        "printf '%s\\n' \"$*\" >> '{}'; exec '{}' {} \"$@\"",
        argv.display(),
        demo_worker().display(),
        fixed.join(" ")
    );
    validator.command = vec!["/bin/sh".into(), "-c".into(), script, "validator".into()];
    write_rules(
        &data,
        json!([{"id": 3, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "thorough", "model": "qwen2.5:14b"}]),
    );
    let config = t
        .config()
        .test_daemon(|d| {
            d.poll_seconds = 1;
            d.worker_env = [("SCRINALIA_DEMO_DATA".to_owned(), data.display().to_string())].into();
        })
        .with(|f| {
            f.api.listen = ([127, 0, 0, 1], free_port()).into();
            f.engines = demo.catalogue.engines.clone();
        })
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
        .workers([validator]);
    let mut stack =
        Stack::start(&Binaries::of_this_test(), dir, &config, true).await.unwrap_or_else(|e| panic!("{e:#}"));

    // Described at the daemon's start: the rule's engine, named with its source; not configurable here.
    let view = view_until(&stack, "the rule's engine", |v| v["effective"]["model"] == "qwen2.5:14b").await;
    assert_eq!(view["engine_configurable"], false, "{view:#}");
    assert_eq!(view["effective"]["preset"], json!({"value": "thorough", "source": "external"}));
    assert_eq!(view["effective"]["engine_source"]["reference"], "LLM_CHECK rule 3", "{view:#}");
    let first = run(&stack).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    assert_eq!(first["reported_config"]["model"], "qwen2.5:14b", "{first:#}");

    // A curator changes the rule: after a describe, the view and the next run follow.
    write_rules(
        &data,
        json!([
            {"id": 3, "kind": "LLM_CHECK", "active": false, "engine": "ollama", "preset": "thorough", "model": "qwen2.5:14b"},
            {"id": 4, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "balanced", "model": "qwen2.5:7b"}
        ]),
    );
    ask(&stack, "describe").await;
    let view = view_until(&stack, "the new rule", |v| v["effective"]["model"] == "qwen2.5:7b").await;
    assert_eq!(view["effective"]["engine_source"]["reference"], "LLM_CHECK rule 4", "{view:#}");
    let second = run(&stack).await;
    assert_eq!(second["state"], "succeeded", "{second:#}");
    assert_eq!(second["reported_config"]["model"], "qwen2.5:7b", "{second:#}");
    assert_eq!(second["reported_config"]["source"]["reference"], "LLM_CHECK rule 4");

    // Whatever the verb, the validator never got an engine flag.
    let passed = std::fs::read_to_string(&argv).expect("the wrapper's record");
    assert_eq!(passed.lines().filter(|l| l.starts_with("run ")).count(), 2, "{passed}");
    for line in passed.lines() {
        assert!(!line.contains("--engine") && !line.contains("--preset") && !line.contains("--model"), "{line}");
    }

    // No rule: the check says so, and health fails with the sentence.
    write_rules(&data, json!([]));
    ask(&stack, "check").await;
    let check = eventually(WAIT, "health to fail on the validator", || async {
        let health = stack.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
        let check = health["checks"].as_array()?.iter().find(|c| c["name"] == "worker:quality-validator")?.clone();
        (check["status"] == "down").then_some(check)
    })
    .await;
    let error = check["error"].as_str().unwrap_or_default();
    assert!(error.contains("no active LLM_CHECK cleaning rule"), "{check:#}");
    let failed = run(&stack).await;
    assert_eq!(failed["state"], "failed", "a run without a rule fails: {failed:#}");
    stack.assert_healthy().await;
}
