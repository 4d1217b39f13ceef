//! The SQLite upgrade that rebuilds `worker_runs` (migration 20261213000001, which moves the CHECKs of `end_reason`
//! and `follows_as` into triggers), on a file migrated to the version before it and filled through every table
//! that references a run, on a pool set up as the daemons' (foreign keys on, WAL). Dropping the old table with
//! foreign keys on would cascade to the progress, resources and webhook events of every run; these tests show
//! that nothing is lost: every row of every table, every index and trigger, every foreign key, the table's
//! columns, and the pool's foreign keys afterwards; only the two CHECKs are gone, and their triggers added. A
//! rebuild that would leave a reference dangling changes nothing and says why.

use std::{collections::BTreeMap, path::Path, time::Duration};

use scrinalia_shared::{DaemonStore, config::DatabaseSettings};
use sqlx::{
    SqlitePool,
    migrate::{MigrateError, Migrator},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};

/// The migration under test.
const VERSION: i64 = 20261213000001;
/// The one before it.
const PREVIOUS: i64 = 20261212000001;
/// The triggers it adds.
const ADDED_TRIGGERS: [&str; 4] = [
    "worker_runs_end_reason_known_on_insert",
    "worker_runs_end_reason_known_on_update",
    "worker_runs_follows_as_known_on_insert",
    "worker_runs_follows_as_known_on_update",
];

/// The SQLite migrations, as the daemons embed them.
static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// A pool of one connection on `path`, opened as `scrinalia_db::Database::connect` opens SQLite: what the
/// migrations run on.
async fn pool(path: &Path) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    SqlitePoolOptions::new().max_connections(1).connect_with(options).await.expect("open the SQLite file")
}

/// Runs `sql` (several statements) on `pool`.
async fn execute(pool: &SqlitePool, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Strings `sql` selects, in order.
async fn strings(pool: &SqlitePool, sql: &str) -> Vec<String> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The number `sql` selects.
async fn number(pool: &SqlitePool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `sql` with its whitespace collapsed.
fn collapsed(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A table's `CREATE TABLE` split in two: its CHECK clauses, and the tokens of the rest of its column list (so
/// that two texts laid out differently compare equal when they define the same columns).
fn definition(sql: &str) -> (Vec<String>, Vec<String>) {
    assert!(sql.is_ascii(), "{sql}");
    let body = &sql[sql.find('(').expect("a column list")..];
    let lower = body.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let (mut checks, mut rest) = (Vec::new(), String::new());
    let mut i = 0;
    while i < bytes.len() {
        let word_start = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let open = lower.len() - lower[(i + 5).min(lower.len())..].trim_start().len();
        if word_start && lower[i..].starts_with("check") && bytes.get(open) == Some(&b'(') {
            let (mut depth, mut quoted, mut end) = (0, false, open);
            for (k, &c) in bytes.iter().enumerate().skip(open) {
                match c {
                    b'\'' => quoted = !quoted,
                    b'(' if !quoted => depth += 1,
                    b')' if !quoted => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = k + 1;
                    break;
                }
            }
            checks.push(collapsed(&body[i..end]));
            i = end;
        } else {
            rest.push(char::from(bytes[i]));
            i += 1;
        }
    }
    let rest = rest.replace('(', " ( ").replace(')', " ) ").replace(',', " , ");
    (checks, rest.split_whitespace().map(str::to_owned).collect())
}

/// What the upgrade must keep (or change only as intended), read off the file.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// `pragma table_info(worker_runs)`, a line per column.
    columns: Vec<String>,
    /// The CHECK clauses of `worker_runs`.
    checks: Vec<String>,
    /// The rest of its definition, token by token.
    definition: Vec<String>,
    /// Every index of the file: its table, `pragma index_list`'s flags, its columns (`pragma index_xinfo`) and text.
    indexes: BTreeMap<String, String>,
    /// Every trigger of the file, its table and its text.
    triggers: BTreeMap<String, String>,
    /// Every foreign key of every table (`pragma foreign_key_list`).
    foreign_keys: Vec<String>,
    /// Every row of every table but sqlx's own, each value `quote`d (so a blob stays a blob), with its rowid.
    rows: BTreeMap<String, Vec<String>>,
}

impl Snapshot {
    async fn of(pool: &SqlitePool) -> Self {
        let columns = strings(
            pool,
            "select cid || ' ' || name || ' ' || type || ' ' || \"notnull\" || ' ' || quote(dflt_value) || ' ' || pk \
             from pragma_table_info('worker_runs') order by cid",
        )
        .await;
        let table = strings(pool, "select sql from sqlite_schema where type = 'table' and name = 'worker_runs'").await;
        let (checks, definition) = definition(table.first().expect("worker_runs"));
        let mut indexes = BTreeMap::new();
        let listed = strings(
            pool,
            "select m.name || '|' || l.name || '|' || l.\"unique\" || '|' || l.origin || '|' || l.partial \
             from sqlite_schema m, pragma_index_list(m.name) l where m.type = 'table' order by l.name",
        )
        .await;
        for line in listed {
            let name = line.split('|').nth(1).expect("an index name").to_owned();
            let keys = strings(
                pool,
                &format!(
                    "select seqno || ' ' || cid || ' ' || quote(name) || ' ' || \"desc\" || ' ' || coll || ' ' || key \
                     from pragma_index_xinfo('{name}') order by seqno"
                ),
            )
            .await;
            let text =
                strings(pool, &format!("select coalesce(sql, '') from sqlite_schema where name = '{name}'")).await;
            indexes.insert(name, format!("{line} [{}] {}", keys.join(", "), collapsed(&text.concat())));
        }
        let triggers =
            strings(pool, "select name || '|' || tbl_name || '|' || sql from sqlite_schema where type = 'trigger'")
                .await
                .into_iter()
                .map(|line| {
                    let (name, rest) = line.split_once('|').expect("a trigger");
                    (name.to_owned(), collapsed(rest))
                })
                .collect();
        let foreign_keys = strings(
            pool,
            "select m.name || ' ' || f.id || ' ' || f.seq || ' ' || f.\"table\" || ' ' || f.\"from\" || ' ' || \
             quote(f.\"to\") || ' ' || f.on_update || ' ' || f.on_delete || ' ' || f.\"match\" \
             from sqlite_schema m, pragma_foreign_key_list(m.name) f where m.type = 'table' order by 1",
        )
        .await;
        let mut rows = BTreeMap::new();
        let tables = strings(
            pool,
            "select name from sqlite_schema where type = 'table' and name not like 'sqlite_%' \
             and name <> '_sqlx_migrations' order by name",
        )
        .await;
        for table in tables {
            let names = strings(pool, &format!("select name from pragma_table_info('{table}') order by cid")).await;
            let values: Vec<String> = names.iter().map(|n| format!("quote(\"{n}\")")).collect();
            let sql =
                format!("select quote(rowid) || ' ' || {} from \"{table}\" order by rowid", values.join(" || ' ' || "));
            rows.insert(table, strings(pool, &sql).await);
        }
        Self { columns, checks, definition, indexes, triggers, foreign_keys, rows }
    }
}

/// Runs in every state, one with every column set, runs following others, with progress, held resources and
/// webhook events (with their deliveries and attempts); 300 more finished runs with progress of their own.
const SEED: &str = "
    insert into worker_runs (id, worker, state, requested_by, requested_at, arguments, config, claimed_by, claimed_at,
        lease_expires_at, started_at, finished_at, duration_ms, exit_code, error, progress, result,
        cancel_requested_at, cancel_requested_by, trace_context, log_key, attempt, schedule_id, end_reason,
        reported_config, fire_at, retry_of, not_before, pipeline_run_id, pipeline_step, checkpoint, checkpoint_at,
        follows, follows_as)
    values (x'a1', 'summarise', 'succeeded', 'schedule', '2026-12-01T10:00:00.000Z', '{\"batch\":5}', '{}', x'd1',
        '2026-12-01T10:00:01.000Z', '2026-12-01T10:01:01.000Z', '2026-12-01T10:00:02.000Z', '2026-12-01T10:03:00.000Z',
        178000, 0, 'none', '{\"done\":5}', '{\"summaries\":5}', '2026-12-01T10:02:00.000Z', 'ada', '00-4bf9-01',
        'runs/a1.log', 2, 's1', 'exit_status', '{\"engine\":\"ollama\"}', '2026-12-01T10:00:00.000Z', x'a0',
        '2026-12-01T09:59:00.000Z', x'c1', 1, '{\"cursor\":9}', '2026-12-01T10:02:30.000Z', x'a2', 'rerun');
    insert into worker_runs (id, worker, state, requested_by, config, claimed_by, started_at, finished_at, end_reason,
        error, checkpoint)
    values (x'b1', 'tag-suggest', 'interrupted', 'panel', '{}', x'd1', '2026-12-01T11:00:00.000Z',
        '2026-12-01T11:05:00.000Z', 'owner_lost', 'owner lost: daemon d1', '{\"cursor\":3}');
    insert into worker_runs (id, worker, requested_by, config, follows, follows_as, checkpoint)
    values (x'b2', 'tag-suggest', 'ada', '{}', x'b1', 'resume', '{\"cursor\":3}');
    insert into worker_runs (id, worker, state, requested_by, config, claimed_by, claimed_at, lease_expires_at,
        started_at)
    values (x'c2', 'embed', 'running', 'cron', '{}', x'd2', '2026-12-01T12:00:00.000Z', '2099-01-01T00:00:00.000Z',
        '2026-12-01T12:00:01.000Z');
    insert into worker_runs (id, worker, state, requested_by, config, finished_at, end_reason, follows, follows_as)
    values (x'c3', 'judge', 'cancelled', 'ada', '{}', '2026-12-01T13:00:00.000Z', 'cancelled', x'a1', 'restart');
    with recursive n(i) as (select 1 union all select i + 1 from n where i < 300)
    insert into worker_runs (id, worker, state, requested_by, config, finished_at, exit_code, end_reason, error)
    select randomblob(16), 'w-' || (i % 7), case when i % 5 = 0 then 'failed' else 'succeeded' end, 'cron', '{}',
        strftime('%Y-%m-%dT%H:%M:%fZ', '2026-11-01', '+' || i || ' minutes'), i % 5 = 0, 'exit_status',
        case when i % 5 = 0 then 'exit status 1' end
    from n;

    insert into run_progress (run_id, seq, progress) values (x'a1', 1, '{\"done\":1}'), (x'a1', 2, '{\"done\":5}'),
        (x'c2', 1, '{\"done\":0}'), (x'b1', 1, '{\"done\":3}');
    insert into run_progress (run_id, seq, progress) select id, 1, '{}' from worker_runs where worker like 'w-%';
    insert into run_resources (run_id, resource) values (x'c2', 'gpu'), (x'c2', 'model-server');
    insert into webhook_events (id, kind, run_id, worker, payload)
    values (x'e1', 'interrupted', x'b1', 'tag-suggest', '{}'), (x'e2', 'test', null, null, '{}');
    insert into webhook_deliveries (event_id, webhook, state, attempts) values (x'e1', 'ops', 'delivered', 1);
    insert into webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code)
    select id, 1, '2026-12-01T11:05:01.000Z', 40, 200 from webhook_deliveries;
    insert into worker_chores (worker, chore) values ('embed', 'count');
";

#[tokio::test]
async fn the_rebuild_keeps_every_row_index_trigger_and_reference_and_drops_only_the_two_checks() {
    assert!(MIGRATOR.iter().any(|m| m.version == VERSION), "migration {VERSION} is among the SQLite migrations");
    let dir = tempfile::tempdir().expect("a scratch folder");
    let file = dir.path().join("scrinalia.sqlite");
    let pool = pool(&file).await;
    MIGRATOR.run_to(PREVIOUS, &pool).await.expect("migrate to the version before");
    execute(&pool, SEED).await;
    let before = Snapshot::of(&pool).await;
    assert_eq!(before.rows["run_progress"].len(), 304, "the seed is in");

    let began = std::time::Instant::now();
    MIGRATOR.run_to(VERSION, &pool).await.expect("the rebuild");
    let took = began.elapsed();
    assert_eq!(number(&pool, "pragma foreign_keys").await, 1, "the migrator's connection has its foreign keys back");
    let after = Snapshot::of(&pool).await;

    assert_eq!(after.rows, before.rows, "every row of every table, worker_runs' rowids included");
    assert_eq!(after.columns, before.columns, "the same columns, types, defaults, NOT NULLs and key");
    assert_eq!(after.definition, before.definition, "nothing but CHECKs changed in the column list");
    assert_eq!(before.checks.len(), 3, "{:?}", before.checks);
    let kept: Vec<String> = before
        .checks
        .iter()
        .filter(|c| !c.contains("end_reason in") && !c.contains("follows_as in"))
        .cloned()
        .collect();
    assert_eq!(kept.len(), 1, "{:?}", before.checks);
    assert_eq!(after.checks, kept, "only the state's CHECK is left");
    assert_eq!(after.indexes, before.indexes, "every index, with its name, columns, flags and text");
    assert_eq!(after.foreign_keys, before.foreign_keys, "every foreign key");
    let mut expected = before.triggers.clone();
    for name in ADDED_TRIGGERS {
        let added = after.triggers.get(name).unwrap_or_else(|| panic!("trigger {name} was added"));
        assert!(added.starts_with("worker_runs|"), "{name} is on worker_runs: {added}");
        expected.insert(name.to_owned(), added.clone());
    }
    assert_eq!(after.triggers, expected, "every trigger kept as it was, and the four added");
    assert_eq!(number(&pool, "select count(*) from pragma_foreign_key_check").await, 0, "no reference dangles");

    // The rebuilt table behaves as the old one: its triggers fire, its references cascade and are enforced.
    execute(
        &pool,
        "update worker_runs set state = 'failed', end_reason = 'lease_lost', finished_at = '2026-12-01T12:05:00.000Z' \
         where id = x'c2'",
    )
    .await;
    let asked = "select count(*) from worker_chores where worker = 'embed' and requested_at is not null";
    assert_eq!(number(&pool, asked).await, 1, "the run's end asked for a count");
    execute(&pool, "delete from worker_runs where id = x'a1'").await;
    assert_eq!(number(&pool, "select count(*) from run_progress where run_id = x'a1'").await, 0, "cascaded");
    let orphan = sqlx::query("insert into run_progress (run_id, seq, progress) values (x'ff', 1, '{}')")
        .execute(&pool)
        .await
        .expect_err("a progress row of no run");
    assert!(orphan.to_string().contains("FOREIGN KEY"), "{orphan}");
    let unknown = sqlx::query("update worker_runs set end_reason = 'stalled' where id = x'b1'")
        .execute(&pool)
        .await
        .expect_err("an unknown end reason");
    assert!(unknown.to_string().contains("worker_runs.end_reason must be one of"), "{unknown}");
    pool.close().await;

    // The daemons' own migrator takes the file from here.
    let url = format!("sqlite://{}", file.display());
    let settings = DatabaseSettings { url, ..DatabaseSettings::default() };
    let db = DaemonStore::connect(&settings, "scrinalia").await.expect("connect");
    db.migrate().await.expect("the daemons' migrations accept the rebuilt file");
    db.close().await;
    eprintln!("the rebuild of {} runs took {took:?}", before.rows["worker_runs"].len());
}

#[tokio::test]
async fn a_rebuild_that_would_leave_a_reference_dangling_changes_nothing_and_says_why() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let pool = pool(&dir.path().join("scrinalia.sqlite")).await;
    MIGRATOR.run_to(PREVIOUS, &pool).await.expect("migrate to the version before");
    execute(&pool, SEED).await;
    // Written with the foreign keys off, as only someone working on the file by hand could.
    execute(
        &pool,
        "pragma foreign_keys = off; insert into run_progress (run_id, seq, progress) values (x'ee', 1, '{}'); \
         pragma foreign_keys = on;",
    )
    .await;
    let before = Snapshot::of(&pool).await;

    let refused = MIGRATOR.run_to(VERSION, &pool).await;
    let Err(MigrateError::ExecuteMigration(sqlx::Error::Database(e), version)) = &refused else {
        panic!("the rebuild must fail on the dangling progress row: {refused:?}");
    };
    assert_eq!(*version, VERSION);
    assert!(e.message().starts_with("worker_runs was not rebuilt: rows of run_progress, run_resources or"), "{e}");
    pool.close().await;

    let pool = self::pool(&dir.path().join("scrinalia.sqlite")).await;
    assert_eq!(Snapshot::of(&pool).await, before, "the file is as it was");
    let recorded = format!("select count(*) from _sqlx_migrations where version = {VERSION}");
    assert_eq!(number(&pool, &recorded).await, 0, "the migration is not recorded");
    pool.close().await;
}
