//! A worker's queue as a daemon last measured it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The last measurement of a worker's queue, with its age on the database clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Seconds since it was measured (database clock).
    pub age_seconds: f64,
    /// When the oldest pending document arrived, when `count-pending` reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// Since when something has been pending (counts above zero in a row), on the database clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since: Option<DateTime<Utc>>,
}
