//! What the daemon costs: an idle daemon makes under one query a second on either backend (its own heartbeats do
//! not wake it on SQLite). Latency, throughput and the idle daemon's CPU and memory are measured by
//! `scrinalia-bench` (docs/benchmarks.md).

use std::time::Duration;

use scrinalia_shared::Chore;
use scrinalia_testkit::probes::whole_lines;
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
    // Let the start-up work pass: migrations, the first describe, check and queue count of every worker (due at
    // once, then not for minutes), and the first retention pass (two seconds after the start; the next look is a
    // minute away, one statement).
    eventually(Duration::from_secs(20), "the first retention pass", || async {
        daemon.output().contains("retention pass").then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "every worker's first chores to be done", || async {
        for worker in &setup.settings.catalogue.workers {
            let chores = db.db.daemon.chores(&worker.name).await.ok()?;
            let done = |c: &Chore| {
                let answered = c.requested_at.is_none_or(|r| c.started_at.is_some_and(|s| s >= r));
                c.lease_by.is_none() && c.finished_at.is_some() && answered
            };
            (!chores.is_empty() && chores.iter().all(done)).then_some(())?;
        }
        Some(())
    })
    .await;
    // On SQLite, which the daemon watches for changes, the pass's own writes wake its loops for one round of
    // looks, over long before the next heartbeat (every 5 s from the start): the window opens at that heartbeat.
    eventually(Duration::from_secs(30), "a heartbeat after the first retention pass", || async {
        let log = daemon.output();
        let after = &log[log.find("retention pass")?..];
        after.contains("update daemons set heartbeat_at").then_some(())
    })
    .await;
    let before = statements(&daemon.output());
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let made = statements(&daemon.output()) - before;
    let rate = made as f64 / window.as_secs_f64();
    eprintln!("measured ({:?}): an idle daemon made {made} queries in {} s = {rate:.2}/s", db.kind, window.as_secs());
    assert!(rate < 1.0, "{made} queries in {window:?}:\n{}", daemon.output());
}

/// sqlx logs every statement it sends (target `sqlx::query`, with a `summary=` field); the daemon may be writing
/// the last line as the log is read, so only whole lines count.
fn statements(log: &str) -> usize {
    whole_lines(log).filter(|l| l.contains("summary=")).count()
}
