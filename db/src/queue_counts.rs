//! The statements of `queue_counts`: the last measurement of each worker's queue; and how long each running run
//! has gone without a progress report, the other thing `/metrics` says about work that may be stuck.

use scrinalia_wire::QueueCount;
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{Sql, sql},
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
}

/// Stores a measurement, replacing the worker's previous one.
pub async fn store(on: impl Into<On<'_>>, c: &NewQueueCount) -> Result<()> {
    const STORE: Sql = sql!(
        "insert into queue_counts (worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by) \
         values ($1, $2, $3, $4, $5, ",
        now,
        ", $6, $7) \
         on conflict (worker) do update set pending = excluded.pending, unmeasurable = excluded.unmeasurable, \
             done = excluded.done, error = excluded.error, measured_at = excluded.measured_at, \
             took_ms = excluded.took_ms, measured_by = excluded.measured_by"
    );
    run!(on, STORE, |pool, sql| sqlx::query(sql)
        .bind(&c.worker)
        .bind(c.pending)
        .bind(&c.unmeasurable)
        .bind(c.done)
        .bind(&c.error)
        .bind(c.took_ms)
        .bind(c.measured_by)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(())
}

/// Every worker's last measurement, with its age.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<QueueCount>> {
    const LIST: Sql = sql!(
        "select worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by, ",
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
