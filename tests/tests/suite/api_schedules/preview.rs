//! The preview of an expression's next fire times, in UTC and in a time zone, its refusals, and a schedule
//! that is itself called "preview".

use axum::http::StatusCode;
use chrono::{DateTime, Datelike, Timelike, Utc};
use scrinalia_tests::{
    TestDb,
    api_harness::{OPERATOR, VIEWER},
};
use serde_json::json;

use super::{api_of, delete, message, nightly, put, three_increasing};

pub(super) async fn the_preview_is_the_next_three_fire_times(t: &TestDb) {
    let api = api_of(t).await;
    let now = t.db.api.now().await.expect("the database clock");
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
