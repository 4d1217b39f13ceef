//! What the daemon costs and how fast it answers: an idle daemon makes under one query a second on either
//! backend (its own heartbeats do not wake it on SQLite), and, measured on demand, how long a request waits for
//! its claim on PostgreSQL:
//!
//! ```text
//! cargo test -p scrinalia-tests --test daemon_costs -- --ignored --nocapture
//! ```

use std::time::Duration;

use scrinalia_shared::db::RunState;
use scrinalia_tests::{
    TestDb, backend_tests, bin_path,
    daemon_harness::{Setup, wait_finished},
    eventually,
};
use serde_json::json;

backend_tests!(an_idle_daemon_makes_under_one_query_a_second);

async fn an_idle_daemon_makes_under_one_query_a_second(db: &TestDb) {
    // The shipped defaults for everything that ticks: heartbeat 5 s, poll 10 s, lease 30 s (recovery every 10 s).
    let defaults =
        [("lease_seconds", "30"), ("poll_seconds", "10"), ("heartbeat_seconds", "5"), ("gone_after_seconds", "30")];
    let setup = Setup::new(db, &defaults, "");
    let daemon = setup.start_daemon("daemon", &[("RUST_LOG", "info,sqlx::query=debug")]);
    eventually(Duration::from_secs(10), "the daemon to start", || async {
        daemon.output().contains("daemon started").then_some(())
    })
    .await;
    // Let the start-up work (migrations, first queue counts) pass.
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

/// Insert → claim on PostgreSQL, from the database's own `requested_at` and `claimed_at`, for 200 requests spaced
/// `SCRINALIA_BENCH_SPACING_MS` apart (100 by default) against an otherwise idle daemon (each to its own worker,
/// so none waits for another). On a small VM the figure depends mostly on how long the processes have been idle:
/// every wake-up from idle (the daemon, then the database backend) costs up to a millisecond there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn insert_to_claim_latency_on_postgres() {
    let db = TestDb::postgres().await;
    let bin = bin_path("scrinalia-demo-worker");
    let workers: String = (0..220)
        .map(|i| {
            format!(
                "[[workers]]\nname = \"bench-{i:03}\"\ncommand = [\"{}\", \"probe-1\"]\noptions = [ {{ name = \"duration_ms\", type = \"integer\", default = 0 }}, {{ name = \"progress_steps\", type = \"integer\", default = 0 }}, {{ name = \"output_lines\", type = \"integer\", default = 0 }} ]\n\n",
                bin.display()
            )
        })
        .collect();
    let setup = Setup::new(&db, &[], &workers);
    let daemon = setup.start_daemon("daemon", &[]);
    eventually(Duration::from_secs(10), "the daemon to start", || async {
        daemon.output().contains("daemon started").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spacing: u64 = std::env::var("SCRINALIA_BENCH_SPACING_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let mut runs = Vec::new();
    for i in 0..220 {
        runs.push(setup.request(&db.db, &format!("bench-{i:03}"), json!({})).await.id);
        tokio::time::sleep(Duration::from_millis(spacing)).await;
    }
    let mut waits = Vec::new();
    for (i, id) in runs.iter().enumerate() {
        let run = wait_finished(&db.db, *id, Duration::from_secs(30)).await;
        assert_eq!(run.state, RunState::Succeeded, "{run:?}");
        if i >= 20 {
            let waited = run.claimed_at.expect("claimed") - run.requested_at;
            waits.push(waited.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0);
        }
    }
    waits.sort_by(f64::total_cmp);
    let at = |q: f64| waits[((waits.len() as f64 - 1.0) * q).round() as usize];
    eprintln!(
        "measured: insert -> claim on PostgreSQL over {} requests {spacing} ms apart (20 warm-up excluded): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        waits.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    assert!(at(0.99) < 100.0, "p99 {:.2} ms", at(0.99));
    db.cleanup().await;
}
