//! The API's JSON as the CLI reads it. Runs are the shared row type the API serialises; the views the API builds
//! for itself (workers, daemons, health) are read leniently here: a field the CLI does not show may be added or
//! removed without breaking it.

use chrono::{DateTime, Utc};
use scrinalia_wire::{ResolvedConfig, Run};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

/// `GET /api/runs`.
#[derive(Debug, Deserialize)]
pub struct RunPage {
    /// Newest first.
    pub runs: Vec<Run>,
    /// The cursor of the next page, if any.
    #[serde(default)]
    pub next: Option<String>,
}

/// `GET /api/runs/{id}`: the run, its progress history and its retry chain.
#[derive(Debug, Deserialize)]
pub struct RunDetail {
    /// The run.
    #[serde(flatten)]
    pub run: Run,
    /// Every progress report, oldest first.
    #[serde(default)]
    pub progress_history: Vec<Value>,
    /// The retry chain the run belongs to, first attempt first (just the run when it was never retried; empty
    /// from an API that does not send it).
    #[serde(default)]
    pub chain: Vec<Run>,
    /// Why it has not started, while it is queued.
    #[serde(default)]
    pub waiting: Option<scrinalia_wire::Waiting>,
    /// For a rerun: the configuration that differs from the run it reruns.
    #[serde(default)]
    pub changed_since: Option<Vec<scrinalia_wire::ConfigChange>>,
}

/// `POST /api/runs/{id}/cancel`.
#[derive(Debug, Deserialize)]
pub struct CancelView {
    /// `cancelled` (it was queued) or `requested` (its daemon stops it).
    pub outcome: String,
    /// The run after the request.
    pub run: Run,
}

/// `GET /api/workers`.
#[derive(Debug, Deserialize)]
pub struct WorkersView {
    /// In catalogue order.
    pub workers: Vec<WorkerView>,
    /// The database clock when read.
    pub now: Option<DateTime<Utc>>,
}

/// One worker of `GET /api/workers` (and `GET /api/workers/{name}`).
#[derive(Debug, Deserialize)]
pub struct WorkerView {
    /// Its name.
    pub name: String,
    /// A short human title.
    #[serde(default)]
    pub title: Option<String>,
    /// A sentence for people.
    #[serde(default)]
    pub description: Option<String>,
    /// When the engine is not chosen here: where it comes from.
    #[serde(default)]
    pub engine_source: Option<String>,
    /// The options it accepts, as its code (over the catalogue) declares them.
    #[serde(default)]
    pub options: Vec<OptionView>,
    /// Where the catalogue and the worker's code disagree, one sentence each.
    #[serde(default)]
    pub disagreements: Vec<String>,
    /// Its last description.
    #[serde(default)]
    pub described: Option<DescribedView>,
    /// What its last check said.
    #[serde(default)]
    pub readiness: Option<ReadinessView>,
    /// The configuration a run without arguments would use.
    #[serde(default)]
    pub effective: Option<ResolvedConfig>,
    /// Why that configuration cannot be resolved.
    #[serde(default)]
    pub effective_error: Option<String>,
    /// The last queue measurement.
    #[serde(default)]
    pub queue: Option<QueueView>,
    /// The run queued or running.
    #[serde(default)]
    pub in_flight: Option<Run>,
    /// Why that run has not started, while it is queued.
    #[serde(default)]
    pub waiting: Option<scrinalia_wire::Waiting>,
    /// The last finished run.
    #[serde(default)]
    pub last_finished: Option<Run>,
}

/// One option a worker accepts.
#[derive(Debug, Deserialize)]
pub struct OptionView {
    /// Its name.
    pub name: String,
    /// `integer`, `number`, `boolean` or `string`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// Its default, if it has one.
    #[serde(default)]
    pub default: Option<Value>,
    /// The values allowed, if it is a choice.
    #[serde(default)]
    pub choices: Option<Vec<Value>>,
    /// The smallest value allowed.
    #[serde(default)]
    pub minimum: Option<Value>,
    /// The largest value allowed.
    #[serde(default)]
    pub maximum: Option<Value>,
    /// A sentence for people.
    #[serde(default)]
    pub description: Option<String>,
}

/// A worker's last description: when, by which daemon, and why the last attempt failed if it did.
#[derive(Debug, Deserialize)]
pub struct DescribedView {
    /// When the last description that succeeded was taken, if one did.
    #[serde(default)]
    pub described_at: Option<DateTime<Utc>>,
    /// Which daemon took it.
    #[serde(default)]
    pub described_by: Option<Uuid>,
    /// The command that answered.
    #[serde(default)]
    pub command: Vec<String>,
    /// How long the last attempt took.
    #[serde(default)]
    pub took_ms: Option<i64>,
    /// Why the last attempt failed.
    #[serde(default)]
    pub error: Option<String>,
    /// When the last attempt ended.
    #[serde(default)]
    pub attempted_at: Option<DateTime<Utc>>,
    /// Seconds since `described_at`.
    #[serde(default)]
    pub age_seconds: Option<f64>,
}

/// What a worker's last `check` said.
#[derive(Debug, Deserialize)]
pub struct ReadinessView {
    /// Ready, not ready, or unknown (`None`: the check itself failed).
    #[serde(default)]
    pub ready: Option<bool>,
    /// When not ready: what is missing.
    #[serde(default)]
    pub reason: Option<String>,
    /// Why the check failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Which daemon checked.
    #[serde(default)]
    pub checked_by: Option<Uuid>,
    /// Seconds since the check.
    #[serde(default)]
    pub age_seconds: Option<f64>,
}

/// `POST /api/workers/{name}/describe`, `/count` and `/check`: the chore asked for.
#[derive(Debug, Deserialize)]
pub struct ChoreView {
    /// Whether an active daemon takes the worker (when none does, the chore waits for one).
    #[serde(default)]
    pub taken: Option<bool>,
    /// What happens next, in a sentence.
    pub message: String,
}

/// A worker's last queue measurement.
#[derive(Debug, Deserialize)]
pub struct QueueView {
    /// Units waiting.
    #[serde(default)]
    pub pending: Option<i64>,
    /// Why it cannot be measured.
    #[serde(default)]
    pub unmeasurable: Option<String>,
    /// Units done.
    #[serde(default)]
    pub done: Option<i64>,
    /// Why the measurement failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Seconds since the measurement.
    #[serde(default)]
    pub age_seconds: Option<f64>,
}

/// `GET /api/daemons`.
#[derive(Debug, Deserialize)]
pub struct DaemonsView {
    /// Newest first.
    pub daemons: Vec<DaemonView>,
}

/// One daemon.
#[derive(Debug, Deserialize)]
pub struct DaemonView {
    /// Its id.
    pub id: Uuid,
    /// Its host.
    #[serde(default)]
    pub host: String,
    /// Its process id.
    #[serde(default)]
    pub pid: i64,
    /// Its version.
    #[serde(default)]
    pub version: String,
    /// Runs at once.
    #[serde(default)]
    pub capacity: i64,
    /// Workers it takes; empty means all.
    #[serde(default)]
    pub workers: Vec<String>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// Seconds since its heartbeat.
    #[serde(default)]
    pub heartbeat_age_seconds: Option<f64>,
    /// Runs it holds.
    #[serde(default)]
    pub runs_in_flight: i64,
    /// `active`, `draining` or `gone`.
    pub state: String,
}

/// `GET /api/health`.
#[derive(Debug, Deserialize)]
pub struct HealthView {
    /// `ok`, `degraded` or `down`: the worst of the checks.
    pub status: String,
    /// Every check.
    #[serde(default)]
    pub checks: Vec<CheckView>,
    /// The API's version.
    #[serde(default)]
    pub version: Option<String>,
}

/// One health check.
#[derive(Debug, Deserialize)]
pub struct CheckView {
    /// What was checked.
    pub name: String,
    /// `ok`, `degraded` or `down`.
    pub status: String,
    /// How long it took.
    #[serde(default)]
    pub latency_ms: Option<f64>,
    /// What is wrong.
    #[serde(default)]
    pub error: Option<String>,
}
