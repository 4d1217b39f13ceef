//! The change feed on PostgreSQL and SQLite: every kind of change a panel or a daemon acts on arrives as the typed
//! `Change` the domain layer defines, from another connection's writes (on PostgreSQL, the migrations' triggers
//! write the payloads, so this proves they match the one definition; on SQLite, the feed builds them itself).
//! On PostgreSQL the service tokens' changes arrive too, for the API's token refresher, and their uses do not.

use std::time::Duration;

use scrinalia_shared::{
    Change, ChoreKind, DaemonState, OverrideAction, Role, RunState, Store,
    auth::hash_token,
    changes::{ChangeFeed, Topic},
    daemons::NewDaemon,
    descriptions::{NewDescription, NewReadiness},
    queue::NewQueueCount,
    tokens::{Check, NewToken, TokenMap},
};
use scrinalia_tests::{Kind, TestDb, backend_tests, fixtures::*};
use uuid::Uuid;

backend_tests!(
    the_events_feed_reports_runs_queues_workers_daemons_and_overrides,
    the_queue_feed_wakes_daemons_for_requests_cancellations_chores_and_their_rows,
    schedules_pipelines_and_run_ends_reach_panels_and_daemons,
);

/// Waits (at most 5 s) for a change that `wanted` accepts, skipping the others; panics with what came instead.
async fn next_matching(feed: &mut ChangeFeed, what: &str, wanted: impl Fn(&Change) -> bool) -> Change {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(change) = feed.next().await {
            if wanted(&change) {
                return Some(change);
            }
            seen.push(change);
        }
        None
    });
    match found.await {
        Ok(Some(change)) => change,
        _ => panic!("no {what} within 5 s; the feed said: {seen:#?}"),
    }
}

/// A feed of `topic` once it has said that it listens (its first resync).
async fn listening(db: &Store, topic: Topic) -> ChangeFeed {
    let mut feed = db.changes(topic).expect("a change feed");
    next_matching(&mut feed, "the first resync", |c| matches!(c, Change::Resync { .. })).await;
    assert!(feed.is_live(), "a feed that announced itself listens");
    feed
}

fn daemon(id: Uuid) -> NewDaemon {
    NewDaemon {
        id,
        host: "host".into(),
        pid: 1,
        version: "0".into(),
        capacity: 1,
        workers: Vec::new(),
        labels: Vec::new(),
        limits: Default::default(),
        resources: Default::default(),
    }
}

async fn the_events_feed_reports_runs_queues_workers_daemons_and_overrides(t: &TestDb) {
    let mut feed = listening(&t.db.api, Topic::Events { sqlite_poll: Duration::from_millis(50) }).await;
    // Only PostgreSQL's LISTEN hears notifications; SQLite's feed polls, and the token refresher polls beside it.
    assert_eq!(feed.listening().now(), t.kind == Kind::Postgres, "whether the feed hears notifications");
    let writer = t.another_pool().await;

    let run = insert(&writer.api, "feed").await.expect("a request");
    let queued = Change::Run { run: run.id, worker: "feed".into(), state: RunState::Queued };
    assert_eq!(next_matching(&mut feed, "the queued run", |c| *c == queued).await, queued);
    let owner = Uuid::new_v4();
    writer.daemon.claim_runs(owner, LONG_LEASE, 1, None).await.expect("claim");
    let running = Change::Run { run: run.id, worker: "feed".into(), state: RunState::Running };
    assert_eq!(next_matching(&mut feed, "the running run", |c| *c == running).await, running);

    let count = NewQueueCount {
        worker: "feed".into(),
        pending: Some(3),
        unmeasurable: None,
        done: None,
        error: None,
        took_ms: 1,
        measured_by: owner,
        oldest_pending_at: None,
        threshold: None,
    };
    writer.daemon.store_queue_count(&count).await.expect("a count");
    let measured = Change::Queue { worker: "feed".into() };
    assert_eq!(next_matching(&mut feed, "the queue change", |c| *c == measured).await, measured);

    let description = NewDescription {
        worker: "feed".into(),
        outcome: Err("describe failed".into()),
        described_by: owner,
        command: vec!["w".into()],
        took_ms: 1,
    };
    writer.daemon.store_description(&description).await.expect("a description");
    let described = Change::Worker { worker: "feed".into() };
    assert_eq!(next_matching(&mut feed, "the description", |c| *c == described).await, described);
    let readiness = NewReadiness {
        worker: "feed".into(),
        ready: Some(true),
        reason: None,
        error: None,
        took_ms: 1,
        checked_by: owner,
    };
    writer.daemon.store_readiness(&readiness).await.expect("a readiness");
    assert_eq!(next_matching(&mut feed, "the readiness", |c| *c == described).await, described);

    writer.daemon.register_daemon(&daemon(owner)).await.expect("register");
    let active = Change::Daemon { daemon: owner, state: DaemonState::Active };
    assert_eq!(next_matching(&mut feed, "the new daemon", |c| *c == active).await, active);
    writer.api.request_drain(owner, "ada", Duration::from_secs(60)).await.expect("drain");
    let draining = Change::Daemon { daemon: owner, state: DaemonState::Draining };
    assert_eq!(next_matching(&mut feed, "the draining daemon", |c| *c == draining).await, draining);

    writer.api.clear_override(&catalogue_of(&["feed"]), "feed", "ada", Some("nothing to clear")).await.expect("clear");
    let cleared = Change::Override { worker: "feed".into(), actor: "ada".into(), action: OverrideAction::Clear };
    assert_eq!(next_matching(&mut feed, "the override change", |c| *c == cleared).await, cleared);
    writer.close().await;
}

async fn the_queue_feed_wakes_daemons_for_requests_cancellations_chores_and_their_rows(t: &TestDb) {
    let mut feed = listening(&t.db.api, Topic::Queue).await;
    let writer = t.another_pool().await;
    let postgres = t.kind == Kind::Postgres;
    // SQLite cannot say what changed: a write by another connection is `written`, and the daemon looks.
    let woken = |expected: Change| move |c: &Change| *c == expected || (!postgres && *c == Change::Written);

    let run = insert(&writer.api, "woken").await.expect("a request");
    let requested = Change::Requested { run: run.id, worker: "woken".into() };
    next_matching(&mut feed, "the request", woken(requested)).await;
    let owner = Uuid::new_v4();
    writer.daemon.claim_runs(owner, LONG_LEASE, 1, None).await.expect("claim");
    writer.api.request_cancel(run.id, "ada").await.expect("cancel").expect("the run");
    let cancel = Change::Cancel { run: run.id, worker: "woken".into(), daemon: Some(owner) };
    next_matching(&mut feed, "the cancellation", woken(cancel)).await;
    writer.daemon.register_daemon(&daemon(owner)).await.expect("register");
    let registered = Change::Daemon { daemon: owner, state: DaemonState::Active };
    next_matching(&mut feed, "the daemon row", woken(registered)).await;
    writer.api.request_chore(&["woken".to_owned()], ChoreKind::Count).await.expect("a chore");
    let chore = Change::Chore { worker: "woken".into(), chore: ChoreKind::Count };
    next_matching(&mut feed, "the chore asked for", woken(chore)).await;
    writer.close().await;
}

async fn schedules_pipelines_and_run_ends_reach_panels_and_daemons(t: &TestDb) {
    let mut events = listening(&t.db.api, Topic::Events { sqlite_poll: Duration::from_millis(50) }).await;
    let mut queue = listening(&t.db.api, Topic::Queue).await;
    let writer = t.another_pool().await;
    let postgres = t.kind == Kind::Postgres;
    let woken = |expected: Change| move |c: &Change| *c == expected || (!postgres && *c == Change::Written);
    let steps = vec!["first".to_owned(), "second".to_owned()];
    let catalogue = scrinalia_shared::Catalogue::with_pipelines(
        catalogue_of(&["first", "second"]).workers,
        Default::default(),
        vec![scrinalia_shared::catalogue::PipelineSpec {
            name: "pair".into(),
            description: None,
            steps,
            tags: Vec::new(),
        }],
    )
    .expect("a catalogue");

    let input = scrinalia_shared::ScheduleInput {
        name: "nightly".into(),
        worker: Some("first".into()),
        cron: "@daily".into(),
        reason: Some("every night".into()),
        ..Default::default()
    };
    let schedule = writer.api.create_schedule(&catalogue, "ada", &input).await.expect("a schedule").schedule;
    let changed = Change::Schedule { schedule: schedule.id };
    next_matching(&mut events, "the schedule, to panels", |c| *c == changed).await;
    next_matching(&mut queue, "the schedule, to daemons", woken(changed.clone())).await;
    writer.api.delete_schedule("nightly", "ada", Some("not needed")).await.expect("delete");
    next_matching(&mut events, "the deleted schedule", |c| *c == changed).await;

    let started =
        writer.api.start_pipeline(&catalogue, "pair", "ada", &serde_json::Value::Null, &[]).await.expect("start");
    let id = started.pipeline_run.id;
    let running =
        Change::Pipeline { pipeline_run: id, pipeline: "pair".into(), state: scrinalia_shared::PipelineState::Running };
    next_matching(&mut events, "the pipeline run", |c| *c == running).await;
    let step = &started.runs[0];
    writer.api.request_cancel(step.id, "ada").await.expect("cancel").expect("the step");
    let ended = Change::Ended { run: step.id, worker: "first".into() };
    next_matching(&mut queue, "the step's end, to daemons", woken(ended)).await;
    let cancelled = Change::Pipeline {
        pipeline_run: id,
        pipeline: "pair".into(),
        state: scrinalia_shared::PipelineState::Cancelled,
    };
    next_matching(&mut events, "the cancelled pipeline run", |c| *c == cancelled).await;
    writer.close().await;
}

/// PostgreSQL: a token created or revoked is notified to the events feed as `tokens` (API processes re-read the
/// tokens on it); a use recorded is not (every API process writes those about once a second), which the run
/// notified after it shows, since notifications arrive in the order of their commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_token_changes_are_notified_and_their_uses_are_not() {
    let t = TestDb::postgres().await;
    let mut feed = listening(&t.db.api, Topic::Events { sqlite_poll: Duration::from_millis(50) }).await;
    let writer = t.another_pool().await;
    let token = NewToken { name: "notified".into(), role: Role::Viewer, expires_at: None };
    let created = writer.api.create_token(&token, "ada", &[]).await.expect("a token");
    next_matching(&mut feed, "the new token", |c| *c == Change::Tokens).await;

    let map = TokenMap::default();
    map.refresh(&writer.api).await.expect("the tokens read");
    assert_eq!(
        map.check(&hash_token(&created.secret)),
        Check::Accepted { name: "notified".into(), role: Role::Viewer }
    );
    map.flush_uses(&writer.api).await.expect("the use recorded");
    let run = insert(&writer.api, "after-use").await.expect("a request");
    let queued = Change::Run { run: run.id, worker: "after-use".into(), state: RunState::Queued };
    let next = next_matching(&mut feed, "the run after the use", |c| *c == queued || *c == Change::Tokens).await;
    assert_eq!(next, queued, "recording a use notified the tokens");

    writer.api.revoke_token(created.token.id, "ada").await.expect("revoked");
    next_matching(&mut feed, "the revocation", |c| *c == Change::Tokens).await;
    writer.close().await;
    t.cleanup().await;
}
