//! What wakes the main loop besides its slow poll. PostgreSQL: `LISTEN scrinalia_queue` on a connection of its
//! own (the migration's triggers notify every request, every cancellation of a running run and every daemon
//! state change), reconnected when it drops; the main loop's claims are sent on that same connection while it
//! is up, because its backend has just been woken to deliver the request's notification (see `QueueListener`).
//! SQLite: inotify on the database file and its `-wal`, which costs no query at all while nothing is written;
//! the daemon's own periodic writes (heartbeats, queue counts) are recognised and do not wake it.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use scrinalia_shared::{
    Database,
    db::{self, QueueListener, Run},
};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
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
    /// PostgreSQL: claims to send on the listening connection.
    pub claims: Option<ListenerClaims>,
    /// Keeps the SQLite file watcher alive.
    _watcher: Option<RecommendedWatcher>,
}

/// What a claim on the listening connection needs besides its size.
#[derive(Debug, Clone)]
pub struct ClaimParams {
    /// Who claims.
    pub daemon_id: Uuid,
    /// The lease each claimed run gets.
    pub lease: Duration,
    /// The workers this daemon takes; `None` for all.
    pub workers: Option<Vec<String>>,
}

/// One claim asked of the listener task; the answer is dropped unsent when the listener is not connected.
struct ClaimOrder {
    limit: u32,
    reply: oneshot::Sender<db::Result<Vec<Run>>>,
}

/// Sends claims to the listener task.
#[derive(Clone)]
pub struct ListenerClaims {
    orders: mpsc::Sender<ClaimOrder>,
    live: Arc<AtomicBool>,
}

impl ListenerClaims {
    /// Claims up to `limit` requests on the listening connection. `None` when it is not connected or was lost
    /// before answering: the caller claims on its own connection instead.
    pub async fn claim(&self, limit: u32) -> Option<db::Result<Vec<Run>>> {
        if !self.live.load(Ordering::Relaxed) {
            return None;
        }
        let (reply, answer) = oneshot::channel();
        self.orders.send(ClaimOrder { limit, reply }).await.ok()?;
        answer.await.ok()
    }
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
    claim: ClaimParams,
    stop: CancellationToken,
    tasks: &mut tokio::task::JoinSet<()>,
) -> anyhow::Result<Wakeups> {
    let (tx, rx) = mpsc::channel(256);
    let live = Arc::new(AtomicBool::new(false));
    let (claims, watcher) = match db {
        Database::Postgres(_) => {
            let (orders, inbox) = mpsc::channel(1);
            let listener = Listener { db: db.clone(), tx, live: live.clone(), inbox, claim };
            tasks.spawn(listener.run(stop).in_current_span());
            (Some(ListenerClaims { orders, live: live.clone() }), None)
        }
        Database::Sqlite(pool) => {
            live.store(true, Ordering::Relaxed);
            (None, Some(watch_files(pool.connect_options().get_filename(), own, tx)?))
        }
    };
    Ok(Wakeups { rx, live, claims, _watcher: watcher })
}

#[derive(Deserialize)]
struct Notification {
    kind: String,
    run: Option<Uuid>,
    daemon: Option<Uuid>,
}

/// The PostgreSQL listener task.
struct Listener {
    db: Database,
    tx: mpsc::Sender<Wake>,
    live: Arc<AtomicBool>,
    inbox: mpsc::Receiver<ClaimOrder>,
    claim: ClaimParams,
}

impl Listener {
    /// Listens until `stop`, reconnecting with backoff; every (re)connection is announced, since notifications
    /// sent meanwhile are lost.
    async fn run(mut self, stop: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let connected = tokio::select! {
                () = stop.cancelled() => return,
                never = refuse_orders(&mut self.inbox) => match never {},
                connected = self.db.queue_listener(QUEUE_CHANNEL) => connected,
            };
            match connected {
                Ok(Some(mut listener)) => {
                    self.live.store(true, Ordering::Relaxed);
                    backoff = Duration::from_millis(100);
                    let _ = self.tx.send(Wake::Reconnected).await;
                    let ended = tokio::select! {
                        () = stop.cancelled() => return,
                        ended = self.serve(&mut listener) => ended,
                    };
                    self.live.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %ended, "the notification connection dropped; reconnecting (polling meanwhile)");
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not listen for notifications; retrying (polling meanwhile)")
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                never = refuse_orders(&mut self.inbox) => match never {},
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Forwards notifications and answers claim orders until the connection fails.
    async fn serve(&mut self, listener: &mut QueueListener) -> String {
        loop {
            tokio::select! {
                // A claim first: it is what a notification just asked for.
                biased;
                Some(order) = self.inbox.recv() => {
                    let claim = &self.claim;
                    let claimed = listener.claim_runs(claim.daemon_id, claim.lease, order.limit, claim.workers.as_deref()).await;
                    let lost = match &claimed {
                        Err(e) if e.is_connection_lost() => Some(e.to_string()),
                        _ => None,
                    };
                    let _ = order.reply.send(claimed);
                    if let Some(lost) = lost {
                        return lost;
                    }
                }
                received = listener.recv() => match received {
                    Ok(Some(payload)) => self.relay(&payload).await,
                    Ok(None) => return "the connection was lost".to_owned(),
                    Err(e) => return e.to_string(),
                },
            }
        }
    }

    async fn relay(&self, payload: &str) {
        let Ok(parsed) = serde_json::from_str::<Notification>(payload) else { return };
        match (parsed.kind.as_str(), parsed.run, parsed.daemon) {
            // A full channel already holds a wake-up that will look at the queue.
            ("requested", _, _) => {
                let _ = self.tx.try_send(Wake::Requested);
            }
            ("cancel", Some(run), _) => {
                let _ = self.tx.send(Wake::Cancel(run)).await;
            }
            ("daemon", _, Some(daemon)) => {
                let _ = self.tx.send(Wake::Daemon(daemon)).await;
            }
            _ => {}
        }
    }
}

/// While there is no listening connection, claim orders are dropped unanswered: the main loop then claims on its
/// own connection.
async fn refuse_orders(inbox: &mut mpsc::Receiver<ClaimOrder>) -> std::convert::Infallible {
    loop {
        match inbox.recv().await {
            Some(order) => drop(order),
            None => return std::future::pending().await,
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
