//! The allowed values of a run's `end_reason` and `follows_as`, held by the database whatever program writes the
//! row: every value the code has is stored, on insert and on update, and any other is refused: on PostgreSQL by
//! the named CHECK constraint a later migration replaces, on SQLite by the triggers that replaced the column CHECKs
//! (migration 20261213000001), with their sentence. The refused row is left as it was.

use scrinalia_shared::{EndReason, FollowKind, Named, RunState};
use scrinalia_tests::{Kind, TestDb, backend_tests};
use sqlx::{Connection as _, Executor as _, PgConnection, SqliteConnection};
use uuid::Uuid;

backend_tests!(every_end_reason_of_the_code_is_stored_and_no_other, every_way_to_follow_a_run_is_stored_and_no_other);

/// Values that are not today's end reasons: ones a later issue may add, and near misses.
const NOT_END_REASONS: [&str; 4] = ["yielded", "Preempted", "Exit_Status", ""];
/// Values that are not today's ways to follow a run.
const NOT_FOLLOWS: [&str; 3] = ["retry", "Resume", "rerun "];

/// What refuses a value of a column: the PostgreSQL constraint's name and the SQLite trigger's sentence.
struct Rule {
    constraint: &'static str,
    sentence: &'static str,
}

const END_REASON: Rule = Rule {
    constraint: "worker_runs_end_reason_known",
    sentence: "worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, \
               unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost, out_of_memory, stalled, preempted, \
               expired",
};
const FOLLOWS_AS: Rule = Rule {
    constraint: "worker_runs_follows_as_known",
    sentence: "worker_runs.follows_as must be one of resume, restart, rerun, rerun_failed",
};

/// A connection of its own to the test's database, for the raw statements no domain operation makes.
enum Raw {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

impl Raw {
    async fn open(t: &TestDb) -> Self {
        let opened = match t.kind {
            Kind::Postgres => PgConnection::connect(&t.url).await.map(Self::Postgres),
            Kind::Sqlite => SqliteConnection::connect(&t.url).await.map(Self::Sqlite),
        };
        opened.unwrap_or_else(|e| panic!("a connection to {}: {e}", t.url))
    }

    fn kind(&self) -> Kind {
        match self {
            Self::Postgres(_) => Kind::Postgres,
            Self::Sqlite(_) => Kind::Sqlite,
        }
    }

    /// Runs `sql`; returns the rows it affected.
    async fn execute(&mut self, sql: &str) -> Result<u64, sqlx::Error> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        Ok(match self {
            Self::Postgres(conn) => conn.execute(sql).await?.rows_affected(),
            Self::Sqlite(conn) => conn.execute(sql).await?.rows_affected(),
        })
    }

    /// How many runs have `id` and match `condition`.
    async fn count(&mut self, id: &str, condition: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(format!("select count(*) from worker_runs where id = {id} and {condition}"));
        let counted = match self {
            Self::Postgres(conn) => sqlx::query_scalar(sql).fetch_one(conn).await,
            Self::Sqlite(conn) => sqlx::query_scalar(sql).fetch_one(conn).await,
        };
        counted.unwrap_or_else(|e| panic!("count the runs {id} where {condition}: {e}"))
    }

    /// The statement inserting a run that ended in `state` with `end_reason` and `follows_as` (SQL literals);
    /// returns it and the run's id as an SQL literal.
    fn insert_sql(&self, state: RunState, end_reason: &str, follows_as: &str) -> (String, String) {
        let id = self.new_id();
        let state = state.as_str();
        let sql = format!(
            "insert into worker_runs (id, worker, state, requested_by, config, end_reason, follows_as) \
             values ({id}, 'tag-suggest', '{state}', 'db_checks', '{{}}', {end_reason}, {follows_as})"
        );
        (sql, id)
    }

    /// A new run id as an SQL literal of the backend's id column (`uuid`, or a 16-byte blob on SQLite).
    fn new_id(&self) -> String {
        let id = Uuid::new_v4();
        match self.kind() {
            Kind::Postgres => format!("'{id}'"),
            Kind::Sqlite => format!("x'{}'", id.simple()),
        }
    }

    /// Runs `sql`, which must be refused by `rule`.
    async fn assert_refused(&mut self, sql: &str, rule: &Rule) {
        let error = self.execute(sql).await.expect_err(sql);
        let refusal = error.as_database_error().unwrap_or_else(|| panic!("{sql}: not the database's refusal: {error}"));
        match self.kind() {
            Kind::Postgres => {
                assert_eq!(refusal.code().as_deref(), Some("23514"), "{sql}: a check violation: {refusal}");
                assert_eq!(refusal.constraint(), Some(rule.constraint), "{sql}: {refusal}");
            }
            Kind::Sqlite => {
                assert_eq!(refusal.code().as_deref(), Some("1811"), "{sql}: a trigger's refusal: {refusal}");
                assert_eq!(refusal.message(), rule.sentence, "{sql}");
            }
        }
    }
}

async fn every_end_reason_of_the_code_is_stored_and_no_other(t: &TestDb) {
    let mut raw = Raw::open(t).await;
    for reason in EndReason::ALL {
        let (sql, id) = raw.insert_sql(reason.state(Some(1)), &format!("'{}'", reason.name()), "null");
        raw.execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:#}"));
        assert_eq!(raw.count(&id, &format!("end_reason = '{}'", reason.name())).await, 1, "{reason}");
    }
    for bad in NOT_END_REASONS {
        let (sql, id) = raw.insert_sql(RunState::Failed, &format!("'{bad}'"), "null");
        raw.assert_refused(&sql, &END_REASON).await;
        assert_eq!(raw.count(&id, "true").await, 0, "{bad:?}: nothing inserted");
    }

    let (sql, ended) = raw.insert_sql(RunState::Failed, "'exit_status'", "null");
    raw.execute(&sql).await.expect("an ended run");
    for reason in EndReason::ALL {
        let sql = format!("update worker_runs set end_reason = '{}' where id = {ended}", reason.name());
        assert_eq!(raw.execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:#}")), 1);
    }
    let last = EndReason::ALL.last().expect("end reasons").name();
    for bad in NOT_END_REASONS {
        let sql = format!("update worker_runs set end_reason = '{bad}' where id = {ended}");
        raw.assert_refused(&sql, &END_REASON).await;
        assert_eq!(raw.count(&ended, &format!("end_reason = '{last}'")).await, 1, "{bad:?}: the run kept its reason");
    }

    // A run ending with an unknown reason is refused too, and stays queued.
    let queued = raw.new_id();
    raw.execute(&format!(
        "insert into worker_runs (id, worker, requested_by, config) values ({queued}, 'summarise', 'db_checks', '{{}}')"
    ))
    .await
    .expect("a queued run");
    let sql = format!("update worker_runs set state = 'failed', end_reason = 'yielded' where id = {queued}");
    raw.assert_refused(&sql, &END_REASON).await;
    assert_eq!(raw.count(&queued, "state = 'queued' and end_reason is null").await, 1);
}

async fn every_way_to_follow_a_run_is_stored_and_no_other(t: &TestDb) {
    let mut raw = Raw::open(t).await;
    for kind in FollowKind::ALL.iter().map(|k| format!("'{}'", k.name())).chain(["null".to_owned()]) {
        let (sql, id) = raw.insert_sql(RunState::Failed, "'exit_status'", &kind);
        raw.execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:#}"));
        let stored = if kind == "null" { "follows_as is null".to_owned() } else { format!("follows_as = {kind}") };
        assert_eq!(raw.count(&id, &stored).await, 1, "{kind}");
    }
    for bad in NOT_FOLLOWS {
        let (sql, id) = raw.insert_sql(RunState::Failed, "'exit_status'", &format!("'{bad}'"));
        raw.assert_refused(&sql, &FOLLOWS_AS).await;
        assert_eq!(raw.count(&id, "true").await, 0, "{bad:?}: nothing inserted");
    }

    let (sql, run) = raw.insert_sql(RunState::Failed, "'exit_status'", "null");
    raw.execute(&sql).await.expect("a run");
    for kind in FollowKind::ALL {
        let sql = format!("update worker_runs set follows_as = '{}' where id = {run}", kind.name());
        assert_eq!(raw.execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:#}")), 1);
    }
    let last = FollowKind::ALL.last().expect("ways to follow").name();
    for bad in NOT_FOLLOWS {
        let sql = format!("update worker_runs set follows_as = '{bad}' where id = {run}");
        raw.assert_refused(&sql, &FOLLOWS_AS).await;
        assert_eq!(raw.count(&run, &format!("follows_as = '{last}'")).await, 1, "{bad:?}: the run kept its value");
    }
}
