//! Anonymous access behind a reverse proxy on the same host: the real API binary, configured as the demo is
//! (anonymous admin from loopback), and a reverse proxy of the test's own on loopback that forwards every request
//! with `X-Forwarded-For` and `X-Forwarded-Proto`, as nginx's `proxy_pass` with the usual `proxy_set_header`
//! lines does. Through the proxy a request without a token is refused (401, with a sentence naming the header);
//! with a token it goes through; straight from loopback it stays anonymous admin. The API's start-up log says
//! what anonymous access grants.

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, StatusCode},
    response::Response,
};
use reqwest::Method;
use scrinalia_shared::Role;
use scrinalia_tests::{
    Kind, Reply,
    daemon_harness::probe,
    demo_worker,
    system::{OPERATOR, System},
};
use tokio::net::TcpListener;

/// Forwards every request to `upstream` with the headers a reverse proxy adds.
async fn forward(State(upstream): State<String>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.expect("the request body");
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers.clone();
    headers.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.7"));
    headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
    headers.remove("host");
    let answer = reqwest::Client::new()
        .request(parts.method, format!("{upstream}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await
        .expect("the API answers the proxy");
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        response = response.header(name, value);
    }
    response.body(Body::from(answer.bytes().await.expect("the answer's body"))).expect("a response")
}

/// Starts the proxy on a free loopback port; returns its base URL.
async fn proxy_to(upstream: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    let app = Router::new().fallback(forward).with_state(upstream.to_owned());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

async fn get(url: &str, token: Option<&str>) -> Reply {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    Reply::read(request.send().await.expect("an answer")).await.expect("its body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_a_proxy_on_loopback_is_not_anonymous_admin() {
    let system = System::start(Kind::Sqlite, |c| {
        c.worker(probe(&demo_worker(), "probe-1", 60)).with(|f| {
            (f.auth.anonymous_role, f.auth.anonymous_loopback_only) = (Some(Role::Admin), true);
        })
    })
    .await;
    let direct = get(&format!("{}/api/me", system.api_url), None).await.expect(StatusCode::OK, None);
    assert_eq!((direct["name"].as_str(), direct["role"].as_str()), (Some("anonymous"), Some("admin")), "{direct}");

    let proxy = proxy_to(&system.api_url).await;
    let refused = get(&format!("{proxy}/api/me"), None).await;
    let body = refused.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("came through a proxy (it carries x-forwarded-for)"), "{body}");
    // A write through the proxy without a token is refused too, and changes nothing.
    let trigger =
        reqwest::Client::new().request(Method::POST, format!("{proxy}/api/workers/probe-1/runs")).send().await;
    assert_eq!(trigger.expect("an answer").status(), StatusCode::UNAUTHORIZED);
    let runs = get(&format!("{}/api/runs", system.api_url), None).await.expect(StatusCode::OK, None);
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "nothing was requested: {runs}");

    let with_token = get(&format!("{proxy}/api/me"), Some(OPERATOR)).await.expect(StatusCode::OK, None);
    assert_eq!((with_token["name"].as_str(), with_token["role"].as_str()), (Some("otto"), Some("operator")));

    let log = system.api_output();
    assert!(
        log.contains("requests without a token get the admin role from the loopback interface, not through a proxy"),
        "the start-up log says what anonymous access grants:\n{log}"
    );
    system.cleanup().await;
}
