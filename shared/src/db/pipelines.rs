//! The statements of `pipeline_runs`, and the one rule that moves a pipeline run on ([`decide`], applied by
//! [`advance_in_tx!`] inside the transaction that ended its step, started it, or found it stalled).

use uuid::Uuid;

use super::{
    Database, Dialect, Result,
    dialect::{Sql, sql},
    ends::CANCEL,
    on_pool,
    runs::{INSERT, Links, NewRun, bind_new_run, run_columns},
};
use crate::{ExplicitArgs, PipelineRun, PipelineState, ResolvedConfig, Run, RunState};

macro_rules! pipeline_columns {
    ($d:ident;) => {
        "id, pipeline, state, steps, step, current_run, arguments, requested_by, requested_at, finished_at, error, \
         schedule_id, fire_at, cancel_requested_at, cancel_requested_by"
    };
}

/// A pipeline run with each step's configuration, resolved when it started.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct PipelineRow {
    #[sqlx(flatten)]
    pub run: PipelineRun,
    #[sqlx(json)]
    pub configs: Vec<ResolvedConfig>,
}

/// What a pipeline run does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Advance {
    /// Its current step is queued or running.
    Wait,
    /// Its current step is being retried: the retry becomes the current run.
    Follow(Uuid),
    /// Request the step with this index.
    Start(i32),
    /// It is over.
    End(PipelineState, Option<String>),
}

/// What a pipeline run does next, given its current step's run (if it has one) and that run's retry (if any).
pub(crate) fn decide(pipeline: &PipelineRun, current: Option<&Run>, retry: Option<Uuid>) -> Advance {
    let step = pipeline.step;
    let worker = usize::try_from(step).ok().and_then(|i| pipeline.steps.get(i)).map_or("?", String::as_str);
    let name = format!("step {} ({worker})", step + 1);
    match current {
        Some(run) if !run.state.is_terminal() => Advance::Wait,
        _ if pipeline.cancel_requested_at.is_some() => Advance::End(
            PipelineState::Cancelled,
            Some(format!("cancelled by {}", pipeline.cancel_requested_by.as_deref().unwrap_or("someone"))),
        ),
        None => Advance::Start(step),
        Some(run) => match run.state {
            RunState::Succeeded if usize::try_from(step + 1).is_ok_and(|next| next < pipeline.steps.len()) => {
                Advance::Start(step + 1)
            }
            RunState::Succeeded => Advance::End(PipelineState::Succeeded, None),
            RunState::Failed | RunState::Interrupted => match retry {
                Some(retry) => Advance::Follow(retry),
                None => Advance::End(
                    PipelineState::Failed,
                    Some(format!(
                        "{name} {} (run {}): {}",
                        run.state,
                        run.id,
                        run.error.as_deref().unwrap_or("no reason given")
                    )),
                ),
            },
            _ => Advance::End(
                PipelineState::Cancelled,
                Some(format!(
                    "{name} was cancelled by {} (run {})",
                    run.cancel_requested_by.as_deref().unwrap_or("someone"),
                    run.id
                )),
            ),
        },
    }
}

/// The request of step `step` of `row`.
pub(crate) fn step_run<'a>(row: &'a PipelineRow, step: i32, arguments: &'a ExplicitArgs) -> Option<NewRun<'a>> {
    let index = usize::try_from(step).ok()?;
    Some(NewRun {
        id: Uuid::now_v7(),
        worker: row.run.steps.get(index)?,
        requested_by: &row.run.requested_by,
        arguments,
        config: row.configs.get(index)?,
        trace_context: None,
        links: Links { step: Some((row.run.id, step)), ..Links::default() },
    })
}

/// A step's explicit arguments: the pipeline run's arguments for that step's worker.
pub(crate) fn step_arguments(row: &PipelineRow, step: i32) -> ExplicitArgs {
    let worker = usize::try_from(step).ok().and_then(|i| row.run.steps.get(i));
    worker
        .and_then(|w| row.run.arguments.get(w))
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default()
}

/// The pipeline run, locked until the transaction ends (SQLite's write transaction locks everything already).
pub(crate) const LOCK: Sql = Sql {
    postgres: sql!("select ", pipeline_columns!(), ", configs from pipeline_runs where id = $1 for update").postgres,
    sqlite: sql!("select ", pipeline_columns!(), ", configs from pipeline_runs where id = $1").sqlite,
};
pub(crate) const RETRY_OF: Sql = sql!("select id from worker_runs where retry_of = $1");
pub(crate) const MOVE: Sql =
    sql!("update pipeline_runs set step = $2, current_run = $3 where id = $1 and state = 'running'");
pub(crate) const END: Sql = sql!(
    "update pipeline_runs set state = $2, error = $3, finished_at = ",
    now,
    " where id = $1 and state = 'running'"
);

/// In the transaction `$tx` (of `$db`), moves the pipeline run `$id` on as [`decide`] says. A step whose worker
/// has a run in flight already (someone else's) is not requested: the pipeline run waits with no current run,
/// and the daemons' settling pass requests it when the worker is free.
macro_rules! advance_in_tx {
    ($tx:ident, $db:expr, $id:expr) => {{
        use $crate::db::pipelines::{Advance, END, LOCK, MOVE, PipelineRow, RETRY_OF, decide, step_arguments, step_run};
        let id: Uuid = $id;
        let row: Option<PipelineRow> = sqlx::query_as($db.text(LOCK)).bind(id).fetch_optional(&mut *$tx).await?;
        if let Some(row) = row.filter(|r| r.run.state == $crate::PipelineState::Running) {
            let current: Option<Run> = match row.run.current_run {
                Some(run) => {
                    sqlx::query_as($db.text($crate::db::runs::GET)).bind(run).fetch_optional(&mut *$tx).await?
                }
                None => None,
            };
            let retry: Option<Uuid> = match &current {
                Some(run) => sqlx::query_scalar($db.text(RETRY_OF)).bind(run.id).fetch_optional(&mut *$tx).await?,
                None => None,
            };
            match decide(&row.run, current.as_ref(), retry) {
                Advance::Wait => {}
                Advance::Follow(retry) => {
                    sqlx::query($db.text(MOVE)).bind(id).bind(row.run.step).bind(retry).execute(&mut *$tx).await?;
                }
                Advance::Start(step) => {
                    let arguments = step_arguments(&row, step);
                    let started: Option<Run> = match step_run(&row, step, &arguments) {
                        Some(new) => {
                            bind_new_run!(sqlx::query_as($db.text(INSERT)), &new).fetch_optional(&mut *$tx).await?
                        }
                        None => None,
                    };
                    let started = started.map(|r| r.id);
                    tracing::info!(pipeline_run = %id, pipeline = %row.run.pipeline, step, run_id = ?started,
                        "pipeline step requested{}", if started.is_some() { "" } else { ": its worker is busy; it waits" });
                    sqlx::query($db.text(MOVE)).bind(id).bind(step).bind(started).execute(&mut *$tx).await?;
                }
                Advance::End(state, error) => {
                    tracing::info!(pipeline_run = %id, pipeline = %row.run.pipeline, state = %state, "pipeline run ended");
                    sqlx::query($db.text(END)).bind(id).bind(state).bind(error).execute(&mut *$tx).await?;
                }
            }
        }
    }};
}
pub(crate) use advance_in_tx;

/// A pipeline run to insert.
pub(crate) struct NewPipelineRun<'a> {
    pub id: Uuid,
    pub pipeline: &'a str,
    pub steps: &'a [String],
    pub configs: &'a [ResolvedConfig],
    pub arguments: &'a serde_json::Value,
    pub requested_by: &'a str,
    pub fire: Option<(Uuid, chrono::DateTime<chrono::Utc>)>,
}

/// Inserts a pipeline run, `on conflict do nothing` (one in flight per pipeline, one per schedule fire).
pub(crate) const INSERT_PIPELINE: Sql = sql!(
    "insert into pipeline_runs (id, pipeline, steps, configs, arguments, requested_by, schedule_id, fire_at) \
     values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict do nothing returning id"
);

/// Binds a [`NewPipelineRun`] to [`INSERT_PIPELINE`].
macro_rules! bind_new_pipeline {
    ($query:expr, $new:expr) => {{
        let new: &$crate::db::pipelines::NewPipelineRun<'_> = $new;
        $query
            .bind(new.id)
            .bind(new.pipeline)
            .bind(sqlx::types::Json(new.steps))
            .bind(sqlx::types::Json(new.configs))
            .bind(sqlx::types::Json(new.arguments))
            .bind(new.requested_by)
            .bind(new.fire.map(|f| f.0))
            .bind(new.fire.map(|f| $crate::db::dialect::DbTime(f.1)))
    }};
}
pub(crate) use bind_new_pipeline;

/// Starts a pipeline run and requests its first step, in one transaction; `None` when the pipeline already has
/// a run in flight.
pub(crate) async fn start(db: &Database, new: &NewPipelineRun<'_>) -> Result<Option<PipelineRun>> {
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let inserted: Option<Uuid> =
            bind_new_pipeline!(sqlx::query_scalar(db.text(INSERT_PIPELINE)), new).fetch_optional(&mut *tx).await?;
        let Some(id) = inserted else { return Ok(None) };
        advance_in_tx!(tx, db, id);
        let started: Option<PipelineRun> = sqlx::query_as(db.text(GET)).bind(id).fetch_optional(&mut *tx).await?;
        tx.commit().await?;
        Ok(started)
    })
}

const GET: Sql = sql!("select ", pipeline_columns!(), " from pipeline_runs where id = $1");

/// One pipeline run.
pub(crate) async fn get(db: &Database, id: Uuid) -> Result<Option<PipelineRun>> {
    Ok(on_pool!(db, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// The run in flight of `pipeline`, if any.
pub(crate) async fn in_flight_of(db: &Database, pipeline: &str) -> Result<Option<PipelineRun>> {
    const IN_FLIGHT: Sql =
        sql!("select ", pipeline_columns!(), " from pipeline_runs where pipeline = $1 and state = 'running'");
    Ok(on_pool!(db, IN_FLIGHT, |pool, sql| sqlx::query_as(sql).bind(pipeline).fetch_optional(pool).await)?)
}

/// Up to `limit` runs of `pipeline` (of every pipeline when `None`), newest first.
pub(crate) async fn list(db: &Database, pipeline: Option<&str>, limit: u32) -> Result<Vec<PipelineRun>> {
    const LIST: Sql = sql!(
        "select ",
        pipeline_columns!(),
        " from pipeline_runs where ($1 is null or pipeline = $1) order by requested_at desc, id desc limit $2"
    );
    Ok(on_pool!(db, LIST, |pool, sql| sqlx::query_as(sql).bind(pipeline).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The newest run of each pipeline.
pub(crate) async fn last_of_each(db: &Database) -> Result<Vec<PipelineRun>> {
    const LAST: Sql = sql!(
        "select ",
        pipeline_columns!(),
        " from pipeline_runs p where id = (select q.id from pipeline_runs q where q.pipeline = p.pipeline \
             order by q.requested_at desc, q.id desc limit 1)"
    );
    Ok(on_pool!(db, LAST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// The runs of a pipeline run's steps, oldest first.
pub(crate) async fn step_runs(db: &Database, id: Uuid) -> Result<Vec<Run>> {
    const STEPS: Sql =
        sql!("select ", run_columns!(), " from worker_runs where pipeline_run_id = $1 order by requested_at, id");
    Ok(on_pool!(db, STEPS, |pool, sql| sqlx::query_as(sql).bind(id).fetch_all(pool).await)?)
}

/// Asks for a pipeline run to be cancelled by `actor`: its current step is cancelled (at once when queued; its
/// daemon stops it when running), and the pipeline run ends `cancelled` when that step has ended.
pub(crate) async fn request_cancel(db: &Database, id: Uuid, actor: &str) -> Result<Option<PipelineRun>> {
    const FLAG: Sql = sql!(
        "update pipeline_runs set cancel_requested_at = coalesce(cancel_requested_at, ",
        now,
        "), cancel_requested_by = coalesce(cancel_requested_by, $2) where id = $1 and state = 'running' \
         returning current_run"
    );
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let flagged: Option<Option<Uuid>> =
            sqlx::query_scalar(db.text(FLAG)).bind(id).bind(actor).fetch_optional(&mut *tx).await?;
        if let Some(current) = flagged {
            if let Some(run) = current {
                sqlx::query(db.text(CANCEL)).bind(run).bind(actor).execute(&mut *tx).await?;
            }
            advance_in_tx!(tx, db, id);
        }
        let after: Option<PipelineRun> = sqlx::query_as(db.text(GET)).bind(id).fetch_optional(&mut *tx).await?;
        tx.commit().await?;
        Ok(after)
    })
}

/// The pipeline runs in flight whose current step is not: waiting for a busy worker, or left behind by an end
/// that did not move them on (a step cancelled by hand, say).
pub(crate) async fn stalled(db: &Database) -> Result<Vec<Uuid>> {
    const STALLED: Sql = sql!(
        "select p.id from pipeline_runs p where p.state = 'running' and (p.current_run is null or exists \
             (select 1 from worker_runs r where r.id = p.current_run and r.state not in ('queued', 'running')))"
    );
    Ok(on_pool!(db, STALLED, |pool, sql| sqlx::query_scalar(sql).fetch_all(pool).await)?)
}

/// Moves a stalled pipeline run on, in a transaction of its own.
pub(crate) async fn advance(db: &Database, id: Uuid) -> Result<()> {
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        advance_in_tx!(tx, db, id);
        tx.commit().await?;
        Result::Ok(())
    })
}

#[cfg(test)]
mod tests;

/// What the SQLite change feed compares between two looks at the pipeline runs: those in flight, and those
/// that ended at `since` or later, with their state and current run.
pub(crate) async fn marks_since(
    db: &Database,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(Uuid, String, PipelineState, i32, Option<Uuid>)>> {
    const MARKS: Sql = sql!(
        "select id, pipeline, state, step, current_run from pipeline_runs where state = 'running' \
         union all select id, pipeline, state, step, current_run from pipeline_runs where finished_at >= $1"
    );
    Ok(on_pool!(db, MARKS, |pool, sql| sqlx::query_as(sql).bind(super::dialect::DbTime(since)).fetch_all(pool).await)?)
}
