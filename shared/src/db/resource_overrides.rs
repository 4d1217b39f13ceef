//! The statements of `resource_overrides` and its append-only audit trail `resource_override_audit`: the capacity
//! a claim counts against when an operator changed the catalogue's, and who changed it, when and why.

use chrono::{DateTime, Utc};

use super::{
    Database, Dialect, Result,
    dialect::{Sql, sql},
    on_pool,
};
use crate::resources::ResourceAuditEntry;

/// A resource's stored override: (resource, capacity, updated_by, updated_at).
pub(crate) type Stored = (String, i32, String, DateTime<Utc>);

/// The key of the advisory lock of `resource`: the same one a claim takes before counting its holders, so a
/// change of capacity and a claim of the resource are serialised.
pub(crate) fn lock_key(resource: &str) -> String {
    format!("resource.{resource}")
}

/// The overridden capacity of `$1`, read inside a claim's transaction after its lock.
pub(crate) const CAPACITY: Sql = sql!("select capacity from resource_overrides where resource = $1");

/// Every override, by resource.
pub(crate) async fn list(db: &Database) -> Result<Vec<Stored>> {
    const LIST: Sql =
        sql!("select resource, capacity, updated_by, updated_at from resource_overrides order by resource");
    Ok(on_pool!(db, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// Sets `resource`'s capacity to `capacity` (`None`: removes the override) as `actor`, and appends the change with
/// its `reason` to the audit trail, in one transaction under the resource's lock. Returns the stored override.
pub(crate) async fn change(
    db: &Database,
    resource: &str,
    capacity: Option<u32>,
    actor: &str,
    reason: &str,
) -> Result<Option<Stored>> {
    const DELETE: Sql = sql!("delete from resource_overrides where resource = $1");
    const UPSERT: Sql = sql!(
        "insert into resource_overrides (resource, capacity, updated_by, updated_at) values ($1, $2, $3, ",
        now,
        ") on conflict (resource) do update set capacity = excluded.capacity, updated_by = excluded.updated_by, \
             updated_at = excluded.updated_at \
         returning resource, capacity, updated_by, updated_at"
    );
    const AUDIT: Sql = sql!(
        "insert into resource_override_audit (resource, actor, before, after, reason) values ($1, $2, $3, $4, $5)"
    );
    // The domain bounds the capacity far below i32::MAX; saturating keeps the column's check the last word.
    let capacity = capacity.map(|c| i32::try_from(c).unwrap_or(i32::MAX));
    on_pool!(db, |pool| {
        let sql = |s: Sql| db.text(s);
        let mut tx = Dialect::begin_write(pool).await?;
        Dialect::lock(&mut tx, &lock_key(resource)).await?;
        let before: Option<i32> = sqlx::query_scalar(sql(CAPACITY)).bind(resource).fetch_optional(&mut *tx).await?;
        let stored: Option<Stored> = match capacity {
            Some(capacity) => {
                Some(sqlx::query_as(sql(UPSERT)).bind(resource).bind(capacity).bind(actor).fetch_one(&mut *tx).await?)
            }
            None => {
                sqlx::query(sql(DELETE)).bind(resource).execute(&mut *tx).await?;
                None
            }
        };
        sqlx::query(sql(AUDIT))
            .bind(resource)
            .bind(actor)
            .bind(before)
            .bind(capacity)
            .bind(reason)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(stored)
    })
}

/// A resource's audit trail, newest first.
pub(crate) async fn audit_trail(db: &Database, resource: &str, limit: u32) -> Result<Vec<ResourceAuditEntry>> {
    const TRAIL: Sql = sql!(
        "select id, resource, actor, at, before, after, reason from resource_override_audit \
         where resource = $1 order by id desc limit $2"
    );
    type Row = (i64, String, String, DateTime<Utc>, Option<i32>, Option<i32>, String);
    let rows: Vec<Row> = on_pool!(db, TRAIL, |pool, sql| sqlx::query_as(sql)
        .bind(resource)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await)?;
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
