//! The Python adapter (adapters/python) driven as the daemon drives a worker: the catalogue entry its README
//! documents loads, and each verb of the example worker prints the protocol's JSON lines. Needs `python3`.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use scrinalia_shared::catalogue::WorkerSpec;
use serde_json::{Value, json};
use tempfile::TempDir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

/// The catalogue entry documented in adapters/python/README.md, loaded through the real configuration code.
fn documented_entry(dir: &Path) -> WorkerSpec {
    let readme = std::fs::read_to_string(repo().join("adapters/python/README.md")).expect("the adapter's README");
    let block = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```toml block in the adapter's README");
    let toml = format!(
        "[engines.ollama]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:11434\"\npresets = {{ fast = \"llama3.2:1b\" }}\n\n{block}"
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).expect("write the documented configuration");
    let settings = scrinalia_shared::Settings::load_from(Some(&path), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    settings.catalogue.worker("example").expect("the documented worker").clone()
}

/// The command the daemon would run: the entry's command, a verb, and flags; from the repository root.
fn command(entry: &WorkerSpec, verb: &str, flags: &[(&str, &str)]) -> Command {
    let mut command = Command::new(&entry.command[0]);
    command.args(&entry.command[1..]).arg(verb).current_dir(repo()).envs(&entry.env).stdin(Stdio::null());
    for (name, value) in flags {
        command.arg(format!("--{name}")).arg(value);
    }
    command
}

fn output(entry: &WorkerSpec, verb: &str, flags: &[(&str, &str)]) -> Output {
    command(entry, verb, flags)
        .output()
        .unwrap_or_else(|e| panic!("run {:?}: {e}. The Python adapter tests need python3 on PATH.", entry.command))
}

fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn explain(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

struct Example {
    _scratch: TempDir,
    entry: WorkerSpec,
    folder: String,
}

impl Example {
    fn new() -> Self {
        let scratch = tempfile::Builder::new().prefix("scrinalia-python-").tempdir().expect("a scratch folder");
        let entry = documented_entry(scratch.path());
        let folder = scratch.path().join("state").display().to_string();
        Self { _scratch: scratch, entry, folder }
    }

    fn pending(&self) -> Value {
        let out = output(&self.entry, "count-pending", &[("folder", &self.folder), ("batch_size", "5")]);
        assert!(out.status.success(), "{}", explain(&out));
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 1, "{}", explain(&out));
        lines[0]["pending"].clone()
    }
}

#[test]
fn describe_prints_the_engine_configuration_and_what_the_code_declares() {
    let example = Example::new();
    let flags = [("engine", "ollama"), ("preset", "balanced"), ("folder", example.folder.as_str())];
    let out = output(&example.entry, "describe", &flags);
    assert!(out.status.success(), "{}", explain(&out));
    let [described] = &json_lines(&out)[..] else { panic!("one object: {}", explain(&out)) };
    let engine = ["engine", "preset", "model", "endpoint"].map(|k| described[k].clone());
    assert_eq!(engine, [json!("ollama"), json!("balanced"), json!("qwen2.5:7b"), json!("http://127.0.0.1:11434")]);
    // The code's own defaults, whatever flags were given.
    let declared = &described["declared"];
    assert_eq!((&declared["engine"], &declared["preset"]), (&json!("ollama"), &json!("fast")));
    let options: Vec<(&str, &str, Value)> = declared["options"]
        .as_array()
        .expect("options")
        .iter()
        .map(|o| (o["name"].as_str().unwrap_or(""), o["type"].as_str().unwrap_or(""), o["default"].clone()))
        .collect();
    assert_eq!(
        options,
        [
            ("batch_size", "integer", json!(5)),
            ("delay_ms", "integer", json!(20)),
            ("folder", "string", json!("data/example-worker")),
            ("fail", "boolean", json!(false)),
        ]
    );
    // The documented catalogue entry declares no options: the code does.
    assert!(example.entry.options.is_empty(), "{:?}", example.entry.options);
}

#[test]
fn a_run_reports_progress_and_a_result_and_the_pending_count_falls() {
    let example = Example::new();
    assert_eq!(example.pending(), 20);
    let flags = [
        ("run-id", "0192f0c2-run"),
        ("engine", "ollama"),
        ("preset", "fast"),
        ("model", "llama3.2:1b"),
        ("batch_size", "6"),
        ("delay_ms", "0"),
        ("folder", example.folder.as_str()),
    ];
    let out = output(&example.entry, "run", &flags);
    assert!(out.status.success(), "{}", explain(&out));
    let lines = json_lines(&out);
    let progress: Vec<(u64, u64)> = lines
        .iter()
        .filter_map(|l| l.get("progress"))
        .map(|p| (p["done"].as_u64().expect("done"), p["total"].as_u64().expect("total")))
        .collect();
    assert_eq!(progress, [(6, 20), (12, 20), (18, 20), (20, 20)]);
    assert_eq!(lines.last(), Some(&json!({ "result": { "processed": 20, "failed": 0, "run_id": "0192f0c2-run" } })));
    assert_eq!(lines[0]["config"]["model"], "llama3.2:1b", "the run reports its configuration first: {lines:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("reviewed item 20"), "free text on stderr");
    assert_eq!(example.pending(), 0);
}

#[test]
fn a_failing_run_exits_1_with_a_traceback_and_a_bad_option_exits_2() {
    let example = Example::new();
    let out = output(&example.entry, "run", &[("fail", "true"), ("delay_ms", "0"), ("folder", &example.folder)]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Traceback"), "{}", explain(&out));
    let out = output(&example.entry, "run", &[("batch_size", "several")]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be a whole number"), "{}", explain(&out));
}

#[test]
fn sigterm_stops_a_python_run_cleanly() {
    let example = Example::new();
    let flags = [("delay_ms", "300"), ("batch_size", "1"), ("folder", example.folder.as_str())];
    let mut child = command(&example.entry, "run", &flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python worker (python3 must be on PATH)");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (mut first, mut second) = (String::new(), String::new());
    stdout.read_line(&mut first).expect("read the first line");
    assert!(first.starts_with("{\"config\""), "the configuration the run uses comes first: {first:?}");
    stdout.read_line(&mut second).expect("read the second line");
    assert!(second.contains("progress"), "then progress: {second:?}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("send SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll") {
            break status;
        }
        assert!(Instant::now() < deadline, "the Python worker ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(143));
    let pending = example.pending().as_u64().expect("a count");
    assert!(pending < 20, "the items reviewed before the stop were kept ({pending} pending)");
}
