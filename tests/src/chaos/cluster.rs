//! The cluster's API processes, and a client that records every answer they give (or the lack of one), so that
//! the invariants can say that nothing answered a 5xx or something unexpected. Also the connection cut made while
//! requests are certainly in flight through every API process.

use std::{net::SocketAddr, sync::Mutex, time::Duration};

use reqwest::Method;
use serde_json::Value;
use sqlx::Connection;

use super::APIS;
use crate::{Process, api_harness::VIEWER, daemon_harness::Setup, eventually, free_port};

/// One answer of an API process (or the lack of one).
#[derive(Debug, Clone)]
pub struct Answer {
    /// Which API process.
    pub api: usize,
    /// `METHOD path`.
    pub request: String,
    /// The status; `None` when no answer came.
    pub status: Option<u16>,
    /// The body of an answer that is not 2xx (cut), or the transport error.
    pub body: String,
}

/// The three API processes and a client that records every answer.
pub struct Apis {
    /// The processes.
    pub processes: Vec<Process>,
    /// Their base URLs.
    pub bases: Vec<String>,
    client: reqwest::Client,
    answers: Mutex<Vec<Answer>>,
}

impl Apis {
    /// Starts `APIS` processes on `setup`'s configuration and waits until each is ready.
    pub async fn start(setup: &Setup) -> Self {
        let config = setup.config.display().to_string();
        let (mut processes, mut bases) = (Vec::new(), Vec::new());
        for i in 0..APIS {
            let listen = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
            let env = [("SCRINALIA__API__LISTEN", listen.as_str())];
            let name = format!("api-{i}");
            processes.push(crate::start("scrinalia-api", &name, &setup.dir, &["--config", &config, "serve"], &env));
            bases.push(format!("http://{listen}"));
        }
        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("an HTTP client");
        for (process, base) in processes.iter().zip(&bases) {
            let ready = format!("{base}/readyz");
            eventually(
                Duration::from_secs(30),
                &format!("{} to be ready:\n{}", process.name, process.output()),
                || {
                    let request = client.get(&ready).send();
                    async move { request.await.ok().filter(|r| r.status() == reqwest::StatusCode::OK) }
                },
            )
            .await;
        }
        Self { processes, bases, client, answers: Mutex::default() }
    }

    /// Sends a request to API process `api` and records its answer; returns the status and the JSON body
    /// (`Null` when the body is not JSON).
    pub async fn call(
        &self,
        api: usize,
        method: Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (Option<u16>, Value) {
        let mut request = self.client.request(method.clone(), format!("{}{path}", self.bases[api])).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let (status, text) = match request.send().await {
            Ok(response) => (Some(response.status().as_u16()), response.text().await.unwrap_or_default()),
            Err(e) => (None, format!("no answer: {e}")),
        };
        let kept = if status.is_some_and(|s| s < 300) { String::new() } else { text.chars().take(400).collect() };
        let request = format!("{method} {path}");
        self.answers.lock().expect("answers").push(Answer { api, request, status, body: kept });
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Every answer so far.
    pub fn answers(&self) -> Vec<Answer> {
        self.answers.lock().expect("answers").clone()
    }

    /// The daemons as `GET /api/daemons` lists them (empty when the answer is not 200).
    pub async fn daemons(&self, api: usize) -> Vec<Value> {
        match self.call(api, Method::GET, "/api/daemons", VIEWER, None).await {
            (Some(200), body) => body["daemons"].as_array().cloned().unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

/// The reads a panel makes, by index.
pub const READS: [&str; 4] = ["/api/runs?limit=100", "/api/workers", "/api/daemons", "/api/runs?state=running"];

/// Cuts every connection to the test database while requests are certainly in flight through every API
/// process: a transaction locks the ledger, 12 reads of it are sent and wait for the lock in the database, then
/// every other connection is terminated and the lock released. Returns how many connections were terminated.
pub async fn cut_under_load(apis: &Apis, url: &str) -> i64 {
    let mut admin = sqlx::PgConnection::connect(url).await.expect("a connection to the test database");
    sqlx::query("begin").execute(&mut admin).await.expect("begin");
    sqlx::query("lock table worker_runs in access exclusive mode").execute(&mut admin).await.expect("lock the ledger");
    let reads = (0..12usize).map(|i| apis.call(i % APIS, Method::GET, READS[i % READS.len()], VIEWER, None));
    // The reads of the ledger among them (two of the four paths) wait for the lock: the cut comes once the
    // database shows that many waiting, read on a connection of its own (a transaction sees one snapshot of
    // `pg_stat_activity`).
    let ledger_reads = (0..12usize).filter(|i| READS[i % READS.len()].starts_with("/api/runs")).count();
    let cut = async {
        let watching =
            tokio::sync::Mutex::new(sqlx::PgConnection::connect(url).await.expect("a connection to the test database"));
        let watcher = &watching;
        eventually(Duration::from_secs(30), &format!("{ledger_reads} reads waiting for the ledger"), || async {
            let waiting: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
            )
            .fetch_one(&mut *watcher.lock().await)
            .await
            .ok()?;
            (waiting >= i64::try_from(ledger_reads).expect("small")).then_some(())
        })
        .await;
        let _ = watching.into_inner().close().await;
        let n = sqlx::query_scalar(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity \
             where datname = current_database() and pid <> pg_backend_pid()",
        )
        .fetch_one(&mut admin)
        .await
        .expect("terminate the connections");
        sqlx::query("rollback").execute(&mut admin).await.expect("release the lock");
        n
    };
    tokio::join!(futures::future::join_all(reads), cut).1
}
