//! Path traversal, NUL, unicode and very long worker names and ids, and ids that are not UUIDs, get a 4xx JSON
//! error with a sentence; nothing is created or written.

use reqwest::{Method, StatusCode};
use scrinalia_testkit::stack::Auth;
use scrinalia_tests::{Reply, TestDb, api_harness::ADMIN, api_harness::OPERATOR, api_harness::VIEWER};
use uuid::Uuid;

use super::{refused, run_count, start};

pub(super) async fn traversal_and_bad_ids_get_a_sentence(t: &TestDb) {
    let mut stack = start(t, false).await;
    // Path segments exactly as sent on the wire.
    let long = "a".repeat(10_000);
    let names = [
        "..%2F..%2Fetc%2Fpasswd",
        "..%2F..",
        "..",
        "%2E%2E",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "..%5C..%5Cwindows",
        "%00",
        "probe-1%00",
        "probe-1%00..%2F..",
        "probe-1%2F..%2Fprobe-2",
        "probe-1%20",
        "PROBE-1",
        "%C3%A9t%C3%A9",
        "%F0%9F%92%A9",
        "%E2%80%AEprobe-1",
        "%FF%FE",
        "%C0%AE%C0%AE",
        "%25252e%25252e",
        "%24(id)",
        "%3B%20id",
        long.as_str(),
    ];
    let override_body = r#"{"options": {"note": "x"}, "reason": "traversal"}"#;
    for name in names {
        for (method, path, body) in [
            ("GET", format!("/api/workers/{name}"), ""),
            ("POST", format!("/api/workers/{name}/runs"), ""),
            ("PUT", format!("/api/workers/{name}/override"), override_body),
            ("DELETE", format!("/api/workers/{name}/override?reason=r"), ""),
            ("GET", format!("/api/workers/{name}/audit"), ""),
        ] {
            let (status, text) = stack.raw_request(method, &path, ADMIN, body).await;
            let what = format!("{method} {path}");
            let error = refused(&Reply::from_raw(status, text), &what);
            if status == 404 {
                assert!(
                    ["unknown_worker", "not_found"].contains(&error["code"].as_str().unwrap_or_default()),
                    "{error}"
                );
            } else {
                assert_eq!(status, 400, "{method} {path}: {error}");
            }
        }
    }
    let unknown = stack
        .get("/api/workers/..%2F..%2Fetc%2Fpasswd", VIEWER)
        .await
        .expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    assert_eq!(unknown["message"], "There is no worker \"../../etc/passwd\"; GET /api/workers lists the workers.");

    let ids = [
        "123",
        "..%2F..%2Fetc%2Fpasswd",
        "..",
        "%2E%2E",
        "%00",
        "01a22988-3816-77bf-b581-6534d03cbe47%00",
        "01a22988-3816-77bf-b581-6534d03cbe4",
        "01a22988-3816-77bf-b581-6534d03cbe47a",
        "00000000-0000-0000-0000-00000000000g",
        "%C3%A9",
        "%FF",
        "%27%20or%201%3D1%20--",
        "%24(id)",
        "null",
        "-1",
        long.as_str(),
    ];
    for id in ids {
        for (method, path) in [
            ("GET", format!("/api/runs/{id}")),
            ("GET", format!("/api/runs/{id}/log")),
            ("POST", format!("/api/runs/{id}/cancel")),
            ("POST", format!("/api/daemons/{id}/drain")),
        ] {
            let (status, text) = stack.raw_request(method, &path, ADMIN, "").await;
            let what = format!("{method} {path}");
            let error = refused(&Reply::from_raw(status, text), &what);
            assert_eq!(status, 400, "{method} {path}: {error}");
            assert!(["invalid_id", "bad_request"].contains(&error["code"].as_str().unwrap_or_default()), "{error}");
        }
    }
    // Long input is quoted cut, not repeated in full.
    for path in [format!("/api/workers/{long}"), format!("/api/runs/{long}")] {
        let error = refused(&stack.get(&path, VIEWER).await, &format!("GET {path}"));
        assert!(error["message"].as_str().is_some_and(|m| m.len() < 200), "{error}");
    }
    let error =
        stack.get("/api/runs/..%2F..%2Fetc%2Fpasswd", VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
    assert_eq!(error["message"], "\"../../etc/passwd\" is not a valid run id; ids are UUIDs.");
    // Well-formed but unknown ids are 404s.
    let unknown = Uuid::now_v7();
    stack.get(&format!("/api/runs/{unknown}"), VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_run"));
    stack.get(&format!("/api/runs/{unknown}/log"), VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_run"));
    stack
        .send(Method::POST, &format!("/api/runs/{unknown}/cancel"), Auth::Bearer(OPERATOR), None)
        .await
        .expect(StatusCode::NOT_FOUND, Some("unknown_run"));
    stack
        .send(Method::POST, &format!("/api/daemons/{unknown}/drain"), Auth::Bearer(ADMIN), None)
        .await
        .expect(StatusCode::NOT_FOUND, Some("unknown_daemon"));
    // Traversal outside the API's routes.
    for path in [
        "/api/../../etc/passwd",
        "/api/%2E%2E/%2E%2E/etc/passwd",
        "/..%2F..%2Fetc%2Fpasswd",
        "/api/runs/../../../etc/passwd",
    ] {
        let (status, text) = stack.raw_request("GET", path, ADMIN, "").await;
        assert!((400..500).contains(&status) && !text.contains("root:x:0:0"), "GET {path} → {status}: {text}");
    }

    assert_eq!(run_count(t).await, 0, "no request created a run");
    assert!(t.db.api.list_overrides().await.expect("read the overrides").is_empty(), "no request set an override");
    let store = t.dir.path().join("run-logs");
    let empty = !store.exists() || store.read_dir().is_ok_and(|mut d| d.next().is_none());
    assert!(empty, "nothing was written to the run-log store");
    stack.assert_healthy().await;
}
