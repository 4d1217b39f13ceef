//! What the API refuses of schedules, and with which sentence: bad definitions (400, naming what is wrong), a
//! taken name (409), an unknown schedule (404), a viewer's write (403) and no token at all (401).

use axum::http::{Method, StatusCode};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER},
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{api_of, delete, message, nightly, put, uuid_of};

pub(super) async fn bad_schedules_are_400_with_a_sentence_naming_what_is_wrong(t: &TestDb) {
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

pub(super) async fn taken_names_unknown_schedules_and_roles_are_409_404_and_403(t: &TestDb) {
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
