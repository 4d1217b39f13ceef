//! The API's edges against the real `scrinalia-api` binary: what a hostile page could make a visitor's browser do
//! and what a local process could pretend. With an anonymous operator on loopback, a plain form posted from
//! another site (even empty) and a browser's `Sec-Fetch-Site: cross-site` write are refused `cross_origin` on every
//! write route of the OpenAPI document and create nothing, while the API's own page and a bearer token go through;
//! an anonymous role answers only to localhost, loopback addresses and `api.allowed_hosts` (DNS rebinding); the
//! trusted proxy is believed for the last line of its headers only and, when configured, only with its secret;
//! behind a TLS proxy `api.public_origin` is the one own origin and a sibling site is refused;
//! every `/api/*` answer is `no-store`; what would make the edges unsafe is refused at load with a sentence; and
//! the issuer's keys are not fetched through a redirect nor read beyond 1 MiB.

use std::{net::SocketAddr, time::Duration};

use reqwest::{Method, StatusCode, header::CACHE_CONTROL};
use scrinalia_shared::{
    Role,
    auth::hash_token,
    config::{OidcSettings, ProxySettings, SettingsFile},
};
use scrinalia_tests::{
    Process, Reply, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, VIEWER, config_file, openapi_operations},
    backend_tests, free_port,
};
use serde_json::{Value, json};

backend_tests!(
    a_write_without_a_token_from_another_site_is_refused_on_every_route_and_creates_nothing,
    api_answers_are_never_stored_and_token_names_with_bidi_controls_are_refused,
);

/// Values for the path parameters of any route: plausible, so the route itself is reached.
pub(crate) const PARAMETERS: [(&str, &str); 3] =
    [("id", "0190f5c2-7d1e-7a3b-9c4d-2e5f6a7b8c9d"), ("name", "transfer"), ("key", "nightly")];

/// One real API process.
struct Api {
    process: Process,
    base: String,
    port: u16,
}

/// Starts the API on the tests' configuration with `anonymous` and `edit` applied; waits until it is ready.
async fn serve(t: &TestDb, name: &str, anonymous: Option<Role>, edit: impl FnOnce(&mut SettingsFile)) -> Api {
    let port = free_port();
    let config = ApiConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], port)),
        anonymous: anonymous.map(|role| (role, true)),
        ..ApiConfig::default()
    };
    let path = t.write_config(&config_file(&t.url, t.dir.path(), &config).with(edit), name);
    let process = scrinalia_tests::start_api(t.dir.path(), name, &path, port, &[]).await;
    Api { process, base: format!("http://127.0.0.1:{port}"), port }
}

/// Starts the API on a configuration that `edit` spoils; asserts it exits with an error and returns what it said.
async fn refused_at_load(t: &TestDb, name: &str, edit: impl FnOnce(&mut SettingsFile)) -> String {
    let config = ApiConfig { listen: SocketAddr::from(([127, 0, 0, 1], free_port())), ..ApiConfig::default() };
    let path = t.write_config(&config_file(&t.url, t.dir.path(), &config).with(edit), name);
    let path = path.display().to_string();
    let mut process = scrinalia_tests::start("scrinalia-api", name, t.dir.path(), &["--config", &path, "serve"], &[]);
    let code = process.wait_exit(Duration::from_secs(30)).await.expect("the API exits");
    let output = process.output();
    assert!(code.is_some_and(|c| c != 0), "{name}: the API must refuse to start (exit {code:?}):\n{output}");
    output
}

/// Sends `method path` to `api` with `headers` (no token unless one is among them) and no body.
async fn send(api: &Api, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = reqwest::Client::new().request(method, format!("{}{path}", api.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Reply::read(request.send().await.expect("the API answers")).await.expect("a whole reply")
}

async fn runs(api: &Api) -> Vec<Value> {
    let reply = send(api, Method::GET, "/api/runs", &[("authorization", &format!("Bearer {VIEWER}"))]).await;
    reply.expect(StatusCode::OK, None)["runs"].as_array().cloned().unwrap_or_default()
}

async fn a_write_without_a_token_from_another_site_is_refused_on_every_route_and_creates_nothing(t: &TestDb) {
    let api =
        serve(t, "api", Some(Role::Operator), |f| f.api.cors_origins = vec!["https://panel.example".into()]).await;
    let trigger = "/api/workers/transfer/runs";
    let form = ("content-type", "application/x-www-form-urlencoded");

    // A hostile page's `<form method=POST>`: an empty form body, its own origin.
    let reply = send(&api, Method::POST, trigger, &[("origin", "https://evil.example"), form]).await;
    let body = reply.expect(StatusCode::FORBIDDEN, Some("cross_origin"));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("https://evil.example")), "{body}");
    // A browser that sends no Origin but says where the request comes from.
    let reply = send(&api, Method::POST, trigger, &[("sec-fetch-site", "cross-site")]).await;
    reply.expect(StatusCode::FORBIDDEN, Some("cross_origin"));

    // Every write route of the document, body-less ones included, from another site, either way.
    let writes: Vec<_> = openapi_operations(&api.base).await.into_iter().filter(|o| o.writes()).collect();
    assert!(writes.len() >= 20, "the document lists the write routes: {writes:?}");
    for operation in &writes {
        let path = operation.path(&PARAMETERS);
        for headers in [&[("origin", "https://evil.example"), form][..], &[("sec-fetch-site", "cross-site")][..]] {
            let reply = send(&api, operation.method.clone(), &path, headers).await;
            reply.expect_of(&format!("{} {headers:?}", operation.key()), StatusCode::FORBIDDEN, Some("cross_origin"));
        }
    }
    assert_eq!(runs(&api).await, Vec::<Value>::new(), "no refused write created a run");
    let tokens = send(&api, Method::GET, "/api/tokens", &[("authorization", &format!("Bearer {ADMIN}"))]).await;
    assert_eq!(tokens.expect(StatusCode::OK, None)["tokens"], json!([]), "nor a token");

    // The API's own page: a form is still not JSON, even empty; without a body the run is requested.
    let own = format!("http://127.0.0.1:{}", api.port);
    let reply = send(&api, Method::POST, trigger, &[("origin", &own), form]).await;
    reply.expect(StatusCode::UNSUPPORTED_MEDIA_TYPE, Some("unsupported_media_type"));
    let own_site = [("origin", own.as_str()), ("sec-fetch-site", "same-origin")];
    let run = send(&api, Method::POST, trigger, &own_site).await.expect(StatusCode::CREATED, None);
    assert_eq!(run["requested_by"], "anonymous");
    let cancel = format!("/api/runs/{}/cancel", run["id"].as_str().expect("an id"));
    send(&api, Method::POST, &cancel, &[("origin", &own)]).await.expect(StatusCode::ACCEPTED, None);

    // A bearer token from an allowed origin (a page of api.cors_origins).
    let token = format!("Bearer {OPERATOR}");
    let headers = [("origin", "https://panel.example"), ("authorization", token.as_str())];
    let run = send(&api, Method::POST, trigger, &headers).await.expect(StatusCode::CREATED, None);
    assert_eq!(run["requested_by"], "otto-operator");
    assert_eq!(runs(&api).await.len(), 2, "exactly the two accepted writes made runs");
    drop(api.process);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_role_answers_only_to_known_host_names() {
    let t = TestDb::sqlite().await;
    let api = serve(&t, "api", Some(Role::Operator), |f| f.api.allowed_hosts = vec!["scheduler.internal".into()]).await;
    let port = api.port;
    let attacker = format!("attacker.example:{port}");
    for (method, path) in [(Method::GET, "/api/workers"), (Method::GET, "/api/me"), (Method::POST, "/api/tokens")] {
        let reply = send(&api, method.clone(), path, &[("host", &attacker)]).await;
        let body = reply.expect_of(&format!("{method} {path}"), StatusCode::FORBIDDEN, Some("host_not_allowed"));
        assert!(body["message"].as_str().is_some_and(|m| m.contains("api.allowed_hosts")), "{body}");
    }
    // A rebound write is refused before anything else, with a same-origin Origin as the rebound page sends it.
    let origin = format!("http://{attacker}");
    let reply =
        send(&api, Method::POST, "/api/workers/transfer/runs", &[("host", &attacker), ("origin", &origin)]).await;
    reply.expect(StatusCode::FORBIDDEN, Some("host_not_allowed"));
    assert_eq!(runs(&api).await, Vec::<Value>::new(), "the rebound write created nothing");
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("scheduler.internal:{port}")] {
        let me = send(&api, Method::GET, "/api/me", &[("host", &host)]).await.expect_of(&host, StatusCode::OK, None);
        assert_eq!(me["name"], "anonymous", "{host}");
    }
    // A bearer token is not the anonymous role: its Host is not checked.
    let token = format!("Bearer {VIEWER}");
    send(&api, Method::GET, "/api/me", &[("host", &attacker), ("authorization", &token)])
        .await
        .expect(StatusCode::OK, None);
    send(&api, Method::GET, "/healthz", &[("host", &attacker)]).await.expect(StatusCode::OK, None);
    drop(api.process);
    t.cleanup().await;
}

async fn api_answers_are_never_stored_and_token_names_with_bidi_controls_are_refused(t: &TestDb) {
    let api = serve(t, "api", None, |_| {}).await;
    let admin = format!("Bearer {ADMIN}");
    let create = |name: &str| {
        let request = reqwest::Client::new()
            .post(format!("{}/api/tokens", api.base))
            .header("authorization", &admin)
            .json(&json!({"name": name, "role": "viewer"}));
        async move { Reply::read(request.send().await.expect("an answer")).await.expect("a reply") }
    };
    let created = create("ci-bot").await;
    created.expect(StatusCode::CREATED, None);
    assert_eq!(created.headers[CACHE_CONTROL], "no-store", "the answer carrying a secret is never stored");
    for (method, path, token) in [(Method::GET, "/api/workers", VIEWER), (Method::GET, "/api/nothing", VIEWER)] {
        let reply = send(&api, method, path, &[("authorization", &format!("Bearer {token}"))]).await;
        assert_eq!(reply.headers[CACHE_CONTROL], "no-store", "{path}");
    }
    let refused = send(&api, Method::GET, "/api/workers", &[]).await;
    assert_eq!(refused.headers[CACHE_CONTROL], "no-store", "errors too");

    for name in ["ops\u{202E}nimda", "ops\u{2066}x", "ops\u{200F}", "ops\u{7}"] {
        let reply = create(name).await;
        let body = reply.expect_of(&format!("{name:?}"), StatusCode::BAD_REQUEST, Some("invalid_token_name"));
        let message = body["message"].as_str().unwrap_or_default();
        assert!(!message.chars().any(|c| matches!(c, '\u{202E}' | '\u{2066}' | '\u{200F}')), "{message}");
    }
    drop(api.process);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_is_believed_for_its_last_header_line_and_with_its_secret_only() {
    let t = TestDb::sqlite().await;
    let proxy = ProxySettings {
        trusted: vec!["127.0.0.1".into()],
        secret_header: Some("X-Proxy-Secret".into()),
        secret_hash: Some(hash_token("the-proxy-secret")),
        ..ProxySettings::default()
    };
    let api = serve(&t, "api", Some(Role::Admin), |f| {
        f.auth.proxy = Some(proxy);
        f.auth.groups = [("archive-admins".to_owned(), Role::Admin), ("archive-staff".to_owned(), Role::Viewer)].into();
    })
    .await;
    let secret = ("x-proxy-secret", "the-proxy-secret");
    let user = ("x-forwarded-user", "mallory");

    // A client's own groups line, then the proxy's: only the proxy's (the last) counts.
    let two_lines = [user, ("x-forwarded-groups", "archive-admins"), ("x-forwarded-groups", "archive-staff"), secret];
    let me = send(&api, Method::GET, "/api/me", &two_lines).await.expect(StatusCode::OK, None);
    assert_eq!(me, json!({"name": "mallory (via proxy)", "role": "viewer"}));
    let reply = send(&api, Method::POST, "/api/tokens", &two_lines).await;
    reply.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    let two_users = [("x-forwarded-user", "ada"), user, ("x-forwarded-groups", "archive-admins"), secret];
    let me = send(&api, Method::GET, "/api/me", &two_users).await.expect(StatusCode::OK, None);
    assert_eq!(me["name"], "mallory (via proxy)", "the last user line is the person");

    // A local process on the proxy's address without the secret, or with a wrong one, names nobody.
    for headers in [&[user, ("x-forwarded-groups", "archive-admins")][..], &[user, ("x-proxy-secret", "guess")][..]] {
        let reply = send(&api, Method::GET, "/api/me", headers).await;
        let body = reply.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
        assert!(body["message"].as_str().is_some_and(|m| m.contains("X-Proxy-Secret")), "{body}");
    }
    // Nor is a request from the proxy's address anonymous admin, forwarding headers or not.
    let reply = send(&api, Method::GET, "/api/me", &[]).await;
    let body = reply.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("[auth.proxy].trusted")), "{body}");
    // A name with bidi controls is kept readable in the audit trail.
    let bidi = [("x-forwarded-user", "eve\u{202E}nimda"), ("x-forwarded-groups", "archive-staff"), secret];
    let me = send(&api, Method::GET, "/api/me", &bidi).await.expect(StatusCode::OK, None);
    assert_eq!(me["name"], "evenimda (via proxy)");
    drop(api.process);
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_would_make_the_edges_unsafe_is_refused_at_load_with_a_sentence() {
    let t = TestDb::sqlite().await;
    let groups = || [("archive-admins".to_owned(), Role::Admin)].into();
    let wide = ProxySettings { trusted: vec!["0.0.0.0/0".into()], ..ProxySettings::default() };
    let output = refused_at_load(&t, "wide-trust", |f| {
        (f.auth.proxy, f.auth.groups) = (Some(wide.clone()), groups());
    })
    .await;
    assert!(output.contains("auth.proxy.trusted") && output.contains("\"0.0.0.0/0\" is wider than a /8"), "{output}");

    let output = refused_at_load(&t, "cors-star", |f| f.api.cors_origins = vec!["*".into()]).await;
    assert!(output.contains("api.cors_origins") && output.contains("\"*\" is refused"), "{output}");

    let oidc = OidcSettings {
        issuer: "https://idp.example".into(),
        audience: "scrinalia".into(),
        jwks_url: Some("http://idp.example/keys".into()),
        ..OidcSettings::default()
    };
    let output =
        refused_at_load(&t, "jwks-http", |f| (f.auth.oidc, f.auth.groups) = (Some(oidc.clone()), groups())).await;
    assert!(output.contains("auth.oidc.jwks_url") && output.contains("plain http to another host"), "{output}");
    let long = OidcSettings { jwks_url: Some("https://idp.example/keys".into()), leeway_seconds: 3600, ..oidc };
    let output = refused_at_load(&t, "leeway", |f| (f.auth.oidc, f.auth.groups) = (Some(long), groups())).await;
    assert!(output.contains("auth.oidc.leeway_seconds"), "{output}");

    // A wide trust that is asked for explicitly starts, and says so loudly.
    let allowed = ProxySettings { allow_wide_trust: true, ..wide };
    let mut api = serve(&t, "allowed-wide", None, |f| (f.auth.proxy, f.auth.groups) = (Some(allowed), groups())).await;
    let log = api.process.output();
    assert!(log.contains("WARN") && log.contains("allow_wide_trust is set"), "{log}");
    assert!(api.process.exited().is_none());
    t.cleanup().await;
}

/// Serves the paths of a would-be issuer: `/moved` redirects to `/keys` (a valid, empty key set), `/huge` answers
/// 2 MiB. Returns its base URL.
async fn issuer() -> String {
    use axum::{Router, response::Redirect, routing::get};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the issuer");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    let app = Router::new()
        .route("/keys", get(|| async { axum::Json(json!({"keys": []})) }))
        .route("/moved", get(|| async { Redirect::temporary("/keys") }))
        .route("/huge", get(|| async { format!("{{\"keys\": [], \"pad\": \"{}\"}}", "x".repeat(2 << 20)) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issuers_keys_are_read_without_following_a_redirect_and_within_a_bound() {
    use base64::Engine as _;
    let t = TestDb::sqlite().await;
    let issuer = issuer().await;
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    // Shaped as an access token, so the API fetches the issuer's keys to check it.
    let token = format!("{}.{}.c2ln", b64(json!({"alg": "RS256", "kid": "k1"})), b64(json!({"sub": "x"})));
    for (path, said) in [("/moved", "a redirect, not followed"), ("/huge", "larger than 1048576 bytes")] {
        let oidc = OidcSettings {
            issuer: issuer.clone(),
            audience: "scrinalia".into(),
            jwks_url: Some(format!("{issuer}{path}")),
            ..OidcSettings::default()
        };
        let api = serve(&t, &format!("api{}", path.replace('/', "-")), None, |f| {
            (f.auth.oidc, f.auth.groups) = (Some(oidc), [("admins".to_owned(), Role::Admin)].into());
        })
        .await;
        let reply = send(&api, Method::GET, "/api/me", &[("authorization", &format!("Bearer {token}"))]).await;
        let body = reply.expect_of(path, StatusCode::SERVICE_UNAVAILABLE, Some("oidc_keys_unavailable"));
        assert!(body["message"].as_str().is_some_and(|m| m.contains(said)), "{path}: {body}");
        drop(api.process);
    }
    t.cleanup().await;
}

/// Behind a TLS proxy the API's own origin is `api.public_origin`, not what its `Host` says: the proxy's page writes,
/// a page served at the API's bare address no longer counts as its own, a sibling site (`Sec-Fetch-Site:
/// same-site`) is refused, and the public name is a known host for the anonymous role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_proxy_the_public_origin_is_the_own_one_and_a_sibling_site_is_refused() {
    let t = TestDb::sqlite().await;
    let public = "https://scheduler.example.org";
    let api = serve(&t, "api", Some(Role::Operator), |f| f.api.public_origin = Some(public.into())).await;
    let trigger = "/api/workers/transfer/runs";

    let run = send(&api, Method::POST, trigger, &[("origin", public)]).await.expect(StatusCode::CREATED, None);
    let cancel = format!("/api/runs/{}/cancel", run["id"].as_str().expect("an id"));
    send(&api, Method::POST, &cancel, &[("origin", public)]).await.expect(StatusCode::ACCEPTED, None);

    let bare = format!("http://127.0.0.1:{}", api.port);
    let reply = send(&api, Method::POST, trigger, &[("origin", &bare)]).await;
    reply.expect_of("the bare address once a public origin is set", StatusCode::FORBIDDEN, Some("cross_origin"));
    let reply = send(&api, Method::POST, trigger, &[("sec-fetch-site", "same-site")]).await;
    reply.expect_of("a sibling site", StatusCode::FORBIDDEN, Some("cross_origin"));

    let reply = send(&api, Method::GET, "/api/workers", &[("host", "scheduler.example.org")]).await;
    reply.expect_of("the public name as Host", StatusCode::OK, None);
    drop(api.process);
    t.cleanup().await;
}
