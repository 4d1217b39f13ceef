//! The API of schedules, pipelines and retries, in-process on PostgreSQL and SQLite: a schedule's whole life
//! (create, read by name and by id, replace, pause, resume, delete) with its audit trail and fires; every bad
//! definition answered 400 with a sentence naming what is wrong, 409 on a taken name, 404 on an unknown one,
//! 403 for a viewer's write; the preview; a pipeline run started, refused while in flight and cancelled; a retry
//! policy set by override; and a run's retry chain, with the manual trigger refused while a retry waits.

use std::time::Duration;

use axum::http::{Method, StatusCode, header};
use chrono::{DateTime, Datelike, Timelike, Utc};
use scrinalia_api::{AppState, app};
use scrinalia_shared::{EndReason, catalogue::PipelineSpec, runs::Finish};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, TestApi, VIEWER, config_file},
    backend_tests,
    fixtures::LONG_LEASE,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    a_schedule_is_created_read_replaced_paused_resumed_and_deleted_with_its_audit_trail,
    a_deleted_schedule_keeps_its_fires_and_audit_trail_readable_by_id,
    bad_schedules_are_400_with_a_sentence_naming_what_is_wrong,
    taken_names_unknown_schedules_and_roles_are_409_404_and_403,
    the_preview_is_the_next_three_fire_times,
    a_pipeline_run_starts_its_first_step_refuses_a_second_and_cancels,
    a_retry_policy_set_by_override_is_audited_and_shown_with_its_source,
    a_trigger_while_a_retry_waits_is_409_naming_it_and_a_run_shows_its_chain,
    the_document_describes_the_schedule_and_pipeline_routes,
);

/// The test API over `t` (the harness's catalogue: `tagger`, `judge`, `transfer`) with the pipeline `p` of
/// steps `transfer` then `tagger`.
async fn api_of(t: &TestDb) -> TestApi {
    let pipeline = PipelineSpec {
        name: "p".into(),
        description: Some("Transfer, then tag.".into()),
        steps: vec!["transfer".into(), "tagger".into()],
    };
    let config = config_file(&t.url, t.dir.path(), &ApiConfig::default()).with(|f| f.pipelines = vec![pipeline]);
    let settings = config.load(&t.dir.path().join("config.toml")).expect("a valid configuration");
    let state = AppState::new(settings, t.db.clone());
    TestApi { router: app(state.clone()), state, peer: std::net::SocketAddr::from(([127, 0, 0, 1], 40000)) }
}

fn uuid_of(v: &Value) -> Uuid {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a UUID, not {v}"))
}

fn time_of(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("an RFC 3339 time, not {v}"))
}

/// The fire times of `upcoming`, asserting there are three, each after the one before.
fn three_increasing(upcoming: &Value) -> Vec<DateTime<Utc>> {
    let times: Vec<DateTime<Utc>> = upcoming.as_array().expect("upcoming").iter().map(time_of).collect();
    assert_eq!(times.len(), 3, "three upcoming fire times: {upcoming}");
    assert!(times.windows(2).all(|w| w[0] < w[1]), "increasing: {upcoming}");
    times
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

async fn put(api: &TestApi, path: &str, token: &str, body: Value) -> scrinalia_tests::Reply {
    api.send(Method::PUT, path, Some(token), Some(body)).await
}

async fn delete(api: &TestApi, path: &str, token: &str, body: Option<Value>) -> scrinalia_tests::Reply {
    api.send(Method::DELETE, path, Some(token), body).await
}

fn nightly() -> Value {
    json!({
        "name": "nightly-tags",
        "worker": "tagger",
        "cron": "0 3 * * *",
        "time_zone": "Europe/Berlin",
        "arguments": {"options": {"batch_size": 5}},
        "reason": "tag what came in during the day",
    })
}

async fn a_schedule_is_created_read_replaced_paused_resumed_and_deleted_with_its_audit_trail(t: &TestDb) {
    let api = api_of(t).await;
    assert_eq!(api.get("/api/schedules", VIEWER).await.expect(StatusCode::OK, None), json!([]));

    let reply = api.post("/api/schedules", OPERATOR, Some(nightly())).await;
    let created = reply.expect(StatusCode::CREATED, None);
    let id = uuid_of(&created["id"]);
    assert_eq!(reply.headers[header::LOCATION], format!("/api/schedules/{id}").as_str());
    assert_eq!(created["name"], "nightly-tags");
    assert_eq!(created["target_kind"], "worker");
    assert_eq!(created["target"], "tagger");
    assert_eq!(created["cron"], "0 3 * * *");
    assert_eq!(created["time_zone"], "Europe/Berlin");
    assert_eq!(created["arguments"], json!({"options": {"batch_size": 5}}));
    assert_eq!(created["enabled"], true);
    assert_eq!(created["overlap"], "skip");
    assert_eq!(created["missed"], "skip");
    assert_eq!(created["created_by"], "otto-operator");
    assert!(created["last_fire"].is_null() && created["waiting_fire_at"].is_null());
    let upcoming = three_increasing(&created["upcoming"]);
    assert_eq!(time_of(&created["next_fire_at"]), upcoming[0]);
    assert!(upcoming.windows(2).all(|w| (w[1] - w[0]).num_hours() >= 23), "daily: {upcoming:?}");

    let list = api.get("/api/schedules", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(list, json!([created]));
    let by_name = api.get("/api/schedules/nightly-tags", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(by_name, created);
    let by_id = api.get(&format!("/api/schedules/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(by_id, created);

    // Replace: a new expression, the same id; the next fire time is computed again.
    let mut input = nightly();
    input["cron"] = json!("*/30 * * * *");
    input["time_zone"] = json!("UTC");
    input["reason"] = json!("twice an hour while the backlog lasts");
    let replaced = put(&api, "/api/schedules/nightly-tags", OPERATOR, input).await.expect(StatusCode::OK, None);
    assert_eq!(uuid_of(&replaced["id"]), id);
    assert_eq!(replaced["cron"], "*/30 * * * *");
    assert_eq!(replaced["updated_by"], "otto-operator");
    let upcoming = three_increasing(&replaced["upcoming"]);
    assert!(upcoming.windows(2).all(|w| (w[1] - w[0]).num_minutes() == 30), "every 30 minutes: {upcoming:?}");

    // Pause (reason in the query string), resume (reason in the body).
    let paused = api
        .post("/api/schedules/nightly-tags/pause?reason=the%20model%20server%20is%20down", OPERATOR, None)
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(paused["enabled"], false);
    assert!(paused["next_fire_at"].is_null(), "a paused schedule has no next fire: {paused}");
    assert_eq!(paused["upcoming"], json!([]));
    let resumed = api
        .post(&format!("/api/schedules/{id}/resume"), OPERATOR, Some(json!({"reason": "it is back"})))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(resumed["enabled"], true);
    assert!(resumed["next_fire_at"].is_string());
    three_increasing(&resumed["upcoming"]);

    // Delete: the answer is the schedule as it was.
    let deleted = delete(&api, "/api/schedules/nightly-tags", OPERATOR, Some(json!({"reason": "the backlog is gone"})))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(uuid_of(&deleted["id"]), id);
    assert_eq!(deleted["cron"], "*/30 * * * *");
    assert!(deleted.get("upcoming").is_none(), "a plain schedule: {deleted}");
    for gone in ["/api/schedules/nightly-tags".to_owned(), format!("/api/schedules/{id}")] {
        let body = api.get(&gone, VIEWER).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
        assert!(message(&body).contains("There is no schedule"), "{body}");
    }
    assert_eq!(api.get("/api/schedules", VIEWER).await.expect(StatusCode::OK, None), json!([]));

    // The audit trail: every change, newest first, with actor, before, after and reason.
    let trail = api.get(&format!("/api/schedules/{id}/audit"), VIEWER).await.expect(StatusCode::OK, None);
    let entries = trail.as_array().expect("entries");
    let actions: Vec<&str> = entries.iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["delete", "resume", "pause", "change", "create"], "{trail}");
    for entry in entries {
        assert_eq!(entry["actor"], "otto-operator");
        assert_eq!(uuid_of(&entry["schedule_id"]), id);
        assert!(entry["at"].is_string());
    }
    let reasons: Vec<&str> = entries.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(
        reasons,
        [
            "the backlog is gone",
            "it is back",
            "the model server is down",
            "twice an hour while the backlog lasts",
            "tag what came in during the day",
        ]
    );
    let [delete_entry, resume, pause, change, create] = entries.as_slice() else { panic!("five entries") };
    assert!(create["before"].is_null() && create["after"]["cron"] == "0 3 * * *", "{create}");
    assert_eq!(change["before"]["cron"], "0 3 * * *");
    assert_eq!(change["after"]["cron"], "*/30 * * * *");
    assert_eq!((&pause["before"]["enabled"], &pause["after"]["enabled"]), (&json!(true), &json!(false)));
    assert!(pause["after"]["next_fire_at"].is_null());
    assert_eq!((&resume["before"]["enabled"], &resume["after"]["enabled"]), (&json!(false), &json!(true)));
    assert!(delete_entry["after"].is_null() && delete_entry["before"]["name"] == "nightly-tags", "{delete_entry}");

    let two = api.get(&format!("/api/schedules/{id}/audit?limit=2"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(two.as_array().map(Vec::len), Some(2));
    let bad = api.get(&format!("/api/schedules/{id}/audit?limit=0"), VIEWER).await;
    assert!(message(&bad.expect(StatusCode::BAD_REQUEST, Some("invalid_query"))).contains("`limit`"));
}

async fn a_deleted_schedule_keeps_its_fires_and_audit_trail_readable_by_id(t: &TestDb) {
    let api = api_of(t).await;
    let every_second = json!({"name": "every-second", "worker": "transfer", "cron": "* * * * * *",
        "reason": "a schedule that is due at once"});
    let created = api.post("/api/schedules", OPERATOR, Some(every_second)).await.expect(StatusCode::CREATED, None);
    let id = uuid_of(&created["id"]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let pass =
        t.db.fire_due_schedules(api.state.catalogue(), Uuid::now_v7(), Duration::from_secs(60))
            .await
            .expect("fire what is due");
    assert!(pass.requested >= 1, "the schedule fired: {pass:?}");

    let fires = api.get("/api/schedules/every-second/fires", VIEWER).await.expect(StatusCode::OK, None);
    let fires = fires.as_array().expect("fires").clone();
    // One fire requested a run; any later one (the pass caught up a second) found it in flight.
    let requested: Vec<&Value> = fires.iter().filter(|f| f["outcome"] == "requested").collect();
    assert_eq!(requested.len(), 1, "{fires:?}");
    assert!(fires.iter().all(|f| f["outcome"] == "requested" || f["outcome"] == "skipped"), "{fires:?}");
    let run = uuid_of(&requested[0]["run_id"]);
    let times: Vec<DateTime<Utc>> = fires.iter().map(|f| time_of(&f["fire_at"])).collect();
    assert!(times.windows(2).all(|w| w[0] > w[1]), "newest first: {times:?}");
    let view = api.get("/api/schedules/every-second", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(view["last_fire"], fires[0], "the view shows the last fire");
    let fired = api.get(&format!("/api/runs/{run}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(fired["requested_by"], "schedule:every-second");
    assert_eq!(uuid_of(&fired["schedule_id"]), id);

    delete(&api, "/api/schedules/every-second?reason=enough", OPERATOR, None).await.expect(StatusCode::OK, None);
    let kept = api.get(&format!("/api/schedules/{id}/fires"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(kept.as_array().expect("fires"), &fires, "the fires outlive the schedule");
    let trail = api.get(&format!("/api/schedules/{id}/audit"), VIEWER).await.expect(StatusCode::OK, None);
    let actions: Vec<&str> = trail.as_array().expect("entries").iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["delete", "create"]);
    // By name, a deleted schedule is unknown.
    for path in ["/api/schedules/every-second/fires", "/api/schedules/every-second/audit"] {
        api.get(path, VIEWER).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
    }
}

async fn bad_schedules_are_400_with_a_sentence_naming_what_is_wrong(t: &TestDb) {
    let api = api_of(t).await;
    let with = |edit: &[(&str, Value)]| {
        let mut body = json!({"name": "s", "worker": "tagger", "cron": "0 3 * * *", "reason": "a test"});
        for (key, value) in edit {
            if value.is_null() {
                body.as_object_mut().expect("an object").remove(*key);
            } else {
                body[*key] = value.clone();
            }
        }
        body
    };
    let cases: Vec<(&str, Value, &str, &[&str])> = vec![
        ("four fields", with(&[("cron", json!("0 3 * *"))]), "invalid_cron", &["4 fields", "it needs"]),
        ("seven fields", with(&[("cron", json!("0 0 3 * * * *"))]), "invalid_cron", &["7 fields"]),
        ("minute 61", with(&[("cron", json!("61 * * * *"))]), "invalid_cron", &["minute", "61"]),
        ("a bad token", with(&[("cron", json!("0 x * * *"))]), "invalid_cron", &["hour", "\"x\""]),
        ("a bad month name", with(&[("cron", json!("0 0 1 FOO *"))]), "invalid_cron", &["month", "FOO"]),
        ("an unknown shorthand", with(&[("cron", json!("@fortnightly"))]), "invalid_cron", &["@fortnightly"]),
        ("an empty expression", with(&[("cron", json!(""))]), "invalid_cron", &["empty"]),
        (
            "an unknown time zone",
            with(&[("time_zone", json!("Mars/Olympus"))]),
            "invalid_time_zone",
            &["Mars/Olympus", "IANA"],
        ),
        ("no target", with(&[("worker", Value::Null)]), "invalid_schedule", &["\"worker\"", "\"pipeline\""]),
        ("two targets", with(&[("pipeline", json!("p"))]), "invalid_schedule", &["exactly one"]),
        ("an unknown worker", with(&[("worker", json!("nobody"))]), "invalid_schedule", &["worker", "\"nobody\""]),
        (
            "an unknown pipeline",
            with(&[("worker", Value::Null), ("pipeline", json!("nope"))]),
            "invalid_schedule",
            &["pipeline", "\"nope\""],
        ),
        (
            "an unknown option",
            with(&[("arguments", json!({"options": {"colour": "red"}}))]),
            "invalid_schedule",
            &["colour"],
        ),
        (
            "an option of the wrong type",
            with(&[("arguments", json!({"options": {"batch_size": "ten"}}))]),
            "invalid_schedule",
            &["batch_size"],
        ),
        (
            "arguments that are not a run's",
            with(&[("arguments", json!({"speed": 3}))]),
            "invalid_schedule",
            &["tagger", "speed"],
        ),
        (
            "a step the pipeline does not have",
            with(&[("worker", Value::Null), ("pipeline", json!("p")), ("arguments", json!({"judge": {}}))]),
            "invalid_schedule",
            &["judge", "transfer, tagger"],
        ),
        ("a bad name", with(&[("name", json!("not a name!"))]), "invalid_schedule", &["not a name!", "letters"]),
        ("an empty name", with(&[("name", json!(""))]), "invalid_schedule", &["name"]),
        ("no reason", with(&[("reason", Value::Null)]), "reason_required", &["reason", "schedule"]),
        ("a blank reason", with(&[("reason", json!("   "))]), "reason_required", &["reason"]),
        ("a reason with NUL", with(&[("reason", json!("a\u{0}b"))]), "reason_invalid", &["NUL"]),
        ("a reason too long", with(&[("reason", json!("x".repeat(2001)))]), "reason_too_long", &["2000"]),
    ];
    for (what, body, code, words) in &cases {
        let reply = api.post("/api/schedules", OPERATOR, Some(body.clone())).await;
        let answer = reply.expect_of(what, StatusCode::BAD_REQUEST, Some(code));
        for word in *words {
            assert!(message(&answer).contains(word), "{what}: the message names {word:?}: {answer}");
        }
        if *what == "minute 61" {
            assert_eq!(answer["field"], "minute", "{answer}");
        }
    }
    assert_eq!(api.get("/api/schedules", VIEWER).await.expect(StatusCode::OK, None), json!([]), "nothing written");

    // Unknown fields are refused by the body's extractor, with a sentence naming the field.
    let reply = api.post("/api/schedules", OPERATOR, Some(with(&[("colour", json!("red"))]))).await;
    let answer = reply.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    assert!(message(&answer).contains("colour"), "{answer}");
    let reply = api.send(Method::POST, "/api/schedules", Some(OPERATOR), None).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_schedule"));

    // A replacement is checked as a creation is.
    api.post("/api/schedules", OPERATOR, Some(with(&[]))).await.expect(StatusCode::CREATED, None);
    for (what, body, code, words) in &cases {
        let reply = put(&api, "/api/schedules/s", OPERATOR, body.clone()).await;
        let answer = reply.expect_of(what, StatusCode::BAD_REQUEST, Some(code));
        assert!(words.iter().all(|w| message(&answer).contains(w)), "{what}: {answer}");
    }
    let unchanged = api.get("/api/schedules/s", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(unchanged["cron"], "0 3 * * *");
    for action in ["pause", "resume"] {
        let reply = api.post(&format!("/api/schedules/s/{action}"), OPERATOR, None).await;
        assert!(message(&reply.expect(StatusCode::BAD_REQUEST, Some("reason_required"))).contains("reason"));
    }
    let reply = delete(&api, "/api/schedules/s?reason=%20", OPERATOR, None).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("reason_required"));
    api.get("/api/schedules/s", VIEWER).await.expect(StatusCode::OK, None);
}

async fn taken_names_unknown_schedules_and_roles_are_409_404_and_403(t: &TestDb) {
    let api = api_of(t).await;
    let first = api.post("/api/schedules", OPERATOR, Some(nightly())).await.expect(StatusCode::CREATED, None);
    let twice = api.post("/api/schedules", OPERATOR, Some(nightly())).await;
    let body = twice.expect(StatusCode::CONFLICT, Some("schedule_name_taken"));
    assert!(message(&body).contains("\"nightly-tags\""), "{body}");
    assert_eq!(body["name"], "nightly-tags");
    let mut other = nightly();
    other["name"] = json!("other");
    api.post("/api/schedules", OPERATOR, Some(other.clone())).await.expect(StatusCode::CREATED, None);
    // Renaming onto a taken name is refused; keeping one's own name is not a conflict.
    let reply = put(&api, "/api/schedules/other", OPERATOR, nightly()).await;
    reply.expect(StatusCode::CONFLICT, Some("schedule_name_taken"));
    put(&api, "/api/schedules/other", OPERATOR, other.clone()).await.expect(StatusCode::OK, None);

    let unknown = Uuid::now_v7();
    for key in ["nobody".to_owned(), unknown.to_string()] {
        let path = format!("/api/schedules/{key}");
        let why = json!({"reason": "a test"});
        let body = api.get(&path, VIEWER).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
        assert!(message(&body).contains(&key), "{body}");
        put(&api, &path, OPERATOR, nightly()).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
        for action in ["pause", "resume"] {
            let reply = api.post(&format!("{path}/{action}"), OPERATOR, Some(why.clone())).await;
            reply.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
        }
        let reply = delete(&api, &path, OPERATOR, Some(why)).await;
        reply.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
    }
    api.get("/api/schedules/nobody/fires", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
    api.get("/api/schedules/nobody/audit", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));

    // Reads are the viewer's; every write needs an operator.
    let id = uuid_of(&first["id"]);
    let reason = json!({"reason": "a viewer tries"});
    let writes = [
        api.post("/api/schedules", VIEWER, Some(other.clone())).await,
        put(&api, "/api/schedules/nightly-tags", VIEWER, nightly()).await,
        api.post("/api/schedules/nightly-tags/pause", VIEWER, Some(reason.clone())).await,
        api.post(&format!("/api/schedules/{id}/resume"), VIEWER, Some(reason.clone())).await,
        delete(&api, "/api/schedules/nightly-tags", VIEWER, Some(reason.clone())).await,
        api.post("/api/pipelines/p/runs", VIEWER, None).await,
        api.post(&format!("/api/pipeline-runs/{id}/cancel"), VIEWER, None).await,
    ];
    for reply in writes {
        let body = reply.expect(StatusCode::FORBIDDEN, Some("forbidden"));
        assert_eq!(body["required_role"], "operator");
    }
    for path in ["/api/schedules", "/api/schedules/nightly-tags", "/api/pipelines"] {
        api.send(Method::GET, path, None, None).await.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    }
    api.send(Method::POST, "/api/schedules/preview", None, Some(json!({"cron": "@daily"})))
        .await
        .expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    let view = api.get("/api/schedules/nightly-tags", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(view["enabled"], true, "nothing a viewer sent changed it");
    let trail = api.get("/api/schedules/nightly-tags/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(trail.as_array().map(Vec::len), Some(1), "only the creation: {trail}");
    // An admin is an operator too.
    let reply = api.post("/api/schedules/nightly-tags/pause", ADMIN, Some(reason)).await;
    assert_eq!(reply.expect(StatusCode::OK, None)["updated_by"], "ada-admin");
}

async fn the_preview_is_the_next_three_fire_times(t: &TestDb) {
    let api = api_of(t).await;
    let now = t.db.now().await.expect("the database clock");
    let preview = api
        .post("/api/schedules/preview", VIEWER, Some(json!({"cron": "*/5 * * * *"})))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(preview["cron"], "*/5 * * * *");
    assert_eq!(preview["time_zone"], "UTC");
    let times = three_increasing(&preview["upcoming"]);
    assert!(times[0] > now && times[0] - now <= chrono::Duration::minutes(5), "after now: {times:?} {now}");
    assert!(times.windows(2).all(|w| (w[1] - w[0]).num_minutes() == 5));
    assert!(times.iter().all(|t| t.timestamp() % 300 == 0));

    let berlin = api
        .post("/api/schedules/preview", VIEWER, Some(json!({"cron": "0 9 * * MON-FRI", "time_zone": "Europe/Berlin"})))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(berlin["time_zone"], "Europe/Berlin");
    // 09:00 in Berlin is 07:00 or 08:00 UTC, the same day.
    let times = three_increasing(&berlin["upcoming"]);
    let weekday = |t: &DateTime<Utc>| t.weekday().number_from_monday() <= 5;
    assert!(
        times.iter().all(|t| weekday(t) && [7, 8].contains(&t.hour()) && t.minute() == 0),
        "weekdays at 09:00 in Berlin: {times:?}"
    );

    let bad = [
        (json!({"cron": "61 * * * *"}), "invalid_cron", "minute"),
        (json!({"cron": "* * *"}), "invalid_cron", "3 fields"),
        (json!({"cron": "@sometimes"}), "invalid_cron", "@sometimes"),
        (json!({"cron": "@daily", "time_zone": "Mars/Olympus"}), "invalid_time_zone", "Mars/Olympus"),
    ];
    for (body, code, word) in bad {
        let reply = api.post("/api/schedules/preview", VIEWER, Some(body.clone())).await;
        let answer = reply.expect_of(&body.to_string(), StatusCode::BAD_REQUEST, Some(code));
        assert!(message(&answer).contains(word), "{body}: {answer}");
    }
    let reply = api.post("/api/schedules/preview", VIEWER, Some(json!({"cron": "@daily", "name": "x"}))).await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));

    // A schedule may be called "preview": its path is the preview's, whose other methods are that schedule's.
    let mut named = nightly();
    named["name"] = json!("preview");
    api.get("/api/schedules/preview", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("schedule_not_found"));
    let created = api.post("/api/schedules", OPERATOR, Some(named.clone())).await.expect(StatusCode::CREATED, None);
    assert_eq!(api.get("/api/schedules/preview", VIEWER).await.expect(StatusCode::OK, None), created);
    named["cron"] = json!("@hourly");
    let replaced = put(&api, "/api/schedules/preview", OPERATOR, named).await.expect(StatusCode::OK, None);
    assert_eq!((&replaced["id"], &replaced["cron"]), (&created["id"], &json!("@hourly")));
    put(&api, "/api/schedules/preview", VIEWER, json!({})).await.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    let paused = api.post("/api/schedules/preview/pause?reason=quiet", OPERATOR, None).await;
    assert_eq!(paused.expect(StatusCode::OK, None)["enabled"], false);
    let deleted = delete(&api, "/api/schedules/preview?reason=done", OPERATOR, None).await;
    assert_eq!(deleted.expect(StatusCode::OK, None)["id"], created["id"]);
    let trail = api.get(&format!("/api/schedules/{}/audit", created["id"].as_str().unwrap_or_default()), VIEWER).await;
    assert_eq!(trail.expect(StatusCode::OK, None).as_array().map(Vec::len), Some(4));
}

async fn a_pipeline_run_starts_its_first_step_refuses_a_second_and_cancels(t: &TestDb) {
    let api = api_of(t).await;
    let pipelines = api.get("/api/pipelines", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(
        pipelines,
        json!([{"name": "p", "description": "Transfer, then tag.", "steps": ["transfer", "tagger"], "last_run": null}])
    );
    assert_eq!(api.get("/api/pipelines/p/runs", VIEWER).await.expect(StatusCode::OK, None), json!([]));

    // Refused before anything starts: an unknown pipeline, arguments for a worker that is no step, a step's
    // arguments that do not fit.
    let body = api.post("/api/pipelines/nope/runs", OPERATOR, None).await;
    assert!(message(&body.expect(StatusCode::NOT_FOUND, Some("pipeline_not_found"))).contains("\"nope\""));
    api.get("/api/pipelines/nope/runs", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("pipeline_not_found"));
    let stranger = json!({"arguments": {"judge": {}}});
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(stranger)).await;
    let answer = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(message(&answer).contains("\"judge\"") && message(&answer).contains("transfer, tagger"), "{answer}");
    let unfit = json!({"arguments": {"tagger": {"options": {"colour": "red"}}}});
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(unfit)).await;
    let answer = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(message(&answer).contains("Step 2 (tagger)") && message(&answer).contains("colour"), "{answer}");
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(json!({"arguments": [1]}))).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, Some(json!({"steps": {}}))).await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    assert_eq!(api.get("/api/pipelines/p/runs", VIEWER).await.expect(StatusCode::OK, None), json!([]));

    // Started (no body at all): its first step's run is queued.
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, None).await;
    let started = reply.expect(StatusCode::CREATED, None);
    let id = uuid_of(&started["id"]);
    assert_eq!(reply.headers[header::LOCATION], format!("/api/pipeline-runs/{id}").as_str());
    assert_eq!(started["pipeline"], "p");
    assert_eq!(started["state"], "running");
    assert_eq!(started["steps"], json!(["transfer", "tagger"]));
    assert_eq!(started["step"], 0);
    assert_eq!(started["requested_by"], "otto-operator");
    assert!(started["waiting"].is_null());
    let runs = started["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{started}");
    assert_eq!(runs[0]["worker"], "transfer");
    assert_eq!(runs[0]["state"], "queued");
    assert_eq!(runs[0]["pipeline_step"], 0);
    assert_eq!(uuid_of(&runs[0]["pipeline_run_id"]), id);
    let step_run = uuid_of(&runs[0]["id"]);
    assert_eq!(uuid_of(&started["current_run"]), step_run);

    // A second start is refused, naming the run in flight.
    let reply = api.post("/api/pipelines/p/runs", OPERATOR, None).await;
    let conflict = reply.expect(StatusCode::CONFLICT, Some("pipeline_in_flight"));
    assert!(message(&conflict).contains(&id.to_string()) && message(&conflict).contains("step 1 of 2"), "{conflict}");
    assert_eq!(uuid_of(&conflict["pipeline_run_id"]), id);

    let read = api.get(&format!("/api/pipeline-runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(read, started);
    let listed = api.get("/api/pipelines/p/runs?limit=5", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(listed.as_array().map(|r| r.iter().map(|r| uuid_of(&r["id"])).collect::<Vec<_>>()), Some(vec![id]));
    assert!(listed[0].get("runs").is_none(), "the list has plain pipeline runs: {listed}");
    let pipelines = api.get("/api/pipelines", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(uuid_of(&pipelines[0]["last_run"]["id"]), id);
    let reply = api.get("/api/pipelines/p/runs?limit=501", VIEWER).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));

    // Cancelled: its queued step at once, and the pipeline run with it.
    let cancelled =
        api.post(&format!("/api/pipeline-runs/{id}/cancel"), OPERATOR, None).await.expect(StatusCode::OK, None);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["cancel_requested_by"], "otto-operator");
    assert!(cancelled["finished_at"].is_string());
    assert!(cancelled["error"].as_str().is_some_and(|e| e.contains("otto-operator")), "{cancelled}");
    assert_eq!(cancelled["runs"][0]["state"], "cancelled");
    let step = api.get(&format!("/api/runs/{step_run}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(step["state"], "cancelled");
    assert_eq!(step["cancel_requested_by"], "otto-operator");
    // Again: it already ended, and is answered unchanged.
    let again = api.post(&format!("/api/pipeline-runs/{id}/cancel"), OPERATOR, None).await.expect(StatusCode::OK, None);
    assert_eq!(again, cancelled);

    // The pipeline is free again; a start with arguments for a step.
    let body = json!({"arguments": {"transfer": {}, "tagger": {"options": {"batch_size": 3}}}});
    let second = api.post("/api/pipelines/p/runs", OPERATOR, Some(body)).await.expect(StatusCode::CREATED, None);
    assert_eq!(second["arguments"]["tagger"], json!({"options": {"batch_size": 3}}));
    let listed = api.get("/api/pipelines/p/runs", VIEWER).await.expect(StatusCode::OK, None);
    let order: Vec<Uuid> = listed.as_array().expect("runs").iter().map(|r| uuid_of(&r["id"])).collect();
    assert_eq!(order, [uuid_of(&second["id"]), id], "newest first");

    let unknown = Uuid::now_v7();
    let reply = api.get(&format!("/api/pipeline-runs/{unknown}"), VIEWER).await;
    assert!(
        message(&reply.expect(StatusCode::NOT_FOUND, Some("pipeline_run_not_found"))).contains(&unknown.to_string())
    );
    let reply = api.post(&format!("/api/pipeline-runs/{unknown}/cancel"), OPERATOR, None).await;
    reply.expect(StatusCode::NOT_FOUND, Some("pipeline_run_not_found"));
    api.get("/api/pipeline-runs/not-a-uuid", VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));

    // A schedule of the pipeline.
    let schedule = json!({"name": "p-nightly", "pipeline": "p", "cron": "@daily",
        "arguments": {"tagger": {"options": {"batch_size": 2}}}, "reason": "every night"});
    let created = api.post("/api/schedules", OPERATOR, Some(schedule)).await.expect(StatusCode::CREATED, None);
    assert_eq!((&created["target_kind"], &created["target"]), (&json!("pipeline"), &json!("p")));
}

async fn a_retry_policy_set_by_override_is_audited_and_shown_with_its_source(t: &TestDb) {
    let api = api_of(t).await;
    let change =
        json!({"retry": {"max_attempts": 3, "initial_delay_seconds": 1}, "reason": "the model server is flaky"});
    let set = put(&api, "/api/workers/tagger/override", ADMIN, change).await.expect(StatusCode::OK, None);
    assert_eq!(set["override"]["values"]["retry"]["max_attempts"], 3, "{set}");
    let policy = json!({"max_attempts": 3, "initial_delay_seconds": 1.0, "factor": 2.0, "max_delay_seconds": 3600.0,
        "jitter": 0.0, "on": ["failed", "interrupted"]});
    assert_eq!(set["effective"]["retry"], json!({"value": policy, "source": "override"}));

    let worker = api.get("/api/workers/tagger", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(worker["effective"]["retry"], json!({"value": policy, "source": "override"}));
    assert_eq!(worker["override"]["values"]["retry"], policy);
    let trail = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    let entry = &trail["entries"][0];
    assert_eq!(entry["actor"], "ada-admin");
    assert_eq!(entry["reason"], "the model server is flaky");
    assert!(entry["before"].is_null(), "{entry}");
    assert_eq!(entry["after"]["retry"]["max_attempts"], 3);

    // A run without arguments gets it; an explicit one wins.
    let run = api.trigger("tagger", None).await;
    assert_eq!(run["config"]["retry"]["source"], "override");

    let bad = [
        (json!({"retry": {"max_attempts": 0}, "reason": "no"}), "max_attempts must be between 1 and 100, not 0."),
        (json!({"retry": {"max_attempts": 2, "factor": 0.5}, "reason": "no"}), "factor must be at least 1, not 0.5."),
    ];
    for (change, sentence) in bad {
        let reply = put(&api, "/api/workers/tagger/override", ADMIN, change).await;
        let answer = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
        assert!(message(&answer).contains(sentence), "{answer}");
    }
    let reply = put(
        &api,
        "/api/workers/tagger/override",
        ADMIN,
        json!({"retry": {"max_attempts": 3, "tries": 1},
        "reason": "no"}),
    )
    .await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    let reply = put(&api, "/api/workers/tagger/override", OPERATOR, json!({"retry": null, "reason": "no"})).await;
    reply.expect(StatusCode::FORBIDDEN, Some("forbidden"));

    let cleared = put(&api, "/api/workers/tagger/override", ADMIN, json!({"retry": null, "reason": "stable again"}))
        .await
        .expect(StatusCode::OK, None);
    assert!(cleared["override"].is_null(), "nothing else was set: {cleared}");
    assert!(cleared["effective"].get("retry").is_none_or(Value::is_null), "{cleared}");
    let trail = api.get("/api/workers/tagger/audit", VIEWER).await.expect(StatusCode::OK, None);
    let actions: Vec<&str> =
        trail["entries"].as_array().expect("entries").iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["clear", "set"], "refusals are not audited: {trail}");
}

async fn a_trigger_while_a_retry_waits_is_409_naming_it_and_a_run_shows_its_chain(t: &TestDb) {
    let api = api_of(t).await;
    let retry = json!({"max_attempts": 2, "initial_delay_seconds": 600, "max_delay_seconds": 600});
    let first = api.trigger("tagger", Some(json!({"retry": retry}))).await;
    let first_id = uuid_of(&first["id"]);
    assert_eq!(first["config"]["retry"]["source"], "explicit");
    let read = api.get(&format!("/api/runs/{first_id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(read["chain"].as_array().map(|c| c.iter().map(|r| uuid_of(&r["id"])).collect()), Some(vec![first_id]));
    assert_eq!(uuid_of(&read["id"]), first_id, "the run's own fields stay at the top");
    assert_eq!(read["progress_history"], json!([]));

    let daemon = Uuid::now_v7();
    let claimed = t.db.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    let failed = Finish { reason: EndReason::ExitStatus, exit_code: Some(1), error: Some("boom".into()), result: None };
    t.db.finish_run(first_id, daemon, &failed).await.expect("finish");

    // The retry waits out its backoff as a queued run: a manual trigger is refused, naming it.
    let reply = api.post("/api/workers/tagger/runs", OPERATOR, None).await;
    let conflict = reply.expect(StatusCode::CONFLICT, Some("run_in_flight"));
    let retry_id = uuid_of(&conflict["run_id"]);
    assert_ne!(retry_id, first_id);
    assert_eq!(conflict["state"], "queued");
    assert!(message(&conflict).contains(&format!("run {retry_id}, queued")), "{conflict}");

    for id in [first_id, retry_id] {
        let read = api.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
        assert_eq!(uuid_of(&read["id"]), id);
        let chain = read["chain"].as_array().expect("a chain");
        let ids: Vec<Uuid> = chain.iter().map(|r| uuid_of(&r["id"])).collect();
        assert_eq!(ids, [first_id, retry_id], "first attempt first");
        assert_eq!(chain[0]["state"], "failed");
        assert_eq!((&chain[1]["attempt"], &chain[1]["state"]), (&json!(2), &json!("queued")));
        assert_eq!(uuid_of(&chain[1]["retry_of"]), first_id);
        let not_before = time_of(&chain[1]["not_before"]);
        assert!(not_before > Utc::now() + chrono::Duration::seconds(500), "the backoff: {not_before}");
    }
}

async fn the_document_describes_the_schedule_and_pipeline_routes(t: &TestDb) {
    let api = api_of(t).await;
    let doc = api.send(Method::GET, "/api/openapi.json", None, None).await.expect(StatusCode::OK, None);
    let routes = [
        ("/api/schedules", "get", &[200, 401, 403][..]),
        ("/api/schedules", "post", &[201, 400, 401, 403, 409, 422]),
        ("/api/schedules/preview", "post", &[200, 400, 401, 403]),
        ("/api/schedules/{key}", "get", &[200, 401, 403, 404]),
        ("/api/schedules/{key}", "put", &[200, 400, 401, 403, 404, 409]),
        ("/api/schedules/{key}", "delete", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/pause", "post", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/resume", "post", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/fires", "get", &[200, 400, 401, 403, 404]),
        ("/api/schedules/{key}/audit", "get", &[200, 400, 401, 403, 404]),
        ("/api/pipelines", "get", &[200, 401, 403]),
        ("/api/pipelines/{name}/runs", "post", &[201, 400, 401, 403, 404, 409]),
        ("/api/pipelines/{name}/runs", "get", &[200, 400, 401, 403, 404]),
        ("/api/pipeline-runs/{id}", "get", &[200, 400, 401, 403, 404]),
        ("/api/pipeline-runs/{id}/cancel", "post", &[200, 400, 401, 403, 404]),
        ("/api/runs/{id}", "get", &[200, 400, 401, 404]),
    ];
    for (path, method, statuses) in routes {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "the document describes {method} {path}");
        for status in statuses {
            assert!(operation["responses"][status.to_string()].is_object(), "{method} {path} documents {status}");
        }
    }
    let schemas = &doc["components"]["schemas"];
    for schema in ["ScheduleView", "ScheduleInput", "ScheduleFire", "ScheduleAuditEntry", "SchedulePreview"] {
        assert!(schemas[schema].is_object(), "the document has the schema {schema}");
    }
    for schema in ["PipelineView", "PipelineRun", "PipelineRunView", "RunDetail"] {
        assert!(schemas[schema].is_object(), "the document has the schema {schema}");
    }
    let detail = serde_json::to_string(&schemas["RunDetail"]).unwrap_or_default();
    assert!(detail.contains("\"chain\""), "RunDetail has the chain: {detail}");
}
