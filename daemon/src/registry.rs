//! The daemon's row in the registry: registered at start with a fresh id, kept alive by heartbeats (registered
//! again if the row disappeared), and the way an operator drains the daemon through the database.

use std::sync::Arc;

use scrinalia_shared::{Daemon, DaemonState, DbError, daemons::NewDaemon};
use tokio::{sync::Notify, time::MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::Context;

/// Inserts this daemon's row.
pub async fn register(ctx: &Context) -> Result<Daemon, DbError> {
    let host = crate::host_name();
    let daemon = NewDaemon {
        id: ctx.daemon_id,
        host,
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        version: scrinalia_shared::VERSION.to_owned(),
        capacity: i32::try_from(ctx.settings.daemon.capacity).unwrap_or(i32::MAX),
        workers: ctx.settings.daemon.workers.clone(),
        labels: ctx.placement.labels().iter().cloned().collect(),
        limits: ctx.cgroups.limits(),
        resources: ctx
            .settings
            .daemon
            .resources
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| (r.clone(), *n))
            .collect(),
    };
    ctx.db.register_daemon(&daemon).await
}

/// Sends a heartbeat every `daemon.heartbeat_seconds` (or at once when `now` is notified) until `stop`;
/// cancels `drain` when the row says the daemon was asked to drain.
pub async fn heartbeats(ctx: Arc<Context>, stop: CancellationToken, drain: CancellationToken, now: Arc<Notify>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(ctx.settings.daemon.heartbeat_seconds));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
            () = now.notified() => {}
        }
        match ctx.db.heartbeat(ctx.daemon_id).await {
            Ok(Some(row)) if row.state == DaemonState::Draining && !drain.is_cancelled() => {
                let by = row.drain_requested_by.unwrap_or_default();
                tracing::info!(requested_by = %by, "drain requested through the database: claiming stops, runs in flight finish");
                drain.cancel();
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!("this daemon's registry row is gone; registering again");
                if let Err(e) = register(&ctx).await {
                    tracing::warn!(error = %e, "could not register again");
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}
