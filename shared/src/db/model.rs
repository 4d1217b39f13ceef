//! The rows of the database layer, shared by both backends and serialised as they are by the API.

use std::{collections::BTreeMap, fmt, str::FromStr};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::resolve::{ExplicitArgs, OverrideValues, ResolvedConfig};

/// The states of a run: `queued → running → succeeded | failed | cancelled | interrupted`, and `queued → cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Requested, waiting for a daemon.
    Queued,
    /// Claimed by a daemon that holds its lease.
    Running,
    /// The worker exited with status 0.
    Succeeded,
    /// The worker failed, crashed or timed out.
    Failed,
    /// Cancelled by a person.
    Cancelled,
    /// Its daemon stopped or died before the worker finished.
    Interrupted,
}

impl RunState {
    /// Every state, in lifecycle order.
    pub const ALL: [Self; 6] =
        [Self::Queued, Self::Running, Self::Succeeded, Self::Failed, Self::Cancelled, Self::Interrupted];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }

    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|state| state.as_str() == s).ok_or_else(|| {
            format!(
                "{s:?} is not a run state; the states are queued, running, succeeded, failed, cancelled, interrupted"
            )
        })
    }
}

impl TryFrom<String> for RunState {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// One run: a request while queued, the ledger entry afterwards.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, ToSchema)]
pub struct Run {
    /// The run's id (UUIDv7, so ids sort by request time).
    pub id: Uuid,
    /// The worker.
    pub worker: String,
    /// Where the run is in its lifecycle.
    #[sqlx(try_from = "String")]
    pub state: RunState,
    /// Who asked for it.
    pub requested_by: String,
    /// When it was asked for (database clock).
    pub requested_at: DateTime<Utc>,
    /// The explicit arguments of the request.
    #[sqlx(json)]
    pub arguments: ExplicitArgs,
    /// The resolved configuration, each field with its source.
    #[sqlx(json)]
    pub config: ResolvedConfig,
    /// The daemon that claimed it.
    #[sqlx(rename = "claimed_by")]
    pub daemon_id: Option<Uuid>,
    /// When a daemon claimed it.
    pub claimed_at: Option<DateTime<Utc>>,
    /// Until when the daemon's lease holds.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the worker process started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached its terminal state.
    pub finished_at: Option<DateTime<Utc>>,
    /// From the worker's start (or the claim) to the end.
    pub duration_ms: Option<i64>,
    /// The worker's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// Why it did not succeed.
    pub error: Option<String>,
    /// The last progress the worker reported.
    #[sqlx(json(nullable))]
    #[schema(value_type = Option<Object>)]
    pub progress: Option<Value>,
    /// The worker's final result (work counts).
    #[sqlx(json(nullable))]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// When someone asked to cancel it.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Who asked to cancel it.
    pub cancel_requested_by: Option<String>,
    /// The W3C trace context of the request that created it.
    pub trace_context: Option<String>,
    /// Where its output is kept in the object store.
    pub log_key: Option<String>,
    /// The attempt number (retries are a later feature; always 1 today).
    pub attempt: i32,
}

/// A new run request.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Its id; generate with [`Uuid::now_v7`].
    pub id: Uuid,
    /// The worker.
    pub worker: String,
    /// Who asks.
    pub requested_by: String,
    /// The explicit arguments.
    pub arguments: ExplicitArgs,
    /// The configuration resolved from them.
    pub config: ResolvedConfig,
    /// The caller's W3C trace context.
    pub trace_context: Option<String>,
}

/// How a run ended, as written by its daemon.
#[derive(Debug, Clone)]
pub struct Finish {
    /// One of the terminal states.
    pub state: RunState,
    /// The worker's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// Why it did not succeed.
    pub error: Option<String>,
    /// The final result (work counts).
    pub result: Option<Value>,
}

/// What a cancellation request did.
#[derive(Debug, Clone)]
pub enum CancelOutcome {
    /// The run was queued and is now cancelled.
    Cancelled(Run),
    /// The run is running; its daemon has been asked to stop it.
    Requested(Run),
    /// The run had already ended; nothing changed.
    AlreadyFinished(Run),
}

/// A position in the ledger, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last row's request time.
    pub requested_at: DateTime<Utc>,
    /// The last row's id.
    pub id: Uuid,
}

impl Cursor {
    /// The opaque text form used in URLs.
    pub fn encode(&self) -> String {
        format!("{}_{}", self.requested_at.timestamp_micros(), self.id.simple())
    }

    /// Parses [`Cursor::encode`]'s output.
    pub fn decode(s: &str) -> Option<Self> {
        let (micros, id) = s.split_once('_')?;
        let requested_at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
        Some(Self { requested_at, id: Uuid::parse_str(id).ok()? })
    }
}

/// Filters of the ledger.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this worker.
    pub worker: Option<String>,
    /// Only this state.
    pub state: Option<RunState>,
    /// Requested at or after.
    pub from: Option<DateTime<Utc>>,
    /// Requested before.
    pub to: Option<DateTime<Utc>>,
    /// Continue after this position.
    pub after: Option<Cursor>,
    /// Page size (at most 500).
    pub limit: u32,
}

/// One page of the ledger.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunPage {
    /// Runs, newest first.
    pub runs: Vec<Run>,
    /// Pass as `after` to get the next page; absent on the last page.
    pub next: Option<String>,
}

/// One progress report of a run.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct ProgressEntry {
    /// Order within the run.
    pub seq: i32,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// What the worker reported.
    #[sqlx(json)]
    #[schema(value_type = Object)]
    pub progress: Value,
}

/// A daemon's state in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DaemonState {
    /// Claiming and running.
    Active,
    /// Finishing its runs, claiming nothing.
    Draining,
    /// Stopped, or its heartbeat is too old.
    Gone,
}

impl TryFrom<String> for DaemonState {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.as_str() {
            "active" => Ok(Self::Active),
            "draining" => Ok(Self::Draining),
            "gone" => Ok(Self::Gone),
            other => Err(format!("{other:?} is not a daemon state")),
        }
    }
}

/// A daemon of the registry.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct Daemon {
    /// A fresh id at every start.
    pub id: Uuid,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// Its version.
    pub version: String,
    /// How many runs it takes at once.
    pub capacity: i32,
    /// Which workers it takes; empty means all.
    #[sqlx(json)]
    pub workers: Vec<String>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// When someone asked it to drain.
    pub drain_requested_at: Option<DateTime<Utc>>,
    /// Who asked it to drain.
    pub drain_requested_by: Option<String>,
    /// When it stopped (or was found gone).
    pub stopped_at: Option<DateTime<Utc>>,
    /// Its state.
    #[sqlx(try_from = "String")]
    pub state: DaemonState,
    /// How many runs it holds now.
    pub runs_in_flight: i64,
}

/// What a daemon registers.
#[derive(Debug, Clone)]
pub struct NewDaemon {
    /// Its fresh id.
    pub id: Uuid,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: i32,
    /// Version.
    pub version: String,
    /// Capacity.
    pub capacity: i32,
    /// Workers it takes; empty means all.
    pub workers: Vec<String>,
}

/// A worker's persisted override.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Override {
    /// The worker.
    pub worker: String,
    /// The overridden values.
    pub values: OverrideValues,
    /// Who last changed it.
    pub updated_by: String,
    /// When.
    pub updated_at: DateTime<Utc>,
}

/// A partial change to an override: for each field, absent keeps it, `null` clears it (follow the default), a
/// value sets it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverridePatch {
    /// Engine.
    #[serde(default, deserialize_with = "patch_field")]
    #[schema(value_type = Option<String>)]
    pub engine: Option<Option<String>>,
    /// Preset.
    #[serde(default, deserialize_with = "patch_field")]
    #[schema(value_type = Option<String>)]
    pub preset: Option<Option<String>>,
    /// Options; a `null` value clears that option's override.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub options: BTreeMap<String, Value>,
}

fn patch_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl OverridePatch {
    /// The override that results from applying this patch to `current`.
    pub fn apply(&self, current: Option<&OverrideValues>) -> OverrideValues {
        let mut next = current.cloned().unwrap_or_default();
        if let Some(engine) = &self.engine {
            next.engine.clone_from(engine);
        }
        if let Some(preset) = &self.preset {
            next.preset.clone_from(preset);
        }
        for (name, value) in &self.options {
            if value.is_null() {
                next.options.remove(name);
            } else {
                next.options.insert(name.clone(), value.clone());
            }
        }
        next
    }
}

/// One entry of the append-only audit trail of overrides.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct AuditEntry {
    /// Its position.
    pub id: i64,
    /// The worker.
    pub worker: String,
    /// Who.
    pub actor: String,
    /// When.
    pub at: DateTime<Utc>,
    /// `set` or `clear`.
    pub action: String,
    /// The override before (absent: none).
    #[sqlx(json(nullable))]
    pub before: Option<OverrideValues>,
    /// The override after (absent: none).
    #[sqlx(json(nullable))]
    pub after: Option<OverrideValues>,
    /// Why.
    pub reason: String,
}

/// The last measurement of a worker's queue.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, ToSchema)]
pub struct QueueCount {
    /// The worker.
    pub worker: String,
    /// Units waiting, when measurable.
    pub pending: Option<i64>,
    /// Why it cannot be measured.
    pub unmeasurable: Option<String>,
    /// Units already done, when reported.
    pub done: Option<i64>,
    /// Why the measurement failed.
    pub error: Option<String>,
    /// When it was measured.
    pub measured_at: DateTime<Utc>,
    /// How long it took.
    pub took_ms: i64,
    /// Which daemon measured it.
    pub measured_by: Option<Uuid>,
}

/// A new queue measurement.
#[derive(Debug, Clone)]
pub struct NewQueueCount {
    /// The worker.
    pub worker: String,
    /// Units waiting.
    pub pending: Option<i64>,
    /// Why it cannot be measured.
    pub unmeasurable: Option<String>,
    /// Units done.
    pub done: Option<i64>,
    /// Why the measurement failed.
    pub error: Option<String>,
    /// How long it took.
    pub took_ms: i64,
    /// The measuring daemon.
    pub measured_by: Uuid,
}
