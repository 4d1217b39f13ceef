//! The statements of `run_resources`: the slots of shared resources that running runs hold, taken inside the
//! transaction that claims a run (see `scrinalia_shared::runs::placement` for the claim's rule) and released in
//! the transaction that ends it.

use std::time::Duration;

use scrinalia_wire::Run;
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
    runs::run_columns,
};

/// Releases every resource slot run `run` held.
pub async fn release(on: impl Into<On<'_>>, run: Uuid) -> Result<()> {
    const RELEASE: Sql = sql!("delete from run_resources where run_id = $1");
    run!(on, RELEASE, |pool, sql| sqlx::query(sql).bind(run).execute(pool).await.map(drop))
}

/// The oldest queued run of `worker` that is due now (PostgreSQL: locked, skipping one another transaction
/// holds, so that a daemon never waits for another's claim of it).
pub async fn first_due(on: impl Into<On<'_>>, worker: &str) -> Result<Option<Uuid>> {
    const CANDIDATE: Sql = sql!(
        "select id from worker_runs where state = 'queued' and worker = $1 and (shards is null or parent_id is not null) \
             and (not_before is null or not_before <= ",
        now,
        ") order by requested_at, id limit 1",
        skip_locked
    );
    run!(on, CANDIDATE, |pool, sql| sqlx::query_scalar(sql).bind(worker).fetch_optional(pool).await)
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

/// Which of `workers` have a queued run that is due now, in one statement, so that a claim opens a transaction
/// only for the workers with something to claim.
pub async fn queued_among(on: impl Into<On<'_>>, workers: &[String]) -> Result<Vec<String>> {
    const QUEUED: Sql = sql!(
        "select distinct worker from worker_runs where state = 'queued' and (shards is null or parent_id is not null) \
             and worker in (select value from ",
        json_list(1, w),
        ") and (not_before is null or not_before <= ",
        now,
        ")"
    );
    Ok(run!(on, QUEUED, |pool, sql| sqlx::query_scalar(sql).bind(sqlx::types::Json(workers)).fetch_all(pool).await)?)
}

/// Every resource held now: (resource, run), oldest hold first.
pub async fn holders(on: impl Into<On<'_>>) -> Result<Vec<(String, Uuid)>> {
    const ALL: Sql = sql!("select resource, run_id from run_resources order by resource, held_since, run_id");
    Ok(run!(on, ALL, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
