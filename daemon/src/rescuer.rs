//! Continuous recovery, on every daemon: runs whose lease expired become `interrupted` (their supervisor has
//! already killed them, before the lease ended), and daemons whose heartbeat is too old are marked gone. A
//! live run of a sibling is never touched: the database only moves rows whose lease is over.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::Context;

/// Sweeps at start, then about every third of the lease (with jitter, so daemons do not sweep in step).
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let period = ctx.settings.daemon.lease() / 3;
    loop {
        sweep(&ctx).await;
        let jittered = period.mul_f64(rand::random_range(0.8..1.2));
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(jittered) => {}
        }
    }
}

async fn sweep(ctx: &Context) {
    match ctx.db.recover_expired().await {
        Ok(runs) => {
            for run in runs {
                let owner = run.daemon_id.map(|d| d.to_string()).unwrap_or_default();
                let reason = run.error.unwrap_or_default();
                tracing::warn!(run_id = %run.id, worker = %run.worker, owner = %owner, %reason, "recovered a run whose lease expired: interrupted");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not recover expired runs"),
    }
    let gone_after = Duration::from_secs(ctx.settings.daemon.gone_after_seconds);
    match ctx.db.mark_gone_daemons(gone_after).await {
        Ok(gone) => {
            for id in gone {
                tracing::warn!(gone_daemon = %id, after_s = gone_after.as_secs(), "marked a daemon gone: no heartbeat");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not mark gone daemons"),
    }
}
