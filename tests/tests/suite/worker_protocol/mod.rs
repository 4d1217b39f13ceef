//! The worker protocol as `scrinalia-demo-worker` speaks it, run as a real process: the demo catalogue loads and
//! leaves to the code what the code declares, `describe` reports each worker's declarations and `check` its
//! readiness, every run announces its configuration first, the quality validator follows its cleaning rule, the
//! archive workers form a pipeline whose queues shrink after a run (and grow as documents arrive) and stop
//! cleanly on SIGTERM, the conflict judge says why its queue is unmeasurable, and the probes do exactly what
//! their options ask and record every execution. Build the binary first: `cargo build -p scrinalia-demo-worker`.
//! The scratch folder and the output readers are here, with the refusals every worker shares; the archive
//! workers' tests and the probes' have a file each.

mod archive;
mod probes;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Output, Stdio},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use scrinalia_testkit::probes::whole_lines;
use scrinalia_tests::bin_path;
use serde_json::{Value, json};
use tempfile::TempDir;

/// In pipeline order, as deploy/demo.toml lists them.
const ARCHIVE_WORKERS: [&str; 9] = [
    "transfer",
    "language-detect",
    "entity-extract",
    "tag-suggest",
    "topic-cluster",
    "summarize",
    "embed",
    "conflict-judge",
    "quality-validator",
];

/// A scratch data folder and probe log for one test.
struct Scratch {
    dir: TempDir,
}

impl Scratch {
    fn new() -> Self {
        Self { dir: tempfile::Builder::new().prefix("scrinalia-worker-").tempdir().expect("a scratch folder") }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("demo")
    }

    fn probe_log(&self) -> PathBuf {
        self.dir.path().join("probes.jsonl")
    }

    /// The staging schedule (`staging.json`), after `edit`; the data folder is set up first if need be.
    fn reschedule(&self, edit: impl FnOnce(&mut Value)) -> Value {
        let path = self.data().join("staging.json");
        if !path.exists() {
            self.count("transfer");
        }
        let mut schedule: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read staging.json")).expect("JSON");
        edit(&mut schedule);
        std::fs::write(&path, schedule.to_string()).expect("write staging.json");
        schedule
    }

    /// No more documents arrive in staging than those there now: the test may take as long as it likes.
    fn freeze_arrivals(&self) {
        self.reschedule(|s| s["every_seconds"] = json!(1_000_000_000));
    }

    /// Documents arrive as if `seconds` had passed (at the demo's pace, one every 20 s).
    fn advance(&self, seconds: u64) {
        self.reschedule(|s| {
            s["every_seconds"] = json!(20);
            s["started_at"] = json!(s["started_at"].as_u64().expect("started_at") - seconds);
        });
    }

    fn write_rules(&self, rules: &Value) {
        self.count("transfer");
        std::fs::write(self.data().join("rules.json"), rules.to_string()).expect("write rules.json");
    }

    /// The single JSON object a verb prints.
    fn answer(&self, args: &[&str]) -> Value {
        let objects = json_lines(&self.ok(args).stdout);
        assert_eq!(objects.len(), 1, "{args:?} prints one object: {objects:?}");
        objects.into_iter().next().expect("one object")
    }

    /// Runs `worker` over everything pending, without pacing.
    fn run_all(&self, worker: &str) -> Vec<Value> {
        json_lines(&self.ok(&[worker, "run", "--delay_ms", "0"]).stdout)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin_path("scrinalia-demo-worker"));
        command
            .args(args)
            .env("SCRINALIA_DEMO_DATA", self.data())
            .env("SCRINALIA_PROBE_LOG", self.probe_log())
            .env_remove("TRACEPARENT")
            .stdin(Stdio::null());
        command
    }

    fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap_or_else(|e| panic!("run the demo worker {args:?}: {e}"))
    }

    /// Runs to completion and insists on exit status 0.
    fn ok(&self, args: &[&str]) -> Output {
        let output = self.output(args);
        assert!(output.status.success(), "{args:?} failed: {}", describe(&output));
        output
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start the demo worker {args:?}: {e}"))
    }

    /// The single JSON object `count-pending` prints.
    fn count(&self, worker: &str) -> Value {
        self.answer(&[worker, "count-pending"])
    }

    fn pending(&self, worker: &str) -> u64 {
        let count = self.count(worker);
        count["pending"].as_u64().unwrap_or_else(|| panic!("{worker}: not a pending count: {count}"))
    }

    /// The probe log's events (its whole lines: a probe may be writing the last one as it is read).
    fn probe_events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.probe_log()).unwrap_or_default();
        whole_lines(&text)
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad probe log line {l:?}: {e}")))
            .collect()
    }

    /// Waits until the probe with `pid` has recorded its start (so its signal handling is in place).
    fn await_probe_start(&self, pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.probe_events().iter().any(|e| e["event"] == "start" && e["pid"] == pid) {
            assert!(Instant::now() < deadline, "probe {pid} never recorded its start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every stdout line that is a JSON object.
fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

/// The `config` object of a run's first line.
fn config_line(objects: &[Value]) -> &Value {
    let first = objects.first().expect("a first line");
    first.get("config").unwrap_or_else(|| panic!("the first line is not a config line: {first}"))
}

fn progress(objects: &[Value]) -> Vec<(u64, u64)> {
    objects
        .iter()
        .filter_map(|o| o.get("progress"))
        .map(|p| (p["done"].as_u64().expect("progress.done"), p["total"].as_u64().expect("progress.total")))
        .collect()
}

fn result(objects: &[Value]) -> &Value {
    let results: Vec<&Value> = objects.iter().filter_map(|o| o.get("result")).collect();
    assert_eq!(results.len(), 1, "exactly one result line: {objects:?}");
    results[0]
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap_or_else(|e| panic!("send {signal}: {e}"));
}

/// Waits for `child` to exit, failing the test after a generous timeout.
fn wait(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn demo_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml")
}

#[test]
fn unknown_workers_verbs_and_options_are_refused_with_status_two_and_a_sentence() {
    let scratch = Scratch::new();
    for (args, says) in [
        (&["no-such-worker", "run"][..], "no worker called"),
        (&["embed", "dance"][..], "not a verb"),
        (&["embed", "run", "--colour", "red"][..], "has no option \"colour\""),
        (&["probe-1", "run", "--duration_ms", "soon"][..], "must be a whole number"),
        (&["embed", "run", "--batch_size", "0"][..], "must be at least 1"),
        (&["transfer", "check", "--delay_ms", "60001"][..], "must be at most 60000"),
        (&["probe-1", "run", "--exit_code", "-1"][..], "must be at least 0"),
        (&[][..], "a worker name and a verb"),
    ] {
        let out = scratch.output(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{args:?}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{args:?}: nothing on the protocol channel");
    }
}
