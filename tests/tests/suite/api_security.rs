//! Security and hostile input, in-process on PostgreSQL and SQLite: every endpoint refuses a missing or unknown
//! token (401) and a role below the one it needs (403, naming it); the anonymous role and its loopback rule;
//! CORS only for configured origins; malformed JSON, wrong types, unknown fields, oversized bodies, bad ids
//! and path traversal all get a clear 4xx JSON error, never a 5xx.

use std::net::SocketAddr;

use axum::{
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use scrinalia_shared::{Role, daemons::NewDaemon};
use scrinalia_tests::{
    Reply, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, TestApi, VIEWER},
    backend_tests,
};
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

backend_tests!(
    every_endpoint_needs_a_token_and_the_right_role,
    the_anonymous_role_applies_only_without_a_token_and_only_from_loopback_when_so_configured,
    cors_answers_only_configured_origins,
    hostile_bodies_get_readable_4xx_errors,
    bad_ids_and_path_traversal_get_readable_4xx_errors,
);

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Viewer => "viewer",
        Role::Operator => "operator",
        Role::Admin => "admin",
    }
}

/// Sends a request and returns the status and, unless the answer is a live stream, the reply.
async fn status_of(
    api: &TestApi,
    method: &Method,
    path: &str,
    auth: Option<&str>,
    body: &Option<Value>,
) -> Option<Reply> {
    if path == "/api/events" {
        let mut request = Request::builder().method(method.clone()).uri(path);
        if let Some(auth) = auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        let mut request = request.body(Body::empty()).expect("a request");
        request.extensions_mut().insert(axum::extract::ConnectInfo(api.peer));
        let response = api.router.clone().oneshot(request).await.expect("a response");
        if response.status() == StatusCode::OK {
            return None;
        }
    }
    let mut request = Request::builder().method(method.clone()).uri(path);
    if let Some(auth) = auth {
        request = request.header(header::AUTHORIZATION, auth);
    }
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let body = body.as_ref().map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty);
    Some(api.call(request.body(body).expect("a request")).await)
}

async fn every_endpoint_needs_a_token_and_the_right_role(t: &TestDb) {
    let api = TestApi::new(t).await;
    let run = api.trigger("transfer", None).await["id"].as_str().expect("an id").to_owned();
    let daemon = Uuid::now_v7();
    let new = NewDaemon {
        id: daemon,
        host: "h".into(),
        pid: 1,
        version: "v".into(),
        capacity: 1,
        workers: vec![],
        labels: vec![],
        limits: Default::default(),
        resources: Default::default(),
    };
    t.db.daemon.register_daemon(&new).await.expect("register");
    let override_body = Some(json!({"preset": "big", "reason": "role test"}));
    let endpoints: Vec<(Method, String, Option<Value>, Role)> = vec![
        (Method::GET, "/api/workers".into(), None, Role::Viewer),
        (Method::GET, "/api/workers/tagger".into(), None, Role::Viewer),
        (Method::POST, "/api/workers/tagger/runs".into(), None, Role::Operator),
        (Method::GET, "/api/runs".into(), None, Role::Viewer),
        (Method::GET, format!("/api/runs/{run}"), None, Role::Viewer),
        (Method::GET, format!("/api/runs/{run}/log"), None, Role::Viewer),
        (Method::POST, format!("/api/runs/{run}/cancel"), None, Role::Operator),
        (Method::PUT, "/api/workers/tagger/override".into(), override_body, Role::Admin),
        (Method::DELETE, "/api/workers/tagger/override?reason=role%20test".into(), None, Role::Admin),
        (Method::GET, "/api/workers/tagger/audit".into(), None, Role::Viewer),
        (Method::GET, "/api/daemons".into(), None, Role::Viewer),
        (Method::POST, format!("/api/daemons/{daemon}/drain"), None, Role::Admin),
        (Method::GET, "/api/health".into(), None, Role::Viewer),
        (Method::GET, "/api/events".into(), None, Role::Viewer),
    ];
    let tokens = [(Role::Viewer, VIEWER), (Role::Operator, OPERATOR), (Role::Admin, ADMIN)];
    for (method, path, body, needed) in &endpoints {
        for auth in [None, Some("Bearer scr_not_a_known_token"), Some("Basic dXNlcjpwYXNz"), Some("Bearer ")] {
            let reply = status_of(&api, method, path, auth, body).await.expect("an error is not a stream");
            reply.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
            assert_eq!(reply.headers[header::WWW_AUTHENTICATE], "Bearer", "{method} {path}");
        }
        for (role, token) in tokens {
            let reply = status_of(&api, method, path, Some(&format!("Bearer {token}")), body).await;
            if role < *needed {
                let reply = reply.expect("an error is not a stream");
                let error = reply.expect(StatusCode::FORBIDDEN, Some("forbidden"));
                let message = error["message"].as_str().expect("message");
                assert!(message.starts_with(&format!("This needs the {} role", role_name(*needed))), "{message}");
                assert_eq!(error["required_role"], role_name(*needed));
            } else if let Some(reply) = reply {
                let status = reply.status;
                assert!(
                    status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN && !status.is_server_error(),
                    "{method} {path} as {role:?} → {status} {}",
                    reply.text()
                );
            }
        }
    }
}

async fn the_anonymous_role_applies_only_without_a_token_and_only_from_loopback_when_so_configured(t: &TestDb) {
    let viewer = TestApi::with(t, &ApiConfig { anonymous: Some((Role::Viewer, false)), ..ApiConfig::default() }).await;
    viewer.send(Method::GET, "/api/workers", None, None).await.expect(StatusCode::OK, None);
    let refused = viewer.send(Method::POST, "/api/workers/tagger/runs", None, None).await;
    let error = refused.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    assert_eq!(error["message"], "This needs the operator role; an anonymous caller has the viewer role.");
    viewer.get("/api/workers", "scr_wrong").await.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    viewer.trigger("judge", None).await;

    let mut local =
        TestApi::with(t, &ApiConfig { anonymous: Some((Role::Operator, true)), ..ApiConfig::default() }).await;
    let run = local.send(Method::POST, "/api/workers/tagger/runs", None, None).await.expect(StatusCode::CREATED, None);
    assert_eq!(run["requested_by"], "anonymous", "the actor of an anonymous write is recorded");
    local.peer = SocketAddr::from(([192, 0, 2, 10], 50000));
    local.send(Method::GET, "/api/workers", None, None).await.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    local.get("/api/workers", VIEWER).await.expect(StatusCode::OK, None);
    local.peer = SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], 50000));
    local.send(Method::GET, "/api/workers", None, None).await.expect(StatusCode::OK, None);
}

async fn cors_answers_only_configured_origins(t: &TestDb) {
    let preflight = |origin: &str| {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/api/workers/tagger/runs")
            .header(header::ORIGIN, origin)
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
            .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "authorization,content-type")
            .body(Body::empty())
            .expect("a request")
    };
    let with_origin = |origin: &str| {
        Request::get("/api/workers")
            .header(header::ORIGIN, origin)
            .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"))
            .body(Body::empty())
            .expect("a request")
    };
    let closed = TestApi::new(t).await;
    let reply = closed.call(with_origin("https://panel.example")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(!reply.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN), "no origins configured → no CORS");

    let config = ApiConfig { cors_origins: vec!["https://panel.example".into()], ..ApiConfig::default() };
    let open = TestApi::with(t, &config).await;
    let reply = open.call(preflight("https://panel.example")).await;
    assert!(reply.status.is_success(), "{}", reply.status);
    assert_eq!(reply.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://panel.example");
    let methods = reply.headers[header::ACCESS_CONTROL_ALLOW_METHODS].to_str().expect("text");
    assert!(methods.contains("POST"), "{methods}");
    let reply = open.call(with_origin("https://panel.example")).await;
    assert_eq!(reply.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://panel.example");
    for stranger in ["https://evil.example", "https://panel.example.evil.example", "null"] {
        let reply = open.call(preflight(stranger)).await;
        assert!(!reply.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN), "{stranger} is not allowed");
    }
}

async fn raw(
    api: &TestApi,
    method: Method,
    path: &str,
    token: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Reply {
    let mut request =
        Request::builder().method(method).uri(path).header(header::AUTHORIZATION, format!("Bearer {token}"));
    if let Some(ct) = content_type {
        request = request.header(header::CONTENT_TYPE, ct);
    }
    api.call(request.body(Body::from(body)).expect("a request")).await
}

async fn hostile_bodies_get_readable_4xx_errors(t: &TestDb) {
    let api = TestApi::new(t).await;
    let trigger = |body: &str| {
        raw(&api, Method::POST, "/api/workers/tagger/runs", OPERATOR, Some("application/json"), body.into())
    };
    let error = trigger("{\"engine\":").await.expect(StatusCode::BAD_REQUEST, Some("malformed_json"));
    let message = error["message"].as_str().expect("message");
    assert!(
        message.starts_with("The request body is not valid JSON: ") && message.contains("line 1 column"),
        "{message}"
    );
    trigger("{\"engine\": \"local\",}").await.expect(StatusCode::BAD_REQUEST, Some("malformed_json"));
    trigger("\u{0}\u{1}garbage").await.expect(StatusCode::BAD_REQUEST, Some("malformed_json"));
    let error = trigger("{\"engin\": \"local\"}").await.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    assert!(error["message"].as_str().is_some_and(|m| m.contains("unknown field `engin`")), "{error}");
    trigger("{\"options\": 5}").await.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    trigger("{\"preset\": [\"fast\"]}").await.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    trigger("[1, 2, 3]").await.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    trigger("null").await.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    let text =
        raw(&api, Method::POST, "/api/workers/tagger/runs", OPERATOR, Some("text/plain"), b"run please".to_vec()).await;
    text.expect(StatusCode::UNSUPPORTED_MEDIA_TYPE, Some("unsupported_media_type"));

    let big = format!("{{\"options\": {{\"mode\": \"{}\"}}}}", "x".repeat(10_000));
    let error = trigger(&big).await.expect(StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large"));
    assert_eq!(error["message"], "The request body is larger than the limit of 4096 bytes.");
    let put =
        raw(&api, Method::PUT, "/api/workers/tagger/override", ADMIN, Some("application/json"), big.into_bytes()).await;
    put.expect(StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large"));
    let huge = vec![b' '; 100_000];
    let reply =
        raw(&api, Method::POST, "/api/runs/00000000-0000-0000-0000-000000000000/cancel", OPERATOR, None, huge).await;
    assert!(reply.status.is_client_error(), "{} {}", reply.status, reply.text());

    let runs = api.get("/api/runs", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(runs["runs"], json!([]), "no hostile body created a run");
}

async fn bad_ids_and_path_traversal_get_readable_4xx_errors(t: &TestDb) {
    let api = TestApi::new(t).await;
    for path in
        ["/api/runs/123", "/api/runs/%00", "/api/runs/..%2F..%2Fetc%2Fpasswd", "/api/runs/..%2F..%2Fetc%2Fpasswd/log"]
    {
        api.get(path, VIEWER).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
    }
    api.post("/api/runs/..%2Fx/cancel", OPERATOR, None).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
    api.post("/api/daemons/..%2F..%2Fetc/drain", ADMIN, None).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));

    let error =
        api.get("/api/workers/..%2F..%2Fetc", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    assert_eq!(error["message"], "There is no worker \"../../etc\"; GET /api/workers lists the workers.");
    api.post("/api/workers/..%2F..%2Fetc/runs", OPERATOR, None)
        .await
        .expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    let put = api.send(
        Method::PUT,
        "/api/workers/%2E%2E/override",
        Some(ADMIN),
        Some(json!({"preset": "big", "reason": "r"})),
    );
    put.await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    api.get("/api/workers/..%2F..%2Fetc/audit", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    api.get("/api/workers/tagger%00", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    let long = format!("/api/workers/{}", "a".repeat(5000));
    let error = api.get(&long, VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_worker"));
    assert!(error["message"].as_str().is_some_and(|m| m.len() < 200), "long input is cut: {error}");
    let reply = api.get("/api/workers/%FF%FE", VIEWER).await;
    assert!(reply.status.is_client_error(), "{}", reply.status);
    reply.expect(reply.status, Some("bad_request"));
    api.get("/api/../etc/passwd", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("not_found"));
    assert!(t.dir.path().join("run-logs").read_dir().is_ok_and(|mut d| d.next().is_none()), "nothing was written");
}
