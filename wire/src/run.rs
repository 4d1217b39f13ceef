//! Runs: a request while queued, the ledger entry afterwards, and how each one ended.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{ConfigChange, ExplicitArgs, Named, ResolvedConfig, Waiting, named};

/// The states of a run: `queued → running → succeeded | failed | cancelled | interrupted`, and `queued → cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

impl Named for RunState {
    const ALL: &'static [Self] =
        &[Self::Queued, Self::Running, Self::Succeeded, Self::Failed, Self::Cancelled, Self::Interrupted];
    const NOUN: &'static str = "a run state";
    const PLURAL: &'static str = "the states";

    fn name(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }
}
named!(RunState);

impl RunState {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        self.name()
    }

    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// Why a run ended, stored typed beside the sentence in `error`, so that programs (the panel, tests, alerts)
/// match on it and never on the wording. Each reason implies the run's terminal state (see [`EndReason::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The worker exited by itself: `succeeded` with status 0, `failed` with any other.
    ExitStatus,
    /// The worker was killed by a signal nobody here sent (a crash, the kernel's OOM killer): `failed`.
    Signal,
    /// The worker (or its supervisor) could not be started: `failed`.
    SpawnFailed,
    /// The run's supervisor ended without reporting how its worker ended: `failed`.
    SupervisorLost,
    /// The worker ran longer than its catalogue timeout and was stopped: `failed`.
    Timeout,
    /// The daemon that claimed it has no such worker in its catalogue: `failed`.
    UnknownWorker,
    /// A person cancelled it, queued or running: `cancelled`.
    Cancelled,
    /// Its daemon stopped (a signal, the end of a drain's time) and stopped the worker: `interrupted`.
    DaemonShutdown,
    /// Its daemon could not renew the lease, so the supervisor killed the worker before the lease ended:
    /// `interrupted`.
    LeaseLost,
    /// Its daemon stopped renewing the lease (it died, froze or lost the database) and another daemon's
    /// recovery ended the run once the lease had expired: `interrupted`.
    OwnerLost,
    /// The worker was killed by its memory limit (the cgroup's OOM-kill counter says so): `failed`.
    OutOfMemory,
    /// The worker reported no progress, item or checkpoint for its `stall_seconds` and was stopped:
    /// `interrupted`, so it can be resumed from its checkpoint.
    Stalled,
    /// A more urgent run needed its resource: the worker yielded at a checkpoint (or was stopped after the
    /// grace): `interrupted`, and its resume is requested by itself.
    Preempted,
    /// The request was not claimed within its `expires_after_seconds`: `cancelled`.
    Expired,
}

impl Named for EndReason {
    const ALL: &'static [Self] = &[
        Self::ExitStatus,
        Self::Signal,
        Self::SpawnFailed,
        Self::SupervisorLost,
        Self::Timeout,
        Self::UnknownWorker,
        Self::Cancelled,
        Self::DaemonShutdown,
        Self::LeaseLost,
        Self::OwnerLost,
        Self::OutOfMemory,
        Self::Stalled,
        Self::Preempted,
        Self::Expired,
    ];
    const NOUN: &'static str = "an end reason";
    const PLURAL: &'static str = "the end reasons";

    fn name(self) -> &'static str {
        match self {
            Self::ExitStatus => "exit_status",
            Self::Signal => "signal",
            Self::SpawnFailed => "spawn_failed",
            Self::SupervisorLost => "supervisor_lost",
            Self::Timeout => "timeout",
            Self::UnknownWorker => "unknown_worker",
            Self::Cancelled => "cancelled",
            Self::DaemonShutdown => "daemon_shutdown",
            Self::LeaseLost => "lease_lost",
            Self::OwnerLost => "owner_lost",
            Self::OutOfMemory => "out_of_memory",
            Self::Stalled => "stalled",
            Self::Preempted => "preempted",
            Self::Expired => "expired",
        }
    }
}
named!(EndReason);

impl EndReason {
    /// The terminal state a run ending for this reason is in; `exit_code` only matters for `exit_status`.
    pub fn state(self, exit_code: Option<i32>) -> RunState {
        match self {
            Self::ExitStatus if exit_code == Some(0) => RunState::Succeeded,
            Self::ExitStatus
            | Self::Signal
            | Self::SpawnFailed
            | Self::SupervisorLost
            | Self::Timeout
            | Self::OutOfMemory => RunState::Failed,
            Self::UnknownWorker => RunState::Failed,
            Self::Cancelled | Self::Expired => RunState::Cancelled,
            Self::DaemonShutdown | Self::LeaseLost | Self::OwnerLost | Self::Stalled | Self::Preempted => {
                RunState::Interrupted
            }
        }
    }
}

/// How a run continues an earlier one that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FollowKind {
    /// It starts from the earlier run's last checkpoint, with the earlier run's configuration.
    Resume,
    /// It starts from nothing, with the earlier run's configuration.
    Restart,
    /// It runs again with the earlier run's explicit arguments, resolved with today's overrides and defaults.
    Rerun,
    /// As a rerun, scoped to the items the earlier run reported failed (given to its worker in
    /// `SCRINALIA_ITEMS_ONLY`).
    #[serde(rename = "rerun_failed")]
    RerunFailed,
}

impl Named for FollowKind {
    const ALL: &'static [Self] = &[Self::Resume, Self::Restart, Self::Rerun, Self::RerunFailed];
    const NOUN: &'static str = "a way to continue a run";
    const PLURAL: &'static str = "the ways";

    fn name(self) -> &'static str {
        match self {
            Self::Resume => "resume",
            Self::Restart => "restart",
            Self::Rerun => "rerun",
            Self::RerunFailed => "rerun_failed",
        }
    }
}
named!(FollowKind);

/// The largest checkpoint a worker may report: the JSON text of its value, in bytes.
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;

/// One run: a request while queued, the ledger entry afterwards.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Run {
    /// The run's id (UUIDv7, so ids sort by request time).
    pub id: Uuid,
    /// The worker.
    pub worker: String,
    /// Where the run is in its lifecycle.
    pub state: RunState,
    /// Who asked for it.
    pub requested_by: String,
    /// When it was asked for (database clock).
    pub requested_at: DateTime<Utc>,
    /// The explicit arguments of the request.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub arguments: ExplicitArgs,
    /// The resolved configuration, each field with its source.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub config: ResolvedConfig,
    /// The configuration the worker reported it actually uses (its `{"config": …}` line at the start of the
    /// run): for a worker whose engine comes from elsewhere, the only place the run's model is known.
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub reported_config: Option<Value>,
    /// The daemon that claimed it.
    #[cfg_attr(feature = "sqlx", sqlx(rename = "claimed_by"))]
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
    /// Why it ended, typed; absent while it is queued or running.
    #[serde(default)]
    pub end_reason: Option<EndReason>,
    /// Why it did not succeed, as a sentence for people.
    pub error: Option<String>,
    /// The last progress the worker reported.
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub progress: Option<Value>,
    /// The worker's final result (work counts).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<Value>,
    /// When someone asked to cancel it.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Who asked to cancel it.
    pub cancel_requested_by: Option<String>,
    /// The W3C trace context of the request that created it.
    pub trace_context: Option<String>,
    /// Where its output is kept in the object store.
    pub log_key: Option<String>,
    /// The attempt number: 1, then 2, 3, … for its retries.
    pub attempt: i32,
    /// The run this one retries.
    #[serde(default)]
    pub retry_of: Option<Uuid>,
    /// Not claimed before this time (a retry's backoff).
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// The schedule that fired it.
    #[serde(default)]
    pub schedule_id: Option<Uuid>,
    /// That fire's time.
    #[serde(default)]
    pub fire_at: Option<DateTime<Utc>>,
    /// The pipeline run it is a step of.
    #[serde(default)]
    pub pipeline_run_id: Option<Uuid>,
    /// Its step's index in that pipeline (0-based).
    #[serde(default)]
    pub pipeline_step: Option<i32>,
    /// The latest checkpoint its worker reported; a resumed run starts with its predecessor's.
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub checkpoint: Option<Value>,
    /// When that checkpoint was reported (database clock).
    #[serde(default)]
    pub checkpoint_at: Option<DateTime<Utc>>,
    /// The earlier run this one continues (a resume, a restart or a rerun of it).
    #[serde(default)]
    pub follows: Option<Uuid>,
    /// How it continues it.
    #[serde(default)]
    pub follows_as: Option<FollowKind>,
    /// What it cost, recorded when its worker ended (absent for a run that never started one, or that another
    /// daemon's recovery ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub usage: Option<crate::RunUsage>,
    /// The sharded run this one is a shard of (a child run); see [`Run::shard`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<Uuid>,
    /// Which shard of its parent a child run processes (0-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<i32>,
    /// How many shards: on a parent (which is never claimed: its state follows its children's) and on each of
    /// its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<i32>,
    /// Who goes first among runs waiting for the same resource or daemon slots: 0 to 100, higher first.
    #[serde(default = "crate::choice::default_priority_value")]
    pub priority: i16,
    /// When the request, still queued, ends `expired` (database clock); none when it does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// When a more urgent run asked for this one's resource and it was asked to yield (a preemption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_requested_at: Option<DateTime<Utc>>,
    /// The run it is preempted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_for: Option<Uuid>,
    /// The short words its request carried (`collection:1921-letters`), kept by its retries, resumes and
    /// shards; `GET /api/runs?tag=` finds it by one.
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub tags: Vec<String>,
}

impl Run {
    /// Whether this is the parent of a sharded run: never claimed, its state follows its children's.
    pub fn is_parent(&self) -> bool {
        self.shards.is_some() && self.parent_id.is_none()
    }
}

/// One page of the ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunPage {
    /// Runs, newest first.
    pub runs: Vec<Run>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(default)]
    pub next: Option<String>,
}

/// One progress report of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProgressEntry {
    /// Order within the run.
    pub seq: i32,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// What the worker reported.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub progress: Value,
}

/// `GET /api/runs/{id}/progress`: a page of a run's progress reports, oldest first, read backwards from the newest
/// (`before` the `seq` of the oldest report of the page after it).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProgressPage {
    /// The reports of this page, oldest first.
    pub progress: Vec<ProgressEntry>,
    /// How many progress reports the run has in all.
    pub total: u64,
    /// The `before` that reads the page before this one; none when this page starts at the first report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i32>,
}

/// `GET /api/runs/{id}`: a run with its progress history, its chain, why it waits and what a rerun changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunDetail {
    /// The run.
    #[serde(flatten)]
    pub run: Run,
    /// The last progress reports (at most 500), oldest first; `GET /api/runs/{id}/progress?before=` pages back
    /// through the rest.
    pub progress_history: Vec<ProgressEntry>,
    /// How many progress reports the run has in all.
    #[serde(default)]
    pub progress_total: u64,
    /// When `progress_history` does not start at the first report: the `before` that reads the page before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_before: Option<i32>,
    /// The chain the run belongs to, oldest first: its retries, resumes, restarts and reruns (just the run
    /// when there are none).
    pub chain: Vec<Run>,
    /// Why it has not started, while it is queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// For a rerun: the configuration that differs from the run it reruns, each side with its source (an
    /// override's with who changed it, when and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_since: Option<Vec<ConfigChange>>,
    /// What happened to the run's documents, in figures, when its worker reported items; `GET
    /// /api/runs/{id}/items` pages through them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<crate::ItemSummary>,
    /// For the parent of a sharded run: its children, by shard, each shard's retries after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Run>,
}

/// What a cancellation did (`POST /api/runs/{id}/cancel`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CancelView {
    /// `cancelled`: the run was queued and is cancelled; `requested`: it is running and its daemon will stop it.
    pub outcome: CancelKind,
    /// The run after the request.
    pub run: Run,
}

/// The two outcomes of an accepted cancellation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CancelKind {
    /// Cancelled at once.
    Cancelled,
    /// Requested from the daemon running it.
    Requested,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_reasons_imply_their_state() {
        for reason in EndReason::ALL {
            assert_eq!(reason.to_string().parse::<EndReason>(), Ok(*reason));
            assert_eq!(serde_json::to_value(reason).expect("json"), reason.name());
            assert!(reason.state(Some(1)).is_terminal());
        }
        for state in RunState::ALL {
            assert_eq!(state.name().parse::<RunState>(), Ok(*state));
        }
        assert_eq!(EndReason::ExitStatus.state(Some(0)), RunState::Succeeded);
        assert_eq!(EndReason::ExitStatus.state(Some(2)), RunState::Failed);
        assert_eq!(EndReason::OwnerLost.state(None), RunState::Interrupted);
        assert_eq!(
            "paused".parse::<RunState>().expect_err("not a state"),
            "\"paused\" is not a run state; the states are queued, running, succeeded, failed, cancelled, interrupted"
        );
    }
}
