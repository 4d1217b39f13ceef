//! The fire pass: one transaction that takes every due schedule no other daemon holds, requests what each fire
//! asks for with the overlap policy applied, records every fire and advances each schedule's next fire time.
//! Exactly one daemon fires each (schedule, fire time): the row lock and the `next_fire_at <= now` condition
//! decide it, and unique indexes on the runs' and pipeline runs' (schedule, fire time) back it up. One
//! transaction for the whole pass, so that twenty schedules due in the same second cost one commit, and their
//! runs become visible (and are claimed) together, after the last fire is written.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::firing::plan;
use crate::{
    Catalogue, ExplicitArgs, FireOutcome, OverlapPolicy, ResolvedConfig, Schedule, TargetKind,
    db::{
        self, Database, Tx,
        pipelines::NewPipelineRun,
        runs::{Links, NewRun},
        schedules::fires::NewFire,
    },
    pipelines,
    runs::Resolver,
};

/// What a fire requests, resolved before the statements that write it.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A run of a worker.
    Run { worker: String, arguments: Box<ExplicitArgs>, config: Box<ResolvedConfig> },
    /// A pipeline run (its first step is requested with it).
    Pipeline { pipeline: String, steps: Vec<String>, configs: Vec<ResolvedConfig>, arguments: Value, tags: Vec<String> },
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

/// What requesting a fire's target did.
pub(crate) enum Requested {
    Run(Uuid),
    Pipeline(Uuid),
    /// Refused: the target had this run (or pipeline run) in flight, or, with none, a unique index refused it.
    Blocked(Option<Uuid>),
}

/// Fires up to `limit` due schedules (database clock) of `catalogue` as `daemon`, in one transaction: takes
/// every due schedule no other daemon holds, reads the overrides and descriptions the targets resolve against,
/// plans each schedule's fires ([`plan`], with fires later than `missed_after` handled by the schedule's
/// missed policy), and writes them. What it did for each schedule it took (none when another daemon holds or
/// has just fired them all).
pub(crate) async fn fire_pass(
    db: &Database,
    catalogue: &Catalogue,
    daemon: Uuid,
    limit: u32,
    missed_after: chrono::Duration,
) -> db::Result<Vec<Fired>> {
    let mut tx = db.begin_write().await?;
    let Some((due, now)) = db::schedules::fires::take_due(&mut tx, limit).await? else {
        tx.rollback().await?;
        return Ok(Vec::new());
    };
    let overrides = db::overrides::list(&mut tx).await?;
    let descriptions = db::descriptions::list(&mut tx).await?;
    let resolver = Resolver::new(overrides, descriptions);
    // Read under the same transaction as the fires: a worker paused now has its fires recorded skipped.
    let paused: std::collections::HashMap<String, crate::pauses::WorkerPause> =
        db::pauses::list(&mut tx).await?.into_iter().map(|p| (p.worker, p.pause)).collect();
    let mut pass = Vec::with_capacity(due.len());
    for schedule in &due {
        let Some(expected) = schedule.next_fire_at else { continue };
        let Plan { fires, next } = plan(catalogue, &resolver, schedule, now, missed_after);
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
            let (mut run, mut pipeline_run, mut blocked_by) = (None, None, None);
            let paused_target = fire.target.as_ref().and_then(|t| paused_worker(t, &paused));
            if let Some((worker, pause)) = paused_target {
                (outcome, reason) = (FireOutcome::Skipped, Some(paused_reason(worker, pause)));
            } else if let Some(target) = &fire.target {
                match request(&mut tx, schedule, fire.at, target, false).await? {
                    Requested::Run(id) => run = Some(id),
                    Requested::Pipeline(id) => pipeline_run = Some(id),
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
            let record = NewFire {
                schedule: schedule.id,
                at: fire.at,
                outcome,
                run,
                pipeline_run,
                reason: reason.as_deref(),
                blocked_by,
                fired_by: daemon,
            };
            if !db::schedules::fires::record(&mut tx, &record).await? {
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
        db::schedules::fires::advance(&mut tx, schedule.id, next, waiting).await?;
        pass.push(fired);
    }
    tx.commit().await?;
    Ok(pass)
}

/// The worker `target` runs and its pause, when it is a run of a paused worker. A pipeline's fire is requested
/// anyway: its step for a paused worker waits for the resume.
fn paused_worker<'a>(
    target: &'a Target,
    paused: &'a std::collections::HashMap<String, crate::pauses::WorkerPause>,
) -> Option<(&'a str, &'a crate::pauses::WorkerPause)> {
    match target {
        Target::Run { worker, .. } => paused.get(worker).map(|p| (worker.as_str(), p)),
        Target::Pipeline { .. } => None,
    }
}

/// Why a fire of a paused worker was skipped: "paused: …", with since when, by whom and why.
pub(crate) fn paused_reason(worker: &str, pause: &crate::pauses::WorkerPause) -> String {
    format!(
        "{}: worker {worker} is paused since {} (by {}: {})",
        crate::pauses::PAUSED,
        pause.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        pause.by,
        pause.reason.trim_end_matches('.')
    )
}

/// Requests the fire of `schedule` that waits for its target (`target`, resolved for that fire time), if the
/// target is free now, in one transaction; `true` when it was requested.
pub(crate) async fn release_waiting(
    db: &Database,
    schedule: &Schedule,
    at: DateTime<Utc>,
    target: &Target,
) -> db::Result<bool> {
    let mut tx = db.begin_write().await?;
    if !db::schedules::fires::take_waiting(&mut tx, schedule.id, at).await? {
        return Ok(false);
    }
    let requested = match request(&mut tx, schedule, at, target, true).await? {
        Requested::Run(id) => (Some(id), None),
        Requested::Pipeline(id) => (None, Some(id)),
        Requested::Blocked(_) => return Ok(false),
    };
    db::schedules::fires::clear_waiting(&mut tx, schedule.id).await?;
    db::schedules::fires::mark_requested_after_waiting(&mut tx, schedule.id, at, requested).await?;
    tx.commit().await?;
    Ok(true)
}

/// In the transaction `tx`, requests `target` for the fire of `schedule` at `at`; a fire that waited for its
/// target is stamped when its run is written (`after_wait`), after the end it waited for.
async fn request(
    tx: &mut Tx,
    schedule: &Schedule,
    at: DateTime<Utc>,
    target: &Target,
    after_wait: bool,
) -> db::Result<Requested> {
    let by = format!("schedule:{}", schedule.name);
    let fire = Some((schedule.id, at));
    Ok(match target {
        Target::Run { worker, arguments, config } => {
            let new = NewRun {
                id: Uuid::now_v7(),
                worker,
                requested_by: &by,
                arguments,
                config,
                trace_context: None,
                override_version: None,
                tags: &schedule.tags,
                links: Links { fire, stamped_when_written: after_wait, ..Links::default() },
            };
            match crate::runs::shards::insert(tx, &new).await? {
                Some(run) => Requested::Run(run.id),
                None => Requested::Blocked(db::runs::in_flight_of(&mut *tx, worker).await?.map(|r| r.id)),
            }
        }
        Target::Pipeline { pipeline, steps, configs, arguments, tags } => {
            let tags = crate::tag::merged(tags, &schedule.tags);
            let new = NewPipelineRun {
                id: Uuid::now_v7(),
                pipeline,
                steps,
                configs,
                arguments,
                requested_by: &by,
                fire,
                tags: &tags,
            };
            match pipelines::insert_and_start(tx, &new).await? {
                Some(id) => Requested::Pipeline(id),
                None => Requested::Blocked(db::pipelines::in_flight_of(&mut *tx, pipeline).await?.map(|p| p.id)),
            }
        }
    })
}

/// The outcome of a fire whose target had `blocking` in flight, by the schedule's overlap policy, with the fire
/// that waits afterwards (`queue` keeps at most one waiting).
pub(crate) fn overlapped(
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
