//! A whole system, for the tests that drive it as its people do, through the `scrinalia` CLI and plain HTTP:
//! the real `scrinalia-api` and `scrinalia-daemon` binaries on one fresh database, with an operator, a viewer
//! and an admin token.

use std::{process::Stdio, time::Duration};

use reqwest::Method;
use scrinalia_shared::Role;
use serde_json::Value;
use tokio::{io::AsyncWriteExt, process::Command};

use crate::{ConfigFile, Kind, Process, Reply, TestDb, bin_path, eventually, free_port};

/// The operator's token (`otto`).
pub const OPERATOR: &str = "scr_system_test_operator";
/// The viewer's token (`vera`).
pub const VIEWER: &str = "scr_system_test_viewer";
/// The admin's token (`ada`).
pub const ADMIN: &str = "scr_system_test_admin";

/// An API and a daemon on one fresh database.
pub struct System {
    /// The database.
    pub db: TestDb,
    /// Where the API listens.
    pub api_url: String,
    api: Process,
    daemon: Process,
}

impl System {
    /// Starts the system with the configuration `edit` makes of the tests' defaults (its workers, pipelines…),
    /// once the API answers and the daemon is active.
    pub async fn start(kind: Kind, edit: impl FnOnce(ConfigFile) -> ConfigFile) -> Self {
        let db = TestDb::new(kind).await;
        let dir = db.dir.path();
        let port = free_port();
        let config = db
            .config()
            .test_daemon(|d| (d.capacity, d.lease_seconds, d.poll_seconds, d.gone_after_seconds) = (3, 5, 1, 10))
            .with(|f| {
                f.database.max_connections = 5;
                (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
            })
            .token("otto", Role::Operator, OPERATOR)
            .token("vera", Role::Viewer, VIEWER)
            .token("ada", Role::Admin, ADMIN);
        let config = db.write_config(&edit(config), "config").display().to_string();
        let daemon = crate::start("scrinalia-daemon", "daemon", dir, &["--config", &config], &[]);
        let api = crate::start("scrinalia-api", "api", dir, &["--config", &config], &[]);
        let system = Self { db, api_url: format!("http://127.0.0.1:{port}"), api, daemon };
        eventually(Duration::from_secs(30), "the API to answer and the daemon to be active", || async {
            let reply = system.http(Method::GET, "/api/daemons", VIEWER, None).await.ok()?;
            let daemons = reply.json().get("daemons")?.as_array()?.clone();
            daemons.iter().any(|d| d["state"] == "active").then_some(())
        })
        .await;
        system
    }

    /// Sends a request to the API with `token`.
    pub async fn http(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> reqwest::Result<Reply> {
        let mut request = reqwest::Client::new().request(method, format!("{}{path}", self.api_url)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::read(request.send().await?).await
    }

    /// Runs the CLI with the operator's token.
    pub async fn cli(&self, args: &[&str]) -> Cli {
        self.cli_as(OPERATOR, args).await
    }

    /// Runs the CLI (as the operator) until it exits 0 with an output that satisfies `done`: for what a daemon
    /// does within seconds (chores, retries).
    pub async fn cli_until(&self, args: &[&str], what: &str, done: impl Fn(&Cli) -> bool) -> Cli {
        eventually(Duration::from_secs(30), what, || async {
            let outcome = self.cli(args).await;
            (outcome.code == Some(0) && done(&outcome)).then_some(outcome)
        })
        .await
    }

    /// Runs the CLI (as the operator, add `--json`) until it exits 0 with JSON that satisfies `done`; returns it.
    pub async fn json_until(&self, args: &[&str], what: &str, done: impl Fn(&Value) -> bool) -> Value {
        eventually(Duration::from_secs(30), what, || async {
            let outcome = self.cli(args).await;
            let json = (outcome.code == Some(0)).then(|| outcome.json())?;
            done(&json).then_some(json)
        })
        .await
    }

    /// Runs the CLI with `token`.
    pub async fn cli_as(&self, token: &str, args: &[&str]) -> Cli {
        scrinalia(args, &[("SCRINALIA_API", &self.api_url), ("SCRINALIA_TOKEN", token)], None).await
    }

    /// What the API process printed so far (its log).
    pub fn api_output(&self) -> String {
        self.api.output()
    }

    /// Stops the binaries and drops the database.
    pub async fn cleanup(self) {
        drop((self.api, self.daemon));
        self.db.cleanup().await;
    }
}

/// What one run of the CLI did.
#[derive(Debug)]
pub struct Cli {
    /// Its exit code.
    pub code: Option<i32>,
    /// What it printed.
    pub stdout: String,
    /// What it said on stderr.
    pub stderr: String,
}

impl Cli {
    /// Asserts the exit code.
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "expected exit code {code}; got {self:#?}");
        self
    }

    /// Asserts that standard output has every part.
    pub fn has(&self, parts: &[&str]) -> &Self {
        for part in parts {
            assert!(self.stdout.contains(part), "{part:?} is missing from stdout: {self:#?}");
        }
        self
    }

    /// Standard output as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }
}

/// Runs `scrinalia args…` with `env` (and nothing inherited that could steer it), feeding `stdin` if given.
pub async fn scrinalia(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Cli {
    let mut command = Command::new(bin_path("scrinalia"));
    command
        .args(args)
        .env_remove("SCRINALIA_API")
        .env_remove("SCRINALIA_TOKEN")
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("start scrinalia");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).await.expect("write to scrinalia's stdin");
    }
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("scrinalia {args:?} did not finish within 60 s"))
        .expect("wait for scrinalia");
    Cli {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
