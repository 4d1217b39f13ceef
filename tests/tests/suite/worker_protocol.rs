//! The worker protocol as `scrinalia-demo-worker` speaks it, run as a real process: the demo catalogue loads and
//! every option it declares is accepted, archive workers' queues shrink after a run and stop cleanly on SIGTERM,
//! the conflict judge says why its queue is unmeasurable, and the probes do exactly what their options ask and
//! record every execution. Build the binary first: `cargo build -p scrinalia-demo-worker`.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Output, Stdio},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use scrinalia_shared::Settings;
use scrinalia_tests::bin_path;
use serde_json::Value;
use tempfile::TempDir;

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
        let objects = json_lines(&self.ok(&[worker, "count-pending"]).stdout);
        assert_eq!(objects.len(), 1, "count-pending prints one object: {objects:?}");
        objects.into_iter().next().expect("one object")
    }

    fn pending(&self, worker: &str) -> u64 {
        let count = self.count(worker);
        count["pending"].as_u64().unwrap_or_else(|| panic!("{worker}: not a pending count: {count}"))
    }

    /// The probe log's events.
    fn probe_events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.probe_log()).unwrap_or_default();
        text.lines()
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
fn the_demo_configuration_loads_with_twelve_workers_in_catalogue_order() {
    let settings = Settings::load_from(Some(&demo_toml()), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = settings.catalogue.workers.iter().map(|w| w.name.as_str()).collect();
    let mut expected = ARCHIVE_WORKERS.to_vec();
    expected.extend(["probe-1", "probe-2", "probe-3"]);
    assert_eq!(names, expected);
    for worker in &settings.catalogue.workers {
        assert_eq!(worker.command, ["scrinalia-demo-worker", worker.name.as_str()]);
    }
    let validator = settings.catalogue.worker("quality-validator").expect("quality-validator");
    assert!(!validator.engine_configurable());
    assert_eq!(validator.engine_source_url.as_deref(), Some("/rules#llm-check"));
    assert_eq!(settings.daemon.worker_env.get("SCRINALIA_DEMO_DATA").map(String::as_str), Some("data/demo"));
    assert_eq!(settings.catalogue.model("ollama", "fast"), Some("llama3.2:1b"));
    assert_eq!(settings.database.url, "sqlite://data/scrinalia.sqlite");
}

#[test]
fn every_option_the_demo_catalogue_declares_is_accepted_by_its_worker() {
    let settings = Settings::load_from(Some(&demo_toml()), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new();
    for worker in &settings.catalogue.workers {
        let mut args: Vec<String> = worker.command[1..].to_vec();
        args.push("describe".to_owned());
        for (flag, value) in [("engine", &worker.engine), ("preset", &worker.preset)] {
            if let Some(value) = value {
                args.extend([format!("--{flag}"), value.clone()]);
            }
        }
        for option in &worker.options {
            let value = match &option.default {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => continue,
            };
            args.extend([format!("--{}", option.name), value]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let described = json_lines(&scratch.ok(&args).stdout);
        assert_eq!(described.len(), 1, "{}: describe prints one object", worker.name);
        assert_eq!(described[0]["engine"].as_str(), worker.engine.as_deref(), "{}", worker.name);
        assert_eq!(described[0]["preset"].as_str(), worker.preset.as_deref(), "{}", worker.name);
    }
}

#[test]
fn each_archive_worker_queue_shrinks_after_a_run() {
    let scratch = Scratch::new();
    for worker in ARCHIVE_WORKERS.iter().filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 60, "{worker} starts with the whole demo corpus pending");
        let out =
            scratch.ok(&[worker, "run", "--run-id", "r-1", "--limit", "25", "--batch_size", "10", "--delay_ms", "0"]);
        let objects = json_lines(&out.stdout);
        let steps = progress(&objects);
        assert_eq!(steps.last(), Some(&(25, 25)), "{worker}: progress ends at the total: {steps:?}");
        assert!(steps.iter().all(|(done, total)| done <= total && *total == 25), "{worker}: {steps:?}");
        let result = result(&objects);
        assert_eq!(result["processed"], 25, "{worker}: {result}");
        assert_eq!(result["failed"], 0, "{worker}: {result}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("processed doc-0001"), "{worker} logs on stderr");
        assert_eq!(scratch.pending(worker), 35, "{worker}: the queue fell by the documents processed");
        scratch.ok(&[worker, "run", "--delay_ms", "0"]);
        assert_eq!(scratch.pending(worker), 0, "{worker}: nothing is left after a full run");
    }
    let archived = std::fs::read_dir(scratch.data().join("archive")).expect("the archive folder").count();
    assert_eq!(archived, 60, "the transfer copied every staged document into the archive");
}

#[test]
fn different_workers_can_run_at_once_on_a_corpus_that_does_not_exist_yet() {
    let scratch = Scratch::new();
    let mut children: Vec<(&str, Child)> = ARCHIVE_WORKERS
        .iter()
        .map(|w| (*w, scratch.spawn(&[w, "run", "--delay_ms", "1", "--batch_size", "7"])))
        .collect();
    for (worker, child) in &mut children {
        let status = wait(child, Duration::from_secs(120));
        assert!(status.success(), "{worker} failed with {status:?}");
    }
    for worker in ARCHIVE_WORKERS.iter().filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 0, "{worker}");
    }
    assert_eq!(scratch.count("conflict-judge")["done"], 60);
}

#[test]
fn the_conflict_judge_queue_is_unmeasurable_and_its_done_count_grows() {
    let scratch = Scratch::new();
    let count = scratch.count("conflict-judge");
    let reason = count["unmeasurable"].as_str().expect("a reason");
    assert!(reason.contains("trigram") && reason.ends_with('.'), "a sentence saying why: {reason}");
    assert_eq!(count["done"], 0);
    assert!(count.get("pending").is_none());
    scratch.ok(&["conflict-judge", "run", "--limit", "7", "--delay_ms", "0"]);
    assert_eq!(scratch.count("conflict-judge")["done"], 7);
    let out = scratch.ok(&["conflict-judge", "run", "--delay_ms", "0"]);
    assert_eq!(result(&json_lines(&out.stdout))["processed"], 53);
    assert_eq!(scratch.count("conflict-judge")["done"], 60);
}

#[test]
fn an_archive_run_stops_after_the_current_document_on_sigterm() {
    let scratch = Scratch::new();
    let mut child = scratch.spawn(&["summarize", "run", "--delay_ms", "500", "--batch_size", "5"]);
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("processed doc-0001") {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("read stderr") > 0, "stderr ended before the first document");
    }
    signal(&child, Signal::SIGTERM);
    let status = wait(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(143), "stopped on SIGTERM: {status:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read stderr");
    assert!(rest.contains("stopped on SIGTERM"), "it says why it stopped: {rest}");
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout).expect("read stdout");
    let result = result(&json_lines(stdout.as_bytes())).clone();
    assert_eq!(result["stopped"], "SIGTERM");
    let processed = result["processed"].as_u64().expect("processed");
    assert!(processed >= 1, "the document in hand was finished: {result}");
    assert_eq!(scratch.pending("summarize"), 60 - processed, "every finished document kept its stamp");
}

#[test]
fn probes_report_progress_output_and_a_result_over_their_duration() {
    let scratch = Scratch::new();
    let started = Instant::now();
    let out = scratch.ok(&[
        "probe-1",
        "run",
        "--run-id",
        "r-7",
        "--duration_ms",
        "300",
        "--progress_steps",
        "3",
        "--output_lines",
        "5",
    ]);
    assert!(started.elapsed() >= Duration::from_millis(300), "the run lasts at least its duration");
    let objects = json_lines(&out.stdout);
    assert_eq!(progress(&objects), [(1, 3), (2, 3), (3, 3)]);
    assert_eq!(result(&objects)["processed"], 3);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let free_text = stdout.lines().filter(|l| serde_json::from_str::<Value>(l).is_err()).count();
    assert_eq!(free_text, 5, "five free-text lines on stdout:\n{stdout}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("stderr line").count(), 5);

    let quiet = scratch.ok(&["probe-2", "run", "--duration_ms", "0", "--progress_steps", "0", "--output_lines", "0"]);
    let objects = json_lines(&quiet.stdout);
    assert!(progress(&objects).is_empty());
    assert_eq!(String::from_utf8_lossy(&quiet.stdout).lines().count(), 1, "only the result line");
}

#[test]
fn probes_exit_with_the_status_they_are_given_and_crash_on_request() {
    let scratch = Scratch::new();
    let failed = scratch.output(&["probe-1", "run", "--exit_code", "3", "--duration_ms", "0"]);
    assert_eq!(failed.status.code(), Some(3), "{}", describe(&failed));
    assert!(json_lines(&failed.stdout).iter().all(|o| o.get("result").is_none()), "no result on failure");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("status 3"));

    let crashed = scratch.output(&["probe-2", "run", "--crash", "true", "--duration_ms", "50"]);
    assert_eq!(crashed.status.signal(), Some(Signal::SIGABRT as i32), "{}", describe(&crashed));

    let events = scratch.probe_events();
    let of = |worker: &str, event: &str| events.iter().filter(|e| e["worker"] == worker && e["event"] == event).count();
    assert_eq!((of("probe-1", "start"), of("probe-1", "end")), (1, 1));
    assert_eq!((of("probe-2", "start"), of("probe-2", "end")), (1, 0), "a crashed probe records no end");
    let end = events.iter().find(|e| e["event"] == "end").expect("an end event");
    assert_eq!(end["outcome"], "exit");
    assert_eq!(end["exit_code"], 3);
}

#[test]
fn a_probe_stops_on_sigterm_and_records_it() {
    let scratch = Scratch::new();
    let mut child = scratch.spawn(&["probe-3", "run", "--duration_ms", "600000"]);
    scratch.await_probe_start(child.id());
    signal(&child, Signal::SIGTERM);
    let status = wait(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(143));
    let events = scratch.probe_events();
    let end = events.iter().find(|e| e["event"] == "end").expect("an end event");
    assert_eq!(end["outcome"], "sigterm");
    assert_eq!(end["pid"], child.id());
}

#[test]
fn a_probe_told_to_ignore_sigterm_only_dies_of_sigkill() {
    let scratch = Scratch::new();
    let mut child = scratch.spawn(&["probe-1", "run", "--ignore_sigterm", "true", "--duration_ms", "600000"]);
    scratch.await_probe_start(child.id());
    signal(&child, Signal::SIGTERM);
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().expect("poll").is_none(), "SIGTERM did not stop it");
    signal(&child, Signal::SIGKILL);
    let status = wait(&mut child, Duration::from_secs(20));
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
    let events = scratch.probe_events();
    assert_eq!(events.iter().filter(|e| e["event"] == "start").count(), 1);
    assert!(events.iter().all(|e| e["event"] != "end"), "a killed probe records no end: {events:?}");
}

#[test]
fn probe_log_lines_carry_the_run_the_process_the_clock_the_trace_and_verbatim_arguments() {
    let scratch = Scratch::new();
    let nasty = r#"; rm -rf / $(x) 'quote' "dq""#;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    let child = scratch
        .command(&["probe-2", "run", "--run-id", "run-42", "--note", nasty, "--duration_ms", "0"])
        .env("TRACEPARENT", traceparent)
        .output()
        .expect("run the probe");
    assert!(child.status.success(), "{}", describe(&child));
    let events = scratch.probe_events();
    assert_eq!(events.len(), 2, "{events:?}");
    let (start, end) = (&events[0], &events[1]);
    assert_eq!(start["event"], "start");
    assert_eq!(start["worker"], "probe-2");
    assert_eq!(start["verb"], "run");
    assert_eq!(start["run_id"], "run-42");
    assert_eq!(start["traceparent"], traceparent);
    assert_eq!(start["pid"], end["pid"]);
    let at = |e: &Value| e["at_ns"].as_u64().map(u128::from).expect("at_ns");
    assert!(at(start) >= before && at(end) >= at(start), "CLOCK_REALTIME nanoseconds, in order");
    let args: Vec<&str> = start["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert_eq!(args[1..], ["probe-2", "run", "--run-id", "run-42", "--note", nasty, "--duration_ms", "0"]);
    assert_eq!(end["event"], "end");
    assert_eq!(end["outcome"], "exit");
    assert!(String::from_utf8_lossy(&child.stderr).contains("rm -rf"), "the note is only logged, never run");
}

#[test]
fn probes_describe_their_engine_and_have_nothing_pending() {
    let scratch = Scratch::new();
    let out = scratch.ok(&["probe-1", "describe", "--engine", "ollama", "--preset", "fast", "--model", "llama3.2:1b"]);
    let described = json_lines(&out.stdout);
    assert_eq!(described.len(), 1);
    assert_eq!(described[0]["engine"], "ollama");
    assert_eq!(described[0]["preset"], "fast");
    assert_eq!(described[0]["model"], "llama3.2:1b");
    assert_eq!(described[0]["endpoint"], Value::Null);
    assert_eq!(scratch.count("probe-3"), serde_json::json!({ "pending": 0 }));
    assert_eq!(scratch.pending("probe-3"), 0);
}

#[test]
fn unknown_workers_verbs_and_options_are_refused_with_status_two_and_a_sentence() {
    let scratch = Scratch::new();
    for (args, says) in [
        (&["no-such-worker", "run"][..], "no worker called"),
        (&["embed", "dance"][..], "not a verb"),
        (&["embed", "run", "--colour", "red"][..], "has no option \"colour\""),
        (&["probe-1", "run", "--duration_ms", "soon"][..], "must be a whole number"),
        (&[][..], "a worker name and a verb"),
    ] {
        let out = scratch.output(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{args:?}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{args:?}: nothing on the protocol channel");
    }
}
