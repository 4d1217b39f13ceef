//! The statements of paused workers: `worker_pauses` (the pauses in force), its append-only history
//! `worker_pause_audit`, and `worker_failure_streaks` (how many runs of a worker failed in a row).

use scrinalia_wire::{PauseAction, PauseEntry, Run, WorkerPause};

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
    runs::run_columns,
};

macro_rules! pause_columns {
    ($d:ident;) => {
        "paused_at as at, paused_by as \"by\", reason, automatic"
    };
}

/// A pause in force, with its worker.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PausedWorker {
    /// The worker.
    pub worker: String,
    /// Its pause.
    #[sqlx(flatten)]
    pub pause: WorkerPause,
}

/// `worker`'s pause, if it is paused.
pub async fn get(on: impl Into<On<'_>>, worker: &str) -> Result<Option<WorkerPause>> {
    const GET: Sql = sql!("select ", pause_columns!(), " from worker_pauses where worker = $1");
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)?)
}

/// Every pause in force, by worker.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<PausedWorker>> {
    const LIST: Sql = sql!("select worker, ", pause_columns!(), " from worker_pauses order by worker");
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// Pauses `worker` (database clock); `None` when it is paused already (that pause stays as it was).
pub async fn pause(
    on: impl Into<On<'_>>,
    worker: &str,
    by: &str,
    reason: &str,
    automatic: bool,
) -> Result<Option<WorkerPause>> {
    const PAUSE: Sql = sql!(
        "insert into worker_pauses (worker, paused_at, paused_by, reason, automatic) values ($1, ",
        now,
        ", $2, $3, $4) on conflict (worker) do nothing returning ",
        pause_columns!()
    );
    run!(on, PAUSE, |pool, sql| sqlx::query_as(sql)
        .bind(worker)
        .bind(by)
        .bind(reason)
        .bind(automatic)
        .fetch_optional(pool)
        .await)
}

/// Ends `worker`'s pause; the pause it ended, `None` when it was not paused.
pub async fn resume(on: impl Into<On<'_>>, worker: &str) -> Result<Option<WorkerPause>> {
    const RESUME: Sql = sql!("delete from worker_pauses where worker = $1 returning ", pause_columns!());
    run!(on, RESUME, |pool, sql| sqlx::query_as(sql).bind(worker).fetch_optional(pool).await)
}

/// Appends a pause or a resume of `worker` to its history.
pub async fn audit(
    on: impl Into<On<'_>>,
    worker: &str,
    action: PauseAction,
    actor: &str,
    reason: &str,
    automatic: bool,
) -> Result<()> {
    const AUDIT: Sql = sql!(
        "insert into worker_pause_audit (worker, action, actor, at, reason, automatic) values ($1, $2, $3, ",
        now,
        ", $4, $5)"
    );
    run!(on, AUDIT, |pool, sql| sqlx::query(sql)
        .bind(worker)
        .bind(action)
        .bind(actor)
        .bind(reason)
        .bind(automatic)
        .execute(pool)
        .await
        .map(drop))
}

/// `worker`'s pause history, newest first.
pub async fn history(on: impl Into<On<'_>>, worker: &str, limit: u32) -> Result<Vec<PauseEntry>> {
    const HISTORY: Sql = sql!(
        "select id, worker, action, actor, at, reason, automatic from worker_pause_audit where worker = $1 \
         order by id desc limit $2"
    );
    Ok(run!(on, HISTORY, |pool, sql| sqlx::query_as(sql).bind(worker).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// Counts one more failed run of `worker` in a row; how many there are now.
pub async fn count_failure(on: impl Into<On<'_>>, worker: &str) -> Result<i64> {
    const COUNT: Sql = sql!(
        "insert into worker_failure_streaks (worker, failures) values ($1, 1) on conflict (worker) do update \
         set failures = worker_failure_streaks.failures + 1 returning cast(failures as bigint)"
    );
    run!(on, COUNT, |pool, sql| sqlx::query_scalar(sql).bind(worker).fetch_one(pool).await)
}

/// Sets `worker`'s failures in a row back to 0 (a success, a resume). Writes nothing when it is 0 already.
pub async fn reset_failures(on: impl Into<On<'_>>, worker: &str) -> Result<()> {
    const RESET: Sql = sql!("update worker_failure_streaks set failures = 0 where worker = $1 and failures <> 0");
    run!(on, RESET, |pool, sql| sqlx::query(sql).bind(worker).execute(pool).await.map(drop))
}

/// Cancels every queued retry of `worker` (its end reason `cancelled`, `error` the sentence `why`, asked by
/// `actor`); the runs as they ended. A sharded parent is left alone: it follows its children.
pub async fn cancel_queued_retries(on: impl Into<On<'_>>, worker: &str, why: &str, actor: &str) -> Result<Vec<Run>> {
    const CANCEL: Sql = sql!(
        "update worker_runs set state = 'cancelled', end_reason = 'cancelled', finished_at = ",
        now,
        ", duration_ms = 0, error = $2, cancel_requested_at = coalesce(cancel_requested_at, ",
        now,
        "), cancel_requested_by = coalesce(cancel_requested_by, $3) \
         where worker = $1 and state = 'queued' and retry_of is not null \
             and (shards is null or parent_id is not null) returning ",
        run_columns!()
    );
    Ok(run!(on, CANCEL, |pool, sql| sqlx::query_as(sql).bind(worker).bind(why).bind(actor).fetch_all(pool).await)?)
}
