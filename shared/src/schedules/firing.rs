//! The daemons' side of schedules: firing what is due with the overlap and missed-fire policies applied, and
//! requesting a fire that waited for its target once the target is free.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{
    CATCH_UP,
    pass::{self, Fire, Plan, Target},
};
use crate::{
    Catalogue, DbError, ExplicitArgs, FireOutcome, MissedPolicy, Schedule, Store, TargetKind, cron::CronSchedule, db,
    pipelines::StepConfigs, runs::Resolver,
};

/// The most schedules one pass takes (the rest are taken by the next pass, at once).
const PASS: u32 = 100;

/// What one daemon's pass over the due schedules did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FirePass {
    /// Schedules this daemon took (none: nothing was due, or another daemon held them all).
    pub schedules: u32,
    /// Fire times this daemon tried to fire (in the transaction that held their schedules' rows).
    pub attempted: u32,
    /// Fires by outcome.
    pub requested: u32,
    /// Skipped by the overlap policy (or because the target could not be requested).
    pub skipped: u32,
    /// Recorded as missed.
    pub missed: u32,
    /// Waiting for the target (overlap `queue`).
    pub waiting: u32,
    /// Refused by a (schedule, fire time) unique index: a double fire the row guard should have prevented.
    pub refused_by_constraint: u32,
}

/// What a fire of `schedule` requests, resolved with `resolver`, or why it cannot request anything.
pub(super) fn target_of(catalogue: &Catalogue, resolver: &Resolver, schedule: &Schedule) -> Result<Target, String> {
    match schedule.target_kind {
        TargetKind::Worker => {
            let spec = catalogue
                .worker(&schedule.target)
                .ok_or_else(|| format!("worker {:?} is not in this daemon's catalogue any more", schedule.target))?;
            let arguments: ExplicitArgs = serde_json::from_value(schedule.arguments.clone()).unwrap_or_default();
            let config = resolver.resolve(catalogue, spec, &arguments).map_err(|e| e.to_string())?;
            Ok(Target::Run { worker: spec.name.clone(), arguments: Box::new(arguments), config: Box::new(config) })
        }
        TargetKind::Pipeline => {
            let spec = catalogue
                .pipeline(&schedule.target)
                .ok_or_else(|| format!("pipeline {:?} is not in this daemon's catalogue any more", schedule.target))?;
            let configs =
                StepConfigs::resolve_with(resolver, catalogue, spec, &schedule.arguments).map_err(|e| e.to_string())?;
            let arguments = if schedule.arguments.is_null() {
                Value::Object(Default::default())
            } else {
                schedule.arguments.clone()
            };
            Ok(Target::Pipeline {
                pipeline: spec.name.clone(),
                steps: spec.steps.clone(),
                configs: configs.0,
                arguments,
                tags: spec.tags.clone(),
            })
        }
    }
}

/// The fires of `schedule`, due at its `next_fire_at`, when the database clock reads `now`: every fire time up
/// to now (at most [`CATCH_UP`]), those later than `missed_after` handled by its `missed` policy, and the next
/// fire time after them.
pub(super) fn plan(
    catalogue: &Catalogue,
    resolver: &Resolver,
    schedule: &Schedule,
    now: DateTime<Utc>,
    missed_after: chrono::Duration,
) -> Plan {
    let expected = schedule.next_fire_at.unwrap_or(now);
    let cron = match CronSchedule::parse(&schedule.cron, &schedule.time_zone) {
        Ok(cron) => cron,
        Err(e) => {
            // Written by another version, or by hand: recorded once, and not looked at again until edited.
            tracing::error!(schedule = %schedule.name, error = %e, "a stored schedule no longer parses; it stops firing");
            let reason = format!(
                "its cron expression {:?} in {} does not parse here ({e}); it fires again once it is edited",
                schedule.cron, schedule.time_zone
            );
            let fire = Fire { at: expected, target: None, outcome: FireOutcome::Skipped, reason: Some(reason) };
            return Plan { fires: vec![fire], next: None };
        }
    };
    let mut times = vec![expected];
    times.extend(cron.fires_between(expected, now, CATCH_UP - 1));
    let next = if times.len() >= CATCH_UP { cron.next_after(times[times.len() - 1]) } else { cron.next_after(now) };
    let late = |t: &DateTime<Utc>| now - *t > missed_after;
    let missed_count = times.iter().filter(|t| late(t)).count();
    // `once`: the latest missed fire runs on recovery, unless an on-time fire follows it anyway.
    let run_once = (schedule.missed == MissedPolicy::Once && missed_count == times.len()).then(|| times.len() - 1);
    let mut target = None;
    let fires = times
        .iter()
        .enumerate()
        .map(|(i, &at)| {
            if late(&at) && run_once != Some(i) {
                let lateness = (now - at).num_milliseconds() as f64 / 1000.0;
                let reason = format!(
                    "no daemon was running at its time: found {lateness:.1} s late, after the {} s a fire may be late",
                    missed_after.num_seconds()
                );
                return Fire { at, target: None, outcome: FireOutcome::Missed, reason: Some(reason) };
            }
            match target.get_or_insert_with(|| target_of(catalogue, resolver, schedule)) {
                Ok(target) => {
                    let reason = (run_once == Some(i))
                        .then(|| format!("the latest of {missed_count} missed fires, run once on recovery"));
                    Fire { at, target: Some(target.clone()), outcome: FireOutcome::Requested, reason }
                }
                Err(why) => Fire {
                    at,
                    target: None,
                    outcome: FireOutcome::Skipped,
                    reason: Some(format!("could not request it: {why}")),
                },
            }
        })
        .collect();
    Plan { fires, next }
}

impl Store {
    /// Fires every schedule due now (database clock), as `daemon`, in one transaction. A fire later than
    /// `missed_after` is one no daemon was running for: its schedule's `missed` policy applies. The transaction
    /// takes only the due schedules no other daemon holds, so two daemons never fire the same (schedule, fire
    /// time); a unique index on the runs' (schedule, fire time) backs that up.
    pub(crate) async fn fire_due_schedules(
        &self,
        catalogue: &Catalogue,
        daemon: Uuid,
        missed_after: std::time::Duration,
    ) -> Result<FirePass, DbError> {
        let missed_after = chrono::Duration::from_std(missed_after).unwrap_or(chrono::Duration::MAX);
        let fired = pass::fire_pass(&self.db, catalogue, daemon, PASS, missed_after).await?;
        let mut totals = FirePass { schedules: u32::try_from(fired.len()).unwrap_or(u32::MAX), ..FirePass::default() };
        for f in &fired {
            totals.attempted += f.attempted();
            totals.requested += f.requested;
            totals.skipped += f.skipped;
            totals.missed += f.missed;
            totals.waiting += f.waiting;
            totals.refused_by_constraint += f.refused_by_constraint;
            tracing::info!(schedule = %f.schedule, fire_at = %f.expected, fires = f.attempted(), requested = f.requested,
                skipped = f.skipped, missed = f.missed, waiting = f.waiting, next_fire_at = ?f.next, "schedule fired");
        }
        Ok(totals)
    }

    /// Requests every fire that waits for its target (overlap `queue`) whose target is free now; how many.
    pub(crate) async fn release_waiting_fires(&self, catalogue: &Catalogue) -> Result<u32, DbError> {
        let waiting = db::schedules::fires::waiting(&self.db).await?;
        if waiting.is_empty() {
            return Ok(0);
        }
        let resolver = self.resolver().await?;
        let mut released = 0;
        for schedule in waiting {
            let Some(at) = schedule.waiting_fire_at else { continue };
            let Ok(target) = target_of(catalogue, &resolver, &schedule) else { continue };
            if pass::release_waiting(&self.db, &schedule, at, &target).await? {
                tracing::info!(schedule = %schedule.name, fire_at = %at, "a waiting fire was requested: its target is free");
                released += 1;
            }
        }
        Ok(released)
    }

    /// How long until the next schedule fires, until the first queued run's backoff ends and until the first
    /// queued request expires (zero when due already; `None` for each when there is none).
    pub(crate) async fn next_due(&self) -> Result<crate::schedules::NextDue, DbError> {
        let (fire, not_before, expiry) = db::schedules::fires::next_due(&self.db).await?;
        let wait = crate::store::wait_of;
        Ok(crate::schedules::NextDue { fire: wait(fire), not_before: wait(not_before), expiry: wait(expiry) })
    }

    /// Ends every queued request whose expiry has passed (`cancelled`, `expired`), with what follows each.
    pub(crate) async fn expire_requests(&self) -> Result<Vec<crate::Run>, DbError> {
        crate::runs::expire_requests(&self.db).await
    }
}
