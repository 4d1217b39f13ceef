//! The statements of `run_resources`: the slots of shared resources that running runs hold, taken inside the
//! transaction that claims a run (see `scrinalia_shared::runs::placement` for the claim's rule) and released in
//! the transaction that ends it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use scrinalia_wire::Run;
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
    runs::{QueueKey, run_columns},
};

/// Releases every resource slot run `run` held.
pub async fn release(on: impl Into<On<'_>>, run: Uuid) -> Result<()> {
    const RELEASE: Sql = sql!("delete from run_resources where run_id = $1");
    run!(on, RELEASE, |pool, sql| sqlx::query(sql).bind(run).execute(pool).await.map(drop))
}

/// The first queued run of `worker` in the claim's order (see [`crate::runs::QueueKey`]) that is due now (PostgreSQL: locked, skipping one another transaction
/// holds, so that a daemon never waits for another's claim of it).
pub async fn first_due(on: impl Into<On<'_>>, worker: &str) -> Result<Option<Uuid>> {
    const CANDIDATE: Sql = sql!(
        "select id from worker_runs where state = 'queued' and worker = $1 and (shards is null or parent_id is not null) \
             and (not_before is null or not_before <= ",
        now,
        ") order by priority desc, requested_at, id limit 1",
        skip_locked
    );
    run!(on, CANDIDATE, |pool, sql| sqlx::query_scalar(sql).bind(worker).fetch_optional(pool).await)
}

/// How many runs started holding `resource` in the last minute (database clock), as [`record_start`] counts
/// them.
pub async fn starts_in_last_minute(on: impl Into<On<'_>>, resource: &str) -> Result<u64> {
    const COUNT: Sql = sql!("select count(*) from resource_starts where resource = $1 and started_at > ", now_minus(2));
    let n: i64 =
        run!(on, COUNT, |pool, sql| sqlx::query_scalar(sql).bind(resource).bind(60.0_f64).fetch_one(pool).await)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// When the next run may start holding `resource` under a limit of `most` starts a minute: a minute after the
/// oldest of the last `most` starts, when there were that many in the last minute; `None` when one may start now.
pub async fn next_start_at(on: impl Into<On<'_>>, resource: &str, most: u32) -> Result<Option<DateTime<Utc>>> {
    const NEXT: Sql = sql!(
        "select ",
        plus_secs(started_at, 3),
        " from resource_starts where resource = $1 and started_at > ",
        now_minus(3),
        " order by started_at desc limit 1 offset $2"
    );
    let offset = i64::from(most.max(1)) - 1;
    Ok(run!(on, NEXT, |pool, sql| sqlx::query_scalar(sql)
        .bind(resource)
        .bind(offset)
        .bind(60.0_f64)
        .fetch_optional(pool)
        .await)?)
}

/// Records that run `run` started holding the rate-limited `resource` now.
pub async fn record_start(on: impl Into<On<'_>>, resource: &str, run: Uuid) -> Result<()> {
    const RECORD: Sql = sql!("insert into resource_starts (resource, started_at, run_id) values ($1, ", now, ", $2)");
    run!(on, RECORD, |pool, sql| sqlx::query(sql).bind(resource).bind(run).execute(pool).await.map(drop))
}

/// Forgets the starts of `resource` older than a minute, which no claim counts again.
pub async fn forget_starts(on: impl Into<On<'_>>, resource: &str) -> Result<()> {
    const FORGET: Sql = sql!("delete from resource_starts where resource = $1 and started_at <= ", now_minus(2));
    run!(on, FORGET, |pool, sql| sqlx::query(sql).bind(resource).bind(60.0_f64).execute(pool).await.map(drop))
}

/// The runs holding a slot of `resource`, oldest hold first.
pub async fn holders_of(on: impl Into<On<'_>>, resource: &str) -> Result<Vec<Uuid>> {
    const HOLDERS: Sql = sql!("select run_id from run_resources where resource = $1 order by held_since, run_id");
    run!(on, HOLDERS, |pool, sql| sqlx::query_scalar(sql).bind(resource).fetch_all(pool).await)
}

/// Claims the queued run `id` for `daemon` with a lease of `lease`, counted from the statement's clock (not the
/// transaction's start, however long the claim waited); `None` when it is queued no more.
pub async fn claim_one(on: impl Into<On<'_>>, id: Uuid, daemon: Uuid, lease: Duration) -> Result<Option<Run>> {
    const CLAIM: Sql = sql!(
        "update worker_runs set state = 'running', claimed_by = $2, claimed_at = ",
        now,
        ", lease_expires_at = ",
        clock_plus(3),
        " where id = $1 and state = 'queued' returning ",
        run_columns!()
    );
    run!(on, CLAIM, |pool, sql| sqlx::query_as(sql)
        .bind(id)
        .bind(daemon)
        .bind(lease.as_secs_f64())
        .fetch_optional(pool)
        .await)
}

/// Records that run `run` holds a slot of `resource`: of the global one, or (`on_daemon`: the daemon and the
/// slot) of the daemon-scoped one on that daemon.
pub async fn hold(on: impl Into<On<'_>>, run: Uuid, resource: &str, on_daemon: Option<(Uuid, u32)>) -> Result<()> {
    const HOLD: Sql = sql!("insert into run_resources (run_id, resource, daemon_id, slot) values ($1, $2, $3, $4)");
    let (daemon, slot) = (on_daemon.map(|(d, _)| d), on_daemon.map(|(_, s)| i32::try_from(s).unwrap_or(i32::MAX)));
    run!(on, HOLD, |pool, sql| sqlx::query(sql)
        .bind(run)
        .bind(resource)
        .bind(daemon)
        .bind(slot)
        .execute(pool)
        .await
        .map(drop))
}

/// The slots of the daemon-scoped `resource` held on `daemon`, lowest first.
pub async fn slots_on(on: impl Into<On<'_>>, resource: &str, daemon: Uuid) -> Result<Vec<u32>> {
    const SLOTS: Sql = sql!(
        "select slot from run_resources where resource = $1 and daemon_id = $2 and slot is not null order by slot"
    );
    let slots: Vec<i32> =
        run!(on, SLOTS, |pool, sql| sqlx::query_scalar(sql).bind(resource).bind(daemon).fetch_all(pool).await)?;
    Ok(slots.into_iter().filter_map(|s| u32::try_from(s).ok()).collect())
}

/// The slots of daemon-scoped resources run `run` holds: (resource, slot), by resource.
pub async fn slots_of(on: impl Into<On<'_>>, run: Uuid) -> Result<Vec<(String, u32)>> {
    const SLOTS: Sql =
        sql!("select resource, slot from run_resources where run_id = $1 and slot is not null order by resource");
    let slots: Vec<(String, i32)> = run!(on, SLOTS, |pool, sql| sqlx::query_as(sql).bind(run).fetch_all(pool).await)?;
    Ok(slots.into_iter().filter_map(|(r, s)| Some((r, u32::try_from(s).ok()?))).collect())
}

/// Every slot of a daemon-scoped resource held now: (resource, daemon, slot, run), by resource, daemon and slot.
pub async fn daemon_slots(on: impl Into<On<'_>>) -> Result<Vec<(String, Uuid, u32, Uuid)>> {
    const ALL: Sql = sql!(
        "select resource, daemon_id, slot, run_id from run_resources where daemon_id is not null \
         and slot is not null order by resource, daemon_id, slot"
    );
    let rows: Vec<(String, Uuid, i32, Uuid)> = run!(on, ALL, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?;
    Ok(rows.into_iter().filter_map(|(r, d, s, run)| Some((r, d, u32::try_from(s).ok()?, run))).collect())
}

/// Which of `workers` have a queued run that is due now, each with its first such run's place in the claim's
/// order, first first: one statement, so that a claim opens a transaction only for the workers with something
/// to claim, in the order their runs go.
pub async fn queued_among(on: impl Into<On<'_>>, workers: &[String]) -> Result<Vec<(String, QueueKey)>> {
    const QUEUED: Sql = sql!(
        "select worker, priority, requested_at, id from (select worker, priority, requested_at, id, \
             row_number() over (partition by worker order by priority desc, requested_at, id) as n \
             from worker_runs where state = 'queued' and (shards is null or parent_id is not null) \
             and worker in (select value from ",
        json_list(1, w),
        ") and (not_before is null or not_before <= ",
        now,
        ")) ranked where n = 1 order by priority desc, requested_at, id"
    );
    type Row = (String, i16, chrono::DateTime<chrono::Utc>, Uuid);
    let rows: Vec<Row> =
        run!(on, QUEUED, |pool, sql| sqlx::query_as(sql).bind(sqlx::types::Json(workers)).fetch_all(pool).await)?;
    Ok(rows.into_iter().map(|(w, priority, requested_at, id)| (w, QueueKey { priority, requested_at, id })).collect())
}

/// Every resource held now: (resource, run), oldest hold first.
pub async fn holders(on: impl Into<On<'_>>) -> Result<Vec<(String, Uuid)>> {
    const ALL: Sql = sql!("select resource, run_id from run_resources order by resource, held_since, run_id");
    Ok(run!(on, ALL, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
