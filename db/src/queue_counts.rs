//! The statements of `queue_counts`: the last measurement of each worker's queue; and how long each running run
//! has gone without a progress report, the other thing `/metrics` says about work that may be stuck.

use chrono::{DateTime, Utc};
use scrinalia_wire::QueueCount;
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    run,
};

/// A new queue measurement.
#[derive(Debug, Clone)]
pub struct NewQueueCount {
    /// The worker.
    pub worker: String,
    /// Units waiting.
    pub pending: Option<i64>,
    /// Why it cannot be measured.
    pub unmeasurable: Option<String>,
    /// Units done.
    pub done: Option<i64>,
    /// Why the measurement failed.
    pub error: Option<String>,
    /// How long it took.
    pub took_ms: i64,
    /// The measuring daemon.
    pub measured_by: Uuid,
    /// When the oldest pending document arrived, when `count-pending` says.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// The worker's backlog trigger threshold, when it has one: the count remembers since when it has been at
    /// or above it.
    pub threshold: Option<i64>,
}

/// Stores a measurement, replacing the worker's previous one, and keeps on the database clock since when
/// something has been pending, when the count last grew and since when it has been at or above `threshold`. A
/// count that failed (no number) keeps them.
pub async fn store(on: impl Into<On<'_>>, c: &NewQueueCount) -> Result<()> {
    const STORE: Sql = sql!(
        "insert into queue_counts (worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by, \
             oldest_pending_at, pending_since, grew_at, reached_at) \
         values ($1, $2, $3, $4, $5, ",
        now,
        ", $6, $7, $8, case when $2 > 0 then ",
        now,
        " end, case when $2 is not null then ",
        now,
        " end, case when $2 >= $9 then ",
        now,
        " end) \
         on conflict (worker) do update set pending = excluded.pending, unmeasurable = excluded.unmeasurable, \
             done = excluded.done, error = excluded.error, measured_at = excluded.measured_at, \
             took_ms = excluded.took_ms, measured_by = excluded.measured_by, \
             oldest_pending_at = excluded.oldest_pending_at, \
             pending_since = case when excluded.pending is null then queue_counts.pending_since \
                 when excluded.pending > 0 then coalesce(case when queue_counts.pending > 0 \
                     then queue_counts.pending_since end, excluded.measured_at) end, \
             grew_at = case when excluded.pending is null then queue_counts.grew_at \
                 when queue_counts.pending is null or excluded.pending > queue_counts.pending \
                     then excluded.measured_at else coalesce(queue_counts.grew_at, excluded.measured_at) end, \
             reached_at = case when excluded.pending is null then queue_counts.reached_at \
                 when excluded.pending >= $9 then coalesce(case when queue_counts.pending >= $9 \
                     then queue_counts.reached_at end, excluded.measured_at) end"
    );
    run!(on, STORE, |pool, sql| sqlx::query(sql)
        .bind(&c.worker)
        .bind(c.pending)
        .bind(&c.unmeasurable)
        .bind(c.done)
        .bind(&c.error)
        .bind(c.took_ms)
        .bind(c.measured_by)
        .bind(c.oldest_pending_at.map(DbTime))
        .bind(c.threshold)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(())
}

/// Every worker's last measurement, with its age.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<QueueCount>> {
    const LIST: Sql = sql!(
        "select worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by, oldest_pending_at, \
             pending_since, ",
        seconds_since(measured_at),
        " as age_seconds from queue_counts order by worker"
    );
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// For each running run, its worker and the seconds since its last progress report (or since its worker
/// started, or since its claim, when it has reported none).
pub async fn progress_ages(on: impl Into<On<'_>>) -> Result<Vec<(String, Option<f64>)>> {
    const AGES: Sql = sql!(
        "select r.worker, ",
        seconds_since(coalesce((select max(p.at) from run_progress p where p.run_id = r.id), r.started_at, r.claimed_at)),
        " from worker_runs r where r.state = 'running'"
    );
    Ok(run!(on, AGES, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
