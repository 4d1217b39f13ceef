//! Resource claims through the domain layer on PostgreSQL, with another transaction holding a resource's lock the
//! way a daemon frozen (SIGSTOP) in the middle of its claim would: the other daemons' claims do not wait for it
//! (they skip that resource this round and claim everything else), and once it lets go they take the slots.

use std::time::Duration;

use scrinalia_shared::{Catalogue, ResourceSpec, RunState, runs::Placement};
use scrinalia_tests::{TestDb, fixtures::*};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

/// Workers `a` and `b` share a `gpu` of two slots; `c` holds nothing.
fn catalogue() -> Catalogue {
    let mut catalogue = catalogue_of(&["a", "b", "c"]);
    catalogue.resources = vec![ResourceSpec {
        name: "gpu".into(),
        capacity: 2,
        description: None,
        scope: Default::default(),
        starts_per_minute: None,
        preempt_after_seconds: None,
        preempt_grace_seconds: None,
    }];
    for w in catalogue.workers.iter_mut().filter(|w| w.name != "c") {
        w.resources = vec!["gpu".into()];
    }
    catalogue
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_does_not_wait_for_a_resource_locked_by_a_frozen_claim() {
    let t = TestDb::postgres().await;
    let catalogue = catalogue();
    let placement = Placement::of(&catalogue, Vec::<String>::new());
    let mut queued = Vec::new();
    for worker in ["a", "b", "c"] {
        queued.push(t.db.api.request_run(&catalogue, request(worker)).await.expect("request").id);
    }

    // The frozen daemon: a transaction that took the gpu's claim lock and never ends while it is stopped.
    let mut frozen = PgConnection::connect(&t.url).await.expect("connect");
    sqlx::query("begin").execute(&mut frozen).await.expect("begin");
    sqlx::query("select pg_advisory_xact_lock(hashtext('scrinalia.resource.gpu'))")
        .execute(&mut frozen)
        .await
        .expect("lock");

    // A claim that waited for the lock would never return while it is held.
    let daemon = Uuid::now_v7();
    let claim = t.db.daemon.claim_placed(daemon, Duration::from_secs(5), 10, None, &placement);
    let claimed = tokio::time::timeout(Duration::from_secs(30), claim)
        .await
        .expect("the claim returns while another transaction holds the resource's lock")
        .expect("claim");
    let workers: Vec<&str> = claimed.iter().map(|r| r.worker.as_str()).collect();
    assert_eq!(workers, ["c"], "the run that holds nothing is claimed; the gpu's wait for the next round");
    for run in &claimed {
        let left = run.lease_expires_at.expect("a lease") - run.claimed_at.expect("claimed");
        assert!(left.num_milliseconds() >= 4_900, "the lease is counted from the claim: {left}");
    }
    for id in &queued[..2] {
        assert_eq!(t.db.api.get_run(*id).await.expect("read").expect("run").state, RunState::Queued);
    }
    assert!(t.db.daemon.resource_holders().await.expect("holders").is_empty());

    sqlx::query("rollback").execute(&mut frozen).await.expect("rollback");
    let claimed = t.db.daemon.claim_placed(daemon, Duration::from_secs(5), 10, None, &placement).await.expect("claim");
    assert_eq!(ids(&claimed), { ids_of(&queued[..2]) }, "both gpu runs once the lock is free");
    assert_eq!(t.db.daemon.resource_holders().await.expect("holders").len(), 2);
    drop(frozen);
    t.cleanup().await;
}

fn ids_of(ids: &[Uuid]) -> Vec<Uuid> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids
}
