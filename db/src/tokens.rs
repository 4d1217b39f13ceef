//! The statements of `service_tokens`: insert one, list them, read what the API's in-memory map needs (with the
//! database clock, so that expiry is judged by it), revoke one, and record a batch of uses.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use scrinalia_wire::{Role, auth::ServiceToken};

use crate::{
    Database, DbError, On, Result,
    dialect::{DbTime, Sql, sql},
    run,
};

/// What an API process keeps of a token to check bearers against.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRow {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
    pub hash: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Whether `e` is the unique violation of a token's name (as opposed to its hash, which cannot collide).
fn is_name_taken(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation()
        && d.constraint().is_none_or(|c| c == "service_tokens_name_key")
        && !d.message().contains("service_tokens.hash"))
}

/// Inserts a token; `None` when its name is taken (the database's unique violation).
pub async fn insert(
    on: impl Into<On<'_>>,
    id: Uuid,
    name: &str,
    role: Role,
    hash: &str,
    created_by: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Option<ServiceToken>> {
    const INSERT: Sql = sql!(
        "insert into service_tokens (id, name, role, hash, created_by, expires_at) values ($1, $2, $3, $4, $5, $6) \
         returning id, name, role, created_by, created_at, expires_at, last_used_at, revoked_at, revoked_by"
    );
    let inserted = run!(on, INSERT, |pool, sql| sqlx::query_as(sql)
        .bind(id)
        .bind(name)
        .bind(role)
        .bind(hash)
        .bind(created_by)
        .bind(expires_at.map(DbTime))
        .fetch_one(pool)
        .await);
    match inserted {
        Ok(token) => Ok(Some(token)),
        Err(DbError::Sqlx(e)) if is_name_taken(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every token, oldest first.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<ServiceToken>> {
    const LIST: Sql = sql!(
        "select id, name, role, created_by, created_at, expires_at, last_used_at, revoked_at, revoked_by \
         from service_tokens order by created_at, id"
    );
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// A row of [`snapshot`]: a token (all `None` when there is none) beside the database clock.
#[derive(Debug, sqlx::FromRow)]
struct SnapshotRow {
    id: Option<Uuid>,
    name: Option<String>,
    role: Option<Role>,
    hash: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    db_now: DbTime,
}

/// What the in-memory map holds, and the database clock at the moment it was read, in one statement (one round
/// trip per refresh): the clock is a one-row select that the tokens are left-joined to, so that it comes back as
/// one row of nulls beside it when there is no token at all.
pub async fn snapshot(db: &Database) -> Result<(Vec<TokenRow>, DateTime<Utc>)> {
    const SNAPSHOT: Sql = sql!(
        "select t.id, t.name, t.role, t.hash, t.expires_at, t.revoked_at, c.db_now \
         from (select ",
        now,
        " as db_now) as c left join service_tokens as t on 1 = 1 order by t.id"
    );
    let rows: Vec<SnapshotRow> = run!(db, SNAPSHOT, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?;
    let now = rows.first().map(|r| r.db_now.0).ok_or(sqlx::Error::RowNotFound)?;
    let tokens = rows
        .into_iter()
        .filter_map(|r| {
            Some(TokenRow {
                id: r.id?,
                name: r.name?,
                role: r.role?,
                hash: r.hash?,
                expires_at: r.expires_at,
                revoked_at: r.revoked_at,
            })
        })
        .collect();
    Ok((tokens, now))
}

/// Revokes a token that is not revoked yet; `None` when there is no such token or it was revoked already.
pub async fn revoke(on: impl Into<On<'_>>, id: Uuid, actor: &str) -> Result<Option<ServiceToken>> {
    const REVOKE: Sql = sql!(
        "update service_tokens set revoked_at = ",
        now,
        ", revoked_by = $2 where id = $1 and revoked_at is null \
         returning id, name, role, created_by, created_at, expires_at, last_used_at, revoked_at, revoked_by"
    );
    Ok(run!(on, REVOKE, |pool, sql| sqlx::query_as(sql).bind(id).bind(actor).fetch_optional(pool).await)?)
}

/// One token, revoked or not.
pub async fn get(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<ServiceToken>> {
    const GET: Sql = sql!(
        "select id, name, role, created_by, created_at, expires_at, last_used_at, revoked_at, revoked_by \
         from service_tokens where id = $1"
    );
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// Records that the tokens `ids` were used, now (one statement per token; a batch is the uses of about a second).
pub async fn touch(db: &Database, ids: &[Uuid]) -> Result<()> {
    const TOUCH: Sql = sql!("update service_tokens set last_used_at = ", now, " where id = $1");
    for id in ids {
        run!(db, TOUCH, |pool, sql| sqlx::query(sql).bind(*id).execute(pool).await.map(drop))?;
    }
    Ok(())
}
