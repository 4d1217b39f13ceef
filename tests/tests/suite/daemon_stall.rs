//! The stall watchdog through real daemons and probes, on both backends: a probe that goes silent past its
//! `stall_seconds` is stopped (SIGTERM, the cancel grace, SIGKILL) and ends `interrupted`/`stalled` with a
//! sentence naming what it last reported, within `stall_seconds` + grace + 2 s of that; resumed, it starts from
//! its checkpoint; one that never reports anything stalls "since the worker started"; one that keeps reporting
//! progress is never stopped; and a retry policy with `on = ["stalled"]` retries a stalled run (as a resume from
//! its checkpoint) and not a failed one.

use std::time::Duration;

use scrinalia_shared::{EndReason, FollowKind, RetryOn, RetryPolicy, Run, RunState};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{ProbeEvent, Setup, at_ns, wait_finished},
    eventually,
};
use serde_json::{Value, json};

backend_tests!(
    a_silent_run_stalls_with_a_sentence_in_time_and_resumes_from_its_checkpoint,
    a_run_that_keeps_reporting_progress_is_never_stopped,
    a_retry_policy_on_stalled_retries_a_stalled_run_and_not_a_failed_one,
);

/// The watchdog of the probes: small, so the tests take seconds (the tests' cancel grace is 1 s).
const STALL_SECONDS: i64 = 2;
/// The tests' `daemon.cancel_grace_seconds`.
const GRACE_SECONDS: f64 = 1.0;

/// A probe that reports progress every 200 ms and a checkpoint every second, then goes silent after one second
/// (right after progress "step 5" and checkpoint `{"step": 1}`) for the rest of its 20 s, ignoring SIGTERM, so
/// only the grace's SIGKILL stops it: the slowest stop the watchdog can make.
fn silent() -> Value {
    json!({"duration_ms": 20_000, "progress_steps": 100, "checkpoints": 20, "silent_after_ms": 1000, "ignore_sigterm": true})
}

/// The tests' configuration with `stall_seconds` on `probe-1` and `probe-2`, and `edit` applied to those two.
fn setup(t: &TestDb, edit: impl Fn(&mut scrinalia_shared::WorkerSpec)) -> Setup {
    let config = Setup::config(t, |_| {}).with(|f| {
        for probe in f.workers.iter_mut().filter(|w| w.name == "probe-1" || w.name == "probe-2") {
            probe.stall_seconds = Some(STALL_SECONDS);
            edit(probe);
        }
    });
    Setup::with(t, config)
}

/// The probe ledger's line `event` of `run`.
fn probe_line(setup: &Setup, run: &Run, event: &str) -> ProbeEvent {
    let id = run.id.to_string();
    let events = setup.probe_events();
    let line = events.into_iter().find(|e| e.event == event && e.run_id.as_deref() == Some(id.as_str()));
    line.unwrap_or_else(|| panic!("no {event} line for run {id}"))
}

/// Seconds from a probe ledger line to the run's end in the database (the same host's clock).
fn seconds_to_end(line: &ProbeEvent, run: &Run) -> f64 {
    let finished = at_ns(run.finished_at.expect("ended"));
    (finished - line.at_ns) as f64 / 1e9
}

/// Asserts that `run` was stopped by the watchdog, `seconds` after its last activity: no earlier than
/// `stall_seconds` (less a little: the probe writes its ledger line just after printing, and the daemon sees
/// the line after that), and no later than `stall_seconds` + grace + 2 s, as the issue asks. The 2 s are the only
/// slack for a loaded machine (scheduling of the daemon, the supervisor and the database write); the bound is
/// not widened beyond what the issue allows.
fn stalled_in_time(run: &Run, seconds: f64, sentence: &str) {
    assert_eq!((run.state, run.end_reason), (RunState::Interrupted, Some(EndReason::Stalled)), "{run:?}");
    assert_eq!(run.error.as_deref(), Some(sentence), "{run:?}");
    let (earliest, latest) = (STALL_SECONDS as f64 - 0.2, STALL_SECONDS as f64 + GRACE_SECONDS + 2.0);
    assert!(seconds >= earliest, "stopped {seconds:.2} s after its last activity, before its stall_seconds");
    assert!(seconds <= latest, "stopped {seconds:.2} s after its last activity, later than {latest} s");
}

async fn a_silent_run_stalls_with_a_sentence_in_time_and_resumes_from_its_checkpoint(t: &TestDb) {
    let setup = setup(t, |_| {});
    let catalogue = &setup.settings.catalogue;
    let daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&t.db.api, "probe-1", silent()).await;
    assert_eq!(run.config.stall_seconds.as_ref().map(|s| s.value), Some(2), "resolved onto the run");
    // And one that never reports anything at all: its slow start counts.
    let mute = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 20_000, "progress_steps": 0})).await;

    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(30)).await;
    let quiet = probe_line(&setup, &run, "silent");
    stalled_in_time(&run, seconds_to_end(&quiet, &run), "no progress for 2 s since step 5");
    assert_eq!(run.checkpoint, Some(json!({"step": 1})), "the last checkpoint, before it went silent");
    assert!(run.cancel_requested_at.is_none(), "nobody cancelled it");
    let log = setup.run_log(&run);
    assert!(log.contains("scrinalia: no progress for 2 s since step 5; the worker is stopped"), "{log}");
    let end = setup.probe_run(run.id).1;
    assert!(end.is_none(), "it ignored SIGTERM, so the grace's SIGKILL ended it: {end:?}");

    let mute = wait_finished(&t.db.api, mute.id, Duration::from_secs(30)).await;
    let start = probe_line(&setup, &mute, "start");
    stalled_in_time(&mute, seconds_to_end(&start, &mute), "no progress for 2 s since the worker started");

    // Resumed, it starts from that checkpoint (and, told to go silent again, stalls again).
    let resumed = t.db.api.continue_run(catalogue, run.id, FollowKind::Resume, "ada").await.expect("resume");
    let start = setup.probe_started(resumed.id, Duration::from_secs(20)).await;
    assert_eq!(start.checkpoint, Some(json!({"step": 1})), "its worker got the stalled run's checkpoint");
    let resumed = wait_finished(&t.db.api, resumed.id, Duration::from_secs(30)).await;
    assert_eq!(resumed.end_reason, Some(EndReason::Stalled), "{resumed:?}");
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_run_that_keeps_reporting_progress_is_never_stopped(t: &TestDb) {
    let setup = setup(t, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    // Progress every 300 ms for three times its stall_seconds.
    let run = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 6_000, "progress_steps": 20})).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.end_reason), (RunState::Succeeded, Some(EndReason::ExitStatus)), "{run:?}");
    let (start, end) = setup.probe_run(run.id);
    let ran = (end.expect("it ended by itself").at_ns - start.expect("it started").at_ns) as f64 / 1e9;
    assert!(ran >= 6.0, "it ran its whole 6 s, {ran:.2} s");
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_retry_policy_on_stalled_retries_a_stalled_run_and_not_a_failed_one(t: &TestDb) {
    let policy = RetryPolicy {
        max_attempts: 2,
        initial_delay_seconds: 0.0,
        factor: 1.0,
        max_delay_seconds: 0.0,
        jitter: 0.0,
        on: vec![RetryOn::Stalled],
        resume: true,
    };
    let setup = setup(t, |probe| probe.retry = Some(policy.clone()));
    let daemon = setup.start_daemon("daemon", &[]);
    let first = setup.request(&t.db.api, "probe-1", silent()).await;
    let failed = setup.request(&t.db.api, "probe-2", json!({"exit_code": 3})).await;

    let chain = eventually(Duration::from_secs(40), "the stalled run and its retry, both ended", || async {
        let chain = t.db.api.run_chain(first.id).await.expect("chain");
        (chain.len() == 2 && chain.iter().all(|r| r.state.is_terminal())).then_some(chain)
    })
    .await;
    let (stalled, retry) = (&chain[0], &chain[1]);
    assert_eq!(stalled.end_reason, Some(EndReason::Stalled), "{stalled:?}");
    assert_eq!((retry.retry_of, retry.attempt), (Some(stalled.id), 2));
    assert_eq!((retry.follows, retry.follows_as), (Some(stalled.id), Some(FollowKind::Resume)));
    let start = setup.probe_run(retry.id).0.expect("the retry's probe started");
    assert_eq!(start.checkpoint, Some(json!({"step": 1})), "the retry resumed from the stalled run's checkpoint");
    assert_eq!(retry.end_reason, Some(EndReason::Stalled), "it stalled too, and was its last attempt");

    let failed = wait_finished(&t.db.api, failed.id, Duration::from_secs(20)).await;
    assert_eq!(failed.state, RunState::Failed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let chain = t.db.api.run_chain(failed.id).await.expect("chain");
    assert_eq!(chain.len(), 1, "on = [\"stalled\"] does not retry a failed run: {chain:?}");
    assert_eq!(t.db.api.run_chain(first.id).await.expect("chain").len(), 2, "no third attempt");
    daemon.stop(Duration::from_secs(10)).await;
}
