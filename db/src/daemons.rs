//! The statements of `daemons`, the registry. Reads report each daemon's state as of the database clock: a
//! daemon whose heartbeat is older than the `gone_after` bound is `gone`, whatever its row still says (nobody
//! may be alive to mark it so).

use std::time::Duration;

use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::{Daemon, DaemonState};

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};

/// What a daemon registers.
#[derive(Debug, Clone)]
pub struct NewDaemon {
    /// Its fresh id.
    pub id: Uuid,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: i32,
    /// Version.
    pub version: String,
    /// Capacity.
    pub capacity: i32,
    /// Workers it takes; empty means all.
    pub workers: Vec<String>,
    /// What it advertises, its host name included.
    pub labels: Vec<String>,
    /// What it can enforce of the workers' limits.
    pub limits: scrinalia_wire::DaemonLimits,
    /// Its capacity of each daemon-scoped resource (`daemon.resources`).
    pub resources: std::collections::BTreeMap<String, u32>,
}

/// The columns of a daemon, with `$state` as its state.
macro_rules! daemon_columns {
    ($d:ident; $($state:tt)+) => {
        concat!(
            "id, host, pid, version, capacity, workers, labels, limits, resources, started_at, heartbeat_at, \
             drain_requested_at, drain_requested_by, stopped_at, ",
            $crate::dialect::fragment!($d; seconds_since(heartbeat_at)),
            " as heartbeat_age_seconds, (select count(*) from worker_runs r where r.state = 'running' \
             and r.claimed_by = daemons.id) as runs_in_flight, ",
            $($state)+,
            " as state"
        )
    };
}

/// The state as stored.
macro_rules! stored_state {
    ($d:ident;) => {
        daemon_columns!($d; "state")
    };
}

/// The state as of the clock, `gone_after` being parameter `$n`.
macro_rules! effective_state {
    ($d:ident; $n:literal) => {
        daemon_columns!($d; concat!(
            "case when state <> 'gone' and heartbeat_at < ",
            $crate::dialect::fragment!($d; now_minus($n)),
            " then 'gone' else state end"
        ))
    };
}

/// Inserts a daemon's row; again with the same id (a retry after a cut connection) it is the same row.
pub async fn register(on: impl Into<On<'_>>, d: &NewDaemon) -> Result<Daemon> {
    const REGISTER: Sql = sql!(
        "insert into daemons (id, host, pid, version, capacity, workers, labels, limits, resources) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         on conflict (id) do update set host = excluded.host returning ",
        stored_state!()
    );
    Ok(run!(on, REGISTER, |pool, sql| sqlx::query_as(sql)
        .bind(d.id)
        .bind(&d.host)
        .bind(d.pid)
        .bind(&d.version)
        .bind(d.capacity)
        .bind(Json(&d.workers))
        .bind(Json(&d.labels))
        .bind(Json(&d.limits))
        .bind(Json(&d.resources))
        .fetch_one(pool)
        .await)?)
}

/// Records a heartbeat; `None` if the row is gone.
pub async fn heartbeat(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<Daemon>> {
    const HEARTBEAT: Sql = sql!(
        "update daemons set heartbeat_at = ",
        now,
        ", stopped_at = null, \
             state = case when drain_requested_at is null then 'active' else 'draining' end \
         where id = $1 returning ",
        stored_state!()
    );
    Ok(run!(on, HEARTBEAT, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// Asks a daemon that is not gone (as of the clock, `gone_after`) to drain; `None` if there is none such.
pub async fn request_drain(
    on: impl Into<On<'_>>,
    id: Uuid,
    actor: &str,
    gone_after: Duration,
) -> Result<Option<Daemon>> {
    const DRAIN: Sql = sql!(
        "update daemons set drain_requested_at = coalesce(drain_requested_at, ",
        now,
        "), \
             drain_requested_by = coalesce(drain_requested_by, $2), state = 'draining' \
         where id = $1 and state <> 'gone' and heartbeat_at >= ",
        now_minus(3),
        " returning ",
        stored_state!()
    );
    Ok(run!(on, DRAIN, |pool, sql| sqlx::query_as(sql)
        .bind(id)
        .bind(actor)
        .bind(gone_after.as_secs_f64())
        .fetch_optional(pool)
        .await)?)
}

/// Records that a daemon stopped cleanly.
pub async fn mark_stopped(on: impl Into<On<'_>>, id: Uuid) -> Result<()> {
    const STOPPED: Sql = sql!("update daemons set state = 'gone', stopped_at = ", now, " where id = $1");
    run!(on, STOPPED, |pool, sql| sqlx::query(sql).bind(id).execute(pool).await.map(|r| r.rows_affected()))?;
    Ok(())
}

/// Marks gone every daemon whose heartbeat is older than `after`; returns their ids.
pub async fn mark_gone(on: impl Into<On<'_>>, after: Duration) -> Result<Vec<Uuid>> {
    const GONE: Sql = sql!(
        "update daemons set state = 'gone', stopped_at = coalesce(stopped_at, ",
        now,
        ") \
         where state <> 'gone' and heartbeat_at < ",
        now_minus(1),
        " returning id"
    );
    Ok(run!(on, GONE, |pool, sql| sqlx::query_scalar(sql).bind(after.as_secs_f64()).fetch_all(pool).await)?)
}

/// Daemons alive, or stopped within `$2` seconds, newest first (`$1`: the `gone_after` seconds).
pub(crate) const LIST: Sql = sql!(
    "select ",
    effective_state!(1),
    " from daemons \
     where state <> 'gone' or coalesce(stopped_at, heartbeat_at) > ",
    now_minus(2),
    " \
     order by started_at desc"
);

/// Daemons alive, or stopped within the last day, newest first.
pub async fn list(on: impl Into<On<'_>>, gone_after: Duration) -> Result<Vec<Daemon>> {
    const DAY: f64 = 86_400.0;
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).bind(gone_after.as_secs_f64()).bind(DAY).fetch_all(pool).await)?)
}

/// One daemon.
pub async fn get(on: impl Into<On<'_>>, id: Uuid, gone_after: Duration) -> Result<Option<Daemon>> {
    const GET: Sql = sql!("select ", effective_state!(2), " from daemons where id = $1");
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql)
        .bind(id)
        .bind(gone_after.as_secs_f64())
        .fetch_optional(pool)
        .await)?)
}

/// A daemon's stored state and whether it was asked to drain, as the SQLite change feed compares them.
#[derive(Debug, sqlx::FromRow)]
pub struct DaemonMark {
    pub id: Uuid,
    pub state: DaemonState,
    pub draining: bool,
}

/// Every daemon's stored state.
pub async fn marks(on: impl Into<On<'_>>) -> Result<Vec<DaemonMark>> {
    const MARKS: Sql = sql!("select id, state, drain_requested_at is not null as draining from daemons");
    Ok(run!(on, MARKS, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
