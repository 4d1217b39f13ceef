//! Helpers of the daemon's multi-process tests: a configuration with a catalogue of probe workers (the real
//! `scrinalia-demo-worker`), starting daemons on it, run requests made as the API makes them, and the probes'
//! own ledger of what executed when.

use std::{path::PathBuf, time::Duration};

use scrinalia_shared::{
    ApiStore, ExplicitArgs, Run, RunState, Settings, Store, config::DaemonSettings, runs::RunRequest,
};
pub use scrinalia_testkit::probes::{ProbeEvent, probe, probe_events, with_defaults};
use serde_json::Value;
use uuid::Uuid;

use crate::{ConfigFile, Process, TestDb, demo_worker, eventually};

/// The W3C trace context every test request carries.
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A configuration file for daemons of one test, and what it configures.
pub struct Setup {
    /// The file.
    pub config: PathBuf,
    /// The same, loaded.
    pub settings: Settings,
    /// The probes' ledger (`SCRINALIA_PROBE_LOG`).
    pub probe_log: PathBuf,
    /// The run-log store's folder.
    pub run_logs: PathBuf,
    /// The scratch folder.
    pub dir: PathBuf,
}

impl Setup {
    /// Writes the configuration of `config` (built from [`Setup::config`]) to `<scratch>/config.toml`.
    pub fn with(db: &TestDb, config: ConfigFile) -> Self {
        let dir = db.dir.path().to_path_buf();
        let path = dir.join("config.toml");
        let settings = config.load(&path).unwrap_or_else(|e| panic!("{e:#}"));
        let (probe_log, run_logs) = (dir.join("probes.jsonl"), settings.object_store.path.clone());
        Self { config: path, settings, probe_log, run_logs, dir }
    }

    /// The tests' configuration on `db`: the tests' daemon settings (see `test_daemon`; `edit` changes them),
    /// the probes' ledger and demo data in the scratch folder, and a catalogue of `probe-1` and `probe-2`
    /// (timeout 120 s) and `probe-3` (timeout 2 s). More workers can be appended.
    pub fn config(db: &TestDb, edit: impl FnOnce(&mut DaemonSettings)) -> ConfigFile {
        let dir = db.dir.path();
        let bin = demo_worker();
        db.config()
            .test_daemon(|d| {
                d.worker_env = [
                    ("SCRINALIA_PROBE_LOG".to_owned(), dir.join("probes.jsonl").display().to_string()),
                    ("SCRINALIA_DEMO_DATA".to_owned(), dir.join("demo").display().to_string()),
                ]
                .into();
                edit(d);
            })
            .with(|f| f.database.max_connections = 6)
            .workers([probe(&bin, "probe-1", 120), probe(&bin, "probe-2", 120), probe(&bin, "probe-3", 2)])
    }

    /// [`Setup::with`] the tests' configuration, its daemon settings changed by `edit`.
    pub fn new(db: &TestDb, edit: impl FnOnce(&mut DaemonSettings)) -> Self {
        Self::with(db, Self::config(db, edit))
    }

    /// Starts a daemon on this configuration; its output goes to `<dir>/<name>.log`. Readiness is the
    /// caller's to wait for (a test that freezes or kills it at once must not wait).
    pub fn start_daemon(&self, name: &str, env: &[(&str, &str)]) -> Process {
        let config = self.config.display().to_string();
        crate::start("scrinalia-daemon", name, &self.dir, &["--config", &config], env)
    }

    /// Requests a run of `worker` with explicit `options`, as the API would.
    pub async fn request(&self, db: &ApiStore, worker: &str, options: Value) -> Run {
        let options = options.as_object().cloned().unwrap_or_default().into_iter().collect();
        let request = RunRequest {
            worker: worker.to_owned(),
            requested_by: "test".to_owned(),
            arguments: ExplicitArgs { options, ..ExplicitArgs::default() },
            trace_context: Some(TRACEPARENT.to_owned()),
            tags: Vec::new(),
        };
        db.request_run(&self.settings.catalogue, request).await.unwrap_or_else(|e| panic!("request {worker}: {e}"))
    }

    /// The probes' ledger so far.
    pub fn probe_events(&self) -> Vec<ProbeEvent> {
        probe_events(&self.probe_log)
    }

    /// The `run` execution lines of one run: its start and, if it ended by itself, its end.
    pub fn probe_run(&self, run: Uuid) -> (Option<ProbeEvent>, Option<ProbeEvent>) {
        let id = run.to_string();
        let events: Vec<ProbeEvent> =
            self.probe_events().into_iter().filter(|e| e.verb == "run" && e.run_id.as_deref() == Some(&id)).collect();
        let start = events.iter().find(|e| e.event == "start").cloned();
        let end = events.iter().find(|e| e.event == "end").cloned();
        (start, end)
    }

    /// Waits for the probe of `run` to have started; returns its start line.
    pub async fn probe_started(&self, run: Uuid, timeout: Duration) -> ProbeEvent {
        eventually(timeout, "the probe's start line", || async { self.probe_run(run).0 }).await
    }

    /// Every line the run's log chunks hold, in order.
    pub fn run_log(&self, run: &Run) -> String {
        let Some(prefix) = &run.log_key else { return String::new() };
        let folder = self.run_logs.join(prefix);
        let mut chunks: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        chunks.sort();
        chunks.iter().filter_map(|c| std::fs::read_to_string(c).ok()).collect()
    }
}

/// Waits until the run satisfies `done`; returns it.
pub async fn wait_run(db: &Store, run: Uuid, timeout: Duration, what: &str, done: impl Fn(&Run) -> bool) -> Run {
    eventually(timeout, what, || async { db.get_run(run).await.ok().flatten().filter(|r| done(r)) }).await
}

/// Waits until the run reaches a terminal state.
pub async fn wait_finished(db: &Store, run: Uuid, timeout: Duration) -> Run {
    wait_run(db, run, timeout, "the run to finish", |r| r.state.is_terminal()).await
}

/// Waits until the run is running and its worker has been started.
pub async fn wait_started(db: &Store, run: Uuid, timeout: Duration) -> Run {
    wait_run(db, run, timeout, "the run to start", |r| r.state == RunState::Running && r.started_at.is_some()).await
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// `CLOCK_REALTIME` now, in ns (comparable with the probes' `at_ns` and the database clock on this host).
pub fn realtime_ns() -> i128 {
    i128::from(chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default())
}

/// Each line of a demo archive worker's results journal under the demo data folder `data`: (document, run).
pub fn results_journal(data: &std::path::Path, worker: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(data.join(format!("results/{worker}.jsonl"))).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (v["document"].as_str().unwrap_or_default().to_owned(), v["run"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// A database time in realtime ns.
pub fn at_ns(t: chrono::DateTime<chrono::Utc>) -> i128 {
    i128::from(t.timestamp_nanos_opt().unwrap_or_default())
}

/// The daemon-scoped `gpu` resource, as a catalogue declares a GPU of each host (each daemon gives its count in
/// `daemon.resources`).
pub fn daemon_gpu() -> scrinalia_shared::ResourceSpec {
    scrinalia_shared::ResourceSpec {
        name: "gpu".into(),
        capacity: 0,
        description: Some("a GPU of the host".into()),
        scope: scrinalia_shared::ResourceScope::Daemon,
        starts_per_minute: None,
        preempt_after_seconds: None,
        preempt_grace_seconds: None,
    }
}
