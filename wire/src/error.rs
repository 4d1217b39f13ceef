//! The body of every error the API answers: a code for programs, a sentence for people, and fields that help a
//! program act on it. The CLI reads it to say what went wrong and to choose its exit code.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// A stable, machine-readable code such as `run_in_flight`.
    pub code: String,
    /// A sentence a person can read.
    pub message: String,
    /// Extra fields that depend on the code (for `run_in_flight`: `run_id`, `state`, `daemon_id`).
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub details: Map<String, Value>,
}
