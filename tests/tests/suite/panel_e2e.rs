//! End-to-end tests of the web panel in a real headless Chromium (Debian's `chromium` and `chromium-driver`),
//! against the real `scrinalia-api` and `scrinalia-daemon` binaries running the demo worker's probes on a fresh
//! database. Every wait polls the page for a condition, with generous timeouts; nothing sleeps to assert.
//! Screenshots of each view go to `artifacts/screenshots/`; with `SCRINALIA_UPDATE_DOCS_SCREENSHOT=1` the first
//! test also refreshes `docs/screenshot-workers.png`.
//!
//! The probes declare their options in their code, and the code wins over the catalogue: a long run to watch is
//! asked for with an override or explicit arguments, never with a catalogue default.

use reqwest::StatusCode;
use scrinalia_shared::{Engine, OptionSpec, OptionType, Role, WorkerSpec, catalogue::PipelineSpec};
use scrinalia_testkit::config::option;
use scrinalia_tests::{
    ConfigFile, Kind, Process, TestDb,
    browser::{Browser, PATIENCE, workspace_root},
    daemon_harness::probe,
    demo_worker, eventually, free_port,
};
use serde_json::{Value, json};

const VIEWER_TOKEN: &str = "scr_e2e_viewer_0123456789abcdef";
/// What probe-3's check says is missing (its catalogue entry sets `SCRINALIA_PROBE_NOT_READY`).
const NOT_READY: &str = "The probe's model server is not up (set by the test's catalogue).";
/// Where probe-3's catalogue entry disagrees with its code: an option the code lacks, and a default.
const DISAGREEMENTS: [&str; 2] = [
    "catalogue declares option batch_size, code has no such option; it is not passed",
    "catalogue says progress_steps 6, code says 4; runs use 4",
];
/// The model the quality probe reports it used: its engine is configured elsewhere, and the environment its
/// catalogue entry sets says another model than the one the catalogue resolves.
const REPORTED_MODEL: &str = "big-model-v2";
const ADMIN_TOKEN: &str = "scr_e2e_admin_0123456789abcdef";

/// How the API lets callers in.
#[derive(Clone, Copy)]
enum Access {
    /// Anonymous admin from loopback, as the demo configuration does.
    AnonymousAdmin,
    /// Tokens only: `e2e-viewer` and `e2e-admin`.
    Tokens,
}

/// The API, a daemon and their configuration on a fresh database.
struct Stack {
    db: TestDb,
    base: String,
    http: reqwest::Client,
    token: Option<&'static str>,
    api: Process,
    daemon: Process,
}

impl Stack {
    async fn start(kind: Kind, access: Access) -> Self {
        let db = TestDb::new(kind).await;
        let dir = db.dir.path().to_path_buf();
        let port = free_port();
        let config = Self::config(&db, port, access);
        let path = db.write_config(&config, "config");
        let config_path = path.to_str().expect("a UTF-8 path");
        let env = [("SCRINALIA_CONFIG", config_path), ("RUST_LOG", "info")];
        let api = scrinalia_tests::start("scrinalia-api", "api", &dir, &["--config", config_path], &env);
        let daemon = scrinalia_tests::start("scrinalia-daemon", "daemon", &dir, &["--config", config_path], &env);
        let token = match access {
            Access::AnonymousAdmin => None,
            Access::Tokens => Some(ADMIN_TOKEN),
        };
        let stack =
            Self { db, base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new(), token, api, daemon };
        eventually(PATIENCE, "the API to be ready", || async {
            let r = stack.http.get(format!("{}/readyz", stack.base)).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        eventually(PATIENCE, "an active daemon", || async {
            let daemons = stack.get("/api/daemons").await?;
            daemons["daemons"].as_array()?.iter().any(|d| d["state"] == "active").then_some(())
        })
        .await;
        // What the panel shows of a worker depends on what its code declared: wait for every description and
        // check, so that no view is drawn from the catalogue alone.
        eventually(PATIENCE, "every probe described and checked", || async {
            let workers = stack.get("/api/workers").await?;
            let workers = workers["workers"].as_array()?;
            workers
                .iter()
                .all(|w| w["described"]["described_at"].is_string() && w["readiness"].is_object())
                .then_some(())
        })
        .await;
        stack
    }

    /// The panel's configuration: three probes with the fields the panel shows (titles, axes, an engine from
    /// elsewhere whose worker reports another model, an Ollama engine nobody serves, a probe that is not ready
    /// and whose catalogue entry disagrees with its code), and quick daemon timers.
    fn config(db: &TestDb, port: u16, access: Access) -> ConfigFile {
        let bin = demo_worker();
        let presets = |p: &[(&str, &str)]| p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let engines = [
            (
                "local",
                Engine {
                    kind: "none".into(),
                    url: None,
                    presets: presets(&[("fast", "tiny-model"), ("thorough", "big-model")]),
                    description: None,
                },
            ),
            (
                "ollama",
                Engine {
                    kind: "ollama".into(),
                    url: Some(format!("http://127.0.0.1:{}", free_port())),
                    presets: presets(&[("small", "llama3.2:1b")]),
                    description: None,
                },
            ),
        ];
        let described = |mut spec: WorkerSpec, title: &str, axis: &str, governance: &str| {
            spec.title = Some(title.to_owned());
            (spec.axis, spec.governance, spec.stamp) = (axis.to_owned(), governance.to_owned(), "none".to_owned());
            spec
        };
        let mut one = described(probe(&bin, "probe-1", 120), "Probe 1", "testing", "none (test probe)");
        one.description = Some("A steerable probe: a long run with many progress steps.".into());
        (one.engine, one.preset) = (Some("local".into()), Some("fast".into()));
        // The same defaults as the probe's code: no disagreement on this one.
        one.options = vec![
            OptionSpec {
                description: Some("How long the run takes.".into()),
                ..option("duration_ms", OptionType::Integer, Some(json!(200)))
            },
            option("progress_steps", OptionType::Integer, Some(json!(4))),
            option("output_lines", OptionType::Integer, Some(json!(2))),
            option("exit_code", OptionType::Integer, Some(json!(0))),
            option("crash", OptionType::Boolean, Some(json!(false))),
            option("note", OptionType::String, None),
        ];
        let mut two = described(probe(&bin, "probe-2", 120), "Quality probe", "quality", "cleaning rules");
        (two.engine, two.preset) = (Some("local".into()), Some("thorough".into()));
        two.engine_source = Some(
            "Its engine comes from the active LLM_CHECK cleaning rule; change it in the cleaning rules screen.".into(),
        );
        two.engine_source_url = Some("/rules#llm-check".into());
        // No engine flags reach a worker whose engine comes from elsewhere; the probe takes them from this
        // environment instead, and reports them at the start of its run.
        for (name, value) in [("SCRINALIA_ENGINE", "local"), ("SCRINALIA_PRESET", "thorough")] {
            two.env.insert(name.into(), value.into());
        }
        two.env.insert("SCRINALIA_MODEL".into(), REPORTED_MODEL.into());
        let mut three = described(probe(&bin, "probe-3", 120), "Probe 3", "testing", "none (test probe)");
        (three.engine, three.preset) = (Some("ollama".into()), Some("small".into()));
        three.options = vec![
            option("duration_ms", OptionType::Integer, Some(json!(200))),
            option("progress_steps", OptionType::Integer, Some(json!(6))),
            option("output_lines", OptionType::Integer, Some(json!(2))),
            option("batch_size", OptionType::Integer, Some(json!(10))),
        ];
        three.env.insert("SCRINALIA_PROBE_NOT_READY".into(), NOT_READY.into());
        let mut config = db
            .config()
            .with(|f| {
                (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
                f.engines = engines.into_iter().map(|(name, engine)| (name.to_owned(), engine)).collect();
                f.pipelines = vec![PipelineSpec {
                    name: "probes".into(),
                    description: Some("Probe 1, then the quality probe.".into()),
                    steps: vec!["probe-1".into(), "probe-2".into()],
                }];
                let d = &mut f.daemon;
                (d.capacity, d.lease_seconds, d.poll_seconds, d.heartbeat_seconds) = (3, 10, 1, 1);
                (d.gone_after_seconds, d.cancel_grace_seconds) = (5, 2);
                (d.queue_count_interval_seconds, d.queue_count_timeout_seconds) = (2, 10);
            })
            .workers([one, two, three]);
        match access {
            Access::AnonymousAdmin => {
                config.file.auth.anonymous_role = Some(Role::Admin);
                config.file.auth.anonymous_loopback_only = true;
            }
            Access::Tokens => {
                config =
                    config.token("e2e-viewer", Role::Viewer, VIEWER_TOKEN).token("e2e-admin", Role::Admin, ADMIN_TOKEN);
            }
        }
        config
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).json(&body);
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("a request to the API");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Logs of both processes, for a failure message.
    fn logs(&self) -> String {
        format!("--- api ---\n{}\n--- daemon ---\n{}", tail(&self.api.output()), tail(&self.daemon.output()))
    }

    async fn stop(self) {
        drop(self.api);
        drop(self.daemon);
        self.db.cleanup().await;
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The value of the `<progress>` bar of `worker`'s run in flight, if it shows one with a known total.
async fn progress_of(browser: &Browser, worker: &str) -> Option<f64> {
    let bar =
        browser.find(&format!("article[data-worker={worker:?}] .in-flight[data-state=\"running\"] progress")).await?;
    bar.attr("max").await.ok()??;
    // `value` reflects the bar's property as an attribute (WebDriver's property call returns only strings).
    bar.attr("value").await.ok()??.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_runs_a_worker_and_watches_it_to_the_end_without_a_reload() {
    let stack = Stack::start(Kind::Postgres, Access::AnonymousAdmin).await;
    // A long run to watch, with many progress steps: the probe's own defaults end it in 200 ms.
    let long = json!({"options": {"duration_ms": 9000, "progress_steps": 18, "output_lines": 3},
        "reason": "e2e: a run long enough to watch"});
    let (status, body) = stack.send(reqwest::Method::PUT, "/api/workers/probe-1/override", long).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let browser = Browser::start("curator", stack.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/workers", stack.base)).await;

    // Workers in catalogue order, each value marked with where it comes from.
    browser.wait_for("#who[data-role=\"admin\"]").await;
    browser.wait_for("article[data-worker=\"probe-3\"]").await;
    let order = browser
        .js("return [...document.querySelectorAll('article.worker')].map((a) => a.dataset.worker);", vec![])
        .await;
    assert_eq!(order, json!(["probe-1", "probe-2", "probe-3"]), "catalogue order");
    let engine = browser.text("article[data-worker=\"probe-1\"] dd[data-field=\"engine\"]").await.unwrap_or_default();
    assert!(engine.contains("local") && engine.contains("default"), "engine with its source: {engine:?}");
    let model = browser.text("article[data-worker=\"probe-1\"] dd[data-field=\"model\"]").await.unwrap_or_default();
    assert!(model.contains("tiny-model"), "model: {model:?}");
    browser.wait_for_text("article[data-worker=\"probe-2\"] dd[data-field=\"engine\"]", "external").await;
    browser.wait_for_text("article[data-worker=\"probe-2\"] .engine-source", "LLM_CHECK cleaning rule").await;
    let tags = browser.text("article[data-worker=\"probe-2\"] .tags").await.unwrap_or_default();
    assert!(tags.contains("quality") && tags.contains("cleaning rules"), "axis and governance: {tags:?}");

    // The health strip and the queue snapshot the daemon measured (with its age).
    browser.wait_for("#health li[data-check=\"database\"][data-status=\"ok\"]").await;
    browser.wait_for("#health li[data-check=\"daemons\"][data-status=\"ok\"]").await;
    let model_server =
        browser.wait_for_text("#health li[data-check^=\"model_server\"][data-status=\"down\"]", "Model server").await;
    assert!(model_server.len() > "Model server ollama".len() + 5, "a red check says why: {model_server:?}");
    browser.wait_for_text("article[data-worker=\"probe-1\"] .queue", "pending").await;
    browser.wait_for_text("article[data-worker=\"probe-1\"] .queue", "measured").await;

    // What each probe's code said: readiness, where its catalogue entry disagrees, and its description.
    let ready = browser.wait_for_text("article[data-worker=\"probe-1\"] .readiness-line", "ready").await;
    assert!(ready.contains("checked") && ready.contains("by daemon"), "when and by whom: {ready:?}");
    assert!(browser.find("article[data-worker=\"probe-1\"] .badge.readiness[data-ready=\"ready\"]").await.is_some());
    assert!(browser.find("article[data-worker=\"probe-1\"] .disagreements").await.is_none(), "probe-1 agrees");
    let not_ready = browser.wait_for_text("article[data-worker=\"probe-3\"] .readiness-line", NOT_READY).await;
    assert!(not_ready.contains("not ready"), "{not_ready:?}");
    let disagreements = browser.wait_for_text("article[data-worker=\"probe-3\"] .disagreements", "code wins").await;
    for sentence in DISAGREEMENTS {
        assert!(disagreements.contains(sentence), "{sentence:?} is missing from {disagreements:?}");
    }
    let described = browser.wait_for_text("article[data-worker=\"probe-1\"] .described", "Code described").await;
    assert!(described.contains("by daemon"), "by which daemon: {described:?}");
    // The code's bounds guide the number fields.
    let exit_code = "#worker-probe-1-opt-exit_code";
    browser.wait_for(exit_code).await;
    let bounds = (browser.attr(exit_code, "min").await, browser.attr(exit_code, "max").await);
    assert_eq!(bounds, (Some("0".to_owned()), Some("255".to_owned())), "min and max of exit_code");

    // Run is enabled once the panel knows a daemon is alive.
    let run_button = "article[data-worker=\"probe-1\"] button.run";
    browser
        .wait("the Run button of probe-1 to be enabled", || async {
            browser.is_enabled(run_button).await?.then_some(())
        })
        .await;
    browser.screenshot("workers").await;
    browser.js("window.__e2eNoReload = 'still the same page'; return true;", vec![]).await;

    // Press Run: the run appears in flight and its progress bar moves.
    browser.click(run_button).await;
    let first = browser
        .wait("probe-1's progress bar to show progress", || async {
            progress_of(&browser, "probe-1").await.filter(|v| *v > 0.0)
        })
        .await;
    browser
        .wait("probe-1's progress bar to move", || async {
            progress_of(&browser, "probe-1").await.filter(|v| *v > first)
        })
        .await;
    let text = browser.text("article[data-worker=\"probe-1\"] .progress-text").await.unwrap_or_default();
    assert!(text.contains("/ 18") && text.contains("per s"), "done / total and rate: {text:?}");
    let shot = browser.screenshot("workers-running").await;
    if std::env::var_os("SCRINALIA_UPDATE_DOCS_SCREENSHOT").is_some() {
        std::fs::copy(&shot, workspace_root().join("docs/screenshot-workers.png")).expect("update the docs screenshot");
    }

    // While it runs, Run is disabled with the reason; a stale panel that presses it anyway (as two curators at
    // once would) gets the API's 409 sentence next to the worker, in an alert.
    assert_eq!(browser.is_enabled(run_button).await, Some(false), "Run is disabled");
    browser.wait_for_text("article[data-worker=\"probe-1\"] .reason", "already running").await;
    browser
        .js(
            "const b = document.querySelector(arguments[0]); b.disabled = false; b.click(); return true;",
            vec![json!(run_button)],
        )
        .await;
    let alert = browser.wait_for_text("#worker-probe-1-alert", "already has a run in flight").await;
    assert!(alert.contains("probe-1"), "the 409 sentence names the worker: {alert:?}");
    assert_eq!(browser.attr("#worker-probe-1-alert", "role").await.as_deref(), Some("alert"));
    assert!(browser.find("article[data-worker=\"probe-1\"] .in-flight button.cancel").await.is_some(), "Cancel");
    browser.screenshot("workers-409").await;

    // The chores: each button shows the API's sentence, and what the daemon then stores reaches the card by
    // itself (a `worker` event), without a reload.
    browser.click("article[data-worker=\"probe-1\"] button.chore-count").await;
    let asked = browser.wait_for_text("#worker-probe-1-chore-message", "A count of the queue of probe-1").await;
    assert!(asked.contains("within a few seconds"), "a daemon takes it: {asked:?}");
    let described_at = || browser.attr("article[data-worker=\"probe-3\"] .described", "data-described-at");
    let before = described_at().await.expect("probe-3 was described");
    browser.click("article[data-worker=\"probe-3\"] button.chore-describe").await;
    browser.wait_for_text("#worker-probe-3-chore-message", "A description of probe-3 was asked for").await;
    browser
        .wait("probe-3's new description on its card", || async { described_at().await.filter(|at| *at != before) })
        .await;
    let checked_at = || browser.attr("article[data-worker=\"probe-3\"] .readiness-line", "data-checked-at");
    let before = checked_at().await.expect("probe-3 was checked");
    browser.click("article[data-worker=\"probe-3\"] button.chore-check").await;
    browser.wait_for_text("#worker-probe-3-chore-message", "A check of probe-3 was asked for").await;
    browser.wait("probe-3's new check on its card", || async { checked_at().await.filter(|at| *at != before) }).await;
    browser.wait_for_text("article[data-worker=\"probe-3\"] .readiness-line", NOT_READY).await;
    browser.js("document.querySelector('#worker-probe-3-chore-message').scrollIntoView(); return true;", vec![]).await;
    browser.screenshot("workers-chores").await;

    // The runs view, reached by the navigation (no reload), shows it running, then succeeded: live.
    browser.click("nav.views a[data-nav=\"runs\"]").await;
    let row = "#ledger tr[data-worker=\"probe-1\"]";
    let seen = browser.wait("probe-1's run in the ledger", || browser.attr(row, "data-state")).await;
    assert_eq!(seen, "running", "the run is seen in flight first\n{}", stack.logs());
    browser.wait_for(&format!("{row}[data-state=\"succeeded\"]")).await;
    let cells = browser.text(row).await.unwrap_or_default();
    assert!(cells.contains("processed 18") && cells.contains(" s"), "outcome and duration: {cells:?}");
    let marker = browser.js("return window.__e2eNoReload ?? null;", vec![]).await;
    assert_eq!(marker, json!("still the same page"), "the page was not reloaded");
    browser.screenshot("runs").await;

    // Its detail: resolved configuration with sources, result counts, daemon, and the whole log.
    browser.click(&format!("{row} td:last-child a")).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    browser.wait_for_text("#run-log", "probe-1: stdout line 3 of 3").await;
    browser.wait_for_text("#log-state", "complete").await;
    let config = browser.text("tr[data-field=\"duration_ms\"]").await.unwrap_or_default();
    assert!(config.contains("9000") && config.contains("override"), "resolved option with its source: {config:?}");
    // Beside the resolved model, the one the probe reported it used: the same one here.
    let model = browser.text("#run-config tr[data-field=\"model\"]").await.unwrap_or_default();
    assert_eq!(model.matches("tiny-model").count(), 2, "resolved and reported: {model:?}");
    assert!(browser.find("#run-config tr[data-differs=\"true\"]").await.is_none(), "nothing differs");
    let counts = browser.text("table.counts").await.unwrap_or_default();
    assert!(counts.contains("processed") && counts.contains("18"), "result counts: {counts:?}");
    let facts = browser.text("dl.facts").await.unwrap_or_default();
    assert!(facts.contains("Daemon") && facts.contains(" on "), "the daemon and its host: {facts:?}");
    browser.screenshot("run-detail").await;

    // Run with explicit arguments from the form, then follow that run's log live from its detail view.
    browser.click("nav.views a[data-nav=\"workers\"]").await;
    browser.click("article[data-worker=\"probe-3\"] details.run-options summary").await;
    // A value out of the option's bounds: the API refuses it with a sentence, shown like any refusal.
    browser.type_into("#worker-probe-3-opt-output_lines", "-1").await;
    browser.click("article[data-worker=\"probe-3\"] .run-form button[type=\"submit\"]").await;
    browser.wait_for_text("#worker-probe-3-alert", "Option \"output_lines\" must be at least 0, not -1.").await;
    browser.type_into("#worker-probe-3-opt-duration_ms", "3000").await;
    browser.type_into("#worker-probe-3-opt-output_lines", "4").await;
    browser.click("article[data-worker=\"probe-3\"] .run-form button[type=\"submit\"]").await;
    browser.click("article[data-worker=\"probe-3\"] .in-flight a").await;
    browser.wait_for("#run-log[data-following=\"true\"]").await;
    browser.wait_for_text("#run-log", "probe-3: stdout line 4 of 4").await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    browser.wait_for_text("#log-state", "complete").await;
    let explicit = browser.text("tr[data-field=\"duration_ms\"]").await.unwrap_or_default();
    assert!(explicit.contains("3000") && explicit.contains("explicit"), "an explicit argument: {explicit:?}");

    // The ledger's filters: only probe-3's run.
    browser.goto(&format!("{}/#/runs?worker=probe-3", stack.base)).await;
    browser.wait_for("#ledger tr[data-worker=\"probe-3\"][data-state=\"succeeded\"]").await;
    assert!(browser.find("#ledger tr[data-worker=\"probe-1\"]").await.is_none(), "the worker filter applies");

    // Cancel from the panel: the run in flight ends `cancelled`.
    browser.click("nav.views a[data-nav=\"workers\"]").await;
    browser
        .wait("Run of probe-1 to be enabled again", || async { browser.is_enabled(run_button).await?.then_some(()) })
        .await;
    browser.click(run_button).await;
    browser.click("article[data-worker=\"probe-1\"] .in-flight[data-state=\"running\"] button.cancel").await;
    browser.wait_for("article[data-worker=\"probe-1\"] .last[data-state=\"cancelled\"]").await;

    // When the last daemon stops, Run is disabled with the reason and the health strip turns red.
    stack.daemon.signal(nix::sys::signal::Signal::SIGTERM);
    browser.wait_for_text("article[data-worker=\"probe-3\"] .reason", "No daemon is alive").await;
    assert_eq!(browser.is_enabled(run_button).await, Some(false), "Run is disabled");
    browser.wait_for("#health li[data-check=\"daemons\"][data-status=\"down\"]").await;
    browser.screenshot("workers-no-daemon").await;

    let allowed = browser.assert_no_console_errors(&[409, 400]).await;
    assert_eq!(allowed.len(), 2, "exactly the provoked 409 and 400 were logged: {allowed:#?}");
    browser.close().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_controls_and_an_admin_override_is_audited_and_effective() {
    let stack = Stack::start(Kind::Sqlite, Access::Tokens).await;
    let browser = Browser::start("tokens", stack.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/workers", stack.base)).await;

    // Signed out: the panel asks for a token and reads nothing else.
    browser.wait_for("#who[data-role=\"none\"]").await;
    browser.wait_for_text("main h1", "Sign in").await;
    browser.type_into("#token-input", "scr_not_a_token_of_this_api").await;
    browser.click("#signin-form button[type=\"submit\"]").await;
    browser.wait_for_text("#signin-error", "not one this API accepts").await;
    sign_in(&browser, VIEWER_TOKEN, "viewer").await;
    browser.wait_for("article[data-worker=\"probe-1\"] .queue").await;
    browser.wait_for("#health li[data-check=\"database\"][data-status=\"ok\"]").await;

    // A run in flight (started by someone else): the viewer sees it live, but no Run and no Cancel.
    let (status, run) = stack.post("/api/workers/probe-1/runs", json!({"options": {"duration_ms": 60000}})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    browser.wait_for("article[data-worker=\"probe-1\"] .in-flight").await;
    assert!(browser.find_all("button.run").await.is_empty(), "a viewer sees no Run button");
    assert!(browser.find_all("button.cancel").await.is_empty(), "a viewer sees no Cancel button");
    assert!(browser.find_all(".run-options").await.is_empty(), "a viewer sees no run form");
    assert!(browser.find_all("button.chore").await.is_empty(), "a viewer sees no chore buttons");
    // Readiness and disagreements are for everyone to read.
    browser.wait_for_text("article[data-worker=\"probe-3\"] .readiness-line", NOT_READY).await;
    browser.wait_for_text("article[data-worker=\"probe-3\"] .disagreements", DISAGREEMENTS[0]).await;
    browser.screenshot("viewer-workers").await;
    let (status, _) = stack.post(&format!("/api/runs/{}/cancel", run["id"].as_str().expect("id")), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    browser.wait_for("article[data-worker=\"probe-1\"] .last[data-state=\"cancelled\"]").await;

    browser.goto(&format!("{}/#/overrides/probe-1", stack.base)).await;
    browser.wait_for_text("main", "needs the admin role").await;
    assert!(browser.find("#override-form").await.is_none(), "a viewer sees no override form");

    // An admin sets a partial override with a reason: it shows in the audit trail and the effective config.
    browser.click("#session button.link").await;
    browser.wait_for("#who[data-role=\"none\"]").await;
    sign_in(&browser, ADMIN_TOKEN, "admin").await;
    browser.goto(&format!("{}/#/overrides/probe-1", stack.base)).await;
    browser.wait_for("#override-form").await;
    browser.wait_for_text("#audit-title", "Audit trail").await;
    browser.type_into("#ov-opt-duration_ms", "1234").await;
    browser.click("#override-form button[type=\"submit\"]").await;
    browser.wait_for_text("#override-alert", "Give a reason").await;
    browser.type_into("#ov-reason", "e2e: a shorter probe for the demo").await;
    browser.click("#override-form button[type=\"submit\"]").await;
    let entry = browser.wait_for_text("#audit tbody tr", "e2e: a shorter probe for the demo").await;
    assert!(entry.contains("e2e-admin") && entry.contains("duration_ms") && entry.contains("1234"), "{entry:?}");
    let effective = browser.wait_for_text("#effective tr[data-field=\"duration_ms\"]", "1234").await;
    assert!(effective.contains("override"), "the effective value is marked override: {effective:?}");
    browser.screenshot("overrides").await;

    browser.click("nav.views a[data-nav=\"workers\"]").await;
    let option =
        browser.wait_for_text("article[data-worker=\"probe-1\"] li[data-option=\"duration_ms\"]", "1234").await;
    assert!(option.contains("override"), "{option:?}");
    assert!(browser.find("article[data-worker=\"probe-1\"] button.run").await.is_some(), "an admin may run");

    // The quality probe's engine is not editable: the panel says where it comes from and links there.
    browser.goto(&format!("{}/#/overrides/probe-2", stack.base)).await;
    browser.wait_for_text(".engine-source", "LLM_CHECK cleaning rule").await;
    assert_eq!(browser.attr("#engine-source-link", "href").await.as_deref(), Some("/rules#llm-check"));
    browser.wait_for("#override-form").await;
    assert!(browser.find("#ov-engine").await.is_none(), "no engine field for an engine configured elsewhere");

    // Its run reports the model it really used, which is not the one resolved here: the run view says so.
    let (status, run) = stack.post("/api/workers/probe-2/runs", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    browser.goto(&format!("{}/#/runs/{}", stack.base, run["id"].as_str().expect("id"))).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    let model =
        browser.wait_for_text("#run-config tr[data-field=\"model\"][data-differs=\"true\"]", REPORTED_MODEL).await;
    assert!(model.contains("big-model") && model.contains("differs"), "resolved and reported models: {model:?}");
    let note = browser.wait_for_text("#reported-differs", "different model").await;
    assert!(!note.contains("engine"), "only the model differs: {note:?}");
    browser.screenshot("run-reported-config").await;

    // A narrow screen: one column, nothing wider than the window.
    browser.client.set_window_size(390, 844).await.expect("resize");
    browser.goto(&format!("{}/#/workers", stack.base)).await;
    browser.wait_for("article[data-worker=\"probe-3\"]").await;
    let fits = browser.js("return document.documentElement.scrollWidth <= window.innerWidth + 1;", vec![]).await;
    assert_eq!(fits, json!(true), "no horizontal scrolling on a narrow screen");
    browser.screenshot("workers-narrow").await;

    // Only the expected 401s (GET /api/me signed out, and with the refused token) are in the console.
    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    stack.stop().await;
}

/// An operator schedules a worker through its card's form (the live preview shows three fire times, a bad
/// expression the API's sentence under the field), sees it listed with its next fires, pauses it with a reason; a
/// schedule made elsewhere reaches its card live. A pipeline is run from its card and its run shows each step's
/// run; a second run while one is in flight shows the 409 sentence, and the run in flight is cancelled from its
/// detail. A run that is retried shows its chain and when the retry waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_schedules_a_worker_with_a_live_preview_and_runs_a_pipeline() {
    let stack = Stack::start(Kind::Sqlite, Access::AnonymousAdmin).await;
    let browser = Browser::start("schedules", stack.db.dir.path(), 1280, 1000).await;
    browser.goto(&format!("{}/#/workers", stack.base)).await;
    browser.wait_for("#who[data-role=\"admin\"]").await;
    let card = "article[data-worker=\"probe-1\"]";
    browser.wait_for_text(&format!("{card} section.schedules"), "No schedule.").await;

    // The form's live preview: the API's sentence under the field for a bad expression, three times for a good one.
    browser.click(&format!("{card} details.schedule-new summary")).await;
    browser.type_into("#worker-probe-1-sched-cron", "61 * * * *").await;
    let error = browser.wait_for_text("#worker-probe-1-sched-cron-error", "minute 61 is out of range").await;
    assert!(error.contains("61 * * * *"), "the sentence names the expression: {error:?}");
    browser.type_into("#worker-probe-1-sched-cron", "0 3 * * *").await;
    browser.type_into("#worker-probe-1-sched-zone", "Europe/Berlin").await;
    let previewed = browser
        .wait("three fire times in the preview", || async {
            let times = browser.find_all("#worker-probe-1-sched-preview ol.upcoming li").await;
            let text = browser.text("#worker-probe-1-sched-preview").await?;
            (times.len() == 3 && text.contains("Europe/Berlin")).then_some(text)
        })
        .await;
    assert!(previewed.contains("03:00:00 Europe/Berlin"), "the fires in the schedule's zone: {previewed:?}");
    assert_eq!(browser.attr("#worker-probe-1-sched-cron-error", "hidden").await.as_deref(), Some("true"));
    browser.screenshot("schedule-form").await;
    browser.type_into("#worker-probe-1-sched-name", "nightly-probe").await;
    browser.type_into("#worker-probe-1-sched-opt-duration_ms", "500").await;
    browser.click(&format!("{card} .schedule-form button[type=\"submit\"]")).await;
    browser.wait_for_text("#worker-probe-1-sched-alert", "Give a reason").await;
    browser.type_into("#worker-probe-1-sched-reason", "e2e: a nightly probe").await;
    browser.click(&format!("{card} .schedule-form button[type=\"submit\"]")).await;

    // Listed in the worker's card, with its next three fires as the server computed them.
    let item = format!("{card} li.schedule[data-schedule=\"nightly-probe\"]");
    let listed = browser.wait_for_text(&format!("{item}[data-enabled=\"true\"]"), "0 3 * * *").await;
    for part in ["Europe/Berlin", "enabled", "duration_ms=500", "overlap skip", "Not fired yet."] {
        assert!(listed.contains(part), "{part:?} is missing from {listed:?}");
    }
    assert_eq!(browser.find_all(&format!("{item} ol.upcoming li")).await.len(), 3, "three fire times");
    let shown = stack.get("/api/schedules/nightly-probe").await.expect("the schedule");
    let first = browser.attr(&format!("{item} ol.upcoming li"), "data-at").await;
    assert_eq!(first.as_deref(), shown["upcoming"][0].as_str(), "the server's fire times");
    browser.screenshot("schedule-listed").await;

    // Paused with a reason, asked for as the override form asks for one.
    browser.click(&format!("{item} button.schedule-pause")).await;
    browser.click(&format!("{item} form.schedule-reason button[type=\"submit\"]")).await;
    browser.wait_for_text(&format!("{item} .alert"), "Give a reason").await;
    browser.type_into(&format!("{item} .reason-input"), "e2e: not tonight").await;
    browser.click(&format!("{item} form.schedule-reason button[type=\"submit\"]")).await;
    let paused = browser.wait_for_text(&format!("{item}[data-enabled=\"false\"]"), "paused").await;
    assert!(paused.contains("nothing fires until resumed"), "{paused:?}");
    assert!(browser.find(&format!("{item} button.schedule-resume")).await.is_some(), "Resume is offered");
    let audit = stack.get("/api/schedules/nightly-probe/audit").await.expect("the audit trail");
    assert_eq!((audit[0]["action"].as_str(), audit[0]["reason"].as_str()), (Some("pause"), Some("e2e: not tonight")));

    // A schedule made elsewhere reaches its worker's card by itself (a `schedule` event).
    let made = json!({"name": "made-elsewhere", "worker": "probe-2", "cron": "@daily", "reason": "e2e: by the API"});
    let (status, body) = stack.post("/api/schedules", made).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    browser.wait_for("article[data-worker=\"probe-2\"] li.schedule[data-schedule=\"made-elsewhere\"]").await;

    // A pipeline run from its card: its detail lists each step with its run.
    browser.click("nav.views a[data-nav=\"pipelines\"]").await;
    let pipeline = "article[data-pipeline=\"probes\"]";
    let steps = browser.wait_for_text(&format!("{pipeline} ol.steps"), "probe-2").await;
    assert!(steps.contains("probe-1"), "{steps:?}");
    browser.wait_for_text(&format!("{pipeline} .last"), "Never run.").await;
    browser.click(&format!("{pipeline} button.run")).await;
    browser.click(&format!("{pipeline} .last a")).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    for step in ["0", "1"] {
        browser.wait_for(&format!("#pipeline-steps tr[data-step=\"{step}\"][data-state=\"succeeded\"] a")).await;
    }
    let rows = browser.text("#pipeline-steps tbody").await.unwrap_or_default();
    assert!(rows.contains("probe-1") && rows.contains("probe-2"), "both steps: {rows:?}");
    browser.screenshot("pipeline-run").await;
    // A step's run says which pipeline run and step it is.
    browser.click("#pipeline-steps tr[data-step=\"1\"] a").await;
    let lineage = browser.wait_for_text("#run-lineage", "step 2").await;
    assert!(lineage.contains("pipeline run"), "{lineage:?}");

    // A run in flight (started elsewhere): Run is disabled with the reason; a stale panel that presses it anyway
    // gets the 409 sentence, and the run in flight is cancelled from its detail.
    let long = json!({"arguments": {"probe-1": {"options": {"duration_ms": 30000}}}});
    let (status, body) = stack.post("/api/pipelines/probes/runs", long).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    browser.click("nav.views a[data-nav=\"pipelines\"]").await;
    browser.wait_for_text(&format!("{pipeline} .reason"), "in flight").await;
    let run_button = format!("{pipeline} button.run");
    assert_eq!(browser.is_enabled(&run_button).await, Some(false), "Run is disabled");
    browser
        .js(
            "const b = document.querySelector(arguments[0]); b.disabled = false; b.click(); return true;",
            vec![json!(run_button)],
        )
        .await;
    let alert = browser.wait_for_text("#pipeline-probes-alert", "already has a run in flight").await;
    assert!(alert.contains(body["id"].as_str().expect("its id")), "the 409 names the run in flight: {alert:?}");
    browser.click("#pipeline-probes-alert a").await;
    browser.wait_for(".view-head[data-state=\"running\"]").await;
    browser.click("#pipeline-cancel").await;
    browser.wait_for(".view-head[data-state=\"cancelled\"]").await;

    // A run that fails is retried after a backoff: both attempts show the chain, the retry when it may start.
    let failing = json!({"options": {"exit_code": 3, "duration_ms": 20},
        "retry": {"max_attempts": 2, "initial_delay_seconds": 120}});
    let (status, run) = stack.post("/api/workers/probe-3/runs", failing).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    browser.goto(&format!("{}/#/runs/{}", stack.base, run["id"].as_str().expect("id"))).await;
    browser
        .wait("the retry in the chain", || async { (browser.find_all("#run-chain li").await.len() == 2).then_some(()) })
        .await;
    browser.wait_for_text("#run-lineage", "1 of 2").await;
    browser.click("#run-chain li[data-attempt=\"2\"] a").await;
    let retry = browser.wait_for_text("#run-lineage", "2 of 2").await;
    assert!(retry.contains("waits until") && retry.contains("this run"), "{retry:?}");
    browser.screenshot("run-retry-chain").await;

    browser.assert_no_console_errors(&[400, 409]).await;
    browser.close().await;
    stack.stop().await;
}

async fn sign_in(browser: &Browser, token: &str, role: &str) {
    browser.type_into("#token-input", token).await;
    browser.click("#signin-form button[type=\"submit\"]").await;
    browser.wait_for(&format!("#who[data-role={role:?}]")).await;
}
