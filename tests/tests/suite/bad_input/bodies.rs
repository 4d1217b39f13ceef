//! Bodies over `api.body_limit_bytes` get 413, with or without a `Content-Length`; endpoints that read no body
//! ignore one; just under the limit is read.

use reqwest::{Method, StatusCode};
use scrinalia_testkit::stack::Auth;
use scrinalia_tests::{TestDb, api_harness::ADMIN, api_harness::OPERATOR};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{BODY_LIMIT, run_count, start};

pub(super) async fn oversized_bodies_get_413(t: &TestDb) {
    let mut stack = start(t, false).await;
    let over = |n: usize| json!({"options": {"note": "x".repeat(n)}, "reason": "big"}).to_string();
    let writes =
        ["POST /api/workers/probe-1/runs", "PUT /api/workers/probe-1/override", "DELETE /api/workers/probe-1/override"];
    // Just over the limit, through an HTTP client.
    for write in writes {
        let (method, path) = write.split_once(' ').expect("method and path");
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let reply = stack.send(method, path, Auth::Bearer(ADMIN), Some(over(BODY_LIMIT).into_bytes())).await;
        let error = reply.expect_of(write, StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large"));
        assert_eq!(error["message"], format!("The request body is larger than the limit of {BODY_LIMIT} bytes."));
    }
    // Far over it: the server answers before reading it all, so the answer is read while the body is sent.
    for size in [64 * 1024, 4 * 1024 * 1024] {
        for write in writes {
            let (method, path) = write.split_once(' ').expect("method and path");
            let (status, body) = stack.raw_request(method, path, ADMIN, &over(size)).await;
            assert_eq!(status, 413, "{write} with {size} bytes: {body}");
            let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
            assert_eq!(error["code"], "body_too_large");
        }
    }
    // Without a Content-Length (chunked), the limit holds while the body streams in; the body is all spaces, so
    // only the limit can refuse it.
    for write in writes {
        let (method, path) = write.split_once(' ').expect("method and path");
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .into_bytes();
        for _ in 0..64 {
            request.extend_from_slice(format!("400\r\n{}\r\n", " ".repeat(1024)).as_bytes());
        }
        request.extend_from_slice(b"0\r\n\r\n");
        let (status, body) = stack.raw(request).await;
        assert_eq!(status, 413, "{write}, chunked: {body}");
    }
    // Endpoints that read no body ignore one (and never fail because of it).
    let unknown = Uuid::now_v7();
    let big = " ".repeat(64 * 1024);
    let (status, _) = stack.raw_request("POST", &format!("/api/runs/{unknown}/cancel"), ADMIN, &big).await;
    assert_eq!(status, 404);
    let (status, _) = stack.raw_request("POST", &format!("/api/daemons/{unknown}/drain"), ADMIN, &big).await;
    assert_eq!(status, 404);
    // Just under the limit is read (and judged on its content).
    let under = json!({"options": {"note": "x".repeat(BODY_LIMIT - 40)}}).to_string();
    assert!(under.len() <= BODY_LIMIT);
    let reply =
        stack.send(Method::POST, "/api/workers/probe-1/runs", Auth::Bearer(OPERATOR), Some(under.into_bytes())).await;
    reply.expect(StatusCode::CREATED, None);

    assert_eq!(run_count(t).await, 1, "only the body under the limit created a run");
    assert!(t.db.daemon.get_override("probe-1").await.expect("read the override").is_none());
    stack.assert_healthy().await;
}
