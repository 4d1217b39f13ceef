//! The statements of `pipeline_runs`: insert one, lock one inside the transaction that moves it on, move it to
//! a step, end it, flag it for cancellation, and the reads of the API and the change feed. What a pipeline run
//! does next is decided by `scrinalia_shared::pipelines`.

use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::{PipelineRun, PipelineState, ResolvedConfig, Run};

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    run,
    runs::run_columns,
};

macro_rules! pipeline_columns {
    ($d:ident;) => {
        "id, pipeline, state, steps, step, current_run, arguments, requested_by, requested_at, finished_at, error, \
         schedule_id, fire_at, cancel_requested_at, cancel_requested_by, tags"
    };
}

/// A pipeline run with each step's configuration, resolved when it started.
#[derive(Debug, sqlx::FromRow)]
pub struct PipelineRow {
    /// The pipeline run.
    #[sqlx(flatten)]
    pub run: PipelineRun,
    /// Each step's configuration, in step order.
    #[sqlx(json)]
    pub configs: Vec<ResolvedConfig>,
}

/// The pipeline run `id` with its steps' configurations, locked until the transaction ends (SQLite's write
/// transaction locks everything already).
pub async fn lock(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<PipelineRow>> {
    const LOCK: Sql = Sql {
        postgres: sql!("select ", pipeline_columns!(), ", configs from pipeline_runs where id = $1 for update")
            .postgres,
        sqlite: sql!("select ", pipeline_columns!(), ", configs from pipeline_runs where id = $1").sqlite,
    };
    run!(on, LOCK, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)
}

/// Makes `current` the current run of the pipeline run `id`, at step `step`.
pub async fn move_to(on: impl Into<On<'_>>, id: Uuid, step: i32, current: Option<Uuid>) -> Result<()> {
    const MOVE: Sql = sql!("update pipeline_runs set step = $2, current_run = $3 where id = $1 and state = 'running'");
    run!(on, MOVE, |pool, sql| sqlx::query(sql).bind(id).bind(step).bind(current).execute(pool).await.map(drop))
}

/// Ends the pipeline run `id` in `state`, with `error` saying why when it did not succeed.
pub async fn end(on: impl Into<On<'_>>, id: Uuid, state: PipelineState, error: Option<&str>) -> Result<()> {
    const END: Sql = sql!(
        "update pipeline_runs set state = $2, error = $3, finished_at = ",
        now,
        " where id = $1 and state = 'running'"
    );
    run!(on, END, |pool, sql| sqlx::query(sql).bind(id).bind(state).bind(error).execute(pool).await.map(drop))
}

/// A pipeline run to insert.
pub struct NewPipelineRun<'a> {
    pub id: Uuid,
    pub pipeline: &'a str,
    pub steps: &'a [String],
    pub configs: &'a [ResolvedConfig],
    pub arguments: &'a serde_json::Value,
    pub requested_by: &'a str,
    pub fire: Option<(Uuid, chrono::DateTime<chrono::Utc>)>,
    /// The tags every step's run carries.
    pub tags: &'a [String],
}

/// Inserts a pipeline run, `on conflict do nothing` (one in flight per pipeline, one per schedule fire); its id,
/// or `None` when refused.
pub async fn insert(on: impl Into<On<'_>>, new: &NewPipelineRun<'_>) -> Result<Option<Uuid>> {
    const INSERT: Sql = sql!(
        "insert into pipeline_runs (id, pipeline, steps, configs, arguments, requested_by, schedule_id, fire_at, tags) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9) on conflict do nothing returning id"
    );
    run!(on, INSERT, |pool, sql| sqlx::query_scalar(sql)
        .bind(new.id)
        .bind(new.pipeline)
        .bind(Json(new.steps))
        .bind(Json(new.configs))
        .bind(Json(new.arguments))
        .bind(new.requested_by)
        .bind(new.fire.map(|f| f.0))
        .bind(new.fire.map(|f| DbTime(f.1)))
        .bind(Json(new.tags))
        .fetch_optional(pool)
        .await)
}

const GET: Sql = sql!("select ", pipeline_columns!(), " from pipeline_runs where id = $1");

/// One pipeline run.
pub async fn get(on: impl Into<On<'_>>, id: Uuid) -> Result<Option<PipelineRun>> {
    Ok(run!(on, GET, |pool, sql| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)?)
}

/// The run in flight of `pipeline`, if any.
pub async fn in_flight_of(on: impl Into<On<'_>>, pipeline: &str) -> Result<Option<PipelineRun>> {
    const IN_FLIGHT: Sql =
        sql!("select ", pipeline_columns!(), " from pipeline_runs where pipeline = $1 and state = 'running'");
    Ok(run!(on, IN_FLIGHT, |pool, sql| sqlx::query_as(sql).bind(pipeline).fetch_optional(pool).await)?)
}

/// Up to `limit` runs of `pipeline` (of every pipeline when `None`), newest first.
pub async fn list(on: impl Into<On<'_>>, pipeline: Option<&str>, limit: u32) -> Result<Vec<PipelineRun>> {
    const LIST: Sql = sql!(
        "select ",
        pipeline_columns!(),
        " from pipeline_runs where ($1 is null or pipeline = $1) order by requested_at desc, id desc limit $2"
    );
    Ok(run!(on, LIST, |pool, sql| sqlx::query_as(sql).bind(pipeline).bind(i64::from(limit)).fetch_all(pool).await)?)
}

/// The newest run of each pipeline.
pub async fn last_of_each(on: impl Into<On<'_>>) -> Result<Vec<PipelineRun>> {
    const LAST: Sql = sql!(
        "select ",
        pipeline_columns!(),
        " from pipeline_runs p where id = (select q.id from pipeline_runs q where q.pipeline = p.pipeline \
             order by q.requested_at desc, q.id desc limit 1)"
    );
    Ok(run!(on, LAST, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}

/// The runs of a pipeline run's steps, oldest first.
pub async fn step_runs(on: impl Into<On<'_>>, id: Uuid) -> Result<Vec<Run>> {
    const STEPS: Sql =
        sql!("select ", run_columns!(), " from worker_runs where pipeline_run_id = $1 order by requested_at, id");
    Ok(run!(on, STEPS, |pool, sql| sqlx::query_as(sql).bind(id).fetch_all(pool).await)?)
}

/// Flags the pipeline run `id` for cancellation by `actor`; its current run (`Some(None)`: none now), or `None`
/// when it is not running.
pub async fn flag_cancel(on: impl Into<On<'_>>, id: Uuid, actor: &str) -> Result<Option<Option<Uuid>>> {
    const FLAG: Sql = sql!(
        "update pipeline_runs set cancel_requested_at = coalesce(cancel_requested_at, ",
        now,
        "), cancel_requested_by = coalesce(cancel_requested_by, $2) where id = $1 and state = 'running' \
         returning current_run"
    );
    run!(on, FLAG, |pool, sql| sqlx::query_scalar(sql).bind(id).bind(actor).fetch_optional(pool).await)
}

/// The pipeline runs in flight whose current step is not: waiting for a busy worker, or left behind by an end
/// that did not move them on (a step cancelled by hand, say).
pub async fn stalled(on: impl Into<On<'_>>) -> Result<Vec<Uuid>> {
    const STALLED: Sql = sql!(
        "select p.id from pipeline_runs p where p.state = 'running' and (p.current_run is null or exists \
             (select 1 from worker_runs r where r.id = p.current_run and r.state not in ('queued', 'running')))"
    );
    Ok(run!(on, STALLED, |pool, sql| sqlx::query_scalar(sql).fetch_all(pool).await)?)
}

/// What the SQLite change feed compares between two looks at the pipeline runs: those in flight, and those
/// that ended at `since` or later, with their state and current run.
pub async fn marks_since(
    on: impl Into<On<'_>>,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(Uuid, String, PipelineState, i32, Option<Uuid>)>> {
    const MARKS: Sql = sql!(
        "select id, pipeline, state, step, current_run from pipeline_runs where state = 'running' \
         union all select id, pipeline, state, step, current_run from pipeline_runs where finished_at >= $1"
    );
    Ok(run!(on, MARKS, |pool, sql| sqlx::query_as(sql).bind(DbTime(since)).fetch_all(pool).await)?)
}
