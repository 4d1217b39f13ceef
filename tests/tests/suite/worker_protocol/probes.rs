//! The test probes: progress, output, result and exit status as their options ask, SIGTERM and SIGKILL, the
//! log line of every execution, and what they describe and check.

use std::{
    os::unix::process::ExitStatusExt,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::{Scratch, config_line, describe, json_lines, progress, result, signal, wait};

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
        [
            "duration_ms",
            "exit_code",
            "crash",
            "ignore_sigterm",
            "progress_steps",
            "output_lines",
            "note",
            "checkpoints",
            "oversized_checkpoint",
            "items",
            "item_ms",
            "failed_every",
            "item_text",
            "burn_cpu_ms",
            "allocate_mb",
            "report_usage",
            "malformed_items",
            "silent_after_ms"
        ]
    );
    assert_eq!(
        plain["capabilities"],
        json!({"items": true, "scope": true, "checkpoints": true, "shards": true, "yield": true})
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
