//! What an idle API process costs the database: on PostgreSQL, once its change feed listens, a process with no
//! request and no stream open sends under one statement every two seconds. The service tokens are re-read when a
//! notification says they changed, and otherwise every 30 s; live events arrive by notification. Counted from the
//! process's own statement log, as `daemon_costs` counts a daemon's; measured by `scrinalia-bench idle` too.

use std::{net::SocketAddr, time::Duration};

use scrinalia_testkit::probes::whole_lines;
use scrinalia_tests::{
    TestDb,
    api_harness::{ApiConfig, config_file},
    eventually, free_port,
};

/// What the API logs once its token refresher relies on the change feed (api/src/auth/tokens.rs).
pub const LISTENING: &str = "service tokens: re-read when the change feed says they changed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_api_on_postgres_makes_under_one_statement_every_two_seconds() {
    let t = TestDb::postgres().await;
    let port = free_port();
    let config = ApiConfig { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..ApiConfig::default() };
    let path = t.write_config(&config_file(&t.url, t.dir.path(), &config), "api");
    let env = [("RUST_LOG", "info,sqlx::query=debug")];
    let api = scrinalia_tests::start_api(t.dir.path(), "api", &path, port, &env).await;
    // Up (it answered /readyz), and its feed listens: the refresher says so when it stops polling.
    eventually(Duration::from_secs(30), "the token refresher to rely on the change feed", || async {
        api.output().contains(LISTENING).then_some(())
    })
    .await;
    // The feed's first resync asks for one more read of the tokens, which must not fall into the window.
    eventually(Duration::from_secs(10), "the read of the tokens that the feed's resync asked for", || async {
        let log = api.output();
        let after = &log[log.find(LISTENING)?..];
        whole_lines(after).any(|l| l.contains("summary=") && l.contains("service_tokens")).then_some(())
    })
    .await;
    let before = statements(&api.output());
    let window = Duration::from_secs(5);
    tokio::time::sleep(window).await;
    let log = api.output();
    let made = statements(&log) - before;
    eprintln!("measured: an idle API on PostgreSQL made {made} statements in {} s", window.as_secs());
    assert!(made <= 2, "{made} statements in {window:?} (at most 2 allowed: under 0.5/s):\n{log}");
    drop(api);
    t.cleanup().await;
}

/// sqlx logs every statement it sends (target `sqlx::query`, with a `summary=` field); the API may be writing the
/// last line as the log is read, so only whole lines count.
fn statements(log: &str) -> usize {
    whole_lines(log).filter(|l| l.contains("summary=")).count()
}
