//! Every way a run ends (its daemon finishes it, a person cancels it while queued, recovery interrupts it after
//! its lease expired), each in one transaction with what follows the end ([`follow`]): the webhook event its
//! outcome is, the release of its resource slots, its retry when its policy asks for one, and its pipeline's
//! next step or the pipeline's end. A daemon that dies between the two cannot leave a retry unrequested or a
//! pipeline waiting forever, because there is no "between".

use uuid::Uuid;

use super::{Finish, shards};
use crate::{
    Run, RunState,
    db::{self, Database, Tx, ends::Ending},
    pipelines, webhooks,
};

/// Ends run `run` held by `daemon` as `finish` says, and requests what follows; `None` when the run is no
/// longer the daemon's (another daemon recovered it, or its lease expired), and then nothing is written.
pub(crate) async fn finish(db: &Database, run: Uuid, daemon: Uuid, finish: &Finish) -> db::Result<Option<Run>> {
    let ending = Ending {
        state: finish.state(),
        reason: finish.reason,
        exit_code: finish.exit_code,
        error: finish.error.as_deref(),
        result: finish.result.as_ref(),
        usage: finish.usage.as_ref(),
    };
    let mut tx = db.begin_write().await?;
    let Some(ended) = db::ends::finish(&mut tx, run, daemon, &ending).await? else { return Ok(None) };
    follow(&mut tx, &ended).await?;
    tx.commit().await?;
    Ok(Some(ended))
}

/// Cancels run `run` as `actor`: at once when it is queued (and what follows it, its pipeline's end, with it),
/// or flags it for its daemon when it is running. The parent of a sharded run is flagged and each of its
/// children cancelled so; it ends when they have. One transaction, whichever it is. The run as changed; `None`
/// when it is not in flight.
pub(crate) async fn cancel(db: &Database, run: Uuid, actor: &str) -> db::Result<Option<Run>> {
    let mut tx = db.begin_write().await?;
    let mut changed = cancel_in(&mut tx, run, actor).await?;
    if changed.is_none() && db::shards::flag_cancel(&mut tx, run, actor).await?.is_some() {
        for child in db::shards::children(&mut tx, run).await? {
            if matches!(child.state, RunState::Queued | RunState::Running) {
                cancel_in(&mut tx, child.id, actor).await?;
            }
        }
        // Read again: its children's ends may have ended it.
        changed = db::runs::get(&mut tx, run).await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Cancels run `run` (not a parent) in `tx`, with what follows when that ends it.
async fn cancel_in(tx: &mut Tx, run: Uuid, actor: &str) -> db::Result<Option<Run>> {
    let changed = db::ends::cancel(&mut *tx, run, actor).await?;
    if let Some(ended) = changed.as_ref().filter(|r| r.state == RunState::Cancelled) {
        follow(tx, ended).await?;
    }
    Ok(changed)
}

/// Interrupts every running run whose lease has expired, one transaction per run with what follows it (a retry
/// on `interrupted`, its pipeline's end). A run with a live lease is never touched.
pub(crate) async fn recover_expired(db: &Database) -> db::Result<Vec<Run>> {
    let mut recovered = Vec::new();
    // Bounded, so that a sweep always ends even if the clock or a bug kept producing rows.
    for _ in 0..1000 {
        let mut tx = db.begin_write().await?;
        let Some(ended) = db::ends::interrupt_one_expired(&mut tx).await? else { break };
        follow(&mut tx, &ended).await?;
        tx.commit().await?;
        recovered.push(ended);
    }
    Ok(recovered)
}

/// Ends every queued request whose expiry has passed (`cancelled`, end reason `expired`), one transaction per
/// request with what follows it (its pipeline run's end, its sharded parent's settling).
pub(crate) async fn expire_requests(db: &Database) -> db::Result<Vec<Run>> {
    let mut expired = Vec::new();
    // Bounded, so that a pass always ends; the next look takes what is left.
    for _ in 0..1000 {
        let mut tx = db.begin_write().await?;
        let Some(ended) = db::ends::expire_one(&mut tx).await? else { break };
        follow(&mut tx, &ended).await?;
        tx.commit().await?;
        expired.push(ended);
    }
    Ok(expired)
}

/// What follows the end of `ended`, in the transaction `tx` that ended it: the webhook event its outcome is,
/// the release of its resource slots (free for the next claim the moment the end commits), its items' failure
/// streaks, its worker's failures in a row (and its pause, at `pause_after_failures`), its retry (with its scope,
/// for a rerun of failures; none while the worker is paused: the insert refuses it), and its pipeline's next step.
/// A shard's end settles its parent instead of announcing itself: the parent's end is the outcome that is
/// announced, counted and that moves its pipeline on.
pub(crate) async fn follow(tx: &mut Tx, ended: &Run) -> db::Result<()> {
    let preempted = was_preempted(ended);
    // A preempted run is no outcome to announce: its resume goes on with the work.
    if ended.parent_id.is_none() && !preempted {
        webhooks::record_event(tx, ended).await?;
    }
    db::resources::release(&mut *tx, ended.id).await?;
    let resumed = ended.follows.filter(|_| ended.follows_as == Some(crate::FollowKind::Resume));
    db::quarantine::settle(tx, ended.id, &ended.worker, resumed).await?;
    // Before its retry: the end that pauses the worker requests none.
    crate::pauses::after_end(tx, ended).await?;
    if preempted {
        resume_preempted(tx, ended).await?;
    } else if let Some(retry) = retry_of(ended, rand::random::<f64>()) {
        let new = retry.new_run(ended);
        if let Some(requested) = shards::insert(tx, &new).await? {
            db::quarantine::copy_scope(tx, ended.id, requested.id).await?;
            tracing::info!(run_id = %requested.id, retry_of = %ended.id, worker = %ended.worker,
                attempt = requested.attempt, not_before = ?requested.not_before, "retry requested");
        }
    }
    if let Some(pipeline) = ended.pipeline_run_id {
        pipelines::advance(tx, pipeline).await?;
    }
    if let Some(parent) = shards::settle_parent(tx, ended).await? {
        tracing::info!(run_id = %parent.id, worker = %parent.worker, state = %parent.state, "sharded run ended");
        Box::pin(follow(tx, &parent)).await?;
    }
    Ok(())
}

/// Whether `ended` ended by a preemption: it yielded (or was stopped after its grace), or, asked to yield, its
/// daemon died first and recovery interrupted it. Either way it gets its one resume instead of a retry.
pub(crate) fn was_preempted(ended: &Run) -> bool {
    ended.end_reason == Some(crate::EndReason::Preempted)
        || (ended.state == RunState::Interrupted && ended.preempt_requested_at.is_some())
}

/// Requests the resume of the preempted run `ended`, in the transaction that ended it: from its last checkpoint,
/// with its configuration (but no expiry: the work was under way), as the same shard of the same parent and the
/// same pipeline step. Its priority is its own, below the run it yielded for, so that one takes the slot first.
/// At most one resume continues a run (a unique index): a second end of it requests none.
async fn resume_preempted(tx: &mut Tx, ended: &Run) -> db::Result<()> {
    let Some(checkpoint) = ended.checkpoint.as_ref().zip(ended.checkpoint_at) else {
        tracing::warn!(run_id = %ended.id, worker = %ended.worker, "a preempted run has no checkpoint to resume from");
        return Ok(());
    };
    let config = crate::ResolvedConfig { expires_after_seconds: None, ..ended.config.clone() };
    let new = db::runs::NewRun {
        id: Uuid::now_v7(),
        worker: &ended.worker,
        requested_by: &ended.requested_by,
        arguments: &ended.arguments,
        config: &config,
        trace_context: ended.trace_context.as_deref(),
        override_version: None,
        tags: &ended.tags,
        links: db::runs::Links {
            step: ended.pipeline_run_id.zip(ended.pipeline_step),
            follows: Some((ended.id, crate::FollowKind::Resume)),
            checkpoint: Some(checkpoint),
            shard: shard_link(ended),
            even_if_paused: true,
            ..db::runs::Links::default()
        },
    };
    if let Some(resumed) = shards::insert(tx, &new).await? {
        db::quarantine::copy_scope(tx, ended.id, resumed.id).await?;
        tracing::info!(run_id = %resumed.id, follows = %ended.id, worker = %ended.worker,
            preempted_for = ?ended.preempted_for, "the preempted run's resume requested");
    }
    Ok(())
}

/// The place of `run` among its parent's shards, for a run that continues it.
fn shard_link(run: &Run) -> Option<db::runs::ShardLink> {
    run.parent_id.zip(run.shard).zip(run.shards).map(|((parent, shard), shards)| db::runs::ShardLink::Child {
        parent,
        shard,
        shards,
    })
}

/// The retry a run's end asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Retry {
    /// Its attempt number.
    pub attempt: i32,
    /// Seconds from the end before it may be claimed.
    pub delay_seconds: f64,
    /// Whether it resumes from the ended run's last checkpoint (else it starts over).
    pub resume: bool,
}

impl Retry {
    /// The request of this retry of `ended`: its arguments and configuration, its pipeline step, and (when it
    /// resumes) the checkpoint it starts from.
    fn new_run<'a>(&self, ended: &'a Run) -> db::runs::NewRun<'a> {
        let checkpoint = ended.checkpoint.as_ref().zip(ended.checkpoint_at).filter(|_| self.resume);
        db::runs::NewRun {
            id: Uuid::now_v7(),
            worker: &ended.worker,
            requested_by: &ended.requested_by,
            arguments: &ended.arguments,
            config: &ended.config,
            trace_context: ended.trace_context.as_deref(),
            override_version: None,
            tags: &ended.tags,
            links: db::runs::Links {
                fire: None,
                retry: Some((ended.id, self.attempt)),
                delay_seconds: Some(self.delay_seconds),
                step: ended.pipeline_run_id.zip(ended.pipeline_step),
                follows: checkpoint.map(|_| (ended.id, crate::FollowKind::Resume)),
                checkpoint,
                stamped_when_written: false,
                shard: shard_link(ended),
                even_if_paused: false,
            },
        }
    }
}

/// The retry that follows `ended`, if its policy asks for one: the next attempt, not claimed before its backoff
/// ends (`unit`, uniform in 0..1, picks the jitter); a resume of it (from its checkpoint) when it was
/// interrupted with one and the policy resumes. A run whose cancellation was asked for is never retried,
/// whatever it ended in.
pub(crate) fn retry_of(ended: &Run, unit: f64) -> Option<Retry> {
    // A parent is never retried: its children are, each by itself.
    if !matches!(ended.state, RunState::Failed | RunState::Interrupted) || ended.is_parent() {
        return None;
    }
    let policy = &ended.config.retry.as_ref()?.value;
    // `on` names states (each covering all its end reasons) and end reasons (`stalled`, `out_of_memory`, …).
    if ended.cancel_requested_at.is_some() || !policy.retries_end(ended.attempt, ended.state, ended.end_reason) {
        return None;
    }
    // An interrupted run continues from its last checkpoint when the policy says so; a failed one starts over.
    let resume = ended.state == RunState::Interrupted
        && policy.resume
        && ended.checkpoint.is_some()
        && ended.checkpoint_at.is_some();
    Some(Retry { attempt: ended.attempt + 1, delay_seconds: policy.delay(ended.attempt, unit), resume })
}

#[cfg(test)]
mod tests;
