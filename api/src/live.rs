//! Live events: one change feed per process (`Topic::Events`), fanned out to every SSE client through a
//! broadcast channel, so that every API process hears every change whoever made it. Each change is serialised
//! once, here, from the typed [`Change`]: both backends send the same text. The same feed tells the service
//! tokens' refresher when to read them again ([`Change::Tokens`], and every resync), which is why no client
//! ever sees a `tokens` event: it is the process's own business.

use std::sync::{Arc, OnceLock};

use scrinalia_shared::{
    ApiStore, Change,
    changes::{ChangeFeed, Listening, Topic},
};
use tokio::sync::{Notify, broadcast, watch};
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

/// The fan-out of this process's live events: the broadcast its clients subscribe to, whether the feed hears
/// every change yet, and whether it hears notifications right now.
#[derive(Debug)]
pub struct Live {
    events: broadcast::Sender<LiveEvent>,
    ready: watch::Sender<bool>,
    /// Set once the feed is started.
    listening: OnceLock<Listening>,
}

impl Default for Live {
    fn default() -> Self {
        Self { events: broadcast::channel(1024).0, ready: watch::channel(false).0, listening: OnceLock::new() }
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

    /// Whether the feed is connected with `LISTEN` right now, so that a [`Change::Tokens`] would reach this process
    /// (see [`Listening::now`]); false until the feed is started.
    pub fn listening(&self) -> bool {
        self.listening.get().is_some_and(Listening::now)
    }

    /// Sends an event to every subscriber (none is not an error: nobody is watching).
    pub fn publish(&self, event: LiveEvent) {
        let _ = self.events.send(event);
    }

    /// Relays `db`'s change feed of `topic` to the subscribers until `stop` is cancelled, and notifies `tokens`
    /// when the service tokens changed or may have.
    pub async fn relay_until(&self, db: ApiStore, topic: Topic, tokens: Arc<Notify>, stop: CancellationToken) {
        tokio::select! {
            () = stop.cancelled() => {}
            () = self.relay(db, topic, &tokens) => {}
        }
        tracing::debug!("live events: stopped");
    }

    async fn relay(&self, db: ApiStore, topic: Topic, tokens: &Notify) {
        let mut feed: ChangeFeed = loop {
            match db.changes(topic) {
                Ok(feed) => break feed,
                Err(e) => {
                    tracing::warn!(error = %e, "live events: cannot start the change feed; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        };
        // Until now the token refresher could not ask the feed, so it polled.
        let _ = self.listening.set(feed.listening());
        let mut first = true;
        while let Some(change) = feed.next().await {
            db.forget_resolved(&change);
            match change {
                Change::Tokens => {
                    tokens.notify_one();
                    continue;
                }
                // Changes of the tokens may have been missed. At the first connection too: the refresher polled
                // until then, but its last read may predate a change made just before the LISTEN.
                Change::Resync { .. } => tokens.notify_one(),
                _ => {}
            }
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
