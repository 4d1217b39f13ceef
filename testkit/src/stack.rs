//! The real API (and, optionally, a real daemon) on one configuration, spoken to over HTTP as a client would: a
//! request with a bearer token or any `Authorization` header, a JSON body, or raw bytes on a TCP connection for
//! what an HTTP client would normalise or refuse to send. Every answer is checked not to be a 5xx, and
//! [`Stack::assert_healthy`] checks that neither process died, panicked or logged an internal error.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use reqwest::{
    Method,
    header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue},
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{
    Binaries, ConfigFile, Reply, eventually,
    process::{Process, Ready},
};

/// How a request authenticates.
#[derive(Debug, Clone)]
pub enum Auth {
    /// No `Authorization` header.
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(&'static str),
    /// This `Authorization` header, exactly.
    Raw(HeaderValue),
}

/// The real API and (optionally) a real daemon on one configuration.
pub struct Stack {
    /// The API.
    pub api: Process,
    /// The daemon, when started.
    pub daemon: Option<Process>,
    /// The API's port.
    pub port: u16,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The client every request goes through.
    pub client: reqwest::Client,
    /// The configuration file.
    pub config: PathBuf,
}

impl Stack {
    /// Writes `config` as `<dir>/stack.toml` and starts the API on it (its `api.listen` on loopback), and a
    /// daemon when `with_daemon`; returns once the API is ready and the daemon has started.
    pub async fn start(bins: &Binaries, dir: &Path, config: &ConfigFile, with_daemon: bool) -> anyhow::Result<Self> {
        let path = dir.join("stack.toml");
        config.write(&path)?;
        let port = config.file.api.listen.port();
        let base = format!("http://127.0.0.1:{port}");
        let ready = format!("{base}/readyz");
        let api =
            Process::start_ready(&bins.path("scrinalia-api")?, "api", dir, &path, &["serve"], &[], Ready::Http(&ready))
                .await?;
        let daemon = match with_daemon {
            true => Some(
                Process::start_ready(
                    &bins.path("scrinalia-daemon")?,
                    "daemon",
                    dir,
                    &path,
                    &[],
                    &[],
                    Ready::Line("daemon started"),
                )
                .await?,
            ),
            false => None,
        };
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        Ok(Self { api, daemon, port, base, client, config: path })
    }

    /// Sends a request; asserts it is not a 5xx.
    pub async fn send(&self, method: Method, path: &str, auth: Auth, body: Option<Vec<u8>>) -> Reply {
        let mut request = self.client.request(method.clone(), format!("{}{path}", self.base));
        match auth {
            Auth::None => {}
            Auth::Bearer(token) => request = request.bearer_auth(token),
            Auth::Raw(value) => request = request.header(AUTHORIZATION, value),
        }
        if let Some(body) = body {
            request = request.header(CONTENT_TYPE, "application/json").body(body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let reply = Reply::read(response).await.unwrap_or_else(|e| panic!("{method} {path}: read the answer: {e}"));
        assert!(!reply.status.is_server_error(), "{method} {path} → {}: {}", reply.status, reply.text());
        reply
    }

    /// `GET path` with a bearer token.
    pub async fn get(&self, path: &str, token: &'static str) -> Reply {
        self.send(Method::GET, path, Auth::Bearer(token), None).await
    }

    /// A request with a bearer token and a JSON body.
    pub async fn json(&self, method: Method, path: &str, token: &'static str, body: Value) -> Reply {
        self.send(method, path, Auth::Bearer(token), Some(body.to_string().into_bytes())).await
    }

    /// Sends `request` as raw bytes (a path or a header that an HTTP client would normalise or refuse, or a
    /// body the server stops reading); returns the status and the body. Asserts it is not a 5xx. The answer is
    /// read while the request is still being written, since the server may answer (413) before reading it all.
    pub async fn raw(&self, request: Vec<u8>) -> (u16, String) {
        let exchange = async {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.expect("connect");
            let (mut reader, mut writer) = stream.into_split();
            let writing = tokio::spawn(async move {
                // The server may close before reading all of a large request.
                let _ = writer.write_all(&request).await;
                writer
            });
            let mut answer = Vec::new();
            let _ = reader.read_to_end(&mut answer).await;
            writing.abort();
            answer
        };
        let answer = tokio::time::timeout(Duration::from_secs(20), exchange).await.expect("an answer in time");
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no HTTP status line in {answer:?}"));
        assert!(status < 500, "a raw request answered {status}: {answer}");
        let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
        (status, body)
    }

    /// A raw request with `token`, `Connection: close` and a JSON body.
    pub async fn raw_request(&self, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body.as_bytes());
        self.raw(request).await
    }

    /// The id of the (first) active daemon, as `GET /api/daemons` lists it with `token`.
    pub async fn daemon_id(&self, token: &'static str) -> String {
        let what =
            format!("the daemon to register:\n{}", self.daemon.as_ref().map(Process::output).unwrap_or_default());
        eventually(Duration::from_secs(30), &what, || async {
            let daemons = self.get("/api/daemons", token).await.expect(reqwest::StatusCode::OK, None);
            daemons["daemons"]
                .as_array()
                .and_then(|d| d.iter().find(|d| d["state"] == "active"))
                .and_then(|d| d["id"].as_str().map(str::to_owned))
        })
        .await
    }

    /// Asserts that the API and the daemon are alive and answering, and that neither panicked nor logged an
    /// internal error.
    pub async fn assert_healthy(&mut self) {
        assert!(self.api.exited().is_none(), "the API died:\n{}", self.api.output());
        let ready = self.client.get(format!("{}/readyz", self.base)).send().await.context("readyz");
        assert!(ready.is_ok_and(|r| r.status().is_success()), "the API is not ready:\n{}", self.api.output());
        let api = self.api.output();
        assert!(!api.contains("panicked"), "the API panicked:\n{api}");
        assert!(!api.contains("request failed"), "the API answered an internal error:\n{api}");
        if let Some(daemon) = &mut self.daemon {
            assert!(daemon.exited().is_none(), "the daemon died:\n{}", daemon.output());
            assert!(!daemon.output().contains("panicked"), "the daemon panicked:\n{}", daemon.output());
        }
    }
}
