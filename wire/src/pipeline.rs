//! Pipelines: ordered steps of the catalogue's workers run as a unit, each step an ordinary run started when the
//! one before it succeeded.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{Named, Run, WaitCode, Waiting, named};

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
    /// The tags every step's run carries: the pipeline's own (catalogue), then those of whoever started it.
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub tags: Vec<String>,
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
    /// While the pipeline run waits: why its current step has not been requested (`pipeline_step`), or why that
    /// step's queued run has not started (that run's own reason). Computed when it is read.
    #[serde(default, deserialize_with = "waiting_or_sentence")]
    pub waiting: Option<Waiting>,
}

/// Reads `waiting` as it is sent now, or as a sentence alone as earlier APIs sent it (then it is a
/// `pipeline_step`, the only reason they gave).
fn waiting_or_sentence<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Waiting>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Reason(Waiting),
        Sentence(String),
    }
    Ok(Option::<Either>::deserialize(deserializer)?.map(|w| match w {
        Either::Reason(w) => w,
        Either::Sentence(message) => {
            Waiting { code: WaitCode::PipelineStep, message, until: None, daemons: Vec::new(), runs: Vec::new() }
        }
    }))
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
    /// The tags (catalogue) every step's run of it carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// What a pipeline run is started with (`POST /api/pipelines/{name}/runs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartPipeline {
    /// Explicit run arguments by step worker: `{"<step worker>": {"engine"?, "preset"?, "options"?, "retry"?}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub arguments: Option<Value>,
    /// Up to 10 short words every step's run carries, besides the pipeline's own (see [`crate::tag`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_view_reads_its_reason_or_the_sentence_alone_of_earlier_apis() {
        let view = |waiting: Value| -> PipelineRunView {
            serde_json::from_value(json!({
                "id": "0193a000-0000-7000-8000-000000000009", "pipeline": "nightly", "state": "running",
                "steps": ["probe-1"], "step": 0, "current_run": null, "arguments": {}, "requested_by": "otto",
                "requested_at": "2026-01-31T10:00:00Z", "finished_at": null, "error": null, "schedule_id": null,
                "fire_at": null, "cancel_requested_at": null, "cancel_requested_by": null, "runs": [],
                "waiting": waiting,
            }))
            .expect("a pipeline run view")
        };
        let now = view(json!({"code": "no_daemon", "message": "No daemon is running."})).waiting.expect("a reason");
        assert_eq!((now.code, now.message.as_str()), (WaitCode::NoDaemon, "No daemon is running."));
        let before = view(json!("step 1 waits")).waiting.expect("a reason");
        assert_eq!((before.code, before.message.as_str()), (WaitCode::PipelineStep, "step 1 waits"));
        assert!(view(Value::Null).waiting.is_none());
    }
}
