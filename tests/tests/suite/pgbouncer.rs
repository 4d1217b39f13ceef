//! The real API and daemons through a real PgBouncer in transaction mode (`database.pooler = "transaction"`),
//! where each transaction may get another server connection: the main flows (trigger, claim, run to success,
//! cancel a running run, an override set and read back, a service token revoked elsewhere, live events, drain, and
//! recovery of a killed daemon's run by another daemon's rescuer) work with a direct `database.listen_url` (the
//! feed LISTENs there) and without one (the feed polls, and readiness, health and `scrinalia health` say so).
//!
//! Without the setting the same system answers a trigger with a 500 (`prepared statement "sqlx_s_1" already
//! exists`): that is the failure these tests guard against.

use std::time::Duration;

use nix::sys::signal::Signal;
use reqwest::Method;
use scrinalia_shared::{
    Role,
    config::{Pooler, SettingsFile},
};
use scrinalia_tests::{
    Process, Reply, TestDb,
    daemon_harness::{probe, with_defaults},
    demo_worker, eventually, free_port,
    pgbouncer::PgBouncer,
    sse::EventStream,
    system::{ADMIN, OPERATOR, VIEWER, scrinalia},
};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection, Row};
use uuid::Uuid;

/// The API and the daemons of one test, all through one PgBouncer.
struct Pooled {
    db: TestDb,
    bouncer: PgBouncer,
    config: String,
    api_url: String,
    _api: Process,
}

impl Pooled {
    /// A fresh database, a PgBouncer, and the API through it (with `listen` a direct LISTEN URL too).
    async fn start(listen: bool) -> Self {
        Self::on(PgBouncer::start().await, listen).await
    }

    /// As `start`, through `bouncer`.
    async fn on(bouncer: PgBouncer, listen: bool) -> Self {
        Self::configured(bouncer, listen, |_| {}).await
    }

    /// As `on`, with `change` made to the configuration.
    async fn configured(bouncer: PgBouncer, listen: bool, change: impl FnOnce(&mut SettingsFile)) -> Self {
        let db = TestDb::postgres().await;
        let port = free_port();
        let probe = with_defaults(probe(&demo_worker(), "probe-1", 120), &[("exit_code", json!(0))]);
        let pooled_url = bouncer.url_of(&db.url);
        let direct = db.url.clone();
        let config = db
            .config()
            .worker(probe)
            .test_daemon(|d| (d.capacity, d.lease_seconds, d.poll_seconds, d.gone_after_seconds) = (3, 5, 1, 10))
            .with(|f| {
                f.database.url = pooled_url;
                f.database.pooler = Pooler::Transaction;
                f.database.listen_url = listen.then_some(direct);
                f.database.max_connections = 5;
                (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
                change(f);
            })
            .token("otto", Role::Operator, OPERATOR)
            .token("vera", Role::Viewer, VIEWER)
            .token("ada", Role::Admin, ADMIN);
        let config = db.write_config(&config, "config").display().to_string();
        let api = scrinalia_tests::start("scrinalia-api", "api", db.dir.path(), &["--config", &config], &[]);
        let pooled = Self { db, bouncer, config, api_url: format!("http://127.0.0.1:{port}"), _api: api };
        eventually(Duration::from_secs(30), "the API to be ready through pgbouncer", || async {
            let reply = pooled.http(Method::GET, "/readyz", VIEWER, None).await.ok()?;
            reply.status.is_success().then_some(())
        })
        .await;
        pooled
    }

    /// Starts a daemon named `name` and waits until the API lists it active; returns it and its id.
    async fn daemon(&self, name: &str) -> (Process, Uuid) {
        let daemon =
            scrinalia_tests::start("scrinalia-daemon", name, self.db.dir.path(), &["--config", &self.config], &[]);
        let pid = daemon.pid().as_raw();
        let id = eventually(Duration::from_secs(30), &format!("{name} to be active"), || async {
            let reply = self.http(Method::GET, "/api/daemons", VIEWER, None).await.ok()?;
            let daemons = reply.json()["daemons"].as_array()?.clone();
            let mine = daemons.into_iter().find(|d| d["pid"] == pid && d["state"] == "active")?;
            mine["id"].as_str()?.parse::<Uuid>().ok()
        })
        .await;
        (daemon, id)
    }

    async fn http(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> reqwest::Result<Reply> {
        let mut request = reqwest::Client::new().request(method, format!("{}{path}", self.api_url)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::read(request.send().await?).await
    }

    /// Triggers the probe for `duration_ms`; returns the run's id.
    async fn trigger(&self, duration_ms: u64) -> Uuid {
        let body = json!({"options": {"duration_ms": duration_ms}});
        let reply = self.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await.expect("trigger");
        assert_eq!(reply.status, 201, "trigger through pgbouncer: {}\n{}", reply.text(), self.bouncer.output());
        reply.json()["id"].as_str().and_then(|id| id.parse().ok()).expect("a run id")
    }

    /// Waits until the run is in `state` (30 s); returns it.
    async fn wait_state(&self, run: Uuid, state: &str) -> Value {
        eventually(Duration::from_secs(30), &format!("run {run} to be {state}"), || async {
            let reply = self.http(Method::GET, &format!("/api/runs/{run}"), VIEWER, None).await.ok()?;
            let body = reply.json();
            (body["state"] == state).then_some(body)
        })
        .await
    }
}

async fn the_main_flows_work_through_pgbouncer(listen: bool) {
    let system = Pooled::start(listen).await;

    // Readiness, health and the CLI say how events arrive.
    let ready = system.http(Method::GET, "/readyz", VIEWER, None).await.expect("readyz").json();
    let health = system.http(Method::GET, "/api/health", VIEWER, None).await.expect("health").json();
    let database = health["checks"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "database")).cloned();
    let database = database.expect("a database check");
    let cli = scrinalia(&["health"], &[("SCRINALIA_API", &system.api_url), ("SCRINALIA_TOKEN", VIEWER)], None).await;
    if listen {
        assert!(ready.get("warning").is_none(), "{ready}");
        assert_eq!(database["status"], "ok", "{database}");
        assert_eq!(database["details"], json!({"pooler": "transaction", "events": "listened"}));
    } else {
        assert!(ready["warning"].as_str().is_some_and(|w| w.contains("polled")), "{ready}");
        assert_eq!(database["status"], "degraded", "{database}");
        assert_eq!(database["details"], json!({"pooler": "transaction", "events": "polled"}));
        assert!(database["error"].as_str().is_some_and(|e| e.contains("listen_url")), "{database}");
        assert!(cli.stdout.contains("events are polled"), "scrinalia health says so: {cli:#?}");
    }

    let (daemon_a, _) = system.daemon("daemon-a").await;
    let events = reqwest::Client::new()
        .get(format!("{}/api/events", system.api_url))
        .bearer_auth(VIEWER)
        .send()
        .await
        .expect("subscribe");
    assert_eq!(events.status(), 200);
    let mut stream = EventStream::new(events.bytes_stream());

    // Trigger, claim, run to success, heard live. Several in a row: each use of a pooled connection may get
    // another server connection, where a named statement of an earlier one would collide.
    for _ in 0..3 {
        let run = system.trigger(200).await;
        let done = system.wait_state(run, "succeeded").await;
        assert_eq!(done["end_reason"], "exit_status", "{done}");
        let run = run.to_string();
        stream.event(Duration::from_secs(20), "run", |e| e["run"] == run && e["state"] == "succeeded").await;
    }

    // An override set and read back.
    let change = json!({"options": {"duration_ms": 250}, "reason": "shorter through the pooler"});
    let set = system.http(Method::PUT, "/api/workers/probe-1/override", ADMIN, Some(change)).await.expect("PUT");
    assert_eq!(set.status, 200, "{}", set.text());
    let worker = system.http(Method::GET, "/api/workers/probe-1", VIEWER, None).await.expect("GET worker").json();
    assert_eq!(worker["override"]["values"], json!({"options": {"duration_ms": 250}}), "reads back: {worker}");
    assert_eq!(worker["effective"]["options"]["duration_ms"], json!({"source": "override", "value": 250}));

    // A service token revoked by another writer is refused soon: the API hears it on the direct LISTEN URL, or,
    // without one, reads the tokens every 250 ms through the pooler (its fallback read, 30 s apart, is not what
    // the 5 s bound waits for).
    let body = json!({"name": "pooled-bot", "role": "viewer"});
    let created = system.http(Method::POST, "/api/tokens", ADMIN, Some(body)).await.expect("POST token").json();
    let secret = created["secret"].as_str().expect("a secret").to_owned();
    let me = system.http(Method::GET, "/api/me", &secret, None).await.expect("GET me");
    assert_eq!(me.status, 200, "{}", me.text());
    let id: Uuid = created["id"].as_str().and_then(|id| id.parse().ok()).expect("an id");
    system.db.db.api.revoke_token(id, "elsewhere").await.expect("revoked by another writer");
    eventually(Duration::from_secs(5), "the API to refuse the token revoked elsewhere", || async {
        let reply = system.http(Method::GET, "/api/me", &secret, None).await.ok()?;
        (reply.status == 401).then_some(())
    })
    .await;

    // Cancel a running run.
    let long = system.trigger(60_000).await;
    system.wait_state(long, "running").await;
    let cancel = system.http(Method::POST, &format!("/api/runs/{long}/cancel"), OPERATOR, None).await.expect("cancel");
    assert!(cancel.status.is_success(), "{}", cancel.text());
    system.wait_state(long, "cancelled").await;
    let long = long.to_string();
    stream.event(Duration::from_secs(20), "run", |e| e["run"] == long && e["state"] == "cancelled").await;

    // Recovery: a daemon killed with a run in flight; after its lease, another daemon's rescuer settles it.
    let orphan = system.trigger(120_000).await;
    let running = system.wait_state(orphan, "running").await;
    daemon_a.signal(Signal::SIGKILL);
    let (mut daemon_b, b) = system.daemon("daemon-b").await;
    assert_ne!(running["daemon_id"], json!(b.to_string()));
    let interrupted = eventually(Duration::from_secs(40), "the orphan to be interrupted", || async {
        let reply = system.http(Method::GET, &format!("/api/runs/{orphan}"), VIEWER, None).await.ok()?;
        let body = reply.json();
        (body["state"] == "interrupted").then_some(body)
    })
    .await;
    assert_eq!(interrupted["end_reason"], "owner_lost", "{interrupted}");

    // Drain: the daemon finishes its run, then leaves.
    let run = system.trigger(1_500).await;
    system.wait_state(run, "running").await;
    let drain = system.http(Method::POST, &format!("/api/daemons/{b}/drain"), ADMIN, None).await.expect("drain");
    assert!(drain.status.is_success(), "{}", drain.text());
    system.wait_state(run, "succeeded").await;
    let exit = daemon_b.wait_exit(Duration::from_secs(30)).await.expect("the drained daemon exits");
    assert_eq!(exit, Some(0), "{}", daemon_b.output());
    system.db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_flows_work_through_pgbouncer_with_a_direct_listen_url() {
    the_main_flows_work_through_pgbouncer(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_flows_work_through_pgbouncer_polling_without_a_listen_url() {
    the_main_flows_work_through_pgbouncer(false).await;
}

/// Many requests at once from one API whose 5 connections share 2 server connections: every transaction is
/// likely to land where another client's was, which is where named or half-prepared statements would break.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_sharing_two_server_connections_all_answer() {
    let system = Pooled::on(PgBouncer::with_pool_size(2).await, true).await;
    let requests = (0..150).map(|i| {
        let system = &system;
        async move {
            let reply = match i % 3 {
                0 => {
                    let body = json!({"options": {"duration_ms": 200}});
                    system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await
                }
                1 => system.http(Method::GET, "/api/runs?limit=20", VIEWER, None).await,
                _ => system.http(Method::GET, "/api/workers", VIEWER, None).await,
            };
            let reply = reply.expect("an answer");
            (i % 3, reply.status.as_u16(), reply.text())
        }
    });
    let replies = futures::future::join_all(requests).await;
    let failed: Vec<_> = replies.iter().filter(|(_, status, _)| *status >= 500).collect();
    assert!(failed.is_empty(), "{} of 150 answered 5xx, e.g. {:?}", failed.len(), failed.first());
    let created = replies.iter().filter(|(kind, status, _)| *kind == 0 && *status == 201).count();
    let conflicts = replies.iter().filter(|(kind, status, _)| *kind == 0 && *status == 409).count();
    assert_eq!((created, conflicts), (1, 49), "no daemon runs: one trigger is queued, the others conflict");
    assert!(replies.iter().all(|(kind, status, _)| *kind == 0 || *status == 200), "every read answers 200");
    system.db.cleanup().await;
}

/// Behind PgBouncer the API's statement timeout travels as `SET LOCAL` inside each transaction: a read that waits
/// on a lock longer than it is answered 503, and the one server connection the API shares is left with the
/// server's default, so no other client of that connection inherits the API's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_statement_timeout_holds_through_pgbouncer_and_stays_in_its_transaction() {
    let system =
        Pooled::configured(PgBouncer::with_pool_size(1).await, true, |f| f.api.statement_timeout_seconds = 1).await;
    let body = json!({"options": {"duration_ms": 200}});
    let run = system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body)).await.expect("trigger");
    assert_eq!(run.status.as_u16(), 201, "{}", run.text());
    let id = run.json()["id"].as_str().expect("an id").to_owned();

    let mut holder = PgConnection::connect(&system.db.url).await.expect("a direct connection of the test's own");
    holder.execute("begin; lock table worker_runs in access exclusive mode").await.expect("lock the ledger");
    let reply = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.expect("an answer");
    holder.execute("rollback").await.expect("release the lock");
    assert_eq!(reply.status.as_u16(), 503, "{}", reply.text());
    assert_eq!(reply.json()["code"], "database_timeout", "{}", reply.text());

    let reply = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.expect("an answer");
    assert_eq!(reply.status.as_u16(), 200, "the same read once the lock is gone: {}", reply.text());
    // The pool has one server connection, which the API's transactions just used: another client gets it with
    // the server's own setting.
    let mut other = PgConnection::connect(&system.bouncer.url_of(&system.db.url)).await.expect("through pgbouncer");
    let row = other.fetch_one("show statement_timeout").await.expect("show statement_timeout");
    assert_eq!(row.get::<String, _>(0), "0", "the API's timeout did not leak out of its transactions");
    drop(other);
    system.db.cleanup().await;
}
