//! The change feed: one typed stream of what other processes changed in the database, for the API's live
//! events and the daemon's wake-ups alike ([`ChangeFeed`]), and how each backend hears about those changes. A
//! subscriber sees [`Change`]s, and a [`Change::Resync`] whenever changes may have been missed, the first
//! connection included: it reads everything then.
//!
//! - PostgreSQL: `LISTEN` on a connection of its own, reconnected with backoff. The migrations' triggers send
//!   a [`Change`] as JSON in the same transaction as the change, so a listener never hears of a row it cannot
//!   read yet. Only there does topic `Events` carry [`Change::Tokens`] (the service tokens changed); whoever
//!   re-reads on it asks [`Listening`] whether the feed hears notifications right now, and polls while not.
//! - SQLite, topic `Events`: a connection of its own polls `PRAGMA data_version`, which changes when any other
//!   connection commits; on a change it compares a snapshot of the runs in flight or just ended, the queue
//!   measurements, the workers' descriptions and readiness, the daemons and the newest override change of each
//!   worker with the previous snapshot.
//! - SQLite, topic `Queue`: inotify on the database file and its `-wal` (no query at all while nothing is
//!   written); after a change, a queued request is looked for every millisecond until one is visible (the writer
//!   may still be syncing its commit: the file changes before the commit can be read) or the change has settled,
//!   then [`Change::Written`] is sent, and once more shortly after in case the first look came too early.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use sqlx::{
    ConnectOptions, SqliteConnection,
    postgres::{PgListener, PgPool},
};
use tokio::{
    sync::mpsc,
    time::{Instant, sleep_until},
};
use tokio_util::task::AbortOnDropHandle;

use scrinalia_wire::Change;

use crate::{
    Database, DbError, Result,
    database::{OwnWrites, Pool},
    pooler::FeedSource,
    runs,
};

mod listening;
mod poll;

pub use listening::Listening;

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
    /// Whether it LISTENs (PostgreSQL with a session for it), rather than polling or watching files.
    listens: bool,
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

    /// Whether it hears notifications right now, as a handle that can be kept apart from the feed.
    pub fn listening(&self) -> Listening {
        Listening::new(self.live.clone(), self.listens)
    }
}

impl Database {
    /// Starts a change feed of `topic` on a connection of its own.
    pub fn changes(&self, topic: Topic) -> Result<ChangeFeed, DbError> {
        let (tx, rx) = mpsc::channel(1024);
        let live = Arc::new(AtomicBool::new(false));
        let sink = Sink { tx, live: live.clone() };
        let listens = matches!((self.pool(), self.feed_source()), (Pool::Postgres(_), FeedSource::Listen(_)));
        let (task, watcher) = match (self.pool(), self.feed_source(), topic) {
            (Pool::Postgres(_), FeedSource::Listen(pool), Topic::Queue) => {
                (tokio::spawn(listen(pool.clone(), QUEUE_CHANNEL, sink)), None)
            }
            (Pool::Postgres(_), FeedSource::Listen(pool), Topic::Events { .. }) => {
                (tokio::spawn(listen(pool.clone(), EVENTS_CHANNEL, sink)), None)
            }
            // Behind a pooler with no direct URL (see `Database::feed_polled`): the daemon looks at the queue
            // every `POOLED_QUEUE_POLL`, as if something had been written; live events compare snapshots.
            (Pool::Postgres(_), FeedSource::Poll, Topic::Queue) => (tokio::spawn(tick(POOLED_QUEUE_POLL, sink)), None),
            (Pool::Postgres(_), FeedSource::Poll, Topic::Events { sqlite_poll }) => {
                (tokio::spawn(poll::poll(self.clone(), sqlite_poll, sink)), None)
            }
            (Pool::Sqlite(_), _, Topic::Queue) => {
                let (watcher, task) = watch(self, sink)?;
                (task, Some(watcher))
            }
            (Pool::Sqlite(_), _, Topic::Events { sqlite_poll }) => {
                (tokio::spawn(poll::poll(self.clone(), sqlite_poll, sink)), None)
            }
        };
        Ok(ChangeFeed { rx, live, listens, _task: AbortOnDropHandle::new(task), _watcher: watcher })
    }
}

/// The PostgreSQL channel of daemons: requests, cancellations of running runs, daemon state changes.
pub(crate) const QUEUE_CHANNEL: &str = "scrinalia_queue";
/// The PostgreSQL channel of live events: every change of a run, a queue measurement, a daemon, an override; and
/// of the service tokens, which only the API's token refresher acts on.
pub(crate) const EVENTS_CHANNEL: &str = "scrinalia_events";

/// After a SQLite file change, the first look comes as soon as a queued request is visible, checked every
/// `PROBE_EVERY`, and at the latest after `SETTLE` (a change that was no request, e.g. a cancellation)…
const SETTLE: Duration = Duration::from_millis(5);
const PROBE_EVERY: Duration = Duration::from_millis(1);
/// …and a second look follows, in case the first came too early.
const SECOND_LOOK: Duration = Duration::from_millis(60);

/// A deadline that never comes, for a timer that is off.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Where a feed sends its changes, and says whether it is live.
pub(crate) struct Sink {
    pub tx: mpsc::Sender<Change>,
    pub live: Arc<AtomicBool>,
}

impl Sink {
    /// Sends a change; `false` when the feed was dropped. Wake-ups that only say "look" are dropped when the
    /// channel is full: it already holds one that will make the subscriber look.
    async fn send(&self, change: Change) -> bool {
        match change {
            Change::Requested { .. } | Change::Written => {
                !matches!(self.tx.try_send(change), Err(mpsc::error::TrySendError::Closed(_)))
            }
            change => self.tx.send(change).await.is_ok(),
        }
    }
}

/// Listens on `channel` until the feed is dropped, reconnecting with backoff. Every connection, the first
/// included, is announced with a [`Change::Resync`]: notifications sent while not listening are lost.
pub(crate) async fn listen(pool: PgPool, channel: &'static str, sink: Sink) {
    let mut backoff = Duration::from_millis(100);
    let mut reason = "the change feed started listening";
    loop {
        match connect(&pool, channel).await {
            Ok(mut listener) => {
                sink.live.store(true, Ordering::Relaxed);
                backoff = Duration::from_millis(100);
                tracing::info!(channel, "change feed: listening");
                if !sink.send(Change::resync(reason)).await {
                    return;
                }
                let ended = relay(&mut listener, &sink).await;
                sink.live.store(false, Ordering::Relaxed);
                match ended {
                    None => return,
                    Some(e) => tracing::warn!(channel, error = %e,
                        "change feed: the notification connection dropped; reconnecting (polling meanwhile)"),
                }
            }
            Err(e) => tracing::warn!(channel, error = %e, "change feed: cannot listen; retrying"),
        }
        reason = "the change feed reconnected to the database";
        tokio::select! {
            () = sink.tx.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn connect(pool: &PgPool, channel: &str) -> sqlx::Result<PgListener> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// Forwards notifications until the connection fails (`Some(why)`) or the feed is dropped (`None`).
async fn relay(listener: &mut PgListener, sink: &Sink) -> Option<String> {
    loop {
        let received = tokio::select! {
            () = sink.tx.closed() => return None,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => match serde_json::from_str::<Change>(notification.payload()) {
                Ok(change) => {
                    if !sink.send(change).await {
                        return None;
                    }
                }
                Err(e) => {
                    tracing::warn!(payload = notification.payload(), error = %e, "change feed: not a change");
                }
            },
            // The connection dropped. The listener would reconnect by itself at the next call, but then nothing
            // would say when it listens again: the feed reconnects itself, and announces the resync after LISTEN.
            Ok(None) => return Some("the server closed the connection".to_owned()),
            Err(e) => return Some(e.to_string()),
        }
    }
}

/// PostgreSQL behind a pooler without a direct URL, topic `Queue`: a resync, then [`Change::Written`] every
/// `every` (the daemon then looks for requests and cancellations) until the feed is dropped.
pub(crate) async fn tick(every: Duration, sink: Sink) {
    sink.live.store(true, Ordering::Relaxed);
    tracing::warn!(
        poll_ms = every.as_millis(),
        warning = super::pooler::POLLED_WARNING,
        "change feed: polling the queue"
    );
    if !sink.send(Change::resync("the change feed started polling")).await {
        return;
    }
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            () = sink.tx.closed() => return,
            _ = ticker.tick() => {}
        }
        if !sink.send(Change::Written).await {
            return;
        }
    }
}

async fn open_watcher(db: &Database) -> Result<SqliteConnection> {
    match db.pool() {
        Pool::Sqlite(pool) => Ok(pool.connect_options().connect().await?),
        Pool::Postgres(_) => Err(sqlx::Error::Configuration("not a SQLite database".into()).into()),
    }
}

/// SQLite, topic `Queue`: watches the database files until the feed is dropped. Returns the watcher, which must
/// be kept alive as long as the task runs.
pub(crate) fn watch(db: &Database, sink: Sink) -> Result<(RecommendedWatcher, tokio::task::JoinHandle<()>)> {
    let Pool::Sqlite(pool) = db.pool() else {
        return Err(sqlx::Error::Configuration("not a SQLite database".into()).into());
    };
    let (raw_tx, raw_rx) = mpsc::channel(1);
    let watcher = watch_files(pool.connect_options().get_filename(), db.own_writes().clone(), raw_tx)
        .map_err(|e| sqlx::Error::Configuration(format!("cannot watch the SQLite files: {e}").into()))?;
    sink.live.store(true, Ordering::Relaxed);
    let task = tokio::spawn(settle(db.clone(), raw_rx, sink));
    Ok((watcher, task))
}

/// Watches the folder of the SQLite file for writes to the file or its write-ahead log (the folder, because the
/// `-wal` file comes and goes); every write that is not the echo of this process's own is one `()`.
fn watch_files(db_file: &Path, own: OwnWrites, tx: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let folder = db_file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = db_file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let watched: [PathBuf; 2] = [PathBuf::from(&name), PathBuf::from(format!("{name}-wal"))];
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let written = matches!(event.kind, EventKind::Modify(_) | EventKind::Create(_));
        let watched_file = || event.paths.iter().any(|p| p.file_name().is_some_and(|n| watched.iter().any(|w| w == n)));
        if written && watched_file() && !own.echoing() {
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(folder, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Turns file changes into `Written` at the right moments (see the module's documentation).
async fn settle(db: Database, mut raw: mpsc::Receiver<()>, sink: Sink) {
    if !sink.send(Change::resync("the change feed started watching the database files")).await {
        return;
    }
    let (mut probe_at, mut look_at, mut second_look_at) = (far(), far(), far());
    let mut watcher: Option<SqliteConnection> = None;
    loop {
        let look = tokio::select! {
            () = sink.tx.closed() => return,
            changed = raw.recv() => {
                if changed.is_none() {
                    return;
                }
                if look_at > Instant::now() + SETTLE {
                    (look_at, probe_at) = (Instant::now() + SETTLE, Instant::now());
                }
                false
            }
            () = sleep_until(probe_at) => {
                probe_at = far();
                if watcher.is_none() {
                    watcher = open_watcher(&db).await.ok();
                }
                let Some(conn) = watcher.as_mut() else { continue };
                match runs::any_queued(conn).await {
                    Ok(true) => true,
                    Ok(false) => {
                        probe_at = Instant::now() + PROBE_EVERY;
                        false
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "the SQLite watcher failed; looking after the settle time");
                        watcher = None;
                        false
                    }
                }
            }
            () = sleep_until(look_at) => true,
            () = sleep_until(second_look_at) => {
                second_look_at = far();
                if !sink.send(Change::Written).await {
                    return;
                }
                false
            }
        };
        if look {
            (probe_at, look_at, second_look_at) = (far(), far(), Instant::now() + SECOND_LOOK);
            if !sink.send(Change::Written).await {
                return;
            }
        }
    }
}
