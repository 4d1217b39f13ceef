//! The statements of a fire pass and of a fire that waited: take the due schedules (locked, skipping those
//! another daemon holds), record each fire, advance a schedule's next fire time, and release a waiting fire.
//! Which fires a pass makes, and what each requests, is decided by `scrinalia_shared::schedules`.

use chrono::{DateTime, Utc};
use scrinalia_wire::{FireOutcome, Schedule};
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    run,
};

/// A due schedule, with the database clock of the pass.
#[derive(sqlx::FromRow)]
struct Due {
    #[sqlx(flatten)]
    schedule: Schedule,
    now: DbTime,
}

/// Takes up to `limit` schedules due now (database clock), oldest fire first, for the transaction `on`
/// (PostgreSQL: `for update skip locked`, so a daemon never waits for another's pass; SQLite: the write lock):
/// the schedules and the clock they were taken at (`None` when none was due).
pub async fn take_due(on: impl Into<On<'_>>, limit: u32) -> Result<Option<(Vec<Schedule>, DateTime<Utc>)>> {
    const TAKE: Sql = sql!(
        "select ",
        schedule_columns!(),
        ", ",
        now,
        " as now from schedules where enabled and next_fire_at <= ",
        now,
        " order by next_fire_at limit $1",
        skip_locked
    );
    let due: Vec<Due> = run!(on, TAKE, |pool, sql| sqlx::query_as(sql).bind(i64::from(limit)).fetch_all(pool).await)?;
    let Some(now) = due.first().map(|d| d.now.0) else { return Ok(None) };
    Ok(Some((due.into_iter().map(|d| d.schedule).collect(), now)))
}

/// One fire as recorded in a schedule's history.
#[derive(Debug, Clone, Copy)]
pub struct NewFire<'a> {
    /// The schedule.
    pub schedule: Uuid,
    /// The fire time.
    pub at: DateTime<Utc>,
    /// What became of it.
    pub outcome: FireOutcome,
    /// The run it requested.
    pub run: Option<Uuid>,
    /// The pipeline run it requested.
    pub pipeline_run: Option<Uuid>,
    /// Why it was skipped, missed, or waits.
    pub reason: Option<&'a str>,
    /// The run in flight that kept it from requesting.
    pub blocked_by: Option<Uuid>,
    /// The daemon that fired it.
    pub fired_by: Uuid,
}

/// Records a fire; `false` when that (schedule, fire time) was recorded already (a unique index refused it).
pub async fn record(on: impl Into<On<'_>>, fire: &NewFire<'_>) -> Result<bool> {
    const RECORD: Sql = sql!(
        "insert into schedule_fires \
             (schedule_id, fire_at, outcome, run_id, pipeline_run_id, reason, blocked_by, fired_by, recorded_at) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, ",
        clock,
        ") on conflict do nothing"
    );
    let recorded = run!(on, RECORD, |pool, sql| sqlx::query(sql)
        .bind(fire.schedule)
        .bind(DbTime(fire.at))
        .bind(fire.outcome)
        .bind(fire.run)
        .bind(fire.pipeline_run)
        .bind(fire.reason)
        .bind(fire.blocked_by)
        .bind(fire.fired_by)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(recorded == 1)
}

/// Moves schedule `id` on: its next fire time, and the fire that waits for its target (if any).
pub async fn advance(
    on: impl Into<On<'_>>,
    id: Uuid,
    next: Option<DateTime<Utc>>,
    waiting: Option<DateTime<Utc>>,
) -> Result<()> {
    const ADVANCE: Sql = sql!("update schedules set next_fire_at = $2, waiting_fire_at = $3 where id = $1");
    run!(on, ADVANCE, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(next.map(DbTime))
        .bind(waiting.map(DbTime))
        .execute(pool)
        .await
        .map(drop))
}

/// Seconds until the next fire of any schedule, until the first queued run's backoff ends and until the first
/// queued request expires (negative when already due); `None` for each when there is none. One cheap statement,
/// on three partial indexes.
pub async fn next_due(on: impl Into<On<'_>>) -> Result<(Option<f64>, Option<f64>, Option<f64>)> {
    const NEXT: Sql = sql!(
        "select -",
        seconds_since(next_fire),
        ", -",
        seconds_since(first_not_before),
        ", -",
        seconds_since(first_expiry),
        " from (select (select min(next_fire_at) from schedules where enabled) as next_fire, \
             (select min(not_before) from worker_runs where state = 'queued' and not_before is not null) \
             as first_not_before, \
             (select min(expires_at) from worker_runs where state = 'queued' and expires_at is not null) \
             as first_expiry) as m"
    );
    run!(on, NEXT, |pool, sql| sqlx::query_as(sql).fetch_one(pool).await)
}

/// The schedules with a fire waiting for their target to be free.
pub async fn waiting(on: impl Into<On<'_>>) -> Result<Vec<Schedule>> {
    const WAITING: Sql = sql!(
        "select ",
        schedule_columns!(),
        " from schedules where waiting_fire_at is not null and enabled order by waiting_fire_at"
    );
    run!(on, WAITING, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)
}

/// Takes schedule `id` for the transaction `on` if its fire of `at` still waits (PostgreSQL: skipping it when
/// another daemon holds it); whether it did.
pub async fn take_waiting(on: impl Into<On<'_>>, id: Uuid, at: DateTime<Utc>) -> Result<bool> {
    const TAKE: Sql = sql!("select id from schedules where id = $1 and waiting_fire_at = $2", skip_locked);
    let taken: Option<Uuid> =
        run!(on, TAKE, |pool, sql| sqlx::query_scalar(sql).bind(id).bind(DbTime(at)).fetch_optional(pool).await)?;
    Ok(taken.is_some())
}

/// Records that no fire of schedule `id` waits any more.
pub async fn clear_waiting(on: impl Into<On<'_>>, id: Uuid) -> Result<()> {
    const CLEARED: Sql = sql!("update schedules set waiting_fire_at = null where id = $1");
    run!(on, CLEARED, |pool, sql| sqlx::query(sql).bind(id).execute(pool).await.map(drop))
}

/// Records that the fire of schedule `id` at `at`, which waited for its target, requested `run` or
/// `pipeline_run` once the target was free.
pub async fn mark_requested_after_waiting(
    on: impl Into<On<'_>>,
    id: Uuid,
    at: DateTime<Utc>,
    (run, pipeline_run): (Option<Uuid>, Option<Uuid>),
) -> Result<()> {
    const REQUESTED: Sql = sql!(
        "update schedule_fires set outcome = 'requested', run_id = $3, pipeline_run_id = $4, \
             reason = 'waited for ' || coalesce(",
        uuid_text(blocked_by),
        ", 'the run in flight') || ' to end' \
         where schedule_id = $1 and fire_at = $2"
    );
    run!(on, REQUESTED, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(DbTime(at))
        .bind(run)
        .bind(pipeline_run)
        .execute(pool)
        .await
        .map(drop))
}
