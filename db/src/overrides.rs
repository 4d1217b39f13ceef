//! The statements of `worker_overrides` and its append-only audit trail `worker_override_audit`.

use sqlx::types::Json;

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};
use scrinalia_wire::{AuditEntry, Override, OverrideAction, OverrideValues};

macro_rules! override_columns {
    ($d:ident;) => {
        "worker, engine, preset, options, retry, memory_max, cpu_max, stall_seconds, shards, priority, \
         expires_after_seconds, pause_after_failures, when_pending_at_least, quiet_seconds, max_delay_seconds, \
         fresh_within_seconds, updated_by, updated_at"
    };
}

macro_rules! audit_columns {
    ($d:ident;) => {
        "id, worker, actor, at, action, before, after, reason"
    };
}

const GET: Sql = sql!("select ", override_columns!(), " from worker_overrides where worker = $1");

/// One worker's override.
pub async fn get(on: impl Into<On<'_>>, worker: &str) -> Result<Option<Override>> {
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)?)
}

/// The version of `worker`'s override: the id of its newest audit entry, 0 when it never had one. Every set and
/// clear writes an audit entry in its own transaction and ids only grow, so an equal version is an unchanged
/// override (see [`crate::runs::NewRun::override_version`]). Read it before the override itself: a change
/// between the two reads then shows as a newer version, never as an older override under a current version.
pub async fn version(on: impl Into<On<'_>>, worker: &str) -> Result<i64> {
    const VERSION: Sql = sql!("select coalesce((select max(id) from worker_override_audit where worker = $1), 0)");
    Ok(run!(on, VERSION, |pool, sql| sqlx::query_scalar::<_, i64>(sql).bind(worker).fetch_one(pool).await)?)
}

/// Every row, by worker.
const LIST: Sql = sql!("select ", override_columns!(), " from worker_overrides order by worker");

/// Every override.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<Override>> {
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// Stores `values` as `worker`'s override, set by `actor`.
pub async fn upsert(on: impl Into<On<'_>>, worker: &str, values: &OverrideValues, actor: &str) -> Result<Override> {
    const UPSERT: Sql = sql!(
        "insert into worker_overrides (worker, engine, preset, options, retry, memory_max, cpu_max, stall_seconds, \
             shards, priority, expires_after_seconds, pause_after_failures, when_pending_at_least, quiet_seconds, \
             max_delay_seconds, fresh_within_seconds, updated_by, updated_at) \
         values ($1, $2, $3, $4, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $5, ",
        now,
        ") \
         on conflict (worker) do update set engine = excluded.engine, preset = excluded.preset, \
             options = excluded.options, retry = excluded.retry, memory_max = excluded.memory_max, \
             cpu_max = excluded.cpu_max, stall_seconds = excluded.stall_seconds, shards = excluded.shards, \
             priority = excluded.priority, expires_after_seconds = excluded.expires_after_seconds, \
             pause_after_failures = excluded.pause_after_failures, \
             when_pending_at_least = excluded.when_pending_at_least, quiet_seconds = excluded.quiet_seconds, \
             max_delay_seconds = excluded.max_delay_seconds, fresh_within_seconds = excluded.fresh_within_seconds, \
             updated_by = excluded.updated_by, updated_at = excluded.updated_at \
         returning ",
        override_columns!()
    );
    run!(on, UPSERT, |pool, sql| sqlx::query_as(sql)
        .bind(worker)
        .bind(&values.engine)
        .bind(&values.preset)
        .bind(Json(&values.options))
        .bind(actor)
        .bind(values.retry.as_ref().map(Json))
        .bind(values.memory_max.as_ref().map(Json))
        .bind(values.cpu_max)
        .bind(values.stall_seconds)
        .bind(values.shards)
        .bind(values.priority)
        .bind(values.expires_after_seconds)
        .bind(values.pause_after_failures)
        .bind(values.when_pending_at_least)
        .bind(values.quiet_seconds)
        .bind(values.max_delay_seconds)
        .bind(values.fresh_within_seconds)
        .fetch_one(pool)
        .await)
}

/// Removes `worker`'s override.
pub async fn delete(on: impl Into<On<'_>>, worker: &str) -> Result<()> {
    const DELETE: Sql = sql!("delete from worker_overrides where worker = $1");
    run!(on, DELETE, |pool, sql| sqlx::query(sql).bind(worker).execute(pool).await.map(drop))
}

/// One entry of a worker's audit trail, as appended.
#[derive(Debug, Clone, Copy)]
pub struct NewAuditEntry<'a> {
    /// The worker.
    pub worker: &'a str,
    /// Who changed its override.
    pub actor: &'a str,
    /// Whether the change left an override or none.
    pub action: OverrideAction,
    /// The override before.
    pub before: Option<&'a OverrideValues>,
    /// The override after.
    pub after: Option<&'a OverrideValues>,
    /// Why.
    pub reason: &'a str,
}

/// Appends a change to a worker's audit trail.
pub async fn audit(on: impl Into<On<'_>>, entry: &NewAuditEntry<'_>) -> Result<()> {
    const AUDIT: Sql = sql!(
        "insert into worker_override_audit (worker, actor, action, before, after, reason) \
         values ($1, $2, $3, $4, $5, $6)"
    );
    run!(on, AUDIT, |pool, sql| sqlx::query(sql)
        .bind(entry.worker)
        .bind(entry.actor)
        .bind(entry.action)
        .bind(entry.before.map(Json))
        .bind(entry.after.map(Json))
        .bind(entry.reason)
        .execute(pool)
        .await
        .map(drop))
}

/// A worker's audit trail, newest first.
pub async fn audit_trail(on: impl Into<On<'_>>, worker: &str, limit: u32) -> Result<Vec<AuditEntry>> {
    const TRAIL: Sql =
        sql!("select ", audit_columns!(), " from worker_override_audit where worker = $1 order by id desc limit $2");
    Ok(run!(on, TRAIL, |pool, sql| sqlx::query_as(sql).bind(worker).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The newest audit entry of each worker whose override was ever changed.
pub async fn last_changes(on: impl Into<On<'_>>) -> Result<Vec<AuditEntry>> {
    const LAST: Sql = sql!(
        "select ",
        audit_columns!(),
        " from worker_override_audit \
         where id in (select max(id) from worker_override_audit group by worker) order by worker"
    );
    Ok(run!(on, LAST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
