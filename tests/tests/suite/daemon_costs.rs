//! What the daemon costs: an idle daemon makes under one query a second on either backend (its own heartbeats do
//! not wake it on SQLite). Latency, throughput and the idle daemon's CPU and memory are measured by
//! `scrinalia-bench` (docs/benchmarks.md).

use std::time::Duration;

use scrinalia_tests::{TestDb, backend_tests, daemon_harness::Setup, eventually};

backend_tests!(an_idle_daemon_makes_under_one_query_a_second);

async fn an_idle_daemon_makes_under_one_query_a_second(db: &TestDb) {
    // The shipped defaults for everything that ticks: heartbeat 5 s, poll 10 s, lease 30 s (recovery every 10 s).
    let setup = Setup::new(db, |d| {
        (d.lease_seconds, d.poll_seconds, d.heartbeat_seconds, d.gone_after_seconds) = (30, 10, 5, 30);
    });
    let daemon = setup.start_daemon("daemon", &[("RUST_LOG", "info,sqlx::query=debug")]);
    eventually(Duration::from_secs(10), "the daemon to start", || async {
        daemon.output().contains("daemon started").then_some(())
    })
    .await;
    // Let the start-up work pass: migrations, first queue counts, and the first retention pass (two seconds
    // after the start; the next look is a minute away, one statement).
    eventually(Duration::from_secs(20), "the first retention pass", || async {
        daemon.output().contains("retention pass").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = statements(&daemon.output());
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let made = statements(&daemon.output()) - before;
    let rate = made as f64 / window.as_secs_f64();
    eprintln!("measured ({:?}): an idle daemon made {made} queries in {} s = {rate:.2}/s", db.kind, window.as_secs());
    assert!(rate < 1.0, "{made} queries in {window:?}:\n{}", daemon.output());
}

/// sqlx logs every statement it sends (target `sqlx::query`, with a `summary=` field).
fn statements(log: &str) -> usize {
    log.lines().filter(|l| l.contains("summary=")).count()
}
