//! The statements of `schedules`, their append-only audit trail `schedule_audit`, and their fire history
//! `schedule_fires`; and the fire itself: one transaction per schedule that requests what is due and advances
//! its next fire time, guarded so that exactly one daemon fires each (schedule, fire time).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::{
    Database, Dialect, Result,
    dialect::{DbTime, Sql, sql},
    on_pool,
    pipelines::{INSERT_PIPELINE, NewPipelineRun, advance_in_tx, bind_new_pipeline},
    runs::{INSERT, NewRun, bind_new_run},
};
use crate::{FireOutcome, Run, Schedule, ScheduleAction, ScheduleAuditEntry, ScheduleFire};

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

/// The schedules due now (database clock), the earliest first, and the clock.
pub(crate) async fn due(db: &Database, limit: u32) -> Result<(Vec<Schedule>, DateTime<Utc>)> {
    const DUE: Sql = sql!(
        "select ",
        schedule_columns!(),
        " from schedules where enabled and next_fire_at <= ",
        now,
        " order by next_fire_at limit $1"
    );
    let now = db.now().await?;
    let due = on_pool!(db, DUE, |pool, sql| sqlx::query_as(sql).bind(i64::from(limit)).fetch_all(pool).await)?;
    Ok((due, now))
}

/// Seconds until the next fire of any schedule and until the first queued run's backoff ends (negative when
/// already due); `None` for either when there is none. One cheap statement, on two partial indexes.
pub(crate) async fn next_due(db: &Database) -> Result<(Option<f64>, Option<f64>)> {
    const NEXT: Sql = sql!(
        "select -",
        seconds_since(next_fire),
        ", -",
        seconds_since(first_not_before),
        " from (select (select min(next_fire_at) from schedules where enabled) as next_fire, \
             (select min(not_before) from worker_runs where state = 'queued' and not_before is not null) \
             as first_not_before) as m"
    );
    Ok(on_pool!(db, NEXT, |pool, sql| sqlx::query_as(sql).fetch_one(pool).await)?)
}

/// The schedules with a fire waiting for their target to be free.
pub(crate) async fn waiting(db: &Database) -> Result<Vec<Schedule>> {
    const WAITING: Sql = sql!(
        "select ",
        schedule_columns!(),
        " from schedules where waiting_fire_at is not null and enabled order by waiting_fire_at"
    );
    Ok(on_pool!(db, WAITING, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// What to request for one fire.
pub(crate) enum Request<'a> {
    /// A run of a worker.
    Run(NewRun<'a>),
    /// A pipeline run (its first step is requested with it).
    Pipeline(NewPipelineRun<'a>),
}

/// One fire as the daemon decided it before the transaction: record it missed (or skipped for a reason known
/// beforehand), or request something.
pub(crate) struct Fire<'a> {
    pub at: DateTime<Utc>,
    /// `None`: recorded with `outcome` and `reason`, nothing requested.
    pub request: Option<Request<'a>>,
    pub outcome: FireOutcome,
    pub reason: Option<String>,
}

/// What a fire transaction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fired {
    /// Whether this daemon held the schedule at the expected fire time (false: another daemon fired it first,
    /// or it was changed; nothing was written).
    pub held: bool,
    /// Fires recorded, by outcome: requested, skipped, missed, waiting.
    pub requested: u32,
    pub skipped: u32,
    pub missed: u32,
    pub waiting: u32,
    /// Fires the (schedule, fire time) unique indexes refused: a second fire that the row guard should already
    /// have prevented (counted, so that a test can tell it never happens).
    pub refused_by_constraint: u32,
}

const RECORD: Sql = sql!(
    "insert into schedule_fires (schedule_id, fire_at, outcome, run_id, pipeline_run_id, reason, blocked_by, fired_by) \
     values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict do nothing"
);

/// Fires `schedule`, expected due at `expected`: in one transaction, takes the schedule's row only if it is still
/// due at that time (PostgreSQL: `for update skip locked`, so a daemon never waits for another's fire), records
/// each of `fires` (requesting what they request, with the overlap policy applied against whatever is in
/// flight), and moves the next fire time to `next`.
pub(crate) async fn fire(
    db: &Database,
    schedule: &Schedule,
    expected: DateTime<Utc>,
    fires: &[Fire<'_>],
    next: Option<DateTime<Utc>>,
    daemon: Uuid,
) -> Result<Fired> {
    const TAKE: Sql =
        sql!("select waiting_fire_at from schedules where id = $1 and enabled and next_fire_at = $2", skip_locked);
    const ADVANCE: Sql = sql!("update schedules set next_fire_at = $2, waiting_fire_at = $3 where id = $1");
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let taken: Option<Option<DbTime>> =
            sqlx::query_scalar(db.text(TAKE)).bind(schedule.id).bind(DbTime(expected)).fetch_optional(&mut *tx).await?;
        let Some(mut waiting) = taken.map(|w| w.map(|t| t.0)) else { return Ok(Fired::default()) };
        let mut fired = Fired { held: true, ..Fired::default() };
        for fire in fires {
            let (mut outcome, mut reason) = (fire.outcome, fire.reason.clone());
            let (mut run_id, mut pipeline_run_id, mut blocked_by) = (None, None, None::<Uuid>);
            match &fire.request {
                None => {}
                Some(Request::Run(new)) => {
                    let run: Option<Run> =
                        bind_new_run!(sqlx::query_as(db.text(INSERT)), new).fetch_optional(&mut *tx).await?;
                    run_id = run.map(|r| r.id);
                    if run_id.is_none() {
                        blocked_by = sqlx::query_scalar(db.text(sql!(
                            "select id from worker_runs where worker = $1 and state in ('queued', 'running')"
                        )))
                        .bind(new.worker)
                        .fetch_optional(&mut *tx)
                        .await?;
                    }
                }
                Some(Request::Pipeline(new)) => {
                    let id: Option<Uuid> = bind_new_pipeline!(sqlx::query_scalar(db.text(INSERT_PIPELINE)), new)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if let Some(id) = id {
                        advance_in_tx!(tx, db, id);
                    } else {
                        blocked_by = sqlx::query_scalar(
                            db.text(sql!("select id from pipeline_runs where pipeline = $1 and state = 'running'")),
                        )
                        .bind(new.pipeline)
                        .fetch_optional(&mut *tx)
                        .await?;
                    }
                    pipeline_run_id = id;
                }
            }
            if fire.request.is_some() && run_id.is_none() && pipeline_run_id.is_none() {
                match blocked_by {
                    None => {
                        // Nothing in flight refused it: the (schedule, fire time) index did.
                        tracing::error!(schedule = %schedule.name, fire_at = %fire.at,
                            "a second fire of the same time was refused by the database's unique index");
                        fired.refused_by_constraint += 1;
                        continue;
                    }
                    Some(blocking) => {
                        let what = match schedule.target_kind {
                            crate::TargetKind::Worker => {
                                format!("worker {} had run {blocking} in flight", schedule.target)
                            }
                            crate::TargetKind::Pipeline => {
                                format!("pipeline {} had run {blocking} in flight", schedule.target)
                            }
                        };
                        if schedule.overlap == crate::OverlapPolicy::Queue && waiting.is_none() {
                            (outcome, reason) = (FireOutcome::Waiting, Some(format!("{what}; it runs when that ends")));
                            waiting = Some(fire.at);
                        } else if let Some(w) = waiting.filter(|_| schedule.overlap == crate::OverlapPolicy::Queue) {
                            let w = w.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                            (outcome, reason) =
                                (FireOutcome::Skipped, Some(format!("{what} and the fire of {w} waits already")));
                        } else {
                            (outcome, reason) = (FireOutcome::Skipped, Some(what));
                        }
                    }
                }
            }
            let recorded = sqlx::query(db.text(RECORD))
                .bind(schedule.id)
                .bind(DbTime(fire.at))
                .bind(outcome)
                .bind(run_id)
                .bind(pipeline_run_id)
                .bind(&reason)
                .bind(blocked_by)
                .bind(daemon)
                .execute(&mut *tx)
                .await?;
            if recorded.rows_affected() == 0 {
                fired.refused_by_constraint += 1;
                continue;
            }
            match outcome {
                FireOutcome::Requested => fired.requested += 1,
                FireOutcome::Skipped => fired.skipped += 1,
                FireOutcome::Missed => fired.missed += 1,
                FireOutcome::Waiting => fired.waiting += 1,
            }
        }
        sqlx::query(db.text(ADVANCE))
            .bind(schedule.id)
            .bind(next.map(DbTime))
            .bind(waiting.map(DbTime))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(fired)
    })
}

/// Requests the fire of `schedule` that waits for its target (`request`, made for that fire time), if the
/// target is free now; `true` when it was requested.
pub(crate) async fn release_waiting(
    db: &Database,
    schedule: &Schedule,
    at: DateTime<Utc>,
    request: &Request<'_>,
) -> Result<bool> {
    const TAKE: Sql = sql!("select id from schedules where id = $1 and waiting_fire_at = $2", skip_locked);
    const RELEASED: Sql = sql!("update schedules set waiting_fire_at = null where id = $1");
    const REQUESTED: Sql = sql!(
        "update schedule_fires set outcome = 'requested', run_id = $3, pipeline_run_id = $4, \
             reason = 'waited for ' || coalesce(",
        uuid_text(blocked_by),
        ", 'the run in flight') || ' to end' \
         where schedule_id = $1 and fire_at = $2"
    );
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let taken: Option<Uuid> =
            sqlx::query_scalar(db.text(TAKE)).bind(schedule.id).bind(DbTime(at)).fetch_optional(&mut *tx).await?;
        if taken.is_none() {
            return Ok(false);
        }
        let (run_id, pipeline_run_id) = match request {
            Request::Run(new) => {
                let run: Option<Run> =
                    bind_new_run!(sqlx::query_as(db.text(INSERT)), new).fetch_optional(&mut *tx).await?;
                (run.map(|r| r.id), None)
            }
            Request::Pipeline(new) => {
                let id: Option<Uuid> = bind_new_pipeline!(sqlx::query_scalar(db.text(INSERT_PIPELINE)), new)
                    .fetch_optional(&mut *tx)
                    .await?;
                if let Some(id) = id {
                    advance_in_tx!(tx, db, id);
                }
                (None, id)
            }
        };
        if run_id.is_none() && pipeline_run_id.is_none() {
            return Ok(false);
        }
        sqlx::query(db.text(RELEASED)).bind(schedule.id).execute(&mut *tx).await?;
        sqlx::query(db.text(REQUESTED))
            .bind(schedule.id)
            .bind(DbTime(at))
            .bind(run_id)
            .bind(pipeline_run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    })
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
