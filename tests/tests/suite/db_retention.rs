//! Retention through the domain layer on PostgreSQL and SQLite: a pass removes exactly the runs the policy says
//! (by state and age, the last N of each worker kept, links handled), which is exactly what the export listed;
//! it deletes their logs from the object store, thins the progress of finished runs, removes old gone daemons,
//! and one pass at a time across holders, at most once per interval.

use std::time::Duration;

use chrono::Utc;
use scrinalia_shared::items::{Gatherer, parse};
use scrinalia_shared::{
    config::{ObjectStoreSettings, RetentionSettings},
    daemons::NewDaemon,
    logstore::LogStore,
};
use scrinalia_testkit::db::Kind;
use scrinalia_tests::{TestDb, backend_tests, fixtures::*};
use serde_json::json;
use uuid::Uuid;

backend_tests!(a_pass_prunes_what_the_policy_and_the_export_say_with_logs_progress_and_daemons);

const DAY: f64 = 86_400.0;

fn settings() -> RetentionSettings {
    RetentionSettings {
        succeeded_days: 10,
        failed_days: 20,
        cancelled_days: 5,
        keep_last_per_worker: 3,
        progress_points: 4,
        gone_daemons_days: 1,
        batch_size: 2,
        interval_seconds: 1,
        enabled: true,
    }
}

/// A time `days` ago, as SQL on the backend's clock.
fn days_ago(t: &TestDb, days: f64) -> String {
    match t.kind {
        Kind::Postgres => format!("now() - make_interval(secs => {})", days * DAY),
        Kind::Sqlite => format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{} seconds')", days * DAY),
    }
}

/// A UUID as an SQL literal of the backend.
fn id_sql(t: &TestDb, id: Uuid) -> String {
    match t.kind {
        Kind::Postgres => format!("'{id}'"),
        Kind::Sqlite => format!("x'{}'", id.simple()),
    }
}

/// A run of `worker` that ended in `state` `days` ago, with a log of two objects and `progress` reports.
async fn finished(t: &TestDb, logs: &LogStore, worker: &str, state: &str, days: f64, progress: u32) -> Uuid {
    let daemon = Uuid::now_v7();
    let run = insert(&t.db.api, worker).await.expect("insert");
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, Some(&[worker.to_owned()])).await.expect("claim");
    let prefix = logs.run_prefix(worker, run.id);
    t.db.daemon.mark_started(run.id, daemon, prefix.as_ref()).await.expect("start");
    for i in 0..progress {
        t.db.daemon.record_progress(run.id, daemon, &json!({"done": i})).await.expect("progress");
    }
    // Two items, one failed: rows, counts and a batch, which go with the run.
    let mut items = Gatherer::new(10);
    items.offer(parse(&json!({"id": "doc-1", "outcome": "succeeded"})));
    items.offer(parse(&json!({"id": "doc-2", "outcome": "failed", "class": "ocr_empty", "error": "empty"})));
    t.db.daemon.write_items(run.id, daemon, &items.take().expect("a batch")).await.expect("items");
    t.db.daemon.finish_run(run.id, daemon, &succeeded()).await.expect("finish");
    for key in [logs.chunk_key(worker, run.id, 0), logs.cut_key(worker, run.id, 1)] {
        let file = log_root(t).join(key.as_ref());
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("the log's folder");
        std::fs::write(file, "line\n").expect("a log object");
    }
    let sql = format!(
        "update worker_runs set state = '{state}', finished_at = {} where id = {}",
        days_ago(t, days),
        id_sql(t, run.id)
    );
    assert_eq!(t.execute(&sql).await.expect("age the run"), 1);
    run.id
}

/// The local store's folder.
fn log_root(t: &TestDb) -> std::path::PathBuf {
    t.dir.path().join("logs")
}

/// How many objects a run's log has in the local folder.
fn log_objects(t: &TestDb, logs: &LogStore, worker: &str, id: Uuid) -> usize {
    let folder = log_root(t).join(logs.run_prefix(worker, id).as_ref());
    std::fs::read_dir(folder).map(|d| d.filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file())).count()).unwrap_or(0)
}

async fn a_pass_prunes_what_the_policy_and_the_export_say_with_logs_progress_and_daemons(t: &TestDb) {
    let store = ObjectStoreSettings { path: log_root(t), ..ObjectStoreSettings::default() };
    let logs = LogStore::open(&store).expect("open the log store");
    let s = settings();
    // Worker a: by state and age, the newest three kept whatever their age.
    let a = [
        ("succeeded", 30.0, true),
        ("failed", 25.0, true),
        ("interrupted", 15.0, false),
        ("cancelled", 7.0, true),
        ("succeeded", 4.0, false),
        ("failed", 2.0, false),
        ("cancelled", 1.0, false),
    ];
    let mut expected = Vec::new();
    let mut kept = Vec::new();
    for (state, days, pruned) in a {
        let progress = if days == 15.0 { 20 } else { 3 };
        let id = finished(t, &logs, "a", state, days, progress).await;
        if pruned { expected.push(("a", id)) } else { kept.push(("a", id)) }
    }
    let thinned = kept[0].1;
    // Worker b: old, but no more than the last three.
    for days in [100.0, 90.0] {
        kept.push(("b", finished(t, &logs, "b", "succeeded", days, 0).await));
    }
    // Worker c: a kept run that follows a pruned one loses the link; a queued retry keeps the run it retries.
    let mut c = Vec::new();
    for days in [60.0, 55.0, 50.0, 3.0, 2.0, 1.0] {
        c.push(finished(t, &logs, "c", "succeeded", days, 0).await);
    }
    t.execute(&format!(
        "update worker_runs set follows = {}, follows_as = 'rerun' where id = {}",
        id_sql(t, c[0]),
        id_sql(t, c[3])
    ))
    .await
    .expect("link");
    let retry = insert(&t.db.api, "c").await.expect("queued");
    t.execute(&format!("update worker_runs set retry_of = {} where id = {}", id_sql(t, c[1]), id_sql(t, retry.id)))
        .await
        .expect("link");
    expected.extend([("c", c[0]), ("c", c[2])]);
    kept.extend([("c", c[1]), ("c", c[3]), ("c", c[4]), ("c", c[5]), ("c", retry.id)]);
    // Daemons: one gone two days ago (removed), one gone just now (kept).
    let mut daemons = Vec::new();
    for _ in 0..2 {
        let id = Uuid::now_v7();
        let new = NewDaemon {
            id,
            host: "h".into(),
            pid: 1,
            version: "t".into(),
            capacity: 1,
            workers: vec![],
            labels: vec![],
            limits: Default::default(),
            resources: Default::default(),
        };
        t.db.daemon.register_daemon(&new).await.expect("register");
        t.db.daemon.mark_daemon_stopped(id).await.expect("stopped");
        daemons.push(id);
    }
    let sql = format!("update daemons set stopped_at = {} where id = {}", days_ago(t, 2.0), id_sql(t, daemons[0]));
    assert_eq!(t.execute(&sql).await.expect("age the daemon"), 1);

    // The export lists exactly what the pass is about to delete, oldest finished first; and by worker, by time.
    let later = Utc::now() + chrono::Duration::days(1);
    let listed = t.db.api.prunable_runs(&s, Some(later), None, None, 1000).await.expect("export");
    let mut want: Vec<Uuid> = expected.iter().map(|e| e.1).collect();
    let mut got: Vec<Uuid> = listed.iter().map(|r| r.id).collect();
    assert!(listed.windows(2).all(|w| w[0].finished_at <= w[1].finished_at), "oldest first");
    want.sort();
    got.sort();
    assert_eq!(got, want, "the export is the policy");
    let of_a = t.db.api.prunable_runs(&s, Some(later), Some("a"), None, 1000).await.expect("export a");
    assert_eq!(of_a.len(), 3);
    let old = Utc::now() - chrono::Duration::days(52);
    let before = t.db.api.prunable_runs(&s, Some(old), None, None, 1000).await.expect("export before");
    assert_eq!(before.iter().map(|r| r.id).collect::<Vec<_>>(), [c[0]], "only what finished before");
    let page = t.db.api.prunable_runs(&s, Some(later), None, None, 2).await.expect("page");
    let last = page.last().map(|r| (r.finished_at.expect("finished"), r.id));
    let rest = t.db.api.prunable_runs(&s, Some(later), None, last, 1000).await.expect("next page");
    assert_eq!(page.len() + rest.len(), want.len(), "keyset pages cover the export");

    let all: Vec<i32> = t.db.api.run_progress(thinned).await.expect("progress").iter().map(|p| p.seq).collect();
    assert_eq!(all.len(), 20);

    // One pass (batches of two) does it all.
    let holder = Uuid::now_v7();
    let started = tokio::time::Instant::now();
    let counts = t.db.daemon.prune_pass(&s, &logs, holder, &|| false).await.expect("pass").expect("the lease was free");
    // No second pass before the interval, by anyone. The pass ended after `started`, so while less than the
    // interval has passed since then on this test's clock, less has passed since its end on the database's; a
    // machine slow enough to take longer than that between the two statements would see the next pass due.
    let second = t.db.daemon.prune_pass(&s, &logs, holder, &|| false).await.expect("pass").is_none();
    let third = t.db.daemon.prune_pass(&s, &logs, Uuid::now_v7(), &|| false).await.expect("pass").is_none();
    if started.elapsed() < Duration::from_secs(s.interval_seconds) {
        assert!(second && third, "a second pass within the interval");
    } else {
        eprintln!("this machine took {:?} over three passes: the interval check is left out", started.elapsed());
    }
    assert_eq!((counts.runs, counts.logs, counts.daemons, counts.log_failures), (5, 5, 1, 0), "{counts:?}");
    assert_eq!(counts.progress, 16, "one run's 20 reports thinned to 4: {counts:?}");
    for (worker, id) in &expected {
        assert!(t.db.api.get_run(*id).await.expect("get").is_none(), "pruned: {worker} {id}");
        assert_eq!(t.db.api.item_summary(*id).await.expect("items"), None, "its items are gone");
        assert_eq!(t.db.api.item_batches(*id).await.expect("batches"), 0);
        assert_eq!(log_objects(t, &logs, worker, *id), 0, "its log is gone");
    }
    for (worker, id) in &kept {
        assert!(t.db.api.get_run(*id).await.expect("get").is_some(), "kept: {worker} {id}");
        if *id != retry.id {
            let items = t.db.api.item_summary(*id).await.expect("items").expect("its items are kept");
            assert_eq!((items.succeeded, items.failed), (1, 1));
            assert_eq!(log_objects(t, &logs, worker, *id), 2, "its log is kept");
        }
    }
    let follower = t.db.api.get_run(c[3]).await.expect("get").expect("kept");
    assert_eq!(follower.follows, None, "the link to a pruned run is set to null");
    let seqs: Vec<i32> = t.db.api.run_progress(thinned).await.expect("progress").iter().map(|p| p.seq).collect();
    assert_eq!(seqs.len(), 4, "{seqs:?}");
    assert_eq!((seqs.first(), seqs.last()), (all.first(), all.last()), "the first and the last are kept: {seqs:?}");
    let pid = |id: Uuid| format!("update daemons set pid = pid where id = {}", id_sql(t, id));
    assert_eq!(t.execute(&pid(daemons[0])).await.expect("daemon"), 0, "the old gone daemon is removed");
    assert_eq!(t.execute(&pid(daemons[1])).await.expect("daemon"), 1, "the recent one is kept");

    // The next pass, an interval after the first ended (on the database clock), finds nothing to do.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = t.db.daemon.prune_pass(&s, &logs, Uuid::now_v7(), &|| false).await.expect("pass").expect("due again");
    assert_eq!((again.runs, again.progress, again.daemons, again.logs), (0, 0, 0, 0));
}
