//! The statements of `resource_overrides` and its append-only audit trail `resource_override_audit`: the capacity
//! a claim counts against when an operator changed the catalogue's, and who changed it, when and why.

use chrono::{DateTime, Utc};

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};
use scrinalia_wire::resource::ResourceAuditEntry;

/// A resource's stored override: (resource, capacity, updated_by, updated_at).
pub type Stored = (String, i32, String, DateTime<Utc>);

/// The key of the advisory lock of `resource`: the same one a claim takes before counting its holders, so a
/// change of capacity and a claim of the resource are serialised.
pub fn lock_key(resource: &str) -> String {
    format!("resource.{resource}")
}

/// The overridden capacity of `$1`, read inside a claim's transaction after its lock.
const CAPACITY: Sql = sql!("select capacity from resource_overrides where resource = $1");

/// Every override, by resource.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<Stored>> {
    const LIST: Sql =
        sql!("select resource, capacity, updated_by, updated_at from resource_overrides order by resource");
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// The overridden capacity of `resource`, if it has one (read inside a claim after the resource's lock).
pub async fn capacity(on: impl Into<On<'_>>, resource: &str) -> Result<Option<i32>> {
    run!(on, CAPACITY, |pool, sql| sqlx::query_scalar(sql).bind(resource).fetch_optional(pool).await)
}

/// Stores `capacity` as `resource`'s override, set by `actor`.
pub async fn upsert(on: impl Into<On<'_>>, resource: &str, capacity: i32, actor: &str) -> Result<Stored> {
    const UPSERT: Sql = sql!(
        "insert into resource_overrides (resource, capacity, updated_by, updated_at) values ($1, $2, $3, ",
        now,
        ") on conflict (resource) do update set capacity = excluded.capacity, updated_by = excluded.updated_by, \
             updated_at = excluded.updated_at \
         returning resource, capacity, updated_by, updated_at"
    );
    run!(on, UPSERT, |pool, sql| sqlx::query_as(sql).bind(resource).bind(capacity).bind(actor).fetch_one(pool).await)
}

/// Removes `resource`'s override: the catalogue's capacity applies again.
pub async fn delete(on: impl Into<On<'_>>, resource: &str) -> Result<()> {
    const DELETE: Sql = sql!("delete from resource_overrides where resource = $1");
    run!(on, DELETE, |pool, sql| sqlx::query(sql).bind(resource).execute(pool).await.map(drop))
}

/// Appends a change of `resource`'s overridden capacity to its audit trail.
pub async fn audit(
    on: impl Into<On<'_>>,
    resource: &str,
    actor: &str,
    (before, after): (Option<i32>, Option<i32>),
    reason: &str,
) -> Result<()> {
    const AUDIT: Sql = sql!(
        "insert into resource_override_audit (resource, actor, before, after, reason) values ($1, $2, $3, $4, $5)"
    );
    run!(on, AUDIT, |pool, sql| sqlx::query(sql)
        .bind(resource)
        .bind(actor)
        .bind(before)
        .bind(after)
        .bind(reason)
        .execute(pool)
        .await
        .map(drop))
}

/// A resource's audit trail, newest first.
pub async fn audit_trail(on: impl Into<On<'_>>, resource: &str, limit: u32) -> Result<Vec<ResourceAuditEntry>> {
    const TRAIL: Sql = sql!(
        "select id, resource, actor, at, before, after, reason from resource_override_audit \
         where resource = $1 order by id desc limit $2"
    );
    type Row = (i64, String, String, DateTime<Utc>, Option<i32>, Option<i32>, String);
    let rows: Vec<Row> =
        run!(on, TRAIL, |pool, sql| sqlx::query_as(sql).bind(resource).bind(i64::from(limit)).fetch_all(pool).await)?;
    let capacity = |c: Option<i32>| c.and_then(|c| u32::try_from(c).ok());
    Ok(rows
        .into_iter()
        .map(|(id, resource, actor, at, before, after, reason)| ResourceAuditEntry {
            id,
            resource,
            actor,
            at,
            before: capacity(before),
            after: capacity(after),
            reason,
        })
        .collect())
}
