//! Live events: one change feed per process (`Topic::Events`), fanned out to every SSE client through a
//! broadcast channel, so that every API process hears every change whoever made it. Each change is serialised
//! once, here, from the typed [`Change`]: both backends send the same text.

use std::sync::Arc;

use scrinalia_shared::{
    ApiStore, Change,
    changes::{ChangeFeed, Topic},
};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// One change as sent to SSE clients: `kind` is the event's name, `data` its JSON payload.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// The change's kind ([`Change::kind`]).
    pub kind: &'static str,
    /// The change as JSON.
    pub data: Arc<str>,
}

impl LiveEvent {
    /// The event of `change`.
    pub fn of(change: &Change) -> Self {
        let data = serde_json::to_string(change).unwrap_or_else(|_| format!("{{\"kind\":\"{}\"}}", change.kind()));
        Self { kind: change.kind(), data: Arc::from(data) }
    }
}

/// The fan-out of this process's live events: the broadcast its clients subscribe to, and whether the feed
/// hears every change yet.
#[derive(Debug)]
pub struct Live {
    events: broadcast::Sender<LiveEvent>,
    ready: watch::Sender<bool>,
}

impl Default for Live {
    fn default() -> Self {
        Self { events: broadcast::channel(1024).0, ready: watch::channel(false).0 }
    }
}

impl Live {
    /// A new subscription; events published from now on reach it.
    pub fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.events.subscribe()
    }

    /// Waits until the feed hears every change (or `stop` is cancelled).
    pub async fn wait_ready(&self, stop: &CancellationToken) {
        let mut ready = self.ready.subscribe();
        tokio::select! {
            _ = ready.wait_for(|r| *r) => {}
            () = stop.cancelled() => {}
        }
    }

    /// Sends an event to every subscriber (none is not an error: nobody is watching).
    pub fn publish(&self, event: LiveEvent) {
        let _ = self.events.send(event);
    }

    /// Relays `db`'s change feed of `topic` to the subscribers until `stop` is cancelled.
    pub async fn relay_until(&self, db: ApiStore, topic: Topic, stop: CancellationToken) {
        tokio::select! {
            () = stop.cancelled() => {}
            () = self.relay(db, topic) => {}
        }
        tracing::debug!("live events: stopped");
    }

    async fn relay(&self, db: ApiStore, topic: Topic) {
        let mut feed: ChangeFeed = loop {
            match db.changes(topic) {
                Ok(feed) => break feed,
                Err(e) => {
                    tracing::warn!(error = %e, "live events: cannot start the change feed; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        };
        let mut first = true;
        while let Some(change) = feed.next().await {
            db.forget_resolved(&change);
            // The first resync only says that the feed is listening: nothing can have been missed before it,
            // since no client was told the stream is ready yet.
            if first && matches!(change, Change::Resync { .. }) {
                first = false;
                self.ready.send_replace(true);
                continue;
            }
            self.publish(LiveEvent::of(&change));
        }
    }
}
