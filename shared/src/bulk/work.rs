//! A daemon's share of a bulk action: it takes the job under a lease on the database clock, then works its runs
//! a batch at a time, in order (the newest first, so each worker's leading run is acted on before the runs that
//! follow it). A batch is begun in one transaction (the lease renewed, the runs marked attempted, the id of each
//! rerun or resume chosen) and recorded in another (each outcome, the job's counts, its end), both fenced by the
//! lease; the actions between are the single-run operations themselves. A daemon that takes a job over from
//! one that died acts on no run twice: a cancel is idempotent, and a rerun or resume is requested with the id
//! chosen before, which the ledger's primary key lets exist once.

use std::{collections::HashMap, time::Duration};

use uuid::Uuid;

use super::follower_sentence;
use crate::{
    BulkAction, BulkActionKind, BulkOutcome, Catalogue, DbError, ExplicitArgs, FollowKind, RunState, Store, db,
    runs::{CancelOutcome, FollowError, RequestError},
};

/// What a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchDone {
    /// Runs were given their outcomes; `finished` when none is left.
    Worked {
        /// How many.
        runs: usize,
        /// Whether the job is done.
        finished: bool,
    },
    /// The job is no longer this daemon's (another took it over after its lease ran out) or no longer running.
    Lost,
}

/// An outcome and its sentence.
type Outcome = (BulkOutcome, Option<String>);

impl Store {
    /// Takes the oldest bulk action that is waiting, or whose daemon's lease ran out, for `daemon`.
    pub(crate) async fn claim_bulk(&self, daemon: Uuid, lease: Duration) -> Result<Option<BulkAction>, DbError> {
        db::bulk::claim(&self.db, daemon, lease).await
    }

    /// Gives up `daemon`'s lease of bulk action `id`, so that another daemon takes it over at once.
    pub(crate) async fn release_bulk(&self, id: Uuid, daemon: Uuid) -> Result<(), DbError> {
        self.db.retrying(|| db::bulk::release(&self.db, id, daemon)).await
    }

    /// How long until a bulk action may be taken, on the database clock (zero: now); `None` when none is left.
    pub(crate) async fn next_bulk_in(&self) -> Result<Option<Duration>, DbError> {
        let seconds = self.db.retrying(|| db::bulk::next_claim_in(&self.db)).await?;
        Ok(crate::store::wait_of(seconds))
    }

    /// Works the next batch of up to `size` runs of `job`, held by `daemon`, renewing its lease to `lease`.
    pub(crate) async fn work_bulk_batch(
        &self,
        catalogue: &Catalogue,
        job: &BulkAction,
        daemon: Uuid,
        lease: Duration,
        size: u32,
    ) -> Result<BatchDone, DbError> {
        let mut tx = self.db.begin_write().await?;
        if !db::bulk::renew(&mut tx, job.id, daemon, lease).await? {
            return Ok(BatchDone::Lost);
        }
        let mut rows = db::bulk::pending(&mut tx, job.id, size).await?;
        let (Some(first), Some(last)) = (rows.first().map(|r| r.seq), rows.last().map(|r| r.seq)) else {
            let finished = db::bulk::add_counts(&mut tx, job.id, daemon, [0, 0, 0]).await?;
            tx.commit().await?;
            return Ok(if finished { BatchDone::Worked { runs: 0, finished: true } } else { BatchDone::Lost });
        };
        let mut chosen = Vec::new();
        if job.action.makes_runs() {
            for row in rows.iter_mut().filter(|r| r.leads && r.new_run_id.is_none()) {
                let id = Uuid::now_v7();
                chosen.push((row.seq, id));
                row.new_run_id = Some(id);
            }
        }
        db::bulk::begin_batch(&mut tx, job.id, first, last, &chosen).await?;
        tx.commit().await?;

        let mut outcomes = Vec::with_capacity(rows.len());
        let mut leaders: HashMap<String, db::bulk::BulkRun> = HashMap::new();
        for row in &rows {
            let outcome = if row.leads {
                self.act(catalogue, job, row).await?
            } else {
                let leader = match leaders.get(&row.worker) {
                    Some(leader) => Some(leader.clone()),
                    None => self.db.retrying(|| db::bulk::leader(&self.db, job.id, &row.worker)).await?,
                };
                let sentence = match leader {
                    Some(l) => follower_sentence(
                        job.action,
                        &row.worker,
                        l.run_id,
                        l.outcome,
                        l.new_run_id,
                        l.sentence.as_deref(),
                    ),
                    None => format!("No run of {} in this action leads it.", row.worker),
                };
                (BulkOutcome::Skipped, Some(sentence))
            };
            if row.leads {
                let mut leader = row.clone();
                (leader.outcome, leader.sentence) = (Some(outcome.0), outcome.1.clone());
                leaders.insert(row.worker.clone(), leader);
            }
            outcomes.push((row.seq, outcome));
        }

        let mut tx = self.db.begin_write().await?;
        let mut counts = [0i64; 3];
        for (seq, (outcome, sentence)) in &outcomes {
            if db::bulk::record(&mut tx, job.id, *seq, *outcome, sentence.as_deref()).await? {
                counts[match outcome {
                    BulkOutcome::Done => 0,
                    BulkOutcome::Skipped => 1,
                    BulkOutcome::Failed => 2,
                }] += 1;
            }
        }
        if !db::bulk::add_counts(&mut tx, job.id, daemon, counts).await? {
            return Ok(BatchDone::Lost);
        }
        let finished = db::bulk::get(&mut tx, job.id).await?.is_some_and(|j| j.state == crate::BulkState::Done);
        tx.commit().await?;
        Ok(BatchDone::Worked { runs: outcomes.len(), finished })
    }

    /// Acts on the leading run `row` of `job`. A database error is returned (the batch is tried again later);
    /// every refusal becomes the run's outcome.
    async fn act(&self, catalogue: &Catalogue, job: &BulkAction, row: &db::bulk::BulkRun) -> Result<Outcome, DbError> {
        let tried_before = row.attempted_at.is_some();
        let how = match job.action {
            BulkActionKind::Cancel => return self.cancel_one(job, row.run_id, tried_before).await,
            BulkActionKind::Rerun => FollowKind::Rerun,
            BulkActionKind::Resume => FollowKind::Resume,
        };
        let Some(new_id) = row.new_run_id else {
            return Err(DbError::Unexpected(format!("run {} of bulk action {} has no new id", row.run_id, job.id)));
        };
        // A daemon that died after requesting it: the run exists, and is this action's.
        if tried_before && self.get_run(new_id).await?.is_some() {
            return Ok((BulkOutcome::Done, Some(format!("{} as run {new_id}.", capitalised(how)))));
        }
        let asked =
            self.continue_run_as(catalogue, row.run_id, how, &job.requested_by, &ExplicitArgs::default(), new_id).await;
        Ok(match asked {
            Ok(run) => (BulkOutcome::Done, Some(format!("{} as run {}.", capitalised(how), run.id))),
            Err(FollowError::Request(RequestError::Database(e))) => return Err(e),
            Err(FollowError::Request(RequestError::InFlight { worker, run_id, state, .. })) => (
                BulkOutcome::Skipped,
                Some(format!(
                    "{worker} already has a run in flight (run {run_id}, {state}); a bulk {} makes no second one.",
                    job.action
                )),
            ),
            Err(
                e @ (FollowError::NotFound(_)
                | FollowError::WrongState { .. }
                | FollowError::NoCheckpoint(_)
                | FollowError::AlreadyContinued { .. }
                | FollowError::NoFailures(_)
                | FollowError::NoScope(_)
                | FollowError::Shard { .. }),
            ) => (BulkOutcome::Skipped, Some(e.to_string())),
            Err(e) => (BulkOutcome::Failed, Some(e.to_string())),
        })
    }

    /// Cancels one run of a bulk cancel as its requester. A run found cancelled that this action had begun on
    /// before (its daemon died in between) counts as done.
    async fn cancel_one(&self, job: &BulkAction, run: Uuid, tried_before: bool) -> Result<Outcome, DbError> {
        Ok(match self.request_cancel(run, &job.requested_by).await? {
            None => (BulkOutcome::Skipped, Some(format!("Run {run} no longer exists (retention removed it)."))),
            Some(CancelOutcome::Cancelled(_)) => (BulkOutcome::Done, Some("Cancelled.".to_owned())),
            Some(CancelOutcome::Requested(r)) => {
                let daemon = r.daemon_id.map(|d| format!(" {d}")).unwrap_or_default();
                (BulkOutcome::Done, Some(format!("Running: its daemon{daemon} was asked to stop it.")))
            }
            Some(CancelOutcome::AlreadyFinished(r)) if tried_before && r.state == RunState::Cancelled => {
                (BulkOutcome::Done, Some("Cancelled.".to_owned()))
            }
            Some(CancelOutcome::AlreadyFinished(r)) => {
                (BulkOutcome::Skipped, Some(format!("Run {run} had already ended ({}); nothing to cancel.", r.state)))
            }
        })
    }
}

fn capitalised(how: FollowKind) -> &'static str {
    match how {
        FollowKind::Resume => "Resumed",
        FollowKind::Restart => "Restarted",
        FollowKind::Rerun | FollowKind::RerunFailed => "Rerun",
    }
}
