//! A worker's history and the ledger's search through the API, on PostgreSQL and SQLite: runs seeded through the
//! domain operations with known outcomes, progress and results, then moved to known days and durations with
//! test-only SQL, so that the success rate, the percentiles and the items per day are checked exactly; each search
//! filter finds its runs and nothing else, composes with the others and with pages; bad values are 400s. What the
//! runs cost (their recorded usage and item counts) is summed per day and for the window exactly: CPU-hours, the
//! 95th percentile of peak memory, tokens, cost by currency, and each per item processed.

use axum::http::StatusCode;
use scrinalia_shared::{
    EndReason,
    items::{Gatherer, parse},
    runs::Finish,
    usage::RunUsage,
};
use scrinalia_tests::{
    Kind, TestDb,
    api_harness::{ADMIN, OPERATOR, TestApi, VIEWER},
    backend_tests,
    fixtures::LONG_LEASE,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    the_history_has_the_exact_success_rate_percentiles_and_items_per_day,
    the_history_sums_what_the_runs_cost_per_day_and_per_item,
    the_history_refuses_an_unknown_worker_and_days_out_of_range,
    the_ledger_search_finds_runs_by_requester_error_text_and_id,
    bad_search_values_are_400_with_a_sentence,
);

/// How a seeded run ends.
enum End {
    Succeeded { processed: i64 },
    Failed { error: &'static str, done: Option<i64> },
    Interrupted,
}

/// Requests a run of `worker` with `token`, claims it, reports `done` progress if asked, ends it as `end`, then
/// moves its end `days_ago` days back with a duration of `duration_ms`. Returns its id.
async fn seed(api: &TestApi, t: &TestDb, worker: &str, token: &str, end: End, days_ago: i64, duration_ms: i64) -> Uuid {
    let run = api.post(&format!("/api/workers/{worker}/runs"), token, None).await.expect(StatusCode::CREATED, None);
    let id: Uuid = run["id"].as_str().and_then(|s| s.parse().ok()).expect("a run id");
    let daemon = Uuid::now_v7();
    assert_eq!(t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim").len(), 1);
    let finish = match end {
        End::Succeeded { processed } => Finish {
            reason: EndReason::ExitStatus,
            exit_code: Some(0),
            error: None,
            result: Some(json!({"processed": processed, "failed": 1})),
            usage: None,
        },
        End::Failed { error, done } => {
            if let Some(done) = done {
                t.db.daemon.record_progress(id, daemon, &json!({"done": done, "total": 100})).await.expect("progress");
            }
            Finish {
                reason: EndReason::ExitStatus,
                exit_code: Some(1),
                error: Some(error.into()),
                result: None,
                usage: None,
            }
        }
        End::Interrupted => Finish {
            reason: EndReason::DaemonShutdown,
            exit_code: None,
            error: Some("The daemon stopped.".into()),
            result: None,
            usage: None,
        },
    };
    t.db.daemon.finish_run(id, daemon, &finish).await.expect("finish");
    move_end(t, id, days_ago, duration_ms).await;
    id
}

/// Test-only SQL: the run ended `days_ago` days ago (database clock) and took `duration_ms`.
async fn move_end(t: &TestDb, id: Uuid, days_ago: i64, duration_ms: i64) {
    let sql = match t.kind {
        Kind::Postgres => format!(
            "update worker_runs set finished_at = now() - make_interval(days => {days_ago}), \
             duration_ms = {duration_ms} where id = '{id}'"
        ),
        Kind::Sqlite => format!(
            "update worker_runs set finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{days_ago} days'), \
             duration_ms = {duration_ms} where id = x'{}'",
            id.simple()
        ),
    };
    assert_eq!(t.execute(&sql).await.expect("move the run's end"), 1);
}

fn day(history: &Value, days_ago: usize) -> &Value {
    let days = history["per_day"].as_array().expect("per_day");
    &days[days.len() - 1 - days_ago]
}

async fn the_history_has_the_exact_success_rate_percentiles_and_items_per_day(t: &TestDb) {
    let api = TestApi::new(t).await;
    // Today: four successes of 100 to 400 ms, 10 items each, and a queued run cancelled (no items).
    for ms in [100, 200, 300, 400] {
        seed(&api, t, "tagger", OPERATOR, End::Succeeded { processed: 10 }, 0, ms).await;
    }
    let queued = api.trigger("tagger", None).await;
    let cancel = api.post(&format!("/api/runs/{}/cancel", queued["id"].as_str().expect("id")), OPERATOR, None).await;
    assert_eq!(cancel.expect(StatusCode::ACCEPTED, None)["outcome"], "cancelled");
    // Yesterday: three successes of 500 to 700 ms with 20 items each, and a failure that got 7 items done.
    for ms in [500, 600, 700] {
        seed(&api, t, "tagger", OPERATOR, End::Succeeded { processed: 20 }, 1, ms).await;
    }
    seed(&api, t, "tagger", OPERATOR, End::Failed { error: "boom", done: Some(7) }, 1, 50).await;
    // Three days ago: three successes of 800 to 1000 ms, 5 items each, and an interrupted run.
    for ms in [800, 900, 1000] {
        seed(&api, t, "tagger", OPERATOR, End::Succeeded { processed: 5 }, 3, ms).await;
    }
    seed(&api, t, "tagger", OPERATOR, End::Interrupted, 3, 10).await;
    // Ten days ago (in the 30-day window only): a long success and a failure without progress.
    seed(&api, t, "tagger", OPERATOR, End::Succeeded { processed: 1000 }, 10, 5000).await;
    seed(&api, t, "tagger", OPERATOR, End::Failed { error: "old", done: None }, 10, 20).await;
    // Another worker's runs count for it alone.
    seed(&api, t, "judge", OPERATOR, End::Succeeded { processed: 99 }, 0, 1).await;

    let week = api.get("/api/workers/tagger/history?days=7", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(week["worker"], "tagger");
    assert_eq!(week["days"], 7);
    let outcomes = |h: &Value| {
        ["runs", "succeeded", "failed", "cancelled", "interrupted"].map(|k| h[k].as_u64().expect("a count"))
    };
    assert_eq!(outcomes(&week), [13, 10, 1, 1, 1], "{week}");
    assert_eq!(week["success_rate"], json!(10.0 / 13.0));
    assert_eq!(week["durations"], json!({"runs": 10, "p50_ms": 550, "p95_ms": 955}), "100 to 1000 ms");
    assert_eq!(week["items"], 40 + 60 + 7 + 15);
    let per_day = week["per_day"].as_array().expect("per_day");
    assert_eq!(per_day.len(), 7, "one entry per day, empty days included");
    let now: chrono::DateTime<chrono::Utc> = week["now"].as_str().and_then(|s| s.parse().ok()).expect("now");
    assert_eq!(day(&week, 0)["day"], now.date_naive().to_string());
    assert_eq!(week["from"], format!("{}T00:00:00Z", now.date_naive() - chrono::Duration::days(6)));
    assert_eq!((outcomes(day(&week, 0)), &day(&week, 0)["items"]), ([5, 4, 0, 1, 0], &json!(40)));
    assert_eq!((outcomes(day(&week, 1)), &day(&week, 1)["items"]), ([4, 3, 1, 0, 0], &json!(67)));
    assert_eq!((outcomes(day(&week, 3)), &day(&week, 3)["items"]), ([4, 3, 0, 0, 1], &json!(15)));
    for empty in [2, 4, 5, 6] {
        assert_eq!((outcomes(day(&week, empty)), &day(&week, empty)["items"]), ([0; 5], &json!(0)), "{empty}");
    }

    let month = api.get("/api/workers/tagger/history?days=30", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(outcomes(&month), [15, 11, 2, 1, 1], "{month}");
    assert_eq!(month["success_rate"], json!(11.0 / 15.0));
    // 100 … 1000 and 5000: the median is the sixth (600), the 95th percentile halfway from 1000 to 5000.
    assert_eq!(month["durations"], json!({"runs": 11, "p50_ms": 600, "p95_ms": 3000}));
    assert_eq!(month["items"], 122 + 1000);
    assert_eq!(month["per_day"].as_array().map(Vec::len), Some(30));
    assert_eq!(outcomes(day(&month, 10)), [2, 1, 1, 0, 0]);
    assert_eq!(day(&month, 10)["items"], 1000);

    // Today only; the default window is a week; a worker that never ran has no rate and no percentiles.
    let today = api.get("/api/workers/tagger/history?days=1", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!((outcomes(&today), &today["items"]), ([5, 4, 0, 1, 0], &json!(40)));
    assert_eq!(today["durations"], json!({"runs": 4, "p50_ms": 250, "p95_ms": 385}));
    let default = api.get("/api/workers/tagger/history", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!((default["days"].clone(), default["runs"].clone()), (json!(7), json!(13)));
    let never = api.get("/api/workers/transfer/history?days=30", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!((never["runs"].clone(), never["success_rate"].clone()), (json!(0), Value::Null));
    assert_eq!(never["durations"], json!({"runs": 0, "p50_ms": null, "p95_ms": null}));
    let judge = api.get("/api/workers/judge/history", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!((judge["runs"].clone(), judge["items"].clone()), (json!(1), json!(99)));
}

/// Requests a run of `worker`, claims it, reports `items` (succeeded, failed, skipped) if given, ends it
/// successfully with `usage`, then moves its end `days_ago` days back.
async fn seed_usage(api: &TestApi, t: &TestDb, worker: &str, usage: Option<Value>, items: [i64; 3], days_ago: i64) {
    let run = api.post(&format!("/api/workers/{worker}/runs"), OPERATOR, None).await.expect(StatusCode::CREATED, None);
    let id: Uuid = run["id"].as_str().and_then(|s| s.parse().ok()).expect("a run id");
    let daemon = Uuid::now_v7();
    assert_eq!(t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim").len(), 1);
    let mut gatherer = Gatherer::new(100);
    for (outcome, count) in ["succeeded", "failed", "skipped"].into_iter().zip(items) {
        for i in 0..count {
            gatherer.offer(parse(&json!({"id": format!("{outcome}-{i}"), "outcome": outcome})));
        }
    }
    if let Some(batch) = gatherer.take() {
        t.db.daemon.write_items(id, daemon, &batch).await.expect("items written");
    }
    let usage: Option<RunUsage> = usage.map(|u| serde_json::from_value(u).expect("a usage"));
    let finish = Finish { reason: EndReason::ExitStatus, exit_code: Some(0), error: None, result: None, usage };
    t.db.daemon.finish_run(id, daemon, &finish).await.expect("finish");
    move_end(t, id, days_ago, 1000).await;
}

async fn the_history_sums_what_the_runs_cost_per_day_and_per_item(t: &TestDb) {
    let api = TestApi::new(t).await;
    let measured = |cpu: f64, tree_peak: Option<u64>, largest: Option<u64>, reported: Value| {
        let mut usage = json!({"wall_seconds": 10.0, "measured_by": "rusage", "cpu_seconds": cpu});
        if let Some(peak) = tree_peak {
            usage["peak_memory_bytes"] = json!(peak);
        }
        if let Some(peak) = largest {
            usage["peak_rss_largest_process_bytes"] = json!(peak);
        }
        if !reported.is_null() {
            usage["reported"] = reported;
        }
        Some(usage)
    };
    // Today: 10 items processed (5 skipped, not processed) at 0.5 EUR; a run without items at 1 EUR, measured by
    // its largest process only (its tree's peak unknown); one that reported nothing, 10 items; one without usage.
    let a = json!({"tokens_in": 1000, "tokens_out": 200, "cost": 0.5, "currency": "EUR"});
    seed_usage(&api, t, "tagger", measured(1800.0, Some(1000), Some(900), a), [8, 2, 5], 0).await;
    let b = json!({"tokens_in": 3000, "tokens_out": 600, "cost": 1.0, "currency": "EUR"});
    seed_usage(&api, t, "tagger", measured(900.0, None, Some(3000), b), [0, 0, 0], 0).await;
    seed_usage(&api, t, "tagger", measured(900.0, Some(2000), None, Value::Null), [10, 0, 0], 0).await;
    seed_usage(&api, t, "tagger", None, [3, 0, 0], 0).await;
    // Yesterday: 2 USD over 5 items, tokens in only; 1 EUR without items.
    let e = json!({"tokens_in": 500, "cost": 2.0, "currency": "USD"});
    seed_usage(&api, t, "tagger", measured(360.0, Some(50), None, e), [5, 0, 0], 1).await;
    let f = json!({"cost": 1.0, "currency": "EUR"});
    seed_usage(&api, t, "tagger", measured(0.0, Some(150), None, f), [0, 0, 0], 1).await;
    // Ten days ago, outside the week.
    let old = json!({"tokens_in": 1_000_000, "cost": 100.0, "currency": "EUR"});
    seed_usage(&api, t, "tagger", measured(36000.0, Some(1 << 40), None, old), [1, 0, 0], 10).await;
    // Another worker's runs count for it alone.
    let other = json!({"tokens_in": 7, "cost": 9.0, "currency": "EUR"});
    seed_usage(&api, t, "judge", measured(3600.0, Some(7), None, other), [1, 0, 0], 0).await;

    let week = api.get("/api/workers/tagger/history?days=7", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(week["runs"], 6, "{week}");
    // Peaks 1000 (the tree's, not the largest process's 900), 3000 (the largest process's) and 2000:
    // 0.95 × 2 = 1.9 of the way, 2000 + 0.9 × 1000.
    assert_eq!(
        day(&week, 0)["usage"],
        json!({
            "runs": 3, "cpu_hours": 1.0, "peak_memory_p95_bytes": 2900, "tokens_in": 4000, "tokens_out": 800,
            "cost": {"EUR": 1.5},
            "per_item": {"items": 20, "cpu_seconds": 2700.0 / 20.0, "tokens_in": 100.0, "tokens_out": 20.0,
                         "cost": {"EUR": 0.05}},
        }),
        "tokens and cost per item are those of the one run with both items and them"
    );
    assert_eq!(
        day(&week, 1)["usage"],
        json!({
            "runs": 2, "cpu_hours": 0.1, "peak_memory_p95_bytes": 145, "tokens_in": 500, "tokens_out": 0,
            "cost": {"EUR": 1.0, "USD": 2.0},
            "per_item": {"items": 5, "cpu_seconds": 72.0, "tokens_in": 100.0, "tokens_out": 0.0, "cost": {"USD": 0.4}},
        }),
        "two currencies are never added up"
    );
    let nothing = json!({"runs": 0, "cpu_hours": 0.0, "peak_memory_p95_bytes": null, "tokens_in": 0,
                         "tokens_out": 0, "cost": {}, "per_item": null});
    assert_eq!(day(&week, 2)["usage"], nothing);
    // The window: peaks 50, 150, 1000, 2000, 3000: 0.95 × 4 = 3.8 of the way, 2000 + 0.8 × 1000.
    assert_eq!(
        week["usage"],
        json!({
            "runs": 5, "cpu_hours": 1.1, "peak_memory_p95_bytes": 2800, "tokens_in": 4500, "tokens_out": 800,
            "cost": {"EUR": 2.5, "USD": 2.0},
            "per_item": {"items": 25, "cpu_seconds": 3060.0 / 25.0, "tokens_in": 1500.0 / 15.0,
                         "tokens_out": 200.0 / 15.0, "cost": {"EUR": 0.05, "USD": 0.4}},
        })
    );
    let month = api.get("/api/workers/tagger/history?days=30", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(
        (month["usage"]["runs"].clone(), month["usage"]["cost"].clone()),
        (json!(6), json!({"EUR": 102.5, "USD": 2.0}))
    );
    // Six peaks: 0.95 × 5 = 4.75 of the way from 3000 to 1 TiB.
    assert_eq!(month["usage"]["peak_memory_p95_bytes"], json!((1u64 << 40) / 4 * 3 + 3000 / 4));
    assert_eq!(day(&month, 10)["usage"]["tokens_in"], 1_000_000);
    let judge = api.get("/api/workers/judge/history", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(
        (judge["usage"]["cpu_hours"].clone(), judge["usage"]["cost"].clone()),
        (json!(1.0), json!({"EUR": 9.0}))
    );
}

async fn the_history_refuses_an_unknown_worker_and_days_out_of_range(t: &TestDb) {
    let api = TestApi::new(t).await;
    let unknown =
        api.get("/api/workers/nobody/history", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    assert!(unknown["message"].as_str().is_some_and(|m| m.contains("nobody")), "{unknown}");
    for days in ["0", "91", "seven", "-1", "7.5"] {
        let body = api
            .get(&format!("/api/workers/tagger/history?days={days}"), VIEWER)
            .await
            .expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("`days` must be a whole number from 1 to 90") && message.ends_with('.'), "{body}");
    }
    api.get("/api/workers/tagger/history?days=90", VIEWER).await.expect(StatusCode::OK, None);
    // Both are in the OpenAPI document: the history with its `days`, the ledger with its search parameters.
    let doc = api.get("/api/openapi.json", VIEWER).await.expect(StatusCode::OK, None);
    let names = |path: &str| -> Vec<String> {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .map(|ps| ps.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    assert_eq!(names("/api/workers/{name}/history"), ["name", "days"]);
    let runs = names("/api/runs");
    assert!(["requested_by", "q", "id"].iter().all(|p| runs.iter().any(|n| n == p)), "{runs:?}");
    assert!(doc["components"]["schemas"]["WorkerHistory"].is_object(), "the history's schema");
    api.send(axum::http::Method::GET, "/api/workers/tagger/history", None, None)
        .await
        .expect(StatusCode::UNAUTHORIZED, None);
}

fn ids_of(page: &Value) -> Vec<String> {
    page["runs"].as_array().expect("runs").iter().map(|r| r["id"].as_str().expect("id").to_owned()).collect()
}

async fn the_ledger_search_finds_runs_by_requester_error_text_and_id(t: &TestDb) {
    let api = TestApi::new(t).await;
    let memory = "CUDA out of memory on GPU 1 after 10 of 12 batches; this has happened before";
    let refused = "100% of the batch_size was refused";
    let tagger = seed(&api, t, "tagger", OPERATOR, End::Failed { error: memory, done: None }, 0, 10).await.to_string();
    let judge = seed(&api, t, "judge", ADMIN, End::Failed { error: refused, done: None }, 0, 10).await.to_string();
    let transfer = seed(&api, t, "transfer", OPERATOR, End::Succeeded { processed: 1 }, 0, 10).await.to_string();
    let search = |query: &str| {
        let api = api.clone();
        let path = format!("/api/runs?{query}");
        async move { ids_of(&api.get(&path, VIEWER).await.expect(StatusCode::OK, None)) }
    };

    assert_eq!(search("requested_by=ada-admin").await, [judge.as_str()]);
    assert_eq!(search("requested_by=otto-operator").await, [transfer.as_str(), tagger.as_str()]);
    assert!(search("requested_by=otto").await.is_empty(), "the requester is matched whole");
    // Error text, whatever its case; `%` and `_` are matched as themselves, not as wildcards.
    assert_eq!(search("q=OUT%20OF%20Memory").await, [tagger.as_str()]);
    assert_eq!(search("q=0%25").await, [judge.as_str()], "a literal percent sign");
    assert_eq!(search("q=h_s").await, [judge.as_str()], "a literal underscore (not the `has` of the other)");
    assert_eq!(search("q=refused").await, [judge.as_str()]);
    assert!(search("q=nowhere").await.is_empty());
    // A whole id, or its start.
    assert_eq!(search(&format!("id={tagger}")).await, [tagger.as_str()]);
    assert_eq!(search(&format!("id={}", tagger.to_uppercase())).await, [tagger.as_str()]);
    assert_eq!(search(&format!("id={}", &tagger[..23])).await, [tagger.as_str()], "the first 20 hex digits");
    let short = &judge[..8];
    let found = search(&format!("id={short}")).await;
    assert!(found.contains(&judge) && found.iter().all(|id| id.starts_with(short)), "{found:?}");
    // With the other filters, and through pages.
    assert_eq!(search("worker=tagger&state=failed&q=memory").await, [tagger.as_str()]);
    assert!(search("worker=judge&q=memory").await.is_empty());
    assert!(search("state=succeeded&q=memory").await.is_empty());
    assert_eq!(search("state=failed&requested_by=ada-admin&q=BATCH").await, [judge.as_str()]);
    let first = api.get("/api/runs?q=e&state=failed&limit=1", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(ids_of(&first), [judge.as_str()]);
    let next = first["next"].as_str().expect("a second page");
    assert_eq!(search(&format!("q=e&state=failed&limit=1&after={next}")).await, [tagger.as_str()]);
}

async fn bad_search_values_are_400_with_a_sentence(t: &TestDb) {
    let api = TestApi::new(t).await;
    let long = "x".repeat(201);
    let cases = [
        ("id=xyz".to_owned(), "`id` must be a run id or its first 4 or more hex digits"),
        ("id=019".to_owned(), "`id` must be a run id"),
        ("id=0193ab12--".to_owned(), "`id` must be a run id"),
        (format!("q={long}"), "`q` may be at most 200 characters long, not 201."),
        (format!("requested_by={long}"), "`requested_by` may be at most 200 characters long"),
    ];
    for (query, needle) in cases {
        let body =
            api.get(&format!("/api/runs?{query}"), VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
        assert!(body["message"].as_str().is_some_and(|m| m.contains(needle)), "{query}: {body}");
    }
    // Empty values are no filter at all.
    api.get("/api/runs?q=&id=&requested_by=", VIEWER).await.expect(StatusCode::OK, None);
}
