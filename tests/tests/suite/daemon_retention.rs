//! Retention with the real binaries: `scrinalia runs export` (through the API) writes exactly the runs that the
//! daemons then prune; two daemons with a short interval and a big backlog prune it all, one pass at a time (the
//! passes they record never overlap), and the pruned runs' logs leave the local object store folder.

use std::{collections::BTreeSet, time::Duration};

use scrinalia_shared::{Role, config::RetentionSettings};
use scrinalia_testkit::db::Kind;
use scrinalia_tests::{
    TestDb, backend_tests, eventually, fixtures::*, free_port, start_api, start_daemon, system::scrinalia,
};
use uuid::Uuid;

backend_tests!(two_daemons_prune_what_the_export_wrote_one_pass_at_a_time);

const VIEWER: &str = "scr_retention_test_viewer";
/// Seeded old runs of worker `bulk`, beside one seeded through the domain layer with a log.
const BACKLOG: u32 = 1500;
const KEEP: u32 = 10;

/// `BACKLOG` succeeded runs of `bulk` that finished 100 days ago (a second apart), by a test-only statement, with
/// the configuration of the run already there.
fn seed_sql(kind: Kind) -> String {
    match kind {
        Kind::Postgres => format!(
            "insert into worker_runs (id, worker, state, requested_by, config, end_reason, requested_at, finished_at) \
             select gen_random_uuid(), 'bulk', 'succeeded', 'seed', (select config from worker_runs limit 1), 'exit_status', \
                 now() - make_interval(days => 100) + make_interval(secs => g), \
                 now() - make_interval(days => 100) + make_interval(secs => g) \
             from generate_series(1, {BACKLOG}) g"
        ),
        Kind::Sqlite => format!(
            "with recursive g(n) as (select 1 union all select n + 1 from g where n < {BACKLOG}) \
             insert into worker_runs (id, worker, state, requested_by, config, end_reason, requested_at, finished_at) \
             select randomblob(16), 'bulk', 'succeeded', 'seed', (select config from worker_runs limit 1), 'exit_status', \
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-100 days', '+' || n || ' seconds'), \
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-100 days', '+' || n || ' seconds') \
             from g"
        ),
    }
}

/// Rows that match `sql`'s `where`, counted by a no-op update (all `TestDb::execute` returns).
async fn count(t: &TestDb, table: &str, column: &str, condition: &str) -> u64 {
    t.execute(&format!("update {table} set {column} = {column} where {condition}")).await.expect("count")
}

async fn two_daemons_prune_what_the_export_wrote_one_pass_at_a_time(t: &TestDb) {
    let dir = t.dir.path();
    let logs_dir = dir.join("run-logs");
    // One run through the domain layer, with a log, older than the backlog.
    let daemon = Uuid::now_v7();
    let logged = insert(&t.db.api, "bulk").await.expect("insert");
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    let prefix = format!("runs/bulk/{}", logged.id);
    t.db.daemon.mark_started(logged.id, daemon, &prefix).await.expect("start");
    t.db.daemon.finish_run(logged.id, daemon, &succeeded()).await.expect("finish");
    let ago = match t.kind {
        Kind::Postgres => "now() - make_interval(days => 200)".to_owned(),
        Kind::Sqlite => "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-200 days')".to_owned(),
    };
    t.execute(&format!("update worker_runs set finished_at = {ago} where state = 'succeeded'")).await.expect("age");
    std::fs::create_dir_all(logs_dir.join(&prefix)).expect("the log's folder");
    std::fs::write(logs_dir.join(&prefix).join("00000000.log"), "hello\n").expect("a log chunk");
    assert_eq!(t.execute(&seed_sql(t.kind)).await.expect("seed"), u64::from(BACKLOG));

    let port = free_port();
    let retention = RetentionSettings {
        keep_last_per_worker: KEEP,
        batch_size: 50,
        interval_seconds: 1,
        ..RetentionSettings::default()
    };
    let config = t
        .config()
        .test_daemon(|d| (d.lease_seconds, d.poll_seconds) = (5, 1))
        .with(|f| {
            f.retention = retention;
            f.object_store.path = logs_dir.clone();
            f.api.listen = ([127, 0, 0, 1], port).into();
        })
        .token("vera", Role::Viewer, VIEWER);
    let config = t.write_config(&config, "config");
    let api = start_api(dir, "api", &config, port, &[]).await;

    // The export, before any daemon runs: every prunable run, once, as JSON lines.
    let url = format!("http://127.0.0.1:{port}");
    let env = [("SCRINALIA_API", url.as_str()), ("SCRINALIA_TOKEN", VIEWER)];
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).format("%Y-%m-%d").to_string();
    let export = scrinalia(&["runs", "export", "--before", &tomorrow], &env, None).await;
    assert_eq!(export.code, Some(0), "{export:#?}");
    let exported: BTreeSet<Uuid> = export
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .map(|v| v["id"].as_str().and_then(|id| id.parse().ok()).expect("an id"))
        .collect();
    let expected = u64::from(BACKLOG + 1 - KEEP);
    assert_eq!(exported.len() as u64, expected, "one line per prunable run: {}", export.stderr);
    assert!(exported.contains(&logged.id));
    let of_other = scrinalia(&["runs", "export", "--before", &tomorrow, "--worker", "other"], &env, None).await;
    assert_eq!((of_other.code, of_other.stdout.as_str()), (Some(0), ""), "{of_other:#?}");
    let bad = scrinalia(&["runs", "export", "--before", "last tuesday"], &env, None).await;
    assert_ne!(bad.code, Some(0), "{bad:#?}");

    // Two daemons: the backlog goes, one pass at a time.
    let daemons =
        [start_daemon(dir, "daemon-1", &config, &[]).await, start_daemon(dir, "daemon-2", &config, &[]).await];
    eventually(Duration::from_secs(60), "the backlog to be pruned", || async {
        // The counting update may meet a pass's delete of the same rows (a deadlock PostgreSQL breaks): look again.
        let left = t.execute("update worker_runs set attempt = attempt where worker = 'bulk'").await.ok()?;
        (left == u64::from(KEEP)).then_some(())
    })
    .await;
    // More passes come and go (nothing left to prune), each daemon trying every second: two of them ended.
    eventually(Duration::from_secs(30), "two passes that found nothing left to prune", || async {
        let idle = t.execute("update retention_passes set runs = runs where runs = 0 and finished_at is not null");
        (idle.await.ok()? >= 2).then_some(())
    })
    .await;
    for d in daemons {
        d.stop(Duration::from_secs(10)).await;
    }
    drop(api);
    for id in &exported {
        let sql = match t.kind {
            Kind::Postgres => format!("id = '{id}'"),
            Kind::Sqlite => format!("id = x'{}'", id.simple()),
        };
        assert_eq!(count(t, "worker_runs", "attempt", &sql).await, 0, "exported run {id} is pruned");
    }
    assert!(!logs_dir.join(&prefix).join("00000000.log").exists(), "the pruned run's log is deleted");
    let passes = count(t, "retention_passes", "runs", "true").await;
    assert!(passes >= 3, "a pass per interval: {passes}");
    assert_eq!(count(t, "retention_passes", "runs", "finished_at is null").await, 0, "every pass ended");
    let overlapping = count(
        t,
        "retention_passes",
        "runs",
        "exists (select 1 from retention_passes b where b.id <> retention_passes.id \
             and b.started_at < retention_passes.finished_at and retention_passes.started_at < b.finished_at)",
    )
    .await;
    assert_eq!(overlapping, 0, "no two passes overlap");
    let pruning = count(t, "retention_passes", "runs", "runs > 0").await;
    assert!(pruning >= 1, "the backlog was pruned by recorded passes");
}
