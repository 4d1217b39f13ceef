//! The per-run supervisor on its own (`scrinalia-daemon supervise`), driven through its pipes exactly as the
//! daemon drives it: frames out, lease deadlines and commands in, and the fence when a deadline passes or the
//! daemon's pipe closes; and a spare (`supervise --spare`), which is given its run on its pipe.

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use nix::time::{ClockId, clock_gettime};
use scrinalia_tests::bin_path;
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, ChildStdout, Command},
};

/// A supervisor with its pipes.
struct Supervisor {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

fn monotonic_ns() -> u64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("the monotonic clock");
    u64::try_from(now.tv_sec()).expect("positive") * 1_000_000_000 + u64::try_from(now.tv_nsec()).expect("positive")
}

impl Supervisor {
    fn start(deadline_in: Duration, script: &str) -> Self {
        let deadline = monotonic_ns() + u64::try_from(deadline_in.as_nanos()).expect("small");
        Self::launch(
            Command::new(bin_path("scrinalia-daemon"))
                .args([
                    "supervise",
                    "--run-id",
                    &uuid::Uuid::new_v4().to_string(),
                    "--deadline-ns",
                    &deadline.to_string(),
                ])
                .args(["--grace-ms", "500", "--timeout-ms", "60000", "--", "/bin/sh", "-c", script]),
        )
    }

    /// A spare: started with an empty environment and no run, as the daemon starts one ahead of its run.
    fn spare() -> Self {
        Self::launch(Command::new(bin_path("scrinalia-daemon")).args(["supervise", "--spare"]).env_clear())
    }

    fn launch(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the supervisor");
        let (stdin, stdout) = (child.stdin.take(), BufReader::new(child.stdout.take().expect("stdout")));
        Self { child, stdin, stdout }
    }

    /// Gives a spare its run: `script` under `/bin/sh` with exactly `env`, and a lease `deadline_in` from now.
    async fn give(&mut self, deadline_in: Duration, script: &str, env: &[(&str, &str)]) {
        let deadline = monotonic_ns() + u64::try_from(deadline_in.as_nanos()).expect("small");
        let start = serde_json::json!({
            "run_id": uuid::Uuid::new_v4(), "deadline_ns": deadline, "grace_ms": 500, "timeout_ms": 60_000,
            "program": "/bin/sh", "args": ["-c", script], "env": env,
        });
        self.send(&format!("start {start}")).await;
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(format!("{line}\n").as_bytes()).await.expect("write to the supervisor");
    }

    /// Reads frames until one is `wanted` (e.g. `O trapped`, a line of the worker); returns the frames before it.
    async fn frames_until(&mut self, wanted: &str) -> Vec<String> {
        let mut frames = Vec::new();
        let read = async {
            let mut line = String::new();
            while self.stdout.read_line(&mut line).await.expect("read a frame") > 0 {
                let frame = line.trim_end().to_owned();
                line.clear();
                if frame == wanted {
                    return;
                }
                frames.push(frame);
            }
            panic!("the supervisor ended before {wanted:?}: {frames:?}");
        };
        tokio::time::timeout(Duration::from_secs(10), read).await.expect("the frame in time");
        frames
    }

    /// Every frame up to and including the exit report, which is returned parsed.
    async fn frames(&mut self) -> (Vec<String>, Value) {
        let mut frames = Vec::new();
        let read = async {
            let mut line = String::new();
            while self.stdout.read_line(&mut line).await.expect("read a frame") > 0 {
                let frame = line.trim_end().to_owned();
                line.clear();
                if let Some(report) = frame.strip_prefix("X ") {
                    return serde_json::from_str(report).expect("a JSON report");
                }
                frames.push(frame);
            }
            panic!("the supervisor ended without a report: {frames:?}");
        };
        let report = tokio::time::timeout(Duration::from_secs(10), read).await.expect("a report in time");
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        (frames, report)
    }
}

#[tokio::test]
async fn output_is_relayed_and_the_exit_reported() {
    let mut supervisor = Supervisor::start(Duration::from_secs(30), "echo out; echo err >&2; exit 3");
    let (frames, report) = supervisor.frames().await;
    assert!(frames[0].starts_with("P "), "{frames:?}");
    assert!(frames.contains(&"O out".to_owned()) && frames.contains(&"E err".to_owned()), "{frames:?}");
    assert_eq!(report["code"], 3);
    assert_eq!(report["stopped_by"], Value::Null);
}

#[tokio::test]
async fn a_passed_deadline_kills_the_group_at_once() {
    let mut supervisor = Supervisor::start(Duration::from_millis(300), "trap '' TERM; sleep 30 & wait");
    let (_, report) = supervisor.frames().await;
    assert_eq!(
        (report["stopped_by"].as_str(), report["signal"].as_str()),
        (Some("deadline"), Some("SIGKILL")),
        "{report}"
    );
    assert!(report["elapsed_ms"].as_u64().is_some_and(|ms| ms < 2_000), "{report}");
}

#[tokio::test]
async fn a_renewed_deadline_lets_the_worker_finish() {
    let mut supervisor = Supervisor::start(Duration::from_millis(300), "sleep 1");
    supervisor.send(&format!("deadline {}", monotonic_ns() + 3_000_000_000)).await;
    let (_, report) = supervisor.frames().await;
    assert_eq!((report["code"].as_i64(), &report["stopped_by"]), (Some(0), &Value::Null), "{report}");
}

#[tokio::test]
async fn a_closed_pipe_stops_the_worker_gently_then_for_good() {
    // The worker ignores SIGTERM once it says so, so it is killed after the 500 ms grace.
    let mut supervisor = Supervisor::start(Duration::from_secs(30), "trap '' TERM; echo trapped; sleep 30 & wait");
    supervisor.frames_until("O trapped").await;
    let closed = Instant::now();
    drop(supervisor.stdin.take());
    let (_, report) = supervisor.frames().await;
    assert_eq!(report["stopped_by"], "daemon_gone", "{report}");
    assert_eq!(report["signal"], "SIGKILL", "{report}");
    assert!(closed.elapsed() >= Duration::from_millis(500), "killed {:?} after the pipe closed", closed.elapsed());
    // The 30 s sleep did not run out: it was killed (and `frames` allows 10 s for the report).
    assert!(report["elapsed_ms"].as_u64().is_some_and(|ms| (500..30_000).contains(&ms)), "{report}");
}

#[tokio::test]
async fn cancel_sends_sigterm_first() {
    let mut supervisor = Supervisor::start(Duration::from_secs(30), "echo started; sleep 30");
    supervisor.frames_until("O started").await;
    supervisor.send("cancel").await;
    let (_, report) = supervisor.frames().await;
    assert_eq!(
        (report["stopped_by"].as_str(), report["signal"].as_str()),
        (Some("cancel"), Some("SIGTERM")),
        "{report}"
    );
}

#[tokio::test]
async fn a_spare_runs_what_it_is_given_with_exactly_that_environment() {
    let mut spare = Supervisor::spare();
    // The spare waits: nothing comes out before its run.
    let early = tokio::time::timeout(Duration::from_millis(200), spare.stdout.read_line(&mut String::new())).await;
    assert!(early.is_err(), "a spare wrote before it was given a run: {early:?}");
    let script = "echo \"token=${SECRET_TOKEN:-unset} run=$SCRINALIA_RUN_ID\"; exit 4";
    spare.give(Duration::from_secs(30), script, &[("SCRINALIA_RUN_ID", "r-1"), ("PATH", "/usr/bin:/bin")]).await;
    let (frames, report) = spare.frames().await;
    assert!(frames[0].starts_with("P "), "{frames:?}");
    assert!(frames.contains(&"O token=unset run=r-1".to_owned()), "{frames:?}");
    assert_eq!(report["code"], 4, "{report}");
}

#[tokio::test]
async fn a_spare_keeps_the_lease_fence_of_its_run() {
    let mut spare = Supervisor::spare();
    spare.give(Duration::from_millis(300), "trap '' TERM; sleep 30 & wait", &[]).await;
    let (_, report) = spare.frames().await;
    assert_eq!(
        (report["stopped_by"].as_str(), report["signal"].as_str()),
        (Some("deadline"), Some("SIGKILL")),
        "{report}"
    );
}

#[tokio::test]
async fn a_spare_whose_daemon_goes_away_exits_quietly() {
    let mut spare = Supervisor::spare();
    drop(spare.stdin.take());
    let mut rest = String::new();
    let read = tokio::io::AsyncReadExt::read_to_string(&mut spare.stdout, &mut rest);
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("the spare closes its stdout").expect("read");
    assert_eq!(rest, "", "a spare without a run wrote frames");
    let status = tokio::time::timeout(Duration::from_secs(10), spare.child.wait()).await.expect("exits").expect("wait");
    assert!(status.success(), "{status:?}");
}
