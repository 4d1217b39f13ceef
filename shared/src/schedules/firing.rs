//! The daemons' side of schedules: firing what is due with the overlap and missed-fire policies applied, and
//! requesting a fire that waited for its target once the target is free.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::CATCH_UP;
use crate::{
    Catalogue, Database, DbError, ExplicitArgs, FireOutcome, MissedPolicy, Schedule, TargetKind,
    cron::CronSchedule,
    db::{
        self,
        pipelines::NewPipelineRun,
        runs::{Links, NewRun},
        schedules::{Fire, Request},
    },
    pipelines::StepConfigs,
};

/// What one daemon's pass over the due schedules did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FirePass {
    /// Fire times this daemon tried to fire (each in a transaction that held its schedule's row).
    pub attempted: u32,
    /// Schedules found due that another daemon was firing, or had fired, first.
    pub lost_races: u32,
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

/// The request a fire of `schedule` at `at` makes, or why it cannot make one.
async fn request_of<'a>(
    db: &Database,
    catalogue: &Catalogue,
    schedule: &'a Schedule,
    at: DateTime<Utc>,
    owned: &'a mut Option<Prepared>,
) -> Result<Request<'a>, String> {
    let by = format!("schedule:{}", schedule.name);
    match schedule.target_kind {
        TargetKind::Worker => {
            let spec = catalogue
                .worker(&schedule.target)
                .ok_or_else(|| format!("worker {:?} is not in this daemon's catalogue any more", schedule.target))?;
            let args: ExplicitArgs = serde_json::from_value(schedule.arguments.clone()).unwrap_or_default();
            let config = db.resolve_run(catalogue, spec, &args).await.map_err(|e| e.to_string())?;
            let prepared = owned.insert(Prepared { by, args, configs: vec![config], steps: Vec::new() });
            Ok(Request::Run(NewRun {
                id: Uuid::now_v7(),
                worker: &schedule.target,
                requested_by: &prepared.by,
                arguments: &prepared.args,
                config: &prepared.configs[0],
                trace_context: None,
                links: Links { fire: Some((schedule.id, at)), ..Links::default() },
            }))
        }
        TargetKind::Pipeline => {
            let spec = catalogue
                .pipeline(&schedule.target)
                .ok_or_else(|| format!("pipeline {:?} is not in this daemon's catalogue any more", schedule.target))?;
            let configs =
                StepConfigs::resolve(db, catalogue, spec, &schedule.arguments).await.map_err(|e| e.to_string())?;
            let prepared = owned.insert(Prepared {
                by,
                args: ExplicitArgs::default(),
                configs: configs.0,
                steps: spec.steps.clone(),
            });
            Ok(Request::Pipeline(NewPipelineRun {
                id: Uuid::now_v7(),
                pipeline: &schedule.target,
                steps: &prepared.steps,
                configs: &prepared.configs,
                arguments: &schedule.arguments,
                requested_by: &prepared.by,
                fire: Some((schedule.id, at)),
            }))
        }
    }
}

/// What a request borrows.
struct Prepared {
    by: String,
    args: ExplicitArgs,
    configs: Vec<crate::ResolvedConfig>,
    steps: Vec<String>,
}

impl Database {
    /// Fires every schedule due now (database clock), as `daemon`. A fire later than `missed_after` is one no
    /// daemon was running for: its schedule's `missed` policy applies. Each schedule is fired in a transaction
    /// that holds its row only while it is still due at the time this daemon read, so two daemons never fire
    /// the same (schedule, fire time); a unique index on the runs' (schedule, fire time) backs that up.
    pub async fn fire_due_schedules(
        &self,
        catalogue: &Catalogue,
        daemon: Uuid,
        missed_after: std::time::Duration,
    ) -> Result<FirePass, DbError> {
        let mut pass = FirePass::default();
        let (due, now) = db::schedules::due(self, 100).await?;
        let missed_after = chrono::Duration::from_std(missed_after).unwrap_or(chrono::Duration::MAX);
        for schedule in due {
            let Some(expected) = schedule.next_fire_at else { continue };
            let cron = match CronSchedule::parse(&schedule.cron, &schedule.time_zone) {
                Ok(cron) => cron,
                Err(e) => {
                    tracing::error!(schedule = %schedule.name, error = %e, "a stored schedule no longer parses; skipped");
                    continue;
                }
            };
            let mut times = vec![expected];
            times.extend(cron.fires_between(expected, now, CATCH_UP - 1));
            let next =
                if times.len() >= CATCH_UP { cron.next_after(times[times.len() - 1]) } else { cron.next_after(now) };
            let late = |t: &DateTime<Utc>| now - *t > missed_after;
            let missed_count = times.iter().filter(|t| late(t)).count();
            // `once`: the latest missed fire runs on recovery, unless an on-time fire follows it anyway.
            let run_once =
                (schedule.missed == MissedPolicy::Once && missed_count == times.len()).then(|| times.len() - 1);
            let mut owned: Vec<Option<Prepared>> = (0..times.len()).map(|_| None).collect();
            let mut plans = Vec::with_capacity(times.len());
            let mut requests = Vec::new();
            for (i, (at, slot)) in times.iter().zip(owned.iter_mut()).enumerate() {
                if late(at) && run_once != Some(i) {
                    let lateness = (now - *at).num_milliseconds() as f64 / 1000.0;
                    plans.push((*at, None, FireOutcome::Missed, Some(format!(
                        "no daemon was running at its time: found {lateness:.1} s late, after the {} s a fire may be late",
                        missed_after.num_seconds()
                    ))));
                    continue;
                }
                requests.push((i, *at, slot));
            }
            for (i, at, slot) in requests {
                let reason = (run_once == Some(i))
                    .then(|| format!("the latest of {missed_count} missed fires, run once on recovery"));
                match request_of(self, catalogue, &schedule, at, slot).await {
                    Ok(request) => plans.push((at, Some(request), FireOutcome::Requested, reason)),
                    Err(why) => {
                        plans.push((at, None, FireOutcome::Skipped, Some(format!("could not request it: {why}"))))
                    }
                }
            }
            plans.sort_by_key(|p| p.0);
            let fires: Vec<Fire<'_>> =
                plans.into_iter().map(|(at, request, outcome, reason)| Fire { at, request, outcome, reason }).collect();
            let fired = db::schedules::fire(self, &schedule, expected, &fires, next, daemon).await?;
            if !fired.held {
                pass.lost_races += 1;
                continue;
            }
            pass.attempted += u32::try_from(fires.len()).unwrap_or(u32::MAX);
            pass.requested += fired.requested;
            pass.skipped += fired.skipped;
            pass.missed += fired.missed;
            pass.waiting += fired.waiting;
            pass.refused_by_constraint += fired.refused_by_constraint;
            tracing::info!(schedule = %schedule.name, fire_at = %expected, fires = fires.len(), requested = fired.requested,
                skipped = fired.skipped, missed = fired.missed, waiting = fired.waiting, next_fire_at = ?next, "schedule fired");
        }
        Ok(pass)
    }

    /// Requests every fire that waits for its target (overlap `queue`) whose target is free now; how many.
    pub async fn release_waiting_fires(&self, catalogue: &Catalogue) -> Result<u32, DbError> {
        let mut released = 0;
        for schedule in db::schedules::waiting(self).await? {
            let Some(at) = schedule.waiting_fire_at else { continue };
            let mut owned = None;
            let Ok(request) = request_of(self, catalogue, &schedule, at, &mut owned).await else { continue };
            if db::schedules::release_waiting(self, &schedule, at, &request).await? {
                tracing::info!(schedule = %schedule.name, fire_at = %at, "a waiting fire was requested: its target is free");
                released += 1;
            }
        }
        Ok(released)
    }

    /// How long until the next schedule fires and until the first queued run's backoff ends (zero when due
    /// already); `None` for either when there is none.
    pub async fn next_due(&self) -> Result<(Option<std::time::Duration>, Option<std::time::Duration>), DbError> {
        let (fire, not_before) = db::schedules::next_due(self).await?;
        let wait = |s: Option<f64>| {
            s.map(|s| std::time::Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(std::time::Duration::MAX))
        };
        Ok((wait(fire), wait(not_before)))
    }
}
