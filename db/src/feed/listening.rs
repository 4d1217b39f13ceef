//! [`Listening`]: whether a change feed hears PostgreSQL's notifications right now, for a task that does not hold
//! the feed (the API's token refresher, which polls whenever the answer is no).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// Whether a feed hears every notification of its channel right now: a change that only a notification announces
/// (the service tokens', [`scrinalia_wire::Change::Tokens`]) reaches a subscriber only then, so whoever depends on
/// one polls whenever this says no. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Listening {
    /// The feed's own flag: set while its connection listens (or, for a feed that does not listen, while it polls).
    live: Arc<AtomicBool>,
    /// Whether the feed listens at all, rather than polling snapshots or watching files.
    listens: bool,
}

impl Listening {
    pub(super) fn new(live: Arc<AtomicBool>, listens: bool) -> Self {
        Self { live, listens }
    }

    /// True while the feed is connected with `LISTEN`. False before its first connection and while it reconnects
    /// (what is notified meanwhile is lost; its next connection sends a resync), on SQLite, and on PostgreSQL
    /// behind a pooler without `database.listen_url`, where the feed compares snapshots of the tables the panel
    /// shows and so never hears of the rest.
    pub fn now(&self) -> bool {
        self.listens && self.live.load(Ordering::Relaxed)
    }
}
