//! The statements of `worker_descriptions` and `worker_readiness`: what each worker's `describe` and `check`
//! last answered.

use sqlx::types::Json;

use scrinalia_wire::{Description, Readiness, WorkerDescription};
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};

/// An attempt to describe a worker, as a daemon stores it.
#[derive(Debug, Clone)]
pub struct NewDescription {
    /// The worker.
    pub worker: String,
    /// What it answered, or why the attempt failed (a sentence).
    pub outcome: Result<Description, String>,
    /// The daemon that asked.
    pub described_by: Uuid,
    /// The command that answered.
    pub command: Vec<String>,
    /// How long it took.
    pub took_ms: i64,
}

/// What a worker's `check` answered, as a daemon stores it.
#[derive(Debug, Clone)]
pub struct NewReadiness {
    /// The worker.
    pub worker: String,
    /// Ready or not; `None` when the check failed.
    pub ready: Option<bool>,
    /// What is missing, as the worker said it.
    pub reason: Option<String>,
    /// Why the check failed.
    pub error: Option<String>,
    /// How long it took.
    pub took_ms: i64,
    /// The daemon that checked.
    pub checked_by: Uuid,
}

/// Stores an attempt to describe a worker: a success replaces the description; a failure keeps the last good
/// one and records why this attempt failed.
pub async fn store(on: impl Into<On<'_>>, d: &NewDescription) -> Result<()> {
    const STORE: Sql = sql!(
        "insert into worker_descriptions \
             (worker, description, described_at, described_by, command, took_ms, error, attempted_at) \
         values ($1, $2, case when $2 is null then null else ",
        now,
        " end, case when $2 is null then null else $3 end, $4, $5, $6, ",
        now,
        ") \
         on conflict (worker) do update set \
             description = coalesce(excluded.description, worker_descriptions.description), \
             described_at = coalesce(excluded.described_at, worker_descriptions.described_at), \
             described_by = coalesce(excluded.described_by, worker_descriptions.described_by), \
             command = excluded.command, took_ms = excluded.took_ms, error = excluded.error, \
             attempted_at = excluded.attempted_at"
    );
    let description = d.outcome.as_ref().ok().map(Json);
    let error = d.outcome.as_ref().err();
    run!(on, STORE, |pool, sql| sqlx::query(sql)
        .bind(&d.worker)
        .bind(description)
        .bind(d.described_by)
        .bind(Json(&d.command))
        .bind(d.took_ms)
        .bind(error)
        .execute(pool)
        .await
        .map(drop))?;
    Ok(())
}

macro_rules! description_columns {
    ($d:ident;) => {
        concat!(
            "worker, description, described_at, described_by, command, took_ms, error, attempted_at, ",
            $crate::dialect::fragment!($d; seconds_since(described_at)),
            " as age_seconds"
        )
    };
}

/// Every row, by worker (also read inside other transactions).
pub(crate) const LIST: Sql = sql!("select ", description_columns!(), " from worker_descriptions order by worker");

/// Every stored description.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<WorkerDescription>> {
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// One worker's stored description.
pub async fn get(on: impl Into<On<'_>>, worker: &str) -> Result<Option<WorkerDescription>> {
    const GET: Sql = sql!("select ", description_columns!(), " from worker_descriptions where worker = $1");
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)?)
}

/// Stores what a worker's `check` answered, replacing the previous answer.
pub async fn store_readiness(on: impl Into<On<'_>>, r: &NewReadiness) -> Result<()> {
    const STORE: Sql = sql!(
        "insert into worker_readiness (worker, ready, reason, error, checked_at, took_ms, checked_by) \
         values ($1, $2, $3, $4, ",
        now,
        ", $5, $6) \
         on conflict (worker) do update set ready = excluded.ready, reason = excluded.reason, \
             error = excluded.error, checked_at = excluded.checked_at, took_ms = excluded.took_ms, \
             checked_by = excluded.checked_by"
    );
    run!(on, STORE, |pool, sql| sqlx::query(sql)
        .bind(&r.worker)
        .bind(r.ready)
        .bind(&r.reason)
        .bind(&r.error)
        .bind(r.took_ms)
        .bind(r.checked_by)
        .execute(pool)
        .await
        .map(drop))?;
    Ok(())
}

/// Every worker's last readiness, with its age.
pub async fn readiness(on: impl Into<On<'_>>) -> Result<Vec<Readiness>> {
    const LIST: Sql = sql!(
        "select worker, ready, reason, error, checked_at, took_ms, checked_by, ",
        seconds_since(checked_at),
        " as age_seconds from worker_readiness order by worker"
    );
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// When each worker's description and readiness were last stored, for the polling change feed (SQLite, or PostgreSQL behind a pooler): (worker, which,
/// when), `which` 0 for the description and 1 for the readiness.
pub async fn marks(on: impl Into<On<'_>>) -> Result<Vec<(String, i64, String)>> {
    const MARKS: Sql = sql!(
        // `cast`: PostgreSQL types a bare 0 as int4, and the mark is read as an i64 on both backends.
        "select worker, cast(0 as bigint), ",
        time_text(attempted_at),
        " from worker_descriptions union all select worker, cast(1 as bigint), ",
        time_text(checked_at),
        " from worker_readiness"
    );
    Ok(run!(on, MARKS, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
