//! Schedules (a cron expression in a time zone that requests runs of a worker or a pipeline), the record of
//! every fire, the audit trail of their changes, and the retry policy of a worker.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{EndReason, Named, RunState, named};

/// What a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// One worker: a fire requests one run.
    Worker,
    /// A pipeline of the catalogue: a fire starts a pipeline run.
    Pipeline,
}

impl Named for TargetKind {
    const ALL: &'static [Self] = &[Self::Worker, Self::Pipeline];
    const NOUN: &'static str = "a schedule target kind";
    const PLURAL: &'static str = "the target kinds";

    fn name(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Pipeline => "pipeline",
        }
    }
}
named!(TargetKind);

/// What a fire does when its target still has a run in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OverlapPolicy {
    /// The fire is recorded as skipped, naming the run that blocked it.
    #[default]
    Skip,
    /// The fire waits and runs as soon as the target is free; at most one fire waits.
    Queue,
}

impl Named for OverlapPolicy {
    const ALL: &'static [Self] = &[Self::Skip, Self::Queue];
    const NOUN: &'static str = "an overlap policy";
    const PLURAL: &'static str = "the overlap policies";

    fn name(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Queue => "queue",
        }
    }
}
named!(OverlapPolicy);

/// What happens to fires that fell while no daemon was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MissedPolicy {
    /// Each is recorded as missed; nothing runs for them.
    #[default]
    Skip,
    /// The latest runs once on recovery; the others are recorded as missed.
    Once,
}

impl Named for MissedPolicy {
    const ALL: &'static [Self] = &[Self::Skip, Self::Once];
    const NOUN: &'static str = "a missed-fire policy";
    const PLURAL: &'static str = "the missed-fire policies";

    fn name(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Once => "once",
        }
    }
}
named!(MissedPolicy);

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    /// Its id.
    pub id: Uuid,
    /// A unique name for people (`requested_by` of its runs is `schedule:<name>`).
    pub name: String,
    /// Whether it fires a worker or a pipeline.
    pub target_kind: TargetKind,
    /// The worker's or the pipeline's name.
    pub target: String,
    /// The cron expression (five fields, an optional leading seconds field, or a shorthand like `@daily`).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub time_zone: String,
    /// Explicit arguments of its runs: a run's arguments for a worker; for a pipeline, arguments by step worker.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
    /// Paused schedules do not fire.
    pub enabled: bool,
    /// What a fire does while the target has a run in flight.
    pub overlap: OverlapPolicy,
    /// What happens to fires that fell while no daemon was running.
    pub missed: MissedPolicy,
    /// The next fire time (database clock); absent while paused.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The fire waiting for the target to be free (overlap `queue`), if any.
    pub waiting_fire_at: Option<DateTime<Utc>>,
    /// Who created it.
    pub created_by: String,
    /// When.
    pub created_at: DateTime<Utc>,
    /// Who changed it last.
    pub updated_by: String,
    /// When.
    pub updated_at: DateTime<Utc>,
    /// The tags of the runs it requests (a pipeline's runs get the pipeline's too).
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub tags: Vec<String>,
}

/// A schedule with what people want to see beside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleView {
    /// The schedule.
    #[serde(flatten)]
    pub schedule: Schedule,
    /// Its next three fire times (none while paused).
    pub upcoming: Vec<DateTime<Utc>>,
    /// Its last fire, if it ever fired.
    pub last_fire: Option<ScheduleFire>,
}

/// A schedule as a person creates or replaces it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleInput {
    /// A unique name (letters, digits, `-`, `_`, `.`; at most 100).
    pub name: String,
    /// A worker to fire (give `worker` or `pipeline`, not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// A pipeline to fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Explicit arguments (see [`Schedule::arguments`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub arguments: Option<Value>,
    /// Whether it fires (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Default `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<OverlapPolicy>,
    /// Default `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<MissedPolicy>,
    /// Why (required, kept in the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Up to 10 short words its runs carry (see [`crate::tag`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// An expression to preview (`POST /api/schedules/preview`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PreviewInput {
    /// The cron expression (five fields, an optional leading seconds field, or a shorthand like `@daily`).
    #[serde(default)]
    pub cron: String,
    /// The IANA time zone (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// How one fire of a schedule went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FireOutcome {
    /// A run (or a pipeline run) was requested.
    Requested,
    /// The target had a run in flight and the overlap policy is `skip`.
    Skipped,
    /// No daemon was running at the fire time.
    Missed,
    /// The target had a run in flight and the fire waits for it (overlap `queue`).
    Waiting,
}

impl Named for FireOutcome {
    const ALL: &'static [Self] = &[Self::Requested, Self::Skipped, Self::Missed, Self::Waiting];
    const NOUN: &'static str = "a fire outcome";
    const PLURAL: &'static str = "the fire outcomes";

    fn name(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Skipped => "skipped",
            Self::Missed => "missed",
            Self::Waiting => "waiting",
        }
    }
}
named!(FireOutcome);

/// One fire of a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleFire {
    /// The schedule.
    pub schedule_id: Uuid,
    /// The fire time the expression gave.
    pub fire_at: DateTime<Utc>,
    /// What it did.
    pub outcome: FireOutcome,
    /// The run it requested (a worker target).
    pub run_id: Option<Uuid>,
    /// The pipeline run it started (a pipeline target).
    pub pipeline_run_id: Option<Uuid>,
    /// Why it was skipped or missed, as a sentence.
    pub reason: Option<String>,
    /// The run in flight that blocked it (skipped or waiting).
    pub blocked_by: Option<Uuid>,
    /// The daemon that fired it.
    pub fired_by: Option<Uuid>,
    /// When it was recorded (database clock).
    pub recorded_at: DateTime<Utc>,
}

/// What a change of a schedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ScheduleAction {
    /// Created.
    Create,
    /// Replaced by a new definition.
    Change,
    /// Paused.
    Pause,
    /// Resumed.
    Resume,
    /// Deleted.
    Delete,
}

impl Named for ScheduleAction {
    const ALL: &'static [Self] = &[Self::Create, Self::Change, Self::Pause, Self::Resume, Self::Delete];
    const NOUN: &'static str = "a schedule action";
    const PLURAL: &'static str = "the schedule actions";

    fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Change => "change",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Delete => "delete",
        }
    }
}
named!(ScheduleAction);

/// One entry of the append-only audit trail of schedules.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleAuditEntry {
    /// Its position.
    pub id: i64,
    /// The schedule.
    pub schedule_id: Uuid,
    /// Who.
    pub actor: String,
    /// When.
    pub at: DateTime<Utc>,
    /// What.
    pub action: ScheduleAction,
    /// The schedule before (absent: it did not exist).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub before: Option<Value>,
    /// The schedule after (absent: deleted).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub after: Option<Value>,
    /// Why.
    pub reason: String,
}

/// The next fire times of an expression, as `POST /api/schedules/preview` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SchedulePreview {
    /// The expression.
    pub cron: String,
    /// The zone.
    pub time_zone: String,
    /// The next fire times after now.
    pub upcoming: Vec<DateTime<Utc>>,
}

/// A run outcome that may be retried: a state (`failed`, `interrupted`), which covers every end reason of that
/// state, or one end reason of either (`stalled`, `out_of_memory`, `timeout`, …), which covers only itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// The worker failed, for any reason.
    Failed,
    /// The run was interrupted, for any reason.
    Interrupted,
    /// Failed: the worker exited with a status other than 0.
    ExitStatus,
    /// Failed: the worker was killed by a signal nobody here sent.
    Signal,
    /// Failed: the worker could not be started.
    SpawnFailed,
    /// Failed: the run's supervisor ended without a report.
    SupervisorLost,
    /// Failed: the run took longer than its timeout.
    Timeout,
    /// Failed: the daemon that claimed it has no such worker.
    UnknownWorker,
    /// Failed: the worker was killed by its memory limit.
    OutOfMemory,
    /// Interrupted: its daemon stopped.
    DaemonShutdown,
    /// Interrupted: its daemon could not renew the lease.
    LeaseLost,
    /// Interrupted: its daemon stopped renewing the lease and another one recovered the run.
    OwnerLost,
    /// Interrupted: the stall watchdog stopped it.
    Stalled,
}

impl RetryOn {
    /// The end reason it names, when it names one rather than a state.
    pub fn reason(self) -> Option<EndReason> {
        Some(match self {
            Self::Failed | Self::Interrupted => return None,
            Self::ExitStatus => EndReason::ExitStatus,
            Self::Signal => EndReason::Signal,
            Self::SpawnFailed => EndReason::SpawnFailed,
            Self::SupervisorLost => EndReason::SupervisorLost,
            Self::Timeout => EndReason::Timeout,
            Self::UnknownWorker => EndReason::UnknownWorker,
            Self::OutOfMemory => EndReason::OutOfMemory,
            Self::DaemonShutdown => EndReason::DaemonShutdown,
            Self::LeaseLost => EndReason::LeaseLost,
            Self::OwnerLost => EndReason::OwnerLost,
            Self::Stalled => EndReason::Stalled,
        })
    }

    /// Whether it covers a run that ended in `state` for `reason`: a state covers each of its reasons (and a
    /// run whose reason is not known), a reason only itself.
    pub fn covers(self, state: RunState, reason: Option<EndReason>) -> bool {
        match self {
            Self::Failed => state == RunState::Failed,
            // A preempted run is resumed by itself (its resume is requested with its end): a retry would be a second.
            Self::Interrupted => state == RunState::Interrupted && reason != Some(EndReason::Preempted),
            named => named
                .reason()
                .is_some_and(|r| Some(r) == reason && matches!(state, RunState::Failed | RunState::Interrupted)),
        }
    }
}

/// When and how often a run that failed or was interrupted is tried again. A cancelled run is never retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    /// The delay before the first retry, in seconds.
    #[serde(default = "default_initial")]
    pub initial_delay_seconds: f64,
    /// Each further delay is the one before times this.
    #[serde(default = "default_factor")]
    pub factor: f64,
    /// No delay is longer than this, in seconds.
    #[serde(default = "default_max")]
    pub max_delay_seconds: f64,
    /// Each delay is moved by up to this fraction of itself, at random (0 to 1).
    #[serde(default)]
    pub jitter: f64,
    /// The outcomes that are retried: states (`failed`, `interrupted`), each covering all its end reasons, and
    /// end reasons of either (`stalled`, `out_of_memory`, …), each covering only itself.
    #[serde(default = "default_on")]
    pub on: Vec<RetryOn>,
    /// An interrupted run with a checkpoint is retried as a resume: the retry starts from that checkpoint
    /// instead of from nothing (a failed run always starts again from nothing).
    #[serde(default)]
    pub resume: bool,
}

fn default_initial() -> f64 {
    10.0
}
fn default_factor() -> f64 {
    2.0
}
fn default_max() -> f64 {
    3600.0
}
fn default_on() -> Vec<RetryOn> {
    vec![RetryOn::Failed, RetryOn::Interrupted]
}

impl RetryPolicy {
    /// What is wrong with it, as a sentence, if anything.
    pub fn problem(&self) -> Option<String> {
        let finite = [self.initial_delay_seconds, self.factor, self.max_delay_seconds, self.jitter];
        if finite.iter().any(|v| !v.is_finite()) {
            return Some("Every number of a retry policy must be finite.".into());
        }
        if !(1..=100).contains(&self.max_attempts) {
            return Some(format!("max_attempts must be between 1 and 100, not {}.", self.max_attempts));
        }
        if self.initial_delay_seconds < 0.0 || self.max_delay_seconds < 0.0 {
            return Some("Retry delays cannot be negative.".into());
        }
        if self.max_delay_seconds < self.initial_delay_seconds {
            return Some(format!(
                "max_delay_seconds ({}) is shorter than initial_delay_seconds ({}).",
                self.max_delay_seconds, self.initial_delay_seconds
            ));
        }
        if self.factor < 1.0 {
            return Some(format!("factor must be at least 1, not {}.", self.factor));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Some(format!("jitter must be between 0 and 1, not {}.", self.jitter));
        }
        None
    }

    /// Whether a run of attempt `attempt` that ended in `outcome` is retried: `on` names it as it is (a
    /// state, or one end reason). [`RetryPolicy::retries_end`] decides for a run that ended.
    pub fn retries(&self, attempt: i32, outcome: RetryOn) -> bool {
        i64::from(attempt) < i64::from(self.max_attempts) && self.on.contains(&outcome)
    }

    /// Whether a run of attempt `attempt` that ended in `state` for `reason` is retried: some outcome of `on`
    /// covers it (its state, or its end reason).
    pub fn retries_end(&self, attempt: i32, state: RunState, reason: Option<EndReason>) -> bool {
        i64::from(attempt) < i64::from(self.max_attempts) && self.on.iter().any(|on| on.covers(state, reason))
    }

    /// The delay before attempt `attempt + 1`, before jitter, in seconds.
    pub fn base_delay(&self, attempt: i32) -> f64 {
        let exponent = (attempt - 1).clamp(0, 1000);
        (self.initial_delay_seconds * self.factor.powi(exponent)).min(self.max_delay_seconds)
    }

    /// The delay before attempt `attempt + 1`, with `unit` (uniform in 0..1) choosing the jitter.
    pub fn delay(&self, attempt: i32, unit: f64) -> f64 {
        let base = self.base_delay(attempt);
        (base * (1.0 + self.jitter * (2.0 * unit - 1.0))).clamp(0.0, self.max_delay_seconds.max(base))
    }
}

#[cfg(test)]
mod tests;
