//! The one rule that moves a pipeline run on ([`decide`], pure), and the workflows that apply it: [`advance`]
//! inside the transaction that ended its step, started it, or found it stalled; [`start`], which inserts a
//! pipeline run and requests its first step; and [`cancel`].

use uuid::Uuid;

use crate::{
    ExplicitArgs, PipelineRun, PipelineState, Run, RunState,
    db::{
        self, Database, Tx,
        pipelines::{NewPipelineRun, PipelineRow},
        runs::{Links, NewRun},
    },
};

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
        override_version: None,
        tags: &row.run.tags,
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

/// In the transaction `tx`, moves the pipeline run `id` on as [`decide`] says. A step whose worker has a run in
/// flight already (someone else's) is not requested: the pipeline run waits with no current run, and the
/// daemons' settling pass requests it when the worker is free.
pub(crate) async fn advance(tx: &mut Tx, id: Uuid) -> db::Result<()> {
    let Some(row) = db::pipelines::lock(&mut *tx, id).await? else { return Ok(()) };
    if row.run.state != PipelineState::Running {
        return Ok(());
    }
    let current = match row.run.current_run {
        Some(run) => db::runs::get(&mut *tx, run).await?,
        None => None,
    };
    let retry = match &current {
        // A preempted step is followed by its resume, as a failed one by its retry.
        Some(run) if crate::runs::was_preempted(run) => {
            db::runs::continued_by(&mut *tx, run.id).await?.map(|(id, _)| id)
        }
        Some(run) => db::runs::retry_of(&mut *tx, run.id).await?,
        None => None,
    };
    match decide(&row.run, current.as_ref(), retry) {
        Advance::Wait => {}
        Advance::Follow(retry) => db::pipelines::move_to(&mut *tx, id, row.run.step, Some(retry)).await?,
        Advance::Start(step) => {
            let arguments = step_arguments(&row, step);
            let started = match step_run(&row, step, &arguments) {
                Some(new) => crate::runs::shards::insert(tx, &new).await?.map(|r| r.id),
                None => None,
            };
            tracing::info!(pipeline_run = %id, pipeline = %row.run.pipeline, step, run_id = ?started,
                "pipeline step requested{}", if started.is_some() { "" } else { ": its worker is busy; it waits" });
            db::pipelines::move_to(&mut *tx, id, step, started).await?;
        }
        Advance::End(state, error) => {
            tracing::info!(pipeline_run = %id, pipeline = %row.run.pipeline, state = %state, "pipeline run ended");
            db::pipelines::end(&mut *tx, id, state, error.as_deref()).await?;
        }
    }
    Ok(())
}

/// In the transaction `tx`, inserts the pipeline run `new` and requests its first step; its id, or `None` when
/// the pipeline already has a run in flight (or, for a schedule's fire, that fire made one already).
pub(crate) async fn insert_and_start(tx: &mut Tx, new: &NewPipelineRun<'_>) -> db::Result<Option<Uuid>> {
    let Some(id) = db::pipelines::insert(&mut *tx, new).await? else { return Ok(None) };
    advance(tx, id).await?;
    Ok(Some(id))
}

/// Starts a pipeline run and requests its first step, in one transaction; `None` when the pipeline already has
/// a run in flight.
pub(crate) async fn start(db: &Database, new: &NewPipelineRun<'_>) -> db::Result<Option<PipelineRun>> {
    let mut tx = db.begin_write().await?;
    let Some(id) = insert_and_start(&mut tx, new).await? else { return Ok(None) };
    let started = db::pipelines::get(&mut tx, id).await?;
    tx.commit().await?;
    Ok(started)
}

/// Asks for a pipeline run to be cancelled by `actor`: its current step is cancelled (at once when queued; its
/// daemon stops it when running), and the pipeline run ends `cancelled` when that step has ended. `false` when
/// it is not running (it ended already, or there is no such pipeline run): nothing changes then.
pub(crate) async fn cancel(db: &Database, id: Uuid, actor: &str) -> db::Result<bool> {
    let mut tx = db.begin_write().await?;
    let Some(current) = db::pipelines::flag_cancel(&mut tx, id, actor).await? else { return Ok(false) };
    if let Some(run) = current {
        db::ends::cancel(&mut tx, run, actor).await?;
    }
    advance(&mut tx, id).await?;
    tx.commit().await?;
    Ok(true)
}

/// Moves a stalled pipeline run on, in a transaction of its own.
pub(crate) async fn settle(db: &Database, id: Uuid) -> db::Result<()> {
    let mut tx = db.begin_write().await?;
    advance(&mut tx, id).await?;
    tx.commit().await
}

#[cfg(test)]
mod tests;
