//! The daemon's life with real processes: cancellation of a worker that ignores SIGTERM, shutdown by signal
//! (a short run finishes, a long one is interrupted after the drain time, a second signal stops at once),
//! draining through the database, systemd notifications and queue counts.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use scrinalia_daemon::Shutdown;
use scrinalia_shared::{DaemonState, EndReason, OptionType, RunState, runs::CancelOutcome, telemetry::Telemetry};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{
    TestDb, backend_tests, bin_path,
    daemon_harness::{Setup, alive, wait_finished, wait_started},
    demo_worker, eventually,
};
use serde_json::json;

/// How long the registry waits for a silent daemon (the tests' `daemon.gone_after_seconds`).
const GONE_AFTER: std::time::Duration = std::time::Duration::from_secs(6);

backend_tests!(
    cancelling_kills_a_worker_that_ignores_sigterm,
    queue_counts_fall_after_runs,
    the_daemon_runs_in_process_until_its_injected_shutdown,
);

async fn cancelling_kills_a_worker_that_ignores_sigterm(db: &TestDb) {
    let setup = Setup::new(db, |d| d.cancel_grace_seconds = 1);
    let daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000, "ignore_sigterm": true})).await;
    wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;
    let worker = setup.probe_started(run.id, Duration::from_secs(5)).await.pid;

    let asked = Instant::now();
    let outcome = db.db.api.request_cancel(run.id, "ada").await.expect("cancel");
    assert!(matches!(outcome, Some(CancelOutcome::Requested(_))), "{outcome:?}");
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(15)).await;
    let took = asked.elapsed();
    assert_eq!(done.state, RunState::Cancelled, "{done:?}\n{}", daemon.output());
    assert_eq!((done.end_reason, done.error.as_deref()), (Some(EndReason::Cancelled), Some("cancelled by ada")));
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(8),
        "SIGTERM is ignored, so SIGKILL after the 1 s grace: {took:?}"
    );
    assert!(!alive(worker), "the worker is gone");
    assert!(setup.probe_run(run.id).1.is_none(), "killed by SIGKILL, the probe wrote no end line");
}

async fn queue_counts_fall_after_runs(db: &TestDb) {
    let bin = demo_worker().display().to_string();
    let mut transfer = worker("transfer", &[&bin, "transfer"]);
    transfer.options = vec![
        option("batch_size", OptionType::Integer, Some(json!(10))),
        option("delay_ms", OptionType::Integer, Some(json!(0))),
        option("limit", OptionType::Integer, None),
        option("verify", OptionType::Boolean, Some(json!(true))),
    ];
    let config = Setup::config(db, |d| {
        d.queue_count_interval_seconds = 1;
        d.workers = vec!["transfer".into(), "probe-1".into()];
    });
    let setup = Setup::with(db, config.worker(transfer));
    let daemon = setup.start_daemon("daemon", &[]);
    let not_ours = setup.request(&db.db.api, "probe-2", json!({})).await;
    let pending = |worker: &'static str| async move {
        let counts = db.db.api.queue_counts().await.ok()?;
        counts.into_iter().find(|c| c.worker == worker)
    };
    let before = eventually(Duration::from_secs(20), "a first count of transfer", || async {
        pending("transfer").await.filter(|c| c.pending.is_some_and(|n| n > 0))
    })
    .await;
    assert!(before.took_ms >= 0 && before.error.is_none(), "{before:?}");
    let run = setup.request(&db.db.api, "transfer", json!({})).await;
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(30)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    // The worker may empty its queue a moment before the run is marked finished, so a zero measured
    // then is also right; what must happen is a fresh count, taken after the run ended, that says zero.
    let finished_at = done.finished_at.expect("finished");
    let after = eventually(Duration::from_secs(10), "a count of transfer taken after the run, at zero", || async {
        pending("transfer").await.filter(|c| c.measured_at > finished_at)
    })
    .await;
    assert_eq!(after.pending, Some(0), "{after:?}");
    let counts = db.db.api.queue_counts().await.expect("counts");
    assert!(counts.iter().any(|c| c.worker == "probe-1"), "probe-1 is taken, so counted: {counts:?}");
    assert!(!counts.iter().any(|c| c.worker == "probe-2"), "probe-2 is not this daemon's, so not counted: {counts:?}");
    let not_ours = db.db.api.get_run(not_ours.id).await.expect("read").expect("row");
    assert_eq!(not_ours.state, RunState::Queued, "probe-2 is not this daemon's, so not claimed");
}

/// The daemon's `run` in this test's own process, stopped by cancelling the shutdown it was given (no signal):
/// it runs a request, then, asked to stop, interrupts the long run at the end of its drain time and returns.
async fn the_daemon_runs_in_process_until_its_injected_shutdown(db: &TestDb) {
    // The test executable cannot supervise runs, so the daemon's binary is the supervisor.
    let setup = Setup::new(db, |d| {
        d.drain_seconds = 1;
        d.supervisor_program = Some(bin_path("scrinalia-daemon"));
    });
    let (shutdown, telemetry) = (Shutdown::default(), Telemetry::default());
    let running = scrinalia_daemon::run(setup.settings.clone(), &telemetry, shutdown.clone());
    let drive = async {
        let short = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 100})).await;
        let short = wait_finished(&db.db.api, short.id, Duration::from_secs(20)).await;
        assert_eq!(short.state, RunState::Succeeded, "{short:?}");
        let long = setup.request(&db.db.api, "probe-2", json!({"duration_ms": 60_000})).await;
        let long = wait_started(&db.db.api, long.id, Duration::from_secs(20)).await;
        shutdown.graceful.cancel();
        long
    };
    let (stopped, long) = tokio::join!(running, drive);
    stopped.expect("the daemon stops cleanly");
    let long = db.db.api.get_run(long.id).await.expect("read").expect("row");
    assert_eq!((long.state, long.end_reason), (RunState::Interrupted, Some(EndReason::DaemonShutdown)), "{long:?}");
    let row = db.db.api.get_daemon(long.daemon_id.expect("claimed"), GONE_AFTER).await.expect("read").expect("row");
    assert!(row.state == DaemonState::Gone && row.stopped_at.is_some(), "the daemon marked itself stopped: {row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_short_run_finish_and_claims_nothing_more() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |d| d.drain_seconds = 20);
    let mut daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 2_000})).await;
    let run = wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;
    daemon.signal(Signal::SIGTERM);
    eventually(Duration::from_secs(20), "the daemon to stop claiming", || async {
        daemon.output().contains("claiming stopped; draining").then_some(())
    })
    .await;
    let late = setup.request(&db.db.api, "probe-2", json!({})).await;
    assert_eq!(daemon.wait(Duration::from_secs(15)).await, Some(0), "{}", daemon.output());
    let done = db.db.api.get_run(run.id).await.expect("read").expect("row");
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    let late = db.db.api.get_run(late.id).await.expect("read").expect("row");
    assert_eq!(late.state, RunState::Queued, "a stopping daemon claims nothing");
    let row = db.db.api.get_daemon(run.daemon_id.expect("claimed"), GONE_AFTER).await.expect("read").expect("row");
    assert!(row.state == DaemonState::Gone && row.stopped_at.is_some(), "{row:?}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_interrupts_a_long_run_after_the_drain_time() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |d| d.drain_seconds = 1);
    let mut daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000})).await;
    wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;
    let signalled = Instant::now();
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait(Duration::from_secs(15)).await, Some(0), "{}", daemon.output());
    assert!(signalled.elapsed() >= Duration::from_secs(1), "the run had its drain time");
    let done = db.db.api.get_run(run.id).await.expect("read").expect("row");
    assert_eq!((done.state, done.error.as_deref()), (RunState::Interrupted, Some("daemon shutdown")), "{done:?}");
    assert_eq!(done.end_reason, Some(EndReason::DaemonShutdown));
    let end = setup.probe_run(run.id).1.expect("stopped by SIGTERM, the probe wrote its end line");
    assert_eq!(end.outcome.as_deref(), Some("sigterm"));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_the_runs_at_once() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |d| d.drain_seconds = 120);
    let mut daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000})).await;
    wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;
    let signalled = Instant::now();
    daemon.signal(Signal::SIGTERM);
    // The second signal must come after the first was acted on, or it would be the first.
    eventually(Duration::from_secs(20), "the daemon to start draining", || async {
        daemon.output().contains("claiming stopped; draining").then_some(())
    })
    .await;
    daemon.signal(Signal::SIGINT);
    assert_eq!(daemon.wait(Duration::from_secs(15)).await, Some(0), "{}", daemon.output());
    assert!(signalled.elapsed() < Duration::from_secs(10), "no drain wait after the second signal");
    let done = db.db.api.get_run(run.id).await.expect("read").expect("row");
    assert_eq!((done.state, done.error.as_deref()), (RunState::Interrupted, Some("daemon shutdown")), "{done:?}");
    assert_eq!(done.end_reason, Some(EndReason::DaemonShutdown));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_through_the_database_finishes_runs_then_exits() {
    let db = TestDb::postgres().await;
    // Heartbeats a minute apart: a daemon that stops claiming well within the minute heard the notification.
    let setup = Setup::new(&db, |d| {
        d.heartbeat_seconds = 60;
        d.gone_after_seconds = 180;
    });
    let mut daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 2_500})).await;
    let run = wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;
    let id = run.daemon_id.expect("claimed");
    db.db.api.request_drain(id, "operator", Duration::from_secs(180)).await.expect("the daemon is alive");
    // The registry's notification makes the daemon heartbeat at once instead of within the minute.
    eventually(Duration::from_secs(30), "the daemon to stop claiming", || async {
        daemon.output().contains("claiming stopped; draining").then_some(())
    })
    .await;
    let late = setup.request(&db.db.api, "probe-2", json!({})).await;
    assert_eq!(daemon.wait(Duration::from_secs(15)).await, Some(0), "{}", daemon.output());
    assert_eq!(db.db.api.get_run(run.id).await.expect("read").expect("row").state, RunState::Succeeded);
    assert_eq!(db.db.api.get_run(late.id).await.expect("read").expect("row").state, RunState::Queued);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_hears_ready_status_watchdog_and_stopping() {
    let db = TestDb::sqlite().await;
    let setup = Setup::new(&db, |_| {});
    let socket_path = setup.dir.join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path).expect("bind the notification socket");
    let heard: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::spawn(collect(socket, heard.clone()));
    let socket_env = socket_path.display().to_string();
    let mut daemon = setup.start_daemon("daemon", &[("NOTIFY_SOCKET", &socket_env), ("WATCHDOG_USEC", "400000")]);
    eventually(Duration::from_secs(10), "READY=1 and a WATCHDOG=1", || async {
        let heard = heard.lock().expect("lock").clone();
        let ready = heard.iter().position(|m| m.contains("READY=1"))?;
        heard[ready..].iter().any(|m| m.contains("WATCHDOG=1")).then_some(())
    })
    .await;
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait(Duration::from_secs(10)).await, Some(0), "{}", daemon.output());
    // The last datagrams were sent before the exit; the listener may not have taken them off the socket yet.
    eventually(Duration::from_secs(10), "STOPPING=1", || async {
        heard.lock().expect("lock").iter().any(|m| m.contains("STOPPING=1")).then_some(())
    })
    .await;
    listener.abort();
    let heard = heard.lock().expect("lock").clone();
    let first = |what: &str| heard.iter().position(|m| m.lines().any(|l| l.starts_with(what)));
    let (ready, status, watchdog, stopping) =
        (first("READY=1"), first("STATUS="), first("WATCHDOG=1"), first("STOPPING=1"));
    let order =
        [ready, status, watchdog, stopping].map(|i| i.unwrap_or_else(|| panic!("missing a notification: {heard:?}")));
    assert!(order[0] <= order[1] && order[1] < order[2] && order[2] < order[3], "{heard:?}");
    assert!(heard.iter().any(|m| m.contains("STATUS=0/3 runs in flight, watching the database files")), "{heard:?}");
    assert!(!heard[order[3]..].iter().any(|m| m.contains("READY=1")), "{heard:?}");
    db.cleanup().await;
}

async fn collect(socket: tokio::net::UnixDatagram, heard: Arc<Mutex<Vec<String>>>) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf).await {
        heard.lock().expect("lock").push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
}

/// Three daemons started at the same moment on a SQLite file that does not exist yet all start: the ones that
/// lose the race to set the file up wait for it instead of failing with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_started_together_on_a_new_sqlite_file_all_start() {
    let dir = tempfile::Builder::new().prefix("scrinalia-race-").tempdir().expect("a scratch folder");
    for round in 0..3 {
        let url = format!("sqlite://{}/round-{round}/scrinalia.sqlite", dir.path().display());
        let config = scrinalia_testkit::ConfigFile::new(&url, dir.path())
            .workers([scrinalia_testkit::config::worker("w", &["true"])]);
        let path = dir.path().join(format!("round-{round}.toml"));
        config.write(&path).expect("write the configuration");
        let path = path.display().to_string();
        let mut daemons: Vec<_> = (0..3)
            .map(|i| {
                scrinalia_tests::start(
                    "scrinalia-daemon",
                    &format!("r{round}-d{i}"),
                    dir.path(),
                    &["--config", &path],
                    &[],
                )
            })
            .collect();
        for daemon in &mut daemons {
            let started = daemon.wait_for("daemon started", Duration::from_secs(20)).await;
            assert!(started.is_ok(), "round {round}: {:?}\n{}", started, daemon.output());
        }
        for daemon in daemons {
            daemon.stop(Duration::from_secs(10)).await;
        }
    }
}
