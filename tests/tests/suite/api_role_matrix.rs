//! The role matrix over every route of the OpenAPI document the real `scrinalia-api` binary serves, on both
//! backends: no token, an unknown token or a malformed header → 401; each role below the route's → 403 naming the
//! role needed; both before anything of the request is validated (a broken JSON body, an id that is not one, a bad
//! `limit`), so a caller without the right learns nothing about what would be accepted. At the route's role and
//! above, the same route is reached (neither 401 nor 403, never a 500). The routes come from the document: one it
//! lists that the table below does not name fails the test, so a new route cannot escape it.

use std::net::SocketAddr;

use reqwest::{Method, StatusCode, header::CONTENT_TYPE};
use scrinalia_shared::Role;
use scrinalia_tests::{
    Reply, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, Operation, VIEWER, config_file, openapi_operations},
    backend_tests, free_port,
};

use crate::api_edges::PARAMETERS;

backend_tests!(every_route_of_the_openapi_document_refuses_a_missing_token_and_a_low_role_before_validating);

/// The role each route needs; `None`: public (the document lists no `security` for it).
const ROLES: &[(&str, Option<Role>)] = &[
    ("GET /api/workers", Some(Role::Viewer)),
    ("GET /api/workers/{name}", Some(Role::Viewer)),
    ("GET /api/workers/{name}/history", Some(Role::Viewer)),
    ("POST /api/workers/{name}/describe", Some(Role::Operator)),
    ("POST /api/workers/{name}/count", Some(Role::Operator)),
    ("POST /api/workers/{name}/check", Some(Role::Operator)),
    ("POST /api/workers/{name}/runs", Some(Role::Operator)),
    ("GET /api/runs", Some(Role::Viewer)),
    ("GET /api/runs/{id}", Some(Role::Viewer)),
    ("GET /api/runs/{id}/progress", Some(Role::Viewer)),
    ("POST /api/runs/{id}/cancel", Some(Role::Operator)),
    ("GET /api/runs/{id}/log", Some(Role::Viewer)),
    ("GET /api/runs/export", Some(Role::Viewer)),
    ("POST /api/runs/{id}/resume", Some(Role::Operator)),
    ("POST /api/runs/{id}/restart", Some(Role::Operator)),
    ("POST /api/runs/{id}/rerun", Some(Role::Operator)),
    ("POST /api/runs/{id}/rerun-failed", Some(Role::Operator)),
    ("POST /api/runs/bulk", Some(Role::Operator)),
    ("GET /api/runs/bulk", Some(Role::Viewer)),
    ("GET /api/runs/bulk/{id}", Some(Role::Viewer)),
    ("GET /api/runs/{id}/items", Some(Role::Viewer)),
    ("GET /api/workers/{name}/quarantine", Some(Role::Viewer)),
    ("POST /api/workers/{name}/quarantine/release", Some(Role::Operator)),
    ("PUT /api/workers/{name}/override", Some(Role::Admin)),
    ("DELETE /api/workers/{name}/override", Some(Role::Admin)),
    ("GET /api/workers/{name}/audit", Some(Role::Viewer)),
    ("POST /api/workers/{name}/pause", Some(Role::Operator)),
    ("POST /api/workers/{name}/resume", Some(Role::Operator)),
    ("GET /api/workers/{name}/pauses", Some(Role::Viewer)),
    ("GET /api/workers/{name}/backlog-fires", Some(Role::Viewer)),
    ("GET /api/resources", Some(Role::Viewer)),
    ("PUT /api/resources/{name}", Some(Role::Admin)),
    ("GET /api/resources/{name}/audit", Some(Role::Viewer)),
    ("GET /api/schedules", Some(Role::Viewer)),
    ("POST /api/schedules", Some(Role::Operator)),
    ("POST /api/schedules/preview", Some(Role::Viewer)),
    ("GET /api/schedules/{key}", Some(Role::Viewer)),
    ("PUT /api/schedules/{key}", Some(Role::Operator)),
    ("DELETE /api/schedules/{key}", Some(Role::Operator)),
    ("POST /api/schedules/{key}/pause", Some(Role::Operator)),
    ("POST /api/schedules/{key}/resume", Some(Role::Operator)),
    ("GET /api/schedules/{key}/fires", Some(Role::Viewer)),
    ("GET /api/schedules/{key}/audit", Some(Role::Viewer)),
    ("GET /api/pipelines", Some(Role::Viewer)),
    ("POST /api/pipelines/{name}/runs", Some(Role::Operator)),
    ("GET /api/pipelines/{name}/runs", Some(Role::Viewer)),
    ("GET /api/pipeline-runs/{id}", Some(Role::Viewer)),
    ("POST /api/pipeline-runs/{id}/cancel", Some(Role::Operator)),
    ("GET /api/daemons", Some(Role::Viewer)),
    ("POST /api/daemons/{id}/drain", Some(Role::Admin)),
    ("GET /api/webhooks", Some(Role::Viewer)),
    ("GET /api/webhooks/deliveries", Some(Role::Viewer)),
    ("POST /api/webhooks/{name}/test", Some(Role::Admin)),
    ("GET /api/health", Some(Role::Viewer)),
    ("GET /api/events", Some(Role::Viewer)),
    ("POST /api/tokens", Some(Role::Admin)),
    ("GET /api/tokens", Some(Role::Admin)),
    ("DELETE /api/tokens/{id}", Some(Role::Admin)),
    ("GET /api/me", Some(Role::Viewer)),
    ("GET /api/signin", None),
    ("GET /healthz", None),
    ("GET /readyz", None),
    ("GET /api/openapi.json", None),
    ("GET /metrics", None),
];

/// What a request that must not be validated carries: a broken JSON body, ids that are none, a bad `limit`.
const GARBAGE: [(&str, &str); 3] = [("id", "..%2Fnot-an-id"), ("name", "%00"), ("key", "..%2F..%2Fetc")];

/// Sends `method path` with `authorization` (if any), and a broken JSON body when `broken`; the status and, unless
/// the answer is a live stream, the reply.
async fn call(
    base: &str,
    method: &Method,
    path: &str,
    authorization: Option<&str>,
    broken: bool,
) -> (StatusCode, Reply) {
    let mut request = reqwest::Client::new().request(method.clone(), format!("{base}{path}"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    if broken {
        request = request.header(CONTENT_TYPE, "application/json").body("{\"broken\": ");
    }
    let response = request.send().await.expect("the API answers");
    let status = response.status();
    let stream = response.headers().get(CONTENT_TYPE).is_some_and(|v| v == "text/event-stream");
    if stream {
        return (status, Reply::from_raw(status.as_u16(), String::new()));
    }
    (status, Reply::read(response).await.expect("a whole reply"))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Viewer => "viewer",
        Role::Operator => "operator",
        Role::Admin => "admin",
    }
}

async fn every_route_of_the_openapi_document_refuses_a_missing_token_and_a_low_role_before_validating(t: &TestDb) {
    let port = free_port();
    let config = ApiConfig { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..ApiConfig::default() };
    let path = t.write_config(&config_file(&t.url, t.dir.path(), &config), "api");
    let _api = scrinalia_tests::start_api(t.dir.path(), "api", &path, port, &[]).await;
    let base = format!("http://127.0.0.1:{port}");

    let operations = openapi_operations(&base).await;
    let listed: Vec<String> = operations.iter().map(Operation::key).collect();
    let unknown: Vec<&String> = listed.iter().filter(|k| !ROLES.iter().any(|(r, _)| r == k)).collect();
    assert!(unknown.is_empty(), "routes of the document without a role in this test's table: {unknown:?}");
    let gone: Vec<&str> = ROLES.iter().map(|(k, _)| *k).filter(|k| !listed.iter().any(|l| l == k)).collect();
    assert!(gone.is_empty(), "routes of this test's table that the document no longer lists: {gone:?}");

    let tokens = [(Role::Viewer, VIEWER), (Role::Operator, OPERATOR), (Role::Admin, ADMIN)];
    let mut checked = 0;
    for operation in &operations {
        let key = operation.key();
        let needed = ROLES.iter().find(|(k, _)| *k == key).and_then(|(_, role)| *role);
        assert_eq!(operation.secured, needed.is_some(), "{key}: the document's `security` and the table disagree");
        let plausible = operation.path(&PARAMETERS);
        let garbage = format!("{}?limit=zero", operation.path(&GARBAGE));
        let Some(needed) = needed else {
            let (status, reply) = call(&base, &operation.method, &plausible, None, false).await;
            assert!(status.is_success(), "{key} is public: {status} {}", reply.text());
            continue;
        };
        for path in [&plausible, &garbage] {
            for authorization in [None, Some("Bearer scr_not_a_known_token"), Some("Basic dXNlcjpwYXNz")] {
                let (_, reply) = call(&base, &operation.method, path, authorization, true).await;
                let what = format!("{} {path} with {authorization:?}", operation.method);
                reply.expect_of(&what, StatusCode::UNAUTHORIZED, Some("unauthorized"));
            }
            for (role, token) in tokens.iter().filter(|(role, _)| *role < needed) {
                let (_, reply) = call(&base, &operation.method, path, Some(&format!("Bearer {token}")), true).await;
                let what = format!("{} {path} as {}", operation.method, role_name(*role));
                let body = reply.expect_of(&what, StatusCode::FORBIDDEN, Some("forbidden"));
                assert_eq!(body["required_role"], role_name(needed), "{what}");
            }
        }
        for (role, token) in tokens.iter().filter(|(role, _)| *role >= needed) {
            let (status, reply) =
                call(&base, &operation.method, &plausible, Some(&format!("Bearer {token}")), false).await;
            assert!(
                !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::INTERNAL_SERVER_ERROR),
                "{key} as {}: {status} {}",
                role_name(*role),
                reply.text()
            );
        }
        checked += 1;
    }
    assert!(checked >= 45, "every secured route was checked ({checked})");
}
