//! Checkpoints, resume and restart through the domain layer, on PostgreSQL and SQLite: a checkpoint is a fenced
//! owner write (its old owner cannot overwrite it after recovery); a resume copies the run's last checkpoint and
//! configuration onto a new run linked to it, a restart starts from nothing; a run is continued at most once,
//! and only when it was interrupted or failed; every refusal is a typed error with its sentence.

use std::time::Duration;

use scrinalia_shared::{
    DbError, EndReason, FollowKind, RunState,
    runs::{Finish, FollowError, RequestError},
};
use scrinalia_tests::{TestDb, backend_tests, fixtures::*};
use serde_json::json;
use uuid::Uuid;

backend_tests!(
    a_former_owner_cannot_overwrite_the_checkpoint_after_recovery,
    a_resume_starts_from_the_last_checkpoint_and_a_run_is_continued_once,
    only_an_interrupted_or_failed_run_is_resumed_or_restarted,
);

/// Claims a run of `worker` for a new daemon with `lease`; returns the run id and the daemon.
async fn claimed(t: &TestDb, worker: &str, lease: Duration) -> (Uuid, Uuid) {
    let id = insert(&t.db.api, worker).await.expect("insert").id;
    let daemon = Uuid::new_v4();
    let only = [worker.to_owned()];
    t.db.daemon.claim_runs(daemon, lease, 1, Some(&only)).await.expect("claim");
    t.db.daemon.mark_started(id, daemon, "runs/x").await.expect("started");
    (id, daemon)
}

async fn a_former_owner_cannot_overwrite_the_checkpoint_after_recovery(t: &TestDb) {
    let (id, zombie) = claimed(t, "summarise", Duration::from_millis(300)).await;
    t.db.daemon.store_checkpoint(id, zombie, &json!({"done": 40})).await.expect("its owner checkpoints");
    let stored = t.db.api.get_run(id).await.expect("read").expect("the run");
    assert_eq!(stored.checkpoint, Some(json!({"done": 40})));
    assert!(stored.checkpoint_at.is_some());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(ids(&t.db.daemon.recover_expired().await.expect("recover")), vec![id]);
    let late = t.db.daemon.store_checkpoint(id, zombie, &json!({"done": 80})).await;
    assert!(matches!(late, Err(DbError::LeaseLost { run_id, .. }) if run_id == id), "{late:?}");
    let after = t.db.api.get_run(id).await.expect("read").expect("the run");
    assert_eq!(after.state, RunState::Interrupted);
    assert_eq!(after.checkpoint, Some(json!({"done": 40})), "the recovered run keeps its last checkpoint");
    assert_eq!(after.checkpoint_at, stored.checkpoint_at);
    let stranger = t.db.daemon.store_checkpoint(id, Uuid::new_v4(), &json!({"done": 1})).await;
    assert!(matches!(stranger, Err(DbError::LeaseLost { .. })), "nobody else writes it either");
}

async fn a_resume_starts_from_the_last_checkpoint_and_a_run_is_continued_once(t: &TestDb) {
    let catalogue = catalogue_of(&["summarise"]);
    let (id, daemon) = claimed(t, "summarise", Duration::from_millis(300)).await;
    for done in [10, 20, 30] {
        t.db.daemon.store_checkpoint(id, daemon, &json!({"done": done})).await.expect("checkpoint");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    t.db.daemon.recover_expired().await.expect("recover");
    let original = t.db.api.get_run(id).await.expect("read").expect("the run");

    let resumed = t.db.api.continue_run(&catalogue, id, FollowKind::Resume, "ada").await.expect("resume");
    assert_eq!(resumed.state, RunState::Queued);
    assert_eq!((resumed.follows, resumed.follows_as), (Some(id), Some(FollowKind::Resume)));
    assert_eq!(resumed.checkpoint, Some(json!({"done": 30})), "it starts from the last checkpoint");
    assert_eq!(resumed.checkpoint_at, original.checkpoint_at);
    assert_eq!(resumed.requested_by, "ada");
    assert_eq!(serde_json::to_value(&resumed.config).ok(), serde_json::to_value(&original.config).ok());

    // The resumed run holds its worker: nothing else of it can be requested, a restart included.
    let busy = t.db.api.continue_run(&catalogue, id, FollowKind::Restart, "bob").await;
    assert!(
        matches!(busy, Err(FollowError::AlreadyContinued { by, how: FollowKind::Resume, .. }) if by == resumed.id),
        "{busy:?}"
    );
    let message = busy.expect_err("refused").to_string();
    assert!(message.contains("already resumed by run") && message.contains(&resumed.id.to_string()), "{message}");

    // Once the resume ended, the original still cannot be continued a second time; the chain shows both.
    let resumer = Uuid::new_v4();
    t.db.daemon.claim_runs(resumer, LONG_LEASE, 1, None).await.expect("claim the resume");
    t.db.daemon.finish_run(resumed.id, resumer, &succeeded()).await.expect("finish");
    let again = t.db.api.continue_run(&catalogue, id, FollowKind::Resume, "ada").await;
    assert!(matches!(again, Err(FollowError::AlreadyContinued { .. })), "{again:?}");
    let chain: Vec<Uuid> = t.db.api.run_chain(resumed.id).await.expect("chain").iter().map(|r| r.id).collect();
    assert_eq!(chain, vec![id, resumed.id], "the chain runs from the original to its resume");
}

async fn only_an_interrupted_or_failed_run_is_resumed_or_restarted(t: &TestDb) {
    let catalogue = catalogue_of(&["tag", "entities"]);
    let (done, daemon) = claimed(t, "tag", LONG_LEASE).await;
    t.db.daemon.finish_run(done, daemon, &succeeded()).await.expect("finish");
    let refused = t.db.api.continue_run(&catalogue, done, FollowKind::Resume, "ada").await;
    assert!(matches!(refused, Err(FollowError::WrongState { state: RunState::Succeeded, .. })), "{refused:?}");
    let sentence = refused.expect_err("refused").to_string();
    assert!(sentence.contains("only an interrupted or failed run can be resumed or restarted"), "{sentence}");

    // A failed run without a checkpoint cannot be resumed, but it can be restarted, from nothing.
    let (failed, daemon) = claimed(t, "entities", LONG_LEASE).await;
    let failure = Finish {
        reason: EndReason::ExitStatus,
        exit_code: Some(3),
        error: Some("boom".into()),
        result: None,
        usage: None,
    };
    t.db.daemon.finish_run(failed, daemon, &failure).await.expect("finish");
    let none = t.db.api.continue_run(&catalogue, failed, FollowKind::Resume, "ada").await;
    assert!(matches!(none, Err(FollowError::NoCheckpoint(id)) if id == failed), "{none:?}");
    let restarted = t.db.api.continue_run(&catalogue, failed, FollowKind::Restart, "ada").await.expect("restart");
    assert_eq!(
        (restarted.follows, restarted.follows_as, restarted.checkpoint),
        (Some(failed), Some(FollowKind::Restart), None)
    );

    // A run in flight is refused with the 409 of any request; an unknown run is not found.
    let (running, _) = claimed(t, "tag", LONG_LEASE).await;
    let early = t.db.api.continue_run(&catalogue, running, FollowKind::Restart, "ada").await;
    assert!(matches!(early, Err(FollowError::WrongState { state: RunState::Running, .. })), "{early:?}");
    let unknown = Uuid::new_v4();
    assert!(matches!(t.db.api.continue_run(&catalogue, unknown, FollowKind::Resume, "ada").await,
        Err(FollowError::NotFound(id)) if id == unknown));
    let gone = catalogue_of(&["something-else"]);
    let missing = t.db.api.continue_run(&gone, failed, FollowKind::Rerun, "ada").await;
    assert!(matches!(missing, Err(FollowError::Request(RequestError::UnknownWorker { .. }))), "{missing:?}");
}
