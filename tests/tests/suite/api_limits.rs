//! The API's limits against slow or greedy clients, on the real `scrinalia-api` binary over plain TCP:
//! - 500 sockets that never finish their headers are closed within the header timeout (2 s here) + 5 s, and a
//!   fresh `GET /healthz` answers within 1 s while they are open;
//! - a live-event stream of a service token ends within 6 s of the token's revocation through the API;
//! - a caller's streams beyond `api.streams_per_caller` are answered 429, another caller's are not;
//! - a run with 50,000 progress reports: its detail holds the last 500 and the total, and the rest pages back
//!   to the first report with no gap and no repeat (both backends);
//! - `/metrics` on `api.metrics_listen` only, and 401 there without the bearer of `api.metrics_token_hash`;
//! - PostgreSQL: a read that waits longer than `api.statement_timeout_seconds` is answered 503 `database_timeout`.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use futures::future::join_all;
use scrinalia_shared::{auth::hash_token, config::SettingsFile};
use scrinalia_tests::{
    Kind, Process, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, VIEWER, config_file},
    backend_tests, eventually, free_port,
    sse::EventStream,
    start_api,
};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

backend_tests!(run_detail_holds_the_last_reports_and_pages_back_to_the_first, a_revoked_tokens_stream_ends);

/// Starts the API on `t` with `change` applied to its configuration; returns it and its base URL.
async fn api(t: &TestDb, change: impl FnOnce(&mut SettingsFile)) -> (Process, String) {
    let port = free_port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let mut file = config_file(&t.url, t.dir.path(), &ApiConfig { listen, ..ApiConfig::default() });
    "info".clone_into(&mut file.file.telemetry.log_filter);
    change(&mut file.file);
    let path = t.write_config(&file, "api");
    (start_api(t.dir.path(), "api", &path, port, &[]).await, format!("http://{listen}"))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("an HTTP client")
}

async fn get(url: &str, token: &str) -> (u16, Value) {
    let response = client().get(url).bearer_auth(token).send().await.expect("an answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// This process's soft open-file limit raised to its hard limit with `prlimit` (the API it starts inherits it):
/// 500 sockets on each side.
fn raise_open_files() {
    let pid = std::process::id().to_string();
    let raised = std::process::Command::new("sh")
        .args(["-c", &format!("prlimit --pid {pid} --nofile=$(ulimit -Hn):$(ulimit -Hn)")])
        .status()
        .expect("run prlimit (util-linux)");
    assert!(raised.success(), "prlimit could not raise the open-file limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_that_never_finish_their_headers_are_closed_and_others_are_served() {
    raise_open_files();
    let t = TestDb::sqlite().await;
    let (api, base) = api(&t, |f| f.api.header_read_timeout_seconds = 2).await;
    let addr: SocketAddr = base.trim_start_matches("http://").parse().expect("the address");
    let mut slow = Vec::new();
    for _ in 0..500 {
        let opened = Instant::now();
        let mut socket = TcpStream::connect(addr).await.expect("connect to the API");
        socket.write_all(b"GET /api/workers HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.expect("half a head");
        slow.push((opened, socket));
    }
    // While they hang, a fresh request is served at once.
    let started = Instant::now();
    let healthz = client().get(format!("{base}/healthz")).send().await.expect("an answer to /healthz");
    let took = started.elapsed();
    assert!(healthz.status().is_success(), "{}", healthz.status());
    assert!(took < Duration::from_secs(1), "/healthz took {took:?} with 500 slow sockets open");

    // Each slow socket is closed (EOF, or a reset) by the header timeout + 5 s after it was opened.
    let closed = join_all(slow.into_iter().map(|(opened, mut socket)| async move {
        let deadline = tokio::time::Instant::from_std(opened + Duration::from_secs(2 + 5));
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
                Err(_) => return false,
            }
        }
    }))
    .await;
    let open = closed.iter().filter(|c| !**c).count();
    assert_eq!(open, 0, "{open} of 500 slow sockets were still open 7 s after each was opened");
    drop(api);
    t.cleanup().await;
}

async fn a_revoked_tokens_stream_ends(t: &TestDb) {
    let (api, base) = api(t, |_| {}).await;
    let created = client()
        .post(format!("{base}/api/tokens"))
        .bearer_auth(ADMIN)
        .json(&json!({ "name": "wallboard", "role": "viewer" }))
        .send()
        .await
        .expect("create a token");
    assert_eq!(created.status().as_u16(), 201, "create a viewer token");
    let created: Value = created.json().await.expect("the token");
    let (id, secret) = (created["id"].as_str().expect("id").to_owned(), created["secret"].as_str().expect("secret"));

    let response = client().get(format!("{base}/api/events")).bearer_auth(secret).send().await.expect("a stream");
    assert_eq!(response.status().as_u16(), 200);
    let mut events = EventStream::new(Box::pin(response.bytes_stream()));
    events.event(Duration::from_secs(10), "ready", |_| true).await;

    let revoked =
        client().delete(format!("{base}/api/tokens/{id}")).bearer_auth(ADMIN).send().await.expect("revoke it");
    assert!(revoked.status().is_success(), "revoke: {}", revoked.status());
    let at = Instant::now();
    assert!(events.ends_within(Duration::from_secs(6)).await, "the stream outlived its revoked token by 6 s");
    eprintln!("the stream ended {:?} after its token was revoked", at.elapsed());
    drop(api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_stream_beyond_its_share_is_refused() {
    let t = TestDb::sqlite().await;
    let (api, base) = api(&t, |f| f.api.streams_per_caller = 3).await;
    let open = |token: &'static str| {
        let url = format!("{base}/api/events");
        async move { client().get(url).bearer_auth(token).send().await.expect("an answer") }
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let response = open(VIEWER).await;
        assert_eq!(response.status().as_u16(), 200);
        held.push(response);
    }
    let fourth = open(VIEWER).await;
    assert_eq!(fourth.status().as_u16(), 429, "the fourth stream of one caller");
    let body: Value = fourth.json().await.expect("a JSON error");
    assert_eq!(body["code"], "too_many_streams", "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.ends_with('.')), "a sentence: {body}");
    // Another caller has a share of its own.
    let other = open(OPERATOR).await;
    assert_eq!(other.status().as_u16(), 200, "another caller's stream");
    // A closed stream gives its place back.
    drop(held.pop());
    eventually(Duration::from_secs(10), "a place after a stream closed", || async {
        let response = open(VIEWER).await;
        (response.status().as_u16() == 200).then_some(())
    })
    .await;
    drop(api);
    t.cleanup().await;
}

/// Requests a run of `transfer` as an operator; its id.
async fn request_run(base: &str) -> String {
    let run = client()
        .post(format!("{base}/api/workers/transfer/runs"))
        .bearer_auth(OPERATOR)
        .json(&json!({}))
        .send()
        .await
        .expect("request a run");
    assert_eq!(run.status().as_u16(), 201);
    let run: Value = run.json().await.expect("the run");
    run["id"].as_str().expect("an id").to_owned()
}

/// Inserts `n` progress reports (seq 1..=n) of run `id` in one statement.
async fn insert_progress(t: &TestDb, id: &str, n: u32) {
    let sql = match t.kind {
        Kind::Postgres => format!(
            "insert into run_progress (run_id, seq, at, progress) \
             select '{id}'::uuid, g, now() - make_interval(secs => {n} - g), jsonb_build_object('done', g) \
             from generate_series(1, {n}) as g"
        ),
        Kind::Sqlite => format!(
            "with recursive s(g) as (select 1 union all select g + 1 from s where g < {n}) \
             insert into run_progress (run_id, seq, at, progress) \
             select x'{}', g, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ({n} - g) || ' seconds'), \
             json_object('done', g) from s",
            id.replace('-', "")
        ),
    };
    assert_eq!(t.execute(&sql).await.expect("insert the progress reports"), u64::from(n));
}

async fn run_detail_holds_the_last_reports_and_pages_back_to_the_first(t: &TestDb) {
    const N: u32 = 50_000;
    let (api, base) = api(t, |_| {}).await;
    let id = request_run(&base).await;
    insert_progress(t, &id, N).await;

    let (status, detail) = get(&format!("{base}/api/runs/{id}"), VIEWER).await;
    assert_eq!(status, 200, "{detail}");
    let shown: Vec<i64> = detail["progress_history"]
        .as_array()
        .expect("a history")
        .iter()
        .map(|p| p["seq"].as_i64().unwrap_or(0))
        .collect();
    assert_eq!(shown.len(), 500, "the detail holds the last 500 reports");
    assert_eq!(shown, (i64::from(N) - 499..=i64::from(N)).collect::<Vec<_>>(), "the last ones, oldest first");
    assert_eq!(detail["progress_total"], N, "and counts them all");
    let mut before = detail["progress_before"].as_i64().expect("a page before it");

    let mut seqs = shown;
    loop {
        let (status, page) = get(&format!("{base}/api/runs/{id}/progress?before={before}&limit=5000"), VIEWER).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["total"], N);
        let mut older: Vec<i64> =
            page["progress"].as_array().expect("a page").iter().map(|p| p["seq"].as_i64().unwrap_or(0)).collect();
        assert!(!older.is_empty() && older.len() <= 5000, "a page of 1 to 5,000 reports");
        older.append(&mut seqs);
        seqs = older;
        match page["before"].as_i64() {
            Some(next) => before = next,
            None => break,
        }
    }
    assert_eq!(seqs, (1..=i64::from(N)).collect::<Vec<_>>(), "every report once, in order");

    let (status, bad) = get(&format!("{base}/api/runs/{id}/progress?before=soon"), VIEWER).await;
    assert_eq!((status, bad["code"].as_str()), (400, Some("invalid_query")), "{bad}");
    drop(api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_a_listener_of_their_own_need_their_token() {
    let t = TestDb::sqlite().await;
    let metrics_port = free_port();
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));
    let (api, base) = api(&t, |f| {
        f.api.metrics_listen = Some(metrics);
        f.api.metrics_token_hash = Some(hash_token("scr_metrics_scraper"));
    })
    .await;
    let main = client().get(format!("{base}/metrics")).send().await.expect("an answer");
    assert_eq!(main.status().as_u16(), 404, "not on the API's own listener");
    let refused = client().get(format!("http://{metrics}/metrics")).send().await.expect("an answer");
    assert_eq!(refused.status().as_u16(), 401, "no token");
    let wrong = client().get(format!("http://{metrics}/metrics")).bearer_auth(VIEWER).send().await.expect("answer");
    assert_eq!(wrong.status().as_u16(), 401, "another token");
    let scraped = client()
        .get(format!("http://{metrics}/metrics"))
        .bearer_auth("scr_metrics_scraper")
        .send()
        .await
        .expect("an answer");
    assert_eq!(scraped.status().as_u16(), 200);
    let text = scraped.text().await.expect("the text");
    assert!(text.contains("scrinalia_daemons_alive"), "{text}");
    drop(api);
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_past_the_statement_timeout_is_answered_503_on_postgres() {
    let t = TestDb::postgres().await;
    let (api, base) = api(&t, |f| f.api.statement_timeout_seconds = 1).await;
    let id = request_run(&base).await;

    // The test holds a lock that the API's read of the run must wait for.
    let mut holder = PgConnection::connect(&t.url).await.expect("a connection of the test's own");
    holder.execute("begin; lock table worker_runs in access exclusive mode").await.expect("lock the ledger");
    let started = Instant::now();
    let (status, body) = get(&format!("{base}/api/runs/{id}"), VIEWER).await;
    let took = started.elapsed();
    holder.execute("rollback").await.expect("release the lock");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "database_timeout", "{body}");
    assert!(took < Duration::from_secs(8), "the timeout took {took:?}, the request timeout is 10 s");
    // Once the lock is gone, the same read answers.
    let (status, _) = get(&format!("{base}/api/runs/{id}"), VIEWER).await;
    assert_eq!(status, 200);
    drop(api);
    t.cleanup().await;
}
