//! The statements of preemption: who holds the resources that may be preempted and who waits for them, the flag
//! a daemon sets on a run it preempts (once: the update is conditional), and the flagged runs of one daemon.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};

/// A running run holding a resource.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Holder {
    /// The resource.
    pub resource: String,
    /// The run.
    pub run_id: Uuid,
    /// Its worker.
    pub worker: String,
    /// Its priority.
    pub priority: i16,
    /// The daemon running it.
    pub daemon_id: Option<Uuid>,
    /// Whether it has reported a checkpoint (a run without one is never preempted).
    pub has_checkpoint: bool,
    /// When it was asked to yield, if it was.
    pub preempt_requested_at: Option<DateTime<Utc>>,
    /// The run it was asked to yield for.
    pub preempted_for: Option<Uuid>,
    /// When it was claimed.
    pub claimed_at: Option<DateTime<Utc>>,
}

/// The running holders of `resources`.
pub async fn holders(on: impl Into<On<'_>>, resources: &[String]) -> Result<Vec<Holder>> {
    const HOLDERS: Sql = sql!(
        "select h.resource, r.id as run_id, r.worker, r.priority, r.claimed_by as daemon_id, \
             (r.checkpoint is not null) as has_checkpoint, r.preempt_requested_at, r.preempted_for, r.claimed_at \
         from run_resources h join worker_runs r on r.id = h.run_id \
         where r.state = 'running' and h.resource in (select value from ",
        json_list(1, w),
        ") order by h.resource, r.priority, r.claimed_at desc"
    );
    Ok(run!(on, HOLDERS, |pool, sql| sqlx::query_as(sql).bind(sqlx::types::Json(resources)).fetch_all(pool).await)?)
}

/// A queued, due request of a worker that holds resources.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Waiter {
    /// The run.
    pub id: Uuid,
    /// Its worker.
    pub worker: String,
    /// Its priority.
    pub priority: i16,
    /// Seconds since it came due (its request, or the end of its backoff), on the database clock.
    pub waited_seconds: f64,
}

/// The queued, due requests of `workers` (never a sharded run's parent), highest priority first.
pub async fn waiters(on: impl Into<On<'_>>, workers: &[String]) -> Result<Vec<Waiter>> {
    const WAITERS: Sql = sql!(
        "select id, worker, priority, ",
        seconds_since(coalesce(not_before, requested_at)),
        " as waited_seconds from worker_runs where state = 'queued' and (shards is null or parent_id is not null) \
             and worker in (select value from ",
        json_list(1, w),
        ") and (not_before is null or not_before <= ",
        now,
        ") order by priority desc, requested_at, id"
    );
    Ok(run!(on, WAITERS, |pool, sql| sqlx::query_as(sql).bind(sqlx::types::Json(workers)).fetch_all(pool).await)?)
}

/// Flags run `victim` as preempted for run `urgent`, unless it is no longer running or was flagged or cancelled
/// already; whether it was flagged now.
pub async fn flag(on: impl Into<On<'_>>, victim: Uuid, urgent: Uuid) -> Result<bool> {
    const FLAG: Sql = sql!(
        "update worker_runs set preempt_requested_at = ",
        now,
        ", preempted_for = $2 where id = $1 and state = 'running' and preempt_requested_at is null \
             and cancel_requested_at is null"
    );
    let flagged = run!(on, FLAG, |pool, sql| sqlx::query(sql)
        .bind(victim)
        .bind(urgent)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(flagged == 1)
}

/// The running runs of `daemon` flagged for preemption.
pub async fn requests(on: impl Into<On<'_>>, daemon: Uuid) -> Result<Vec<Uuid>> {
    const REQUESTS: Sql = sql!(
        "select id from worker_runs where claimed_by = $1 and state = 'running' and preempt_requested_at is not null"
    );
    Ok(run!(on, REQUESTS, |pool, sql| sqlx::query_scalar(sql).bind(daemon).fetch_all(pool).await)?)
}
