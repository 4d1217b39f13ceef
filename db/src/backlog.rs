//! The statements of backlog triggers and freshness: where each worker's count stands on the database clock,
//! the fire history `backlog_fires`, and what freshness reads of a worker's recent runs.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use scrinalia_wire::{BacklogFire, RunState};

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};

/// Where a worker's last count stands, on the database clock.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CountState {
    /// The worker.
    pub worker: String,
    /// Its last count (none when the last count failed or could not measure).
    pub pending: Option<i64>,
    /// Seconds since that count.
    pub counted_ago: f64,
    /// Seconds since the count last grew.
    pub grew_ago: Option<f64>,
    /// Seconds since the count reached the trigger's threshold (none when it is below).
    pub reached_ago: Option<f64>,
    /// Whether the count was taken after the worker's last run ended (or it never ended one).
    pub counted_after_end: bool,
    /// Whether a backlog fire was recorded since the count was taken.
    pub fired_since_count: bool,
    /// Whether a run of the worker is queued or running (a plain run or a sharded parent).
    pub in_flight: bool,
}

macro_rules! state_select {
    ($d:ident;) => {
        concat!(
            "select q.worker, q.pending, ",
            $crate::dialect::fragment!($d; seconds_since(q.measured_at)),
            " as counted_ago, ",
            $crate::dialect::fragment!($d; seconds_since(q.grew_at)),
            " as grew_ago, ",
            $crate::dialect::fragment!($d; seconds_since(q.reached_at)),
            " as reached_ago, \
             coalesce(q.measured_at > (select max(r.finished_at) from worker_runs r \
                 where r.worker = q.worker and r.finished_at is not null), true) as counted_after_end, \
             exists (select 1 from backlog_fires f where f.worker = q.worker and f.fired_at >= q.measured_at) \
                 as fired_since_count, \
             exists (select 1 from worker_runs i where i.worker = q.worker and i.state in ('queued', 'running') \
                 and i.parent_id is null) as in_flight \
             from queue_counts q"
        )
    };
}

/// Where the last count of each of `workers` stands.
pub async fn states(on: impl Into<On<'_>>, workers: &[String]) -> Result<Vec<CountState>> {
    const STATES: Sql = sql!(state_select!(), " where q.worker in (select value from ", json_list(1, w), ")");
    Ok(run!(on, STATES, |pool, sql| sqlx::query_as(sql).bind(sqlx::types::Json(workers)).fetch_all(pool).await)?)
}

/// Where the last count of `worker` stands.
pub async fn state(on: impl Into<On<'_>>, worker: &str) -> Result<Option<CountState>> {
    const STATE: Sql = sql!(state_select!(), " where q.worker = $1");
    Ok(run!(on, STATE, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)?)
}

/// A fire as recorded.
#[derive(Debug, Clone)]
pub struct NewBacklogFire<'a> {
    /// The worker.
    pub worker: &'a str,
    /// The count it fired on.
    pub pending: i64,
    /// Why it fired.
    pub reason: &'a str,
    /// The run it requested.
    pub run_id: Option<Uuid>,
    /// Why it requested none.
    pub skipped_reason: Option<&'a str>,
    /// The daemon that fired.
    pub fired_by: Uuid,
}

/// Records a fire (database clock) and returns it.
pub async fn record(on: impl Into<On<'_>>, fire: &NewBacklogFire<'_>) -> Result<BacklogFire> {
    const RECORD: Sql = sql!(
        "insert into backlog_fires (worker, fired_at, pending, reason, run_id, skipped_reason, fired_by) \
         values ($1, ",
        clock,
        ", $2, $3, $4, $5, $6) returning id, worker, fired_at, pending, reason, run_id, skipped_reason"
    );
    Ok(run!(on, RECORD, |pool, sql| sqlx::query_as(sql)
        .bind(fire.worker)
        .bind(fire.pending)
        .bind(fire.reason)
        .bind(fire.run_id)
        .bind(fire.skipped_reason)
        .bind(fire.fired_by)
        .fetch_one(pool)
        .await)?)
}

/// A worker's fires, newest first.
pub async fn list(on: impl Into<On<'_>>, worker: &str, limit: u32) -> Result<Vec<BacklogFire>> {
    const LIST: Sql = sql!(
        "select id, worker, fired_at, pending, reason, run_id, skipped_reason from backlog_fires \
         where worker = $1 order by id desc limit $2"
    );
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).bind(worker).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The states of a worker's last `limit` finished runs (plain runs and sharded parents), newest first, with the
/// seconds since each ended.
pub async fn recent_ends(on: impl Into<On<'_>>, worker: &str, limit: u32) -> Result<Vec<(RunState, f64)>> {
    const RECENT: Sql = sql!(
        "select state, ",
        seconds_since(finished_at),
        " from worker_runs where worker = $1 and finished_at is not null and parent_id is null \
         order by finished_at desc limit $2"
    );
    Ok(run!(on, RECENT, |pool, sql| sqlx::query_as(sql).bind(worker).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// When the worker's last successful run ended, if it ever had one.
pub async fn last_success(on: impl Into<On<'_>>, worker: &str) -> Result<Option<DateTime<Utc>>> {
    const LAST: Sql = sql!(
        "select finished_at from worker_runs where worker = $1 and state = 'succeeded' and parent_id is null \
         order by requested_at desc, id desc limit 1"
    );
    Ok(run!(on, LAST, |pool, sql| sqlx::query_scalar(sql).bind(worker).fetch_optional(pool).await)?.flatten())
}
