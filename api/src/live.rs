//! Live events: one listener per process, fanned out to every SSE client through a broadcast channel.
//!
//! On PostgreSQL the listener is a `LISTEN scrinalia_events` connection: the migration's triggers send a JSON
//! payload in the same transaction as each change, so every API process hears every change whoever made it. On
//! SQLite, which cannot notify, a dedicated connection polls `PRAGMA data_version` (it changes when any other
//! connection commits) and, on a change, compares a snapshot of the runs in flight, the last finished runs,
//! the queue measurements, the daemons and the newest override change of each worker with the previous one, and
//! sends the same payloads.

use std::{collections::HashMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use scrinalia_shared::{Database, db::RunState};
use serde_json::{Value, json};
use sqlx::postgres::PgListener;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::state::AppState;

/// The channel the migration's triggers notify.
pub const CHANNEL: &str = "scrinalia_events";

/// How long to wait before connecting again after the listener's connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// One change, as sent to SSE clients: `kind` is the SSE event name, `data` a JSON object such as
/// `{"kind":"run","run":"…","worker":"…","state":"running"}`.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// `run` (`run`, `worker`, `state`), `queue` (`worker`), `daemon` (`daemon`, `state`), `override` (`worker`,
    /// `actor`, `action`: `set` or `clear`; an operator changed the worker's override), or `resync` (`reason`;
    /// changes may have been missed: read everything again).
    pub kind: String,
    /// The JSON payload.
    pub data: Arc<str>,
}

impl LiveEvent {
    /// An event from a JSON payload; its `kind` field names it. The payload is re-serialised compactly, so
    /// that both backends send the same text.
    pub fn from_payload(payload: &str) -> Self {
        match serde_json::from_str::<Value>(payload) {
            Ok(value) => {
                let kind = value.get("kind").and_then(Value::as_str).unwrap_or("change").to_owned();
                Self { kind, data: Arc::from(value.to_string()) }
            }
            Err(_) => Self { kind: "change".to_owned(), data: Arc::from(payload) },
        }
    }

    /// Tells clients that changes may have been missed.
    pub fn resync(reason: &str) -> Self {
        Self::from_payload(&json!({ "kind": "resync", "reason": reason }).to_string())
    }
}

/// Starts this process's listener; it stops when the state's shutdown token is cancelled.
pub fn spawn(state: AppState) -> JoinHandle<()> {
    tokio::spawn(async move {
        let token = state.shutdown_token().clone();
        tokio::select! {
            () = token.cancelled() => {}
            () = run(&state) => {}
        }
        tracing::debug!("live-event listener stopped");
    })
}

async fn run(state: &AppState) {
    match state.db() {
        Database::Postgres(pool) => listen_postgres(state, pool).await,
        Database::Sqlite(_) => poll_sqlite(state).await,
    }
}

fn publish(state: &AppState, event: LiveEvent) {
    // No receiver is not an error: nobody is watching.
    let _ = state.events().send(event);
}

async fn listen_postgres(state: &AppState, pool: &sqlx::PgPool) {
    let mut first = true;
    loop {
        let mut listener = match PgListener::connect_with(pool).await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(error = %e, "live events: cannot connect, retrying");
                tokio::time::sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(CHANNEL).await {
            tracing::warn!(error = %e, "live events: cannot LISTEN, retrying");
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        }
        tracing::info!(channel = CHANNEL, "live events: listening");
        state.live_ready().send_replace(true);
        if !first {
            publish(state, LiveEvent::resync("the API reconnected to the database"));
        }
        first = false;
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => publish(state, LiveEvent::from_payload(notification.payload())),
                Ok(None) => {
                    tracing::warn!("live events: connection lost, reconnecting");
                    publish(state, LiveEvent::resync("the API lost its database connection"));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "live events: listener failed, reconnecting");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    break;
                }
            }
        }
    }
}

async fn poll_sqlite(state: &AppState) {
    let db = state.db();
    let mut ticker = tokio::time::interval(Duration::from_millis(state.settings().api.events_poll_ms.max(50)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watcher = None;
    let mut last_version = None;
    let mut snapshot: Option<Snapshot> = None;
    loop {
        ticker.tick().await;
        if watcher.is_none() {
            match db.change_watcher().await {
                Ok(w) => watcher = w,
                Err(e) => tracing::warn!(error = %e, "live events: cannot open the change watcher"),
            }
        }
        let Some(w) = watcher.as_mut() else { continue };
        match w.version().await {
            Ok(v) if Some(v) == last_version => continue,
            Ok(v) => last_version = Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "live events: cannot poll for changes");
                watcher = None;
                continue;
            }
        }
        match Snapshot::read(state).await {
            Ok(next) => {
                if let Some(previous) = &snapshot {
                    for event in previous.changes_to(&next, state).await {
                        publish(state, event);
                    }
                }
                if snapshot.is_none() {
                    tracing::info!(poll_ms = state.settings().api.events_poll_ms, "live events: polling SQLite");
                    state.live_ready().send_replace(true);
                }
                snapshot = Some(next);
            }
            Err(e) => tracing::warn!(error = %e, "live events: cannot read the snapshot"),
        }
    }
}

/// What the SQLite poller compares between two changes.
#[derive(Debug, Default)]
struct Snapshot {
    runs: HashMap<Uuid, (String, RunState, Option<Value>)>,
    in_flight: Vec<Uuid>,
    queues: HashMap<String, DateTime<Utc>>,
    daemons: HashMap<Uuid, (String, bool)>,
    /// Each worker's newest audit entry: its id, actor and action. Every change of an override appends exactly one
    /// entry, a clear included, so a new id is a change; the override table alone would not show a clear of a
    /// worker that had no override.
    overrides: HashMap<String, (i64, String, String)>,
}

impl Snapshot {
    async fn read(state: &AppState) -> scrinalia_shared::db::Result<Self> {
        let db = state.db();
        let names: Vec<String> = state.catalogue().workers.iter().map(|w| w.name.clone()).collect();
        let (in_flight, finished, counts, daemons, overrides) = tokio::try_join!(
            db.runs_in_flight(),
            db.last_finished(&names),
            db.queue_counts(),
            db.list_daemons(),
            db.last_override_changes()
        )?;
        let mut snapshot = Self { in_flight: in_flight.iter().map(|r| r.id).collect(), ..Self::default() };
        for run in in_flight.into_iter().chain(finished) {
            snapshot.runs.insert(run.id, (run.worker, run.state, run.progress));
        }
        snapshot.queues = counts.into_iter().map(|c| (c.worker, c.measured_at)).collect();
        snapshot.daemons = daemons
            .into_iter()
            .map(|d| (d.id, (format!("{:?}", d.state).to_lowercase(), d.drain_requested_at.is_some())))
            .collect();
        snapshot.overrides = overrides.into_iter().map(|a| (a.worker, (a.id, a.actor, a.action))).collect();
        Ok(snapshot)
    }

    async fn changes_to(&self, next: &Self, state: &AppState) -> Vec<LiveEvent> {
        let mut events = Vec::new();
        let run_event = |id: &Uuid, worker: &str, run_state: RunState| {
            LiveEvent::from_payload(
                &json!({ "kind": "run", "run": id, "worker": worker, "state": run_state }).to_string(),
            )
        };
        for (id, (worker, run_state, progress)) in &next.runs {
            if self.runs.get(id).is_none_or(|(_, s, p)| s != run_state || p != progress) {
                events.push(run_event(id, worker, *run_state));
            }
        }
        // A run in flight before that is in neither list now ended and was replaced as its worker's last run.
        for id in self.in_flight.iter().filter(|id| !next.runs.contains_key(id)) {
            match state.db().get_run(*id).await {
                Ok(Some(run)) => events.push(run_event(id, &run.worker, run.state)),
                _ => events.push(LiveEvent::resync("a run changed more than once between two polls")),
            }
        }
        for (worker, at) in &next.queues {
            if self.queues.get(worker) != Some(at) {
                events.push(LiveEvent::from_payload(&json!({ "kind": "queue", "worker": worker }).to_string()));
            }
        }
        for (id, (daemon_state, draining)) in &next.daemons {
            if self.daemons.get(id) != Some(&(daemon_state.clone(), *draining)) {
                let payload = json!({ "kind": "daemon", "daemon": id, "state": daemon_state });
                events.push(LiveEvent::from_payload(&payload.to_string()));
            }
        }
        // Several changes of one override between two polls make one event, naming the last: clients re-read the
        // override and its audit trail, which show them all.
        for (worker, (id, actor, action)) in &next.overrides {
            if self.overrides.get(worker).is_none_or(|(seen, _, _)| seen != id) {
                let payload = json!({ "kind": "override", "worker": worker, "actor": actor, "action": action });
                events.push(LiveEvent::from_payload(&payload.to_string()));
            }
        }
        events
    }
}
