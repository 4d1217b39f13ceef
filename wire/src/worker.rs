//! What a worker says about itself through the protocol: the options its code declares (with their types,
//! defaults, choices and bounds), its engine defaults and presets (`describe`), whether what it needs is there
//! (`check`), and the housekeeping chores (describe, count, check) that daemons take turns doing for it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use uuid::Uuid;

use crate::named;

pub mod view;

/// The type of a worker option; explicit arguments and overrides are checked against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OptionType {
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// Text.
    String,
}

impl OptionType {
    /// Whether `value` has this type.
    pub fn admits(self, value: &Value) -> bool {
        match self {
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Number => value.is_number(),
            Self::Boolean => value.is_boolean(),
            Self::String => value.is_string(),
        }
    }

    /// The words used in error sentences.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Integer => "a whole number",
            Self::Number => "a number",
            Self::Boolean => "true or false",
            Self::String => "a string",
        }
    }

    /// The type's name, as the catalogue and the protocol spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::String => "string",
        }
    }
}

/// One option a worker accepts, as the catalogue or the worker's code declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OptionSpec {
    /// The option's name, as passed to the worker (`--name value`).
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: OptionType,
    /// The default; `None` means the worker's own default applies and nothing is passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// The values allowed, if the option is a choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<Vec<Value>>,
    /// The smallest value allowed (numbers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub minimum: Option<Number>,
    /// The largest value allowed (numbers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub maximum: Option<Number>,
    /// A sentence for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Where a worker's engine comes from when it is not chosen here (the archive's quality validator takes it from
/// the active `LLM_CHECK` cleaning rule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EngineSource {
    /// What it is, for people ("the active LLM_CHECK cleaning rule").
    pub description: String,
    /// Which one it is now ("LLM_CHECK rule 3"), or `None` when there is none.
    #[serde(default)]
    pub reference: Option<String>,
}

/// What a worker's code declares, derived from its signatures and registries without running it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Declared {
    /// The options of its `run`, in the code's order.
    #[serde(default)]
    pub options: Vec<OptionSpec>,
    /// The engine it uses when none is chosen.
    #[serde(default)]
    pub engine: Option<String>,
    /// The preset it uses when none is chosen.
    #[serde(default)]
    pub preset: Option<String>,
    /// Engine → preset → model, as its registries declare them.
    #[serde(default)]
    pub presets: BTreeMap<String, BTreeMap<String, String>>,
}

/// What a worker's `describe` answered: the engine configuration it resolves by itself, where that comes from
/// when it is not chosen here, and what its code declares.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Description {
    /// The engine.
    #[serde(default)]
    pub engine: Option<String>,
    /// The preset.
    #[serde(default)]
    pub preset: Option<String>,
    /// The model.
    #[serde(default)]
    pub model: Option<String>,
    /// Where the model is called.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Set when the engine is not chosen here: where it comes from.
    #[serde(default)]
    pub source: Option<EngineSource>,
    /// What the code declares; `None` for a worker that only reports its engine.
    #[serde(default)]
    pub declared: Option<Declared>,
    /// What the worker can do beyond running (docs/worker-protocol.md, "describe"); `None` for a worker that
    /// does not say, which then can do none of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
}

/// What a worker says it can do beyond running, in `describe`: each absent key is false.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Capabilities {
    /// It reports each document's outcome (`item` lines).
    pub items: bool,
    /// It takes a scope: only the items named in `SCRINALIA_ITEMS_ONLY`.
    pub scope: bool,
    /// It takes a shard (`SCRINALIA_SHARD=i/N`).
    pub shards: bool,
    /// It reports checkpoints and resumes from one.
    pub checkpoints: bool,
    /// It yields when asked: on SIGUSR1 it stops at its next checkpoint, having printed it, and exits with
    /// [`YIELDED_EXIT_STATUS`] (docs/worker-protocol.md, "Yielding").
    #[serde(rename = "yield")]
    pub yields: bool,
}

/// The exit status of a worker that yielded when asked (SIGUSR1): it stopped at a checkpoint it printed, and a
/// resume from that checkpoint goes on where it stopped. 75 is `EX_TEMPFAIL` of BSD's `sysexits.h`, "try again
/// later", which no signal's 128 + n and no ordinary failure (1, 2) can be taken for.
pub const YIELDED_EXIT_STATUS: i32 = 75;

/// A worker's last description as stored by the daemon that took it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerDescription {
    /// The worker.
    pub worker: String,
    /// The last description that succeeded, if any did.
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub description: Option<Description>,
    /// When it was taken.
    pub described_at: Option<DateTime<Utc>>,
    /// Which daemon took it.
    pub described_by: Option<Uuid>,
    /// The command that answered it (the catalogue's command on that daemon's host).
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub command: Vec<String>,
    /// How long the last attempt took.
    pub took_ms: i64,
    /// Why the last attempt failed; `None` when it succeeded.
    pub error: Option<String>,
    /// When the last attempt ended.
    pub attempted_at: DateTime<Utc>,
    /// Seconds since `described_at` (database clock).
    pub age_seconds: Option<f64>,
}

/// Whether a worker has what it needs, as its `check` last said.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// The worker.
    pub worker: String,
    /// Whether it is ready; `None` when the check itself failed (see `error`).
    pub ready: Option<bool>,
    /// When not ready: what is missing, as the worker said it.
    pub reason: Option<String>,
    /// Why the check could not be run or read.
    pub error: Option<String>,
    /// When it was checked.
    pub checked_at: DateTime<Utc>,
    /// How long it took.
    pub took_ms: i64,
    /// Which daemon checked.
    pub checked_by: Option<Uuid>,
    /// Seconds since it was checked (database clock).
    pub age_seconds: f64,
}

impl Readiness {
    /// The sentence health and the panel show when the worker is not known to be ready.
    pub fn problem(&self) -> Option<String> {
        match (self.ready, &self.reason, &self.error) {
            (Some(true), _, _) => None,
            (Some(false), Some(reason), _) => Some(reason.clone()),
            (Some(false), None, _) => Some("the worker's check says it is not ready".to_owned()),
            (None, _, Some(error)) => Some(format!("its check failed: {error}")),
            (None, _, None) => Some("its check did not answer".to_owned()),
        }
    }
}

/// The housekeeping a daemon does for a worker, one daemon at a time across all daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChoreKind {
    /// Run `describe` and store what the code declares.
    Describe,
    /// Run `count-pending` and store the queue measurement.
    Count,
    /// Run `check` and store the worker's readiness.
    Check,
}

impl crate::Named for ChoreKind {
    const ALL: &'static [Self] = &[Self::Describe, Self::Count, Self::Check];
    const NOUN: &'static str = "a chore";
    const PLURAL: &'static str = "the chores";

    fn name(self) -> &'static str {
        match self {
            Self::Describe => "describe",
            Self::Count => "count",
            Self::Check => "check",
        }
    }
}
named!(ChoreKind);

/// A worker's chore: when it was last asked for, started and finished, and who holds it now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Chore {
    /// The worker.
    pub worker: String,
    /// The chore.
    pub chore: ChoreKind,
    /// When it was last asked for (by an operator, a run's end or a daemon's start), if ever.
    pub requested_at: Option<DateTime<Utc>>,
    /// When it last started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it last finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// The daemon doing it now, if one is.
    pub lease_by: Option<Uuid>,
    /// Until when that daemon holds it (database clock).
    pub lease_until: Option<DateTime<Utc>>,
}

/// A chore asked for (`POST /api/workers/{name}/describe`, `/count` or `/check`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChoreRequested {
    /// The chore as stored now (`requested_at` is this request, or a later one).
    pub chore: Chore,
    /// Whether an active daemon takes this worker; when none does, the chore waits for one.
    pub taken: bool,
    /// What happens next, in a sentence.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yield_is_the_protocols_name_of_the_capability_and_false_when_missing() {
        let said: Capabilities = serde_json::from_value(json!({"checkpoints": true, "yield": true})).expect("parses");
        assert!(said.yields && said.checkpoints && !said.items);
        assert_eq!(serde_json::to_value(said).expect("serializes")["yield"], json!(true));
        let silent: Capabilities = serde_json::from_value(json!({"checkpoints": true})).expect("parses");
        assert!(!silent.yields, "a worker that does not say cannot yield");
    }
}
