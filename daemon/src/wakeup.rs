//! What wakes the main loop besides its slow poll. PostgreSQL: `LISTEN scrinalia_queue` on a connection of its
//! own (the migration's triggers notify every request, every cancellation of a running run and every daemon
//! state change), reconnected when it drops. SQLite: inotify on the database file and its `-wal`, which costs no
//! query at all while nothing is written; the daemon's own periodic writes (heartbeats, queue counts) are
//! recognised and do not wake it.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use scrinalia_shared::Database;
use serde::Deserialize;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

/// The channel the triggers notify.
pub const QUEUE_CHANNEL: &str = "scrinalia_queue";

/// A reason to look at the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A run was requested.
    Requested,
    /// Someone asked to cancel this running run.
    Cancel(Uuid),
    /// This daemon's registry row changed (e.g. a drain request).
    Daemon(Uuid),
    /// SQLite: the database files changed.
    Changed,
    /// The notification connection was (re)established: notifications may have been missed.
    Reconnected,
}

/// The receiving end, and whether wake-ups are currently flowing.
pub struct Wakeups {
    /// Wake-ups, in order.
    pub rx: mpsc::Receiver<Wake>,
    /// False while the PostgreSQL listener is reconnecting (the slow poll is then all there is).
    pub live: Arc<AtomicBool>,
    /// Keeps the SQLite file watcher alive.
    _watcher: Option<RecommendedWatcher>,
}

/// File changes this long after one of the daemon's own writes are taken to be that write's.
const OWN_WRITE_ECHO: Duration = Duration::from_millis(5);

/// The daemon's own periodic writes, so that on SQLite they do not wake the daemon itself (which would cost a
/// claim query after every heartbeat). A request written at the same moment is then seen by the next wake-up
/// or the slow poll.
#[derive(Debug, Clone, Default)]
pub struct OwnWrites(Arc<Mutex<(u32, Option<Instant>)>>);

impl OwnWrites {
    /// Marks a write in progress until the guard is dropped.
    pub fn begin(&self) -> OwnWrite<'_> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
        OwnWrite(self)
    }

    /// Whether a file change now is the echo of one of our writes.
    fn echoing(&self) -> bool {
        let (in_flight, last_end) = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        in_flight > 0 || last_end.is_some_and(|end| end.elapsed() < OWN_WRITE_ECHO)
    }
}

/// A write of the daemon's own in progress.
pub struct OwnWrite<'a>(&'a OwnWrites);

impl Drop for OwnWrite<'_> {
    fn drop(&mut self) {
        let mut state = self.0.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        state.1 = Some(Instant::now());
    }
}

/// Starts the wake-up source of the database's backend; it stops when `stop` is cancelled.
pub fn start(
    db: &Database,
    own: OwnWrites,
    stop: CancellationToken,
    tasks: &mut tokio::task::JoinSet<()>,
) -> anyhow::Result<Wakeups> {
    let (tx, rx) = mpsc::channel(256);
    let live = Arc::new(AtomicBool::new(false));
    let watcher = match db {
        Database::Postgres(pool) => {
            tasks.spawn(listen(pool.clone(), tx, live.clone(), stop).in_current_span());
            None
        }
        Database::Sqlite(pool) => {
            live.store(true, Ordering::Relaxed);
            Some(watch_files(pool.connect_options().get_filename(), own, tx)?)
        }
    };
    Ok(Wakeups { rx, live, _watcher: watcher })
}

#[derive(Deserialize)]
struct Notification {
    kind: String,
    run: Option<Uuid>,
    daemon: Option<Uuid>,
}

/// Listens until `stop`, reconnecting with backoff; every (re)connection is announced, since notifications
/// sent meanwhile are lost.
async fn listen(pool: PgPool, tx: mpsc::Sender<Wake>, live: Arc<AtomicBool>, stop: CancellationToken) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            connected = connect(&pool) => connected,
        };
        match connected {
            Ok(mut listener) => {
                live.store(true, Ordering::Relaxed);
                backoff = Duration::from_millis(100);
                let _ = tx.send(Wake::Reconnected).await;
                let ended = tokio::select! {
                    () = stop.cancelled() => return,
                    ended = relay(&mut listener, &tx) => ended,
                };
                live.store(false, Ordering::Relaxed);
                tracing::warn!(error = %ended, "the notification connection dropped; reconnecting (polling meanwhile)");
            }
            Err(e) => tracing::warn!(error = %e, "could not listen for notifications; retrying (polling meanwhile)"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn connect(pool: &PgPool) -> sqlx::Result<PgListener> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(QUEUE_CHANNEL).await?;
    Ok(listener)
}

/// Forwards notifications until the connection fails.
async fn relay(listener: &mut PgListener, tx: &mpsc::Sender<Wake>) -> String {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let Ok(parsed) = serde_json::from_str::<Notification>(notification.payload()) else { continue };
                match (parsed.kind.as_str(), parsed.run, parsed.daemon) {
                    // A full channel already holds a wake-up that will look at the queue.
                    ("requested", _, _) => {
                        let _ = tx.try_send(Wake::Requested);
                    }
                    ("cancel", Some(run), _) => {
                        let _ = tx.send(Wake::Cancel(run)).await;
                    }
                    ("daemon", _, Some(daemon)) => {
                        let _ = tx.send(Wake::Daemon(daemon)).await;
                    }
                    _ => {}
                }
            }
            // The listener reconnected by itself; anything sent in between was missed.
            Ok(None) => {
                tracing::warn!("the notification connection dropped and was re-established; catching up");
                let _ = tx.send(Wake::Reconnected).await;
            }
            Err(e) => return e.to_string(),
        }
    }
}

/// Watches the folder of the SQLite file for writes to the file or its write-ahead log (the folder, because the
/// `-wal` file comes and goes).
fn watch_files(db_file: &Path, own: OwnWrites, tx: mpsc::Sender<Wake>) -> anyhow::Result<RecommendedWatcher> {
    let folder = db_file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = db_file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let watched: [PathBuf; 2] = [PathBuf::from(&name), PathBuf::from(format!("{name}-wal"))];
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let written = matches!(event.kind, EventKind::Modify(_) | EventKind::Create(_));
        let watched_file = || event.paths.iter().any(|p| p.file_name().is_some_and(|n| watched.iter().any(|w| w == n)));
        if written && watched_file() && !own.echoing() {
            let _ = tx.try_send(Wake::Changed);
        }
    })?;
    watcher.watch(folder, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
