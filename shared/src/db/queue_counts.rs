//! The statements of `queue_counts`: the last measurement of each worker's queue; and how long each running run
//! has gone without a progress report, the other thing `/metrics` says about work that may be stuck.

use super::{
    Database, Result,
    dialect::{Sql, sql},
    on_pool,
};
use crate::{QueueCount, queue::NewQueueCount};

/// Stores a measurement, replacing the worker's previous one.
pub(crate) async fn store(db: &Database, c: &NewQueueCount) -> Result<()> {
    const STORE: Sql = sql!(
        "insert into queue_counts (worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by) \
         values ($1, $2, $3, $4, $5, ",
        now,
        ", $6, $7) \
         on conflict (worker) do update set pending = excluded.pending, unmeasurable = excluded.unmeasurable, \
             done = excluded.done, error = excluded.error, measured_at = excluded.measured_at, \
             took_ms = excluded.took_ms, measured_by = excluded.measured_by"
    );
    on_pool!(db, STORE, |pool, sql| sqlx::query(sql)
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
pub(crate) async fn list(db: &Database) -> Result<Vec<QueueCount>> {
    const LIST: Sql = sql!(
        "select worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by, ",
        seconds_since(measured_at),
        " as age_seconds from queue_counts order by worker"
    );
    Ok(on_pool!(db, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// For each running run, its worker and the seconds since its last progress report (or since its worker
/// started, or since its claim, when it has reported none).
pub(crate) async fn progress_ages(db: &Database) -> Result<Vec<(String, Option<f64>)>> {
    const AGES: Sql = sql!(
        "select r.worker, ",
        seconds_since(coalesce((select max(p.at) from run_progress p where p.run_id = r.id), r.started_at, r.claimed_at)),
        " from worker_runs r where r.state = 'running'"
    );
    Ok(on_pool!(db, AGES, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
