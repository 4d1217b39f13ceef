//! Retries through the API: a retry policy set by override (audited, shown with its source, checked), and a
//! failed run's retry that waits out its backoff, refuses a manual trigger and shows the chain.

use axum::http::StatusCode;
use chrono::Utc;
use scrinalia_shared::{EndReason, runs::Finish};
use scrinalia_tests::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER},
    fixtures::LONG_LEASE,
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{api_of, message, put, time_of, uuid_of};

pub(super) async fn a_retry_policy_set_by_override_is_audited_and_shown_with_its_source(t: &TestDb) {
    let api = api_of(t).await;
    let change =
        json!({"retry": {"max_attempts": 3, "initial_delay_seconds": 1}, "reason": "the model server is flaky"});
    let set = put(&api, "/api/workers/tagger/override", ADMIN, change).await.expect(StatusCode::OK, None);
    assert_eq!(set["override"]["values"]["retry"]["max_attempts"], 3, "{set}");
    let policy = json!({"max_attempts": 3, "initial_delay_seconds": 1.0, "factor": 2.0, "max_delay_seconds": 3600.0,
        "jitter": 0.0, "on": ["failed", "interrupted"], "resume": false});
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

pub(super) async fn a_trigger_while_a_retry_waits_is_409_naming_it_and_a_run_shows_its_chain(t: &TestDb) {
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
    let claimed = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    let failed = Finish {
        reason: EndReason::ExitStatus,
        exit_code: Some(1),
        error: Some("boom".into()),
        result: None,
        usage: None,
    };
    t.db.daemon.finish_run(first_id, daemon, &failed).await.expect("finish");

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
