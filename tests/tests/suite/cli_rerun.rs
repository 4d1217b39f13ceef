//! Rerun with a diff against a running system (the real API and daemon, the probe of `scrinalia-demo-worker`):
//! a finished run rerun after an admin changed the worker's override runs with today's configuration, links to
//! the run it reruns, and its detail (the API's `changed_since`, `scrinalia run show`) names the changed field,
//! both values and their sources, the override's with its author and reason. A run that has not ended cannot be
//! rerun, and a viewer cannot rerun at all. A rerun of a run's failures takes other arguments over the earlier
//! run's, checked as a fresh request's, and keeps its scope.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_tests::{
    Kind,
    daemon_harness::{probe, with_defaults},
    demo_worker, eventually,
    system::{ADMIN, OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

async fn a_rerun_after_an_override_change_shows_the_field_and_its_author(kind: Kind) {
    let defaults = [("output_lines", json!(2)), ("exit_code", json!(0))];
    let system =
        System::start(kind, |c| c.worker(with_defaults(probe(&demo_worker(), "probe-1", 120), &defaults))).await;
    // The daemon describes the probe when it starts; what its code declares is then part of every resolution,
    // so the first run waits for it (or the rerun's diff would rightly list the code's defaults too).
    eventually(Duration::from_secs(30), "the daemon to describe probe-1", || async {
        let worker = system.http(Method::GET, "/api/workers/probe-1", VIEWER, None).await.ok()?.json();
        worker["described"]["described_at"].as_str().map(drop)
    })
    .await;
    let first = system.cli(&["trigger", "probe-1", "--follow", "--json"]).await;
    let id = first.expect(0).json()["id"].as_str().expect("the run's id").to_owned();

    let refused = system.http(Method::POST, &format!("/api/runs/{id}/rerun"), VIEWER, None).await.expect("answer");
    refused.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    let change = json!({"options": {"output_lines": 5}, "reason": "longer logs for the audit"});
    let put = system.http(Method::PUT, "/api/workers/probe-1/override", ADMIN, Some(change)).await.expect("answer");
    put.expect(StatusCode::OK, None);

    let rerun = system.cli(&["rerun", &id, "--json"]).await.expect(0).json();
    assert_eq!((rerun["follows"].as_str(), rerun["follows_as"].as_str()), (Some(id.as_str()), Some("rerun")));
    assert_eq!(rerun["config"]["options"]["output_lines"], json!({"value": 5, "source": "override"}));
    let new = rerun["id"].as_str().expect("the rerun's id").to_owned();
    system.cli(&["logs", &new, "--follow"]).await.expect(0);

    let detail = system.http(Method::GET, &format!("/api/runs/{new}"), VIEWER, None).await.expect("answer");
    let detail = detail.expect(StatusCode::OK, None);
    let changes = detail["changed_since"].as_array().unwrap_or_else(|| panic!("a diff in {detail}"));
    assert_eq!(changes.len(), 1, "only the overridden option changed: {changes:?}");
    let change = &changes[0];
    assert_eq!(
        (change["field"].as_str(), &change["before"], &change["after"]),
        (Some("options.output_lines"), &json!(2), &json!(5))
    );
    assert_eq!(change["before_source"], json!({"source": "default"}));
    let after = &change["after_source"];
    assert_eq!((after["source"].as_str(), after["changed_by"].as_str()), (Some("override"), Some("ada")));
    assert_eq!(after["reason"], "longer logs for the audit");
    assert!(after["changed_at"].as_str().is_some(), "when the override changed: {after}");
    let chain: Vec<&str> = detail["chain"].as_array().expect("chain").iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(chain, [id.as_str(), new.as_str()], "the rerun is in the original's chain");
    let original = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.expect("answer");
    assert_eq!(original.expect(StatusCode::OK, None).get("changed_since"), None, "only a rerun has a diff");

    let shown = system.cli(&["run", "show", &new]).await;
    let text = &shown.expect(0).stdout;
    assert!(text.contains(&format!("run {id} (rerun, with today's configuration)")), "{shown:#?}");
    assert!(text.contains("options.output_lines: 2 (default) → 5 (override by ada"), "{shown:#?}");
    assert!(text.contains("\"longer logs for the audit\""), "{shown:#?}");

    // A run still in flight has nothing to rerun yet.
    let long = system.cli(&["trigger", "probe-1", "-o", "duration_ms=20000", "--json"]).await.expect(0).json();
    let long = long["id"].as_str().expect("the run's id").to_owned();
    let busy = system.cli(&["rerun", &long]).await;
    busy.expect(6);
    assert!(busy.stderr.contains("only a run that ended can be rerun"), "{busy:#?}");
    system.cli(&["cancel", &long]).await.expect(0);
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_rerun_after_an_override_change_shows_the_field_and_its_author() {
    a_rerun_after_an_override_change_shows_the_field_and_its_author(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_rerun_after_an_override_change_shows_the_field_and_its_author() {
    a_rerun_after_an_override_change_shows_the_field_and_its_author(Kind::Sqlite).await;
}

/// Waits until run `id` ended; its detail.
async fn ended(system: &System, id: &str) -> Value {
    eventually(Duration::from_secs(60), "the run to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        ["succeeded", "failed", "cancelled", "interrupted"].contains(&run["state"].as_str()?).then_some(run)
    })
    .await
}

/// The ids of the items run `id` reported.
async fn item_ids(system: &System, id: &str) -> Vec<String> {
    let page = system.http(Method::GET, &format!("/api/runs/{id}/items"), VIEWER, None).await.expect("answer");
    let page = page.expect(StatusCode::OK, None);
    page["items"].as_array().expect("items").iter().map(|i| i["id"].as_str().expect("an id").to_owned()).collect()
}

/// A rerun of a run's failures with other arguments (a preset, an option): the new run records the earlier run's
/// arguments with the given ones over them, is scoped to exactly the failed ids, and runs with what was given.
/// Arguments that do not resolve are a 400 with a sentence (the CLI's exit 7), bad JSON the API's usual 400, and
/// an empty body changes nothing.
async fn a_rerun_of_the_failures_takes_other_arguments(kind: Kind) {
    let mut spec = probe(&demo_worker(), "probe-1", 120);
    (spec.engine, spec.preset) = (Some("local".into()), Some("fast".into()));
    let engine = scrinalia_shared::Engine {
        kind: "none".into(),
        url: None,
        presets: [("fast".to_owned(), "small:1b".to_owned()), ("thorough".to_owned(), "big:14b".to_owned())].into(),
        description: None,
    };
    let system = System::start(kind, |c| {
        c.worker(spec).with(|f| {
            f.engines.insert("local".into(), engine);
        })
    })
    .await;
    eventually(Duration::from_secs(30), "the daemon to describe probe-1", || async {
        let worker = system.http(Method::GET, "/api/workers/probe-1", VIEWER, None).await.ok()?.json();
        worker["described"]["described_at"].as_str().map(drop)
    })
    .await;
    let body = json!({"options": {"items": 100, "failed_every": 25}});
    let first = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body.clone())).await;
    let id = first.expect("answer").expect(StatusCode::CREATED, None)["id"].as_str().expect("id").to_owned();
    let first = ended(&system, &id).await;
    assert_eq!((first["state"].as_str(), first["items"]["failed"].as_i64()), (Some("succeeded"), Some(4)));
    assert_eq!(first["arguments"], body);
    let failed = ["item-000025", "item-000050", "item-000075", "item-000100"];

    // Refusals first (they queue nothing): each names what is wrong.
    let path = format!("/api/runs/{id}/rerun-failed");
    for (given, wrong) in [
        (json!({"options": {"bogus": 1}}), "has no option \"bogus\""),
        (json!({"options": {"failed_every": -1}}), "must be at least 0"),
        (json!({"preset": "slow"}), "has no preset \"slow\""),
    ] {
        let refused = system.http(Method::POST, &path, OPERATOR, Some(given.clone())).await.expect("answer");
        let refused = refused.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
        let message = refused["message"].as_str().expect("a message");
        assert!(message.contains(wrong) && message.ends_with('.'), "{given}: {refused}");
    }
    let unknown_field = system.http(Method::POST, &path, OPERATOR, Some(json!({"presets": "x"}))).await;
    unknown_field.expect("answer").expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    let malformed = reqwest::Client::new()
        .post(format!("{}{path}", system.api_url))
        .bearer_auth(OPERATOR)
        .header("content-type", "application/json")
        .body("{\"preset\":")
        .send()
        .await
        .expect("answer");
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    let cli = system.cli(&["rerun-failed", &id, "-o", "bogus=1"]).await;
    cli.expect(7);
    assert!(cli.stderr.contains("has no option \"bogus\""), "{cli:#?}");

    // Another preset, and no failures this time: only the given fields change, the scope stays the failed ids.
    let args = ["rerun-failed", &id, "--preset", "thorough", "-o", "failed_every=0", "--json"];
    let rerun = system.cli(&args).await.expect(0).json();
    assert_eq!((rerun["follows"].as_str(), rerun["follows_as"].as_str()), (Some(id.as_str()), Some("rerun_failed")));
    let merged = json!({"preset": "thorough", "options": {"items": 100, "failed_every": 0}});
    assert_eq!(rerun["arguments"], merged);
    assert_eq!(rerun["config"]["preset"], json!({"value": "thorough", "source": "explicit"}));
    assert_eq!(rerun["config"]["model"], "big:14b");
    let new = rerun["id"].as_str().expect("the rerun's id").to_owned();
    let done = ended(&system, &new).await;
    assert_eq!(done["arguments"], merged, "the ledger keeps the merged arguments");
    let items = &done["items"];
    assert_eq!((items["succeeded"].as_i64(), items["failed"].as_i64()), (Some(4), Some(0)), "{done}");
    assert_eq!(item_ids(&system, &new).await, failed, "exactly the failures");

    // `{}` is a rerun as before: the earlier arguments, today's configuration.
    let reply = system.http(Method::POST, &format!("/api/runs/{id}/rerun"), OPERATOR, Some(json!({}))).await;
    let plain = reply.expect("answer").expect(StatusCode::CREATED, None);
    assert_eq!((plain["arguments"].clone(), plain["follows_as"].as_str()), (body, Some("rerun")));
    assert_eq!(plain["config"], first["config"]);
    let plain = ended(&system, plain["id"].as_str().expect("id")).await;
    assert_eq!(plain["changed_since"], json!([]), "nothing changed: {plain}");
    assert_eq!(plain["items"]["failed"], 4);
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_rerun_of_the_failures_takes_other_arguments() {
    a_rerun_of_the_failures_takes_other_arguments(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_rerun_of_the_failures_takes_other_arguments() {
    a_rerun_of_the_failures_takes_other_arguments(Kind::Sqlite).await;
}
