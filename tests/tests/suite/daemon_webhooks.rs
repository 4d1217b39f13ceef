//! Webhooks on run outcomes, through the real binaries on both backends, to a receiver in the test that checks
//! every signature itself (RustCrypto's HMAC over `id.timestamp.body` with the decoded secret): a failed run is
//! delivered until the receiver takes it (two 500s, then a 200: three attempts, one event id, each recorded with
//! its status and listed by the API); a worker not subscribed yields nothing; a success after the failure is a
//! recovery; the test endpoint delivers; a run whose daemon is SIGKILLed is announced as interrupted by the
//! daemon that recovers it. And a bad `[[webhooks]]` entry stops a process with sentences naming its keys.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, http::HeaderMap, http::StatusCode, routing::post};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use nix::sys::signal::Signal;
use reqwest::Method;
use scrinalia_shared::{
    RunState, Settings,
    config::{Secret, WebhookEvent, WebhookSettings},
    webhooks::DeliveryState,
};
use scrinalia_tests::{
    ConfigFile, Kind, TestDb, backend_tests,
    daemon_harness::{Setup, probe, wait_finished, wait_run, wait_started},
    demo_worker, eventually,
    system::{ADMIN, OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

backend_tests!(
    a_run_whose_daemon_dies_is_announced_as_interrupted,
    four_claimers_take_each_due_delivery_once_and_a_dead_claim_comes_back,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outcomes_are_delivered_signed_with_retries_and_listed() {
    outcomes_are_delivered_signed_with_retries_and_listed(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_outcomes_are_delivered_signed_with_retries_and_listed() {
    outcomes_are_delivered_signed_with_retries_and_listed(Kind::Sqlite).await;
}

/// The secret of the tests' webhook (24 random bytes).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: i64,
    signature: String,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<u16>>,
    got: Mutex<Vec<Received>>,
}

/// A webhook receiver on a free port: it answers the scripted statuses in turn, then 200.
struct Receiver {
    url: String,
    script: Arc<Script>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(answers: &[u16]) -> Self {
        let script = Arc::new(Script { answers: Mutex::new(answers.iter().copied().collect()), ..Script::default() });
        let app = Router::new().route("/hooks/scrinalia", post(receive)).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port for the receiver");
        let url = format!("http://{}/hooks/scrinalia", listener.local_addr().expect("its address"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the receiver serves");
        });
        Self { url, script, task }
    }

    fn got(&self) -> Vec<Received> {
        self.script.got.lock().expect("the receiver's log").clone()
    }

    async fn wait_for(&self, n: usize, what: &str) -> Vec<Received> {
        eventually(Duration::from_secs(30), what, || async { Some(self.got()).filter(|g| g.len() >= n) }).await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(script): State<Arc<Script>>, headers: HeaderMap, body: Bytes) -> (StatusCode, String) {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let received = Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp").parse().unwrap_or_default(),
        signature: header("webhook-signature"),
        body,
    };
    script.got.lock().expect("the receiver's log").push(received);
    let status = script.answers.lock().expect("the script").pop_front().unwrap_or(200);
    let status = StatusCode::from_u16(status).expect("a status");
    (status, format!("receiver says {}", status.as_u16()))
}

/// Asserts that the signature is HMAC-SHA256 over `id.timestamp.body` with the secret's key, and that the
/// timestamp is now (the receiver's replay check).
fn assert_signed(r: &Received) {
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.strip_prefix("whsec_").expect("the prefix"))
        .expect("base64");
    let mut mac = Hmac::<sha2_hmac::Sha256>::new_from_slice(&key).expect("a key");
    mac.update(format!("{}.{}.", r.id, r.timestamp).as_bytes());
    mac.update(&r.body);
    let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
    assert_eq!(r.signature, expected, "the signature of {r:?}");
    let age = chrono::Utc::now().timestamp() - r.timestamp;
    assert!((-5..60).contains(&age), "the timestamp {} is {age} s old", r.timestamp);
}

fn hook(url: &str, workers: &[&str]) -> WebhookSettings {
    WebhookSettings {
        name: "ops".into(),
        url: url.to_owned(),
        secret: Some(Secret::from(SECRET.to_owned())),
        secret_file: None,
        events: vec![WebhookEvent::Failed, WebhookEvent::Interrupted, WebhookEvent::Recovered],
        workers: workers.iter().map(|w| (*w).to_owned()).collect(),
        timeout_seconds: 5.0,
        max_attempts: 5,
        retry_seconds: vec![0.5],
    }
}

async fn get(system: &System, path: &str, token: &str) -> (StatusCode, Value) {
    let reply = system.http(Method::GET, path, token, None).await.expect("an answer");
    (reply.status, reply.json())
}

async fn trigger(system: &System, worker: &str, options: Value) -> String {
    let reply = system
        .http(Method::POST, &format!("/api/workers/{worker}/runs"), OPERATOR, Some(json!({"options": options})))
        .await
        .expect("an answer");
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    reply.json()["id"].as_str().expect("the run's id").to_owned()
}

async fn outcomes_are_delivered_signed_with_retries_and_listed(kind: Kind) {
    let receiver = Receiver::start(&[500, 500]).await;
    let bin = demo_worker();
    let url = receiver.url.clone();
    let system = System::start(kind, |c: ConfigFile| {
        c.workers([probe(&bin, "probe-1", 120), probe(&bin, "probe-2", 120)])
            .with(|f| f.webhooks = vec![hook(&url, &["probe-1"])])
    })
    .await;

    // A failure: 500, 500, then 200; one event id, the same body, each attempt signed.
    let failed = trigger(&system, "probe-1", json!({"exit_code": 3})).await;
    let got = receiver.wait_for(3, "three attempts").await;
    assert_eq!(got.len(), 3, "no attempt after the 200: {got:?}");
    for r in &got {
        assert_signed(r);
        assert_eq!((&r.id, &r.body), (&got[0].id, &got[0].body), "every attempt is the same event");
    }
    let body = got[0].json();
    assert_eq!(body["type"], "run.failed");
    assert_eq!(body["data"]["run_id"], failed.as_str());
    assert_eq!((&body["data"]["worker"], &body["data"]["exit_code"]), (&json!("probe-1"), &json!(3)));
    assert_eq!(body["data"]["event_id"], got[0].id.as_str());

    // The API lists the delivery with its three attempts and what answered.
    let path = format!("/api/webhooks/deliveries?run={failed}");
    let delivery = eventually(Duration::from_secs(10), "the delivery recorded delivered", || async {
        let (status, view) = get(&system, &path, VIEWER).await;
        (status == StatusCode::OK && view["deliveries"][0]["state"] == "delivered")
            .then(|| view["deliveries"][0].clone())
    })
    .await;
    assert_eq!(delivery["event_id"], got[0].id.as_str());
    assert_eq!((&delivery["webhook"], &delivery["event"]), (&json!("ops"), &json!("run.failed")));
    let attempts = delivery["attempts"].as_array().expect("attempts");
    let codes: Vec<&Value> = attempts.iter().map(|a| &a["status_code"]).collect();
    assert_eq!(codes, [&json!(500), &json!(500), &json!(200)], "{delivery:#}");
    let numbers: Vec<&Value> = attempts.iter().map(|a| &a["attempt"]).collect();
    assert_eq!(numbers, [&json!(1), &json!(2), &json!(3)]);
    assert_eq!(attempts[0]["response"], "receiver says 500");
    assert!(attempts[0]["error"].as_str().is_some_and(|e| e.contains("500")), "{delivery:#}");
    assert_eq!(attempts[2]["error"], Value::Null);
    assert_eq!(delivery["payload"], body, "the body sent is the one listed");

    // A worker nobody subscribed to yields nothing; the next success of probe-1 is a recovery.
    let unheard = trigger(&system, "probe-2", json!({"exit_code": 4})).await;
    eventually(Duration::from_secs(20), "probe-2 to fail", || async {
        let (_, run) = get(&system, &format!("/api/runs/{unheard}"), VIEWER).await;
        (run["state"] == "failed").then_some(())
    })
    .await;
    let recovered = trigger(&system, "probe-1", json!({})).await;
    let got = receiver.wait_for(4, "the recovery").await;
    let body = got[3].json();
    assert_signed(&got[3]);
    assert_eq!(body["type"], "run.recovered");
    assert_eq!((&body["data"]["run_id"], &body["data"]["previous_run_id"]), (&json!(recovered), &json!(failed)));
    assert_eq!(body["data"]["previous_state"], "failed");
    assert!(got.iter().all(|r| r.json()["data"]["run_id"] != unheard.as_str()), "nothing about probe-2: {got:?}");
    let (_, none) = get(&system, &format!("/api/webhooks/deliveries?run={unheard}"), VIEWER).await;
    assert_eq!(none["deliveries"], json!([]));

    // The test endpoint: admins only, delivered as every event.
    let reply = system.http(Method::POST, "/api/webhooks/ops/test", OPERATOR, None).await.expect("an answer");
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let reply = system.http(Method::POST, "/api/webhooks/nope/test", ADMIN, None).await.expect("an answer");
    assert_eq!((reply.status, &reply.json()["code"]), (StatusCode::NOT_FOUND, &json!("unknown_webhook")));
    assert!(reply.json()["message"].as_str().is_some_and(|m| m.contains("known: ops")), "{}", reply.text());
    let reply = system.http(Method::POST, "/api/webhooks/ops/test", ADMIN, None).await.expect("an answer");
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text());
    let event_id = reply.json()["event_id"].as_str().expect("the event id").to_owned();
    let got = receiver.wait_for(5, "the test event").await;
    assert_signed(&got[4]);
    assert_eq!((got[4].id.as_str(), &got[4].json()["type"]), (event_id.as_str(), &json!("webhook.test")));
    assert_eq!(got[4].json()["data"]["requested_by"], "ada");

    // The hooks as a viewer sees them: no secret, no path; bad filters get sentences.
    let (status, hooks) = get(&system, "/api/webhooks", VIEWER).await;
    assert_eq!(status, StatusCode::OK);
    let origin = receiver.url.trim_end_matches("/hooks/scrinalia");
    assert_eq!(hooks["webhooks"][0]["url"], format!("{origin}/…"));
    assert_eq!(hooks["webhooks"][0]["events"], json!(["failed", "interrupted", "recovered"]));
    assert!(!hooks.to_string().contains("whsec_"), "{hooks}");
    let (status, listed) = get(&system, "/api/webhooks/deliveries?webhook=ops", VIEWER).await;
    assert_eq!(status, StatusCode::OK);
    let states: Vec<&Value> = listed["deliveries"].as_array().expect("a list").iter().map(|d| &d["state"]).collect();
    assert_eq!(states.len(), 3, "the failure, the recovery, the test: {listed:#}");
    assert_eq!(listed["deliveries"][0]["event"], "webhook.test", "newest first");
    let (status, bad) = get(&system, "/api/webhooks/deliveries?run=nope", VIEWER).await;
    assert_eq!((status, &bad["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_id")));
    let (status, bad) = get(&system, "/api/webhooks/deliveries?webhook=nope", VIEWER).await;
    assert_eq!((status, &bad["code"]), (StatusCode::NOT_FOUND, &json!("unknown_webhook")));
    let (status, bad) = get(&system, "/api/webhooks/deliveries?limit=0", VIEWER).await;
    assert_eq!((status, &bad["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_query")));
    let (_, doc) = get(&system, "/api/openapi.json", VIEWER).await;
    for (path, method) in
        [("/api/webhooks", "get"), ("/api/webhooks/deliveries", "get"), ("/api/webhooks/{name}/test", "post")]
    {
        assert!(doc["paths"][path][method].is_object(), "the document describes {method} {path}");
    }
    assert!(doc["components"]["schemas"]["Delivery"].is_object(), "the deliveries' schema is in the document");
    system.cleanup().await;
}

async fn a_run_whose_daemon_dies_is_announced_as_interrupted(t: &TestDb) {
    let receiver = Receiver::start(&[]).await;
    let config = Setup::config(t, |d| d.capacity = 1).with(|f| f.webhooks = vec![hook(&receiver.url, &[])]);
    let setup = Setup::with(t, config);
    let victim = scrinalia_tests::start_daemon(&setup.dir, "victim", &setup.config, &[]).await;
    let run = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 60000})).await;
    wait_started(&t.db.api, run.id, Duration::from_secs(20)).await;
    victim.signal(Signal::SIGKILL);
    let rescuer = scrinalia_tests::start_daemon(&setup.dir, "rescuer", &setup.config, &[]).await;
    let ended = wait_run(&t.db.api, run.id, Duration::from_secs(30), "recovery", |r| r.state.is_terminal()).await;
    assert_eq!(ended.state, RunState::Interrupted);
    let got = receiver.wait_for(1, "the interruption").await;
    assert_signed(&got[0]);
    let body = got[0].json();
    assert_eq!((&body["type"], &body["data"]["run_id"]), (&json!("run.interrupted"), &json!(run.id)));
    assert_eq!(body["data"]["end_reason"], "owner_lost");
    let deliveries = eventually(Duration::from_secs(10), "the delivery recorded", || async {
        let listed = t.db.api.webhook_deliveries(Some("ops"), Some(run.id), 10).await.expect("deliveries");
        listed.into_iter().find(|d| d.state == DeliveryState::Delivered)
    })
    .await;
    assert_eq!(deliveries.event_id.to_string(), got[0].id);
    assert_eq!(deliveries.attempts.len(), 1);
    // The next success of the worker is a recovery from the interruption.
    let next = setup.request(&t.db.api, "probe-1", json!({})).await;
    assert_eq!(wait_finished(&t.db.api, next.id, Duration::from_secs(20)).await.state, RunState::Succeeded);
    let got = receiver.wait_for(2, "the recovery").await;
    assert_eq!(got[1].json()["data"]["previous_state"], "interrupted");
    rescuer.stop(Duration::from_secs(10)).await;
    drop(victim);
}

/// What several daemons do at once, on the database: every due delivery is claimed by exactly one of four
/// claimers on pools of their own; a claim never recorded (its daemon died) is due again once its lease ends,
/// as the next attempt of the same event.
async fn four_claimers_take_each_due_delivery_once_and_a_dead_claim_comes_back(t: &TestDb) {
    let config = Setup::config(t, |_| {}).with(|f| f.webhooks = vec![hook("http://127.0.0.1:9/", &[])]);
    let hooks = Setup::with(t, config).settings.webhooks;
    let mut queued = Vec::new();
    for _ in 0..40 {
        queued.push(t.db.api.queue_webhook_test(&hooks[0], "ada").await.expect("a test event"));
    }
    let mut claimers = Vec::new();
    for _ in 0..4 {
        let (db, hooks, daemon) = (t.another_pool().await, hooks.clone(), uuid::Uuid::now_v7());
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = db
                    .daemon
                    .claim_webhook_deliveries(daemon, &hooks, Duration::from_secs(2), 3)
                    .await
                    .expect("a claim");
                if claimed.is_empty() {
                    return mine;
                }
                mine.extend(claimed);
            }
        }));
    }
    let mut claimed = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.expect("a claimer"));
    }
    let mut events: Vec<uuid::Uuid> = claimed.iter().map(|c| c.event_id).collect();
    events.sort();
    queued.sort();
    assert_eq!(events, queued, "each delivery claimed once");
    assert!(claimed.iter().all(|c| c.attempt == 1));
    // Nobody records: after the 2 s lease the deliveries are due again, as second attempts of the same events.
    let again = eventually(Duration::from_secs(10), "the dead claims to come back", || async {
        let c =
            t.db.daemon
                .claim_webhook_deliveries(uuid::Uuid::now_v7(), &hooks, Duration::from_secs(60), 100)
                .await
                .ok()?;
        (!c.is_empty()).then_some(c)
    })
    .await;
    assert!(again.iter().all(|c| c.attempt == 2), "{again:?}");
    let delivered = scrinalia_shared::webhooks::AttemptOutcome { status: Some(204), ..Default::default() };
    let first = &again[0];
    let next = scrinalia_shared::webhooks::Next::after(&hooks[0], first.attempt, &delivered);
    assert!(t.db.daemon.record_webhook_attempt(first, uuid::Uuid::now_v7(), &delivered, next).await.expect("recorded"));
    let listed = t.db.api.webhook_deliveries(Some("ops"), None, 500).await.expect("deliveries");
    let one = listed.iter().find(|d| d.event_id == first.event_id).expect("the delivery");
    assert_eq!((one.state, one.attempts_made, one.attempts.len()), (DeliveryState::Delivered, 2, 1));
    assert_eq!(one.attempts[0].status_code, Some(204));
}

#[test]
fn a_bad_webhook_stops_the_start_with_sentences_naming_the_keys() {
    let dir = tempfile::tempdir().expect("a folder");
    let path = dir.path().join("config.toml");
    let write = |text: &str| std::fs::write(&path, text).expect("write");
    write(
        "[[webhooks]]\nname = \"ops\"\nurl = \"https://x.example\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nevents = [\"failure\"]\n",
    );
    let e = Settings::load_from(Some(&path), Vec::new()).expect_err("an unknown event").to_string();
    assert!(e.contains("failure") && e.contains("recovered"), "{e}");
    write(
        "[[webhooks]]\nname = \"ops\"\nurl = \"hooks.example\"\nsecret = \"hunter2\"\nevents = [\"failed\"]\nworkers = [\"ghost\"]\n",
    );
    let e = Settings::load_from(Some(&path), Vec::new()).expect_err("bad values").to_string();
    for part in
        ["`webhooks[0].url`", "`webhooks[0].secret`: must start with \"whsec_\"", "`webhooks[0].workers`: \"ghost\""]
    {
        assert!(e.contains(part), "{part:?} is missing from: {e}");
    }
    assert!(!e.contains("hunter2"), "the secret is never printed: {e}");
}
