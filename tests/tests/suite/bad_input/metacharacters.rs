//! SQL and shell metacharacters, newlines, argument look-alikes and NUL in every string field are stored verbatim
//! or refused with a sentence, and a string option value reaches the worker's argv verbatim.

use std::path::Path;

use reqwest::{Method, StatusCode};
use scrinalia_shared::{RunState, runs::RunFilter};
use scrinalia_testkit::stack::Auth;
use scrinalia_tests::{TestDb, api_harness::ADMIN, api_harness::OPERATOR, api_harness::VIEWER};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{GONE_AFTER, Probes, pct, start};

/// Hostile text for every string field. `canary` is a file that only an interpreting shell would create, and
/// `keep` a folder that only an interpreting shell would remove.
fn hostile(canary: &Path, keep: &Path) -> Vec<String> {
    let (canary, keep) = (canary.display(), keep.display());
    vec![
        "'; drop table worker_runs; --".into(),
        "\" or 1=1 --".into(),
        "\\".into(),
        "\\'; select pg_sleep(5); --".into(),
        "x'); delete from worker_overrides; --".into(),
        format!("$(touch {canary})"),
        format!("`touch {canary}`"),
        "`id`".into(),
        format!("; touch {canary}"),
        format!("&& touch {canary} &"),
        format!("; rm -rf {keep}"),
        "| cat /etc/passwd".into(),
        "line one\nline two\r\nline three".into(),
        "--crash".into(),
        "--exit_code=3".into(),
        "-e".into(),
        "%s%n%x%p".into(),
        "{{7*7}} ${7*7} #{7*7}".into(),
        "é ñ 漢字 💩 \u{202e}rtl".into(),
        "\u{7f}\u{1b}[31mred\u{1b}[0m\u{8}".into(),
        " \t leading and trailing whitespace \t ".into(),
        "../../etc/passwd".into(),
        "x".repeat(1500),
    ]
}

pub(super) async fn metacharacters_are_stored_verbatim_or_refused_and_reach_a_worker_verbatim(t: &TestDb) {
    let mut stack = start(t, true).await;
    let canary = std::env::temp_dir().join(format!("scrinalia-pwned-{}", Uuid::new_v4()));
    let keep = t.dir.path().join("keep-me");
    std::fs::create_dir(&keep).expect("create the folder that must survive");
    let values = hostile(&canary, &keep);

    // Worker names in the path: unknown workers, quoted.
    for value in &values {
        let name = pct(value);
        for (method, path) in [
            (Method::GET, format!("/api/workers/{name}")),
            (Method::POST, format!("/api/workers/{name}/runs")),
            (Method::PUT, format!("/api/workers/{name}/override")),
            (Method::DELETE, format!("/api/workers/{name}/override?reason=r")),
            (Method::GET, format!("/api/workers/{name}/audit")),
        ] {
            let body = (method == Method::PUT).then(|| br#"{"options": {"note": "x"}, "reason": "r"}"#.to_vec());
            let reply = stack.send(method.clone(), &path, Auth::Bearer(ADMIN), body).await;
            reply.expect_of(&format!("{method} {path}"), StatusCode::NOT_FOUND, Some("unknown_worker"));
        }
    }

    // Engine, preset and option names: refused with a sentence, in a run request and in an override.
    for value in &values {
        for body in [
            json!({"engine": value}),
            json!({"preset": value}),
            json!({"engine": "local", "preset": value}),
            json!({"options": {value.as_str(): "x"}}),
            json!({"options": {"duration_ms": value}}),
            json!({"options": {"crash": value}}),
        ] {
            let reply = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, body.clone()).await;
            reply.expect_of(&format!("a trigger with {body}"), StatusCode::BAD_REQUEST, Some("invalid_arguments"));
            let mut change = body.clone();
            change["reason"] = json!("metacharacters");
            let reply = stack.json(Method::PUT, "/api/workers/probe-1/override", ADMIN, change).await;
            reply.expect_of(&format!("an override of {body}"), StatusCode::BAD_REQUEST, Some("invalid_override"));
        }
    }

    // Query parameters: refused with a sentence.
    let run_filters = ["worker", "state", "from", "to", "after", "limit"];
    for value in &values {
        for key in run_filters {
            let path = format!("/api/runs?{key}={}", pct(value));
            let error = stack.get(&path, VIEWER).await.expect_of(&path, StatusCode::BAD_REQUEST, Some("invalid_query"));
            assert!(error["message"].as_str().is_some_and(|m| m.contains(&format!("`{key}`"))), "{error}");
        }
        let path = format!("/api/workers/probe-1/audit?limit={}", pct(value));
        stack.get(&path, VIEWER).await.expect_of(&path, StatusCode::BAD_REQUEST, Some("invalid_query"));
    }

    // String option values: stored verbatim, and passed verbatim to the worker as one argument. Three lanes, one
    // per probe (one run in flight per worker).
    let checks = ["probe-1", "probe-2", "probe-3"].into_iter().enumerate().map(|(lane, worker)| {
        let stack = &stack;
        let mine: Vec<&String> = values.iter().skip(lane).step_by(3).collect();
        async move {
            for value in mine {
                let row = format!("{worker} with note {value:?}");
                let run = stack.trigger(worker, json!({"options": {"note": value}})).await;
                assert_eq!(run["arguments"]["options"]["note"], json!(value), "{row}: the request is stored verbatim");
                assert_eq!(run["config"]["options"]["note"]["value"], json!(value), "{row}: resolved verbatim");
                let id = run["id"].as_str().expect("an id").to_owned();
                let done = stack.finished(&id).await;
                assert_eq!(done["state"], "succeeded", "{row}: {done}");
                assert_eq!(done["arguments"]["options"]["note"], json!(value), "{row}: read back verbatim");
                let args = stack.probe_args(&id).unwrap_or_else(|| panic!("{row}: no probe start line for run {id}"));
                let note = note_of(&args).unwrap_or_else(|| panic!("{row}: no --note= in {args:?}"));
                assert_eq!(note, value, "{row}: the worker got the value verbatim as one argument: {args:?}");
            }
        }
    });
    futures::future::join_all(checks).await;

    // The override reason and option values (set, then cleared through `?reason=`): stored verbatim (the reason
    // trimmed, as documented), and an overridden value reaches the worker verbatim too.
    for (i, value) in values.iter().enumerate() {
        let row = format!("the override of note and reason {value:?}");
        let change = json!({"options": {"note": value}, "reason": value});
        let view = stack.json(Method::PUT, "/api/workers/probe-3/override", ADMIN, change).await;
        let view = view.expect_of(&row, StatusCode::OK, None);
        assert_eq!(view["override"]["values"]["options"]["note"], json!(value), "{row}: stored verbatim");
        assert_eq!(view["effective"]["options"]["note"]["value"], json!(value), "{row}: effective verbatim");
        let audit = stack.get("/api/workers/probe-3/audit?limit=1", VIEWER).await.expect_of(&row, StatusCode::OK, None);
        assert_eq!(audit["entries"][0]["reason"], json!(value.trim()), "{row}: the reason is stored verbatim");
        if i % 4 == 0 {
            let run = stack.trigger("probe-3", json!({})).await;
            let id = run["id"].as_str().expect("an id").to_owned();
            let resolved = json!({"value": value, "source": "override"});
            assert_eq!(run["config"]["options"]["note"], resolved, "{row}: the next run resolves to it");
            assert_eq!(stack.finished(&id).await["state"], "succeeded", "{row}: the run");
            let args = stack.probe_args(&id).unwrap_or_else(|| panic!("{row}: no probe start line"));
            let note = note_of(&args).unwrap_or_else(|| panic!("{row}: no --note= in {args:?}"));
            assert_eq!(note, value, "{row}: the worker got it verbatim: {args:?}");
        }
        let cleared = stack
            .send(
                Method::DELETE,
                &format!("/api/workers/probe-3/override?reason={}", pct(value)),
                Auth::Bearer(ADMIN),
                None,
            )
            .await
            .expect_of(&row, StatusCode::OK, None);
        assert!(cleared["override"].is_null(), "{row}: cleared");
        let audit = stack.get("/api/workers/probe-3/audit?limit=1", VIEWER).await.expect_of(&row, StatusCode::OK, None);
        assert_eq!(audit["entries"][0]["reason"], json!(value.trim()), "{row}: the clearing reason is stored verbatim");
    }

    // NUL (which JSON allows as \u0000): a worker's arguments cannot hold it and PostgreSQL cannot store it, so
    // it is refused with a sentence on both backends (it used to be a 500 on PostgreSQL).
    let nul = "before\u{0}after";
    let error =
        stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"options": {"note": nul}})).await;
    let error = error.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(error["message"].as_str().is_some_and(|m| m.contains("NUL")), "{error}");
    let reply = stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"note": nul}, "reason": "r"}))
        .await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
    let reply = stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"note": "ok"}, "reason": nul}))
        .await;
    reply.expect(StatusCode::BAD_REQUEST, Some("reason_invalid"));
    let reply =
        stack.send(Method::DELETE, "/api/workers/probe-1/override?reason=a%00b", Auth::Bearer(ADMIN), None).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("reason_invalid"));
    let reply = stack.json(Method::DELETE, "/api/workers/probe-1/override", ADMIN, json!({"reason": nul})).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("reason_invalid"));
    for body in [json!({"engine": nul}), json!({"preset": nul}), json!({"options": {nul: 1}})] {
        let what = format!("a trigger with {body}");
        let reply = stack.json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, body).await;
        reply.expect_of(&what, StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    }
    for key in run_filters {
        let path = format!("/api/runs?{key}=a%00b");
        stack.get(&path, VIEWER).await.expect_of(&path, StatusCode::BAD_REQUEST, Some("invalid_query"));
    }
    // A long value of the wrong type made of multi-byte characters is quoted, cut by characters (it used to panic).
    let wide = "é".repeat(60);
    let reply = stack
        .json(Method::POST, "/api/workers/probe-1/runs", OPERATOR, json!({"options": {"duration_ms": wide}}))
        .await;
    let error = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    assert!(error["message"].as_str().is_some_and(|m| m.contains("must be a whole number, not string")), "{error}");
    let reply = stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"crash": wide}, "reason": "r"}))
        .await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_override"));
    // A hostile trace context is not kept.
    let response = stack
        .client
        .post(format!("{}/api/workers/probe-2/runs", stack.base))
        .bearer_auth(OPERATOR)
        .header("traceparent", "00-'; drop table worker_runs; --")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::CREATED);
    let run: Value = response.json().await.expect("a run");
    let trace = run["trace_context"].as_str().expect("a trace context");
    assert!(trace.starts_with("00-") && !trace.contains(';'), "a fresh trace context: {trace}");
    stack.finished(run["id"].as_str().expect("an id")).await;

    // The tables are all there and hold what was written; no injected command ran.
    let runs = t.db.api.list_runs(&RunFilter { limit: 500, ..RunFilter::default() }).await.expect("the ledger").runs;
    assert!(runs.len() > values.len(), "{} runs", runs.len());
    assert!(runs.iter().all(|r| r.state == RunState::Succeeded), "every run succeeded");
    assert!(t.db.api.list_overrides().await.expect("the overrides").is_empty());
    assert_eq!(t.db.api.audit_trail("probe-3", 1000).await.expect("the audit trail").len(), 2 * values.len());
    assert!(!t.db.api.list_daemons(GONE_AFTER).await.expect("the daemons").is_empty());
    assert!(!canary.exists(), "{} exists: a value was run by a shell", canary.display());
    assert!(keep.is_dir(), "{} was removed: a value was run by a shell", keep.display());
    stack.assert_healthy().await;
}

/// The value of the `--note=…` argument (options are passed as `--name=value`, one argument each).
fn note_of(args: &[String]) -> Option<&str> {
    args.iter().find_map(|a| a.strip_prefix("--note="))
}
