//! Pipelines: ordered steps of the catalogue's workers run as a unit, each step an ordinary run started when the
//! one before it succeeded.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{Named, Run, named};

/// Where a pipeline run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PipelineState {
    /// A step is queued, running, retrying or waiting for its worker to be free.
    Running,
    /// Every step succeeded.
    Succeeded,
    /// A step failed (after its retries) or was interrupted.
    Failed,
    /// Cancelled by a person, or a step was.
    Cancelled,
}

impl Named for PipelineState {
    const ALL: &'static [Self] = &[Self::Running, Self::Succeeded, Self::Failed, Self::Cancelled];
    const NOUN: &'static str = "a pipeline state";
    const PLURAL: &'static str = "the pipeline states";

    fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}
named!(PipelineState);

impl PipelineState {
    /// Whether the pipeline run is over.
    pub fn is_terminal(self) -> bool {
        self != Self::Running
    }
}

/// One run of a pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineRun {
    /// Its id.
    pub id: Uuid,
    /// The pipeline.
    pub pipeline: String,
    /// Where it is.
    pub state: PipelineState,
    /// The step workers, in order, as the catalogue had them when it started.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub steps: Vec<String>,
    /// The index of the current step (0-based); the last step's index once it is over.
    pub step: i32,
    /// The current step's run; absent while the step waits for its worker to be free.
    pub current_run: Option<Uuid>,
    /// Explicit arguments by step worker.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
    /// Who asked for it (`schedule:<name>` for a schedule's fire).
    pub requested_by: String,
    /// When (database clock).
    pub requested_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Why it did not succeed, as a sentence.
    pub error: Option<String>,
    /// The schedule that fired it.
    pub schedule_id: Option<Uuid>,
    /// That fire's time.
    pub fire_at: Option<DateTime<Utc>>,
    /// When someone asked to cancel it.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Who.
    pub cancel_requested_by: Option<String>,
}

/// A pipeline run with the runs of its steps, oldest first (retries included).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineRunView {
    /// The pipeline run.
    #[serde(flatten)]
    pub pipeline_run: PipelineRun,
    /// The runs of its steps.
    pub runs: Vec<Run>,
    /// While a step waits for its worker: why, as a sentence.
    pub waiting: Option<String>,
}

/// A pipeline of the catalogue, with its last run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineView {
    /// Its name.
    pub name: String,
    /// A sentence for people.
    pub description: Option<String>,
    /// The step workers, in order.
    pub steps: Vec<String>,
    /// Its run in flight or its last run.
    pub last_run: Option<PipelineRun>,
}
