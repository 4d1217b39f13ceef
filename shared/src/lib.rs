//! What the Scrinalia API and daemon share: the worker catalogue, layered configuration, configuration
//! resolution, the domain's workflows on runs, overrides, schedules, pipelines, daemons and queue measurements
//! (over the database layer `scrinalia-db`), the run-log store, telemetry and metrics.
//!
//! Each process sees the database through a store made for its role: [`ApiStore`] (what an API process may
//! do: request, cancel, continue and read) and [`DaemonStore`] (what a daemon does: claim, lease, finish,
//! recover, fire, prune), both over the [`Store`] they share. The types that cross a process boundary as JSON
//! come from `scrinalia-wire` and are re-exported here.
#![warn(missing_docs)]

pub mod backlog;
pub mod bulk;
pub mod catalogue;
pub mod changes;
pub mod config;
pub mod cron;
pub mod daemons;
pub mod descriptions;
pub mod effective;
#[cfg(test)]
mod fixtures;
pub mod freshness;
pub mod history;
pub mod items;
pub mod logstore;
pub mod metrics;
pub mod names;
pub mod overrides;
pub mod pauses;
pub mod pipelines;
pub mod quarantine;
pub mod queue;
pub mod resolve;
pub mod resources;
pub mod retention;
pub mod runs;
pub mod schedules;
pub mod store;
pub mod telemetry;
pub mod tokens;
pub mod usage;
pub mod webhooks;

pub use catalogue::{Catalogue, Engine, OptionSpec, OptionType, ResourceScope, ResourceSpec, WorkerSpec};
pub use config::{ConfigError, Settings};
#[doc(hidden)]
pub use db::plans::{ExplainedRead, PlanSample};
pub use db::{Backend, DbError, Pings};
pub use store::{ApiStore, DaemonStore, Store};

pub use effective::EffectiveWorker;
pub use resolve::{ResolveError, resolve};
/// The database layer, under the name the domain modules use for it.
use scrinalia_db as db;
/// The pool handle the stores wrap; nothing outside this crate holds one.
use scrinalia_db::Database;
pub use scrinalia_wire::{
    AuditEntry, Change, Choices, Daemon, DaemonLimits, DaemonState, EndReason, ExplicitArgs, Named, Override,
    OverrideAction, OverrideValues, ProgressEntry, ProgressPage, QueueCount, Resolved, ResolvedConfig, Role, Run,
    RunPage, RunState, Source, auth,
};
pub use scrinalia_wire::{
    BulkAction, BulkActionKind, BulkActions, BulkOutcome, BulkPreview, BulkReason, BulkRequest, BulkSample,
    BulkSnapshot, BulkState,
};
pub use scrinalia_wire::{Chore, ChoreKind, Declared, Description, EngineSource, Readiness, WorkerDescription};
pub use scrinalia_wire::{ConfigChange, FollowKind, MAX_CHECKPOINT_BYTES, Origin, WaitCode, Waiting};
pub use scrinalia_wire::{
    FireOutcome, MissedPolicy, OverlapPolicy, PipelineRun, PipelineRunView, PipelineState, PipelineView, RetryOn,
    RetryPolicy, Schedule, ScheduleAction, ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview,
    ScheduleView, TargetKind,
};
pub use scrinalia_wire::{TriggerBody, tag};

/// The version every binary reports (daemon registry, health, OpenAPI).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
