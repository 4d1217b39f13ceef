//! The statements of bulk actions: storing a job with the runs it acts on, a daemon's claim of it under a lease on
//! the database clock (one daemon at a time; another takes it over when the lease runs out), the batches of runs
//! still without an outcome, and the outcomes with the job's counts. Which runs a job holds, in what order, and
//! what an outcome says is decided by `scrinalia_shared::bulk`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use uuid::Uuid;

pub use scrinalia_wire::{BulkAction, BulkActionKind, BulkOutcome, BulkReason, BulkSnapshot};

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    run,
};

/// The columns of a job, in the order of [`Row`].
macro_rules! bulk_columns {
    ($d:ident;) => {
        "id, action, filter, snapshot_id, snapshot_at, expect_count, reason, requested_by, requested_at, state, \
         total, done, skipped, failed, claimed_by, lease_until, started_at, finished_at, error"
    };
}

/// A job's row: the wire view and its snapshot, kept in two columns.
#[derive(sqlx::FromRow)]
struct Row {
    #[sqlx(flatten)]
    action: BulkAction,
    snapshot_id: Option<Uuid>,
    snapshot_at: Option<DateTime<Utc>>,
}

impl From<Row> for BulkAction {
    fn from(row: Row) -> Self {
        let snapshot = row.snapshot_id.zip(row.snapshot_at).map(|(id, requested_at)| BulkSnapshot { id, requested_at });
        Self { snapshot, ..row.action }
    }
}

/// A job as stored.
#[derive(Debug)]
pub struct NewBulk<'a> {
    /// Its id.
    pub id: Uuid,
    /// What it does.
    pub action: BulkActionKind,
    /// The ledger filter as given.
    pub filter: &'a serde_json::Value,
    /// The newest matching run.
    pub snapshot: Option<BulkSnapshot>,
    /// The count confirmed.
    pub expect_count: i64,
    /// Why.
    pub reason: &'a str,
    /// Who.
    pub requested_by: &'a str,
    /// How many runs it holds.
    pub total: i64,
}

/// One run of a job as stored with it.
#[derive(Debug, Clone, Serialize)]
pub struct NewBulkRun {
    /// Its place, newest first from 0.
    pub seq: i64,
    /// The run.
    pub run_id: Uuid,
    /// Its worker.
    pub worker: String,
    /// Whether the action is tried on it (see the migration).
    pub leads: bool,
}

/// One run of a job, as a daemon works it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BulkRun {
    /// Its place.
    pub seq: i64,
    /// The run.
    pub run_id: Uuid,
    /// Its worker.
    pub worker: String,
    /// Whether the action is tried on it.
    pub leads: bool,
    /// When a daemon first began acting on it.
    pub attempted_at: Option<DateTime<Utc>>,
    /// The id its rerun or resume is requested with.
    pub new_run_id: Option<Uuid>,
    /// Its outcome, once it has one.
    pub outcome: Option<BulkOutcome>,
    /// Why, in a sentence.
    pub sentence: Option<String>,
}

/// Stores a job (its runs follow with [`insert_runs`], in the same transaction).
pub async fn insert(on: impl Into<On<'_>>, new: &NewBulk<'_>) -> Result<BulkAction> {
    const INSERT: Sql = sql!(
        "insert into bulk_actions (id, action, filter, snapshot_id, snapshot_at, expect_count, reason, requested_by, \
             total) values ($1, $2, $3, $4, $5, $6, $7, $8, $9) returning ",
        bulk_columns!()
    );
    let row: Row = run!(on, INSERT, |pool, sql| sqlx::query_as(sql)
        .bind(new.id)
        .bind(new.action)
        .bind(Json(new.filter))
        .bind(new.snapshot.map(|s| s.id))
        .bind(new.snapshot.map(|s| DbTime(s.requested_at)))
        .bind(new.expect_count)
        .bind(new.reason)
        .bind(new.requested_by)
        .bind(new.total)
        .fetch_one(pool)
        .await)?;
    Ok(row.into())
}

/// Stores runs of job `bulk`, a chunk per statement.
pub async fn insert_runs(tx: &mut crate::Tx, bulk: Uuid, runs: &[NewBulkRun]) -> Result<()> {
    const POSTGRES: &str = "insert into bulk_action_runs (bulk_id, seq, run_id, worker, leads) \
         select $1, r.seq, r.run_id, r.worker, r.leads \
         from jsonb_to_recordset($2::jsonb) as r(seq bigint, run_id uuid, worker text, leads boolean)";
    // SQLite keeps UUIDs as 16-byte blobs: the text of the JSON is turned back into one.
    const SQLITE: &str = "insert into bulk_action_runs (bulk_id, seq, run_id, worker, leads) \
         select $1, json_extract(value, '$.seq'), unhex(replace(json_extract(value, '$.run_id'), '-', '')), \
             json_extract(value, '$.worker'), json_extract(value, '$.leads') from json_each($2)";
    const INSERT: Sql = Sql { postgres: POSTGRES, sqlite: SQLITE };
    for chunk in runs.chunks(1000) {
        run!(&mut *tx, INSERT, |pool, sql| sqlx::query(sql)
            .bind(bulk)
            .bind(Json(chunk))
            .execute(pool)
            .await
            .map(drop))?;
    }
    Ok(())
}

/// One job.
pub async fn get(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<BulkAction>> {
    const GET: Sql = sql!("select ", bulk_columns!(), " from bulk_actions where id = $1");
    let row: Option<Row> = run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?;
    Ok(row.map(Into::into))
}

/// The newest `limit` jobs, newest first.
pub async fn list(on: impl Into<On<'_>>, limit: u32) -> Result<Vec<BulkAction>> {
    const LIST: Sql =
        sql!("select ", bulk_columns!(), " from bulk_actions order by requested_at desc, id desc limit $1");
    let rows: Vec<Row> = run!(on, LIST, |pool, sql| sqlx::query_as(sql).bind(i64::from(limit)).fetch_all(pool).await)?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Why runs of job `id` were skipped or failed: one entry per outcome and sentence, the most frequent first (at
/// most `limit`), each with the first such run.
pub async fn reasons(on: impl Into<On<'_>>, id: Uuid, limit: u32) -> Result<Vec<BulkReason>> {
    const REASONS: Sql = sql!(
        "select r.outcome, r.sentence, g.count, r.run_id as example from \
             (select outcome, sentence, count(*) as count, min(seq) as seq from bulk_action_runs \
              where bulk_id = $1 and outcome in ('skipped', 'failed') group by outcome, sentence) g \
         join bulk_action_runs r on r.bulk_id = $1 and r.seq = g.seq \
         order by g.count desc, g.seq limit $2"
    );
    Ok(run!(on, REASONS, |pool, sql| sqlx::query_as(sql).bind(id).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// Takes the oldest job that is queued, or running under a lease that ran out, for `daemon`, leased for `lease`
/// from now (database clock). One statement: two daemons never both take it.
pub async fn claim(on: impl Into<On<'_>>, daemon: Uuid, lease: Duration) -> Result<Option<BulkAction>> {
    const CLAIM: Sql = sql!(
        "with due as (select id as due_id from bulk_actions where state in ('queued', 'running') \
             and (lease_until is null or lease_until < ",
        now,
        ") order by requested_at limit 1",
        skip_locked,
        ") update bulk_actions set state = 'running', claimed_by = $1, lease_until = ",
        clock_plus(2),
        ", started_at = coalesce(started_at, ",
        now,
        ") from due where bulk_actions.id = due.due_id returning ",
        bulk_columns!()
    );
    let row: Option<Row> = run!(on, CLAIM, |pool, sql| sqlx::query_as(sql)
        .bind(daemon)
        .bind(lease.as_secs_f64())
        .fetch_optional(pool)
        .await)?;
    Ok(row.map(Into::into))
}

/// Seconds until an unfinished job may be taken (zero or less: one may be now), on the database clock; `None`
/// when every job is finished.
pub async fn next_claim_in(on: impl Into<On<'_>>) -> Result<Option<f64>> {
    const NEXT: Sql = sql!(
        "select min(case when lease_until is null then 0.0 else -",
        seconds_since(lease_until),
        " end) from bulk_actions where state in ('queued', 'running')"
    );
    Ok(run!(on, NEXT, |pool, sql| sqlx::query_scalar(sql).fetch_one(pool).await)?)
}

/// Extends `daemon`'s lease of job `id` to `lease` from now; false when the job is no longer this daemon's (another
/// took it over) or no longer running.
pub async fn renew(on: impl Into<On<'_>>, id: Uuid, daemon: Uuid, lease: Duration) -> Result<bool> {
    const RENEW: Sql = sql!(
        "update bulk_actions set lease_until = ",
        clock_plus(3),
        " where id = $1 and claimed_by = $2 and state = 'running'"
    );
    let done = run!(on, RENEW, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(daemon)
        .bind(lease.as_secs_f64())
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(done > 0)
}

/// The first `limit` runs of job `id` without an outcome, in order.
pub async fn pending(on: impl Into<On<'_>>, id: Uuid, limit: u32) -> Result<Vec<BulkRun>> {
    const PENDING: Sql = sql!(
        "select seq, run_id, worker, leads, attempted_at, new_run_id, outcome, sentence from bulk_action_runs \
         where bulk_id = $1 and outcome is null order by seq limit $2"
    );
    Ok(run!(on, PENDING, |pool, sql| sqlx::query_as(sql).bind(id).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// Records that the runs of job `id` from `first` to `last` (by `seq`) are being acted on, and the id each of
/// `new_ids` (seq, id) will be requested with where none was chosen before.
pub async fn begin_batch(tx: &mut crate::Tx, id: Uuid, first: i64, last: i64, new_ids: &[(i64, Uuid)]) -> Result<()> {
    const ATTEMPTED: Sql = sql!(
        "update bulk_action_runs set attempted_at = ",
        now,
        " where bulk_id = $1 and seq between $2 and $3 and outcome is null and attempted_at is null"
    );
    const NEW_ID: Sql =
        sql!("update bulk_action_runs set new_run_id = $3 where bulk_id = $1 and seq = $2 and new_run_id is null");
    run!(&mut *tx, ATTEMPTED, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(first)
        .bind(last)
        .execute(pool)
        .await
        .map(drop))?;
    for (seq, new) in new_ids {
        run!(&mut *tx, NEW_ID, |pool, sql| sqlx::query(sql)
            .bind(id)
            .bind(seq)
            .bind(new)
            .execute(pool)
            .await
            .map(drop))?;
    }
    Ok(())
}

/// The run of job `id` the action is tried on for `worker`.
pub async fn leader(on: impl Into<On<'_>>, id: Uuid, worker: &str) -> Result<Option<BulkRun>> {
    const LEADER: Sql = sql!(
        "select seq, run_id, worker, leads, attempted_at, new_run_id, outcome, sentence from bulk_action_runs \
         where bulk_id = $1 and worker = $2 and leads"
    );
    Ok(run!(on, LEADER, |pool, sql| sqlx::query_as(sql).bind(id).bind(worker).fetch_optional(pool).await)?)
}

/// Records the outcome of run `seq` of job `id` (only once: a run with an outcome keeps it); whether it was
/// recorded now.
pub async fn record(
    tx: &mut crate::Tx,
    id: Uuid,
    seq: i64,
    outcome: BulkOutcome,
    sentence: Option<&str>,
) -> Result<bool> {
    const RECORD: Sql = sql!(
        "update bulk_action_runs set outcome = $3, sentence = $4 where bulk_id = $1 and seq = $2 and outcome is null"
    );
    let done = run!(&mut *tx, RECORD, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(seq)
        .bind(outcome)
        .bind(sentence)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(done > 0)
}

/// Adds to the counts of job `id`, held by `daemon` (false, and nothing changed, when it no longer is), and
/// ends it when no run is left without an outcome.
pub async fn add_counts(tx: &mut crate::Tx, id: Uuid, daemon: Uuid, counts: [i64; 3]) -> Result<bool> {
    const ADD: Sql = sql!(
        "update bulk_actions set done = done + $3, skipped = skipped + $4, failed = failed + $5 \
         where id = $1 and claimed_by = $2 and state = 'running'"
    );
    const FINISH: Sql = sql!(
        "update bulk_actions set state = 'done', finished_at = ",
        now,
        ", lease_until = null where id = $1 and state = 'running' \
         and not exists (select 1 from bulk_action_runs where bulk_id = $1 and outcome is null)"
    );
    let [done, skipped, failed] = counts;
    let added = run!(&mut *tx, ADD, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(daemon)
        .bind(done)
        .bind(skipped)
        .bind(failed)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    if added == 0 {
        return Ok(false);
    }
    run!(&mut *tx, FINISH, |pool, sql| sqlx::query(sql).bind(id).execute(pool).await.map(drop))?;
    Ok(true)
}

/// Gives up `daemon`'s lease of job `id` (a daemon that stops between batches), so another takes it at once.
pub async fn release(on: impl Into<On<'_>>, id: Uuid, daemon: Uuid) -> Result<()> {
    const RELEASE: Sql =
        sql!("update bulk_actions set lease_until = null where id = $1 and claimed_by = $2 and state = 'running'");
    run!(on, RELEASE, |pool, sql| sqlx::query(sql).bind(id).bind(daemon).execute(pool).await.map(drop))?;
    Ok(())
}
