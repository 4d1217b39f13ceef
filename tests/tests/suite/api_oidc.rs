//! Signing people in, through the real binaries on both backends. OpenID Connect: a test identity provider signs
//! access tokens with RSA keys it generated and serves its JWKS over HTTP on a local port; a token of each role
//! works (a viewer reads, an operator triggers, an admin sets an override) and the run's `requested_by` and the
//! override's audit trail name the person; expired, wrong-issuer, wrong-audience, unknown-key, `alg: none` and
//! HS256-signed-with-the-public-key tokens are each refused with a 401 and a sentence; a key rotation is picked
//! up; a live stream ends when its access token expires. Trusted proxy: headers from the trusted address give the mapped role; from an untrusted peer they are
//! ignored.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use rsa::pkcs1::{EncodeRsaPublicKey, LineEnding};
use scrinalia_shared::{
    Role,
    config::{OidcSettings, PanelSignIn, ProxySettings},
};
use scrinalia_tests::{
    Kind, Reply,
    daemon_harness::{probe, with_defaults},
    demo_worker, eventually, free_port,
    idp::{AUDIENCE, ISSUER, Idp, b64, claims, keys, sign},
    sse::EventStream,
    system::System,
};
use serde_json::{Value, json};

pub(crate) fn groups() -> BTreeMap<String, Role> {
    [("archive-viewers", Role::Viewer), ("archive-operators", Role::Operator), ("archive-admins", Role::Admin)]
        .into_iter()
        .map(|(g, r)| (g.to_owned(), r))
        .collect()
}

async fn start(kind: Kind, idp: &Idp) -> System {
    start_with(kind, idp, None).await
}

/// The whole system with `[auth.oidc]` on `idp`, and the panel's sign-in when `panel` is given.
pub(crate) async fn start_with(kind: Kind, idp: &Idp, panel: Option<PanelSignIn>) -> System {
    let defaults = [("output_lines", json!(2)), ("exit_code", json!(0))];
    let worker = with_defaults(probe(&demo_worker(), "probe-1", 120), &defaults);
    let oidc = OidcSettings {
        issuer: ISSUER.to_owned(),
        audience: AUDIENCE.to_owned(),
        jwks_url: Some(format!("{}/jwks", idp.url)),
        jwks_refetch_seconds: 1,
        panel,
        ..OidcSettings::default()
    };
    System::start(kind, |config| {
        config.worker(worker).with(|f| {
            f.auth.oidc = Some(oidc);
            f.auth.groups = groups();
        })
    })
    .await
}

async fn call(system: &System, method: Method, path: &str, bearer: &str, body: Option<Value>) -> Reply {
    system.http(method, path, bearer, body).await.expect("the API answers")
}

/// Asserts a 401 whose sentence has `words`.
async fn refused(system: &System, what: &str, token: &str, words: &str) {
    let reply = call(system, Method::GET, "/api/workers", token, None).await;
    let body = reply.expect_of(what, StatusCode::UNAUTHORIZED, Some("unauthorized"));
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(words), "{what}: {words:?} is missing from {message:?}");
}

async fn access_tokens_of_each_role_work_and_bad_ones_are_refused_with_a_sentence(kind: Kind) {
    let idp = Idp::start().await;
    let system = start(kind, &idp).await;

    // A viewer reads, and may not trigger: the refusal names the person.
    let vera = sign(&claims("vera-sub", Some("Vera Viewer"), json!(["archive-viewers", "staff"])), "k1", 0);
    call(&system, Method::GET, "/api/workers", &vera, None).await.expect(StatusCode::OK, None);
    let me = call(&system, Method::GET, "/api/me", &vera, None).await.expect(StatusCode::OK, None);
    assert_eq!(me, json!({"name": "Vera Viewer <vera-sub>", "role": "viewer"}));
    let denied = call(&system, Method::POST, "/api/workers/probe-1/runs", &vera, None).await;
    let denied = denied.expect(StatusCode::FORBIDDEN, Some("forbidden"));
    assert!(denied["message"].as_str().is_some_and(|m| m.contains("Vera Viewer <vera-sub> has the viewer role")));

    // An operator (the claim a single string) triggers; the run names the person.
    let otto = sign(&claims("otto-sub", Some("Otto Operator"), json!("archive-operators")), "k1", 0);
    let run =
        call(&system, Method::POST, "/api/workers/probe-1/runs", &otto, None).await.expect(StatusCode::CREATED, None);
    assert_eq!(run["requested_by"], "Otto Operator <otto-sub>", "{run}");
    let id = run["id"].as_str().expect("a run id");
    let read = call(&system, Method::GET, &format!("/api/runs/{id}"), &vera, None).await.expect(StatusCode::OK, None);
    assert_eq!(read["requested_by"], "Otto Operator <otto-sub>");

    // An admin (the highest mapped role wins) sets an override; the audit trail names the person.
    let ada = sign(&claims("ada-sub", Some("Ada Lovelace"), json!(["archive-viewers", "archive-admins"])), "k1", 0);
    let change = json!({"options": {"output_lines": 3}, "reason": "more lines"});
    call(&system, Method::PUT, "/api/workers/probe-1/override", &ada, Some(change)).await.expect(StatusCode::OK, None);
    let audit =
        call(&system, Method::GET, "/api/workers/probe-1/audit", &vera, None).await.expect(StatusCode::OK, None);
    assert_eq!(audit["entries"][0]["actor"], "Ada Lovelace <ada-sub>", "{audit}");

    // No `name`: `preferred_username`. No mapped group: 403 saying so.
    let mut c = claims("grace-sub", None, json!(["archive-viewers"]));
    c["preferred_username"] = json!("grace");
    let me = call(&system, Method::GET, "/api/me", &sign(&c, "k1", 0), None).await.expect(StatusCode::OK, None);
    assert_eq!(me["name"], "grace <grace-sub>");
    let nobody = sign(&claims("nobody-sub", Some("No Body"), json!(["visitors"])), "k1", 0);
    let reply = call(&system, Method::GET, "/api/workers", &nobody, None).await;
    let body = reply.expect(StatusCode::FORBIDDEN, Some("no_role"));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("none of \"visitors\" maps to a role")), "{body}");

    // Each bad token: 401 and why.
    let mut expired = claims("vera-sub", Some("Vera Viewer"), json!(["archive-viewers"]));
    expired["exp"] = json!(chrono::Utc::now().timestamp() - 120);
    refused(&system, "expired", &sign(&expired, "k1", 0), "expired at").await;
    let mut issuer = claims("vera-sub", None, json!(["archive-viewers"]));
    issuer["iss"] = json!("https://evil.test");
    refused(&system, "wrong issuer", &sign(&issuer, "k1", 0), "was issued by \"https://evil.test\"").await;
    let mut audience = claims("vera-sub", None, json!(["archive-viewers"]));
    audience["aud"] = json!("another-app");
    refused(&system, "wrong audience", &sign(&audience, "k1", 0), "is meant for \"another-app\"").await;
    let good = claims("vera-sub", None, json!(["archive-viewers"]));
    refused(&system, "unknown key", &sign(&good, "k9", 1), "key \"k9\", which the issuer does not publish").await;
    refused(&system, "forged signature", &sign(&good, "k1", 1), "signature does not verify").await;
    let none = format!("{}.{}.", b64(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#), b64(good.to_string().as_bytes()));
    refused(&system, "alg none", &none, "algorithm \"none\" is not allowed").await;
    let public = keys()[0].to_public_key().to_pkcs1_pem(LineEnding::LF).expect("a PEM");
    let hs = Header { kid: Some("k1".to_owned()), ..Header::new(Algorithm::HS256) };
    let hs = jsonwebtoken::encode(&hs, &good, &EncodingKey::from_secret(public.as_bytes())).expect("an HS256 token");
    refused(&system, "HS256 with the public key", &hs, "algorithm \"HS256\" is not allowed").await;

    // The issuer rotates to a new key: tokens signed with it are accepted, the old key's are refused.
    idp.rotate();
    let rotated = sign(&claims("ada-sub", Some("Ada Lovelace"), json!(["archive-admins"])), "k2", 1);
    eventually(Duration::from_secs(10), "the API to pick up the rotated key", || async {
        (call(&system, Method::GET, "/api/me", &rotated, None).await.status == StatusCode::OK).then_some(())
    })
    .await;
    refused(&system, "the retired key", &vera, "key \"k1\", which the issuer does not publish").await;
    system.cleanup().await;
}

async fn proxy_get(url: &str, path: &str, user: &str, groups: &str) -> Reply {
    let request = reqwest::Client::new()
        .get(format!("{url}{path}"))
        .header("X-Forwarded-User", user)
        .header("X-Forwarded-Groups", groups)
        .header("X-Forwarded-For", "192.0.2.7");
    Reply::read(request.send().await.expect("the API answers")).await.expect("a whole reply")
}

async fn a_trusted_proxy_names_the_person_and_an_untrusted_peer_is_not_believed(kind: Kind) {
    let proxy = |trusted: &str| ProxySettings { trusted: vec![trusted.to_owned()], ..ProxySettings::default() };
    let system = System::start(kind, |config| {
        config.with(|f| {
            f.auth.proxy = Some(proxy("127.0.0.1/32"));
            f.auth.groups = groups();
        })
    })
    .await;
    let me = proxy_get(&system.api_url, "/api/me", "ada", "staff, archive-admins").await.expect(StatusCode::OK, None);
    assert_eq!(me, json!({"name": "ada (via proxy)", "role": "admin"}));
    let me = proxy_get(&system.api_url, "/api/me", "vera", "archive-viewers").await.expect(StatusCode::OK, None);
    assert_eq!(me["role"], "viewer");
    let reply = proxy_get(&system.api_url, "/api/me", "eve", "visitors").await;
    let body = reply.expect(StatusCode::FORBIDDEN, Some("no_role"));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("eve (via proxy)")), "{body}");

    // The same headers at an API that trusts only 10.9.9.9: ignored, so the request has no credentials.
    let port = free_port();
    let config = system.db.config().with(|f| {
        f.api.listen = SocketAddr::from(([127, 0, 0, 1], port));
        f.auth.proxy = Some(proxy("10.9.9.9"));
        f.auth.groups = groups();
    });
    let path = system.db.write_config(&config, "untrusted");
    let _api = scrinalia_tests::start_api(system.db.dir.path(), "api-untrusted", &path, port, &[]).await;
    let url = format!("http://127.0.0.1:{port}");
    let reply = proxy_get(&url, "/api/me", "ada", "archive-admins").await;
    let body = reply.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("needs a bearer token")), "{body}");
    drop(_api);
    system.cleanup().await;
}

/// A live stream opened with an access token ends once the token expires (checked every 2 s), instead of
/// outliving it: the token here expires 4 s after it was signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_stream_ends_when_its_access_token_expires() {
    let idp = Idp::start().await;
    let system = start(Kind::Sqlite, &idp).await;
    let mut short = claims("vera-sub", Some("Vera Viewer"), json!(["archive-viewers"]));
    let expires = chrono::Utc::now().timestamp() + 4;
    short["exp"] = json!(expires);
    let vera = sign(&short, "k1", 0);
    let response = reqwest::Client::new()
        .get(format!("{}/api/events", system.api_url))
        .bearer_auth(&vera)
        .send()
        .await
        .expect("a stream");
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = EventStream::new(Box::pin(response.bytes_stream()));
    events.event(Duration::from_secs(10), "ready", |_| true).await;
    let left = u64::try_from(expires - chrono::Utc::now().timestamp()).unwrap_or(0);
    // Its expiry, then at most one recheck (2 s) and a margin for a busy machine.
    let within = Duration::from_secs(left + 6);
    assert!(events.ends_within(within).await, "the stream outlived its access token by more than 6 s");
    // It ended because the token expired, not before (requests are still allowed the configured leeway).
    let ended = chrono::Utc::now().timestamp_millis();
    assert!(ended >= expires * 1000, "the stream ended {} ms before its token expired", expires * 1000 - ended);
    system.cleanup().await;
}

macro_rules! both {
    ($($name:ident),*) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(scrinalia_tests::Kind::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(scrinalia_tests::Kind::Sqlite).await;
                }
            )*
        }
    };
}

both!(
    access_tokens_of_each_role_work_and_bad_ones_are_refused_with_a_sentence,
    a_trusted_proxy_names_the_person_and_an_untrusted_peer_is_not_believed
);
