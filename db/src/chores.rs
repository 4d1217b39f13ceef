//! The statements of `worker_chores`: which daemon describes, counts or checks which worker, when, under a lease
//! on the database clock, so that each chore of a worker is done by one daemon at a time across all daemons.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::{Chore, ChoreKind, Named};

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    lease, run,
};

/// How often a daemon's chores come due.
#[derive(Debug, Clone, Copy)]
pub struct ChoreIntervals {
    /// A count is due this long after the last one started.
    pub count: Duration,
    /// A check is due this long after the last one started.
    pub check: Duration,
    /// A chore asked for is not started again sooner than this after its last start.
    pub min_gap: Duration,
    /// A request waits this long before its chore starts, so that requests made together (runs ending
    /// together, an operator's clicks, several API processes) are answered by one start.
    pub settle: Duration,
}

/// Makes sure every chore of `workers` has its row, so that a run's end can ask for a count.
pub async fn prepare(on: impl Into<On<'_>>, workers: &[String]) -> Result<()> {
    const PREPARE: Sql = sql!(
        "insert into worker_chores (worker, chore) select w.value, k.value from ",
        json_list(1, w),
        " cross join ",
        json_list(2, k),
        " where true on conflict (worker, chore) do nothing"
    );
    let kinds: Vec<&str> = <ChoreKind as Named>::ALL.iter().map(|k| Named::name(*k)).collect();
    run!(on, PREPARE, |pool, sql| sqlx::query(sql)
        .bind(Json(workers))
        .bind(Json(&kinds))
        .execute(pool)
        .await
        .map(drop))?;
    Ok(())
}

/// Asks for `chore` of each of `workers` (now, on the database clock); the row is made if missing.
pub async fn request(on: impl Into<On<'_>>, workers: &[String], chore: ChoreKind) -> Result<Vec<Chore>> {
    const REQUEST: Sql = sql!(
        "insert into worker_chores (worker, chore, requested_at) select w.value, $2, ",
        now,
        " from ",
        json_list(1, w),
        " where true on conflict (worker, chore) do update set requested_at = excluded.requested_at \
         returning worker, chore, requested_at, started_at, finished_at, lease_by, lease_until"
    );
    Ok(run!(on, REQUEST, |pool, sql| sqlx::query_as(sql).bind(Json(workers)).bind(chore).fetch_all(pool).await)?)
}

/// Takes up to `limit` due chores of `workers` for `daemon`, each leased for `lease`: a chore is due when no
/// lease holds it and it was asked for since it last started (at least `intervals.settle` ago, so that requests
/// made together are answered by one start, and not within `intervals.min_gap` of the last start),
/// or, for counts and checks, when it last started an interval ago or never. Describes come first: a count or
/// a check waits while its worker's describe is asked for or under way, so that it runs with what the code
/// declares rather than with the catalogue's guesses.
pub async fn claim(
    on: impl Into<On<'_>>,
    daemon: Uuid,
    workers: &[String],
    intervals: &ChoreIntervals,
    lease: Duration,
    limit: u32,
) -> Result<Vec<Chore>> {
    const CLAIM: Sql = sql!(
        "with due as (select worker, chore from worker_chores c \
             where worker in (select value from ",
        json_list(2, mine),
        ") and (lease_until is null or lease_until < ",
        now,
        ") and (chore = 'describe' or not exists (select 1 from worker_chores d \
                 where d.worker = c.worker and d.chore = 'describe' and (d.lease_until >= ",
        now,
        " or (d.requested_at is not null and (d.started_at is null or d.requested_at > d.started_at))))) \
             and ( \
                 (requested_at is not null and (started_at is null or requested_at > started_at) \
                     and requested_at <= ",
        now_minus(8),
        " and (started_at is null or started_at <= ",
        now_minus(4),
        ")) \
                 or (chore = 'count' and (started_at is null or started_at <= ",
        now_minus(5),
        ")) \
                 or (chore = 'check' and (started_at is null or started_at <= ",
        now_minus(6),
        "))) \
             order by case chore when 'describe' then 0 when 'count' then 1 else 2 end, started_at, worker \
             limit $7",
        skip_locked,
        ") \
         update worker_chores set lease_by = $1, lease_until = ",
        now_plus(3),
        ", started_at = ",
        now,
        " from due where worker_chores.worker = due.worker and worker_chores.chore = due.chore \
         returning worker_chores.worker, worker_chores.chore, worker_chores.requested_at, worker_chores.started_at, \
             worker_chores.finished_at, worker_chores.lease_by, worker_chores.lease_until"
    );
    Ok(run!(on, CLAIM, |pool, sql| sqlx::query_as(sql)
        .bind(daemon)
        .bind(Json(workers))
        .bind(lease.as_secs_f64())
        .bind(intervals.min_gap.as_secs_f64())
        .bind(intervals.count.as_secs_f64())
        .bind(intervals.check.as_secs_f64())
        .bind(i64::from(limit))
        .bind(intervals.settle.as_secs_f64())
        .fetch_all(pool)
        .await)?)
}

/// The database clock, and the earliest time a chore of `workers` may come due (a lease held elsewhere counts
/// as due when it expires); `None` when none will until asked for.
pub async fn next_due(
    on: impl Into<On<'_>>,
    workers: &[String],
    intervals: &ChoreIntervals,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    const NEXT: Sql = sql!(
        "select ",
        now,
        ", min(case \
             when lease_until is not null and lease_until > ",
        now,
        " then lease_until \
             when requested_at is not null and (started_at is null or requested_at > started_at) then \
                 case when started_at is not null and ",
        plus_secs(started_at, 3),
        " > ",
        plus_secs(requested_at, 4),
        " then ",
        plus_secs(started_at, 3),
        " else ",
        plus_secs(requested_at, 4),
        " end \
             when chore = 'count' then coalesce(",
        plus_secs(started_at, 1),
        ", ",
        now,
        ") when chore = 'check' then coalesce(",
        plus_secs(started_at, 2),
        ", ",
        now,
        ") else null end) from worker_chores where worker in (select value from ",
        json_list(5, mine),
        ")"
    );
    let row: (DbTime, Option<DbTime>) = run!(on, NEXT, |pool, sql| sqlx::query_as(sql)
        .bind(intervals.count.as_secs_f64())
        .bind(intervals.check.as_secs_f64())
        .bind(intervals.min_gap.as_secs_f64())
        .bind(intervals.settle.as_secs_f64())
        .bind(Json(workers))
        .fetch_one(pool)
        .await)?;
    Ok((row.0.0, row.1.map(|t| t.0)))
}

/// Ends `daemon`'s lease of a chore, recording the chore's end.
pub async fn finish(on: impl Into<On<'_>>, daemon: Uuid, worker: &str, chore: ChoreKind) -> Result<()> {
    let key = lease::Key::Chore(worker, Named::name(chore));
    lease::release(on, &lease::CHORES, key, daemon).await.map(drop)
}

/// Every chore of `worker`.
pub async fn of(on: impl Into<On<'_>>, worker: &str) -> Result<Vec<Chore>> {
    const OF: Sql = sql!(
        "select worker, chore, requested_at, started_at, finished_at, lease_by, lease_until from worker_chores \
         where worker = $1 order by chore"
    );
    Ok(run!(on, OF, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_all(pool).await)?)
}
