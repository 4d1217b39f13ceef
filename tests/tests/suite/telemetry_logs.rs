//! The daemon's log lines as an operator reads them (`journalctl -f`, `grep`, `jq`), from the real binary with
//! its stdout in a file: with `SCRINALIA__TELEMETRY__LOG_FORMAT=json` every line is one JSON object and every
//! line that mentions a run carries `run_id` and `worker` as top-level fields, the worker's own output lines
//! among them; in the default text format there are no colour codes and the run's lines carry
//! `run_id=… worker=…`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use scrinalia_shared::RunState;
use scrinalia_tests::{
    TestDb, bin_path,
    daemon_harness::{Setup, wait_finished},
};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Starts a daemon with its stdout and its stderr in two files of the scratch folder.
fn start_daemon(setup: &Setup, name: &str, env: &[(&str, &str)]) -> (Child, PathBuf, PathBuf) {
    let (out, err) = (setup.dir.join(format!("{name}.stdout")), setup.dir.join(format!("{name}.stderr")));
    let child = Command::new(bin_path("scrinalia-daemon"))
        .args(["--config", &setup.config.display().to_string()])
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("the stdout file"))
        .stderr(std::fs::File::create(&err).expect("the stderr file"))
        .kill_on_drop(true)
        .spawn()
        .expect("start the daemon");
    (child, out, err)
}

/// Runs one probe to its end with the daemon, then stops the daemon; returns the run id and the daemon's stdout.
async fn one_run(db: &TestDb, setup: &Setup, env: &[(&str, &str)]) -> (String, String) {
    let (mut daemon, out, err) = start_daemon(setup, "daemon", env);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 300, "output_lines": 2})).await;
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(30)).await;
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}\n{}", read(&out), read(&err));
    let pid = Pid::from_raw(daemon.id().expect("running") as i32);
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = tokio::time::timeout(Duration::from_secs(20), daemon.wait()).await.expect("the daemon exits");
    assert_eq!(status.expect("its status").code(), Some(0), "{}\n{}", read(&out), read(&err));
    (run.id.to_string(), read(&out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_run_id_and_worker_on_every_line_about_a_run() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |_| {});
    let (run_id, stdout) = one_run(&db, &setup, &[("SCRINALIA__TELEMETRY__LOG_FORMAT", "json")]).await;

    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\n{stdout}")))
        .collect();
    assert!(lines.iter().all(|l| l["timestamp"].is_string() && l["level"].is_string()), "{stdout}");
    let about_run: Vec<&Value> = lines.iter().filter(|l| l.to_string().contains(&run_id)).collect();
    assert!(about_run.len() >= 6, "claimed, starting, started, 4 output lines, finished:\n{stdout}");
    for line in &about_run {
        assert_eq!(line["run_id"], run_id.as_str(), "a line about the run without its run_id field: {line}");
        assert_eq!(line["worker"], "probe-1", "a line about the run without its worker field: {line}");
    }
    for (stream, text) in [
        ("stdout", "stdout line 1 of 2"),
        ("stdout", "stdout line 2 of 2"),
        ("stderr", "stderr line 1 of 2"),
        ("stderr", "stderr line 2 of 2"),
    ] {
        let forwarded = lines.iter().find(|l| l["message"].as_str().is_some_and(|m| m.contains(text)));
        let forwarded = forwarded.unwrap_or_else(|| panic!("the worker's {text:?} is not forwarded:\n{stdout}"));
        assert_eq!(forwarded["stream"], stream, "{forwarded}");
        assert_eq!(forwarded["run_id"], run_id.as_str(), "{forwarded}");
        assert_eq!(forwarded["worker"], "probe-1", "{forwarded}");
    }
    let finished = lines.iter().find(|l| l["message"] == "run finished").expect("a run finished line");
    assert_eq!(finished["state"], "succeeded", "{finished}");
    assert_eq!(finished["run_id"], run_id.as_str(), "{finished}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_lines_have_no_colour_codes_and_name_the_run() {
    let db = TestDb::sqlite().await;
    let setup = Setup::new(&db, |_| {});
    let (run_id, stdout) = one_run(&db, &setup, &[]).await;
    assert!(!stdout.contains('\x1b'), "ANSI escape codes in a file:\n{stdout}");
    let about_run: Vec<&str> = stdout.lines().filter(|l| l.contains(&run_id)).collect();
    assert!(about_run.len() >= 6, "{stdout}");
    for line in &about_run {
        assert!(line.contains(&format!("run_id={run_id}")) && line.contains("worker=probe-1"), "{line}");
    }
    for text in ["stdout line 1 of 2", "stderr line 2 of 2"] {
        let forwarded = stdout.lines().find(|l| l.contains(text)).unwrap_or_else(|| panic!("no {text:?}:\n{stdout}"));
        assert!(forwarded.contains(&format!("run_id={run_id}")) && forwarded.contains("worker=probe-1"), "{forwarded}");
    }
    db.cleanup().await;
}
