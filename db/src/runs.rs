//! The statements of `worker_runs` (the queue and the ledger in one table) and `run_progress`. Owner writes
//! (start, renewal, progress, finish) are fenced: they match only a row still `running` under the writing daemon.

use std::time::Duration;

use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::{ExplicitArgs, FollowKind, ProgressEntry, ResolvedConfig, Run, RunState};

use crate::{
    Backend, Database, Lease, On, Result,
    dialect::{DbTime, Sql, sql},
    is_in_flight_violation, run,
};

/// The columns of a run, for every statement that returns runs.
macro_rules! run_columns {
    ($d:ident;) => {
        "id, worker, state, requested_by, requested_at, arguments, config, reported_config, claimed_by, claimed_at, \
         lease_expires_at, started_at, finished_at, duration_ms, exit_code, end_reason, error, progress, result, \
         cancel_requested_at, cancel_requested_by, trace_context, log_key, attempt, retry_of, not_before, schedule_id, \
         fire_at, pipeline_run_id, pipeline_step, checkpoint, checkpoint_at, follows, follows_as, usage, parent_id, shard, \
         shards, priority, expires_at, preempt_requested_at, preempted_for, tags"
    };
}

pub(crate) use run_columns;

mod claim;

pub(crate) use claim::{CLAIM_POSTGRES, CLAIM_SQLITE};
pub use claim::{QueueKey, claim};

/// A request as inserted.
pub struct NewRun<'a> {
    pub id: Uuid,
    pub worker: &'a str,
    pub requested_by: &'a str,
    pub arguments: &'a ExplicitArgs,
    pub config: &'a ResolvedConfig,
    pub trace_context: Option<&'a str>,
    /// What else links it: a schedule's fire, a retry, a pipeline step, the run it continues.
    pub links: Links<'a>,
    /// Inserted only while the worker's override is still at this version ([`crate::overrides::version`]): a
    /// configuration resolved against a cached override is never queued once that override was replaced.
    /// `None` inserts whatever the override is now (the caller read it in the same transaction).
    pub override_version: Option<i64>,
    /// The short words it carries (checked by the caller): its request's, or those of the run it continues, the
    /// schedule that fired it, the pipeline it is a step of. The insert's trigger files them in `run_tags`.
    pub tags: &'a [String],
}

impl NewRun<'_> {
    /// Seconds from the request to its expiry, when its configuration says it may expire: counted from when it
    /// is due (after a retry's backoff).
    fn expires_after_seconds(&self) -> Option<f64> {
        let seconds = self.config.expires_after_seconds.as_ref()?.value;
        // u64 seconds within a year: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        Some(seconds as f64 + self.links.delay_seconds.unwrap_or(0.0))
    }
}

/// How a run is linked to what made it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Links<'a> {
    /// The schedule and its fire time.
    pub fire: Option<(Uuid, chrono::DateTime<chrono::Utc>)>,
    /// The run it retries, and its attempt number.
    pub retry: Option<(Uuid, i32)>,
    /// Not claimed until this many seconds from now (database clock).
    pub delay_seconds: Option<f64>,
    /// The pipeline run and the step's index.
    pub step: Option<(Uuid, i32)>,
    /// The earlier run it continues, and how.
    pub follows: Option<(Uuid, FollowKind)>,
    /// The checkpoint it starts from (a resume's predecessor's), with the time it was reported.
    pub checkpoint: Option<(&'a Value, chrono::DateTime<chrono::Utc>)>,
    /// Stamped with the statement's clock rather than its transaction's start: a request its transaction may
    /// have waited for another's end to make (a fire that waited for its target), so that it is stamped after
    /// that end. Every other request is stamped when its transaction began, so that all the runs of one
    /// transaction (a fire pass, say) carry one time.
    pub stamped_when_written: bool,
    /// Where it stands in a sharded run: a parent, or one of a parent's children.
    pub shard: Option<ShardLink>,
    /// Inserted even while its worker is paused (`worker_pauses`): the resume of a preempted run, which goes on
    /// with work under way. Every other request of a paused worker is refused like one blocked.
    pub even_if_paused: bool,
}

/// A run's place in a sharded run (see `scrinalia_shared::runs::shards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardLink {
    /// The parent of `shards` children: never claimed, its state follows theirs.
    Parent { shards: i32 },
    /// Child `shard` (0-based) of `shards` of the parent run `parent`.
    Child { parent: Uuid, shard: i32, shards: i32 },
}

impl ShardLink {
    fn columns(self) -> (Option<Uuid>, Option<i32>, i32) {
        match self {
            ShardLink::Parent { shards } => (None, None, shards),
            ShardLink::Child { parent, shard, shards } => (Some(parent), Some(shard), shards),
        }
    }
}

/// Inserts a request, `on conflict do nothing`: `None` when a unique index refuses it (the one in flight per
/// worker, one per (schedule, fire time), one retry per run), the override is no longer at the version given, or
/// the worker is paused (unless [`Links::even_if_paused`]). Both dialects speak it, and on PostgreSQL a refusal
/// does not abort the transaction it runs in.
pub async fn insert(on: impl Into<On<'_>>, new: &NewRun<'_>) -> Result<Option<Run>> {
    // `insert … select … where`: the condition on the override's version costs one index probe, and a request that
    // does not give a version skips it; the pause is one more probe (of a table that is mostly empty), in the same
    // statement, so a trigger stays one round trip. Both dialects accept this form (SQLite needs the `where` to read the
    // `on conflict` that follows as the insert's).
    const INSERT: Sql = sql!(
        "insert into worker_runs (id, worker, requested_by, arguments, config, trace_context, schedule_id, fire_at, \
             retry_of, attempt, not_before, pipeline_run_id, pipeline_step, follows, follows_as, checkpoint, \
             checkpoint_at, requested_at, parent_id, shard, shards, priority, expires_at, tags) \
         select $1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, 1), ",
        now_plus(11),
        ", $12, $13, $14, $15, $16, $17, case when $18 then ",
        clock,
        " else ",
        now,
        " end, $20, $21, $22, $23, ",
        now_plus(24),
        ", $25 where (cast($19 as bigint) is null \
             or coalesce((select max(id) from worker_override_audit where worker = $2), 0) = $19) \
             and ($26 or not exists (select 1 from worker_pauses where worker = $2)) \
         on conflict do nothing returning ",
        run_columns!()
    );
    let shard = new.links.shard.map(ShardLink::columns);
    let inserted = run!(on, INSERT, |pool, sql| sqlx::query_as::<_, Run>(sql)
        .bind(new.id)
        .bind(new.worker)
        .bind(new.requested_by)
        .bind(Json(new.arguments))
        .bind(Json(new.config))
        .bind(new.trace_context)
        .bind(new.links.fire.map(|f| f.0))
        .bind(new.links.fire.map(|f| DbTime(f.1)))
        .bind(new.links.retry.map(|r| r.0))
        .bind(new.links.retry.map(|r| r.1))
        .bind(new.links.delay_seconds)
        .bind(new.links.step.map(|s| s.0))
        .bind(new.links.step.map(|s| s.1))
        .bind(new.links.follows.map(|f| f.0))
        .bind(new.links.follows.map(|f| f.1))
        .bind(new.links.checkpoint.map(|c| Json(c.0)))
        .bind(new.links.checkpoint.map(|c| DbTime(c.1)))
        .bind(new.links.stamped_when_written)
        .bind(new.override_version)
        .bind(shard.and_then(|s| s.0))
        .bind(shard.and_then(|s| s.1))
        .bind(shard.map(|s| s.2))
        .bind(i16::from(new.config.priority.value))
        .bind(new.expires_after_seconds())
        .bind(Json(new.tags))
        .bind(new.links.even_if_paused)
        .fetch_optional(pool)
        .await);
    match inserted {
        Ok(run) => Ok(run),
        // The in-flight index's refusal may also come as an error rather than as no row: the same refusal.
        Err(crate::DbError::Sqlx(e)) if is_in_flight_violation(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The run of `worker` queued or running, if any: a plain run or the parent of a sharded one (never a child).
pub async fn in_flight_of(on: impl Into<On<'_>>, worker: &str) -> Result<Option<Run>> {
    const IN_FLIGHT_OF: Sql = sql!(
        "select ",
        run_columns!(),
        " from worker_runs where worker = $1 and state in ('queued', 'running') and parent_id is null"
    );
    Ok(run!(on, IN_FLIGHT_OF, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)?)
}

/// The run that retries run `id`, if one was requested.
pub async fn retry_of(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<Uuid>> {
    const RETRY_OF: Sql = sql!("select id from worker_runs where retry_of = $1");
    run!(on, RETRY_OF, |pool, sql| sqlx::query_scalar(sql).bind(id).fetch_optional(pool).await)
}

/// Stores the configuration the worker of a run held by `daemon` reported; `false` when the lease is lost.
pub async fn report_config(on: impl Into<On<'_>>, run: Uuid, daemon: Uuid, config: &serde_json::Value) -> Result<bool> {
    const REPORT: Sql =
        sql!("update worker_runs set reported_config = $3 where id = $1 and claimed_by = $2 and state = 'running'");
    let updated = run!(on, REPORT, |pool, sql| sqlx::query(sql)
        .bind(run)
        .bind(daemon)
        .bind(Json(config))
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(updated == 1)
}

/// The run that resumed or restarted run `id`, and how, if one did.
pub async fn continued_by(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<(Uuid, FollowKind)>> {
    const BY: Sql =
        sql!("select id, follows_as from worker_runs where follows = $1 and follows_as in ('resume', 'restart')");
    Ok(run!(on, BY, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// Stores the latest checkpoint of a run held by `daemon`, with the database clock's time; `false` when the
/// lease is lost (a recovered run's checkpoint is never overwritten by its old owner).
pub async fn store_checkpoint(on: impl Into<On<'_>>, run: Uuid, daemon: Uuid, checkpoint: &Value) -> Result<bool> {
    const STORE: Sql = sql!(
        "update worker_runs set checkpoint = $3, checkpoint_at = ",
        now,
        " where id = $1 and claimed_by = $2 and state = 'running'"
    );
    let updated = run!(on, STORE, |pool, sql| sqlx::query(sql)
        .bind(run)
        .bind(daemon)
        .bind(Json(checkpoint))
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(updated == 1)
}

/// Records that the worker of a run held by `daemon` started, and where its log goes.
pub async fn mark_started(on: impl Into<On<'_>>, run: Uuid, daemon: Uuid, log_key: &str) -> Result<Option<Run>> {
    const STARTED: Sql = sql!(
        "update worker_runs set started_at = ",
        now,
        ", log_key = $3 \
         where id = $1 and claimed_by = $2 and state = 'running' returning ",
        run_columns!()
    );
    Ok(run!(on, STARTED, |pool, sql| sqlx::query_as(sql)
        .bind(run)
        .bind(daemon)
        .bind(log_key)
        .fetch_optional(pool)
        .await)?)
}

/// Extends a live lease held by `daemon` to `lease` from now; `None` when it is no longer its own or has
/// expired (see [`crate::lease`]).
pub async fn renew(on: impl Into<On<'_>>, run: Uuid, daemon: Uuid, lease: Duration) -> Result<Option<Lease>> {
    crate::lease::renew(on, &crate::lease::RUNS, crate::lease::Key::Id(run), daemon, lease).await
}

/// Stores a progress report of a run held by `daemon` and appends it to the history; `false` when the run is
/// no longer its own.
pub async fn record_progress(db: &Database, run: Uuid, daemon: Uuid, progress: &Value) -> Result<bool> {
    // PostgreSQL: one statement, the history row written only when the fenced update matched.
    const POSTGRES: Sql = sql!(
        "with updated as (update worker_runs set progress = $3 \
             where id = $1 and claimed_by = $2 and state = 'running' returning id) \
         insert into run_progress (run_id, seq, progress) \
         select id, coalesce((select max(seq) from run_progress where run_id = $1), 0) + 1, $3 from updated"
    );
    // SQLite has no writing CTE: the same two writes in one transaction.
    const SQLITE_UPDATE: Sql =
        sql!("update worker_runs set progress = $3 where id = $1 and claimed_by = $2 and state = 'running'");
    const SQLITE_APPEND: Sql = sql!(
        "insert into run_progress (run_id, seq, progress) \
         values ($1, coalesce((select max(seq) from run_progress where run_id = $1), 0) + 1, $2)"
    );
    match db.backend() {
        Backend::Postgres => {
            let written = run!(db, POSTGRES, |pool, sql| sqlx::query(sql)
                .bind(run)
                .bind(daemon)
                .bind(Json(progress))
                .execute(pool)
                .await
                .map(|r| r.rows_affected()))?;
            Ok(written == 1)
        }
        Backend::Sqlite => {
            let mut tx = db.begin_write().await?;
            let updated = run!(&mut tx, SQLITE_UPDATE, |pool, sql| sqlx::query(sql)
                .bind(run)
                .bind(daemon)
                .bind(Json(progress))
                .execute(pool)
                .await
                .map(|r| r.rows_affected()))?;
            if updated != 1 {
                return Ok(false);
            }
            run!(&mut tx, SQLITE_APPEND, |pool, sql| sqlx::query(sql)
                .bind(run)
                .bind(Json(progress))
                .execute(pool)
                .await
                .map(drop))?;
            tx.commit().await?;
            Ok(true)
        }
    }
}

/// The runs held by `daemon` whose cancellation was requested.
pub async fn cancel_requests(on: impl Into<On<'_>>, daemon: Uuid) -> Result<Vec<Uuid>> {
    const REQUESTS: Sql = sql!(
        "select id from worker_runs where claimed_by = $1 and state = 'running' and cancel_requested_at is not null"
    );
    Ok(run!(on, REQUESTS, |pool, sql| sqlx::query_scalar(sql).bind(daemon).fetch_all(pool).await)?)
}

/// In one statement, what the recovery sweep has to do: seconds until the first lease of a running run expires
/// (negative when one already has; `None` when nothing runs), and whether a daemon not marked gone has sent no
/// heartbeat for `gone_after`.
pub async fn recovery_due(on: impl Into<On<'_>>, gone_after: Duration) -> Result<(Option<f64>, bool)> {
    const DUE: Sql = sql!(
        "select (select -",
        seconds_since(min(lease_expires_at)),
        " from worker_runs where state = 'running'), \
             exists (select 1 from daemons where state <> 'gone' and heartbeat_at < ",
        now_minus(1),
        ")"
    );
    Ok(run!(on, DUE, |pool, sql| sqlx::query_as(sql).bind(gone_after.as_secs_f64()).fetch_one(pool).await)?)
}

/// One run, by id.
pub(crate) const GET: Sql = sql!("select ", run_columns!(), " from worker_runs where id = $1");

/// One run.
pub async fn get(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<Run>> {
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// A run's progress history, oldest first (the primary key (run_id, seq) serves it).
pub(crate) const PROGRESS: Sql = sql!("select seq, at, progress from run_progress where run_id = $1 order by seq");

/// A run's progress history, oldest first.
pub async fn progress_of(on: impl Into<On<'_>>, id: Uuid) -> Result<Vec<ProgressEntry>> {
    Ok(run!(on, PROGRESS, |pool, sql| sqlx::query_as(sql).bind(id).fetch_all(pool).await)?)
}

/// Up to `$3` of a run's progress reports with a `seq` below `$2`, newest first (the primary key (run_id, seq),
/// read backwards, serves it).
pub(crate) const PROGRESS_BEFORE: Sql =
    sql!("select seq, at, progress from run_progress where run_id = $1 and seq < $2 order by seq desc limit $3");

/// Up to `limit` of a run's progress reports with a `seq` below `before`, newest first.
pub async fn progress_before(on: impl Into<On<'_>>, id: Uuid, before: i32, limit: u32) -> Result<Vec<ProgressEntry>> {
    Ok(run!(on, PROGRESS_BEFORE, |pool, sql| sqlx::query_as(sql)
        .bind(id)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await)?)
}

/// How many progress reports a run has (the primary key serves it).
pub(crate) const PROGRESS_COUNT: Sql = sql!("select count(*) from run_progress where run_id = $1");

/// How many progress reports a run has.
pub async fn progress_count(on: impl Into<On<'_>>, id: Uuid) -> Result<i64> {
    Ok(run!(on, PROGRESS_COUNT, |pool, sql| sqlx::query_scalar(sql).bind(id).fetch_one(pool).await)?)
}

/// Every run queued or running, oldest first (the partial index of the runs in flight serves it).
pub(crate) const IN_FLIGHT: Sql =
    sql!("select ", run_columns!(), " from worker_runs where state in ('queued', 'running') order by requested_at");

/// Every run queued or running, oldest first.
pub async fn in_flight(on: impl Into<On<'_>>) -> Result<Vec<Run>> {
    Ok(run!(on, IN_FLIGHT, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// The last finished run of each of the workers in the JSON list `$1` (each found through the index on
/// (worker, finished_at)).
pub(crate) const LAST_FINISHED: Sql = sql!(
    "select ",
    run_columns!(),
    " from worker_runs where id in (select (select r.id from worker_runs r \
             where r.worker = w.value and r.finished_at is not null order by r.finished_at desc limit 1) \
         from ",
    json_list(1, w),
    ")"
);

/// The last finished run of each of `workers`.
pub async fn last_finished(on: impl Into<On<'_>>, workers: &[String]) -> Result<Vec<Run>> {
    Ok(run!(on, LAST_FINISHED, |pool, sql| sqlx::query_as(sql).bind(Json(workers)).fetch_all(pool).await)?)
}

/// What the SQLite change feed compares between two looks at the ledger.
#[derive(Debug, sqlx::FromRow)]
pub struct RunMark {
    pub id: Uuid,
    pub worker: String,
    pub state: RunState,
    #[sqlx(json(nullable))]
    pub progress: Option<Value>,
}

/// Every run in flight, and every run that ended at `since` or later.
pub async fn marks_since(on: impl Into<On<'_>>, since: chrono::DateTime<chrono::Utc>) -> Result<Vec<RunMark>> {
    // Two index-served halves: the in-flight rows, and the recently finished ones.
    const MARKS: Sql = sql!(
        "select id, worker, state, progress from worker_runs where state in ('queued', 'running') \
         union all select id, worker, state, progress from worker_runs where finished_at >= $1"
    );
    Ok(run!(on, MARKS, |pool, sql| sqlx::query_as(sql).bind(DbTime(since)).fetch_all(pool).await)?)
}

/// Whether a queued request is visible on `conn` (a read on the index of queued rows, which takes no lock).
pub(crate) async fn any_queued(conn: &mut sqlx::SqliteConnection) -> Result<bool> {
    // A parent is never claimed: a queued one is nothing to wake a claimer for.
    const ANY: Sql = sql!(
        "select exists (select 1 from worker_runs where state = 'queued' and (shards is null or parent_id is not null))"
    );
    Ok(sqlx::query_scalar(ANY.sqlite).fetch_one(conn).await?)
}

/// The chain run `$1` belongs to, oldest first. Going down, a run's parent is its `retry_of`, else its `follows`:
/// spelled as two equalities (not one `coalesce`), so that the indexes on each serve every step.
pub(crate) const CHAIN: Sql = sql!(
    "with recursive up (id, parent) as (select id, coalesce(retry_of, follows) from worker_runs where id = $1 \
             union all select r.id, coalesce(r.retry_of, r.follows) from worker_runs r join up on r.id = up.parent), \
         down (id) as (select id from up where parent is null \
             union all select r.id from worker_runs r join down \
             on r.retry_of = down.id or (r.retry_of is null and r.follows = down.id)) \
         select ",
    run_columns!(),
    " from worker_runs where id in (select id from down) order by requested_at, id"
);

/// The chain a run belongs to, oldest first: the runs it retries or continues (resume, restart, rerun), and the
/// runs that retry or continue it.
pub async fn chain(on: impl Into<On<'_>>, id: Uuid) -> Result<Vec<Run>> {
    Ok(run!(on, CHAIN, |pool, sql| sqlx::query_as(sql).bind(id).fetch_all(pool).await)?)
}
