//! The real API and daemon the panel is tested against, on a fresh database: three probes with everything the
//! panel shows, a pipeline of two of them, quick daemon timers, and either anonymous admin access or tokens; or
//! the demo's catalogue (`deploy/demo.toml`) for the workers overview.

use reqwest::StatusCode;
use scrinalia_shared::{Engine, OptionSpec, OptionType, Role, Settings, WorkerSpec, catalogue::PipelineSpec};
use scrinalia_testkit::config::option;
use scrinalia_tests::{
    ConfigFile, Kind, Process, TestDb,
    browser::{Browser, PATIENCE, workspace_root},
    daemon_harness::probe,
    demo_worker, eventually, free_port,
};
use serde_json::{Value, json};

use super::{ADMIN_TOKEN, NOT_READY, REPORTED_MODEL, VIEWER_TOKEN};

/// How the API lets callers in.
#[derive(Clone, Copy)]
pub(super) enum Access {
    /// Anonymous admin from loopback, as the demo configuration does.
    AnonymousAdmin,
    /// Tokens only: `e2e-viewer` and `e2e-admin`.
    Tokens,
}

/// The API, a daemon and their configuration on a fresh database.
pub(super) struct Stack {
    pub(super) db: TestDb,
    pub(super) base: String,
    http: reqwest::Client,
    token: Option<&'static str>,
    api: Process,
    pub(super) daemon: Process,
}

impl Stack {
    pub(super) async fn start(kind: Kind, access: Access) -> Self {
        Self::start_with(kind, access, Self::config).await
    }

    /// The demo's catalogue (`deploy/demo.toml`: its nine archive workers, engines, pipeline and resources) on
    /// the demo worker's data in the test's folder, with anonymous admin access as the demo has.
    pub(super) async fn start_demo(kind: Kind) -> Self {
        Self::start_with(kind, Access::AnonymousAdmin, Self::demo_config).await
    }

    /// The stack on the configuration `config` writes (the panel's, or the demo's, perhaps with more).
    pub(super) async fn start_with(kind: Kind, access: Access, config: fn(&TestDb, u16, Access) -> ConfigFile) -> Self {
        let db = TestDb::new(kind).await;
        let dir = db.dir.path().to_path_buf();
        let port = free_port();
        let config = config(&db, port, access);
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
    pub(super) fn config(db: &TestDb, port: u16, access: Access) -> ConfigFile {
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
        let config = db
            .config()
            .with(|f| {
                (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
                f.engines = engines.into_iter().map(|(name, engine)| (name.to_owned(), engine)).collect();
                f.pipelines = vec![PipelineSpec {
                    name: "probes".into(),
                    description: Some("Probe 1, then the quality probe.".into()),
                    steps: vec!["probe-1".into(), "probe-2".into()],
                    tags: Vec::new(),
                }];
                let d = &mut f.daemon;
                (d.capacity, d.lease_seconds, d.poll_seconds, d.heartbeat_seconds) = (3, 10, 1, 1);
                (d.gone_after_seconds, d.cancel_grace_seconds) = (5, 2);
                (d.queue_count_interval_seconds, d.queue_count_timeout_seconds) = (2, 10);
            })
            .workers([one, two, three]);
        Self::with_access(config, access)
    }

    fn demo_config(db: &TestDb, port: u16, access: Access) -> ConfigFile {
        let path = workspace_root().join("deploy/demo.toml");
        let demo = Settings::load_from(Some(&path), Vec::new()).unwrap_or_else(|e| panic!("deploy/demo.toml: {e}"));
        let bin = demo_worker();
        let workers: Vec<WorkerSpec> = demo
            .catalogue
            .workers
            .iter()
            .map(|w| {
                let mut spec = w.clone();
                spec.command[0] = bin.display().to_string();
                spec
            })
            .collect();
        let data = db.dir.path().join("demo").display().to_string();
        let config = db
            .config()
            .with(|f| {
                (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
                (f.engines, f.pipelines) = (demo.catalogue.engines.clone(), demo.catalogue.pipelines.clone());
                f.resources = demo.catalogue.resources.clone();
                let d = &mut f.daemon;
                (d.capacity, d.resources) = (demo.daemon.capacity, demo.daemon.resources.clone());
                d.worker_env = [("SCRINALIA_DEMO_DATA".to_owned(), data)].into();
                (d.lease_seconds, d.poll_seconds, d.heartbeat_seconds, d.gone_after_seconds) = (10, 1, 1, 5);
                (d.queue_count_interval_seconds, d.queue_count_timeout_seconds) = (2, 10);
            })
            .workers(workers);
        Self::with_access(config, access)
    }

    fn with_access(mut config: ConfigFile, access: Access) -> ConfigFile {
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

    pub(super) async fn get(&self, path: &str) -> Option<Value> {
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

    pub(super) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    pub(super) async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).json(&body);
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("a request to the API");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A browser of its own (`name` for its screenshots and logs) on the panel's workers view, where every
    /// visit starts.
    pub(super) async fn open_panel(&self, name: &str) -> Browser {
        let browser = Browser::start(name, self.db.dir.path(), 1280, 1000).await;
        browser.goto(&format!("{}/#/workers", self.base)).await;
        browser
    }

    /// Logs of both processes, for a failure message.
    pub(super) fn logs(&self) -> String {
        format!("--- api ---\n{}\n--- daemon ---\n{}", tail(&self.api.output()), tail(&self.daemon.output()))
    }

    pub(super) async fn stop(self) {
        drop(self.api);
        drop(self.daemon);
        self.db.cleanup().await;
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
