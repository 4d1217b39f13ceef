//! What a daemon may do with the database: register and heartbeat, claim runs (with their resources), write a
//! run's start, lease, progress, checkpoints and end, recover runs whose owner died, fire schedules, move
//! pipelines on, do the workers' chores, deliver webhooks, and prune old history. It never serves the panel.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{Store, forward};
use crate::{
    BulkAction, Catalogue, Chore, ChoreKind, Daemon, DbError, EffectiveWorker, Override, Pings, Run,
    bulk::BatchDone,
    config::{DatabaseSettings, RetentionSettings, Webhook},
    daemons::NewDaemon,
    descriptions::{ChoreIntervals, NewDescription, NewReadiness},
    items::Batch,
    logstore::LogStore,
    queue::NewQueueCount,
    retention::PruneCounts,
    runs::{Finish, Placement, RecoveryDue},
    schedules::FirePass,
    webhooks::{AttemptOutcome, Claimed, Next, WebhooksDue},
};

/// The database as a daemon sees it: the operations below, and the shared [`Store`] it derefs to.
#[derive(Debug, Clone)]
pub struct DaemonStore {
    pub(super) store: Store,
}

impl DaemonStore {
    /// The daemon's view of `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Opens a pool for a daemon: its connections are pinged before each use, since not every fenced write of
    /// a daemon is safe to repeat.
    pub async fn connect(settings: &DatabaseSettings, application_name: &str) -> Result<Self, DbError> {
        Ok(Self::new(Store::connect(settings, application_name, Pings::BeforeEachUse).await?))
    }

    /// A store of its own holding one connection that is not pinged before each use, for the claims (a claim
    /// then costs one round trip, not two); on SQLite, the same pool.
    pub async fn dedicated(&self) -> Result<Self, DbError> {
        Ok(Self::new(Store { db: self.store.db.dedicated().await? }))
    }

    forward! {
        // Bulk actions.
        /// Takes the oldest bulk action that is waiting, or whose daemon's lease ran out, for `daemon`.
        pub async fn claim_bulk(&self, daemon: Uuid, lease: Duration) -> Result<Option<BulkAction>, DbError>;
        /// Gives up `daemon`'s lease of bulk action `id`, so that another daemon takes it over at once.
        pub async fn release_bulk(&self, id: Uuid, daemon: Uuid) -> Result<(), DbError>;
        /// One bulk action with its progress, and why runs were skipped or failed.
        pub async fn bulk_action(&self, id: Uuid) -> Result<Option<BulkAction>, DbError>;
        /// How long until a bulk action may be taken, on the database clock (zero: now); `None` when none is left.
        pub async fn next_bulk_in(&self) -> Result<Option<Duration>, DbError>;
        /// Works the next batch of up to `size` runs of `job`, held by `daemon`, renewing its lease to `lease`.
        pub async fn work_bulk_batch(
            &self,
            catalogue: &Catalogue,
            job: &BulkAction,
            daemon: Uuid,
            lease: Duration,
            size: u32,
        ) -> Result<BatchDone, DbError>;

        // Daemons.
        /// Records a heartbeat; returns the daemon's row as stored (`state` says whether it was asked to drain), or
        /// `None` if the row is gone.
        pub async fn heartbeat(&self, daemon: Uuid) -> Result<Option<Daemon>, DbError>;
        /// Records that a daemon stopped cleanly.
        pub async fn mark_daemon_stopped(&self, daemon: Uuid) -> Result<(), DbError>;
        /// Marks gone every daemon whose heartbeat is older than `after`; returns their ids.
        pub async fn mark_gone_daemons(&self, after: Duration) -> Result<Vec<Uuid>, DbError>;
        /// Registers a daemon.
        pub async fn register_daemon(&self, daemon: &NewDaemon) -> Result<Daemon, DbError>;

        // What workers say about themselves, and their chores.
        /// Takes up to `limit` due chores of `workers` for `daemon`, each leased for `lease` (database clock).
        pub async fn claim_chores(
            &self,
            daemon: Uuid,
            workers: &[String],
            intervals: &ChoreIntervals,
            lease: Duration,
            limit: u32,
        ) -> Result<Vec<Chore>, DbError>;
        /// The worker called `name` as runs see it now (its catalogue entry merged with its stored description); `None`
        /// when the catalogue has no such worker.
        pub async fn effective_worker(
            &self,
            catalogue: &Catalogue,
            name: &str,
        ) -> Result<Option<EffectiveWorker>, DbError>;
        /// Every chore of `worker`.
        pub async fn chores(&self, worker: &str) -> Result<Vec<Chore>, DbError>;
        /// Ends `daemon`'s lease of a chore.
        pub async fn finish_chore(&self, daemon: Uuid, worker: &str, chore: ChoreKind) -> Result<(), DbError>;
        /// How long until a chore of `workers` may come due, on the database clock (zero when one is due now); `None`
        /// when none will until asked for.
        pub async fn next_chore_in(
            &self,
            workers: &[String],
            intervals: &ChoreIntervals,
        ) -> Result<Option<Duration>, DbError>;
        /// Makes sure the chores of `workers` exist, so that the end of a run can ask for a count.
        pub async fn prepare_chores(&self, workers: &[String]) -> Result<(), DbError>;
        /// Stores an attempt to describe a worker (a failure keeps the last description that succeeded).
        pub async fn store_description(&self, description: &NewDescription) -> Result<(), DbError>;
        /// Stores what a worker's `check` answered.
        pub async fn store_readiness(&self, readiness: &NewReadiness) -> Result<(), DbError>;

        // Overrides.
        /// One worker's override.
        pub async fn get_override(&self, worker: &str) -> Result<Option<Override>, DbError>;
        /// Every override.
        pub async fn list_overrides(&self) -> Result<Vec<Override>, DbError>;

        // Backlog triggers.
        /// Where the last count of each of `workers` stands (database clock).
        pub async fn backlog_states(&self, workers: &[String]) -> Result<Vec<crate::backlog::CountState>, DbError>;
        /// Fires `worker`'s backlog trigger as `daemon` if it is due (exactly once across daemons).
        pub async fn fire_backlog(
            &self,
            catalogue: &Catalogue,
            worker: &str,
            daemon: Uuid,
        ) -> Result<crate::backlog::Fired, DbError>;

        // Pipelines.
        /// Moves on every pipeline run whose current step is not in flight (waiting for a busy worker, or left behind
        /// by an end that did not move it); how many were looked at.
        pub async fn settle_pipelines(&self) -> Result<usize, DbError>;

        // Queue measurements.
        /// Stores a queue measurement (replacing the previous one).
        pub async fn store_queue_count(&self, count: &NewQueueCount) -> Result<(), DbError>;

        // Retention.
        /// One prune pass as `holder`, if the lease is free and a pass is due.
        pub async fn prune_pass(
            &self,
            settings: &RetentionSettings,
            logs: &LogStore,
            holder: Uuid,
            stop: &(dyn Fn() -> bool + Sync),
        ) -> Result<Option<PruneCounts>, DbError>;

        // Runs.
        /// Runs held by `daemon` whose cancellation was requested.
        pub async fn cancel_requests(&self, daemon: Uuid) -> Result<Vec<Uuid>, DbError>;
        /// Flags the runs to preempt now: holders of lower priority of a resource a more urgent run has waited for
        /// its `preempt_after_seconds`; the (victim, urgent) pairs flagged by this call.
        pub async fn request_preemptions(
            &self,
            catalogue: &Catalogue,
            gone_after: Duration,
        ) -> Result<Vec<(Uuid, Uuid)>, DbError>;
        /// The running runs of `daemon` flagged for preemption.
        pub async fn preemption_requests(&self, daemon: Uuid) -> Result<Vec<Uuid>, DbError>;
        /// Claims up to `limit` of the oldest queued requests for `daemon`, with a lease of `lease` from now (database
        /// clock), optionally only for `workers`.
        pub async fn claim_runs(
            &self,
            daemon: Uuid,
            lease: Duration,
            limit: u32,
            workers: Option<&[String]>,
        ) -> Result<Vec<Run>, DbError>;
        /// Ends a run held by `daemon`.
        pub async fn finish_run(&self, run: Uuid, daemon: Uuid, finish: &Finish) -> Result<Run, DbError>;
        /// Records that the worker process of a claimed run started, and where its log goes.
        pub async fn mark_started(&self, run: Uuid, daemon: Uuid, log_key: &str) -> Result<Run, DbError>;
        /// Stores a progress report of a run held by `daemon`, and appends it to the run's progress history.
        pub async fn record_progress(&self, run: Uuid, daemon: Uuid, progress: &Value) -> Result<(), DbError>;
        /// Moves every running run whose lease expired to `interrupted` ([`EndReason::OwnerLost`]), with a sentence
        /// naming the daemon and the lease's expiry.
        pub async fn recover_expired(&self) -> Result<Vec<Run>, DbError>;
        /// What the recovery sweep has to do now, read in one statement (a sweep that finds nothing costs no more).
        pub async fn recovery_due(&self, gone_after: Duration) -> Result<RecoveryDue, DbError>;
        /// Extends the lease of a run held by `daemon` to `lease` from now.
        pub async fn renew_lease(&self, run: Uuid, daemon: Uuid, lease: Duration) -> Result<DateTime<Utc>, DbError>;
        /// Stores the configuration the worker of a run held by `daemon` reported it uses (fenced).
        pub async fn report_config(&self, run: Uuid, daemon: Uuid, config: &serde_json::Value) -> Result<(), DbError>;
        /// Stores the latest checkpoint a run's worker reported (fenced).
        pub async fn store_checkpoint(&self, run: Uuid, daemon: Uuid, checkpoint: &Value) -> Result<(), DbError>;
        /// What a run of `worker` must skip: its quarantined items (none without a quarantine).
        pub async fn skip_list(&self, catalogue: &Catalogue, worker: &str) -> Result<Vec<String>, DbError>;
        /// The items of `worker` with a failure streak under way.
        pub async fn watched_items(&self, worker: &str) -> Result<Vec<String>, DbError>;
        /// The items a run is scoped to (a rerun of a run's failures); empty for any other run.
        pub async fn run_scope(&self, run: Uuid) -> Result<Vec<String>, DbError>;
        /// Writes a batch of a run's items (fenced; a batch sent again changes nothing).
        pub async fn write_items(&self, run: Uuid, daemon: Uuid, batch: &Batch) -> Result<(), DbError>;
        /// Stores a run's checkpoint with the items reported before it, in one transaction (fenced).
        pub async fn checkpoint_with_items(
            &self,
            run: Uuid,
            daemon: Uuid,
            batch: Option<&Batch>,
            checkpoint: &Value,
        ) -> Result<(), DbError>;

        // Claims with resources.
        /// Claims up to `limit` of the oldest queued requests this daemon may place (of `workers` only, when given),
        /// with a lease of `lease`; workers that hold resources only while every resource has room.
        pub async fn claim_placed(
            &self,
            daemon: Uuid,
            lease: Duration,
            limit: u32,
            workers: Option<&[String]>,
            placement: &Placement,
        ) -> Result<Vec<Run>, DbError>;
        /// Every resource held now: (resource, run), oldest hold first.
        pub async fn resource_holders(&self) -> Result<Vec<(String, Uuid)>, DbError>;
        /// The slots of daemon-scoped resources run `run` holds: (resource, slot), by resource; its worker is
        /// given each as `SCRINALIA_RESOURCE_<NAME>`.
        pub async fn resource_slots(&self, run: Uuid) -> Result<Vec<(String, u32)>, DbError>;

        // Firing schedules.
        /// Fires every schedule due now (database clock), as `daemon`, in one transaction.
        pub async fn fire_due_schedules(
            &self,
            catalogue: &Catalogue,
            daemon: Uuid,
            missed_after: std::time::Duration,
        ) -> Result<FirePass, DbError>;
        /// How long until the next schedule fires, until the first queued run's backoff ends and until the first
        /// queued request expires (zero when due already; `None` for each when there is none).
        pub async fn next_due(&self) -> Result<crate::schedules::NextDue, DbError>;
        /// Ends every queued request whose expiry has passed (`cancelled`, `expired`), with what follows each.
        pub async fn expire_requests(&self) -> Result<Vec<Run>, DbError>;
        /// Requests every fire that waits for its target (overlap `queue`) whose target is free now; how many.
        pub async fn release_waiting_fires(&self, catalogue: &Catalogue) -> Result<u32, DbError>;

        // Webhooks.
        /// Claims up to `limit` due deliveries to `hooks` for `daemon`, each not due again for `lease`.
        pub async fn claim_webhook_deliveries(
            &self,
            daemon: Uuid,
            hooks: &[Webhook],
            lease: Duration,
            limit: u32,
        ) -> Result<Vec<Claimed>, DbError>;
        /// Fans out the events waiting into deliveries to the `hooks` that want them; how many events.
        pub async fn fan_out_webhook_events(&self, hooks: &[Webhook]) -> Result<u64, DbError>;
        /// Forgets test events (and their deliveries) older than `age`; how many.
        pub async fn prune_webhook_tests(&self, age: Duration) -> Result<u64, DbError>;
        /// Records an attempt of `claimed` by `daemon` and what follows it; false when the delivery was claimed again
        /// meanwhile (the attempt is recorded, the delivery is the later claim's).
        pub async fn record_webhook_attempt(
            &self,
            claimed: &Claimed,
            daemon: Uuid,
            outcome: &AttemptOutcome,
            next: Next,
        ) -> Result<bool, DbError>;
        /// What waits for a notifier with `hooks`, in one read (an idle notifier writes nothing).
        pub async fn webhooks_due(&self, hooks: &[Webhook]) -> Result<WebhooksDue, DbError>;
    }
}
