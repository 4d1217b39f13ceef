//! Continuous recovery, on every daemon: runs whose lease expired become `interrupted` (their supervisor has
//! already killed them, before the lease ended), and daemons whose heartbeat is too old are marked gone. A
//! live run of a sibling is never touched: the database only moves rows whose lease is over.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::Context;

/// How long after a lease's expiry (database clock) the sweep aimed at it comes.
const AFTER_EXPIRY: Duration = Duration::from_millis(20);
/// The shortest wait between sweeps (a run whose expired lease could not be taken yet is not polled in a loop).
const MIN_WAIT: Duration = Duration::from_millis(100);

/// Sweeps at start, then about every third of the lease (with jitter, so daemons do not sweep in step), and as
/// soon as the first lease of a running run expires when that comes earlier: a dead daemon's run is interrupted
/// right after its lease ends, not up to a period later (a renewed lease ends a full lease after its renewal, so
/// live runs never bring the sweep forward). Each sweep first asks, in one statement, whether anything is to be
/// done: an idle daemon's sweep is that one statement.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let period = ctx.settings.daemon.lease() / 3;
    let gone_after = Duration::from_secs(ctx.settings.daemon.gone_after_seconds);
    loop {
        let mut wait = period.mul_f64(rand::random_range(0.8..1.2));
        match ctx.db.recovery_due(gone_after).await {
            Ok(due) => {
                let expired = due.next_lease_expiry == Some(Duration::ZERO);
                if expired {
                    recover(&ctx).await;
                    // More may have expired meanwhile, and the next expiry is not known: ask again soon.
                    wait = MIN_WAIT;
                } else if let Some(expiry) = due.next_lease_expiry {
                    wait = wait.min((expiry + AFTER_EXPIRY).max(MIN_WAIT));
                }
                if due.daemons_gone {
                    mark_gone(&ctx, gone_after).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read whether recovery is due"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

async fn recover(ctx: &Context) {
    match ctx.db.recover_expired().await {
        Ok(runs) => {
            for run in runs {
                let owner = run.daemon_id.map(|d| d.to_string()).unwrap_or_default();
                let reason = run.error.unwrap_or_default();
                tracing::warn!(run_id = %run.id, worker = %run.worker, owner = %owner, %reason, "recovered a run whose lease expired: interrupted");
                ctx.metrics.run_recovered(&run.worker);
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not recover expired runs"),
    }
}

async fn mark_gone(ctx: &Context, gone_after: Duration) {
    match ctx.db.mark_gone_daemons(gone_after).await {
        Ok(gone) => {
            for id in gone {
                tracing::warn!(gone_daemon = %id, after_s = gone_after.as_secs(), "marked a daemon gone: no heartbeat");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not mark gone daemons"),
    }
}
