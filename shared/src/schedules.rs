//! Schedules, the domain: a definition checked as a person writes it (its cron expression and time zone, its
//! target and the arguments it would run with), every change audited with its reason; and, for the daemons,
//! firing what is due with the overlap and missed-fire policies applied, and starting a fire that waited.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Catalogue, Database, DbError, ExplicitArgs, FireOutcome, MissedPolicy, OverlapPolicy, Schedule, ScheduleAction,
    ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView, TargetKind,
    cron::{CronError, CronSchedule},
    db::{
        self,
        pipelines::NewPipelineRun,
        retrying,
        runs::{Links, NewRun},
        schedules::{Fire, Request, ScheduleRow, WriteRefused},
    },
    overrides::check_reason,
    pipelines::StepConfigs,
    runs::RequestError,
};

/// How many fire times a preview and a schedule's view show.
pub const UPCOMING: usize = 3;
/// The most fires one pass records for one schedule (a schedule that fires every second and was down for a day
/// is caught up over several passes, each a short transaction).
const CATCH_UP: usize = 500;

/// Why a schedule change was refused; each displays as a sentence for people.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// No schedule has this id or name.
    #[error("There is no schedule {0:?}.")]
    NotFound(String),
    /// Another schedule has this name.
    #[error("A schedule named {0:?} exists already; choose another name or change that one.")]
    NameTaken(String),
    /// The name is empty, too long or has characters outside the alphabet.
    #[error("The schedule name {0:?} must be 1 to 100 letters, digits, '-', '_' or '.'.")]
    InvalidName(String),
    /// Neither or both of `worker` and `pipeline`.
    #[error("A schedule fires a worker or a pipeline: give exactly one of \"worker\" and \"pipeline\".")]
    Target,
    /// The catalogue has no such worker.
    #[error("There is no worker {0:?}.")]
    UnknownWorker(String),
    /// The catalogue has no such pipeline.
    #[error("There is no pipeline {0:?}.")]
    UnknownPipeline(String),
    /// The cron expression or the time zone.
    #[error("{0}")]
    Cron(#[from] CronError),
    /// The arguments do not fit the target.
    #[error("{0}")]
    Arguments(String),
    /// The reason is missing or unusable.
    #[error("{0}")]
    Reason(String),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// The expression's next fire times after `now`, for a preview before saving.
pub fn preview(cron: &str, time_zone: Option<&str>, now: DateTime<Utc>) -> Result<SchedulePreview, ScheduleError> {
    let zone = time_zone.unwrap_or("UTC");
    let parsed = CronSchedule::parse(cron, zone)?;
    Ok(SchedulePreview {
        cron: parsed.expression().to_owned(),
        time_zone: parsed.time_zone().to_owned(),
        upcoming: parsed.upcoming(now, UPCOMING),
    })
}

fn is_schedule_name(name: &str) -> bool {
    (1..=100).contains(&name.chars().count())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A definition checked against the catalogue: the row to write, and its parsed expression.
struct Checked {
    target_kind: TargetKind,
    target: String,
    cron: CronSchedule,
    arguments: Value,
    enabled: bool,
    overlap: OverlapPolicy,
    missed: MissedPolicy,
}

impl Database {
    async fn check_input(&self, catalogue: &Catalogue, input: &ScheduleInput) -> Result<Checked, ScheduleError> {
        if !is_schedule_name(&input.name) {
            return Err(ScheduleError::InvalidName(input.name.clone()));
        }
        let cron = CronSchedule::parse(&input.cron, input.time_zone.as_deref().unwrap_or("UTC"))?;
        let arguments = input.arguments.clone().unwrap_or_else(|| Value::Object(Default::default()));
        let (target_kind, target) = match (&input.worker, &input.pipeline) {
            (Some(worker), None) => {
                let spec = catalogue.worker(worker).ok_or_else(|| ScheduleError::UnknownWorker(worker.clone()))?;
                let args: ExplicitArgs = serde_json::from_value(arguments.clone()).map_err(|e| {
                    ScheduleError::Arguments(format!("The arguments do not fit worker {worker:?}: {e}."))
                })?;
                self.resolve_run(catalogue, spec, &args).await.map_err(arguments_error)?;
                (TargetKind::Worker, worker.clone())
            }
            (None, Some(pipeline)) => {
                let spec =
                    catalogue.pipeline(pipeline).ok_or_else(|| ScheduleError::UnknownPipeline(pipeline.clone()))?;
                StepConfigs::resolve(self, catalogue, spec, &arguments).await.map_err(|e| match e {
                    crate::pipelines::PipelineError::Database(e) => ScheduleError::Database(e),
                    other => ScheduleError::Arguments(other.to_string()),
                })?;
                (TargetKind::Pipeline, pipeline.clone())
            }
            _ => return Err(ScheduleError::Target),
        };
        Ok(Checked {
            target_kind,
            target,
            cron,
            arguments,
            enabled: input.enabled.unwrap_or(true),
            overlap: input.overlap.unwrap_or_default(),
            missed: input.missed.unwrap_or_default(),
        })
    }

    /// The schedule whose id or name is `key`.
    async fn find_schedule(&self, key: &str) -> Result<Schedule, ScheduleError> {
        let found = match Uuid::parse_str(key) {
            Ok(id) => retrying!(self, db::schedules::get(self, id).await)?,
            Err(_) => retrying!(self, db::schedules::by_name(self, key).await)?,
        };
        found.ok_or_else(|| ScheduleError::NotFound(key.to_owned()))
    }

    /// Writes a change of schedule `id` under its lock and audits it.
    async fn write_schedule(
        &self,
        id: Uuid,
        actor: &str,
        reason: Option<&str>,
        action: ScheduleAction,
        checked: Option<&Checked>,
        name: &str,
    ) -> Result<Option<Schedule>, ScheduleError> {
        let reason = check_reason(reason).map_err(|e| ScheduleError::Reason(e.to_string()))?;
        let now = self.now().await?;
        let next = |current: Option<&Schedule>| {
            let row = match (action, checked, current) {
                (ScheduleAction::Delete, _, _) => None,
                (ScheduleAction::Create | ScheduleAction::Change, Some(c), _) => Some(row_of(name, c, now)),
                (ScheduleAction::Pause | ScheduleAction::Resume, _, Some(current)) => {
                    let enabled = action == ScheduleAction::Resume;
                    let cron = CronSchedule::parse(&current.cron, &current.time_zone)?;
                    Some(ScheduleRow {
                        name: current.name.clone(),
                        target_kind: current.target_kind,
                        target: current.target.clone(),
                        cron: current.cron.clone(),
                        time_zone: current.time_zone.clone(),
                        arguments: current.arguments.clone(),
                        enabled,
                        overlap: current.overlap,
                        missed: current.missed,
                        // A resumed schedule fires from now on: what fell while it was paused is not a missed fire.
                        next_fire_at: if enabled { cron.next_after(now) } else { None },
                    })
                }
                _ => None,
            };
            Ok::<_, ScheduleError>((action, row))
        };
        match db::schedules::change(self, id, actor, &reason, next).await?? {
            Ok(written) => Ok(written),
            Err(WriteRefused::NameTaken) => Err(ScheduleError::NameTaken(name.to_owned())),
            Err(WriteRefused::NotFound) => Err(ScheduleError::NotFound(id.to_string())),
        }
    }

    /// Creates a schedule as `actor`, for the reason in `input`.
    pub async fn create_schedule(
        &self,
        catalogue: &Catalogue,
        actor: &str,
        input: &ScheduleInput,
    ) -> Result<ScheduleView, ScheduleError> {
        let checked = self.check_input(catalogue, input).await?;
        let id = Uuid::now_v7();
        let written = self
            .write_schedule(id, actor, input.reason.as_deref(), ScheduleAction::Create, Some(&checked), &input.name)
            .await?;
        let schedule = written.ok_or_else(|| ScheduleError::NotFound(id.to_string()))?;
        Ok(self.view_of(schedule, None))
    }

    /// Replaces the definition of the schedule `key` (id or name) as `actor`. Its next fire time is computed
    /// again from now.
    pub async fn replace_schedule(
        &self,
        catalogue: &Catalogue,
        key: &str,
        actor: &str,
        input: &ScheduleInput,
    ) -> Result<ScheduleView, ScheduleError> {
        let current = self.find_schedule(key).await?;
        let checked = self.check_input(catalogue, input).await?;
        let written = self
            .write_schedule(
                current.id,
                actor,
                input.reason.as_deref(),
                ScheduleAction::Change,
                Some(&checked),
                &input.name,
            )
            .await?;
        let schedule = written.ok_or_else(|| ScheduleError::NotFound(key.to_owned()))?;
        let last = self.schedule_fires(&schedule.id.to_string(), 1).await?.into_iter().next();
        Ok(self.view_of(schedule, last))
    }

    /// Pauses (`enabled: false`) or resumes the schedule `key` as `actor`.
    pub async fn set_schedule_enabled(
        &self,
        key: &str,
        enabled: bool,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<ScheduleView, ScheduleError> {
        let current = self.find_schedule(key).await?;
        let action = if enabled { ScheduleAction::Resume } else { ScheduleAction::Pause };
        let written = self.write_schedule(current.id, actor, reason, action, None, &current.name).await?;
        let schedule = written.ok_or_else(|| ScheduleError::NotFound(key.to_owned()))?;
        let last = self.schedule_fires(&schedule.id.to_string(), 1).await?.into_iter().next();
        Ok(self.view_of(schedule, last))
    }

    /// Deletes the schedule `key` as `actor`; its fire history and audit trail are kept.
    pub async fn delete_schedule(
        &self,
        key: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<Schedule, ScheduleError> {
        let current = self.find_schedule(key).await?;
        self.write_schedule(current.id, actor, reason, ScheduleAction::Delete, None, &current.name).await?;
        Ok(current)
    }

    /// Every schedule with its next fire times and last fire, by name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleView>, DbError> {
        let (schedules, fires) = tokio::try_join!(async { retrying!(self, db::schedules::list(self).await) }, async {
            retrying!(self, db::schedules::last_fires(self).await)
        })?;
        Ok(schedules
            .into_iter()
            .map(|s| {
                let last = fires.iter().find(|f| f.schedule_id == s.id).cloned();
                self.view_of(s, last)
            })
            .collect())
    }

    /// One schedule, by id or name.
    pub async fn schedule(&self, key: &str) -> Result<ScheduleView, ScheduleError> {
        let schedule = self.find_schedule(key).await?;
        let last = retrying!(self, db::schedules::fires(self, schedule.id, 1).await)?.into_iter().next();
        Ok(self.view_of(schedule, last))
    }

    fn view_of(&self, schedule: Schedule, last_fire: Option<ScheduleFire>) -> ScheduleView {
        let upcoming = match (schedule.next_fire_at, CronSchedule::parse(&schedule.cron, &schedule.time_zone)) {
            (Some(first), Ok(cron)) => {
                let mut upcoming = vec![first];
                upcoming.extend(cron.upcoming(first, UPCOMING - 1));
                upcoming
            }
            _ => Vec::new(),
        };
        ScheduleView { schedule, upcoming, last_fire }
    }

    /// A schedule's fires, newest first (1 to 1000).
    pub async fn schedule_fires(&self, key: &str, limit: u32) -> Result<Vec<ScheduleFire>, ScheduleError> {
        let schedule = match Uuid::parse_str(key) {
            Ok(id) => id,
            Err(_) => self.find_schedule(key).await?.id,
        };
        Ok(retrying!(self, db::schedules::fires(self, schedule, limit.clamp(1, 1000)).await)?)
    }

    /// A schedule's audit trail, newest first (1 to 1000); kept after the schedule is deleted (by id).
    pub async fn schedule_audit(&self, key: &str, limit: u32) -> Result<Vec<ScheduleAuditEntry>, ScheduleError> {
        let schedule = match Uuid::parse_str(key) {
            Ok(id) => id,
            Err(_) => self.find_schedule(key).await?.id,
        };
        Ok(retrying!(self, db::schedules::audit_trail(self, schedule, limit.clamp(1, 1000)).await)?)
    }
}

fn row_of(name: &str, c: &Checked, now: DateTime<Utc>) -> ScheduleRow {
    ScheduleRow {
        name: name.to_owned(),
        target_kind: c.target_kind,
        target: c.target.clone(),
        cron: c.cron.expression().to_owned(),
        time_zone: c.cron.time_zone().to_owned(),
        arguments: c.arguments.clone(),
        enabled: c.enabled,
        overlap: c.overlap,
        missed: c.missed,
        next_fire_at: if c.enabled { c.cron.next_after(now) } else { None },
    }
}

fn arguments_error(e: RequestError) -> ScheduleError {
    match e {
        RequestError::Database(e) => ScheduleError::Database(e),
        other => ScheduleError::Arguments(other.to_string()),
    }
}

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
