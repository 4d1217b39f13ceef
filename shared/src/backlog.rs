//! Backlog-driven runs: a worker whose own queue count reaches its trigger's threshold gets one run requested
//! by the daemons, once the count has been quiet for `quiet_seconds` (or `max_delay_seconds` after it first
//! reached the threshold). Exactly once across daemons: the fire is one transaction under the worker's backlog
//! lock that re-reads where the count stands, requests the run (the in-flight index keeps single flight) and
//! records the fire; a fire newer than the count means that count was fired on. The rules are pure
//! ([`decide`]) and the daemon's loop asks them when to look again.

use std::time::Duration;

use scrinalia_wire::{BacklogFire, BacklogTrigger};
use uuid::Uuid;

use crate::{
    Catalogue, DbError, ExplicitArgs, Store, db,
    db::runs::{Links, NewRun},
};

pub use db::backlog::CountState;

/// Who requests a backlog-driven run (its `requested_by`), as schedules write `schedule:NAME`.
pub const REQUESTED_BY: &str = "backlog";

/// What the rules make of a worker's count now.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Request a run, for this reason.
    Fire(String),
    /// Not yet: look again after this long.
    Wait(Duration),
    /// Nothing to do until the count (or the worker's runs) change.
    Idle,
}

/// The workers paused now: no backlog fire for them, and "paused" is the reason of their freshness breach. Read
/// with `on`: the fire's transaction (so a pause committed before it is seen), or the pool for freshness.
pub(crate) async fn paused_workers(on: impl Into<db::On<'_>>) -> db::Result<std::collections::BTreeSet<String>> {
    Ok(db::pauses::list(on).await?.into_iter().map(|p| p.worker).collect())
}

/// The rules: fire when the last count (taken after the worker's last run ended, and not fired on yet) is at
/// or above the threshold and has not grown for `quiet_seconds`, or `max_delay_seconds` have passed since it
/// first reached the threshold; never while a run is in flight or the worker is paused.
pub fn decide(trigger: &BacklogTrigger, state: &CountState, in_flight: bool, paused: bool) -> Decision {
    let Some(pending) = state.pending else { return Decision::Idle };
    let threshold = i64::try_from(trigger.when_pending_at_least).unwrap_or(i64::MAX);
    let Some(reached_ago) = state.reached_ago.filter(|_| pending >= threshold) else { return Decision::Idle };
    if in_flight || paused || !state.counted_after_end || state.fired_since_count {
        return Decision::Idle;
    }
    #[allow(clippy::cast_precision_loss)] // seconds within a year
    let quiet = trigger.quiet_seconds.unwrap_or(0) as f64;
    let quiet_for = state.grew_ago.unwrap_or(reached_ago);
    if quiet_for >= quiet {
        return Decision::Fire(format!("{pending} pending for {} s", seconds(quiet_for)));
    }
    let mut wait = quiet - quiet_for;
    if let Some(max) = trigger.max_delay_seconds {
        #[allow(clippy::cast_precision_loss)]
        let max = max as f64;
        if reached_ago >= max {
            return Decision::Fire(format!("{pending} pending, waited the max delay of {} s", seconds(max)));
        }
        wait = wait.min(max - reached_ago);
    }
    Decision::Wait(Duration::from_secs_f64(wait.max(0.0)))
}

/// Whole seconds, for a sentence.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn seconds(s: f64) -> u64 {
    s.max(0.0).floor() as u64
}

/// How often a worker with `trigger` is counted: every min(`interval`, quiet_seconds / 2), at least a second.
pub fn count_interval(trigger: &BacklogTrigger, interval: Duration) -> Duration {
    match trigger.quiet_seconds {
        Some(q) => interval.min(Duration::from_millis(q.saturating_mul(500))).max(Duration::from_secs(1)),
        None => interval,
    }
}

/// What a fire attempt did.
#[derive(Debug, Clone)]
pub enum Fired {
    /// A run was requested (or, when it could not be, the fire was recorded skipped).
    Fired(BacklogFire),
    /// Nothing was due after all (another daemon fired, a run is in flight, the count is stale): see
    /// [`Decision`].
    NotDue(Decision),
}

impl Store {
    /// Where the last count of each of `workers` stands.
    pub(crate) async fn backlog_states(&self, workers: &[String]) -> Result<Vec<CountState>, DbError> {
        self.db.retrying(|| db::backlog::states(&self.db, workers)).await
    }

    /// Fires `worker`'s backlog trigger as `daemon` if it is due: in one transaction under the worker's backlog
    /// lock, reads where its count stands and whether a run is in flight, and when [`decide`] says fire,
    /// requests a run (`requested_by` [`REQUESTED_BY`]) and records the fire with its reason.
    pub(crate) async fn fire_backlog(
        &self,
        catalogue: &Catalogue,
        worker: &str,
        daemon: Uuid,
    ) -> Result<Fired, DbError> {
        let Some(spec) = catalogue.worker(worker) else { return Ok(Fired::NotDue(Decision::Idle)) };
        let resolver = self.resolver().await?;
        let _own = self.db.own_write();
        let mut tx = self.db.begin_write().await?;
        tx.lock(&format!("backlog.{worker}")).await?;
        let state = db::backlog::state(&mut tx, worker).await?;
        let in_flight = db::runs::in_flight_of(&mut tx, worker).await?.is_some();
        let paused = paused_workers(&mut tx).await?.contains(worker);
        let arguments = ExplicitArgs::default();
        let config = resolver.resolve(catalogue, spec, &arguments);
        let trigger = config.as_ref().ok().and_then(|c| c.backlog.as_ref()).map(|t| t.value);
        let (Some(state), Some(trigger)) = (state, trigger) else {
            tx.rollback().await?;
            return Ok(Fired::NotDue(Decision::Idle));
        };
        let reason = match decide(&trigger, &state, in_flight, paused) {
            Decision::Fire(reason) => reason,
            other => {
                tx.rollback().await?;
                return Ok(Fired::NotDue(other));
            }
        };
        let pending = state.pending.unwrap_or(0);
        let (run_id, skipped) = match &config {
            Ok(config) => {
                let new = NewRun {
                    id: Uuid::now_v7(),
                    worker,
                    requested_by: REQUESTED_BY,
                    arguments: &arguments,
                    config,
                    trace_context: None,
                    override_version: None,
                    links: Links::default(),
                    tags: &[],
                };
                match crate::runs::shards::insert(&mut tx, &new).await? {
                    Some(run) => (Some(run.id), None),
                    None => {
                        // A run was requested between the read and the insert: single flight holds, no fire.
                        tx.rollback().await?;
                        return Ok(Fired::NotDue(Decision::Idle));
                    }
                }
            }
            Err(e) => (None, Some(format!("could not request a run: {e}"))),
        };
        let record = db::backlog::NewBacklogFire {
            worker,
            pending,
            reason: &reason,
            run_id,
            skipped_reason: skipped.as_deref(),
            fired_by: daemon,
        };
        let fire = db::backlog::record(&mut tx, &record).await?;
        tx.commit().await?;
        tracing::info!(worker, pending, reason = %fire.reason, run_id = ?fire.run_id, "backlog trigger fired");
        Ok(Fired::Fired(fire))
    }

    /// A worker's backlog fires, newest first (at most `limit`, 1 to 1000).
    pub(crate) async fn backlog_fires(&self, worker: &str, limit: u32) -> Result<Vec<BacklogFire>, DbError> {
        self.db.retrying(|| db::backlog::list(&self.db, worker, limit.clamp(1, 1000))).await
    }
}

#[cfg(test)]
mod tests;
