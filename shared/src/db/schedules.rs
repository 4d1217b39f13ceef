//! The statements of `schedules`, their append-only audit trail `schedule_audit`, and their fire history
//! `schedule_fires`; the firing itself is in `fires`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::{
    Database, Dialect, Result,
    dialect::{DbTime, Sql, sql},
    on_pool,
};
use crate::{Schedule, ScheduleAction, ScheduleAuditEntry, ScheduleFire};

macro_rules! schedule_columns {
    ($d:ident;) => {
        "id, name, target_kind, target, cron, time_zone, arguments, enabled, overlap, missed, next_fire_at, \
         waiting_fire_at, created_by, created_at, updated_by, updated_at"
    };
}

macro_rules! fire_columns {
    ($d:ident;) => {
        "schedule_id, fire_at, outcome, run_id, pipeline_run_id, reason, blocked_by, fired_by, recorded_at"
    };
}

mod fires;

pub(crate) use fires::{Fire, Plan, Target, fire_due, next_due, release_waiting, waiting};

const GET: Sql = sql!("select ", schedule_columns!(), " from schedules where id = $1");
const BY_NAME: Sql = sql!("select ", schedule_columns!(), " from schedules where name = $1");

/// One schedule, by id.
pub(crate) async fn get(db: &Database, id: Uuid) -> Result<Option<Schedule>> {
    Ok(on_pool!(db, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// One schedule, by name.
pub(crate) async fn by_name(db: &Database, name: &str) -> Result<Option<Schedule>> {
    Ok(on_pool!(db, BY_NAME, |pool, sql| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?)
}

/// Every schedule, by name.
pub(crate) async fn list(db: &Database) -> Result<Vec<Schedule>> {
    const LIST: Sql = sql!("select ", schedule_columns!(), " from schedules order by name");
    Ok(on_pool!(db, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// A schedule as written by a person: everything but its history.
pub(crate) struct ScheduleRow {
    pub name: String,
    pub target_kind: crate::TargetKind,
    pub target: String,
    pub cron: String,
    pub time_zone: String,
    pub arguments: Value,
    pub enabled: bool,
    pub overlap: crate::OverlapPolicy,
    pub missed: crate::MissedPolicy,
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// Why a schedule write was refused by the database.
#[derive(Debug)]
pub(crate) enum WriteRefused {
    /// Another schedule has this name.
    NameTaken,
    /// No schedule has this id.
    NotFound,
}

/// Writes a schedule (creating it when `before` is `None`, replacing it otherwise, deleting it when `row` is
/// `None`) and appends the change to the audit trail, in one transaction under the schedule's lock. `next` gets
/// the schedule as it is now and returns the row to write, or refuses.
pub(crate) async fn change<E>(
    db: &Database,
    id: Uuid,
    actor: &str,
    reason: &str,
    next: impl Fn(Option<&Schedule>) -> Result<(ScheduleAction, Option<ScheduleRow>), E>,
) -> Result<Result<Result<Option<Schedule>, WriteRefused>, E>> {
    const UPSERT: Sql = sql!(
        "insert into schedules (id, name, target_kind, target, cron, time_zone, arguments, enabled, overlap, missed, \
             next_fire_at, created_by, updated_by) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) \
         on conflict (id) do update set name = excluded.name, target_kind = excluded.target_kind, \
             target = excluded.target, cron = excluded.cron, time_zone = excluded.time_zone, \
             arguments = excluded.arguments, enabled = excluded.enabled, overlap = excluded.overlap, \
             missed = excluded.missed, next_fire_at = excluded.next_fire_at, \
             waiting_fire_at = case when excluded.enabled then schedules.waiting_fire_at else null end, \
             updated_by = excluded.updated_by, updated_at = ",
        now,
        " returning ",
        schedule_columns!()
    );
    const DELETE: Sql = sql!("delete from schedules where id = $1");
    const AUDIT: Sql = sql!(
        "insert into schedule_audit (schedule_id, actor, action, before, after, reason) values ($1, $2, $3, $4, $5, $6)"
    );
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        Dialect::lock(&mut tx, &format!("schedule.{id}")).await?;
        let current: Option<Schedule> = sqlx::query_as(db.text(GET)).bind(id).fetch_optional(&mut *tx).await?;
        let (action, row) = match next(current.as_ref()) {
            Ok(next) => next,
            Err(e) => return Ok(Err(e)),
        };
        if current.is_none() && action != ScheduleAction::Create {
            return Ok(Ok(Err(WriteRefused::NotFound)));
        }
        let written: Option<Schedule> = match &row {
            Some(row) => {
                let taken: Option<Uuid> = sqlx::query_scalar(db.text(sql!("select id from schedules where name = $1")))
                    .bind(&row.name)
                    .fetch_optional(&mut *tx)
                    .await?;
                if taken.is_some_and(|other| other != id) {
                    return Ok(Ok(Err(WriteRefused::NameTaken)));
                }
                Some(
                    sqlx::query_as(db.text(UPSERT))
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
                        .fetch_one(&mut *tx)
                        .await?,
                )
            }
            None => {
                sqlx::query(db.text(DELETE)).bind(id).execute(&mut *tx).await?;
                None
            }
        };
        // A fire that waited for its target does not wait past a pause or a deletion: it is recorded skipped.
        if let Some(waiting) = current.as_ref().and_then(|c| c.waiting_fire_at)
            && written.as_ref().is_none_or(|w| !w.enabled)
        {
            const DROPPED: Sql = sql!(
                "update schedule_fires set outcome = 'skipped', \
                     reason = 'it waited for its target when the schedule was ' || $3 \
                 where schedule_id = $1 and fire_at = $2 and outcome = 'waiting'"
            );
            let how = if written.is_some() { "paused" } else { "deleted" };
            sqlx::query(db.text(DROPPED)).bind(id).bind(DbTime(waiting)).bind(how).execute(&mut *tx).await?;
        }
        let as_json = |s: &Option<Schedule>| s.as_ref().and_then(|s| serde_json::to_value(s).ok());
        sqlx::query(db.text(AUDIT))
            .bind(id)
            .bind(actor)
            .bind(action)
            .bind(as_json(&current).map(Json))
            .bind(as_json(&written).map(Json))
            .bind(reason)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Ok(Ok(written)))
    })
}

/// A schedule's audit trail, newest first.
pub(crate) async fn audit_trail(db: &Database, id: Uuid, limit: u32) -> Result<Vec<ScheduleAuditEntry>> {
    const TRAIL: Sql = sql!(
        "select id, schedule_id, actor, at, action, before, after, reason from schedule_audit \
         where schedule_id = $1 order by id desc limit $2"
    );
    Ok(on_pool!(db, TRAIL, |pool, sql| sqlx::query_as(sql).bind(id).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// A schedule's fires, newest first.
pub(crate) async fn fires(db: &Database, id: Uuid, limit: u32) -> Result<Vec<ScheduleFire>> {
    const FIRES: Sql =
        sql!("select ", fire_columns!(), " from schedule_fires where schedule_id = $1 order by fire_at desc limit $2");
    Ok(on_pool!(db, FIRES, |pool, sql| sqlx::query_as(sql).bind(id).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The last fire of each schedule that fired.
pub(crate) async fn last_fires(db: &Database) -> Result<Vec<ScheduleFire>> {
    const LAST: Sql = sql!(
        "select ",
        fire_columns!(),
        " from schedule_fires f where fire_at = (select max(g.fire_at) from schedule_fires g \
             where g.schedule_id = f.schedule_id) and schedule_id in (select id from schedules)"
    );
    Ok(on_pool!(db, LAST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// What the SQLite change feed compares between two looks at the schedules: each one's last change and next
/// fire (a fire moves it).
pub(crate) async fn marks(db: &Database) -> Result<Vec<(Uuid, String)>> {
    const MARKS: Sql = sql!(
        "select id, ",
        time_text(updated_at),
        " || '/' || coalesce(",
        time_text(next_fire_at),
        ", '-') || '/' || coalesce(",
        time_text(waiting_fire_at),
        ", '-') from schedules"
    );
    Ok(on_pool!(db, MARKS, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
