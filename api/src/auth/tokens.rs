//! The background task that keeps this process's map of service tokens current, until the process shuts down: it
//! re-reads them when the live relay says they changed (a `tokens` notification, or a resync of the feed), every
//! [`REFRESH_EVERY`] while no notification could reach it or its reads fail, and otherwise every
//! [`FALLBACK_EVERY`] (`read_due`); it writes the uses it counted every [`FLUSH_EVERY`] (nothing when no token was
//! used). Why a map, and why kept current this way, is argued in `scrinalia_shared::tokens`.

use std::time::Instant;

use scrinalia_shared::tokens::{FALLBACK_EVERY, FLUSH_EVERY, REFRESH_EVERY, read_due};

use crate::state::AppState;

/// Refreshes the map and flushes the uses until the shutdown token is cancelled; flushes once more on the way out.
pub fn refresh_task(state: &AppState) -> impl Future<Output = ()> + Send + 'static {
    let state = state.clone();
    async move {
        let stop = state.shutdown_token().clone();
        let map = state.auth().tokens();
        let changed = state.auth().tokens_changed().clone();
        // The tick costs no statement: it is when the task looks at whether a read is due and at the uses.
        let mut tick = tokio::time::interval(REFRESH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut flushed = Instant::now();
        // The process read the tokens before it started serving.
        let mut read_at = Instant::now();
        let mut listened = false;
        loop {
            let woken = tokio::select! {
                () = stop.cancelled() => break,
                () = changed.notified() => true,
                _ = tick.tick() => false,
            };
            let listening = state.live().listening();
            // Once per change of mode (a connection, a reconnection), not per read: the operator's evidence of
            // which one an idle process is in.
            if listening != listened {
                listened = listening;
                if listening {
                    tracing::info!(
                        fallback_s = FALLBACK_EVERY.as_secs(),
                        "service tokens: re-read when the change feed says they changed"
                    );
                } else {
                    tracing::info!(
                        every_ms = REFRESH_EVERY.as_millis(),
                        "service tokens: re-read by polling until the change feed listens again"
                    );
                }
            }
            let failing = map.is_failing();
            if read_due(woken, failing, listening, read_at.elapsed()) {
                read_at = Instant::now();
                match map.refresh(state.db()).await {
                    Ok(()) if failing => tracing::info!("service tokens read again"),
                    Ok(()) => {}
                    Err(e) if !failing => tracing::warn!(error = %e, retry_ms = REFRESH_EVERY.as_millis(),
                        "cannot read the service tokens; retrying"),
                    Err(_) => {}
                }
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
