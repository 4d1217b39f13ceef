//! What a run cost (docs/worker-protocol.md, "Usage"): what the daemon measured of its worker's processes, and
//! what the worker reported of its own (tokens, GPU time, money).

use serde::{Deserialize, Serialize};

/// A run's usage, recorded on its row when it ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunUsage {
    /// From the worker's start to its end, in seconds.
    pub wall_seconds: f64,
    /// How the process figures were measured: `rusage` (the worker and the descendants it waited for; a
    /// descendant that was never waited for is not counted, and the peak is that of the largest single process),
    /// or `cgroup v1` / `cgroup v2` (the run's own cgroup: its whole process tree).
    pub measured_by: String,
    /// CPU time in user mode, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_seconds: Option<f64>,
    /// CPU time in the kernel on the run's behalf, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_seconds: Option<f64>,
    /// User and system together, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// The peak resident memory of the largest single process of the run (`rusage`), in bytes: not the sum
    /// over its processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_largest_process_bytes: Option<u64>,
    /// The peak memory of the run's whole process tree (its cgroup's), in bytes; on cgroup v1 it includes the page
    /// cache the run touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// What the worker reported in its last `usage` line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<ReportedUsage>,
}

/// What a worker reports of its own cost in a `{"usage": {...}}` line: cumulative for the run, the last line wins.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReportedUsage {
    /// Tokens sent to a model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<u64>,
    /// Tokens a model produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u64>,
    /// Seconds of GPU time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_seconds: Option<f64>,
    /// Money spent (with `currency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// The currency of `cost`, an ISO 4217 code such as `EUR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}
