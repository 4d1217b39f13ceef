//! Pausing a worker: by hand (an operator, with a reason) or by itself, after `pause_after_failures` of its runs
//! in a row ended `failed`. While it is paused no run of it is requested: the request's insert refuses it in the
//! same statement (see `db::runs::insert`), so a person's Run is a 409 `worker_paused`, a retry is not requested,
//! a pipeline's step waits, and the fire pass records its schedules' fires skipped ("paused"). Its queued retries
//! are cancelled when it pauses. Every pause and resume is kept, with who, when and why.
//!
//! Why a streak counter written in the end transaction, not a read of the last K runs: the end transaction is
//! where a run's outcome is known once (whichever process ends it), the counter is one row per worker, and a
//! resume sets it back to 0 without a watermark on the ledger. The rule of what an end does to it is pure
//! ([`streak_step`], [`pauses_at`]).

use chrono::SecondsFormat;
use uuid::Uuid;

use crate::{
    DbError, Run, RunState, Store,
    db::{self, Tx},
    webhooks,
};
pub use scrinalia_wire::{PauseAction, PauseEntry, WorkerPause, pause::AUTOMATIC_ACTOR};

/// The start of the sentence a paused worker's cancelled retries end with (their `error`).
pub const PAUSED: &str = "paused";

/// What the end of a run does to its worker's count of failed runs in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreakStep {
    /// One more failure.
    Count,
    /// Back to 0: it succeeded.
    Reset,
    /// Unchanged: it was interrupted or cancelled, or it is a shard (its parent's end counts, once).
    Keep,
}

/// What the end of `ended` does to its worker's failures in a row: a failure counts (whatever its end reason; a
/// retry is a run like another), a success resets, an interruption or a cancellation changes nothing. A sharded
/// run counts as its parent only.
pub fn streak_step(ended: &Run) -> StreakStep {
    if ended.parent_id.is_some() {
        return StreakStep::Keep;
    }
    match ended.state {
        RunState::Failed => StreakStep::Count,
        RunState::Succeeded => StreakStep::Reset,
        _ => StreakStep::Keep,
    }
}

/// Whether `failures` in a row pause a worker whose `pause_after_failures` is `k` (none: it never pauses itself).
pub fn pauses_at(failures: i64, k: Option<u32>) -> bool {
    k.is_some_and(|k| failures >= i64::from(k))
}

/// Why a worker paused by itself, as a sentence naming the run that made it pause.
pub fn automatic_reason(failures: i64, ended: &Run) -> String {
    let mut reason = format!("its last {failures} runs failed in a row (the last, run {}", ended.id);
    if let Some(error) = ended.error.as_deref().filter(|e| !e.trim().is_empty()) {
        let clipped: String = error.chars().take(200).collect();
        let more = if clipped.len() < error.len() { "…" } else { "" };
        reason.push_str(&format!(": {clipped}{more}"));
    }
    reason.push(')');
    reason
}

/// The sentence that refuses a run of `worker` while it is paused: since when, by whom, why, and how to resume.
pub fn refusal(worker: &str, pause: &WorkerPause) -> String {
    let how = if pause.automatic { "paused itself" } else { "was paused" };
    format!(
        "Worker {worker} is paused: it {how} at {} ({} by {}): {}. Resume it with POST /api/workers/{worker}/resume \
         or `scrinalia worker resume {worker} --reason …`.",
        pause.at.to_rfc3339_opts(SecondsFormat::Secs, true),
        if pause.automatic { "automatically" } else { "by hand" },
        pause.by,
        pause.reason.trim_end_matches('.'),
    )
}

/// In the transaction `tx` that ended `ended`, moves its worker's failure streak; when that reaches the worker's
/// `pause_after_failures` (as the run's configuration resolved it), pauses the worker. The pause, when this end
/// made one.
pub(crate) async fn after_end(tx: &mut Tx, ended: &Run) -> db::Result<Option<WorkerPause>> {
    match streak_step(ended) {
        StreakStep::Keep => Ok(None),
        StreakStep::Reset => db::pauses::reset_failures(&mut *tx, &ended.worker).await.map(|()| None),
        StreakStep::Count => {
            // A worker that never pauses by itself keeps no count.
            let Some(k) = ended.config.pause_after_failures.as_ref().map(|k| k.value) else { return Ok(None) };
            let failures = db::pauses::count_failure(&mut *tx, &ended.worker).await?;
            if !pauses_at(failures, Some(k)) {
                return Ok(None);
            }
            let reason = automatic_reason(failures, ended);
            pause_in(tx, &ended.worker, AUTOMATIC_ACTOR, &reason, Some(ended.id)).await
        }
    }
}

/// Pauses `worker` in `tx` as `by` (automatic when `run`, the run whose end paused it, is given): the pause, its
/// history entry, its webhook event, and the cancellation of its queued retries with what follows each. `None`
/// when it was paused already (nothing is written then).
async fn pause_in(
    tx: &mut Tx,
    worker: &str,
    by: &str,
    reason: &str,
    run: Option<Uuid>,
) -> db::Result<Option<WorkerPause>> {
    let automatic = run.is_some();
    let Some(pause) = db::pauses::pause(&mut *tx, worker, by, reason, automatic).await? else { return Ok(None) };
    db::pauses::audit(&mut *tx, worker, PauseAction::Pause, by, reason, automatic).await?;
    webhooks::record_pause(tx, worker, &pause, run).await?;
    let why = format!("{PAUSED}: worker {worker} was paused before a daemon claimed this retry ({reason})");
    let cancelled = db::pauses::cancel_queued_retries(&mut *tx, worker, &why, by).await?;
    for ended in &cancelled {
        Box::pin(crate::runs::follow_end(tx, ended)).await?;
    }
    tracing::warn!(worker, by, automatic, reason, cancelled_retries = cancelled.len(), "worker paused");
    Ok(Some(pause))
}

/// What a pause or a resume by hand did.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PauseError {
    /// The worker is paused already.
    #[error("{}", already(worker, pause))]
    AlreadyPaused {
        /// The worker.
        worker: String,
        /// Its pause.
        pause: WorkerPause,
    },
    /// The worker is not paused.
    #[error("Worker {worker} is not paused; there is nothing to resume.")]
    NotPaused {
        /// The worker.
        worker: String,
    },
}

fn already(worker: &str, pause: &WorkerPause) -> String {
    format!(
        "Worker {worker} is paused already (since {}, by {}: {}).",
        pause.at.to_rfc3339_opts(SecondsFormat::Secs, true),
        pause.by,
        pause.reason.trim_end_matches('.')
    )
}

/// Why the step of the pipeline run `view` waits when its worker is paused (and no run of the step is in
/// flight): the step is requested once the worker is resumed. `None` when that is not why.
pub(crate) async fn paused_step(
    store: &Store,
    view: &scrinalia_wire::PipelineRunView,
) -> Result<Option<scrinalia_wire::Waiting>, DbError> {
    let p = &view.pipeline_run;
    let Some(worker) = usize::try_from(p.step).ok().and_then(|i| p.steps.get(i)).filter(|_| p.current_run.is_none())
    else {
        return Ok(None);
    };
    let Some(pause) = store.worker_pause(worker).await? else { return Ok(None) };
    let message = format!(
        "Step {} ({worker}) waits: worker {worker} is paused since {} (by {}: {}); the step is requested once it is \
         resumed.",
        p.step + 1,
        pause.at.to_rfc3339_opts(SecondsFormat::Secs, true),
        pause.by,
        pause.reason.trim_end_matches('.')
    );
    Ok(Some(scrinalia_wire::Waiting {
        code: scrinalia_wire::WaitCode::PipelineStep,
        message,
        until: None,
        daemons: Vec::new(),
        runs: Vec::new(),
    }))
}

impl Store {
    /// Pauses `worker` by hand as `actor`, for `reason` (checked by the caller), with its queued retries
    /// cancelled, in one transaction.
    pub(crate) async fn pause_worker(
        &self,
        worker: &str,
        actor: &str,
        reason: &str,
    ) -> Result<Result<WorkerPause, PauseError>, DbError> {
        let mut tx = self.db.begin_write().await?;
        let Some(pause) = pause_in(&mut tx, worker, actor, reason, None).await? else {
            let current = db::pauses::get(&mut tx, worker).await?;
            tx.rollback().await?;
            return Ok(Err(match current {
                Some(pause) => PauseError::AlreadyPaused { worker: worker.to_owned(), pause },
                // Resumed in between: not paused any more, so try again.
                None => return Box::pin(self.pause_worker(worker, actor, reason)).await,
            }));
        };
        tx.commit().await?;
        Ok(Ok(pause))
    }

    /// Resumes `worker` as `actor`, for `reason`: its runs may be requested again and its failures in a row start
    /// again from 0. The pause it ended.
    pub(crate) async fn resume_worker(
        &self,
        worker: &str,
        actor: &str,
        reason: &str,
    ) -> Result<Result<WorkerPause, PauseError>, DbError> {
        let mut tx = self.db.begin_write().await?;
        let Some(pause) = db::pauses::resume(&mut tx, worker).await? else {
            tx.rollback().await?;
            return Ok(Err(PauseError::NotPaused { worker: worker.to_owned() }));
        };
        db::pauses::audit(&mut tx, worker, PauseAction::Resume, actor, reason, false).await?;
        db::pauses::reset_failures(&mut tx, worker).await?;
        tx.commit().await?;
        tracing::info!(worker, by = actor, reason, "worker resumed");
        Ok(Ok(pause))
    }

    /// `worker`'s pause, if it is paused: what a backlog trigger, or anything else that would request a run of it,
    /// asks first (the request's insert refuses it anyway).
    pub async fn worker_pause(&self, worker: &str) -> Result<Option<WorkerPause>, DbError> {
        self.db.retrying(|| db::pauses::get(&self.db, worker)).await
    }

    /// Whether `worker` is paused now.
    pub async fn is_paused(&self, worker: &str) -> Result<bool, DbError> {
        Ok(self.worker_pause(worker).await?.is_some())
    }

    /// Every pause in force, by worker.
    pub async fn worker_pauses(&self) -> Result<Vec<(String, WorkerPause)>, DbError> {
        let paused = self.db.retrying(|| db::pauses::list(&self.db)).await?;
        Ok(paused.into_iter().map(|p| (p.worker, p.pause)).collect())
    }

    /// `worker`'s pauses and resumes, newest first (1 to 1000).
    pub async fn pause_history(&self, worker: &str, limit: u32) -> Result<Vec<PauseEntry>, DbError> {
        self.db.retrying(|| db::pauses::history(&self.db, worker, limit.clamp(1, 1000))).await
    }
}

#[cfg(test)]
mod tests;
