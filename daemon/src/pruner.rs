//! Retention on every daemon: about every `retention.interval_seconds` (with jitter, so daemons do not look in
//! step) a daemon tries a prune pass; the lease in the database lets one daemon at a time do it, at most once per
//! interval across all of them, so M daemons prune as one does (see `scrinalia_shared::retention`).

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::Context;

/// The longest wait between looks: with a long interval, a daemon still takes over soon after another stops.
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// The first look comes this long after the start, so that a start (a deploy of many daemons) is not slowed.
const FIRST_LOOK: Duration = Duration::from_secs(2);

/// Tries a pass at each look until `stop`; a pass in progress stops between batches.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let settings = &ctx.settings.retention;
    if !settings.enabled {
        tracing::info!("retention is disabled: nothing is pruned by this daemon");
        return;
    }
    let period = settings.interval().min(LONGEST_WAIT);
    let mut wait = FIRST_LOOK.min(period);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = period.mul_f64(rand::random_range(0.8..1.2));
        let started = tokio::time::Instant::now();
        let stopping = || stop.is_cancelled();
        match ctx.db.prune_pass(settings, &ctx.logs, ctx.daemon_id, &stopping).await {
            Ok(Some(c)) => tracing::info!(
                runs = c.runs,
                progress = c.progress,
                daemons = c.daemons,
                logs = c.logs,
                log_failures = c.log_failures,
                took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "retention pass"
            ),
            Ok(None) => tracing::debug!("no retention pass due here: another daemon prunes, or one ended recently"),
            Err(e) => tracing::warn!(error = %e, "the retention pass failed; the next one tries again"),
        }
    }
}
