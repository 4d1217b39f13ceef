//! Invariants 2 and 3 with real processes on PostgreSQL: a killed daemon's run is recovered within its lease
//! and its worker is gone; a frozen daemon's worker is killed by its supervisor before the lease ends, a new run
//! of the same worker never overlaps it, and the thawed daemon does not overwrite the ledger; terminated
//! database connections are survived.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use scrinalia_shared::{EndReason, RunState};
use scrinalia_tests::{
    Process, TestDb,
    daemon_harness::{Setup, alive, at_ns, realtime_ns, wait_finished, wait_run, wait_started},
    eventually, postgres_admin_url, terminate_connections,
};
use serde_json::json;
use sqlx::Connection;

/// How long the registry waits for a silent daemon (the tests' `daemon.gone_after_seconds`).
const GONE_AFTER: std::time::Duration = std::time::Duration::from_secs(6);

const LEASE: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_is_recovered_within_its_lease_and_its_sibling_goes_on() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |d| d.capacity = 1);
    let mut daemons = [setup.start_daemon("daemon-a", &[]), setup.start_daemon("daemon-b", &[])];
    let doomed = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 30_000})).await;
    let survivor = setup.request(&db.db.api, "probe-2", json!({"duration_ms": 6_000})).await;
    let doomed = wait_started(&db.db.api, doomed.id, Duration::from_secs(10)).await;
    let survivor = wait_started(&db.db.api, survivor.id, Duration::from_secs(10)).await;
    assert_ne!(doomed.daemon_id, survivor.daemon_id, "capacity 1: each daemon holds one run");
    let worker = setup.probe_started(doomed.id, Duration::from_secs(5)).await.pid;
    let owner = db
        .db
        .api
        .get_daemon(doomed.daemon_id.expect("claimed"), GONE_AFTER)
        .await
        .expect("daemon row")
        .expect("registered");
    let victim = daemons.iter_mut().position(|d| d.pid().as_raw() == owner.pid).expect("the owner is one of ours");

    daemons[victim].signal(Signal::SIGKILL);
    let killed = Instant::now();
    let recovered = wait_run(&db.db.api, doomed.id, LEASE + Duration::from_secs(6), "recovery", |r| {
        r.state == RunState::Interrupted
    })
    .await;
    let took = killed.elapsed();
    eprintln!(
        "measured: SIGKILL of the owning daemon -> run interrupted in {} ms (lease {} s)",
        took.as_millis(),
        LEASE.as_secs()
    );
    assert!(took < LEASE + Duration::from_secs(3), "recovered after {took:?}");
    assert!(!alive(worker), "a run marked interrupted must not be executing (worker pid {worker})");
    let end = setup.probe_run(doomed.id).1.expect("the orphaned supervisor stopped the worker gently");
    assert_eq!(end.outcome.as_deref(), Some("sigterm"), "SIGTERM as soon as the daemon's pipe closed: {end:?}");
    assert!(recovered.error.as_deref().is_some_and(|e| e.starts_with("owner lost: daemon ")), "{:?}", recovered.error);
    assert_eq!(recovered.end_reason, Some(EndReason::OwnerLost));

    let other = wait_finished(&db.db.api, survivor.id, Duration::from_secs(15)).await;
    assert_eq!(other.state, RunState::Succeeded, "{other:?}\n{}", daemons[1 - victim].output());
    let _ = daemons[victim].wait(Duration::from_secs(5)).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_daemon_is_fenced_by_its_supervisor_and_cannot_overwrite_the_ledger() {
    let db = TestDb::postgres().await;
    // A 6 s lease keeps the supervisor's kill 1 s before the expiry: room for this test's own polling on a busy box.
    let lease = Duration::from_secs(6);
    let setup = Setup::new(&db, |d| d.lease_seconds = 6);
    let frozen = setup.start_daemon("daemon-frozen", &[]);
    let old = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000, "ignore_sigterm": true})).await;
    wait_started(&db.db.api, old.id, Duration::from_secs(10)).await;
    let worker = setup.probe_started(old.id, Duration::from_secs(5)).await.pid;
    let rescuer = setup.start_daemon("daemon-rescuer", &[]);
    eventually(Duration::from_secs(10), "both daemons registered", || async {
        db.db.api.list_daemons(GONE_AFTER).await.ok().filter(|d| d.len() == 2)
    })
    .await;

    frozen.signal(Signal::SIGSTOP);
    let died = eventually(lease + Duration::from_secs(20), "the frozen daemon's worker to be killed", || async {
        (!alive(worker)).then(realtime_ns)
    })
    .await;
    assert!(setup.probe_run(old.id).1.is_none(), "killed by SIGKILL, the probe wrote no end line");

    let interrupted =
        wait_run(&db.db.api, old.id, Duration::from_secs(10), "recovery", |r| r.state == RunState::Interrupted).await;
    let reason = interrupted.error.clone().expect("a reason");
    assert!(reason.starts_with("owner lost: daemon "), "{reason}");
    assert_eq!(interrupted.end_reason, Some(EndReason::OwnerLost));
    // The lease's end as recovery read it: a renewal the daemon sent just before it froze may land after, so the
    // lease is read once nothing can renew it any more.
    let lease_end = reason.rsplit_once("which expired at ").map(|(_, at)| at).unwrap_or_default();
    let lease_end = chrono::DateTime::parse_from_rfc3339(lease_end).unwrap_or_else(|e| panic!("{reason}: {e}"));
    let margin_ms = (at_ns(lease_end.to_utc()) - died) / 1_000_000;
    eprintln!("measured: frozen daemon's worker killed {margin_ms} ms before its lease expired");
    assert!(died < at_ns(lease_end.to_utc()), "the worker outlived its lease by {} ms", -margin_ms);
    let new = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 300})).await;
    let done = wait_finished(&db.db.api, new.id, Duration::from_secs(10)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", rescuer.output());
    assert_ne!(done.daemon_id, interrupted.daemon_id);
    let new_start = setup.probe_run(new.id).0.expect("the new run's start line").at_ns;
    assert!(new_start > died, "the new run started {} ms before the old one died", (died - new_start) / 1_000_000);

    frozen.signal(Signal::SIGCONT);
    eventually(Duration::from_secs(10), "the thawed daemon to give up the run", || async {
        frozen.output().contains("is no longer this daemon's").then_some(())
    })
    .await;
    let after = db.db.api.get_run(old.id).await.expect("read").expect("row");
    assert_eq!(
        (after.state, after.error.as_deref()),
        (RunState::Interrupted, Some(reason.as_str())),
        "the ledger was overwritten"
    );
    drop((frozen, rescuer));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_database_connections_are_survived() {
    let db = TestDb::postgres().await;
    // A poll this slow means that a quick claim afterwards came through the re-established LISTEN.
    let setup = Setup::new(&db, |d| d.poll_seconds = 60);
    let mut daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 4_000, "progress_steps": 8})).await;
    wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;

    assert!(terminate_connections(&db.url, None).await > 0);
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(15)).await;
    assert_eq!(
        done.state,
        RunState::Succeeded,
        "the lease is renewed on a new connection: {done:?}\n{}",
        daemon.output()
    );

    let drops = || daemon.output().matches("the notification connection dropped").count();
    eventually(Duration::from_secs(30), "the daemon to notice the first cut", || async { (drops() > 0).then_some(()) })
        .await;
    let dropped = drops();
    assert!(terminate_connections(&db.url, None).await > 0);
    // The request below must come after the daemon lost its LISTEN, or it would test the old connection.
    eventually(Duration::from_secs(30), "the daemon to notice its notification connection dropped", || async {
        (drops() > dropped).then_some(())
    })
    .await;
    let _ = db.db.api.ping().await;
    let next = setup.request(&db.db.api, "probe-2", json!({"duration_ms": 100})).await;
    let next = wait_finished(&db.db.api, next.id, Duration::from_secs(10)).await;
    assert_eq!(next.state, RunState::Succeeded);
    let waited = next.claimed_at.expect("claimed") - next.requested_at;
    // Well under the 60 s poll, with room for a slow machine's reconnection.
    assert!(
        waited < chrono::TimeDelta::seconds(30),
        "claimed after {waited}: the notification connection did not come back"
    );
    assert!(daemon.child.try_wait().expect("the daemon's status").is_none(), "the daemon died:\n{}", daemon.output());
    assert!(daemon.output().contains("the notification connection dropped"), "{}", daemon.output());
    stop(&mut daemon).await;
    db.cleanup().await;
}

/// An operator reading `pg_stat_activity` sees which program holds each connection, and the daemon's claims (and
/// the worker-started write that follows each) go over the connection kept for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_connections_are_named_and_claims_use_their_own() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |d| d.poll_seconds = 60);
    let daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 50})).await;
    let run = wait_finished(&db.db.api, run.id, Duration::from_secs(10)).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}\n{}", daemon.output());

    let backends = daemon_backends(&db.url).await;
    let claims = backends.iter().find(|b| b.app == "scrinalia-daemon claims").expect("a claim connection");
    assert!(claims.claimed_since(run.claimed_at.expect("claimed")), "{backends:#?}");
    assert!(backends.iter().filter(|b| b.app == "scrinalia-daemon").count() >= 2, "the pool and LISTEN: {backends:#?}");
    assert!(
        !backends.iter().any(|b| b.app == "scrinalia-daemon" && b.query.starts_with(CLAIM)),
        "only the claim connection claims: {backends:#?}"
    );
    drop(daemon);
    db.cleanup().await;
}

const CLAIM: &str = "update worker_runs set state = 'running'";
/// The worker-started write, which the claim connection makes after the claim.
const STARTED: &str = "update worker_runs set started_at";

/// A connection to the test database, from `pg_stat_activity`.
#[derive(Debug, sqlx::FromRow)]
struct Backend {
    app: String,
    query: String,
    query_start: Option<chrono::DateTime<chrono::Utc>>,
}

impl Backend {
    /// Whether this connection's last statement is a claim, made at `at` or later (a claim's `claimed_at` is
    /// its statement's start; a later claim that found nothing may have followed).
    fn claimed_since(&self, at: chrono::DateTime<chrono::Utc>) -> bool {
        (self.query.starts_with(CLAIM) || self.query.starts_with(STARTED))
            && self.query_start.is_some_and(|start| start >= at - chrono::TimeDelta::milliseconds(1))
    }
}

async fn daemon_backends(url: &str) -> Vec<Backend> {
    let name = url.rsplit('/').next().expect("a database name");
    let mut admin = sqlx::PgConnection::connect(&postgres_admin_url()).await.expect("an admin connection");
    sqlx::query_as(
        "select application_name as app, query, query_start from pg_stat_activity where datname = $1 order by pid",
    )
    .bind(name)
    .fetch_all(&mut admin)
    .await
    .expect("read pg_stat_activity")
}

async fn stop(daemon: &mut Process) {
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait(Duration::from_secs(10)).await, Some(0));
}
