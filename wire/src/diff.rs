//! What a rerun changed: the fields of its resolved configuration that differ from the run it reruns, each side
//! with where its value came from, so that "why did the rerun behave differently?" is answered in the ledger.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Source;

/// Where one side of a changed field came from; for an override, who set it, when and why (from the audit
/// trail, the last change of that field before the run was requested).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Origin {
    /// Explicit (the request's arguments), override, default (the worker's code or catalogue) or external.
    pub source: Source,
    /// For an override: who changed the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
    /// For an override: when (database clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<DateTime<Utc>>,
    /// For an override: the reason given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Origin {
    /// A source with nobody behind it.
    pub fn of(source: Source) -> Self {
        Self { source, changed_by: None, changed_at: None, reason: None }
    }
}

/// One field of the configuration that differs between a rerun and the run it reruns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfigChange {
    /// `engine`, `preset`, `model`, `endpoint`, `timeout_seconds`, `retry` or `options.<name>`.
    pub field: String,
    /// The original run's value (absent: it had none).
    pub before: Option<Value>,
    /// The rerun's value (absent: it has none).
    pub after: Option<Value>,
    /// Where the original's value came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_source: Option<Origin>,
    /// Where the rerun's value came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_source: Option<Origin>,
}
