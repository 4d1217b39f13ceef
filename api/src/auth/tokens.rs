//! The background task that keeps this process's map of service tokens current: it re-reads them every
//! [`REFRESH_EVERY`] and writes the uses it counted every [`FLUSH_EVERY`], until the process shuts down. Why a map
//! refreshed by polling rather than a database read per request is argued in `scrinalia_shared::tokens`.

use std::time::Instant;

use scrinalia_shared::tokens::{FLUSH_EVERY, REFRESH_EVERY};

use crate::state::AppState;

/// Refreshes the map and flushes the uses until the shutdown token is cancelled; flushes once more on the way out.
pub fn refresh_task(state: &AppState) -> impl Future<Output = ()> + Send + 'static {
    let state = state.clone();
    async move {
        let stop = state.shutdown_token().clone();
        let map = state.auth().tokens();
        let mut tick = tokio::time::interval(REFRESH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut flushed = Instant::now();
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            match map.refresh(state.db()).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("service tokens read again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot read the service tokens; retrying every 250 ms");
                }
                Err(_) => {}
            }
            if flushed.elapsed() >= FLUSH_EVERY {
                flushed = Instant::now();
                if let Err(e) = map.flush_uses(state.db()).await {
                    tracing::debug!(error = %e, "cannot record the service tokens' uses; kept for the next flush");
                }
            }
        }
        if let Err(e) = map.flush_uses(state.db()).await {
            tracing::debug!(error = %e, "cannot record the service tokens' last uses at shutdown");
        }
    }
}
