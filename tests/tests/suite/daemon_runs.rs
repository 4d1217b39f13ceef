//! The daemon runs requests end to end (real daemon, real supervisor, real probe workers) on both backends:
//! success with result, progress history, duration and a readable log; failure with exit status and stderr
//! tail; a crash; a timeout; a worker the daemon does not know; a supervisor killed under its worker. Each
//! ending is checked by its typed end reason as well as its sentence.

use std::time::Duration;

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use scrinalia_shared::{EndReason, RunState};
use scrinalia_testkit::config::worker;
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, TRACEPARENT, alive, wait_finished},
    eventually,
    fixtures::insert,
};
use serde_json::json;

backend_tests!(
    success_is_recorded_with_result_progress_and_log,
    failures_keep_status_and_stderr_tail,
    timeouts_fail_the_run,
    capacity_bounds_the_runs_in_flight,
    a_worker_missing_from_the_daemons_catalogue_fails_its_run,
    a_killed_supervisor_fails_its_run_and_takes_its_worker_down,
    runs_start_through_a_spare_supervisor_that_leaves_with_its_daemon,
);

async fn success_is_recorded_with_result_progress_and_log(db: &TestDb) {
    let setup = Setup::new(db, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    let options = json!({"duration_ms": 1500, "progress_steps": 6, "output_lines": 2});
    let run = setup.request(&db.db.api, "probe-1", options).await;
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    assert_eq!((done.exit_code, done.end_reason), (Some(0), Some(EndReason::ExitStatus)));
    assert_eq!(done.result, Some(json!({"processed": 6, "failed": 0})));
    assert!(done.duration_ms.is_some_and(|d| (1400..10_000).contains(&d)), "duration {:?}", done.duration_ms);
    assert!(done.started_at.is_some() && done.daemon_id.is_some());

    let history = db.db.api.run_progress(run.id).await.expect("progress history");
    let last = history.last().expect("at least one progress report");
    assert_eq!(last.progress, json!({"done": 6, "total": 6, "message": "step 6"}), "the last report is always written");
    assert_eq!(done.progress.as_ref(), Some(&last.progress));
    // Six reports in 1.5 s, throttled to about two writes a second (plus the final one).
    assert!((2..=6).contains(&history.len()), "{} progress writes", history.len());

    let log = setup.run_log(&done);
    for line in ["stdout probe-1: stdout line 1 of 2", "stderr probe-1: stderr line 2 of 2", "stderr probe-1: run"] {
        assert!(log.contains(line), "the run log lacks {line:?}:\n{log}");
    }
    assert!(!log.contains("\"progress\""), "protocol lines are not log lines:\n{log}");
    let output = daemon.output();
    assert!(output.contains("stdout line 1 of 2") && output.contains(&run.id.to_string()), "daemon log:\n{output}");

    let (start, end) = setup.probe_run(run.id);
    assert_eq!(start.expect("a start line").traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(end.expect("an end line").exit_code, Some(0));
}

async fn failures_keep_status_and_stderr_tail(db: &TestDb) {
    let missing = worker("missing", &["/nonexistent/scrinalia-worker"]);
    let setup = Setup::with(db, Setup::config(db, |_| {}).worker(missing));
    let daemon = setup.start_daemon("daemon", &[]);
    let unstartable = setup.request(&db.db.api, "missing", json!({})).await;
    let failing = setup.request(&db.db.api, "probe-1", json!({"exit_code": 3, "output_lines": 30})).await;
    let crashing = setup.request(&db.db.api, "probe-2", json!({"crash": true})).await;

    let failed = wait_finished(&db.db.api, failing.id, Duration::from_secs(20)).await;
    assert_eq!(failed.state, RunState::Failed, "{failed:?}\n{}", daemon.output());
    assert_eq!((failed.exit_code, failed.end_reason), (Some(3), Some(EndReason::ExitStatus)));
    let error = failed.error.expect("an error sentence");
    assert!(error.starts_with("exited with status 3; last lines of stderr:\n"), "{error}");
    assert!(error.ends_with("probe-1: exiting with status 3, as asked"), "{error}");
    assert!(
        error.contains("stderr line 30 of 30") && !error.contains("stderr line 5 of 30"),
        "about 20 lines: {error}"
    );
    assert_eq!(failed.result, None);

    let crashed = wait_finished(&db.db.api, crashing.id, Duration::from_secs(20)).await;
    assert_eq!((crashed.state, crashed.end_reason), (RunState::Failed, Some(EndReason::Signal)));
    assert_eq!(crashed.exit_code, None);
    let error = crashed.error.expect("an error sentence");
    assert!(error.starts_with("killed by signal SIGABRT"), "{error}");

    let unstarted = wait_finished(&db.db.api, unstartable.id, Duration::from_secs(20)).await;
    assert_eq!((unstarted.state, unstarted.end_reason), (RunState::Failed, Some(EndReason::SpawnFailed)));
    let error = unstarted.error.expect("an error sentence");
    assert!(error.starts_with("could not run the worker: \"/nonexistent/scrinalia-worker\": "), "{error}");
}

async fn capacity_bounds_the_runs_in_flight(db: &TestDb) {
    let setup = Setup::new(db, |d| d.capacity = 2);
    let daemon = setup.start_daemon("daemon", &[]);
    let mut runs = Vec::new();
    for worker in ["probe-1", "probe-2", "probe-3"] {
        runs.push(setup.request(&db.db.api, worker, json!({"duration_ms": 1_000})).await.id);
    }
    for id in &runs {
        let done = wait_finished(&db.db.api, *id, Duration::from_secs(20)).await;
        assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    }
    // From the probes' own clock: never more than two executions at once.
    let mut edges: Vec<(i128, i32)> = Vec::new();
    for id in &runs {
        let (start, end) = setup.probe_run(*id);
        edges.push((start.expect("a start").at_ns, 1));
        edges.push((end.expect("an end").at_ns, -1));
    }
    edges.sort();
    let most = edges.iter().scan(0, |n, (_, d)| {
        *n += d;
        Some(*n)
    });
    assert_eq!(most.max(), Some(2), "capacity 2 with three requests");
}

async fn timeouts_fail_the_run(db: &TestDb) {
    let setup = Setup::new(db, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    // probe-3's catalogue timeout is 2 s; ignoring SIGTERM, it is killed after the 1 s grace.
    let run = setup.request(&db.db.api, "probe-3", json!({"duration_ms": 60_000, "ignore_sigterm": true})).await;
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, RunState::Failed, "{done:?}\n{}", daemon.output());
    assert_eq!((done.end_reason, done.error.as_deref()), (Some(EndReason::Timeout), Some("timed out after 2 s")));
    assert!(
        done.duration_ms.is_some_and(|d| (2_900..10_000).contains(&d)),
        "SIGTERM at 2 s, SIGKILL 1 s later: {:?}",
        done.duration_ms
    );
    let (start, end) = setup.probe_run(run.id);
    assert!(start.is_some() && end.is_none(), "the probe was killed, so it wrote no end line");
}

async fn a_worker_missing_from_the_daemons_catalogue_fails_its_run(db: &TestDb) {
    // Requested through a catalogue that has `ghost`, claimed by a daemon whose catalogue does not (a daemon
    // started before the worker was added to the configuration, say).
    let setup = Setup::new(db, |_| {});
    let ghost = insert(&db.db.api, "ghost").await.expect("a request");
    let daemon = setup.start_daemon("daemon", &[]);
    let done = wait_finished(&db.db.api, ghost.id, Duration::from_secs(20)).await;
    assert_eq!((done.state, done.end_reason), (RunState::Failed, Some(EndReason::UnknownWorker)), "{done:?}");
    let error = done.error.expect("a sentence");
    assert!(error.starts_with("worker \"ghost\" is not in the catalogue of daemon "), "{error}\n{}", daemon.output());
}

async fn a_killed_supervisor_fails_its_run_and_takes_its_worker_down(db: &TestDb) {
    let setup = Setup::new(db, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000})).await;
    let worker = setup.probe_started(run.id, Duration::from_secs(20)).await;
    let supervisor = parent_of(worker.pid).expect("the run's supervisor is running");
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).expect("kill the supervisor");
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(20)).await;
    assert_eq!((done.state, done.end_reason), (RunState::Failed, Some(EndReason::SupervisorLost)), "{done:?}");
    let error = done.error.expect("a sentence");
    assert!(error.starts_with("the run's supervisor ended without a report"), "{error}\n{}", daemon.output());
    eventually(Duration::from_secs(5), "the worker to be killed with its supervisor", || async {
        (!alive(worker.pid)).then_some(())
    })
    .await;
}

async fn runs_start_through_a_spare_supervisor_that_leaves_with_its_daemon(db: &TestDb) {
    let setup = Setup::new(db, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    let daemon_pid = daemon.pid().as_raw();
    let next_spare = async |taken: &[(i32, i32)]| {
        eventually(Duration::from_secs(20), "the daemon's next spare", || async {
            spare_of(daemon_pid).filter(|pid| taken.iter().all(|(s, _)| s != pid))
        })
        .await
    };
    let mut seen = Vec::new();
    // The first run takes the spare the daemon started with.
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000})).await;
    let worker = setup.probe_started(run.id, Duration::from_secs(20)).await;
    let supervisor = parent_of(worker.pid).expect("the run's supervisor is running");
    assert_eq!(arguments_of(supervisor), ["supervise", "--spare"], "run {}", run.id);
    seen.push((supervisor, worker.pid));
    // A spare that died is not handed a run: the next run starts a supervisor of its own.
    let dead = next_spare(&seen).await;
    kill(Pid::from_raw(dead), Signal::SIGKILL).expect("kill the spare");
    eventually(Duration::from_secs(10), "the spare to die", || async { (!alive(dead)).then_some(()) }).await;
    let run = setup.request(&db.db.api, "probe-2", json!({"duration_ms": 60_000})).await;
    let worker = setup.probe_started(run.id, Duration::from_secs(20)).await;
    let supervisor = parent_of(worker.pid).expect("the run's supervisor is running");
    assert!(arguments_of(supervisor).contains(&run.id.to_string()), "a supervisor started for run {}", run.id);
    seen.push((supervisor, worker.pid));
    let spare = next_spare(&seen).await;
    daemon.signal(Signal::SIGKILL);
    // With its daemon gone, the idle spare leaves, and the runs' supervisors stop their workers (the fence).
    eventually(Duration::from_secs(20), "the spare and the runs to be gone", || async {
        let left: Vec<i32> = seen.iter().flat_map(|(s, w)| [*s, *w]).chain([spare]).filter(|p| alive(*p)).collect();
        left.is_empty().then_some(())
    })
    .await;
}

/// The arguments of process `pid` after its program.
fn arguments_of(pid: i32) -> Vec<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline
        .split(|b| *b == 0)
        .skip(1)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The idle spare supervisor of the daemon `daemon`: its child `supervise --spare` with no worker of its own.
fn spare_of(daemon: i32) -> Option<i32> {
    let pids = std::fs::read_dir("/proc").ok()?.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok());
    let children: Vec<i32> = pids.filter(|pid| parent(*pid) == Some(daemon) && alive(*pid)).collect();
    let all = std::fs::read_dir("/proc").ok()?.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok());
    let busy: Vec<i32> = all.filter_map(parent).collect();
    children.into_iter().find(|pid| arguments_of(*pid) == ["supervise", "--spare"] && !busy.contains(pid))
}

/// The parent of process `pid`, from `/proc/<pid>/stat` (`pid (comm) state ppid …`; the command name may hold
/// spaces and parentheses, so it is read after the last ')').
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The parent of process `pid`: a worker's is its run's supervisor (`scrinalia-daemon supervise …`, a spare
/// started ahead of the run or one started for it).
fn parent_of(pid: i32) -> Option<i32> {
    let parent = parent(pid)?;
    let cmdline = std::fs::read(format!("/proc/{parent}/cmdline")).ok()?;
    cmdline.split(|b| *b == 0).nth(1).is_some_and(|verb| verb == b"supervise").then_some(parent)
}
