//! The change feed: one typed stream of what other processes changed in the database, for the API's live events
//! and the daemon's wake-ups alike. PostgreSQL notifies (`LISTEN`, reconnected when it drops); SQLite cannot,
//! so it is watched (see the database layer's `feed` for how). Either way a subscriber sees [`Change`]s, and a
//! [`Change::Resync`] whenever changes may have been missed, the first connection included: read everything
//! then.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use notify::RecommendedWatcher;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::{
    Change, Database, DbError,
    db::{
        Pool,
        feed::{self, EVENTS_CHANNEL, QUEUE_CHANNEL, Sink},
        pooler::FeedSource,
    },
};

/// How often a daemon behind a pooler without a direct LISTEN URL looks at the queue: the latency of a claim
/// and of a cancellation there, for one cheap indexed query per daemon each time.
const POOLED_QUEUE_POLL: Duration = Duration::from_secs(1);

/// What a subscriber wants to hear about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// What a daemon acts on: run requests ([`Change::Requested`]), cancellations of running runs
    /// ([`Change::Cancel`]) and daemon rows ([`Change::Daemon`]); on SQLite, [`Change::Written`] instead.
    Queue,
    /// What a panel shows: every change of a run, a queue measurement, a daemon or an override. On SQLite (and
    /// on PostgreSQL behind a pooler with no direct LISTEN URL) the database is looked at every `sqlite_poll`
    /// (`api.events_poll_ms`).
    Events {
        /// How often SQLite is polled for changes.
        sqlite_poll: Duration,
    },
}

/// A running change feed. It owns its task (and, on SQLite, its file watcher): dropping the feed stops both.
#[derive(Debug)]
pub struct ChangeFeed {
    rx: mpsc::Receiver<Change>,
    live: Arc<AtomicBool>,
    _task: AbortOnDropHandle<()>,
    _watcher: Option<RecommendedWatcher>,
}

impl ChangeFeed {
    /// The next change; `None` only if the feed's task ended.
    pub async fn next(&mut self) -> Option<Change> {
        self.rx.recv().await
    }

    /// The next change if one is waiting.
    pub fn try_next(&mut self) -> Option<Change> {
        self.rx.try_recv().ok()
    }

    /// Whether changes are flowing: false while PostgreSQL's listener reconnects (polling is then all there is).
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }
}

impl Database {
    /// Starts a change feed of `topic` on a connection of its own.
    pub fn changes(&self, topic: Topic) -> Result<ChangeFeed, DbError> {
        let (tx, rx) = mpsc::channel(1024);
        let live = Arc::new(AtomicBool::new(false));
        let sink = Sink { tx, live: live.clone() };
        let (task, watcher) = match (self.pool(), self.feed_source(), topic) {
            (Pool::Postgres(_), FeedSource::Listen(pool), Topic::Queue) => {
                (tokio::spawn(feed::listen(pool.clone(), QUEUE_CHANNEL, sink)), None)
            }
            (Pool::Postgres(_), FeedSource::Listen(pool), Topic::Events { .. }) => {
                (tokio::spawn(feed::listen(pool.clone(), EVENTS_CHANNEL, sink)), None)
            }
            // Behind a pooler with no direct URL (see `Database::feed_polled`): the daemon looks at the queue
            // every `POOLED_QUEUE_POLL`, as if something had been written; live events compare snapshots.
            (Pool::Postgres(_), FeedSource::Poll, Topic::Queue) => {
                (tokio::spawn(feed::tick(POOLED_QUEUE_POLL, sink)), None)
            }
            (Pool::Postgres(_), FeedSource::Poll, Topic::Events { sqlite_poll }) => {
                (tokio::spawn(feed::poll(self.clone(), sqlite_poll, sink)), None)
            }
            (Pool::Sqlite(_), _, Topic::Queue) => {
                let (watcher, task) = feed::watch(self, sink)?;
                (task, Some(watcher))
            }
            (Pool::Sqlite(_), _, Topic::Events { sqlite_poll }) => {
                (tokio::spawn(feed::poll(self.clone(), sqlite_poll, sink)), None)
            }
        };
        Ok(ChangeFeed { rx, live, _task: AbortOnDropHandle::new(task), _watcher: watcher })
    }
}
