//! The statements of `schedules`, their append-only audit trail `schedule_audit`, and their fire history
//! `schedule_fires`; the firing itself is in `fires`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::{
    MissedPolicy, OverlapPolicy, Schedule, ScheduleAction, ScheduleAuditEntry, ScheduleFire, TargetKind,
};

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    run,
};

macro_rules! schedule_columns {
    ($d:ident;) => {
        "id, name, target_kind, target, cron, time_zone, arguments, enabled, overlap, missed, next_fire_at, \
         waiting_fire_at, created_by, created_at, updated_by, updated_at, tags"
    };
}

macro_rules! fire_columns {
    ($d:ident;) => {
        "schedule_id, fire_at, outcome, run_id, pipeline_run_id, reason, blocked_by, fired_by, recorded_at"
    };
}

pub mod fires;

const GET: Sql = sql!("select ", schedule_columns!(), " from schedules where id = $1");
const BY_NAME: Sql = sql!("select ", schedule_columns!(), " from schedules where name = $1");

/// One schedule, by id.
pub async fn get(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<Schedule>> {
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// One schedule, by name.
pub async fn by_name(on: impl Into<On<'_>>, name: &str) -> Result<Option<Schedule>> {
    Ok(run!(on, BY_NAME, |pool, sql| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?)
}

/// Every schedule, by name.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<Schedule>> {
    const LIST: Sql = sql!("select ", schedule_columns!(), " from schedules order by name");
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// A schedule as written by a person: everything but its history.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    /// Its unique name.
    pub name: String,
    /// What it fires: a worker or a pipeline.
    pub target_kind: TargetKind,
    /// The worker or pipeline.
    pub target: String,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub time_zone: String,
    /// The arguments of what it requests.
    pub arguments: Value,
    /// Whether it fires.
    pub enabled: bool,
    /// What a fire does while its target has a run in flight.
    pub overlap: OverlapPolicy,
    /// What happens to fires no daemon was running for.
    pub missed: MissedPolicy,
    /// When it fires next (`None`: never again).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The tags of the runs it requests.
    pub tags: Vec<String>,
}

/// Writes schedule `id` as `row` says (inserting it when it is new), as `actor`; the schedule as stored. A
/// schedule paused here lets go of a fire that waited for its target.
pub async fn upsert(on: impl Into<On<'_>>, id: Uuid, row: &ScheduleRow, actor: &str) -> Result<Schedule> {
    const UPSERT: Sql = sql!(
        "insert into schedules (id, name, target_kind, target, cron, time_zone, arguments, enabled, overlap, missed, \
             next_fire_at, created_by, updated_by, tags) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13) \
         on conflict (id) do update set name = excluded.name, target_kind = excluded.target_kind, \
             target = excluded.target, cron = excluded.cron, time_zone = excluded.time_zone, \
             arguments = excluded.arguments, enabled = excluded.enabled, overlap = excluded.overlap, \
             missed = excluded.missed, next_fire_at = excluded.next_fire_at, tags = excluded.tags, \
             waiting_fire_at = case when excluded.enabled then schedules.waiting_fire_at else null end, \
             updated_by = excluded.updated_by, updated_at = ",
        now,
        " returning ",
        schedule_columns!()
    );
    run!(on, UPSERT, |pool, sql| sqlx::query_as(sql)
        .bind(id)
        .bind(&row.name)
        .bind(row.target_kind)
        .bind(&row.target)
        .bind(&row.cron)
        .bind(&row.time_zone)
        .bind(Json(&row.arguments))
        .bind(row.enabled)
        .bind(row.overlap)
        .bind(row.missed)
        .bind(row.next_fire_at.map(DbTime))
        .bind(actor)
        .bind(Json(&row.tags))
        .fetch_one(pool)
        .await)
}

/// Deletes schedule `id` (its fires and audit trail stay).
pub async fn delete(on: impl Into<On<'_>>, id: Uuid) -> Result<()> {
    const DELETE: Sql = sql!("delete from schedules where id = $1");
    run!(on, DELETE, |pool, sql| sqlx::query(sql).bind(id).execute(pool).await.map(drop))
}

/// Records the fire of schedule `id` at `waiting` that waited for its target as skipped, because the schedule
/// was `how` ("paused", "deleted").
pub async fn drop_waiting_fire(on: impl Into<On<'_>>, id: Uuid, waiting: DateTime<Utc>, how: &str) -> Result<()> {
    const DROPPED: Sql = sql!(
        "update schedule_fires set outcome = 'skipped', \
             reason = 'it waited for its target when the schedule was ' || $3 \
         where schedule_id = $1 and fire_at = $2 and outcome = 'waiting'"
    );
    run!(on, DROPPED, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(DbTime(waiting))
        .bind(how)
        .execute(pool)
        .await
        .map(drop))
}

/// Appends a change of schedule `id` to its audit trail (`before` and `after` as JSON; absent when it did not
/// exist).
pub async fn audit(
    on: impl Into<On<'_>>,
    id: Uuid,
    actor: &str,
    action: ScheduleAction,
    (before, after): (Option<&Value>, Option<&Value>),
    reason: &str,
) -> Result<()> {
    const AUDIT: Sql = sql!(
        "insert into schedule_audit (schedule_id, actor, action, before, after, reason) values ($1, $2, $3, $4, $5, $6)"
    );
    run!(on, AUDIT, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(actor)
        .bind(action)
        .bind(before.map(Json))
        .bind(after.map(Json))
        .bind(reason)
        .execute(pool)
        .await
        .map(drop))
}

/// A schedule's audit trail, newest first.
pub async fn audit_trail(on: impl Into<On<'_>>, id: Uuid, limit: u32) -> Result<Vec<ScheduleAuditEntry>> {
    const TRAIL: Sql = sql!(
        "select id, schedule_id, actor, at, action, before, after, reason from schedule_audit \
         where schedule_id = $1 order by id desc limit $2"
    );
    Ok(run!(on, TRAIL, |pool, sql| sqlx::query_as(sql).bind(id).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// A schedule's fires, newest first.
pub async fn fires(on: impl Into<On<'_>>, id: Uuid, limit: u32) -> Result<Vec<ScheduleFire>> {
    const FIRES: Sql =
        sql!("select ", fire_columns!(), " from schedule_fires where schedule_id = $1 order by fire_at desc limit $2");
    Ok(run!(on, FIRES, |pool, sql| sqlx::query_as(sql).bind(id).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The last fire of each schedule that fired.
pub async fn last_fires(on: impl Into<On<'_>>) -> Result<Vec<ScheduleFire>> {
    const LAST: Sql = sql!(
        "select ",
        fire_columns!(),
        " from schedule_fires f where fire_at = (select max(g.fire_at) from schedule_fires g \
             where g.schedule_id = f.schedule_id) and schedule_id in (select id from schedules)"
    );
    Ok(run!(on, LAST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// What the SQLite change feed compares between two looks at the schedules: each one's last change and next
/// fire (a fire moves it).
pub async fn marks(on: impl Into<On<'_>>) -> Result<Vec<(Uuid, String)>> {
    const MARKS: Sql = sql!(
        "select id, ",
        time_text(updated_at),
        " || '/' || coalesce(",
        time_text(next_fire_at),
        ", '-') || '/' || coalesce(",
        time_text(waiting_fire_at),
        ", '-') from schedules"
    );
    Ok(run!(on, MARKS, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
