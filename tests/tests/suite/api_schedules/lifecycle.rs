//! A schedule's whole life through the API: created, read by name and by id, replaced, paused, resumed and
//! deleted, each change in its audit trail; and its fires, which stay readable by id once it is deleted.

use std::time::Duration;

use axum::http::{StatusCode, header};
use chrono::{DateTime, Utc};
use scrinalia_tests::{
    TestDb,
    api_harness::{OPERATOR, VIEWER},
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{api_of, delete, message, nightly, put, three_increasing, time_of, uuid_of};

pub(super) async fn a_schedule_is_created_read_replaced_paused_resumed_and_deleted_with_its_audit_trail(t: &TestDb) {
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

pub(super) async fn a_deleted_schedule_keeps_its_fires_and_audit_trail_readable_by_id(t: &TestDb) {
    let api = api_of(t).await;
    let every_second = json!({"name": "every-second", "worker": "transfer", "cron": "* * * * * *",
        "reason": "a schedule that is due at once"});
    let created = api.post("/api/schedules", OPERATOR, Some(every_second)).await.expect(StatusCode::CREATED, None);
    let id = uuid_of(&created["id"]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let pass =
        t.db.daemon
            .fire_due_schedules(api.state.catalogue(), Uuid::now_v7(), Duration::from_secs(60))
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
