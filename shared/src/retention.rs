//! Retention: the ledger, the progress histories, the run logs and the daemons' rows are bounded by the
//! `[retention]` settings, so that a scheduler kept for years stays as fast and as small as in its first months.
//!
//! A prune pass is done by one daemon at a time across all daemons, at most once per `interval_seconds`: it
//! holds a lease row (`retention_lease`, times on the database clock) taken only when no live holder has it and
//! the last pass ended an interval ago, renewed before every batch (a daemon that loses it stops). A session
//! advisory lock was not chosen: it needs a connection of its own for the whole pass and is lost silently behind
//! a pooler in transaction mode. Each batch is its own short transaction on terminal rows only, so claims (which
//! read queued rows) are never held up.
//!
//! Links: a run that a run still queued or running retries or continues (`retry_of`, `follows`) is kept until
//! that run ends (a resume may need its predecessor); otherwise a pruned run's finished followers keep their own
//! record with the link set to null (their `follows_as` and `attempt` still say what they were), in the same
//! transaction. So whether a run is pruned never depends on another being pruned first, and the export lists
//! exactly what a pass deletes. A run of a pipeline run still going is kept. Pipeline runs and schedule fires keep
//! the ids of pruned runs (no foreign key ties them): their history says a run was requested, and the run's page
//! answers 404.
//!
//! Logs: a pruned run's log prefix is recorded in `retention_log_deletes` in the rows' own transaction and its
//! objects are deleted after the commit; a prefix whose delete fails stays recorded and is tried again by the
//! next pass, so no log is orphaned and no log of a kept run is ever deleted.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use object_store::path::Path;
use uuid::Uuid;

use crate::{
    Database, DbError, Run, Store,
    config::RetentionSettings,
    db::{self, retention::Policy},
    logstore::LogStore,
};

/// How long the prune lease lasts without renewal: far more than one batch takes.
const LEASE: Duration = Duration::from_secs(120);
/// Whole days as seconds.
const DAY: f64 = 86_400.0;

/// What one pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneCounts {
    /// Finished runs deleted (with their progress and resource rows).
    pub runs: u64,
    /// Progress reports deleted by thinning.
    pub progress: u64,
    /// Gone daemons' rows deleted.
    pub daemons: u64,
    /// Run logs deleted from the object store.
    pub logs: u64,
    /// Run logs whose delete failed (tried again by the next pass).
    pub log_failures: u64,
}

fn policy(s: &RetentionSettings) -> Policy {
    Policy {
        succeeded_secs: f64::from(s.succeeded_days) * DAY,
        failed_secs: f64::from(s.failed_days) * DAY,
        cancelled_secs: f64::from(s.cancelled_days) * DAY,
        keep_last: i64::from(s.keep_last_per_worker.max(1)),
    }
}

/// The longest rest between two batches, so that a daemon told to stop sees it within about a second.
const MAX_REST: Duration = Duration::from_secs(1);

/// Rests after a full batch as long as the batch took (at most [`MAX_REST`]): a pass through a large backlog
/// then takes at most about half of the database's time, and the claims beside it keep the rest. Without it, on
/// two cores, a pass of a million runs put the claims' p99 at 5.2 ms against 3.0 without a pass
/// (`scrinalia-bench claim-during-prune`). A slower database makes slower batches and so longer rests.
async fn rest(batch_started: Instant) {
    tokio::time::sleep(batch_started.elapsed().min(MAX_REST)).await;
}

impl Store {
    /// One prune pass as `holder`, if the lease is free and a pass is due: `None` when another daemon prunes or
    /// the last pass was less than an interval ago. `stop` is asked between batches; a pass stopped early ends
    /// cleanly (what it did is committed, the rest is for the next pass).
    pub(crate) async fn prune_pass(
        &self,
        settings: &RetentionSettings,
        logs: &LogStore,
        holder: Uuid,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<PruneCounts>, DbError> {
        let ttl = LEASE.as_secs_f64();
        if !db::retention::acquire(&self.db, holder, ttl, settings.interval().as_secs_f64()).await? {
            return Ok(None);
        }
        let pass = db::retention::begin_pass(&self.db, holder).await?;
        let outcome = self.prune_batches(settings, logs, holder, stop).await;
        let counts = outcome.as_ref().copied().unwrap_or_default();
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let recorded = [as_i64(counts.runs), as_i64(counts.progress), as_i64(counts.daemons), as_i64(counts.logs)];
        // The pass is recorded as ended before the lease is released, so no two recorded passes overlap.
        let finished = db::retention::finish_pass(&self.db, pass, recorded).await;
        let released = db::retention::release(&self.db, holder).await;
        let counts = outcome?;
        finished?;
        released?;
        Ok(Some(counts))
    }

    async fn prune_batches(
        &self,
        settings: &RetentionSettings,
        logs: &LogStore,
        holder: Uuid,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<PruneCounts, DbError> {
        let batch = i64::from(settings.batch_size);
        let policy = policy(settings);
        let mut counts = PruneCounts::default();
        let mut logs_ok = true;
        // Logs left by an earlier pass first.
        delete_pending_logs(&self.db, logs, batch, &mut counts, &mut logs_ok).await?;
        loop {
            if stop() || !db::retention::renew(&self.db, holder, LEASE).await? {
                return Ok(counts);
            }
            let started = Instant::now();
            let pruned = {
                let _own = self.db.own_write();
                prune_runs(&self.db, &policy, batch).await?
            };
            counts.runs += pruned;
            if logs_ok {
                delete_pending_logs(&self.db, logs, batch, &mut counts, &mut logs_ok).await?;
            }
            if pruned < batch as u64 {
                break;
            }
            rest(started).await;
        }
        let points = i64::from(settings.progress_points);
        loop {
            if stop() || !db::retention::renew(&self.db, holder, LEASE).await? {
                return Ok(counts);
            }
            let started = Instant::now();
            let (runs, thinned) = {
                let _own = self.db.own_write();
                thin_progress(&self.db, holder, points, batch).await?
            };
            counts.progress += thinned;
            if runs < batch as u64 {
                break;
            }
            rest(started).await;
        }
        let gone_after = f64::from(settings.gone_daemons_days) * DAY;
        loop {
            if stop() || !db::retention::renew(&self.db, holder, LEASE).await? {
                return Ok(counts);
            }
            let removed = db::retention::prune_daemons(&self.db, gone_after, batch).await?;
            counts.daemons += removed;
            if removed < batch as u64 {
                return Ok(counts);
            }
        }
    }

    /// Up to `limit` runs that a prune pass with `settings` would delete now, oldest finished first: after the
    /// keyset `after` (a previous page's last finished time and id), finished before `before` and of `worker`
    /// when given. The export writes these for an archive before they go.
    pub(crate) async fn prunable_runs(
        &self,
        settings: &RetentionSettings,
        before: Option<DateTime<Utc>>,
        worker: Option<&str>,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u32,
    ) -> Result<Vec<Run>, DbError> {
        let policy = policy(settings);
        db::retention::prunable_runs(&self.db, &policy, before, worker, after, i64::from(limit)).await
    }
}

/// Deletes up to `limit` prunable runs (their progress and resource rows go with them, by cascade), sets to null
/// the links of the finished runs that retried or continued them, and records their log prefixes as pending
/// deletes, in one short transaction; how many runs went.
async fn prune_runs(db: &Database, policy: &db::retention::Policy, limit: i64) -> Result<u64, DbError> {
    let mut tx = db.begin_write().await?;
    let gone = db::retention::delete_prunable(&mut tx, policy, limit).await?;
    let ids: Vec<Uuid> = gone.iter().map(|g| g.0).collect();
    db::retention::unlink(&mut tx, &ids).await?;
    let keys: Vec<String> = gone.into_iter().filter_map(|g| g.1).collect();
    db::retention::pend_log_deletes(&mut tx, &keys).await?;
    tx.commit().await?;
    Ok(ids.len() as u64)
}

/// Thins the progress history of the next `limit` finished runs after the lease's watermark to at most `points`
/// reports each (keeping the first and the last), and moves the watermark, in one transaction; `(runs looked
/// at, reports deleted)`. Fewer runs than `limit` means the thinning has caught up.
async fn thin_progress(db: &Database, holder: Uuid, points: i64, limit: i64) -> Result<(u64, u64), DbError> {
    let mut tx = db.begin_write().await?;
    let Some(after) = db::retention::thinned_after(&mut tx, holder).await? else { return Ok((0, 0)) };
    let next = db::retention::next_to_thin(&mut tx, after, limit).await?;
    let Some(&last) = next.last() else { return Ok((0, 0)) };
    let thinned = db::retention::thin(&mut tx, after, last, points).await?;
    db::retention::move_thinned_after(&mut tx, holder, last).await?;
    tx.commit().await?;
    Ok((next.len() as u64, thinned))
}

/// Deletes the objects of up to `batch` pending log prefixes and forgets those that went. A failure is logged,
/// left pending, and stops log deletes for the rest of the pass (the store is likely down).
async fn delete_pending_logs(
    db: &Database,
    logs: &LogStore,
    batch: i64,
    counts: &mut PruneCounts,
    logs_ok: &mut bool,
) -> Result<(), DbError> {
    let pending = db::retention::pending_logs(db, batch).await?;
    if pending.is_empty() {
        return Ok(());
    }
    let mut gone = Vec::with_capacity(pending.len());
    for key in pending {
        match delete_prefix(logs, &key).await {
            Ok(()) => gone.push(key),
            Err(e) => {
                tracing::warn!(log_key = %key, error = %logs.explain(&e), "could not delete a pruned run's log; the next pass tries again");
                counts.log_failures += 1;
                *logs_ok = false;
                break;
            }
        }
    }
    counts.logs += gone.len() as u64;
    db::retention::forget_logs(db, &gone).await
}

/// Deletes every object under a run's log prefix (its chunks and any `.cut`).
async fn delete_prefix(logs: &LogStore, key: &str) -> Result<(), object_store::Error> {
    let store = logs.store();
    let prefix = Path::from(key);
    let objects: Vec<_> = store.list(Some(&prefix)).map_ok(|o| o.location).try_collect().await?;
    for location in objects {
        match store.delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
