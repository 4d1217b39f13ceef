//! The worker protocol as `scrinalia-demo-worker` speaks it, run as a real process: the demo catalogue loads and
//! leaves to the code what the code declares, `describe` reports each worker's declarations and `check` its
//! readiness, every run announces its configuration first, the quality validator follows its cleaning rule, the
//! archive workers form a pipeline whose queues shrink after a run (and grow as documents arrive) and stop
//! cleanly on SIGTERM, the conflict judge says why its queue is unmeasurable, and the probes do exactly what
//! their options ask and record every execution. Build the binary first: `cargo build -p scrinalia-demo-worker`.

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
fn the_demo_configuration_loads_the_nine_archive_workers_in_pipeline_order_and_leaves_declarations_to_the_code() {
    let settings = Settings::load_from(Some(&demo_toml()), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = settings.catalogue.workers.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ARCHIVE_WORKERS, "no probes: tests declare their own");
    for worker in &settings.catalogue.workers {
        assert_eq!(worker.command, ["scrinalia-demo-worker", worker.name.as_str()]);
        assert!(worker.options.is_empty(), "{}: its options are declared by its code", worker.name);
        assert!(worker.engine.is_none() && worker.preset.is_none(), "{}: its engine comes from describe", worker.name);
    }
    assert_eq!(settings.catalogue.engines["ollama"].url.as_deref(), Some("http://127.0.0.1:11434"));
    assert_eq!(settings.catalogue.model("ollama", "fast"), None, "the presets are the code's");
    assert_eq!(settings.daemon.worker_env.get("SCRINALIA_DEMO_DATA").map(String::as_str), Some("data/demo"));
    assert_eq!(settings.database.url, "sqlite://data/scrinalia.sqlite");
}

#[test]
fn describe_reports_the_code_defaults_and_every_declared_option_is_accepted() {
    let settings = Settings::load_from(Some(&demo_toml()), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new();
    for worker in &settings.catalogue.workers {
        let name = worker.name.as_str();
        let mut args: Vec<String> = worker.command[1..].to_vec();
        args.push("describe".to_owned());
        let plain: Vec<&str> = args.iter().map(String::as_str).collect();
        let described = scratch.answer(&plain);
        for key in ["engine", "preset", "model", "endpoint", "source", "declared"] {
            assert!(described.get(key).is_some(), "{name}: describe has {key}: {described}");
        }
        let declared = &described["declared"];
        let options = declared["options"].as_array().unwrap_or_else(|| panic!("{name}: options: {declared}"));
        assert!(["batch_size", "delay_ms", "limit"].iter().all(|o| options.iter().any(|d| d["name"] == *o)), "{name}");
        for option in options {
            let kind = option["type"].as_str().expect("a type");
            let typed = match kind {
                "integer" => Value::is_i64,
                "number" => Value::is_number,
                "boolean" => Value::is_boolean,
                "string" => Value::is_string,
                other => panic!("{name}: unknown type {other}"),
            };
            for value in option.get("default").into_iter().chain(option["choices"].as_array().into_iter().flatten()) {
                assert!(typed(value), "{name}: {option}");
            }
            let Some(default) = option.get("default") else { continue };
            let text = default.as_str().map_or_else(|| default.to_string(), str::to_owned);
            args.extend([format!("--{}", option["name"].as_str().expect("a name")), text]);
        }
        if name == "quality-validator" {
            assert_eq!(described["source"]["reference"], "LLM_CHECK rule 2", "its engine comes from its rule");
        } else {
            assert_eq!(described["engine"], declared["engine"], "{name}: without flags, the code's default engine");
            assert_eq!(described["preset"], declared["preset"], "{name}");
        }
        if let (Some(engine), Some(preset)) = (declared["engine"].as_str(), declared["preset"].as_str()) {
            assert_eq!(described["model"], declared["presets"][engine][preset], "{name}: the preset's model");
            assert_eq!(described["source"], Value::Null, "{name}");
        }
        let with_defaults: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(scratch.answer(&with_defaults), described, "{name}: every declared default is accepted");
    }
    let tags = scratch.answer(&["tag-suggest", "describe", "--engine", "ollama", "--preset", "thorough"]);
    assert_eq!((&tags["preset"], &tags["model"]), (&json!("thorough"), &json!("qwen2.5:14b")), "flags are honoured");
    assert_eq!(tags["declared"]["preset"], "fast", "declared stays the code's default");
    let out = scratch.output(&["tag-suggest", "describe", "--max_tags", "4"]);
    assert_eq!(out.status.code(), Some(2), "a value that is not a declared choice: {}", describe(&out));
}

#[test]
fn every_worker_is_ready_and_the_quality_validator_follows_its_cleaning_rule() {
    let scratch = Scratch::new();
    for worker in ARCHIVE_WORKERS {
        assert_eq!(scratch.answer(&[worker, "check"]), json!({"ready": true}), "{worker}");
    }
    let validator = scratch.answer(&["quality-validator", "describe"]);
    assert_eq!((&validator["engine"], &validator["model"]), (&json!("ollama"), &json!("qwen2.5:14b")));
    assert_eq!(validator["source"]["description"], "the active LLM_CHECK cleaning rule");
    assert_eq!(validator["source"]["reference"], "LLM_CHECK rule 2");
    assert_eq!((&validator["declared"]["engine"], &validator["declared"]["preset"]), (&Value::Null, &Value::Null));

    scratch.write_rules(&json!({"rules": [{"id": 2, "kind": "LLM_CHECK", "active": false, "engine": "ollama"}]}));
    let check = scratch.answer(&["quality-validator", "check"]);
    assert_eq!(check["ready"], false);
    let reason = check["reason"].as_str().expect("a reason").to_owned();
    assert!(reason.starts_with("There is no active LLM_CHECK cleaning rule in ") && reason.ends_with("to use."));
    let described = scratch.answer(&["quality-validator", "describe"]);
    assert_eq!((&described["engine"], &described["source"]["reference"]), (&Value::Null, &Value::Null));
    let refused = scratch.output(&["quality-validator", "run", "--delay_ms", "0"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains(&reason), "{}", describe(&refused));
    assert!(refused.stdout.is_empty(), "no config line without an engine");

    scratch.write_rules(&json!({"rules": [
        {"id": 2, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "thorough"},
        {"id": 7, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "fast", "model": "llama3.2:1b"},
    ]}));
    assert_eq!(scratch.answer(&["quality-validator", "check"]), json!({"ready": true}));
    let described = scratch.answer(&["quality-validator", "describe"]);
    assert_eq!(
        (&described["model"], &described["source"]["reference"]),
        (&json!("llama3.2:1b"), &json!("LLM_CHECK rule 7"))
    );
    let out = scratch.ok(&["quality-validator", "run", "--delay_ms", "0"]);
    let config = config_line(&json_lines(&out.stdout)).clone();
    assert_eq!(
        (&config["engine"], &config["preset"], &config["model"]),
        (&json!("ollama"), &json!("fast"), &json!("llama3.2:1b"))
    );
    assert_eq!(config["source"]["reference"], "LLM_CHECK rule 7");
    assert!(String::from_utf8_lossy(&out.stderr).contains("llama3.2:1b from LLM_CHECK rule 7"), "{}", describe(&out));
}

#[test]
fn the_archive_workers_form_a_pipeline_whose_queues_shrink_after_runs_and_grow_as_documents_arrive() {
    let scratch = Scratch::new();
    scratch.freeze_arrivals();
    assert_eq!(scratch.pending("transfer"), 20, "twenty documents are in staging at first");
    for worker in ARCHIVE_WORKERS.iter().skip(1).filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 0, "{worker} sees nothing before the transfer");
    }
    for worker in ARCHIVE_WORKERS.iter().filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 20, "{worker}: the earlier workers stamped everything");
        let out =
            scratch.ok(&[worker, "run", "--run-id", "r-1", "--limit", "7", "--batch_size", "3", "--delay_ms", "0"]);
        let objects = json_lines(&out.stdout);
        let config = config_line(&objects);
        assert!(
            ["engine", "preset", "model", "endpoint", "source"].iter().all(|k| config.get(k).is_some()),
            "{config}"
        );
        let steps = progress(&objects);
        assert_eq!(steps, [(0, 7), (3, 7), (6, 7), (7, 7)], "{worker}");
        let result = result(&objects);
        assert_eq!(result["processed"], 7, "{worker}: {result}");
        assert_eq!(result["failed"], 0, "{worker}: {result}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("processed doc-0001"), "{worker} logs on stderr");
        assert_eq!(scratch.pending(worker), 13, "{worker}: the queue fell by the documents processed");
        scratch.run_all(worker);
        assert_eq!(scratch.pending(worker), 0, "{worker}: nothing is left after a full run");
    }
    let archived = std::fs::read_dir(scratch.data().join("archive")).expect("the archive folder").count();
    assert_eq!(archived, 20, "the transfer copied every staged document into the archive");
    assert_eq!(config_line(&scratch.run_all("embed"))["model"], "nomic-embed-text");

    scratch.advance(60);
    assert_eq!(scratch.pending("transfer"), 3, "three more documents arrived in a minute");
    assert_eq!(scratch.pending("language-detect"), 0, "not archived yet");
    scratch.run_all("transfer");
    assert_eq!((scratch.pending("transfer"), scratch.pending("language-detect")), (0, 3));
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
    scratch.freeze_arrivals();
    // Whatever each saw of the others' work, one pass in pipeline order finishes everything.
    for worker in ARCHIVE_WORKERS {
        scratch.run_all(worker);
    }
    for worker in ARCHIVE_WORKERS.iter().filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 0, "{worker}");
    }
    let archived = std::fs::read_dir(scratch.data().join("archive")).expect("the archive folder").count();
    assert!(archived >= 20, "{archived}");
    assert_eq!(scratch.count("conflict-judge")["done"], archived);
}

#[test]
fn the_conflict_judge_queue_is_unmeasurable_and_its_done_count_grows() {
    let scratch = Scratch::new();
    scratch.freeze_arrivals();
    let count = scratch.count("conflict-judge");
    let reason = count["unmeasurable"].as_str().expect("a reason");
    assert!(reason.contains("trigram") && reason.ends_with('.'), "a sentence saying why: {reason}");
    assert_eq!(count["done"], 0);
    assert!(count.get("pending").is_none());
    for worker in ["transfer", "language-detect", "entity-extract", "tag-suggest"] {
        scratch.run_all(worker);
    }
    scratch.ok(&["conflict-judge", "run", "--limit", "7", "--delay_ms", "0"]);
    assert_eq!(scratch.count("conflict-judge")["done"], 7);
    let out = scratch.ok(&["conflict-judge", "run", "--delay_ms", "0"]);
    assert_eq!(result(&json_lines(&out.stdout))["processed"], 13);
    assert_eq!(scratch.count("conflict-judge")["done"], 20);
}

#[test]
fn an_archive_run_stops_after_the_current_document_on_sigterm() {
    let scratch = Scratch::new();
    scratch.freeze_arrivals();
    scratch.run_all("transfer");
    scratch.run_all("language-detect");
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
    assert_eq!(scratch.pending("summarize"), 20 - processed, "every finished document kept its stamp");
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
    assert_eq!(config_line(&objects)["engine"], Value::Null, "the first line is the configuration");
    assert_eq!(progress(&objects), [(1, 3), (2, 3), (3, 3)]);
    assert_eq!(result(&objects)["processed"], 3);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let free_text = stdout.lines().filter(|l| serde_json::from_str::<Value>(l).is_err()).count();
    assert_eq!(free_text, 5, "five free-text lines on stdout:\n{stdout}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("stderr line").count(), 5);

    let quiet = scratch.ok(&[
        "probe-2",
        "run",
        "--engine",
        "local",
        "--model",
        "tiny",
        "--duration_ms",
        "0",
        "--progress_steps",
        "0",
        "--output_lines",
        "0",
    ]);
    let objects = json_lines(&quiet.stdout);
    assert!(progress(&objects).is_empty());
    assert_eq!(String::from_utf8_lossy(&quiet.stdout).lines().count(), 2, "only the config and result lines");
    assert_eq!(
        config_line(&objects),
        &json!({"engine": "local", "preset": null, "model": "tiny", "endpoint": null, "source": null})
    );
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
fn probes_describe_their_engine_and_declarations_and_have_nothing_pending() {
    let scratch = Scratch::new();
    let described =
        scratch.answer(&["probe-1", "describe", "--engine", "ollama", "--preset", "fast", "--model", "llama3.2:1b"]);
    assert_eq!(described["engine"], "ollama");
    assert_eq!(described["preset"], "fast");
    assert_eq!(described["model"], "llama3.2:1b");
    assert_eq!(described["endpoint"], Value::Null);
    assert_eq!(described["source"], Value::Null);
    let plain = scratch.answer(&["probe-2", "describe"]);
    assert_eq!((&plain["engine"], &plain["model"]), (&Value::Null, &Value::Null), "no flags, no engine");
    let declared = &plain["declared"];
    assert_eq!(
        (&declared["engine"], &declared["preset"], &declared["presets"]),
        (&Value::Null, &Value::Null, &json!({}))
    );
    let names: Vec<&str> =
        declared["options"].as_array().expect("options").iter().filter_map(|o| o["name"].as_str()).collect();
    assert_eq!(
        names,
        ["duration_ms", "exit_code", "crash", "ignore_sigterm", "progress_steps", "output_lines", "note"]
    );
    assert_eq!(declared["options"][0]["default"], 200);
    assert_eq!(declared["options"][1]["maximum"], 255);
    assert_eq!(described["declared"], *declared, "the flags change nothing declared");
    assert_eq!(scratch.count("probe-3"), json!({ "pending": 0 }));
    assert_eq!(scratch.pending("probe-3"), 0);
}

#[test]
fn probes_are_ready_unless_told_not_to_be_and_record_their_checks() {
    let scratch = Scratch::new();
    assert_eq!(scratch.answer(&["probe-1", "check"]), json!({"ready": true}));
    let sentence = "The probe's model server is down, as the test asked.";
    let out = scratch.command(&["probe-2", "check"]).env("SCRINALIA_PROBE_NOT_READY", sentence).output().expect("run");
    assert!(out.status.success(), "not ready is still exit status 0: {}", describe(&out));
    assert_eq!(json_lines(&out.stdout), [json!({"ready": false, "reason": sentence})]);
    let events = scratch.probe_events();
    let checks: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["verb"] == "check")
        .map(|e| (e["worker"].as_str().expect("worker"), e["event"].as_str().expect("event")))
        .collect();
    assert_eq!(checks, [("probe-1", "start"), ("probe-1", "end"), ("probe-2", "start"), ("probe-2", "end")]);
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
