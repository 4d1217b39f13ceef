//! The run lifecycle through the database layer, on PostgreSQL and SQLite: claims, the one-in-flight rule,
//! leases, recovery, fencing and cancellation.

use std::{collections::HashSet, time::Duration};

use chrono::SecondsFormat;
use scrinalia_shared::{
    DbError, EndReason, Named, RunState,
    runs::{CancelOutcome, Finish, RequestError, RunFilter},
};
use scrinalia_tests::{TestDb, backend_tests, fixtures::*};

use uuid::Uuid;

backend_tests!(
    eight_claimers_claim_a_thousand_requests_exactly_once,
    racing_inserts_for_one_worker_let_exactly_one_win,
    a_finished_run_frees_its_worker_for_a_new_request,
    claim_takes_the_oldest_request_first_and_respects_the_worker_filter,
    recovery_moves_only_expired_leases_whoever_recovers,
    a_former_owner_cannot_renew_progress_or_finish_after_recovery,
    renewal_extends_a_live_lease_and_is_refused_to_another_daemon,
    cancel_is_immediate_when_queued_and_requested_when_running,
    progress_history_is_kept_in_order,
    migrations_are_safe_to_apply_concurrently,
    every_end_reason_is_stored_typed_with_the_state_it_implies,
);

async fn eight_claimers_claim_a_thousand_requests_exactly_once(t: &TestDb) {
    let mut inserted = HashSet::new();
    for i in 0..1000 {
        inserted.insert(insert(&t.db.api, &format!("w{i:04}")).await.expect("insert").id);
    }
    let mut claimers = Vec::new();
    for _ in 0..8 {
        let db = t.another_pool().await;
        claimers.push(tokio::spawn(async move {
            let daemon = Uuid::new_v4();
            let mut mine = Vec::new();
            loop {
                let batch = db.daemon.claim_runs(daemon, LONG_LEASE, 3, None).await.expect("claim");
                if batch.is_empty() {
                    break;
                }
                for run in batch {
                    assert_eq!(run.state, RunState::Running);
                    assert_eq!(run.daemon_id, Some(daemon));
                    assert!(run.lease_expires_at.is_some() && run.claimed_at.is_some());
                    mine.push(run.id);
                }
            }
            db.close().await;
            mine
        }));
    }
    let mut claimed = Vec::new();
    let mut busy_claimers = 0;
    for claimer in claimers {
        let mine = claimer.await.expect("claimer task");
        busy_claimers += usize::from(!mine.is_empty());
        claimed.extend(mine);
    }
    let unique: HashSet<Uuid> = claimed.iter().copied().collect();
    assert_eq!(claimed.len(), 1000, "every request claimed once, none twice");
    assert_eq!(unique, inserted, "no request lost");
    assert!(busy_claimers >= 2, "the claimers shared the work ({busy_claimers} claimed anything)");
}

async fn racing_inserts_for_one_worker_let_exactly_one_win(t: &TestDb) {
    for round in 0..5 {
        let worker = format!("race-{round}");
        let (a, b) = (t.another_pool().await, t.another_pool().await);
        let catalogue = catalogue_of(&[&worker]);
        let (ra, rb) = (request(&worker), request(&worker));
        let (first, second) = tokio::join!(a.api.request_run(&catalogue, ra), b.api.request_run(&catalogue, rb));
        let (winner, loser) = match (first, second) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            other => panic!("expected exactly one winner, got {other:?}"),
        };
        match loser {
            RequestError::InFlight { worker: w, run_id, state, daemon_id } => {
                assert_eq!(
                    (w.as_str(), run_id, state, daemon_id),
                    (worker.as_str(), winner.id, RunState::Queued, None)
                );
            }
            other => panic!("expected a typed conflict, got {other:?}"),
        }
        a.close().await;
        b.close().await;
    }
}

async fn a_finished_run_frees_its_worker_for_a_new_request(t: &TestDb) {
    let daemon = Uuid::new_v4();
    let first = insert(&t.db.api, "transfer").await.expect("first request");
    let claimed = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    assert_eq!(ids(&claimed), vec![first.id]);
    match insert(&t.db.api, "transfer").await {
        Err(RequestError::InFlight { run_id, state: RunState::Running, daemon_id: Some(d), .. }) => {
            assert_eq!((run_id, d), (first.id, daemon));
        }
        other => panic!("a running run must block a new request: {other:?}"),
    }
    let done = t.db.daemon.finish_run(first.id, daemon, &succeeded()).await.expect("finish");
    assert_eq!(done.state, RunState::Succeeded);
    assert!(done.finished_at.is_some() && done.duration_ms.is_some_and(|d| d >= 0));
    assert_eq!(done.result, Some(serde_json::json!({"processed": 3})));
    let second = insert(&t.db.api, "transfer").await.expect("accepted once the first finished");
    assert_eq!(second.state, RunState::Queued);
}

async fn claim_takes_the_oldest_request_first_and_respects_the_worker_filter(t: &TestDb) {
    let mut order = Vec::new();
    for name in ["a", "b", "c", "d"] {
        order.push(insert(&t.db.api, name).await.expect("insert").id);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let daemon = Uuid::new_v4();
    let only = vec!["c".to_owned(), "d".to_owned()];
    let filtered = t.db.daemon.claim_runs(daemon, LONG_LEASE, 5, Some(&only)).await.expect("claim c, d");
    assert_eq!(filtered.iter().map(|r| r.worker.as_str()).collect::<Vec<_>>(), ["c", "d"]);
    let first = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim one");
    assert_eq!(first.iter().map(|r| r.id).collect::<Vec<_>>(), vec![order[0]], "oldest first");
    assert!(t.db.daemon.claim_runs(daemon, LONG_LEASE, 0, None).await.expect("claim none").is_empty());
}

async fn recovery_moves_only_expired_leases_whoever_recovers(t: &TestDb) {
    let (dying, living) = (Uuid::new_v4(), Uuid::new_v4());
    let short = insert(&t.db.api, "short-lease").await.expect("insert").id;
    let lease = Duration::from_millis(300);
    let claiming = tokio::time::Instant::now();
    let claimed = t.db.daemon.claim_runs(dying, lease, 1, None).await.expect("claim");
    assert_eq!(ids(&claimed), vec![short]);
    let expiry = claimed[0].lease_expires_at.expect("a lease");
    let long = insert(&t.db.api, "long-lease").await.expect("insert").id;
    t.db.daemon.claim_runs(living, LONG_LEASE, 1, None).await.expect("claim");
    let queued = insert(&t.db.api, "still-queued").await.expect("insert").id;

    // Recovery by another process. The lease was taken after `claiming`: while less than the lease has passed
    // since then on this test's clock, it has not expired on the database's, and nothing may be recovered.
    let sibling = t.another_pool().await;
    let early = sibling.daemon.recover_expired().await.expect("recover from another process");
    if claiming.elapsed() < lease {
        assert!(early.is_empty(), "nothing has expired yet: {early:?}");
    } else {
        eprintln!("this machine took {:?} over the claims: the early look is left out", claiming.elapsed());
    }
    let recovered = if early.is_empty() {
        // Time for the lease to run out on the database clock.
        tokio::time::sleep(Duration::from_millis(600)).await;
        sibling.daemon.recover_expired().await.expect("recover from another process")
    } else {
        early
    };
    assert_eq!(ids(&recovered), vec![short]);
    let run = &recovered[0];
    assert_eq!(run.state, RunState::Interrupted);
    // The same sentence on both backends: the daemon's id hyphenated, the expiry in RFC 3339 with milliseconds.
    let expected = format!(
        "owner lost: daemon {dying} stopped renewing its lease, which expired at {}",
        expiry.to_rfc3339_opts(SecondsFormat::Millis, true)
    );
    assert_eq!(run.error.as_deref(), Some(expected.as_str()), "the owner-lost sentence");
    assert_eq!(run.end_reason, Some(EndReason::OwnerLost));
    assert!(run.finished_at.is_some());

    let untouched = t.db.api.get_run(long).await.expect("get").expect("exists");
    assert_eq!((untouched.state, untouched.daemon_id), (RunState::Running, Some(living)));
    assert_eq!(t.db.api.get_run(queued).await.expect("get").expect("exists").state, RunState::Queued);
    assert!(sibling.daemon.recover_expired().await.expect("recover again").is_empty(), "recovery is idempotent");
    sibling.close().await;
}

async fn a_former_owner_cannot_renew_progress_or_finish_after_recovery(t: &TestDb) {
    let zombie = Uuid::new_v4();
    let id = insert(&t.db.api, "zombie").await.expect("insert").id;
    t.db.daemon.claim_runs(zombie, Duration::from_millis(200), 1, None).await.expect("claim");
    t.db.daemon.mark_started(id, zombie, "runs/zombie/x").await.expect("started while the lease holds");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(ids(&t.db.daemon.recover_expired().await.expect("recover")), vec![id]);

    let lost = |r: Result<(), DbError>| matches!(r, Err(DbError::LeaseLost { run_id, daemon_id }) if run_id == id && daemon_id == zombie);
    assert!(lost(t.db.daemon.renew_lease(id, zombie, LONG_LEASE).await.map(|_| ())), "renewal refused");
    assert!(lost(t.db.daemon.record_progress(id, zombie, &serde_json::json!({"done": 1})).await), "progress refused");
    assert!(lost(t.db.daemon.finish_run(id, zombie, &succeeded()).await.map(|_| ())), "finish refused");
    let row = t.db.api.get_run(id).await.expect("get").expect("exists");
    assert_eq!(row.state, RunState::Interrupted, "the zombie did not overwrite the ledger");
    assert!(row.progress.is_none() && row.result.is_none());
}

async fn renewal_extends_a_live_lease_and_is_refused_to_another_daemon(t: &TestDb) {
    let (owner, other) = (Uuid::new_v4(), Uuid::new_v4());
    let id = insert(&t.db.api, "renewed").await.expect("insert").id;
    let claimed = t.db.daemon.claim_runs(owner, Duration::from_secs(2), 1, None).await.expect("claim");
    let first = claimed[0].lease_expires_at.expect("lease");
    let renewed = t.db.daemon.renew_lease(id, owner, Duration::from_secs(60)).await.expect("renew");
    assert!(renewed > first + chrono::Duration::seconds(30), "{renewed} extends {first}");
    assert!(matches!(t.db.daemon.renew_lease(id, other, LONG_LEASE).await, Err(DbError::LeaseLost { .. })));
    assert!(matches!(t.db.daemon.finish_run(id, other, &succeeded()).await, Err(DbError::LeaseLost { .. })));
    let failed = Finish {
        reason: EndReason::ExitStatus,
        exit_code: Some(3),
        error: Some("exit status 3".into()),
        result: None,
        usage: None,
    };
    let row = t.db.daemon.finish_run(id, owner, &failed).await.expect("the owner finishes");
    assert_eq!((row.state, row.exit_code, row.error.as_deref()), (RunState::Failed, Some(3), Some("exit status 3")));
}

async fn cancel_is_immediate_when_queued_and_requested_when_running(t: &TestDb) {
    let queued = insert(&t.db.api, "to-cancel").await.expect("insert").id;
    match t.db.api.request_cancel(queued, "alice").await.expect("cancel") {
        Some(CancelOutcome::Cancelled(run)) => {
            assert_eq!((run.state, run.end_reason), (RunState::Cancelled, Some(EndReason::Cancelled)));
            assert_eq!(run.cancel_requested_by.as_deref(), Some("alice"));
            assert!(run.finished_at.is_some());
        }
        other => panic!("a queued run is cancelled at once: {other:?}"),
    }
    let daemon = Uuid::new_v4();
    let running = insert(&t.db.api, "to-cancel").await.expect("the worker is free again").id;
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    assert!(t.db.daemon.cancel_requests(daemon).await.expect("none yet").is_empty());
    match t.db.api.request_cancel(running, "bob").await.expect("cancel") {
        Some(CancelOutcome::Requested(run)) => assert_eq!(run.state, RunState::Running),
        other => panic!("a running run is flagged for its daemon: {other:?}"),
    }
    assert_eq!(t.db.daemon.cancel_requests(daemon).await.expect("flagged"), vec![running]);
    let cancelled = Finish {
        reason: EndReason::Cancelled,
        exit_code: None,
        error: Some("cancelled by bob".into()),
        result: None,
        usage: None,
    };
    t.db.daemon.finish_run(running, daemon, &cancelled).await.expect("the owner records it");
    assert!(matches!(
        t.db.api.request_cancel(running, "bob").await.expect("again"),
        Some(CancelOutcome::AlreadyFinished(_))
    ));
    assert!(t.db.api.request_cancel(Uuid::new_v4(), "bob").await.expect("unknown").is_none());
}

async fn progress_history_is_kept_in_order(t: &TestDb) {
    let daemon = Uuid::new_v4();
    let id = insert(&t.db.api, "progressing").await.expect("insert").id;
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    for done in [10, 20, 30] {
        t.db.daemon
            .record_progress(id, daemon, &serde_json::json!({"done": done, "total": 30}))
            .await
            .expect("progress");
    }
    let history = t.db.api.run_progress(id).await.expect("history");
    let dones: Vec<i64> = history.iter().filter_map(|p| p.progress["done"].as_i64()).collect();
    assert_eq!(dones, [10, 20, 30]);
    assert_eq!(history.iter().map(|p| p.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let row = t.db.api.get_run(id).await.expect("get").expect("exists");
    assert_eq!(row.progress, Some(serde_json::json!({"done": 30, "total": 30})));
}

async fn migrations_are_safe_to_apply_concurrently(t: &TestDb) {
    let mut handles = Vec::new();
    for _ in 0..4 {
        let db = t.another_pool().await;
        handles.push(tokio::spawn(async move { db.api.migrate().await }));
    }
    for handle in handles {
        handle.await.expect("task").expect("a concurrent migration succeeds");
    }
    insert(&t.db.api, "after-migrations").await.expect("the schema works");
}

/// Every end reason a daemon writes is stored as its type (read back one by one and through the ledger's pages),
/// with the terminal state it implies; recovery stores `owner_lost` and a cancelled request `cancelled`.
async fn every_end_reason_is_stored_typed_with_the_state_it_implies(t: &TestDb) {
    let daemon = Uuid::new_v4();
    let mut expected = Vec::new();
    for reason in EndReason::ALL.iter().copied() {
        let worker = format!("ends-{}", reason.name().replace('_', "-"));
        let id = insert(&t.db.api, &worker).await.expect("insert").id;
        match reason {
            EndReason::OwnerLost => {
                t.db.daemon.claim_runs(daemon, Duration::from_millis(100), 1, None).await.expect("claim");
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert_eq!(ids(&t.db.daemon.recover_expired().await.expect("recover")), vec![id]);
            }
            EndReason::Cancelled => {
                t.db.api.request_cancel(id, "ada").await.expect("cancel").expect("a run");
            }
            reason => {
                t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
                let exit_code = (reason == EndReason::ExitStatus).then_some(0);
                let finish = Finish { reason, exit_code, error: None, result: None, usage: None };
                t.db.daemon.finish_run(id, daemon, &finish).await.expect("finish");
            }
        }
        let row = t.db.api.get_run(id).await.expect("get").expect("exists");
        let state = reason.state(row.exit_code);
        assert_eq!((row.end_reason, row.state), (Some(reason), state), "{reason} read back");
        expected.push((id, reason));
    }
    let page = t.db.api.list_runs(&RunFilter { limit: 100, ..RunFilter::default() }).await.expect("the ledger");
    for (id, reason) in expected {
        let listed = page.runs.iter().find(|r| r.id == id).expect("listed");
        assert_eq!(listed.end_reason, Some(reason), "{reason} in the ledger");
    }
    let queued = insert(&t.db.api, "still-queued").await.expect("insert");
    assert_eq!(queued.end_reason, None, "a run in flight has no end reason");
}
