//! What an API process may do with the database: request runs and pipeline runs, cancel and continue them,
//! change overrides, capacities and schedules, manage tokens, and read everything the panel shows. It never
//! claims, leases, finishes or recovers a run.

use std::{collections::HashMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{Store, forward};
use crate::{
    AuditEntry, BulkAction, BulkActionKind, BulkPreview, Catalogue, Change, ConfigChange, Daemon, DbError,
    EffectiveWorker, ExplicitArgs, FollowKind, Override, Pings, PipelineRun, PipelineRunView, PipelineView,
    ProgressEntry, ProgressPage, QueueCount, Readiness, Run, RunPage, Schedule, ScheduleAuditEntry, ScheduleFire,
    ScheduleInput, ScheduleView, Waiting, WorkerDescription,
    auth::{CreatedToken, ServiceToken},
    bulk::{BulkError, NewBulkAction},
    config::{DatabaseSettings, RetentionSettings, Webhook},
    daemons::DrainError,
    history::WorkerHistory,
    overrides::{OverrideChange, OverrideError, OverrideState},
    pauses::{PauseError, WorkerPause},
    pipelines::PipelineError,
    resources::ResourceError,
    runs::{CancelOutcome, FollowError, RequestError, ResolveCache, RunFilter, RunRequest},
    schedules::ScheduleError,
    tokens::{NewToken, TokenError},
    webhooks::Delivery,
};
use scrinalia_wire::{
    resource::{ResourceAuditEntry, ResourceChange, ResourceView},
    worker::view::RunningItems,
};

/// The database as an API process sees it: the operations below, and the shared [`Store`] it derefs to.
#[derive(Debug, Clone)]
pub struct ApiStore {
    pub(super) store: Store,
    /// What run requests resolve against, kept between requests (see [`ResolveCache`]).
    resolved: Arc<ResolveCache>,
}

impl ApiStore {
    /// The API's view of `store`.
    pub fn new(store: Store) -> Self {
        Self { store, resolved: Arc::default() }
    }

    /// Requests a run: resolves the configuration it will run with and queues it (see
    /// [`Store::request_run`](crate::Store)), in one statement once the worker's override is known.
    pub async fn request_run(&self, catalogue: &Catalogue, request: RunRequest) -> Result<Run, RequestError> {
        self.store.request_run(catalogue, request, &self.resolved).await
    }

    /// The priority a run of `worker` gets when its arguments name none (its override's, else its catalogue
    /// entry's, else 50): raising a run above it needs the admin role. `None` for an unknown worker.
    pub async fn worker_priority(&self, catalogue: &Catalogue, worker: &str) -> Result<Option<u8>, RequestError> {
        let Some(spec) = catalogue.worker(worker) else { return Ok(None) };
        let stored = self.store.get_override(worker).await?.map(|o| o.values).unwrap_or_default();
        let priority = crate::resolve::worker_priority(spec, &stored)
            .map_err(|error| RequestError::InvalidOverride { worker: worker.to_owned(), error })?;
        Ok(Some(priority.value))
    }

    /// Applies `change` to `worker`'s override as `actor`, under the override's lock (so two concurrent partial
    /// changes do not lose each other), checked by the same rules as a run's arguments, and appends it to the audit
    /// trail. This process's next request of the worker resolves against it at once.
    pub async fn change_override(
        &self,
        catalogue: &Catalogue,
        worker: &str,
        actor: &str,
        change: &OverrideChange,
    ) -> Result<OverrideState, OverrideError> {
        let changed = self.store.change_override(catalogue, worker, actor, change).await;
        self.resolved.forget_worker(worker);
        changed
    }

    /// Removes `worker`'s override as `actor`, for `reason`; the change is audited even when there was none.
    pub async fn clear_override(
        &self,
        catalogue: &Catalogue,
        worker: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<OverrideState, OverrideError> {
        let cleared = self.store.clear_override(catalogue, worker, actor, reason).await;
        self.resolved.forget_worker(worker);
        cleared
    }

    /// Forgets what `change`, heard on the change feed, may have made stale among what requests resolve against.
    pub fn forget_resolved(&self, change: &Change) {
        self.resolved.forget(change);
    }

    /// Opens a pool for an API process: its connections are not pinged before each use, since every API
    /// statement is retried on a cut connection or begins with a step that is safe to repeat.
    pub async fn connect(settings: &DatabaseSettings, application_name: &str) -> Result<Self, DbError> {
        Ok(Self::new(Store::connect(settings, application_name, Pings::OnlyAfterUse).await?))
    }

    /// As `connect`, every statement of the API bounded by `statement_timeout` on PostgreSQL (`SET LOCAL` behind a
    /// pooler; the session's setting on a direct connection), so that a slow read gives up with an error instead
    /// of holding a connection; migrations run without it. SQLite has no statement timeout.
    pub async fn connect_limited(
        settings: &DatabaseSettings,
        application_name: &str,
        statement_timeout: Option<Duration>,
    ) -> Result<Self, DbError> {
        let store = Store::connect_limited(settings, application_name, Pings::OnlyAfterUse, statement_timeout).await?;
        Ok(Self::new(store))
    }

    forward! {
        // Bulk actions.
        /// A dry run of a bulk action: how many runs `filter` matches now, the newest of them and the snapshot.
        pub async fn bulk_preview(
            &self,
            filter: &RunFilter,
            action: BulkActionKind,
        ) -> Result<BulkPreview, BulkError>;
        /// Stores a bulk action with the runs it acts on, once the count confirmed is the count matched at or
        /// before the snapshot; the daemons work it.
        pub async fn start_bulk(&self, new: &NewBulkAction<'_>) -> Result<BulkAction, BulkError>;
        /// One bulk action with its progress, and why runs were skipped or failed.
        pub async fn bulk_action(&self, id: Uuid) -> Result<Option<BulkAction>, DbError>;
        /// The newest `limit` bulk actions, newest first.
        pub async fn bulk_actions(&self, limit: u32) -> Result<Vec<BulkAction>, DbError>;

        // Daemons.
        /// One daemon, with its state as of the database clock.
        pub async fn get_daemon(&self, id: Uuid, gone_after: Duration) -> Result<Option<Daemon>, DbError>;
        /// Daemons that are alive, or stopped within the last day, newest first, each with its state as of the database
        /// clock (`gone` past `gone_after` without a heartbeat).
        pub async fn list_daemons(&self, gone_after: Duration) -> Result<Vec<Daemon>, DbError>;
        /// Asks a daemon that is not gone (`gone_after` being the registry's silence limit) to drain.
        pub async fn request_drain(
            &self,
            daemon: Uuid,
            actor: &str,
            gone_after: Duration,
        ) -> Result<Daemon, DrainError>;

        // What workers say about themselves, and their chores.
        /// One worker's stored description.
        pub async fn description(&self, worker: &str) -> Result<Option<WorkerDescription>, DbError>;
        /// Every worker's stored description.
        pub async fn descriptions(&self) -> Result<Vec<WorkerDescription>, DbError>;
        /// Every worker of the catalogue as runs see it now, in catalogue order.
        pub async fn effective_workers(&self, catalogue: &Catalogue) -> Result<Vec<EffectiveWorker>, DbError>;
        /// Every worker's last readiness.
        pub async fn readiness(&self) -> Result<Vec<Readiness>, DbError>;

        // History.
        /// The history of `worker` over the last `days` calendar days (UTC, today included; 1 to [`MAX_DAYS`]).
        pub async fn worker_history(&self, worker: &str, days: u32) -> Result<WorkerHistory, DbError>;

        // Overrides.
        /// A worker's audit trail, newest first (at most `limit` entries, 1 to 1000).
        pub async fn audit_trail(&self, worker: &str, limit: u32) -> Result<Vec<AuditEntry>, DbError>;
        /// Every override.
        pub async fn list_overrides(&self) -> Result<Vec<Override>, DbError>;
        /// One worker's override.
        pub async fn get_override(&self, worker: &str) -> Result<Option<Override>, DbError>;

        // Pipelines.
        /// Asks for a pipeline run to be cancelled by `actor` (its current step is cancelled first).
        pub async fn cancel_pipeline_run(&self, id: Uuid, actor: &str) -> Result<Option<PipelineRunView>, DbError>;
        /// One pipeline run with its steps' runs.
        pub async fn pipeline_run(&self, id: Uuid) -> Result<Option<PipelineRunView>, DbError>;
        /// Runs of `pipeline` (of all pipelines when `None`), newest first (1 to 500).
        pub async fn pipeline_runs(&self, pipeline: Option<&str>, limit: u32) -> Result<Vec<PipelineRun>, DbError>;
        /// The catalogue's pipelines with their last runs.
        pub async fn pipelines(&self, catalogue: &Catalogue) -> Result<Vec<PipelineView>, DbError>;
        /// Starts a run of `pipeline` for `requested_by`, with `arguments` by step worker, and requests its first step
        /// in the same transaction; its steps' runs carry the pipeline's tags and `tags`.
        pub async fn start_pipeline(
            &self,
            catalogue: &Catalogue,
            pipeline: &str,
            requested_by: &str,
            arguments: &Value,
            tags: &[String],
        ) -> Result<PipelineRunView, PipelineError>;

        // Queue measurements.
        /// For each running run, its worker and the seconds (database clock) since its last progress report, or since
        /// it started when it has reported none.
        pub async fn progress_ages(&self) -> Result<Vec<(String, f64)>, DbError>;
        /// Every worker's last queue measurement, with its age on the database clock.
        pub async fn queue_counts(&self) -> Result<Vec<QueueCount>, DbError>;

        // Backlog triggers and freshness.
        /// A worker's backlog fires, newest first (at most `limit`, 1 to 1000).
        pub async fn backlog_fires(&self, worker: &str, limit: u32) -> Result<Vec<scrinalia_wire::BacklogFire>, DbError>;
        /// Where each worker with a freshness target stands, from what the caller read already.
        pub async fn freshness(
            &self,
            targets: &[(&crate::WorkerSpec, u64)],
            counts: &std::collections::HashMap<String, QueueCount>,
            in_flight: &std::collections::HashMap<String, Run>,
            daemons: &[Daemon],
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<std::collections::HashMap<String, scrinalia_wire::Freshness>, DbError>;
        /// Where every worker with a freshness target stands now, read whole (health, `/metrics`).
        pub async fn freshness_now(
            &self,
            catalogue: &Catalogue,
            gone_after: Duration,
        ) -> Result<Vec<(String, scrinalia_wire::Freshness)>, DbError>;

        // Resources.
        /// Applies `change`, as an operator sent it, to the resource `name` (see [`Store::set_resource_capacity`]).
        pub async fn change_resource(
            &self,
            catalogue: &Catalogue,
            name: &str,
            actor: &str,
            change: &ResourceChange,
        ) -> Result<ResourceView, ResourceError>;
        /// The audit trail of the resource `name`, newest first (at most `limit` entries, 1 to 1000).
        pub async fn resource_audit(
            &self,
            catalogue: &Catalogue,
            name: &str,
            limit: u32,
        ) -> Result<Vec<ResourceAuditEntry>, ResourceError>;
        /// Every catalogue resource, in catalogue order, with its effective capacity, where that comes from and its
        /// holders.
        /// A daemon-scoped one lists each live daemon (as of `gone_after`) that offers it.
        pub async fn resources(&self, catalogue: &Catalogue, gone_after: Duration) -> Result<Vec<ResourceView>, DbError>;

        // Retention.
        /// Up to `limit` runs that a prune pass with `settings` would delete now, oldest finished first (the export).
        pub async fn prunable_runs(
            &self,
            settings: &RetentionSettings,
            before: Option<DateTime<Utc>>,
            worker: Option<&str>,
            after: Option<(DateTime<Utc>, Uuid)>,
            limit: u32,
        ) -> Result<Vec<Run>, DbError>;

        // Runs.
        /// The last finished run of each of `workers`.
        pub async fn last_finished(&self, workers: &[String]) -> Result<Vec<Run>, DbError>;
        /// A page of the ledger, newest first.
        pub async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, DbError>;
        /// Asks for a run to be cancelled by `actor`: a queued run at once, a running one by its daemon.
        pub async fn request_cancel(&self, run: Uuid, actor: &str) -> Result<Option<CancelOutcome>, DbError>;
        /// The retry chain `id` belongs to, first attempt first (just the run when it was never retried; empty when
        /// there is no such run).
        pub async fn run_chain(&self, id: Uuid) -> Result<Vec<Run>, DbError>;
        /// The children of a sharded run's parent, by shard then oldest first (none for any other run).
        pub async fn run_children(&self, id: Uuid) -> Result<Vec<Run>, DbError>;
        /// The run that resumed or restarted run `id` (by a person, or by itself after a preemption), and how.
        pub async fn run_continued_by(&self, id: Uuid) -> Result<Option<(Uuid, FollowKind)>, DbError>;
        /// A run's progress history, oldest first.
        pub async fn run_progress(&self, id: Uuid) -> Result<Vec<ProgressEntry>, DbError>;
        /// A page of a run's progress reports, oldest first, read backwards from the newest.
        pub async fn run_progress_page(&self, id: Uuid, before: Option<i32>, limit: u32) -> Result<ProgressPage, DbError>;
        /// Every run queued or running.
        pub async fn runs_in_flight(&self) -> Result<Vec<Run>, DbError>;
        /// What each running run with items has reported so far (item lines, and per minute), by run id.
        pub async fn running_items(&self) -> Result<HashMap<Uuid, RunningItems>, DbError>;

        // Reruns.
        /// For a rerun: each field of its configuration that differs from the original's, with both sources.
        pub async fn rerun_changes(&self, run: &Run) -> Result<Option<Vec<ConfigChange>>, DbError>;

        // Continuations.
        /// Requests a run that continues run `id` as `how`, for `requested_by`.
        pub async fn continue_run(
            &self,
            catalogue: &Catalogue,
            id: Uuid,
            how: FollowKind,
            requested_by: &str,
        ) -> Result<Run, FollowError>;
        /// Requests a rerun of run `id` (`how`) for `requested_by`, with `changes` over its explicit arguments.
        pub async fn continue_run_with(
            &self,
            catalogue: &Catalogue,
            id: Uuid,
            how: FollowKind,
            requested_by: &str,
            changes: &ExplicitArgs,
        ) -> Result<Run, FollowError>;

        // Why a run waits.
        /// Why the pipeline run of `view` waits, if it does (see [`PipelineRunView::waiting`]).
        pub async fn pipeline_waiting(
            &self,
            catalogue: &Catalogue,
            view: &PipelineRunView,
            gone_after: Duration,
        ) -> Result<Option<Waiting>, DbError>;
        /// Why the queued run of each of `workers` waits, by run id.
        pub async fn why_each_waits(
            &self,
            catalogue: &Catalogue,
            in_flight: &[Run],
            workers: &[String],
            gone_after: Duration,
        ) -> Result<HashMap<Uuid, Waiting>, DbError>;
        /// Why the run `run` waits, if it is queued; `None` otherwise.
        pub async fn why_waiting(
            &self,
            catalogue: &Catalogue,
            run: &Run,
            gone_after: Duration,
        ) -> Result<Option<Waiting>, DbError>;

        // Schedules.
        /// Creates a schedule as `actor`, for the reason in `input`.
        pub async fn create_schedule(
            &self,
            catalogue: &Catalogue,
            actor: &str,
            input: &ScheduleInput,
        ) -> Result<ScheduleView, ScheduleError>;
        /// Deletes the schedule `key` as `actor`; its fire history and audit trail are kept.
        pub async fn delete_schedule(
            &self,
            key: &str,
            actor: &str,
            reason: Option<&str>,
        ) -> Result<Schedule, ScheduleError>;
        /// Replaces the definition of the schedule `key` (id or name) as `actor`.
        pub async fn replace_schedule(
            &self,
            catalogue: &Catalogue,
            key: &str,
            actor: &str,
            input: &ScheduleInput,
        ) -> Result<ScheduleView, ScheduleError>;
        /// One schedule, by id or name.
        pub async fn schedule(&self, key: &str) -> Result<ScheduleView, ScheduleError>;
        /// A schedule's audit trail, newest first (1 to 1000); kept after the schedule is deleted (by id).
        pub async fn schedule_audit(&self, key: &str, limit: u32) -> Result<Vec<ScheduleAuditEntry>, ScheduleError>;
        /// A schedule's fires, newest first (1 to 1000).
        pub async fn schedule_fires(&self, key: &str, limit: u32) -> Result<Vec<ScheduleFire>, ScheduleError>;
        /// Every schedule with its next fire times and last fire, by name.
        pub async fn schedules(&self) -> Result<Vec<ScheduleView>, DbError>;
        /// Pauses (`enabled: false`) or resumes the schedule `key` as `actor`.
        pub async fn set_schedule_enabled(
            &self,
            key: &str,
            enabled: bool,
            actor: &str,
            reason: Option<&str>,
        ) -> Result<ScheduleView, ScheduleError>;

        // Service tokens.
        /// Creates a service token by `actor`; `reserved` are the names it may not take (the configured tokens').
        pub async fn create_token(
            &self,
            token: &NewToken,
            actor: &str,
            reserved: &[&str],
        ) -> Result<CreatedToken, TokenError>;
        /// Every service token, oldest first, revoked ones included; never a secret.
        pub async fn list_tokens(&self) -> Result<Vec<ServiceToken>, DbError>;
        /// Revokes a service token by `actor`: every API process refuses it within a second.
        pub async fn revoke_token(&self, id: Uuid, actor: &str) -> Result<ServiceToken, TokenError>;

        // Paused workers.
        /// Pauses `worker` by hand as `actor`, for `reason`; its queued retries are cancelled.
        pub async fn pause_worker(
            &self,
            worker: &str,
            actor: &str,
            reason: &str,
        ) -> Result<Result<WorkerPause, PauseError>, DbError>;
        /// Resumes `worker` as `actor`, for `reason`; its failures in a row count from 0 again.
        pub async fn resume_worker(
            &self,
            worker: &str,
            actor: &str,
            reason: &str,
        ) -> Result<Result<WorkerPause, PauseError>, DbError>;

        // Webhooks.
        /// Queues a test event for `hook`, delivered as every other; its event id.
        pub async fn queue_webhook_test(&self, hook: &Webhook, actor: &str) -> Result<Uuid, DbError>;
        /// The newest `limit` deliveries, of `webhook` and of events of `run` when given, newest first.
        pub async fn webhook_deliveries(
            &self,
            webhook: Option<&str>,
            run: Option<Uuid>,
            limit: u32,
        ) -> Result<Vec<Delivery>, DbError>;
    }
}
