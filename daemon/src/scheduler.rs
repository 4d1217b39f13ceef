//! The daemon's part in scheduling, with no leader: every daemon sleeps until the earliest due time (a
//! schedule's next fire, or the end of a queued retry's backoff; asked on the database clock) and is woken
//! early when a schedule changes or a run is requested. Then it fires what is due (the database lets exactly
//! one daemon fire each (schedule, fire time)), ends the queued requests that expired, tells the main loop to
//! claim when a backoff ended, and, when a run ended, starts what waited for its worker: a schedule's queued
//! fire, a pipeline's step.

use std::{sync::Arc, time::Duration};

use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::Context;

/// The longest sleep when nothing is due: a safety net (changes wake the daemon). On SQLite the daemon's slow
/// poll (`daemon.poll_seconds`) instead: its change feed ignores the file changes made while one of the daemon's
/// own writes is under way, so a schedule another process writes at that moment is seen by the next look.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// The longest sleep of this daemon's scheduler (see [`LONGEST_WAIT`]).
fn longest_wait(ctx: &Context) -> Duration {
    match ctx.db.backend() {
        scrinalia_shared::Backend::Sqlite => Duration::from_secs(ctx.settings.daemon.poll_seconds).min(LONGEST_WAIT),
        scrinalia_shared::Backend::Postgres => LONGEST_WAIT,
    }
}
/// A look for something that comes due comes this much after it, so that it is due on the database clock too.
const DUE_MARGIN: Duration = Duration::from_millis(2);
/// Wake-ups closer together than this are taken together (SQLite wakes on every write).
const MIN_GAP: Duration = Duration::from_millis(50);
/// When another daemon holds a due schedule, the next look comes this much later.
const RACE_WAIT: Duration = Duration::from_millis(20);
/// After a failed look, the next one comes this much later.
const RETRY: Duration = Duration::from_secs(1);

/// What wakes the scheduler besides its clock.
#[derive(Debug, Clone, Default)]
pub struct Wakes {
    /// A schedule changed, or a run was requested (perhaps a retry with a backoff): look at the due times again.
    pub due: Arc<Notify>,
    /// A run ended: start what waited for its worker.
    pub ended: Arc<Notify>,
    /// Told by the scheduler when a queued run's backoff ended: the main loop claims.
    pub claim: Arc<Notify>,
}

/// Fires schedules and settles what waits until `stop`.
pub async fn run(ctx: Arc<Context>, wakes: Wakes, stop: CancellationToken) {
    let mut settle = true;
    loop {
        settle |= has_permit(&wakes.ended);
        // A settle that failed (a busy SQLite file, a cut connection) is tried again after RETRY: nothing
        // else would wake it, and a pipeline step would wait for a run that has long ended.
        let unsettled = settle && !settle_waiting(&ctx).await;
        let wait = match look(&ctx, &wakes).await {
            Ok(wait) => wait,
            Err(e) => {
                tracing::warn!(error = %e, "could not fire the due schedules; trying again");
                RETRY
            }
        };
        let wait = if unsettled { wait.min(RETRY) } else { wait };
        let deadline = Instant::now() + wait;
        let woken = tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(deadline) => None,
            () = wakes.due.notified() => Some(false),
            () = wakes.ended.notified() => Some(true),
        };
        settle = unsettled || woken == Some(true);
        if woken.is_some() {
            // A change: let the burst it belongs to arrive (SQLite wakes on every write), then take it as one;
            // never past the due time the daemon slept for.
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(deadline.min(Instant::now() + MIN_GAP)) => {}
            }
            settle |= has_permit(&wakes.ended);
        }
    }
}

/// Whether `notify` holds a permit (consuming it).
fn has_permit(notify: &Notify) -> bool {
    let notified = notify.notified();
    tokio::pin!(notified);
    notified.as_mut().enable()
}

/// Fires what is due, and returns how long to sleep until the next due time.
async fn look(ctx: &Context, wakes: &Wakes) -> Result<Duration, scrinalia_shared::DbError> {
    let missed_after = Duration::from_secs(ctx.settings.daemon.missed_fire_after_seconds);
    let catalogue = &ctx.settings.catalogue;
    // Fires that came due while firing (a schedule every second) are fired in the same look.
    for _ in 0..10 {
        let due = ctx.db.next_due().await?;
        let (fire, not_before) = (due.fire, due.not_before);
        if not_before == Some(Duration::ZERO) {
            wakes.claim.notify_one();
        }
        let mut expiry = due.expiry;
        if expiry == Some(Duration::ZERO) {
            expire(ctx).await;
            // What expired next is not known until the next look: soon.
            expiry = Some(RACE_WAIT);
        }
        if fire != Some(Duration::ZERO) {
            let next = [fire, not_before.filter(|d| !d.is_zero()), expiry].into_iter().flatten().min();
            let longest = longest_wait(ctx);
            return Ok(next.map_or(longest, |d| (d + DUE_MARGIN).min(longest)));
        }
        let pass = ctx.db.fire_due_schedules(catalogue, ctx.daemon_id, missed_after).await?;
        ctx.metrics.fired(&pass);
        if pass.refused_by_constraint > 0 {
            tracing::error!(
                refused = pass.refused_by_constraint,
                "the unique index refused a second fire of a schedule"
            );
        }
        if pass.schedules == 0 {
            // Another daemon's pass holds them: look again in a moment, when it has committed.
            return Ok(RACE_WAIT);
        }
    }
    Ok(Duration::ZERO)
}

/// Ends the queued requests whose expiry has passed, each with what follows it.
async fn expire(ctx: &Context) {
    match ctx.db.expire_requests().await {
        Ok(runs) => {
            for run in runs {
                tracing::info!(run_id = %run.id, worker = %run.worker, expires_at = ?run.expires_at, "a request expired before a daemon claimed it");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not end the expired requests; trying again"),
    }
}

/// Starts what waited for a worker; whether all of it could be looked at.
async fn settle_waiting(ctx: &Context) -> bool {
    let fires = ctx.db.release_waiting_fires(&ctx.settings.catalogue).await;
    if let Err(e) = &fires {
        tracing::warn!(error = %e, "could not start the fires waiting for their targets; trying again");
    }
    let pipelines = ctx.db.settle_pipelines().await;
    if let Err(e) = &pipelines {
        tracing::warn!(error = %e, "could not move the waiting pipeline runs on; trying again");
    }
    fires.is_ok() && pipelines.is_ok()
}
