//! Service tokens through two real `scrinalia-api` processes on one database, on both backends: an admin creates
//! one through process A, it works on process B (its name is the run's `requested_by`), the list shows its last
//! use, bad names, roles and expiries are refused with a sentence, an expired token is refused saying so, and a
//! token revoked through A is refused by B within a second of the DELETE's answer. Viewers and operators cannot
//! manage tokens (403). The CLI creates, lists and revokes them. On PostgreSQL a process whose change feed listens
//! learns of a token created or revoked elsewhere from the trigger's notification, not from a timer.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use reqwest::{Method, StatusCode};
use scrinalia_tests::{
    Process, Reply, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, VIEWER, config_file},
    backend_tests, eventually, free_port,
    system::scrinalia,
};
use serde_json::{Value, json};

backend_tests!(
    the_map_reads_no_token_then_one_then_its_revocation,
    a_token_created_through_one_process_works_on_another_and_a_revocation_reaches_it_within_a_second,
    bad_token_requests_are_refused_with_a_sentence_and_only_admins_manage_tokens,
    the_cli_creates_lists_and_revokes_service_tokens,
);

/// One API process, ready.
async fn start_api(t: &TestDb, name: &str) -> (Process, String) {
    start_api_with(t, name, &[]).await
}

/// One API process with `env`, ready.
async fn start_api_with(t: &TestDb, name: &str, env: &[(&str, &str)]) -> (Process, String) {
    let port = free_port();
    let config = ApiConfig { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..ApiConfig::default() };
    let path = t.write_config(&config_file(&t.url, t.dir.path(), &config), name);
    let process = scrinalia_tests::start_api(t.dir.path(), name, &path, port, env).await;
    (process, format!("http://127.0.0.1:{port}"))
}

async fn call(base: &str, method: Method, path: &str, token: &str, body: Option<Value>) -> Reply {
    let mut request = reqwest::Client::new().request(method, format!("{base}{path}")).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::read(request.send().await.expect("the API answers")).await.expect("a whole reply")
}

/// The map an API process checks bearers against, read straight from the store: an empty table reads as no token
/// (the one statement that reads them brings the database clock along either way), then a token, then its
/// revocation.
async fn the_map_reads_no_token_then_one_then_its_revocation(t: &TestDb) {
    use scrinalia_shared::{
        Role,
        auth::hash_token,
        tokens::{Check, NewToken, TokenMap},
    };

    let map = TokenMap::default();
    map.refresh(&t.db.api).await.expect("no token at all is read too");
    assert!(!map.is_failing());
    let expires_at = Some(chrono::Utc::now() + chrono::Duration::hours(1));
    let token = NewToken { name: "mapped".into(), role: Role::Operator, expires_at };
    let created = t.db.api.create_token(&token, "ada", &[]).await.expect("a token");
    let hash = hash_token(&created.secret);
    assert_eq!(map.check(&hash), Check::Unknown, "not read yet");
    map.refresh(&t.db.api).await.expect("one token");
    assert_eq!(map.check(&hash), Check::Accepted { name: "mapped".into(), role: Role::Operator });
    t.db.api.revoke_token(created.token.id, "ada").await.expect("revoked");
    map.refresh(&t.db.api).await.expect("the revocation");
    assert!(matches!(map.check(&hash), Check::Revoked { ref name, .. } if name == "mapped"), "{:?}", map.check(&hash));
}

async fn a_token_created_through_one_process_works_on_another_and_a_revocation_reaches_it_within_a_second(t: &TestDb) {
    let (_a, a) = start_api(t, "api-a").await;
    let (_b, b) = start_api(t, "api-b").await;

    let body = json!({"name": "ci-bot", "role": "operator"});
    let created = call(&a, Method::POST, "/api/tokens", ADMIN, Some(body)).await.expect(StatusCode::CREATED, None);
    let secret = created["secret"].as_str().expect("the secret").to_owned();
    assert!(secret.starts_with("scr_") && secret.len() == 68, "{created}");
    assert_eq!((created["name"].as_str(), created["role"].as_str()), (Some("ci-bot"), Some("operator")));
    assert_eq!(created["created_by"], "ada-admin");
    let id = created["id"].as_str().expect("an id").to_owned();

    // Honoured by A at once (its own change) and by B within a refresh.
    call(&a, Method::GET, "/api/me", &secret, None).await.expect(StatusCode::OK, None);
    let started = Instant::now();
    let me = eventually(Duration::from_secs(2), "process B to accept the new token", || async {
        let reply = call(&b, Method::GET, "/api/me", &secret, None).await;
        (reply.status == StatusCode::OK).then(|| reply.json())
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(1), "B took {:?} to accept the token", started.elapsed());
    assert_eq!(me, json!({"name": "ci-bot", "role": "operator"}));

    // Its name is the actor: the run it requests through B says so.
    let run =
        call(&b, Method::POST, "/api/workers/transfer/runs", &secret, None).await.expect(StatusCode::CREATED, None);
    assert_eq!(run["requested_by"], "ci-bot", "{run}");

    // The list has no secret, and shows the last use within a couple of seconds (batched writes).
    let listed = eventually(Duration::from_secs(5), "the list to show the token's last use", || async {
        let list = call(&a, Method::GET, "/api/tokens", ADMIN, None).await.expect(StatusCode::OK, None);
        let token = list["tokens"].as_array()?.iter().find(|t| t["id"] == id.as_str())?.clone();
        token["last_used_at"].is_string().then_some(token)
    })
    .await;
    assert!(listed.get("secret").is_none() && listed.get("hash").is_none(), "{listed}");
    assert!(listed["revoked_at"].is_null() && listed["expires_at"].is_null(), "{listed}");

    // Revoked through A; B refuses it within a second of the answer.
    let revoked =
        call(&a, Method::DELETE, &format!("/api/tokens/{id}"), ADMIN, None).await.expect(StatusCode::OK, None);
    let answered = Instant::now();
    assert_eq!(revoked["revoked_by"], "ada-admin");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let refusal = loop {
        let reply = call(&b, Method::GET, "/api/me", &secret, None).await;
        if reply.status == StatusCode::UNAUTHORIZED {
            eprintln!("process B refused the revoked token {:?} after the DELETE's answer", answered.elapsed());
            break reply;
        }
        assert!(answered.elapsed() < Duration::from_secs(1), "B still accepts the revoked token after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let refusal = refusal.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    assert!(refusal["message"].as_str().is_some_and(|m| m.contains("\"ci-bot\" was revoked")), "{refusal}");
    call(&a, Method::GET, "/api/me", &secret, None).await.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    let again = call(&a, Method::DELETE, &format!("/api/tokens/{id}"), ADMIN, None).await;
    again.expect(StatusCode::CONFLICT, Some("token_revoked"));

    // An expiring token works until its time, then is refused with a sentence saying it expired.
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(3)).to_rfc3339();
    let body = json!({"name": "short-lived", "role": "viewer", "expires_at": soon});
    let created = call(&a, Method::POST, "/api/tokens", ADMIN, Some(body)).await.expect(StatusCode::CREATED, None);
    let short = created["secret"].as_str().expect("a secret").to_owned();
    call(&a, Method::GET, "/api/me", &short, None).await.expect(StatusCode::OK, None);
    eventually(Duration::from_secs(2), "process B to accept the short-lived token", || async {
        (call(&b, Method::GET, "/api/me", &short, None).await.status == StatusCode::OK).then_some(())
    })
    .await;
    let expired = eventually(Duration::from_secs(5), "the short-lived token to expire", || async {
        let reply = call(&b, Method::GET, "/api/me", &short, None).await;
        (reply.status == StatusCode::UNAUTHORIZED).then_some(reply)
    })
    .await;
    let expired = expired.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    assert!(expired["message"].as_str().is_some_and(|m| m.contains("\"short-lived\" expired at")), "{expired}");
}

async fn bad_token_requests_are_refused_with_a_sentence_and_only_admins_manage_tokens(t: &TestDb) {
    let (_a, a) = start_api(t, "api").await;
    let post = |body: Value| {
        let a = a.clone();
        async move { call(&a, Method::POST, "/api/tokens", ADMIN, Some(body)).await }
    };
    post(json!({"name": "dup", "role": "viewer"})).await.expect(StatusCode::CREATED, None);
    let cases = [
        (json!({"name": "dup", "role": "admin"}), StatusCode::CONFLICT, "token_name_taken", "exists already"),
        (json!({"name": "ada-admin", "role": "admin"}), StatusCode::CONFLICT, "token_name_taken", "configuration"),
        (json!({"name": "x", "role": "root"}), StatusCode::BAD_REQUEST, "invalid_role", "viewer, operator, admin"),
        (json!({"name": "x"}), StatusCode::BAD_REQUEST, "invalid_role", "Give the token a role"),
        (json!({"name": "a b", "role": "viewer"}), StatusCode::BAD_REQUEST, "invalid_token_name", "1 to 64"),
        (
            json!({"name": "x", "role": "viewer", "expires_at": "soon"}),
            StatusCode::BAD_REQUEST,
            "invalid_expiry",
            "RFC 3339",
        ),
        (
            json!({"name": "x", "role": "viewer", "expires_at": "2001-01-01"}),
            StatusCode::BAD_REQUEST,
            "invalid_expiry",
            "has passed",
        ),
    ];
    for (body, status, code, words) in cases {
        let what = body.to_string();
        let refused = post(body).await.expect_of(&what, status, Some(code));
        assert!(refused["message"].as_str().is_some_and(|m| m.contains(words)), "{what}: {refused}");
    }
    let bogus = "/api/tokens/01900000-0000-7000-8000-000000000000";
    call(&a, Method::DELETE, bogus, ADMIN, None).await.expect(StatusCode::NOT_FOUND, Some("token_not_found"));
    call(&a, Method::DELETE, "/api/tokens/nope", ADMIN, None).await.expect(StatusCode::BAD_REQUEST, Some("invalid_id"));
    for token in [VIEWER, OPERATOR] {
        for (method, path) in [(Method::GET, "/api/tokens"), (Method::POST, "/api/tokens"), (Method::DELETE, bogus)] {
            let body = (method == Method::POST).then(|| json!({"name": "sneaky", "role": "admin"}));
            let reply = call(&a, method.clone(), path, token, body).await;
            let refused = reply.expect_of(&format!("{method} {path}"), StatusCode::FORBIDDEN, Some("forbidden"));
            assert_eq!(refused["required_role"], "admin");
        }
    }
    let list = call(&a, Method::GET, "/api/tokens", ADMIN, None).await.expect(StatusCode::OK, None);
    let names: Vec<&str> =
        list["tokens"].as_array().expect("tokens").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["dup"]);
}

async fn the_cli_creates_lists_and_revokes_service_tokens(t: &TestDb) {
    let (_a, a) = start_api(t, "api").await;
    let as_admin = [("SCRINALIA_API", a.as_str()), ("SCRINALIA_TOKEN", ADMIN)];
    let created = scrinalia(
        &["tokens", "create", "cli-bot", "--role", "viewer", "--expires", "2099-01-31", "--json"],
        &as_admin,
        None,
    )
    .await;
    created.expect(0);
    let created = created.json();
    let (id, secret) = (created["id"].as_str().expect("an id"), created["secret"].as_str().expect("a secret"));
    assert_eq!(created["expires_at"], "2099-01-31T00:00:00Z");

    let text = scrinalia(&["tokens", "create", "cli-ops", "--role", "operator"], &as_admin, None).await;
    text.expect(0).has(&["token:   scr_", "role:    operator", "expires: never"]);
    assert!(text.stderr.contains("cannot be shown again"), "{text:#?}");

    let as_bot = [("SCRINALIA_API", a.as_str()), ("SCRINALIA_TOKEN", secret)];
    scrinalia(&["workers"], &as_bot, None).await.expect(0);
    let listed = scrinalia(&["tokens", "list"], &as_admin, None).await;
    listed.expect(0).has(&["NAME", "LAST USED", "cli-bot", "cli-ops", "viewer", "operator", "ada-admin", id]);
    let json = scrinalia(&["tokens", "list", "--json"], &as_admin, None).await;
    assert_eq!(json.expect(0).json()["tokens"].as_array().map(Vec::len), Some(2));

    scrinalia(&["tokens", "revoke", id], &as_admin, None).await.expect(0).has(&["Revoked the token \"cli-bot\""]);
    let refused = scrinalia(&["workers"], &as_bot, None).await;
    refused.expect(4);
    assert!(refused.stderr.contains("revoked"), "{refused:#?}");
    scrinalia(&["tokens", "list"], &as_admin, None).await.expect(0).has(&["by ada-admin"]);

    let dup = scrinalia(&["tokens", "create", "cli-ops", "--role", "viewer"], &as_admin, None).await;
    dup.expect(6);
    assert!(dup.stderr.contains("exists already"), "{dup:#?}");
    scrinalia(&["tokens", "create", "x", "--role", "root"], &as_admin, None).await.expect(7);
    let as_operator = [("SCRINALIA_API", a.as_str()), ("SCRINALIA_TOKEN", OPERATOR)];
    scrinalia(&["tokens", "list"], &as_operator, None).await.expect(4);
}

/// PostgreSQL: a token created, then revoked, by another writer of the database (the store itself, as another API
/// process writes it) is accepted, then refused, by a process whose feed listens, because the trigger's
/// notification makes it re-read the tokens. Its timer would not: once the feed listens it re-reads only every
/// 30 s (`FALLBACK_EVERY`), counted from the read the feed's first resync asked for, which the 5 s bounds here
/// stay well inside, and the process never went back to polling meanwhile. Then its connections are cut, and a
/// token created while it reconnects is read all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_listening_process_hears_of_a_token_created_and_revoked_elsewhere() {
    use scrinalia_shared::{Role, tokens::NewToken};

    const LISTENING: &str = "service tokens: re-read when the change feed says they changed";
    const POLLING: &str = "service tokens: re-read by polling";
    let t = TestDb::postgres().await;
    let (api, base) = start_api_with(&t, "api", &[("RUST_LOG", "info")]).await;
    eventually(Duration::from_secs(30), "the token refresher to rely on the change feed", || async {
        api.output().contains(LISTENING).then_some(())
    })
    .await;

    let token = NewToken { name: "notified".into(), role: Role::Viewer, expires_at: None };
    let created = t.db.api.create_token(&token, "elsewhere", &[]).await.expect("a token");
    let started = Instant::now();
    eventually(Duration::from_secs(5), "the process to accept the token created elsewhere", || async {
        (call(&base, Method::GET, "/api/me", &created.secret, None).await.status == StatusCode::OK).then_some(())
    })
    .await;
    eprintln!("the process accepted the token {:?} after its creation", started.elapsed());

    t.db.api.revoke_token(created.token.id, "elsewhere").await.expect("revoked");
    let started = Instant::now();
    let refused = eventually(Duration::from_secs(5), "the process to refuse the token revoked elsewhere", || async {
        let reply = call(&base, Method::GET, "/api/me", &created.secret, None).await;
        (reply.status == StatusCode::UNAUTHORIZED).then_some(reply)
    })
    .await;
    eprintln!("the process refused the token {:?} after its revocation", started.elapsed());
    let refused = refused.expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("\"notified\" was revoked")), "{refused}");
    let log = api.output();
    assert!(!log[log.find(LISTENING).unwrap_or(0)..].contains(POLLING), "the feed stopped listening:\n{log}");

    // Its connections cut (a failover): a token created meanwhile is missed by the notifications, and read by the
    // polling while the feed reconnects or by the read its reconnection's resync asks for.
    scrinalia_tests::terminate_connections(&t.url, Some("scrinalia-api")).await;
    let token = NewToken { name: "while-away".into(), role: Role::Viewer, expires_at: None };
    let created = t.db.api.create_token(&token, "elsewhere", &[]).await.expect("a token");
    eventually(Duration::from_secs(5), "the process to accept the token created while it reconnected", || async {
        (call(&base, Method::GET, "/api/me", &created.secret, None).await.status == StatusCode::OK).then_some(())
    })
    .await;
    eventually(Duration::from_secs(10), "the change feed to listen again", || async {
        (api.output().matches("change feed: listening").count() >= 2).then_some(())
    })
    .await;
    drop(api);
    t.cleanup().await;
}

/// The panel's Tokens view in a real headless Chromium (anonymous admin on loopback): a token created there shows
/// its secret once and works; revoked there, it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_creates_and_revokes_a_token_from_the_panel() {
    use scrinalia_shared::Role;
    use scrinalia_tests::browser::Browser;

    let db = TestDb::new(scrinalia_tests::Kind::Sqlite).await;
    let dir = db.dir.path().to_path_buf();
    let port = free_port();
    let config = db.config().with(|f| {
        (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
        (f.auth.anonymous_role, f.auth.anonymous_loopback_only) = (Some(Role::Admin), true);
    });
    let path = db.write_config(&config, "config");
    let _api = scrinalia_tests::start_api(&dir, "api", &path, port, &[]).await;
    let base = format!("http://127.0.0.1:{port}");

    let browser = Browser::start("tokens", &dir, 1280, 900).await;
    browser.goto(&format!("{base}/#/tokens")).await;
    browser.wait_for("#token-name").await;
    browser.type_into("#token-name", "panel-bot").await;
    browser.js("document.getElementById('token-role').value = 'operator';", Vec::new()).await;
    browser.click("form[aria-label=\"Create a token\"] button.primary").await;
    let secret = browser.wait_for_text("#token-secret-value", "scr_").await;
    browser.wait_for("tr[data-name=\"panel-bot\"] button.revoke").await;
    browser.screenshot("tokens-created").await;
    let me = call(&base, Method::GET, "/api/me", secret.trim(), None).await.expect(StatusCode::OK, None);
    assert_eq!(me, json!({"name": "panel-bot", "role": "operator"}));

    // A name taken is refused in the page with the API's sentence.
    browser.type_into("#token-name", "panel-bot").await;
    browser.click("form[aria-label=\"Create a token\"] button.primary").await;
    browser.wait_for_text("#token-alert", "exists already").await;

    browser.js("window.confirm = () => true;", Vec::new()).await;
    browser.click("tr[data-name=\"panel-bot\"] button.revoke").await;
    browser.wait_for_text("tr[data-name=\"panel-bot\"] .state", "revoked").await;
    browser.screenshot("tokens-revoked").await;
    call(&base, Method::GET, "/api/me", secret.trim(), None)
        .await
        .expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));
    browser.assert_no_console_errors(&[409]).await;
    browser.close().await;
    db.cleanup().await;
}
