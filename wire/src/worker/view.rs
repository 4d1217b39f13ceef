//! The worker view of `GET /api/workers` and `GET /api/workers/{name}`: each worker as the catalogue, its code,
//! its override and its daemons' last chores describe it, with its run in flight and its last finished run.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Engine, OptionSpec, Override, QueueCount, Readiness, ResolvedConfig, Run, Waiting, WorkerDescription};

/// Every worker, in catalogue order, and the engines they can use.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkersView {
    /// Workers in catalogue order.
    pub workers: Vec<WorkerView>,
    /// Engines by name, with their presets (preset → model) and where they are called.
    pub engines: BTreeMap<String, Engine>,
    /// The database clock when this was read.
    pub now: DateTime<Utc>,
}

/// One worker as the panel shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerView {
    /// Its unique name.
    pub name: String,
    /// A short human title.
    pub title: Option<String>,
    /// The axis of the archive it works on.
    pub axis: String,
    /// Who governs its output.
    pub governance: String,
    /// The stamp it leaves on each unit.
    pub stamp: String,
    /// A sentence for people.
    pub description: Option<String>,
    /// The configuration a run without arguments would use now, each field with its source.
    pub effective: Option<ResolvedConfig>,
    /// Why the effective configuration cannot be resolved (a stored override that no longer fits the catalogue).
    pub effective_error: Option<String>,
    /// The stored override, if any.
    #[serde(rename = "override")]
    pub override_: Option<Override>,
    /// Whether engine and preset can be chosen here.
    pub engine_configurable: bool,
    /// When they cannot: where the engine comes from.
    pub engine_source: Option<String>,
    /// A link to where the engine is configured.
    pub engine_source_url: Option<String>,
    /// The options the worker accepts (its code's declarations over the catalogue's), for the panel's form.
    pub options: Vec<OptionSpec>,
    /// Where the catalogue and the worker's code disagree, one sentence each; the code wins.
    pub disagreements: Vec<String>,
    /// The worker's last description: what its code declared, when, by which daemon, for which command, and
    /// why the last attempt failed if it did. `None` until a daemon has described it.
    pub described: Option<WorkerDescription>,
    /// Whether the worker has what it needs, as its last `check` said.
    pub readiness: Option<Readiness>,
    /// The last queue measurement, with its age.
    pub queue: Option<QueueCount>,
    /// The run queued or running, if any.
    pub in_flight: Option<Run>,
    /// When that run is split into shards, where its shards stand, as a sentence: "4 shards: 3 running, 1 queued
    /// (a queued shard waits: …)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards_note: Option<String>,
    /// For a worker the catalogue declares preemptible whose runs cannot be preempted, why not, as a sentence:
    /// "Declared preemptible, but its runs are not preempted: its code does not declare the `yield` capability."
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_note: Option<String>,
    /// Why that run has not started, while it is queued (the same reason as on the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// The last finished run, if any.
    pub last_finished: Option<Run>,
    /// How many of its documents are quarantined (they failed in `quarantine_after` runs in a row; its runs
    /// skip them until they are released).
    #[serde(default)]
    pub quarantined: i64,
    /// What its running run has reported so far: the item lines stored (succeeded, failed and skipped; refused
    /// lines left out) and their rate since the run started. Absent when no run is running, or it has reported
    /// no item yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_items: Option<RunningItems>,
    /// Each host that does not keep one of the worker's limits as set: "cpu_max not enforced on host gpu-1: no cpu
    /// controller (cgroup v1)", "cpu_max 4 clamped to the 2 cores of host cpu-1". Its runs go on there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limit_notes: Vec<String>,
    /// Its pause, while it is paused: no run is requested for it until an operator resumes it.
    #[serde(default)]
    pub paused: Option<crate::WorkerPause>,
    /// Where the worker stands against its freshness target (`fresh_within_seconds`); null when it has none.
    #[serde(default)]
    pub freshness: Option<crate::Freshness>,
}

/// The items a running run has reported so far, and how fast.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunningItems {
    /// Item lines stored so far (succeeded, failed and skipped).
    pub items: i64,
    /// Those per minute since the run started (claimed, before it started), on the database clock, to one
    /// decimal.
    pub per_minute: f64,
}
