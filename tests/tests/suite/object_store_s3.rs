//! Run logs in an S3-compatible object store: the real daemon and the real API on one SQLite file, with
//! `object_store.kind = "s3"` pointing at a real S3-speaking server (moto's standalone server). A probe run's
//! output is written to the bucket under the configured prefix and read back through the API's log endpoint,
//! plain and followed, while the run goes on and after it ends; health reports the store ok, and down with a
//! readable reason while its bucket does not exist. Once the run is old enough for the retention policy, a prune
//! pass deletes its objects from the bucket with its ledger row.
//!
//! One backend is enough: the store does not depend on the database.

use std::{net::SocketAddr, time::Duration};

use futures::StreamExt;
use scrinalia_shared::{
    Role,
    config::{ObjectStoreKind, ObjectStoreSettings, RetentionSettings, Secret},
    logstore::LogStore,
};
use scrinalia_tests::{
    Process, TestDb,
    api_harness::{OPERATOR, VIEWER},
    daemon_harness::probe,
    demo_worker, eventually,
    fixtures::insert,
    free_port,
    moto::Moto,
};
use serde_json::{Value, json};

/// Keys moto accepts (any will do); they must never reach a log.
const ACCESS_KEY_ID: &str = "AKIASCRINALIATEST";
const SECRET_ACCESS_KEY: &str = "scrinalia-test-secret-key-never-printed";
const PREFIX: &str = "team/scrinalia";

/// The configuration of the API and the daemon: the database of `t`, an s3 store on `moto`'s `bucket`.
fn config(t: &TestDb, moto: &Moto, bucket: &str, listen: SocketAddr) -> String {
    t.config()
        .test_daemon(|d| (d.capacity, d.lease_seconds, d.poll_seconds, d.gone_after_seconds) = (2, 5, 1, 10))
        .token("otto", Role::Operator, OPERATOR)
        .token("vera", Role::Viewer, VIEWER)
        .worker(probe(&demo_worker(), "probe-1", 120))
        .with(|f| {
            f.database.max_connections = 5;
            (f.api.listen, f.api.events_poll_ms) = (listen, 100);
            f.telemetry.log_filter = "info,object_store=debug".to_owned();
            f.object_store = store_settings(moto, bucket);
        })
        .toml()
}

/// The run-log store: `moto`'s `bucket` under `PREFIX`.
fn store_settings(moto: &Moto, bucket: &str) -> ObjectStoreSettings {
    ObjectStoreSettings {
        kind: ObjectStoreKind::S3,
        bucket: Some(bucket.to_owned()),
        endpoint: Some(moto.endpoint.clone()),
        region: Some("eu-west-1".to_owned()),
        access_key_id: Some(Secret::from(ACCESS_KEY_ID.to_owned())),
        secret_access_key: Some(Secret::from(SECRET_ACCESS_KEY.to_owned())),
        prefix: format!("/{PREFIX}/"),
        ..ObjectStoreSettings::default()
    }
}

/// The real API on `config`; returns it and its base URL once it answers.
async fn start_api(t: &TestDb, config: &str, port: u16) -> (Process, String) {
    let path = t.dir.path().join("config.toml");
    std::fs::write(&path, config).expect("write the configuration");
    let path = path.display().to_string();
    let api = scrinalia_tests::start("scrinalia-api", "api", t.dir.path(), &["--config", &path], &[]);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let ready = format!("{base}/readyz");
    eventually(Duration::from_secs(30), "the API to be ready", || {
        let request = http.get(&ready).send();
        async move { request.await.ok().filter(|r| r.status().is_success()) }
    })
    .await;
    (api, base)
}

async fn get_json(base: &str, path: &str) -> Value {
    let response =
        reqwest::Client::new().get(format!("{base}{path}")).bearer_auth(VIEWER).send().await.expect("an answer");
    assert!(response.status().is_success(), "GET {path}: {}", response.status());
    response.json().await.expect("a JSON body")
}

async fn get_text(base: &str, path: &str) -> String {
    let response =
        reqwest::Client::new().get(format!("{base}{path}")).bearer_auth(VIEWER).send().await.expect("an answer");
    assert!(response.status().is_success(), "GET {path}: {}", response.status());
    response.text().await.expect("a text body")
}

/// The `object_store` check of `GET /api/health`.
async fn store_health(base: &str) -> Value {
    let health = get_json(base, "/api/health").await;
    health["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == "object_store").cloned())
        .unwrap_or_else(|| panic!("no object_store check in {health}"))
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET_ACCESS_KEY), "{what} printed the secret access key:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_output_goes_to_the_bucket_and_reads_back_through_the_api_while_and_after_it_runs() {
    let t = TestDb::sqlite().await;
    let moto = Moto::start(t.dir.path()).await;
    let bucket = "scrinalia-run-logs";
    moto.create_bucket(bucket).await;
    let port = free_port();
    let toml = config(&t, &moto, bucket, SocketAddr::from(([127, 0, 0, 1], port)));
    let (api, base) = start_api(&t, &toml, port).await;
    let config_path = t.dir.path().join("config.toml").display().to_string();
    let daemon = scrinalia_tests::start("scrinalia-daemon", "daemon", t.dir.path(), &["--config", &config_path], &[]);
    eventually(Duration::from_secs(30), "the daemon to be active", || async {
        let daemons = get_json(&base, "/api/daemons").await;
        daemons["daemons"].as_array()?.iter().any(|d| d["state"] == "active").then_some(())
    })
    .await;

    let check = store_health(&base).await;
    assert_eq!(check["status"], "ok", "{check}\nAPI output:\n{}", api.output());
    assert!(moto.keys(bucket, &format!("{PREFIX}/health/")).await.is_empty(), "the health probe deletes its key");

    // Six lines at once, then four seconds of work: the lines are in the store about a second after the start.
    let options = json!({"options": {"duration_ms": 4000, "progress_steps": 4, "output_lines": 6}});
    let run: Value = reqwest::Client::new()
        .post(format!("{base}/api/workers/probe-1/runs"))
        .bearer_auth(OPERATOR)
        .json(&options)
        .send()
        .await
        .expect("trigger")
        .json()
        .await
        .expect("a run");
    let id = run["id"].as_str().unwrap_or_else(|| panic!("no run id in {run}")).to_owned();
    let log_path = format!("/api/runs/{id}/log");
    let run_path = format!("/api/runs/{id}");
    eventually(Duration::from_secs(20), "the run to start", || async {
        (get_json(&base, &run_path).await["state"] == "running").then_some(())
    })
    .await;
    let followed = reqwest::Client::new()
        .get(format!("{base}{log_path}?follow=true"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .expect("follow the log");
    assert!(followed.status().is_success(), "follow: {}", followed.status());
    let follower = tokio::spawn(async move {
        // Decoded once whole: a chunk may end inside a character.
        let mut bytes = Vec::new();
        let mut body = followed.bytes_stream();
        while let Some(chunk) = body.next().await {
            bytes.extend_from_slice(&chunk.expect("a chunk of the followed log"));
        }
        String::from_utf8(bytes).expect("the followed log is text")
    });

    let partial = eventually(Duration::from_secs(10), "the first lines in the log while the run goes on", || async {
        let text = get_text(&base, &log_path).await;
        text.contains("stdout probe-1: stdout line 6 of 6").then_some(text)
    })
    .await;
    let state = get_json(&base, &run_path).await["state"].clone();
    assert_eq!(state, "running", "the log was readable before the run ended:\n{partial}");
    assert!(!partial.contains("done"), "the end is not there yet:\n{partial}");
    assert!(!follower.is_finished(), "a followed log stays open while the run goes on");

    let done = eventually(Duration::from_secs(30), "the run to end", || async {
        let run = get_json(&base, &run_path).await;
        (run["state"] != "running" && run["state"] != "queued").then_some(run)
    })
    .await;
    assert_eq!(done["state"], "succeeded", "{done}\ndaemon output:\n{}", daemon.output());
    let followed = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the followed log ends once the run has ended")
        .expect("the follower");
    let log = get_text(&base, &log_path).await;
    for line in [
        "stdout probe-1: stdout line 1 of 6",
        "stderr probe-1: stderr line 6 of 6",
        &format!("stderr probe-1: run {id} done"),
    ] {
        assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
    }
    assert_eq!(followed, log, "following the log gives the same text as reading it after the end");

    let run_prefix = format!("{PREFIX}/runs/probe-1/{id}/");
    let keys = moto.keys(bucket, &run_prefix).await;
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k.ends_with(".log") && k.starts_with(&run_prefix)),
        "the run's chunks are in the bucket under the prefix: {keys:?}"
    );
    assert_eq!(keys.first().map(String::as_str), Some(format!("{run_prefix}00000000.log").as_str()));
    assert_eq!(done["log_key"], json!(run_prefix.trim_end_matches('/')), "{done}");

    // Read once they have stopped, so that what they print on the way out is looked at too.
    let logs = [("the API", api.log.clone()), ("the daemon", daemon.log.clone())];
    api.stop(Duration::from_secs(10)).await;
    daemon.stop(Duration::from_secs(10)).await;
    for (what, log) in logs {
        assert_no_secret(what, &std::fs::read_to_string(log).expect("the log"));
    }

    // A hundred days on (a newer run of the worker kept as its last one), a prune pass takes the run and its log.
    let newer = insert(&t.db.api, "probe-1").await.expect("a newer run");
    t.db.api.request_cancel(newer.id, "vera").await.expect("cancel the newer run");
    let aged = format!(
        "update worker_runs set finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-100 days') where id = x'{}'",
        id.replace('-', "")
    );
    assert_eq!(t.execute(&aged).await.expect("age the run"), 1);
    let logs = LogStore::open(&store_settings(&moto, bucket)).expect("the store");
    // The daemon made a pass as it started; the next is due an interval after that one.
    let settings = RetentionSettings { keep_last_per_worker: 1, interval_seconds: 1, ..RetentionSettings::default() };
    let counts = eventually(Duration::from_secs(10), "a prune pass to be due", || async {
        t.db.daemon.prune_pass(&settings, &logs, uuid::Uuid::now_v7(), &|| false).await.expect("a prune pass")
    })
    .await;
    assert_eq!((counts.runs, counts.logs > 0), (1, true), "{counts:?}");
    assert!(moto.keys(bucket, &run_prefix).await.is_empty(), "the pruned run's chunks left the bucket");
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_a_missing_bucket_with_a_readable_reason_and_ok_once_it_exists() {
    let t = TestDb::sqlite().await;
    let moto = Moto::start(t.dir.path()).await;
    let bucket = "scrinalia-not-created-yet";
    let port = free_port();
    let toml = config(&t, &moto, bucket, SocketAddr::from(([127, 0, 0, 1], port)));
    let (api, base) = start_api(&t, &toml, port).await;

    let check = store_health(&base).await;
    assert_eq!(check["status"], "down", "{check}");
    let error = check["error"].as_str().unwrap_or_else(|| panic!("a failed check says why: {check}"));
    assert_eq!(
        error,
        format!(
            "The run-log store cannot be written: the bucket {bucket:?} does not exist at {} (object_store.bucket).",
            moto.endpoint
        ),
    );

    moto.create_bucket(bucket).await;
    // The probe's answer is kept for a few seconds (a health check must not write to the store on every call);
    // once that has run out, the store is checked afresh.
    eventually(Duration::from_secs(20), "the store to be checked afresh and found ok", || async {
        (store_health(&base).await["status"] == "ok").then_some(())
    })
    .await;
    let log = api.log.clone();
    api.stop(Duration::from_secs(10)).await;
    assert_no_secret("the API", &std::fs::read_to_string(log).expect("the log"));
    t.cleanup().await;
}
