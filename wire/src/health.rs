//! How healthy the service is, as `GET /api/health` reports it (every check with its status, latency and what
//! is wrong), and the short answers of liveness and readiness (`/healthz`, `/readyz`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How healthy something is; the overall status is the worst of the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// Works in part.
    Degraded,
    /// Does not work.
    Down,
}

impl Status {
    /// The word sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Degraded => "degraded",
            Self::Down => "down",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One check.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Check {
    /// What was checked, e.g. `database` or `model_server:local`.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// How long the check took.
    pub latency_ms: f64,
    /// What is wrong, as a sentence; absent when ok.
    pub error: Option<String>,
    /// Facts found by the check (models present, daemons alive, ...); null when there are none.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub details: Value,
}

/// The health of the system.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthView {
    /// The worst status of the checks.
    pub status: Status,
    /// Every check.
    pub checks: Vec<Check>,
    /// The API's version.
    pub version: String,
}

/// A short status answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusBody {
    /// `alive` or `ready`.
    pub status: String,
    /// What works only in part, e.g. live events polled behind a pooler; absent when nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}
