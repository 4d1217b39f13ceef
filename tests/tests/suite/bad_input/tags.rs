//! Tags that are not short words, or more than ten, on every route that takes them (a run's trigger, a schedule,
//! the runs list's filter), each get a 400 with a sentence naming the tag and saying what a short word is;
//! nothing refused is queued or stored.

use reqwest::{Method, StatusCode};
use scrinalia_tests::{TestDb, api_harness::OPERATOR, api_harness::VIEWER};
use serde_json::{Value, json};

use super::{pct, refused, run_count, start};

pub(super) async fn tags_that_are_not_short_words_or_too_many_get_a_sentence(t: &TestDb) {
    let stack = start(t, false).await;
    let eleven: Vec<String> = (0..11).map(|i| format!("t{i}")).collect();
    let long = "x".repeat(65);
    let cases: [(Value, String); 7] = [
        (json!(eleven), "A run takes at most 10 tags, 11 given.".to_owned()),
        (json!(["a b"]), "Tag \"a b\" is not a short word (it has a space)".to_owned()),
        (json!([""]), "Tag \"\" is not a short word (it is empty)".to_owned()),
        (json!([long]), format!("Tag \"{long}\" is not a short word (it is longer than 64 characters)")),
        (
            json!(["Collection:1921"]),
            "Tag \"Collection:1921\" is not a short word (it has a capital letter)".to_owned(),
        ),
        (json!(["a;rm -rf"]), "Tag \"a;rm -rf\" is not a short word (it has a space)".to_owned()),
        (json!(["-flag"]), "Tag \"-flag\" is not a short word (it does not start with a letter or a digit)".to_owned()),
    ];
    for (tags, says) in &cases {
        let what = format!("POST /api/workers/probe-1/runs with tags {tags}");
        let reply = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"tags": tags})).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{what}: {}", reply.text());
        let error = refused(&reply, &what);
        assert_eq!(error["code"], "invalid_tags", "{what}: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(says.as_str()), "{what}: {message}");
        if says.starts_with("Tag") {
            assert!(
                message.ends_with(
                    "a tag is 1 to 64 lowercase letters a-z, digits and the characters : - _ . /, \
                starting with a letter or a digit."
                ),
                "{what}: {message}"
            );
        }

        let schedule = json!({"name": "tagged", "worker": "probe-1", "cron": "@daily", "tags": tags, "reason": "tags"});
        let reply = stack.json(Method::POST, "/api/schedules", OPERATOR, schedule).await;
        let what = format!("POST /api/schedules with tags {tags}");
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{what}: {}", reply.text());
        let error = refused(&reply, &what);
        assert_eq!(error["code"], "invalid_tags", "{what}: {error}");
        assert!(error["message"].as_str().unwrap_or_default().starts_with(says.as_str()), "{what}: {error}");
    }
    // Not a list of strings: the body's shape is wrong (422, like any misshapen field).
    for tags in [json!("one"), json!([1]), json!({"a": 1})] {
        let reply = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"tags": tags})).await;
        let what = format!("POST /api/workers/probe-1/runs with tags {tags}");
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {}", reply.text());
        assert!(refused(&reply, &what)["message"].as_str().unwrap_or_default().contains("`tags`"), "{what}");
    }
    // The runs list's filter takes one short word.
    for tag in ["a b", "A", &"y".repeat(65), "x'; drop table run_tags; --"] {
        let path = format!("/api/runs?tag={}", pct(tag));
        let reply = stack.get(&path, VIEWER).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "GET {path}: {}", reply.text());
        let error = refused(&reply, &format!("GET {path}"));
        assert_eq!(error["code"], "invalid_query");
        assert!(error["message"].as_str().unwrap_or_default().starts_with("`tag`: Tag "), "{error}");
    }
    assert_eq!(run_count(t).await, 0, "nothing refused was queued");
    let schedules = stack.get("/api/schedules", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(schedules, json!([]), "nothing refused was stored");
    // A good one still goes through.
    let good = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"tags": ["ok:1"]})).await;
    assert_eq!(good.expect(StatusCode::CREATED, None)["tags"], json!(["ok:1"]));
}
