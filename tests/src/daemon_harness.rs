//! Helpers of the daemon's multi-process tests: a configuration with a catalogue of probe workers (the real
//! `scrinalia-demo-worker`), starting daemons on it, run requests resolved as the API resolves them, and the
//! probes' own ledger of what executed when.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use scrinalia_shared::{
    Database, ExplicitArgs, Settings,
    db::{NewRun, Run, RunState},
    resolve,
};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{TestDb, bin_path, eventually, process::Process};

/// The daemon settings of the tests: a short lease so that fencing and recovery take seconds.
const DAEMON_DEFAULTS: [(&str, &str); 9] = [
    ("capacity", "3"),
    ("lease_seconds", "3"),
    ("poll_seconds", "5"),
    ("heartbeat_seconds", "1"),
    ("gone_after_seconds", "6"),
    ("cancel_grace_seconds", "1"),
    ("drain_seconds", "5"),
    ("queue_count_interval_seconds", "3600"),
    ("queue_count_timeout_seconds", "10"),
];

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
    /// Writes the configuration: `daemon` overrides the test defaults (TOML values), `extra_workers` is appended
    /// to the catalogue (TOML `[[workers]]` tables). The catalogue has `probe-1` and `probe-2` (timeout 120 s)
    /// and `probe-3` (timeout 2 s).
    pub fn new(db: &TestDb, daemon: &[(&str, &str)], extra_workers: &str) -> Self {
        let dir = db.dir.path().to_path_buf();
        let (probe_log, run_logs) = (dir.join("probes.jsonl"), dir.join("run-logs"));
        let mut daemon_keys: Vec<(&str, &str)> =
            DAEMON_DEFAULTS.iter().filter(|(k, _)| !daemon.iter().any(|(o, _)| o == k)).copied().collect();
        daemon_keys.extend_from_slice(daemon);
        let daemon_toml: String = daemon_keys.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
        let bin = bin_path("scrinalia-demo-worker");
        let toml = format!(
            r#"[database]
url = "{url}"
max_connections = 6

[daemon]
{daemon_toml}
[daemon.worker_env]
SCRINALIA_PROBE_LOG = "{probe_log}"
SCRINALIA_DEMO_DATA = "{demo}"

[object_store]
kind = "local"
path = "{run_logs}"

[telemetry]
log_filter = "info"

{probes}
{extra_workers}
"#,
            url = db.url,
            probe_log = probe_log.display(),
            demo = dir.join("demo").display(),
            run_logs = run_logs.display(),
            probes = probe_catalogue(&bin),
        );
        let settings = crate::settings_from(&dir, &toml);
        Self { config: dir.join("config.toml"), settings, probe_log, run_logs, dir }
    }

    /// Starts a daemon on this configuration; its output goes to `<dir>/<name>.log`.
    pub fn start_daemon(&self, name: &str, env: &[(&str, &str)]) -> Process {
        let config = self.config.display().to_string();
        Process::start("scrinalia-daemon", name, &self.dir, &["--config", &config], env)
    }

    /// Inserts a request for `worker` with explicit `options`, resolved as the API would.
    pub async fn request(&self, db: &Database, worker: &str, options: Value) -> Run {
        let spec =
            self.settings.catalogue.worker(worker).unwrap_or_else(|| panic!("{worker} is not in the test catalogue"));
        let options = options.as_object().cloned().unwrap_or_default().into_iter().collect();
        let explicit = ExplicitArgs { options, ..ExplicitArgs::default() };
        let config = resolve(&self.settings.catalogue, spec, &explicit, None).unwrap_or_else(|e| panic!("{e}"));
        let new = NewRun {
            id: Uuid::now_v7(),
            worker: worker.to_owned(),
            requested_by: "test".to_owned(),
            arguments: explicit,
            config,
            trace_context: Some(TRACEPARENT.to_owned()),
        };
        db.insert_run(&new).await.unwrap_or_else(|e| panic!("request {worker}: {e}"))
    }

    /// The probes' ledger so far.
    pub fn probe_events(&self) -> Vec<ProbeEvent> {
        std::fs::read_to_string(&self.probe_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
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

/// Probe worker declarations with every steering option.
fn probe_catalogue(bin: &Path) -> String {
    probe_workers(bin, &[("probe-1", 120), ("probe-2", 120), ("probe-3", 2)])
}

/// `[[workers]]` tables of probes (`probe-<n>`, each with its timeout in seconds) run by `bin` (the demo worker),
/// with every steering option, for `Setup::new`'s `extra_workers`.
pub fn probe_workers(bin: &Path, probes: &[(&str, u64)]) -> String {
    let options = r#"options = [
  { name = "duration_ms", type = "integer", default = 200 },
  { name = "exit_code", type = "integer" },
  { name = "crash", type = "boolean" },
  { name = "ignore_sigterm", type = "boolean" },
  { name = "progress_steps", type = "integer" },
  { name = "output_lines", type = "integer" },
  { name = "note", type = "string" },
]"#;
    probes
        .iter()
        .map(|(name, timeout)| {
            format!("[[workers]]\nname = \"{name}\"\ncommand = [\"{}\", \"{name}\"]\ntimeout_seconds = {timeout}\n{options}\n\n", bin.display())
        })
        .collect()
}

/// One line of the probes' ledger.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeEvent {
    /// `start` or `end`.
    pub event: String,
    /// The probe's name.
    pub worker: String,
    /// `run`, `count-pending` or `describe`.
    pub verb: String,
    /// The run, for `run`.
    pub run_id: Option<String>,
    /// The probe's pid.
    pub pid: i32,
    /// `CLOCK_REALTIME` ns.
    pub at_ns: i128,
    /// The `TRACEPARENT` it was given.
    pub traceparent: Option<String>,
    /// `exit` or `sigterm` (end lines).
    pub outcome: Option<String>,
    /// The exit status (end lines).
    pub exit_code: Option<i32>,
}

/// Waits until the run satisfies `done`; returns it.
pub async fn wait_run(db: &Database, run: Uuid, timeout: Duration, what: &str, done: impl Fn(&Run) -> bool) -> Run {
    eventually(timeout, what, || async { db.get_run(run).await.ok().flatten().filter(|r| done(r)) }).await
}

/// Waits until the run reaches a terminal state.
pub async fn wait_finished(db: &Database, run: Uuid, timeout: Duration) -> Run {
    wait_run(db, run, timeout, "the run to finish", |r| r.state.is_terminal()).await
}

/// Waits until the run is running and its worker has been started.
pub async fn wait_started(db: &Database, run: Uuid, timeout: Duration) -> Run {
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

/// A database time in realtime ns.
pub fn at_ns(t: chrono::DateTime<chrono::Utc>) -> i128 {
    i128::from(t.timestamp_nanos_opt().unwrap_or_default())
}
