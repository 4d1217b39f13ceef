//! A real headless Chromium, driven over WebDriver by `chromedriver`, for the web panel's end-to-end tests.
//!
//! Debian's `chromium` and `chromium-driver` packages provide both programs (`SCRINALIA_CHROMIUM` and
//! `SCRINALIA_CHROMEDRIVER` name others). Every browser gets a fresh profile folder, `chromedriver` listens on a
//! free port of its own, and both are stopped when the [`Browser`] is dropped, even when a test panics.
//! Screenshots go to `artifacts/screenshots/` at the workspace root.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::free_port;

/// How long a condition on the page may take before a test fails; generous, as the machine may be busy.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// One line of the browser's console log.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// `SEVERE`, `WARNING`, `INFO`, ...
    pub level: String,
    /// Where it came from: `javascript`, `console-api`, `network`, ...
    pub source: String,
    /// The text.
    pub message: String,
}

/// A headless Chromium session.
pub struct Browser {
    /// The WebDriver client.
    pub client: Client,
    driver: Child,
    driver_url: String,
    _profile: TempDir,
    name: String,
}

/// The workspace root (where `artifacts/` and `docs/` are).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Where screenshots go.
pub fn screenshot_dir() -> PathBuf {
    workspace_root().join("artifacts").join("screenshots")
}

fn program(env: &str, candidates: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    candidates.iter().map(PathBuf::from).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "{} is not installed (looked at {}; set {env} to another path). On Debian: \
             apt-get install -y chromium chromium-driver",
            candidates[0],
            candidates.join(", ")
        )
    })
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium whose window is `width` × `height`; `name` prefixes its
    /// screenshots and names its log file in `log_dir`.
    pub async fn start(name: &str, log_dir: &Path, width: u32, height: u32) -> Self {
        let chromedriver =
            program("SCRINALIA_CHROMEDRIVER", &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]);
        // Debian's /usr/bin/chromium is a wrapper script; the binary behind it is preferred when present.
        let chromium = program("SCRINALIA_CHROMIUM", &["/usr/lib/chromium/chromium", "/usr/bin/chromium"]);
        let port = free_port();
        let log =
            std::fs::File::create(log_dir.join(format!("chromedriver-{name}.log"))).expect("the chromedriver log");
        let mut cmd = Command::new(&chromedriver);
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            .kill_on_drop(true);
        // Its own process group, so that dropping the browser ends chromedriver and every Chromium process.
        cmd.as_std_mut().process_group(0);
        let driver = cmd.spawn().unwrap_or_else(|e| panic!("start {}: {e}", chromedriver.display()));
        let driver_url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        crate::eventually(PATIENCE, "chromedriver to answer /status", || {
            let request = http.get(format!("{driver_url}/status")).send();
            async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
        })
        .await;
        let profile = tempfile::Builder::new().prefix("scrinalia-chromium-").tempdir().expect("a profile folder");
        let args = vec![
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-extensions".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!("an object") };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver_url)
            .await
            .unwrap_or_else(|e| panic!("start a Chromium session through chromedriver: {e}"));
        Self { client, driver, driver_url, _profile: profile, name: name.to_owned() }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Waits until `check` returns `Some`, polling every 100 ms; panics with `what` and a screenshot after
    /// [`PATIENCE`].
    pub async fn wait<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                let shot = self.screenshot(&format!("timeout-{}", slug(what))).await;
                let console = self.console().await;
                panic!(
                    "timed out after {PATIENCE:?} waiting for {what}; screenshot: {}; browser console: {console:#?}",
                    shot.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The first element matching `css`, if any.
    pub async fn find(&self, css: &str) -> Option<Element> {
        self.client.find_all(Locator::Css(css)).await.ok()?.into_iter().next()
    }

    /// Every element matching `css`.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap_or_default()
    }

    /// Waits for an element matching `css`.
    pub async fn wait_for(&self, css: &str) -> Element {
        self.wait(&format!("an element matching {css:?}"), || self.find(css)).await
    }

    /// The text of the first element matching `css`, if any. An element replaced between finding and reading
    /// it (the panel redraws on live events) is found again.
    pub async fn text(&self, css: &str) -> Option<String> {
        for _ in 0..5 {
            if let Ok(text) = self.find(css).await?.text().await {
                return Some(text);
            }
        }
        None
    }

    /// The attribute `name` of the first element matching `css`, if both exist (found again as in
    /// [`Browser::text`]).
    pub async fn attr(&self, css: &str, name: &str) -> Option<String> {
        for _ in 0..5 {
            if let Ok(value) = self.find(css).await?.attr(name).await {
                return value;
            }
        }
        None
    }

    /// Whether the first element matching `css` is enabled (found again as in [`Browser::text`]).
    pub async fn is_enabled(&self, css: &str) -> Option<bool> {
        for _ in 0..5 {
            if let Ok(enabled) = self.find(css).await?.is_enabled().await {
                return Some(enabled);
            }
        }
        None
    }

    /// Waits until the text of an element matching `css` contains `needle`; returns that text.
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> String {
        self.wait(&format!("{css:?} to contain {needle:?}"), || async {
            self.text(css).await.filter(|t| t.contains(needle))
        })
        .await
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page and returns its value.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|e| panic!("run a script in the page: {e}"))
    }

    /// Clicks the first element matching `css`, waiting for it. The panel redraws parts of the page on live
    /// events, so an element found a moment ago may be replaced before the click lands: the click is retried.
    pub async fn click(&self, css: &str) {
        self.wait(&format!("a click on {css:?} to land"), || async { self.find(css).await?.click().await.ok() }).await;
    }

    /// Types `text` into the first element matching `css` (waiting for it, and retrying as [`Browser::click`]).
    pub async fn type_into(&self, css: &str, text: &str) {
        self.wait(&format!("typing into {css:?}"), || async {
            let el = self.find(css).await?;
            el.clear().await.ok()?;
            el.send_keys(text).await.ok()
        })
        .await;
    }

    /// Saves a screenshot as `artifacts/screenshots/<browser>-<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("create artifacts/screenshots");
        let path = dir.join(format!("{}-{name}.png", self.name));
        match self.client.screenshot().await {
            Ok(png) => std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display())),
            Err(e) => eprintln!("screenshot {name} failed: {e}"),
        }
        path
    }

    /// The console log since the last call (Chromium's `goog:loggingPrefs`, read through chromedriver).
    pub async fn console(&self) -> Vec<LogEntry> {
        let session = self.client.session_id().await.ok().flatten().expect("a WebDriver session");
        let response = reqwest::Client::new()
            .post(format!("{}/session/{session}/se/log", self.driver_url))
            .json(&json!({ "type": "browser" }))
            .send()
            .await
            .expect("ask chromedriver for the browser log");
        let body: Value = response.json().await.expect("the browser log as JSON");
        body["value"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        let message = e["message"].as_str().unwrap_or_default().to_owned();
                        // Chromium prefixes a message with its source's URL and position; the kind is in `source`
                        // for some versions only, so it is derived from the text when absent.
                        let source = e["source"].as_str().map(str::to_owned).unwrap_or_else(|| {
                            if message.contains("Failed to load resource") { "network" } else { "javascript" }
                                .to_owned()
                        });
                        LogEntry { level: e["level"].as_str().unwrap_or_default().to_owned(), source, message }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Makes the page prefer a dark (`true`) or light colour scheme, as a system setting would
    /// (`prefers-color-scheme`, through Chromium's DevTools protocol).
    pub async fn prefer_dark(&self, dark: bool) {
        let session = self.client.session_id().await.ok().flatten().expect("a WebDriver session");
        let scheme = if dark { "dark" } else { "light" };
        let params = json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] });
        let response = reqwest::Client::new()
            .post(format!("{}/session/{session}/goog/cdp/execute", self.driver_url))
            .json(&json!({ "cmd": "Emulation.setEmulatedMedia", "params": params }))
            .send()
            .await
            .expect("ask chromedriver to emulate a colour scheme");
        assert!(response.status().is_success(), "emulate {scheme}: {}", response.text().await.unwrap_or_default());
    }

    /// Panics if the console has an error other than a network answer whose status is in `expected_statuses`
    /// (a 409 the test provoked, say). Returns the entries it allowed.
    pub async fn assert_no_console_errors(&self, expected_statuses: &[u16]) -> Vec<LogEntry> {
        let entries = self.console().await;
        let (allowed, errors): (Vec<LogEntry>, Vec<LogEntry>) =
            entries.into_iter().filter(|e| e.level == "SEVERE").partition(|e| {
                e.source == "network"
                    && expected_statuses.iter().any(|s| e.message.contains(&format!("status of {s} ")))
            });
        assert!(errors.is_empty(), "the browser console of {} has errors: {errors:#?}", self.name);
        allowed
    }

    /// Ends the session (Chromium quits) and stops chromedriver.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        self.stop_group();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.driver.wait()).await;
    }

    fn stop_group(&mut self) {
        if let Some(id) = self.driver.id() {
            let _ = killpg(Pid::from_raw(id as i32), Signal::SIGKILL);
        }
        let _ = self.driver.start_kill();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.stop_group();
    }
}

fn slug(s: &str) -> String {
    let slug: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    slug.split('-').filter(|p| !p.is_empty()).take(8).collect::<Vec<_>>().join("-")
}
