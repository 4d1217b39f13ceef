//! The API's worker view and runs, in-process on PostgreSQL and SQLite: the catalogue with effective
//! configuration and snapshots (and the items its running run reported so far), triggering (201, 409 with the
//! blocking run, 400 with the resolver's sentence), the ledger's pages and filters, a run's detail,
//! cancellation, and the run log (plain and followed).

use std::time::Duration;

use axum::{
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use futures::StreamExt;
use scrinalia_shared::{items::Gatherer, queue::NewQueueCount};
use scrinalia_tests::{
    TestDb,
    api_harness::{OPERATOR, TestApi, VIEWER},
    backend_tests,
    fixtures::{LONG_LEASE, succeeded},
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    the_worker_view_lists_the_catalogue_in_order_with_each_source,
    the_worker_view_shows_queue_snapshots_the_run_in_flight_and_the_last_finished_run,
    the_worker_view_counts_the_items_of_its_running_run,
    a_trigger_queues_a_run_with_its_resolved_configuration_and_trace_context,
    a_second_trigger_is_409_naming_the_run_in_flight,
    bad_arguments_are_400_with_the_resolvers_sentence_and_insert_nothing,
    the_ledger_pages_and_filters_through_the_api,
    a_run_shows_its_progress_history,
    cancelling_a_queued_run_is_immediate_and_a_running_one_is_requested,
    the_log_is_the_chunks_in_key_order_and_follow_streams_until_the_run_ends,
);

fn id_of(run: &Value) -> Uuid {
    run["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a run id in {run}"))
}

/// Claims the oldest queued run for a new daemon; returns the daemon's id.
async fn claim(t: &TestDb) -> Uuid {
    let daemon = Uuid::now_v7();
    let claimed = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    assert_eq!(claimed.len(), 1, "one queued run to claim");
    daemon
}

/// Triggers `worker`, claims and finishes the run; returns its id.
async fn finished_run(api: &TestApi, t: &TestDb, worker: &str) -> Uuid {
    let id = id_of(&api.trigger(worker, None).await);
    let daemon = claim(t).await;
    t.db.daemon.finish_run(id, daemon, &succeeded()).await.expect("finish");
    id
}

async fn the_worker_view_lists_the_catalogue_in_order_with_each_source(t: &TestDb) {
    let api = TestApi::new(t).await;
    let body = api.get("/api/workers", VIEWER).await.expect(StatusCode::OK, None);
    let workers = body["workers"].as_array().expect("workers");
    let names: Vec<&str> = workers.iter().filter_map(|w| w["name"].as_str()).collect();
    assert_eq!(names, ["tagger", "judge", "transfer"], "catalogue order");

    let tagger = &workers[0];
    assert_eq!(tagger["title"], "Tagging");
    assert_eq!(tagger["axis"], "enrichment");
    assert_eq!(tagger["governance"], "curator review");
    assert_eq!(tagger["stamp"], "tags_v1");
    assert_eq!(tagger["description"], "Tags documents.");
    let effective = &tagger["effective"];
    assert_eq!(effective["engine"], json!({"value": "local", "source": "default"}));
    assert_eq!(effective["preset"], json!({"value": "fast", "source": "default"}));
    assert_eq!(effective["model"], "llama3.2:1b");
    assert!(effective["endpoint"].as_str().is_some_and(|e| e.starts_with("http://127.0.0.1:")));
    assert_eq!(effective["options"]["batch_size"], json!({"value": 10, "source": "default"}));
    assert_eq!(effective["options"]["mode"], json!({"value": "quick", "source": "default"}));
    assert!(effective["options"].get("verify").is_none(), "an option without a default is not passed");
    assert_eq!(tagger["engine_configurable"], true);
    assert_eq!(tagger["options"].as_array().map(Vec::len), Some(4), "declared options for the form");
    assert_eq!(tagger["options"][1]["choices"], json!(["quick", "full"]));
    for absent in ["override", "queue", "in_flight", "last_finished", "effective_error"] {
        assert!(tagger[absent].is_null(), "{absent} is null on a fresh database");
    }

    let judge = &workers[1];
    assert_eq!(judge["engine_configurable"], false);
    assert!(judge["engine_source"].as_str().is_some_and(|s| s.contains("archive's own settings")));
    assert_eq!(judge["engine_source_url"], "https://archive.invalid/settings");
    assert_eq!(judge["effective"]["engine"]["source"], "external");
    assert_eq!(judge["effective"]["model"], "qwen2.5:7b");

    assert!(workers[2]["effective"]["engine"].is_null());
    assert_eq!(body["engines"]["local"]["presets"]["big"], "qwen2.5:7b");
    assert!(body["now"].is_string());

    let one = api.get("/api/workers/judge", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(&one, judge, "the single view is the list's entry");
    let missing = api.get("/api/workers/nobody", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    assert!(missing["message"].as_str().is_some_and(|m| m.contains("\"nobody\"")));
}

async fn the_worker_view_shows_queue_snapshots_the_run_in_flight_and_the_last_finished_run(t: &TestDb) {
    let api = TestApi::new(t).await;
    let daemon = Uuid::now_v7();
    let count = |worker: &str| NewQueueCount {
        worker: worker.to_owned(),
        pending: None,
        unmeasurable: None,
        done: None,
        error: None,
        took_ms: 12,
        measured_by: daemon,
        oldest_pending_at: None,
        threshold: None,
    };
    t.db.daemon.store_queue_count(&NewQueueCount { pending: Some(42), ..count("tagger") }).await.expect("count");
    let unmeasurable =
        NewQueueCount { unmeasurable: Some("the judge reads a live feed".into()), done: Some(7), ..count("judge") };
    t.db.daemon.store_queue_count(&unmeasurable).await.expect("count");
    t.db.daemon
        .store_queue_count(&NewQueueCount { error: Some("count-pending timed out".into()), ..count("transfer") })
        .await
        .expect("count");
    let first = finished_run(&api, t, "tagger").await;
    let second = id_of(&api.trigger("tagger", None).await);

    let tagger = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(tagger["queue"]["pending"], 42);
    assert_eq!(tagger["queue"]["took_ms"], 12);
    let age = tagger["queue"]["age_seconds"].as_f64().expect("an age");
    assert!((0.0..60.0).contains(&age), "age {age}");
    assert_eq!(id_of(&tagger["in_flight"]), second);
    assert_eq!(tagger["in_flight"]["state"], "queued");
    assert_eq!(id_of(&tagger["last_finished"]), first);
    assert_eq!(tagger["last_finished"]["state"], "succeeded");
    assert_eq!(tagger["last_finished"]["result"], json!({"processed": 3}));

    let judge = api.get("/api/workers/judge", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(judge["queue"]["unmeasurable"], "the judge reads a live feed");
    assert_eq!(judge["queue"]["done"], 7);
    assert!(judge["queue"]["pending"].is_null() && judge["in_flight"].is_null());
    let transfer = api.get("/api/workers/transfer", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(transfer["queue"]["error"], "count-pending timed out");
}

async fn the_worker_view_counts_the_items_of_its_running_run(t: &TestDb) {
    let api = TestApi::new(t).await;
    let id = id_of(&api.trigger("tagger", None).await);
    let daemon = claim(t).await;
    let tagger = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert!(tagger.get("running_items").is_none(), "no item reported yet: {tagger}");

    // 30 items (every third failed) and a malformed line, which is refused and not counted.
    let mut gatherer = Gatherer::new(10);
    for i in 0..30 {
        let outcome = if i % 3 == 0 { "failed" } else { "succeeded" };
        gatherer.offer(scrinalia_shared::items::parse(&json!({"id": format!("d{i}"), "outcome": outcome})));
    }
    gatherer.offer(scrinalia_shared::items::parse(&json!({"outcome": "failed"})));
    let batch = gatherer.take().expect("a batch");
    t.db.daemon.write_items(id, daemon, &batch).await.expect("written");

    // On the list (one statement for every worker) and on the worker's own view alike.
    let list = api.get("/api/workers", VIEWER).await.expect(StatusCode::OK, None);
    let workers = list["workers"].as_array().expect("workers");
    let tagger = workers.iter().find(|w| w["name"] == "tagger").expect("tagger");
    assert_eq!(tagger["running_items"]["items"], 30, "refused lines left out: {tagger}");
    let per_minute = tagger["running_items"]["per_minute"].as_f64().expect("a rate");
    // Claimed a moment ago: at most 30 items in a second (the least the rate is taken over) is 1,800 a minute.
    assert!(per_minute > 0.0 && per_minute <= 1800.0, "{per_minute}");
    assert!(workers.iter().filter(|w| w["name"] != "tagger").all(|w| w.get("running_items").is_none()));
    let own = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(own["running_items"]["items"], 30);

    // Once the run has ended, its card has no running run to count.
    t.db.daemon.finish_run(id, daemon, &succeeded()).await.expect("finish");
    let tagger = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert!(tagger.get("running_items").is_none(), "{tagger}");
}

async fn a_trigger_queues_a_run_with_its_resolved_configuration_and_trace_context(t: &TestDb) {
    let api = TestApi::new(t).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let request = Request::post("/api/workers/tagger/runs")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header("traceparent", traceparent)
        .body(Body::from(json!({"preset": "big", "options": {"batch_size": 5}}).to_string()))
        .expect("a request");
    let reply = api.call(request).await;
    let run = reply.expect(StatusCode::CREATED, None);
    let id = id_of(&run);
    assert_eq!(id.get_version_num(), 7, "run ids are UUIDv7");
    assert_eq!(reply.headers[header::LOCATION], format!("/api/runs/{id}").as_str());
    assert_eq!(run["worker"], "tagger");
    assert_eq!(run["state"], "queued");
    assert_eq!(run["requested_by"], "otto-operator");
    assert_eq!(run["trace_context"], traceparent);
    assert_eq!(run["config"]["preset"], json!({"value": "big", "source": "explicit"}));
    assert_eq!(run["config"]["model"], "qwen2.5:7b");
    assert_eq!(run["config"]["options"]["batch_size"], json!({"value": 5, "source": "explicit"}));
    assert_eq!(run["config"]["options"]["mode"], json!({"value": "quick", "source": "default"}));
    for field in [
        "requested_at",
        "claimed_at",
        "started_at",
        "finished_at",
        "duration_ms",
        "daemon_id",
        "progress",
        "result",
        "error",
    ] {
        assert!(run.get(field).is_some(), "a run has {field}: {run}");
    }

    let read = api.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(read["config"], run["config"]);
    assert_eq!(read["progress_history"], json!([]));

    // A trigger without a body, and with an invalid traceparent, gets a fresh trace.
    let request = Request::post("/api/workers/transfer/runs")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header("traceparent", "00-not-a-trace")
        .body(Body::empty())
        .expect("a request");
    let run = api.call(request).await.expect(StatusCode::CREATED, None);
    let trace = run["trace_context"].as_str().expect("a trace context");
    assert!(scrinalia_api::extract::is_valid_traceparent(trace) && trace != traceparent, "{trace}");
}

async fn a_second_trigger_is_409_naming_the_run_in_flight(t: &TestDb) {
    let api = TestApi::new(t).await;
    let first = id_of(&api.trigger("tagger", None).await);
    let conflict = api.post("/api/workers/tagger/runs", OPERATOR, None).await;
    let body = conflict.expect(StatusCode::CONFLICT, Some("run_in_flight"));
    assert_eq!(id_of(&json!({"id": body["run_id"]})), first);
    assert_eq!(body["state"], "queued");
    assert!(body["daemon_id"].is_null());
    let message = body["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("Worker tagger already has a run in flight (run {first}, queued)")),
        "{message}"
    );

    let daemon = claim(t).await;
    let body =
        api.post("/api/workers/tagger/runs", OPERATOR, None).await.expect(StatusCode::CONFLICT, Some("run_in_flight"));
    assert_eq!(body["state"], "running");
    assert_eq!(body["daemon_id"], daemon.to_string());
    let expected = format!(
        "Worker tagger already has a run in flight (run {first}, running on daemon {daemon}); wait for it to finish or cancel it."
    );
    assert_eq!(body["message"], expected);

    t.db.daemon.finish_run(first, daemon, &succeeded()).await.expect("finish");
    api.trigger("tagger", None).await;
}

async fn bad_arguments_are_400_with_the_resolvers_sentence_and_insert_nothing(t: &TestDb) {
    let api = TestApi::new(t).await;
    let cases = [
        ("tagger", json!({"options": {"nope": 1}}), "has no option \"nope\""),
        ("tagger", json!({"options": {"batch_size": "ten"}}), "must be a whole number"),
        ("tagger", json!({"options": {"mode": "slow"}}), "must be one of"),
        ("tagger", json!({"preset": "huge"}), "has no preset \"huge\""),
        ("tagger", json!({"engine": "gpt"}), "There is no engine \"gpt\""),
        ("judge", json!({"preset": "big"}), "is not configurable here"),
        ("transfer", json!({"preset": "fast"}), "uses no engine"),
        ("transfer", json!({"options": {"batch_size": 1}}), "accepts: none"),
    ];
    for (worker, body, expected) in cases {
        let reply = api.post(&format!("/api/workers/{worker}/runs"), OPERATOR, Some(body.clone())).await;
        let error = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
        let message = error["message"].as_str().expect("message");
        assert!(message.contains(expected), "{body} → {message:?} lacks {expected:?}");
    }
    let runs = api.get("/api/runs", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(runs["runs"], json!([]), "no bad request was inserted");
}

async fn the_ledger_pages_and_filters_through_the_api(t: &TestDb) {
    let api = TestApi::new(t).await;
    let start = t.db.api.now().await.expect("now") - chrono::Duration::seconds(1);
    let mut ids = Vec::new();
    for worker in ["tagger", "transfer", "tagger", "transfer", "tagger"] {
        ids.push(finished_run(&api, t, worker).await);
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut path = "/api/runs?limit=2".to_owned();
    loop {
        let page = api.get(&path, VIEWER).await.expect(StatusCode::OK, None);
        let runs = page["runs"].as_array().expect("runs");
        assert!(runs.len() <= 2);
        seen.extend(runs.iter().map(id_of));
        match page["next"].as_str() {
            Some(next) => path = format!("/api/runs?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every run once, newest first");

    let count = |body: Value| body["runs"].as_array().map(Vec::len).unwrap_or_default();
    assert_eq!(count(api.get("/api/runs?worker=tagger", VIEWER).await.expect(StatusCode::OK, None)), 3);
    assert_eq!(
        count(api.get("/api/runs?state=succeeded&worker=transfer", VIEWER).await.expect(StatusCode::OK, None)),
        2
    );
    assert_eq!(count(api.get("/api/runs?state=queued", VIEWER).await.expect(StatusCode::OK, None)), 0);
    let from = (start + chrono::Duration::hours(1)).to_rfc3339().replace('+', "%2B");
    assert_eq!(count(api.get(&format!("/api/runs?from={from}"), VIEWER).await.expect(StatusCode::OK, None)), 0);
    let window = format!("/api/runs?from={}&to=2999-01-01T00:00:00Z", start.to_rfc3339().replace('+', "%2B"));
    assert_eq!(count(api.get(&window, VIEWER).await.expect(StatusCode::OK, None)), 5);

    for bad in [
        "limit=0",
        "limit=501",
        "limit=ten",
        "state=sleeping",
        "from=yesterday",
        "to=2026-13-01",
        "after=garbage",
        "worker=..%2Fetc",
        "limit=%FF%FE",
    ] {
        let reply = api.get(&format!("/api/runs?{bad}"), VIEWER).await;
        reply.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
    }
}

async fn a_run_shows_its_progress_history(t: &TestDb) {
    let api = TestApi::new(t).await;
    let id = id_of(&api.trigger("tagger", None).await);
    let daemon = claim(t).await;
    for done in [10, 20] {
        t.db.daemon.record_progress(id, daemon, &json!({"done": done, "total": 40})).await.expect("progress");
    }
    let run = api.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(run["state"], "running");
    assert_eq!(run["daemon_id"], daemon.to_string());
    assert_eq!(run["progress"], json!({"done": 20, "total": 40}));
    let history = run["progress_history"].as_array().expect("history");
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["seq"], 1);
    assert_eq!(history[0]["progress"]["done"], 10);

    api.get("/api/runs/not-a-uuid", VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
    api.get(&format!("/api/runs/{}", Uuid::now_v7()), VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_run"));
}

async fn cancelling_a_queued_run_is_immediate_and_a_running_one_is_requested(t: &TestDb) {
    let api = TestApi::new(t).await;
    let queued = id_of(&api.trigger("tagger", None).await);
    let cancel = api.post(&format!("/api/runs/{queued}/cancel"), OPERATOR, None).await;
    let body = cancel.expect(StatusCode::ACCEPTED, None);
    assert_eq!(body["outcome"], "cancelled");
    assert_eq!(body["run"]["state"], "cancelled");
    assert_eq!(body["run"]["cancel_requested_by"], "otto-operator");

    let again = api.post(&format!("/api/runs/{queued}/cancel"), OPERATOR, None).await;
    let body = again.expect(StatusCode::CONFLICT, Some("run_finished"));
    assert_eq!(body["state"], "cancelled");

    let running = id_of(&api.trigger("tagger", None).await);
    claim(t).await;
    let body =
        api.post(&format!("/api/runs/{running}/cancel"), OPERATOR, None).await.expect(StatusCode::ACCEPTED, None);
    assert_eq!(body["outcome"], "requested");
    assert_eq!(body["run"]["state"], "running", "the API never ends a running run itself");
    assert!(body["run"]["cancel_requested_at"].is_string());

    let missing = format!("/api/runs/{}/cancel", Uuid::now_v7());
    api.post(&missing, OPERATOR, None).await.expect(StatusCode::NOT_FOUND, Some("unknown_run"));
    api.post("/api/runs/42/cancel", OPERATOR, None).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
}

/// Reads a followed log until it holds as many bytes as `want`, which it must then be.
async fn read_to(
    body: &mut (impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin),
    followed: &mut Vec<u8>,
    want: &str,
) {
    let read = async {
        while followed.len() < want.len() {
            let chunk = body.next().await.expect("the followed log goes on").expect("a chunk of the followed log");
            followed.extend_from_slice(&chunk);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("the log's text in time");
    assert_eq!(String::from_utf8_lossy(followed), want, "every chunk once, in key order");
}

async fn the_log_is_the_chunks_in_key_order_and_follow_streams_until_the_run_ends(t: &TestDb) {
    let api = TestApi::new(t).await;
    let id = id_of(&api.trigger("tagger", None).await);
    let daemon = claim(t).await;
    let folder = t.dir.path().join("run-logs").join("runs").join("tagger").join(id.to_string());
    std::fs::create_dir_all(&folder).expect("the log folder");
    let write = |seq: u32, text: &str| std::fs::write(folder.join(format!("{seq:08}.log")), text).expect("a chunk");
    write(2, "second\n");
    write(1, "first\n");

    let path = format!("/api/runs/{id}/log");
    let plain = api.get(&path, VIEWER).await;
    assert_eq!(plain.status, StatusCode::OK);
    assert!(plain.headers[header::CONTENT_TYPE].to_str().is_ok_and(|ct| ct.starts_with("text/plain")));
    assert_eq!(plain.text(), "first\nsecond\n");

    let follow = Request::builder()
        .method(Method::GET)
        .uri(format!("{path}?follow=true"))
        .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"))
        .body(Body::empty())
        .expect("a request");
    let response = api.open(follow).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut followed = Vec::new();
    // What the log holds arrives while the run goes on; a chunk written then arrives too, so the follow was open.
    read_to(&mut body, &mut followed, "first\nsecond\n").await;
    write(3, "third\n");
    read_to(&mut body, &mut followed, "first\nsecond\nthird\n").await;
    t.db.daemon.finish_run(id, daemon, &succeeded()).await.expect("finish");
    let rest = async {
        while let Some(chunk) = body.next().await {
            followed.extend_from_slice(&chunk.expect("a chunk of the followed log"));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), rest).await.expect("the followed log ends once the run has ended");
    assert_eq!(String::from_utf8_lossy(&followed), "first\nsecond\nthird\n", "every chunk once, in key order");

    let ended = api.get(&format!("{path}?follow=true"), VIEWER).await;
    assert_eq!(ended.text(), "first\nsecond\nthird\n", "following an ended run returns at once");
    api.get(&format!("{path}?follow=maybe"), VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
    api.get(&format!("/api/runs/{}/log", Uuid::now_v7()), VIEWER)
        .await
        .expect(StatusCode::NOT_FOUND, Some("unknown_run"));
}
