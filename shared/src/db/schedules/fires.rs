//! The fire pass: one transaction that takes every due schedule no other daemon holds, requests what each fire
//! asks for with the overlap policy applied, records every fire and advances each schedule's next fire time.
//! Exactly one daemon fires each (schedule, fire time): the row lock and the `next_fire_at <= now` condition
//! decide it, and unique indexes on the runs' and pipeline runs' (schedule, fire time) back it up. One
//! transaction for the whole pass, so that twenty schedules due in the same second cost one commit, and their
//! runs become visible (and are claimed) together, after the last fire is written.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::super::{
    Database, Dialect, Result, descriptions,
    dialect::{DbTime, Sql, sql},
    on_pool, overrides,
    pipelines::{INSERT_PIPELINE, NewPipelineRun, advance_in_tx, bind_new_pipeline},
    runs::{INSERT, Links, NewRun, bind_new_run},
};
use crate::{
    ExplicitArgs, FireOutcome, OverlapPolicy, ResolvedConfig, Run, Schedule, TargetKind, WorkerDescription,
    runs::Resolver,
};

/// What a fire requests, resolved before the statements that write it.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A run of a worker.
    Run { worker: String, arguments: ExplicitArgs, config: Box<ResolvedConfig> },
    /// A pipeline run (its first step is requested with it).
    Pipeline { pipeline: String, steps: Vec<String>, configs: Vec<ResolvedConfig>, arguments: Value },
}

/// One fire as planned from the schedule and the clock: record it missed (or skipped for a reason known
/// beforehand), or request its target.
#[derive(Debug)]
pub(crate) struct Fire {
    pub at: DateTime<Utc>,
    /// `None`: recorded with `outcome` and `reason`, nothing requested.
    pub target: Option<Target>,
    pub outcome: FireOutcome,
    pub reason: Option<String>,
}

/// A schedule's fires in a pass, and its next fire time afterwards (`None`: it fires no more).
#[derive(Debug)]
pub(crate) struct Plan {
    pub fires: Vec<Fire>,
    pub next: Option<DateTime<Utc>>,
}

/// What a pass did for one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fired {
    pub schedule: String,
    pub expected: DateTime<Utc>,
    pub next: Option<DateTime<Utc>>,
    /// Fires recorded, by outcome: requested, skipped, missed, waiting.
    pub requested: u32,
    pub skipped: u32,
    pub missed: u32,
    pub waiting: u32,
    /// Fires the (schedule, fire time) unique indexes refused: a second fire that the row lock should already
    /// have prevented (counted, so that a test can tell it never happens).
    pub refused_by_constraint: u32,
}

impl Fired {
    /// Fire times this pass tried to fire.
    pub(crate) fn attempted(&self) -> u32 {
        self.requested + self.skipped + self.missed + self.waiting + self.refused_by_constraint
    }
}

/// A due schedule, with the database clock of the pass.
#[derive(sqlx::FromRow)]
struct Due {
    #[sqlx(flatten)]
    schedule: Schedule,
    now: DbTime,
}

/// What requesting a fire's target did.
enum Requested {
    Run(Uuid),
    Pipeline(Uuid),
    /// Refused: the target had this run (or pipeline run) in flight, or, with none, a unique index refused it.
    Blocked(Option<Uuid>),
}

/// In the transaction `$tx` (of `$db`), requests `$target` for the fire of `$schedule` at `$at`.
macro_rules! request_in_tx {
    ($tx:ident, $db:ident, $schedule:expr, $at:expr, $target:expr) => {{
        let schedule: &Schedule = $schedule;
        let by = format!("schedule:{}", schedule.name);
        let fire = Some((schedule.id, $at));
        match $target {
            Target::Run { worker, arguments, config } => {
                let new = NewRun {
                    id: Uuid::now_v7(),
                    worker,
                    requested_by: &by,
                    arguments,
                    config,
                    trace_context: None,
                    links: Links { fire, ..Links::default() },
                };
                let run: Option<Run> =
                    bind_new_run!(sqlx::query_as($db.text(INSERT)), &new).fetch_optional(&mut *$tx).await?;
                match run {
                    Some(run) => Requested::Run(run.id),
                    None => Requested::Blocked(
                        sqlx::query_scalar($db.text(sql!(
                            "select id from worker_runs where worker = $1 and state in ('queued', 'running')"
                        )))
                        .bind(worker)
                        .fetch_optional(&mut *$tx)
                        .await?,
                    ),
                }
            }
            Target::Pipeline { pipeline, steps, configs, arguments } => {
                let new =
                    NewPipelineRun { id: Uuid::now_v7(), pipeline, steps, configs, arguments, requested_by: &by, fire };
                let id: Option<Uuid> = bind_new_pipeline!(sqlx::query_scalar($db.text(INSERT_PIPELINE)), &new)
                    .fetch_optional(&mut *$tx)
                    .await?;
                match id {
                    Some(id) => {
                        advance_in_tx!($tx, $db, id);
                        Requested::Pipeline(id)
                    }
                    None => Requested::Blocked(
                        sqlx::query_scalar(
                            $db.text(sql!("select id from pipeline_runs where pipeline = $1 and state = 'running'")),
                        )
                        .bind(pipeline)
                        .fetch_optional(&mut *$tx)
                        .await?,
                    ),
                }
            }
        }
    }};
}

/// Fires up to `limit` due schedules (database clock) as `daemon`, in one transaction: takes every due schedule
/// no other daemon holds (PostgreSQL: `for update skip locked`, so a daemon never waits for another's pass;
/// SQLite: the write lock), reads the overrides and descriptions that the targets resolve against, asks `plan`
/// what each schedule's fires are, and writes them. Returns what it did for each schedule it took (none when
/// another daemon holds or has just fired them all).
pub(crate) async fn fire_due(
    db: &Database,
    daemon: Uuid,
    limit: u32,
    mut plan: impl FnMut(&Schedule, DateTime<Utc>, &Resolver) -> Plan,
) -> Result<Vec<Fired>> {
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
    const RECORD: Sql = sql!(
        "insert into schedule_fires \
             (schedule_id, fire_at, outcome, run_id, pipeline_run_id, reason, blocked_by, fired_by, recorded_at) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, ",
        clock,
        ") on conflict do nothing"
    );
    const ADVANCE: Sql = sql!("update schedules set next_fire_at = $2, waiting_fire_at = $3 where id = $1");
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let due: Vec<Due> = sqlx::query_as(db.text(TAKE)).bind(i64::from(limit)).fetch_all(&mut *tx).await?;
        let Some(now) = due.first().map(|d| d.now.0) else {
            tx.rollback().await?;
            return Ok(Vec::new());
        };
        let overrides: Vec<crate::Override> = sqlx::query_as(db.text(overrides::LIST)).fetch_all(&mut *tx).await?;
        let descriptions: Vec<WorkerDescription> =
            sqlx::query_as(db.text(descriptions::LIST)).fetch_all(&mut *tx).await?;
        let resolver = Resolver::new(overrides, descriptions);
        let mut pass = Vec::with_capacity(due.len());
        for Due { schedule, .. } in &due {
            let Some(expected) = schedule.next_fire_at else { continue };
            let Plan { fires, next } = plan(schedule, now, &resolver);
            let mut waiting = schedule.waiting_fire_at;
            let mut fired = Fired {
                schedule: schedule.name.clone(),
                expected,
                next,
                requested: 0,
                skipped: 0,
                missed: 0,
                waiting: 0,
                refused_by_constraint: 0,
            };
            for fire in &fires {
                let (mut outcome, mut reason) = (fire.outcome, fire.reason.clone());
                let (mut run_id, mut pipeline_run_id, mut blocked_by) = (None, None, None);
                if let Some(target) = &fire.target {
                    match request_in_tx!(tx, db, schedule, fire.at, target) {
                        Requested::Run(id) => run_id = Some(id),
                        Requested::Pipeline(id) => pipeline_run_id = Some(id),
                        Requested::Blocked(None) => {
                            // Nothing in flight refused it: the (schedule, fire time) index did.
                            tracing::error!(schedule = %schedule.name, fire_at = %fire.at,
                                "a second fire of the same time was refused by the database's unique index");
                            fired.refused_by_constraint += 1;
                            continue;
                        }
                        Requested::Blocked(Some(blocking)) => {
                            blocked_by = Some(blocking);
                            (outcome, reason, waiting) = overlapped(schedule, fire.at, blocking, waiting);
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
            pass.push(fired);
        }
        tx.commit().await?;
        Ok(pass)
    })
}

/// The outcome of a fire whose target had `blocking` in flight, by the schedule's overlap policy, with the fire
/// that waits afterwards (`queue` keeps at most one waiting).
fn overlapped(
    schedule: &Schedule,
    at: DateTime<Utc>,
    blocking: Uuid,
    waiting: Option<DateTime<Utc>>,
) -> (FireOutcome, Option<String>, Option<DateTime<Utc>>) {
    let kind = match schedule.target_kind {
        TargetKind::Worker => "worker",
        TargetKind::Pipeline => "pipeline",
    };
    let what = format!("{kind} {} had run {blocking} in flight", schedule.target);
    match (schedule.overlap, waiting) {
        (OverlapPolicy::Queue, None) => {
            (FireOutcome::Waiting, Some(format!("{what}; it runs when that ends")), Some(at))
        }
        (OverlapPolicy::Queue, Some(w)) => {
            let w = w.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            (FireOutcome::Skipped, Some(format!("{what} and the fire of {w} waits already")), waiting)
        }
        (OverlapPolicy::Skip, _) => (FireOutcome::Skipped, Some(what), waiting),
    }
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

/// Requests the fire of `schedule` that waits for its target (`target`, resolved for that fire time), if the
/// target is free now; `true` when it was requested.
pub(crate) async fn release_waiting(
    db: &Database,
    schedule: &Schedule,
    at: DateTime<Utc>,
    target: &Target,
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
        let (run_id, pipeline_run_id) = match request_in_tx!(tx, db, schedule, at, target) {
            Requested::Run(id) => (Some(id), None),
            Requested::Pipeline(id) => (None, Some(id)),
            Requested::Blocked(_) => return Ok(false),
        };
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
