//! The ledger's reads, overrides with their append-only audit trail, the daemon registry and queue snapshots,
//! on PostgreSQL and SQLite.

use std::time::Duration;

use chrono::Utc;
use scrinalia_shared::{
    Catalogue, DaemonState, Engine, OptionType, OverrideAction, OverrideValues, RunState,
    daemons::{DrainError, NewDaemon},
    overrides::OverrideChange,
    queue::NewQueueCount,
    runs::{Cursor, RunFilter, RunRequest},
};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{TestDb, backend_tests, fixtures::*};
use serde_json::{Value, json};
use uuid::Uuid;

/// The workers whose overrides these tests change: `tag-suggest` on engine `ollama` (presets `fast`, `thorough`)
/// with `batch_size`; `embed` with integer options `opt0` … `opt5`.
fn override_catalogue() -> Catalogue {
    let engine = Engine {
        kind: "none".into(),
        url: None,
        presets: [("fast".into(), "small:1b".into()), ("thorough".into(), "big:14b".into())].into(),
        description: None,
    };
    let mut tagger = worker("tag-suggest", &["true"]);
    (tagger.engine, tagger.preset) = (Some("ollama".into()), Some("fast".into()));
    tagger.options = vec![option("batch_size", OptionType::Integer, Some(json!(50)))];
    let mut embed = worker("embed", &["true"]);
    embed.options = (0..6).map(|i| option(&format!("opt{i}"), OptionType::Integer, None)).collect();
    Catalogue::new(vec![tagger, embed], [("ollama".into(), engine)].into()).expect("a valid catalogue")
}

/// A change of an override from its JSON, with a reason.
fn change(body: Value, reason: &str) -> OverrideChange {
    let mut change: OverrideChange = serde_json::from_value(body).expect("a change");
    change.reason = Some(reason.to_owned());
    change
}

/// How long the registry waits for a silent daemon in these tests.
const GONE_AFTER: Duration = Duration::from_secs(1);

backend_tests!(
    the_ledger_pages_by_keyset_and_filters_by_worker_state_and_time,
    last_finished_and_in_flight_runs_per_worker,
    partial_overrides_keep_an_append_only_audit_trail,
    a_request_never_resolves_against_a_replaced_override,
    concurrent_override_edits_do_not_lose_each_other,
    daemons_register_heartbeat_drain_and_go,
    queue_snapshots_replace_the_previous_one,
);

async fn the_ledger_pages_by_keyset_and_filters_by_worker_state_and_time(t: &TestDb) {
    let daemon = Uuid::new_v4();
    let before = t.db.api.now().await.expect("now");
    let mut all = Vec::new();
    for i in 0..25 {
        let worker = if i % 2 == 0 { "even" } else { "odd" };
        let run = insert(&t.db.api, worker).await.expect("insert");
        t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
        t.db.daemon.finish_run(run.id, daemon, &succeeded()).await.expect("finish");
        all.push(run.id);
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = t.db.api.list_runs(&RunFilter { after, limit: 10, ..RunFilter::default() }).await.expect("page");
        assert!(page.runs.len() <= 10);
        seen.extend(page.runs.iter().map(|r| r.id));
        match page.next {
            Some(next) => after = Some(Cursor::decode(&next).expect("a cursor we made decodes")),
            None => break,
        }
    }
    all.reverse();
    assert_eq!(seen, all, "every run once, newest first, across pages");

    let even = t.db.api.list_runs(&RunFilter { worker: Some("even".into()), limit: 100, ..RunFilter::default() }).await;
    let even = even.expect("filter by worker");
    assert_eq!(even.runs.len(), 13);
    assert!(even.runs.iter().all(|r| r.worker == "even") && even.next.is_none());

    let queued = RunFilter { state: Some(RunState::Queued), limit: 100, ..RunFilter::default() };
    assert!(t.db.api.list_runs(&queued).await.expect("filter by state").runs.is_empty());

    let later = before + chrono::Duration::hours(1);
    let none = t.db.api.list_runs(&RunFilter { from: Some(later), limit: 100, ..RunFilter::default() }).await;
    assert!(none.expect("filter by time").runs.is_empty());
    let window = RunFilter {
        from: Some(before - chrono::Duration::seconds(5)),
        to: Some(later),
        limit: 100,
        ..RunFilter::default()
    };
    assert_eq!(t.db.api.list_runs(&window).await.expect("window").runs.len(), 25);
}

async fn last_finished_and_in_flight_runs_per_worker(t: &TestDb) {
    let daemon = Uuid::new_v4();
    let first = insert(&t.db.api, "summarize").await.expect("insert").id;
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    t.db.daemon.finish_run(first, daemon, &succeeded()).await.expect("finish");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = insert(&t.db.api, "summarize").await.expect("insert").id;
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    t.db.daemon.finish_run(second, daemon, &succeeded()).await.expect("finish");
    let queued = insert(&t.db.api, "embed").await.expect("insert").id;

    let names = vec!["summarize".to_owned(), "embed".to_owned(), "never-ran".to_owned()];
    let last = t.db.api.last_finished(&names).await.expect("last finished");
    assert_eq!(ids(&last), vec![second], "only the latest finished run of each worker");
    assert_eq!(ids(&t.db.api.runs_in_flight().await.expect("in flight")), vec![queued]);
}

/// An API process resolves requests against the overrides it read before (one statement per request); another
/// process's change, which this one has not heard of (no change feed runs here), must still be what the next
/// request resolves against.
async fn a_request_never_resolves_against_a_replaced_override(t: &TestDb) {
    let catalogue = override_catalogue();
    let other = t.db.dedicated().await.expect("another process's stores");
    let request = || RunRequest {
        worker: "tag-suggest".into(),
        requested_by: "ada".into(),
        arguments: Default::default(),
        trace_context: None,
        tags: Vec::new(),
    };
    let preset_of_next_run = async |expected: &str| {
        let run = t.db.api.request_run(&catalogue, request()).await.expect("requested");
        assert_eq!(run.config.preset.as_ref().map(|p| p.value.as_str()), Some(expected), "{:?}", run.config);
        t.db.api.request_cancel(run.id, "ada").await.expect("cancelled");
    };
    preset_of_next_run("fast").await;
    let thorough = change(json!({"preset": "thorough"}), "bigger model for the backlog");
    other.api.change_override(&catalogue, "tag-suggest", "alice", &thorough).await.expect("valid");
    preset_of_next_run("thorough").await;
    preset_of_next_run("thorough").await;
    other.api.clear_override(&catalogue, "tag-suggest", "bob", Some("defaults again")).await.expect("valid");
    preset_of_next_run("fast").await;
    // The process's own change is seen at once too.
    t.db.api.change_override(&catalogue, "tag-suggest", "carol", &thorough).await.expect("valid");
    preset_of_next_run("thorough").await;
}

async fn partial_overrides_keep_an_append_only_audit_trail(t: &TestDb) {
    let catalogue = override_catalogue();
    let set = change(json!({"preset": "thorough", "options": {"batch_size": 8}}), "bigger model for the backlog");
    let stored = t.db.api.change_override(&catalogue, "tag-suggest", "alice", &set).await.expect("valid");
    let stored = stored.stored.expect("an override exists");
    assert_eq!(stored.values.preset.as_deref(), Some("thorough"));
    assert_eq!(stored.values.engine, None, "a field not given keeps following the default");
    assert_eq!(stored.updated_by, "alice");

    let unset = change(json!({"preset": null}), "back to the default preset");
    let after = t.db.api.change_override(&catalogue, "tag-suggest", "bob", &unset).await.expect("valid");
    assert_eq!(
        after.stored.expect("still an override").values,
        OverrideValues { options: [("batch_size".to_owned(), json!(8))].into(), ..Default::default() }
    );

    let cleared = t.db.api.clear_override(&catalogue, "tag-suggest", "carol", Some("defaults again")).await;
    assert!(cleared.expect("valid").stored.is_none(), "an empty override is removed");
    assert!(t.db.daemon.get_override("tag-suggest").await.expect("get").is_none());

    let trail = t.db.api.audit_trail("tag-suggest", 10).await.expect("audit");
    let actors: Vec<&str> = trail.iter().map(|e| e.actor.as_str()).collect();
    assert_eq!(actors, ["carol", "bob", "alice"], "newest first");
    assert_eq!(trail[2].before, None);
    assert_eq!(trail[2].after.as_ref().and_then(|a| a.preset.as_deref()), Some("thorough"));
    assert_eq!(trail[1].reason, "back to the default preset");
    assert_eq!((trail[0].action, &trail[0].after), (OverrideAction::Clear, &None));

    let rewrite = t.execute("update worker_override_audit set reason = 'x'").await.err();
    assert!(
        rewrite.is_some_and(|e| format!("{e:#}").contains("append-only")),
        "the database refuses to rewrite history"
    );
}

async fn concurrent_override_edits_do_not_lose_each_other(t: &TestDb) {
    let mut edits = Vec::new();
    for i in 0..6 {
        let db = t.another_pool().await;
        edits.push(tokio::spawn(async move {
            let edit = change(json!({"options": {format!("opt{i}"): i}}), "parallel edit");
            db.api.change_override(&override_catalogue(), "embed", &format!("user{i}"), &edit).await
        }));
    }
    for edit in edits {
        edit.await.expect("task").expect("valid");
    }
    let stored = t.db.daemon.get_override("embed").await.expect("get").expect("exists");
    assert_eq!(stored.values.options.len(), 6, "no edit lost: {:?}", stored.values);
    assert_eq!(t.db.api.audit_trail("embed", 100).await.expect("audit").len(), 6);
}

async fn daemons_register_heartbeat_drain_and_go(t: &TestDb) {
    let id = Uuid::new_v4();
    let new = NewDaemon {
        id,
        host: "host-a".into(),
        pid: 4242,
        version: "0.1.0".into(),
        capacity: 3,
        workers: vec!["embed".into()],
        labels: vec!["gpu".into(), "host-a".into()],
        limits: Default::default(),
        resources: Default::default(),
    };
    let registered = t.db.daemon.register_daemon(&new).await.expect("register");
    assert_eq!(
        (registered.state, registered.runs_in_flight, registered.workers.clone()),
        (DaemonState::Active, 0, vec!["embed".to_owned()])
    );

    let run = insert(&t.db.api, "embed").await.expect("insert").id;
    t.db.daemon.claim_runs(id, LONG_LEASE, 1, None).await.expect("claim");
    let beat = t.db.daemon.heartbeat(id).await.expect("heartbeat").expect("registered");
    assert!(beat.heartbeat_at >= registered.heartbeat_at);
    assert_eq!(beat.runs_in_flight, 1);

    let drained = t.db.api.request_drain(id, "operator", GONE_AFTER).await.expect("drain");
    assert_eq!((drained.state, drained.drain_requested_by.as_deref()), (DaemonState::Draining, Some("operator")));
    assert_eq!(
        t.db.daemon.heartbeat(id).await.expect("heartbeat").expect("exists").state,
        DaemonState::Draining,
        "draining sticks"
    );
    t.db.daemon.finish_run(run, id, &succeeded()).await.expect("finish");

    let stale = Uuid::new_v4();
    t.db.daemon.register_daemon(&NewDaemon { id: stale, ..new.clone() }).await.expect("register");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    t.db.daemon.heartbeat(id).await.expect("heartbeat");
    // Silent for longer than the registry waits: gone by the database clock before anyone marks it so.
    let silent = t.db.api.get_daemon(stale, GONE_AFTER).await.expect("get").expect("exists");
    assert_eq!(silent.state, DaemonState::Gone, "{silent:?}");
    assert!(silent.heartbeat_age_seconds >= 1.0 && silent.heartbeat_age_seconds < 60.0, "{silent:?}");
    let patient = t.db.api.get_daemon(stale, Duration::from_secs(60)).await.expect("get").expect("exists");
    assert_eq!(patient.state, DaemonState::Active, "still active for a registry that waits a minute");
    let gone = t.db.daemon.mark_gone_daemons(GONE_AFTER).await.expect("mark gone");
    assert_eq!(gone, vec![stale], "only the silent daemon is gone");
    t.db.daemon.mark_daemon_stopped(id).await.expect("stopped");
    let listed = t.db.api.list_daemons(GONE_AFTER).await.expect("list");
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|d| d.state == DaemonState::Gone && d.stopped_at.is_some()));
    let refused = t.db.api.request_drain(stale, "operator", GONE_AFTER).await;
    assert!(matches!(refused, Err(DrainError::Gone(d)) if d == stale), "a gone daemon cannot drain: {refused:?}");
    let unknown = Uuid::new_v4();
    assert!(matches!(t.db.api.request_drain(unknown, "operator", GONE_AFTER).await, Err(DrainError::Unknown(_))));
    assert!(t.db.api.get_daemon(unknown, GONE_AFTER).await.expect("get").is_none());
}

async fn queue_snapshots_replace_the_previous_one(t: &TestDb) {
    let by = Uuid::new_v4();
    let count = |pending, unmeasurable: Option<&str>, done| NewQueueCount {
        worker: "conflict-judge".into(),
        pending,
        unmeasurable: unmeasurable.map(str::to_owned),
        done,
        error: None,
        took_ms: 12,
        measured_by: by,
        oldest_pending_at: None,
        threshold: None,
    };
    t.db.daemon.store_queue_count(&count(Some(40), None, None)).await.expect("store");
    t.db.daemon.store_queue_count(&count(None, Some("too costly to count"), Some(7))).await.expect("replace");
    let counts = t.db.api.queue_counts().await.expect("read");
    assert_eq!(counts.len(), 1);
    let c = &counts[0];
    assert_eq!(
        (c.pending, c.unmeasurable.as_deref(), c.done, c.took_ms, c.measured_by),
        (None, Some("too costly to count"), Some(7), 12, Some(by))
    );
    assert!((Utc::now() - c.measured_at).num_seconds().abs() < 60);
    assert!(c.age_seconds >= 0.0 && c.age_seconds < 60.0, "the age on the database clock: {}", c.age_seconds);
}

/// The API's pool pings no connection before use (one round trip fewer per statement). When every connection it
/// holds has been cut while idle (a failover, `pg_terminate_backend`), each statement still gets its answer: reads
/// and requests are tried again on the next connection until a fresh one, and an override edit begins again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_does_not_ping_before_use_survives_all_its_connections_cut() {
    use scrinalia_shared::{ApiStore, config::DatabaseSettings};

    let t = TestDb::postgres().await;
    let settings = DatabaseSettings { url: t.url.clone(), max_connections: 5, ..DatabaseSettings::default() };
    let db = ApiStore::connect(&settings, "scrinalia-api").await.expect("connect");
    let five_at_once = || async {
        tokio::try_join!(
            db.list_overrides(),
            db.queue_counts(),
            db.runs_in_flight(),
            db.list_daemons(GONE_AFTER),
            db.now()
        )
    };
    five_at_once().await.expect("five reads");
    let cut = scrinalia_tests::terminate_connections(&t.url, Some("scrinalia-api")).await;
    assert!(cut >= 2, "the pool held several connections: {cut}");

    five_at_once().await.expect("five reads after the cut");
    let run = insert(&db, "summarize").await.expect("a request after the cut");
    assert_eq!(run.state, RunState::Queued);
    scrinalia_tests::terminate_connections(&t.url, Some("scrinalia-api")).await;
    let edit = change(json!({"preset": "thorough"}), "after a cut");
    let changed = db.change_override(&override_catalogue(), "tag-suggest", "ada", &edit).await;
    let changed = changed.expect("an override edit after the cut").stored.expect("stored");
    assert_eq!(changed.values.preset.as_deref(), Some("thorough"));
    db.close().await;
    t.cleanup().await;
}
