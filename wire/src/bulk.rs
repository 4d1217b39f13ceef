//! Bulk actions: one operator action (cancel, rerun or resume) on every run a ledger filter matches, asked for
//! with a dry run first (the count, a sample and a snapshot), then confirmed with the count that was shown and a
//! reason. The action is stored as a job the daemons work through in batches; its progress is read back here.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Named, RunState, named};

/// What a bulk action does to each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BulkActionKind {
    /// Cancel each queued run, and ask each running one's daemon to stop it.
    Cancel,
    /// Rerun (its explicit arguments resolved today) the newest matching run of each worker.
    Rerun,
    /// Resume from its checkpoint the newest matching run of each worker.
    Resume,
}

impl Named for BulkActionKind {
    const ALL: &'static [Self] = &[Self::Cancel, Self::Rerun, Self::Resume];
    const NOUN: &'static str = "a bulk action";
    const PLURAL: &'static str = "the bulk actions";

    fn name(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Rerun => "rerun",
            Self::Resume => "resume",
        }
    }
}
named!(BulkActionKind);

impl BulkActionKind {
    /// The past participle, for sentences ("was rerun").
    pub fn done(self) -> &'static str {
        match self {
            Self::Cancel => "cancelled",
            Self::Rerun => "rerun",
            Self::Resume => "resumed",
        }
    }

    /// Whether the action makes a new run (at most one per worker in one action).
    pub fn makes_runs(self) -> bool {
        !matches!(self, Self::Cancel)
    }
}

/// Where a bulk job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BulkState {
    /// Stored; no daemon has taken it yet.
    Queued,
    /// A daemon works through it (another takes over when that one's lease runs out).
    Running,
    /// Every run has its outcome.
    Done,
    /// The job could not go on; `error` says why.
    Failed,
}

impl Named for BulkState {
    const ALL: &'static [Self] = &[Self::Queued, Self::Running, Self::Done, Self::Failed];
    const NOUN: &'static str = "a bulk action state";
    const PLURAL: &'static str = "the states";

    fn name(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}
named!(BulkState);

/// What became of one run of a bulk action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BulkOutcome {
    /// The action was done (the run cancelled, or its rerun or resume requested).
    Done,
    /// Nothing was done, for the reason its sentence gives (another run of its worker was the one rerun, its
    /// worker had a run in flight, the run had already ended, …).
    Skipped,
    /// The action was refused for a reason that is not a skip (its worker left the catalogue, its arguments no
    /// longer resolve).
    Failed,
}

impl Named for BulkOutcome {
    const ALL: &'static [Self] = &[Self::Done, Self::Skipped, Self::Failed];
    const NOUN: &'static str = "a bulk outcome";
    const PLURAL: &'static str = "the outcomes";

    fn name(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
        }
    }
}
named!(BulkOutcome);

/// The newest run a filter matched when it was looked at: a real call acts only on matching runs requested at
/// or before it (by request time, then id), so runs requested after a dry run are left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkSnapshot {
    /// The newest matching run.
    pub id: Uuid,
    /// When it was requested.
    pub requested_at: DateTime<Utc>,
}

/// `POST /api/runs/bulk`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkRequest {
    /// The ledger filter, with the fields and values of `GET /api/runs`'s query (`worker`, `state`, `from`, `to`,
    /// `requested_by`, `q`, `id`, …), each a string. At least one is required.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub filter: BTreeMap<String, serde_json::Value>,
    /// `cancel`, `rerun` or `resume`.
    pub action: Option<BulkActionKind>,
    /// Only count and show: nothing is stored or done.
    #[serde(default)]
    pub dry_run: bool,
    /// The count the dry run answered (required unless `dry_run`): the call is refused (409) when the filter
    /// now matches another number of runs at or before the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_count: Option<u64>,
    /// The dry run's snapshot. Without it, the newest matching run now is the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<BulkSnapshot>,
    /// Why (required unless `dry_run`), kept with the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One run of a dry run's sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkSample {
    /// The run.
    pub id: Uuid,
    /// Its worker.
    pub worker: String,
    /// Its state now.
    pub state: RunState,
    /// When it was requested.
    pub requested_at: DateTime<Utc>,
}

/// A dry run's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkPreview {
    /// The action.
    pub action: BulkActionKind,
    /// How many runs match at or before the snapshot: send it back as `expect_count`.
    pub count: u64,
    /// The newest matching runs (at most 10).
    pub sample: Vec<BulkSample>,
    /// The newest matching run (none when nothing matches): send it back as `snapshot`.
    pub snapshot: Option<BulkSnapshot>,
    /// How many distinct workers the matching runs are of (a rerun or resume makes at most one run each).
    pub workers: u64,
    /// What the real call would do, in a sentence.
    pub message: String,
}

/// Runs of one outcome that share a sentence.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkReason {
    /// `skipped` or `failed`.
    pub outcome: BulkOutcome,
    /// Why.
    pub sentence: String,
    /// How many runs.
    pub count: i64,
    /// One of them.
    pub example: Uuid,
}

/// A bulk action: what was asked, by whom and why (its audit record), and how far the daemons got.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkAction {
    /// The job.
    pub id: Uuid,
    /// What it does to each run.
    pub action: BulkActionKind,
    /// The ledger filter, as given.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub filter: BTreeMap<String, serde_json::Value>,
    /// The newest matching run when it was asked for (none when nothing matched).
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    pub snapshot: Option<BulkSnapshot>,
    /// The count the caller confirmed.
    pub expect_count: i64,
    /// Why.
    pub reason: String,
    /// Who asked.
    pub requested_by: String,
    /// When.
    pub requested_at: DateTime<Utc>,
    /// Where it stands.
    pub state: BulkState,
    /// How many runs it acts on.
    pub total: i64,
    /// How many were acted on.
    pub done: i64,
    /// How many were skipped (see `reasons`).
    pub skipped: i64,
    /// How many failed (see `reasons`).
    pub failed: i64,
    /// The daemon working it now, or last.
    pub claimed_by: Option<Uuid>,
    /// Until when that daemon holds it (database clock).
    pub lease_until: Option<DateTime<Utc>>,
    /// When a daemon first took it.
    pub started_at: Option<DateTime<Utc>>,
    /// When every run had its outcome.
    pub finished_at: Option<DateTime<Utc>>,
    /// Why the job failed, if it did.
    pub error: Option<String>,
    /// Why runs were skipped or failed, grouped by sentence (with `GET /api/runs/bulk/{id}` only).
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    #[serde(default)]
    pub reasons: Vec<BulkReason>,
}

impl BulkAction {
    /// How many runs have no outcome yet.
    pub fn pending(&self) -> i64 {
        (self.total - self.done - self.skipped - self.failed).max(0)
    }
}

/// `GET /api/runs/bulk`: bulk actions, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkActions {
    /// The actions.
    pub actions: Vec<BulkAction>,
}
