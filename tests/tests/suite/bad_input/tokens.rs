//! Every write refuses a missing, malformed or unknown token (401) and a role too low (403); refused requests
//! change nothing, and the same requests with the right role go through.

use std::time::Duration;

use reqwest::{Method, StatusCode, header::HeaderValue, header::WWW_AUTHENTICATE};
use scrinalia_shared::auth::hash_token;
use scrinalia_testkit::stack::Auth;
use scrinalia_tests::{TestDb, api_harness::ADMIN, api_harness::OPERATOR, api_harness::VIEWER, eventually};
use serde_json::json;

use super::{Probes, run_count, start};

pub(super) async fn writes_refuse_missing_malformed_and_low_role_tokens(t: &TestDb) {
    let mut stack = start(t, true).await;
    let daemon = stack.daemon_id(VIEWER).await;
    // A run that keeps running, so that a cancellation that got through would show.
    let running = stack.trigger("probe-2", json!({"options": {"duration_ms": 60_000, "note": "keep me"}})).await;
    let run = running["id"].as_str().expect("an id").to_owned();
    eventually(Duration::from_secs(30), "the long run to start", || async {
        let r = stack.get(&format!("/api/runs/{run}"), VIEWER).await.expect(StatusCode::OK, None);
        (r["state"] == "running").then_some(())
    })
    .await;

    let override_body = json!({"options": {"note": "refused"}, "reason": "a refused change"}).to_string();
    let trigger_body = json!({"options": {"note": "refused"}}).to_string();
    let writes: Vec<(Method, String, Option<String>, &str)> = vec![
        (Method::POST, "/api/workers/probe-1/runs".into(), Some(trigger_body), "operator"),
        (Method::POST, format!("/api/runs/{run}/cancel"), None, "operator"),
        (Method::PUT, "/api/workers/probe-1/override".into(), Some(override_body), "admin"),
        (Method::DELETE, "/api/workers/probe-1/override?reason=refused".into(), None, "admin"),
        (Method::POST, format!("/api/daemons/{daemon}/drain"), None, "admin"),
    ];
    let long = format!("Bearer {}", "a".repeat(64 * 1024));
    let malformed: Vec<(&str, Auth)> = vec![
        ("no header", Auth::None),
        ("Bearer", Auth::Raw(HeaderValue::from_static("Bearer"))),
        ("Bearer and a space", Auth::Raw(HeaderValue::from_static("Bearer "))),
        ("Basic x", Auth::Raw(HeaderValue::from_static("Basic x"))),
        ("Basic with the admin token", Auth::Raw(HeaderValue::from_str(&format!("Basic {ADMIN}")).expect("a value"))),
        ("a tab instead of a space", Auth::Raw(HeaderValue::from_str(&format!("Bearer\t{ADMIN}")).expect("a value"))),
        ("garbage bytes", Auth::Raw(HeaderValue::from_bytes(b"\xff\xfe\x80 Bearer \xc3").expect("a value"))),
        ("a non-ASCII token", Auth::Raw(HeaderValue::from_bytes(b"Bearer \xc3\xa9t\xc3\xa9").expect("a value"))),
        ("a 64 KiB token", Auth::Raw(HeaderValue::from_str(&long).expect("a value"))),
        ("an unknown token", Auth::Bearer("scr_not_a_known_token")),
        (
            "the admin token and one more byte",
            Auth::Raw(HeaderValue::from_str(&format!("Bearer {ADMIN}x")).expect("v")),
        ),
        (
            "the admin token's hash",
            Auth::Raw(HeaderValue::from_str(&format!("Bearer {}", hash_token(ADMIN))).expect("v")),
        ),
        ("SQL in the token", Auth::Raw(HeaderValue::from_static("Bearer ' or 1=1 --"))),
    ];
    for (method, path, body, needed) in &writes {
        let body = || body.clone().map(String::into_bytes);
        for (what, auth) in &malformed {
            let reply = stack.send(method.clone(), path, auth.clone(), body()).await;
            reply.expect_of(&format!("{method} {path} with {what}"), StatusCode::UNAUTHORIZED, Some("unauthorized"));
            assert_eq!(reply.headers[WWW_AUTHENTICATE], "Bearer", "{method} {path} with {what}");
        }
        let mut too_low = vec![("viewer", VIEWER)];
        if *needed == "admin" {
            too_low.push(("operator", OPERATOR));
        }
        for (role, token) in too_low {
            let reply = stack.send(method.clone(), path, Auth::Bearer(token), body()).await;
            let error =
                reply.expect_of(&format!("{method} {path} as {role}"), StatusCode::FORBIDDEN, Some("forbidden"));
            assert_eq!(error["required_role"], *needed, "{method} {path} as {role}");
            let message = error["message"].as_str().expect("a message");
            assert!(message.starts_with(&format!("This needs the {needed} role;")), "{message}");
        }
        // Header bytes an HTTP client refuses to send: the server refuses them before the API sees them.
        for header in [&b"Bearer \x00"[..], b"Bearer a\x01b", b"Bearer \x1b[31m"] {
            let mut request =
                format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ").into_bytes();
            request.extend_from_slice(header);
            request.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
            let (status, _) = stack.raw(request).await;
            assert!((400..500).contains(&status), "{method} {path} with control bytes → {status}");
        }
        // A header far over the server's limit.
        let huge = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\r\n",
            "a".repeat(1 << 20)
        );
        let (status, _) = stack.raw(huge.into_bytes()).await;
        assert!((400..500).contains(&status), "{method} {path} with a 1 MiB header → {status}");
    }

    // Nothing changed: one run, still running; no override, no audit entry; the daemon is not draining.
    assert_eq!(run_count(t).await, 1, "no refused trigger created a run");
    let still = stack.get(&format!("/api/runs/{run}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!((still["state"].as_str(), still["cancel_requested_at"].is_null()), (Some("running"), true));
    assert!(t.db.daemon.get_override("probe-1").await.expect("read the override").is_none());
    assert!(t.db.api.audit_trail("probe-1", 10).await.expect("read the audit trail").is_empty());
    let daemons = stack.get("/api/daemons", VIEWER).await.expect(StatusCode::OK, None);
    assert!(daemons["daemons"][0]["drain_requested_at"].is_null(), "no refused drain got through: {daemons}");
    stack.assert_healthy().await;

    // The same requests with the right role go through (the daemon drains last).
    stack
        .json(Method::PUT, "/api/workers/probe-1/override", ADMIN, json!({"options": {"note": "n"}, "reason": "r"}))
        .await
        .expect(StatusCode::OK, None);
    stack
        .send(Method::DELETE, "/api/workers/probe-1/override?reason=r", Auth::Bearer(ADMIN), None)
        .await
        .expect(StatusCode::OK, None);
    stack
        .send(Method::POST, &format!("/api/runs/{run}/cancel"), Auth::Bearer(OPERATOR), None)
        .await
        .expect(StatusCode::ACCEPTED, None);
    stack.finished(&run).await;
    stack
        .send(Method::POST, &format!("/api/daemons/{daemon}/drain"), Auth::Bearer(ADMIN), None)
        .await
        .expect(StatusCode::ACCEPTED, None);
    let daemon = stack.daemon.as_mut().expect("a daemon");
    assert_eq!(daemon.wait(Duration::from_secs(30)).await, Some(0), "a drained daemon exits 0:\n{}", daemon.output());
    stack.daemon = None;
    stack.assert_healthy().await;
}
