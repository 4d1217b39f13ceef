//! Schedules, the domain: a definition checked as a person writes it (its cron expression and time zone, its
//! target and the arguments it would run with), every change audited with its reason; and, for the daemons,
//! firing what is due with the overlap and missed-fire policies applied, and starting a fire that waited.

use chrono::{DateTime, Utc};
use scrinalia_wire::{Reason, ReasonError};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Catalogue, DbError, ExplicitArgs, MissedPolicy, OverlapPolicy, Schedule, ScheduleAction, ScheduleAuditEntry,
    ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView, Store, TargetKind,
    cron::{CronError, CronSchedule},
    db::{self, schedules::ScheduleRow},
    pipelines::StepConfigs,
    runs::RequestError,
};

mod firing;
mod pass;
#[cfg(test)]
mod tests;

pub use firing::FirePass;

/// How long until what the daemons' scheduler waits for comes due (zero when due already; `None` when there is
/// none): the next schedule fire, the end of the first queued run's backoff, the first queued request's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextDue {
    /// The next fire of any schedule.
    pub fire: Option<std::time::Duration>,
    /// The end of the first queued run's backoff.
    pub not_before: Option<std::time::Duration>,
    /// The first queued request's expiry.
    pub expiry: Option<std::time::Duration>,
}

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
    /// A tag is not a short word, or there are more than ten.
    #[error("{0}")]
    Tags(String),
    /// No reason, or one that cannot be kept.
    #[error(transparent)]
    Reason(#[from] ReasonError),
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
    tags: Vec<String>,
}

/// The row a change `action` of a schedule writes, given the schedule as it is (`current`) and the database
/// clock: `None` deletes it. A resumed schedule fires from now on: what fell while it was paused is not a
/// missed fire.
fn row_after(
    action: ScheduleAction,
    checked: Option<&Checked>,
    current: Option<&Schedule>,
    name: &str,
    now: DateTime<Utc>,
) -> Result<Option<ScheduleRow>, ScheduleError> {
    Ok(match (action, checked, current) {
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
                next_fire_at: if enabled { cron.next_after(now) } else { None },
                tags: current.tags.clone(),
            })
        }
        _ => None,
    })
}

impl Store {
    async fn check_input(&self, catalogue: &Catalogue, input: &ScheduleInput) -> Result<Checked, ScheduleError> {
        if !is_schedule_name(&input.name) {
            return Err(ScheduleError::InvalidName(input.name.clone()));
        }
        let cron = CronSchedule::parse(&input.cron, input.time_zone.as_deref().unwrap_or("UTC"))?;
        let tags = crate::tag::check_tags(&input.tags).map_err(ScheduleError::Tags)?;
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
            tags,
        })
    }

    /// The schedule whose id or name is `key`.
    async fn find_schedule(&self, key: &str) -> Result<Schedule, ScheduleError> {
        let found = match Uuid::parse_str(key) {
            Ok(id) => self.db.retrying(|| db::schedules::get(&self.db, id)).await?,
            Err(_) => self.db.retrying(|| db::schedules::by_name(&self.db, key)).await?,
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
        let reason = Reason::new(reason, "the schedule")?;
        let now = self.now().await?;
        let mut tx = self.db.begin_write().await?;
        tx.lock(&format!("schedule.{id}")).await?;
        let current = db::schedules::get(&mut tx, id).await?;
        if current.is_none() && action != ScheduleAction::Create {
            return Err(ScheduleError::NotFound(id.to_string()));
        }
        let written = match row_after(action, checked, current.as_ref(), name, now)? {
            Some(row) => {
                let taken = db::schedules::by_name(&mut tx, &row.name).await?;
                if taken.is_some_and(|other| other.id != id) {
                    return Err(ScheduleError::NameTaken(name.to_owned()));
                }
                Some(db::schedules::upsert(&mut tx, id, &row, actor).await?)
            }
            None => {
                db::schedules::delete(&mut tx, id).await?;
                None
            }
        };
        // A fire that waited for its target does not wait past a pause or a deletion: it is recorded skipped.
        if let Some(waiting) = current.as_ref().and_then(|c| c.waiting_fire_at)
            && written.as_ref().is_none_or(|w| !w.enabled)
        {
            let how = if written.is_some() { "paused" } else { "deleted" };
            db::schedules::drop_waiting_fire(&mut tx, id, waiting, how).await?;
        }
        let as_json = |s: &Option<Schedule>| s.as_ref().and_then(|s| serde_json::to_value(s).ok());
        let (before, after) = (as_json(&current), as_json(&written));
        db::schedules::audit(&mut tx, id, actor, action, (before.as_ref(), after.as_ref()), &reason).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// Creates a schedule as `actor`, for the reason in `input`.
    pub(crate) async fn create_schedule(
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
    pub(crate) async fn replace_schedule(
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
    pub(crate) async fn set_schedule_enabled(
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
    pub(crate) async fn delete_schedule(
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
    pub(crate) async fn schedules(&self) -> Result<Vec<ScheduleView>, DbError> {
        let (schedules, fires) =
            tokio::try_join!(async { self.db.retrying(|| db::schedules::list(&self.db)).await }, async {
                self.db.retrying(|| db::schedules::last_fires(&self.db)).await
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
    pub(crate) async fn schedule(&self, key: &str) -> Result<ScheduleView, ScheduleError> {
        let schedule = self.find_schedule(key).await?;
        let last = self.db.retrying(|| db::schedules::fires(&self.db, schedule.id, 1)).await?.into_iter().next();
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
    pub(crate) async fn schedule_fires(&self, key: &str, limit: u32) -> Result<Vec<ScheduleFire>, ScheduleError> {
        let schedule = match Uuid::parse_str(key) {
            Ok(id) => id,
            Err(_) => self.find_schedule(key).await?.id,
        };
        Ok(self.db.retrying(|| db::schedules::fires(&self.db, schedule, limit.clamp(1, 1000))).await?)
    }

    /// A schedule's audit trail, newest first (1 to 1000); kept after the schedule is deleted (by id).
    pub(crate) async fn schedule_audit(&self, key: &str, limit: u32) -> Result<Vec<ScheduleAuditEntry>, ScheduleError> {
        let schedule = match Uuid::parse_str(key) {
            Ok(id) => id,
            Err(_) => self.find_schedule(key).await?.id,
        };
        Ok(self.db.retrying(|| db::schedules::audit_trail(&self.db, schedule, limit.clamp(1, 1000))).await?)
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
        tags: c.tags.clone(),
    }
}

fn arguments_error(e: RequestError) -> ScheduleError {
    match e {
        RequestError::Database(e) => ScheduleError::Database(e),
        other => ScheduleError::Arguments(other.to_string()),
    }
}
