//! Bulk actions on every daemon: a job stored by the API (`POST /api/runs/bulk`) is taken by one daemon under a
//! lease on the database clock (the daemon's `lease_seconds`) and worked in batches, the lease renewed with each
//! (see `scrinalia_shared::bulk`). A daemon that dies mid-job leaves the lease to run out, and another takes the
//! job over where it stood; one that stops cleanly stops between batches and releases it at once. A new job
//! wakes the daemons through the change feed (a resync too, since a notification may have been missed); between
//! jobs a daemon sleeps until a lease it saw runs out, and with no job left until it is woken, so an idle daemon
//! costs no query.

use std::{sync::Arc, time::Duration};

use scrinalia_shared::{BulkAction, bulk::BatchDone};
use tokio::{
    sync::Notify,
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::Context;

/// Runs per batch: one transaction begins them and one records their outcomes, so the progress read at the
/// job's endpoint moves this many at a time.
const BATCH: u32 = 100;
/// The longest a daemon waits before looking again while a job is unfinished.
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// Looks woken by a change are at least this far apart (SQLite wakes on every write).
const MIN_LOOK_GAP: Duration = Duration::from_millis(250);
/// A look for a lease that runs out comes this much after it, so that it has run out on the database clock too.
const DUE_MARGIN: Duration = Duration::from_millis(20);
/// After a failed look or batch, the next try comes this much later.
const RETRY: Duration = Duration::from_secs(1);

/// Takes and works bulk actions until `stop`; `wake` says a job may have been stored.
pub async fn run(ctx: Arc<Context>, wake: Arc<Notify>, stop: CancellationToken) {
    let lease = ctx.settings.daemon.lease();
    let mut next_look = Instant::now();
    let mut last_look = Instant::now() - MIN_LOOK_GAP;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(next_look) => {}
            () = wake.notified() => {
                next_look = next_look.min((last_look + MIN_LOOK_GAP).max(Instant::now()));
                continue;
            }
        }
        last_look = Instant::now();
        // A read first: most looks (every write wakes a SQLite daemon) find nothing, and a claim is a write.
        match ctx.db.next_bulk_in().await {
            // Nothing left: only a new job (its change wakes the daemon) or a resync can bring one.
            Ok(None) => {
                next_look = crate::clock::far();
                continue;
            }
            Ok(Some(wait)) if !wait.is_zero() => {
                next_look = Instant::now() + (wait + DUE_MARGIN).min(LONGEST_WAIT);
                continue;
            }
            Ok(Some(_)) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not look for bulk actions");
                next_look = Instant::now() + RETRY;
                continue;
            }
        }
        match ctx.db.claim_bulk(ctx.daemon_id, lease).await {
            Ok(Some(job)) => {
                let span = tracing::info_span!("bulk", bulk_id = %job.id, action = %job.action);
                work(&ctx, &job, lease, &stop).instrument(span).await;
                // Another job may wait.
                next_look = Instant::now();
            }
            // Another daemon took it: look again when its lease could run out.
            Ok(None) => next_look = Instant::now() + MIN_LOOK_GAP,
            Err(e) => {
                tracing::warn!(error = %e, "could not take a bulk action");
                next_look = Instant::now() + RETRY;
            }
        }
    }
}

/// Works `job` a batch at a time until it is done, another daemon has it, or `stop`.
async fn work(ctx: &Context, job: &BulkAction, lease: std::time::Duration, stop: &CancellationToken) {
    tracing::info!(total = job.total, done = job.done, skipped = job.skipped, failed = job.failed,
        requested_by = %job.requested_by, "bulk action taken");
    let catalogue = &ctx.settings.catalogue;
    loop {
        if stop.is_cancelled() {
            if let Err(e) = ctx.db.release_bulk(job.id, ctx.daemon_id).await {
                tracing::warn!(error = %e, "could not release the bulk action; another daemon takes it when its lease runs out");
            }
            tracing::info!("stopping: the bulk action is left for another daemon");
            return;
        }
        match ctx.db.work_bulk_batch(catalogue, job, ctx.daemon_id, lease, BATCH).await {
            Ok(BatchDone::Worked { finished: true, runs }) => {
                let view = ctx.db.bulk_action(job.id).await.ok().flatten();
                let counts = view.map(|v| (v.done, v.skipped, v.failed)).unwrap_or_default();
                tracing::info!(
                    last_batch = runs,
                    done = counts.0,
                    skipped = counts.1,
                    failed = counts.2,
                    "bulk action done"
                );
                return;
            }
            Ok(BatchDone::Worked { runs, .. }) => tracing::debug!(runs, "bulk batch recorded"),
            Ok(BatchDone::Lost) => {
                tracing::warn!("the bulk action is no longer this daemon's: another took it over");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "a bulk batch failed; trying again");
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    }
}
