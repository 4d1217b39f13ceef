//! Yielding (docs/worker-protocol.md, "Yielding") with the real binaries. The supervisor, driven through its pipes
//! as the daemon drives it: the demo probe and the Python adapter asked to yield stop at their next checkpoint and
//! exit 75; a worker still running when the grace ends is stopped as a cancel stops it; a request made before the
//! worker's first stdout line waits for it. And the daemon's runner, in process over a real database, with the
//! real supervisor and probe: it refuses a yield to a worker whose description does not declare it, asks one that
//! does, tells the outcome `yielded`, and the run is resumed from the checkpoint its worker yielded at. (The main
//! loop has no trigger of its own yet: the preemption that asks is another issue's.)

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use scrinalia_daemon::{
    Context, cgroup, clock, main_loop, metrics,
    outcome::Outcome,
    registry,
    runner::{self, RunCommand},
    spare, worker_env,
    yielding::YieldRefused,
};
use scrinalia_shared::{Description, FollowKind, Run, RunState, descriptions::NewDescription, logstore::LogStore};
use scrinalia_tests::{
    TestDb, backend_tests, bin_path,
    daemon_harness::{Setup, probe_events, wait_run, wait_started},
    demo_worker,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, ChildStdout, Command},
    sync::{mpsc, oneshot},
};
use uuid::Uuid;

backend_tests!(the_runner_asks_only_a_worker_that_declares_yield_and_its_run_resumes_where_it_yielded);

/// A supervisor of one worker, with its pipes.
struct Supervised {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Supervised {
    /// `scrinalia-daemon supervise` of `command` with `env` added, a grace of 500 ms and a lease two minutes long.
    fn start(command: &[&str], env: &[(&str, &str)]) -> Self {
        let deadline = clock::monotonic_ns() + 120_000_000_000;
        let mut child = Command::new(bin_path("scrinalia-daemon"))
            .args(["supervise", "--run-id", &Uuid::new_v4().to_string(), "--deadline-ns", &deadline.to_string()])
            .args(["--grace-ms", "500", "--timeout-ms", "120000", "--"])
            .args(command)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the supervisor");
        let (stdin, stdout) = (child.stdin.take().expect("stdin"), child.stdout.take().expect("stdout"));
        Self { _child: child, stdin, stdout: BufReader::new(stdout) }
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.expect("write to the supervisor");
    }

    /// Reads frames up to the first one `wanted` accepts; every frame read, that one last.
    async fn until(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> Vec<String> {
        let mut frames = Vec::new();
        let read = async {
            loop {
                let mut line = String::new();
                let n = self.stdout.read_line(&mut line).await.expect("read a frame");
                assert!(n > 0, "the supervisor ended before {what}: {frames:?}");
                let frame = line.trim_end().to_owned();
                frames.push(frame.clone());
                if wanted(&frame) {
                    return;
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(30), read).await.is_err() {
            panic!("no {what} within 30 s");
        }
        frames
    }

    /// The frames up to the exit report, and the report.
    async fn exit(&mut self) -> (Vec<String>, Value) {
        let frames = self.until("the exit report", |f| f.starts_with("X ")).await;
        let report = serde_json::from_str(&frames[frames.len() - 1][2..]).expect("an exit report");
        (frames, report)
    }
}

/// The worker's stdout lines among `frames`.
fn stdout_lines(frames: &[String]) -> Vec<&str> {
    frames.iter().filter_map(|f| f.strip_prefix("O ")).collect()
}

fn is_checkpoint(frame: &str) -> bool {
    frame.starts_with("O {\"checkpoint\"")
}

/// A scratch folder with the probes' ledger in it.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let ledger = dir.path().join("probes.jsonl");
    (dir, ledger)
}

/// The probe's end line of `run` in `ledger`.
fn probe_end(ledger: &Path, run: &str) -> Value {
    let ends: Vec<_> = probe_events(ledger)
        .into_iter()
        .filter(|e| e.event == "end" && e.run_id.as_deref() == Some(run))
        .map(|e| json!({"outcome": e.outcome, "exit_code": e.exit_code}))
        .collect();
    assert_eq!(ends.len(), 1, "one end line of run {run}: {ends:?}");
    ends[0].clone()
}

#[tokio::test]
async fn the_supervisor_makes_the_probe_yield_at_its_next_checkpoint() {
    let (_dir, ledger) = scratch();
    let (worker, run) = (demo_worker(), Uuid::new_v4().to_string());
    let run_id = format!("--run-id={run}");
    let command = [worker.to_str().expect("a text path"), "probe-1", "run", &run_id];
    let options = ["--duration_ms=60000", "--checkpoints=600", "--items=6000"];
    let log = ledger.to_str().expect("a text path");
    let mut supervised = Supervised::start(&[&command[..], &options[..]].concat(), &[("SCRINALIA_PROBE_LOG", log)]);
    let mut frames = supervised.until("a checkpoint", is_checkpoint).await;
    supervised.send("yield 30000").await;
    let (rest, report) = supervised.exit().await;
    frames.extend(rest);
    assert_eq!((&report["code"], &report["yield_signalled"]), (&json!(75), &json!(true)), "{report}");
    assert!(report.get("stopped_by").is_none_or(Value::is_null), "it ended by itself: {report}");
    assert!(report["elapsed_ms"].as_u64().is_some_and(|ms| ms < 30_000), "long before its end: {report}");
    let lines = stdout_lines(&frames);
    let last = lines.last().expect("stdout lines");
    assert!(last.starts_with("{\"checkpoint\""), "its last line is the checkpoint it stopped at: {last}");
    let checkpoint: Value = serde_json::from_str(last).expect("JSON");
    let items = lines.iter().filter(|l| l.starts_with("{\"item\"")).count();
    assert_eq!(checkpoint["checkpoint"]["items"], json!(items), "every item it reported is before its checkpoint");
    assert_eq!(probe_end(&ledger, &run), json!({"outcome": "yielded", "exit_code": 75}));
}

#[tokio::test]
async fn a_worker_still_running_when_the_grace_ends_is_stopped_as_a_cancel_stops_it() {
    let (_dir, ledger) = scratch();
    let (worker, run) = (demo_worker(), Uuid::new_v4().to_string());
    let run_id = format!("--run-id={run}");
    // Silent from the start, it never reaches a checkpoint to yield at.
    let options = ["--duration_ms=60000", "--checkpoints=600", "--silent_after_ms=1"];
    let command = [worker.to_str().expect("a text path"), "probe-1", "run", &run_id];
    let log = ledger.to_str().expect("a text path");
    let mut supervised = Supervised::start(&[&command[..], &options[..]].concat(), &[("SCRINALIA_PROBE_LOG", log)]);
    supervised.until("the config line", |f| f.starts_with("O {\"config\"")).await;
    supervised.send("yield 300").await;
    let (frames, report) = supervised.exit().await;
    assert_eq!(
        (&report["stopped_by"], &report["code"], &report["yield_signalled"]),
        (&json!("yield"), &json!(143), &json!(true)),
        "SIGTERM once the grace ended: {report}"
    );
    assert!(!frames.iter().any(|f| is_checkpoint(f)), "{frames:?}");
    assert_eq!(probe_end(&ledger, &run), json!({"outcome": "sigterm", "exit_code": 143}));
}

#[tokio::test]
async fn a_yield_asked_before_the_first_stdout_line_waits_for_it() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let go = dir.path().join("go");
    // sh dies of SIGUSR1 until its trap is set, which it does only once `go` exists, just before its first line.
    let script = r#"while [ ! -e "$GO" ]; do sleep 0.01; done
trap 'echo yielded; exit 75' USR1
echo ready
while :; do sleep 0.01; done"#;
    let go_path = go.to_str().expect("a text path");
    let mut supervised = Supervised::start(&["/bin/sh", "-c", script], &[("GO", go_path)]);
    supervised.until("the worker's start", |f| f.starts_with("P ")).await;
    supervised.send("yield 30000").await;
    // The yield is on its way before the worker can say anything; it must wait for `ready`.
    std::fs::write(&go, b"").expect("let the worker go on");
    let (frames, report) = supervised.exit().await;
    assert_eq!(stdout_lines(&frames), ["ready", "yielded"], "{frames:?}");
    assert_eq!((&report["code"], &report["signal"]), (&json!(75), &Value::Null), "{report}");
}

#[tokio::test]
async fn the_python_adapter_yields_at_its_next_checkpoint_under_the_supervisor() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let module = dir.path().join("batching_worker.py");
    let source = r#"import time

def execute(batches: int = 1000, checkpoint=None):
    for batch in range(1, batches + 1):
        time.sleep(0.02)
        print(f"batch {batch} done", flush=True)
        checkpoint({"batch": batch})
    return {"batches": batches}
"#;
    std::fs::write(&module, source).expect("write the worker module");
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/scrinalia_worker.py");
    let command = ["python3", adapter.to_str().expect("a text path"), module.to_str().expect("a text path"), "run"];
    let mut supervised = Supervised::start(&command, &[]);
    supervised.until("a checkpoint", is_checkpoint).await;
    supervised.send("yield 30000").await;
    let (frames, report) = supervised.exit().await;
    assert_eq!((&report["code"], &report["yield_signalled"]), (&json!(75), &json!(true)), "{report}");
    let lines = stdout_lines(&frames);
    assert!(lines.last().is_some_and(|l| l.starts_with("{\"checkpoint\"")), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("\"result\"")), "a yielded run prints no result: {lines:?}");
    let said = frames.iter().any(|f| f.starts_with("E ") && f.contains("yielded at a checkpoint, as asked (SIGUSR1)"));
    assert!(said, "{frames:?}");
}

/// A daemon's context over `t`'s database, as `scrinalia_daemon::run` builds one, without its tasks: the test
/// drives the runner itself. Registered, so that its claims are valid.
async fn context(t: &TestDb, setup: &Setup) -> Arc<Context> {
    let settings = setup.settings.clone();
    let supervisor = bin_path("scrinalia-daemon");
    let exe_dir = supervisor.parent().expect("a folder").to_path_buf();
    let daemon_id = Uuid::now_v7();
    let worker_env = worker_env::WorkerEnv::new(std::env::vars_os(), &settings.daemon);
    let ctx = Arc::new(Context {
        db: t.db.daemon.clone(),
        claims: t.db.daemon.clone(),
        logs: LogStore::open(&settings.object_store).expect("the run-log store"),
        metrics: metrics::DaemonMetrics::new(None, daemon_id, settings.daemon.capacity),
        placement: scrinalia_daemon::placement_of(&settings),
        spares: spare::Spares::new(supervisor.clone(), worker_env.inherited.clone()),
        cgroups: cgroup::Cgroups::off("the test's daemon runs without cgroups"),
        worker_env,
        supervisor,
        exe_dir,
        daemon_id,
        settings,
    });
    registry::register(&ctx).await.expect("register the daemon");
    ctx
}

/// Claims `run` and runs it in a task of its own; the sender of its commands, and its outcome to come.
async fn claim_and_run(
    ctx: &Arc<Context>,
    run: &Run,
) -> (mpsc::UnboundedSender<RunCommand>, tokio::task::JoinHandle<Outcome>) {
    let sent = clock::monotonic_ns();
    let daemon = &ctx.settings.daemon;
    let claimed = main_loop::claim_batch(&ctx.claims, ctx.daemon_id, daemon, &ctx.placement, 0).await.expect("claim");
    assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), [run.id], "the run, claimed");
    let (commands, rx) = mpsc::unbounded_channel();
    let deadline = clock::lease_deadline(sent, daemon.lease());
    let task = tokio::spawn(runner::execute(ctx.clone(), claimed.into_iter().next().expect("one"), deadline, rx));
    (commands, task)
}

/// Asks the run to yield; the runner's answer.
async fn ask_yield(commands: &mpsc::UnboundedSender<RunCommand>) -> Result<(), YieldRefused> {
    let (answer, answered) = oneshot::channel();
    commands.send(RunCommand::Yield { grace: Duration::from_secs(30), answer }).expect("the run goes on");
    tokio::time::timeout(Duration::from_secs(10), answered).await.expect("answered in time").expect("an answer")
}

/// Stores what `probe-1 describe` really answers, as a daemon's describe chore would.
async fn describe_probe(t: &TestDb) {
    let output = std::process::Command::new(demo_worker()).args(["probe-1", "describe"]).output().expect("describe");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let description: Description = serde_json::from_str(text.lines().last().expect("a line")).expect("a description");
    assert!(description.capabilities.is_some_and(|c| c.yields), "the probe declares yield: {text}");
    let new = NewDescription {
        worker: "probe-1".into(),
        outcome: Ok(description),
        described_by: Uuid::now_v7(),
        command: vec![demo_worker().display().to_string(), "probe-1".into()],
        took_ms: 1,
    };
    t.db.daemon.store_description(&new).await.expect("stored");
}

async fn the_runner_asks_only_a_worker_that_declares_yield_and_its_run_resumes_where_it_yielded(t: &TestDb) {
    let setup = Setup::new(t, |d| d.capacity = 1);
    let ctx = context(t, &setup).await;
    // A checkpoint every 50 ms, so the yield comes soon after it is asked.
    let first = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 5_000, "checkpoints": 100})).await;
    let (commands, task) = claim_and_run(&ctx, &first).await;
    wait_started(&t.db.api, first.id, Duration::from_secs(20)).await;
    wait_run(&t.db.api, first.id, Duration::from_secs(20), "a checkpoint", |r| r.checkpoint.is_some()).await;

    let refused = ask_yield(&commands).await;
    assert_eq!(refused, Err(YieldRefused::NotDeclared { worker: "probe-1".into() }), "no description says it yields");
    describe_probe(t).await;
    assert_eq!(ask_yield(&commands).await, Ok(()));
    assert_eq!(ask_yield(&commands).await, Err(YieldRefused::AlreadyAsked));

    let outcome = tokio::time::timeout(Duration::from_secs(30), task).await.expect("it ends").expect("the task");
    assert!(outcome.yielded, "{outcome:?}");
    assert_eq!(outcome.finish.exit_code, Some(75));
    let yielded = t.db.api.get_run(first.id).await.expect("read").expect("the run");
    assert_eq!((yielded.state, yielded.exit_code), (RunState::Interrupted, Some(75)), "{yielded:?}");
    assert_eq!(yielded.end_reason, Some(scrinalia_shared::EndReason::Preempted), "{yielded:?}");
    assert!(yielded.error.as_deref().is_some_and(|e| e.contains("yielded at a checkpoint when asked")), "{yielded:?}");
    let (_, end) = setup.probe_run(first.id);
    let end = end.expect("the probe's end line");
    assert_eq!((end.outcome.as_deref(), end.exit_code), (Some("yielded"), Some(75)));
    let step = yielded.checkpoint.as_ref().and_then(|c| c["step"].as_i64()).expect("a checkpoint step");
    assert!((1..100).contains(&step), "it yielded before its end: {step}");
    assert!(setup.run_log(&yielded).contains("the worker is asked to yield (SIGUSR1)"));

    // Its resume, requested with its end, starts from the checkpoint it yielded at, and runs to its end; a second
    // resume by hand is refused.
    let (resumed, how) = t.db.api.run_continued_by(first.id).await.expect("read").expect("its resume");
    assert_eq!(how, FollowKind::Resume);
    let resumed = t.db.api.get_run(resumed).await.expect("read").expect("the resume");
    let catalogue = &setup.settings.catalogue;
    let again = t.db.api.continue_run(catalogue, first.id, FollowKind::Resume, "ada").await;
    assert!(again.is_err(), "resumed once already: {again:?}");
    let (_commands, task) = claim_and_run(&ctx, &resumed).await;
    let outcome = tokio::time::timeout(Duration::from_secs(30), task).await.expect("it ends").expect("the task");
    assert!(!outcome.yielded);
    let done = t.db.api.get_run(resumed.id).await.expect("read").expect("the run");
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    let start = setup.probe_run(resumed.id).0.expect("the resumed probe's start line");
    assert_eq!(start.checkpoint, yielded.checkpoint, "it got the checkpoint its predecessor yielded at");
}
