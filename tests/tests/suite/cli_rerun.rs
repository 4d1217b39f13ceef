//! Rerun with a diff against a running system (the real API and daemon, the probe of `scrinalia-demo-worker`):
//! a finished run rerun after an admin changed the worker's override runs with today's configuration, links to
//! the run it reruns, and its detail (the API's `changed_since`, `scrinalia run show`) names the changed field,
//! both values and their sources, the override's with its author and reason. A run that has not ended cannot be
//! rerun, and a viewer cannot rerun at all.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use scrinalia_tests::{
    Kind,
    daemon_harness::{probe, with_defaults},
    demo_worker, eventually,
    system::{ADMIN, System, VIEWER},
};
use serde_json::json;

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
