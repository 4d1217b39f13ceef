//! The statements of `worker_overrides` and its append-only audit trail `worker_override_audit`.

use sqlx::types::Json;

use super::{
    Database, Dialect, Result,
    dialect::{Sql, sql},
    on_pool,
};
use crate::{AuditEntry, Override, OverrideAction, OverrideValues};

macro_rules! override_columns {
    ($d:ident;) => {
        "worker, engine, preset, options, retry, updated_by, updated_at"
    };
}

macro_rules! audit_columns {
    ($d:ident;) => {
        "id, worker, actor, at, action, before, after, reason"
    };
}

const GET: Sql = sql!("select ", override_columns!(), " from worker_overrides where worker = $1");

/// One worker's override.
pub(crate) async fn get(db: &Database, worker: &str) -> Result<Option<Override>> {
    Ok(on_pool!(db, GET, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)?)
}

/// Every row, by worker (also read inside other transactions).
pub(crate) const LIST: Sql = sql!("select ", override_columns!(), " from worker_overrides order by worker");

/// Every override.
pub(crate) async fn list(db: &Database) -> Result<Vec<Override>> {
    Ok(on_pool!(db, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// Replaces a worker's override with what `next` computes from the current one (an empty result removes it)
/// and appends the change to the audit trail, in one transaction that no other edit of the worker interleaves
/// with. `next` may refuse (`Err`), and then nothing is written.
pub(crate) async fn change<E>(
    db: &Database,
    worker: &str,
    actor: &str,
    reason: &str,
    next: impl Fn(Option<&OverrideValues>) -> Result<OverrideValues, E>,
) -> Result<Result<Option<Override>, E>> {
    const DELETE: Sql = sql!("delete from worker_overrides where worker = $1");
    const UPSERT: Sql = sql!(
        "insert into worker_overrides (worker, engine, preset, options, retry, updated_by, updated_at) \
         values ($1, $2, $3, $4, $6, $5, ",
        now,
        ") \
         on conflict (worker) do update set engine = excluded.engine, preset = excluded.preset, \
             options = excluded.options, retry = excluded.retry, updated_by = excluded.updated_by, updated_at = excluded.updated_at \
         returning ",
        override_columns!()
    );
    const AUDIT: Sql = sql!(
        "insert into worker_override_audit (worker, actor, action, before, after, reason) \
         values ($1, $2, $3, $4, $5, $6)"
    );
    on_pool!(db, |pool| {
        let sql = |s: Sql| db.text(s);
        let mut tx = Dialect::begin_write(pool).await?;
        Dialect::lock(&mut tx, &format!("override.{worker}")).await?;
        let current: Option<Override> = sqlx::query_as(sql(GET)).bind(worker).fetch_optional(&mut *tx).await?;
        let before = current.map(|o| o.values);
        let after = match next(before.as_ref()) {
            Ok(after) => after,
            Err(e) => return Ok(Err(e)),
        };
        let stored: Option<Override> = if after.is_empty() {
            sqlx::query(sql(DELETE)).bind(worker).execute(&mut *tx).await?;
            None
        } else {
            let row = sqlx::query_as(sql(UPSERT))
                .bind(worker)
                .bind(&after.engine)
                .bind(&after.preset)
                .bind(Json(&after.options))
                .bind(actor)
                .bind(after.retry.as_ref().map(Json))
                .fetch_one(&mut *tx)
                .await?;
            Some(row)
        };
        let action = if stored.is_some() { OverrideAction::Set } else { OverrideAction::Clear };
        sqlx::query(sql(AUDIT))
            .bind(worker)
            .bind(actor)
            .bind(action)
            .bind(before.as_ref().map(Json))
            .bind(stored.as_ref().map(|o| Json(&o.values)))
            .bind(reason)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Ok(stored))
    })
}

/// A worker's audit trail, newest first.
pub(crate) async fn audit_trail(db: &Database, worker: &str, limit: u32) -> Result<Vec<AuditEntry>> {
    const TRAIL: Sql =
        sql!("select ", audit_columns!(), " from worker_override_audit where worker = $1 order by id desc limit $2");
    Ok(on_pool!(db, TRAIL, |pool, sql| sqlx::query_as(sql).bind(worker).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The newest audit entry of each worker whose override was ever changed.
pub(crate) async fn last_changes(db: &Database) -> Result<Vec<AuditEntry>> {
    const LAST: Sql = sql!(
        "select ",
        audit_columns!(),
        " from worker_override_audit \
         where id in (select max(id) from worker_override_audit group by worker) order by worker"
    );
    Ok(on_pool!(db, LAST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
