//! The change feed by polling: SQLite's topic `Events`, and PostgreSQL's behind a pooler with no direct URL. Each
//! look compares a snapshot of what a panel shows with the previous one (SQLite only when `PRAGMA data_version`
//! says another connection committed) and sends a [`Change`] for each difference.

use std::{collections::HashMap, sync::atomic::Ordering, time::Duration};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::SqliteConnection;
use uuid::Uuid;

use scrinalia_wire::{Change, DaemonState, OverrideAction, PipelineState, RunState};

use super::{Sink, open_watcher};
use crate::{
    Database, Result, daemons,
    database::Pool,
    descriptions,
    dialect::{Sql, sql},
    overrides, pipelines, queue_counts, run, runs, schedules,
};

/// SQLite (or PostgreSQL behind a pooler without a direct URL), topic `Events`: polls every `every` until the
/// feed is dropped.
pub(super) async fn poll(db: Database, every: Duration, sink: Sink) {
    let mut ticker = tokio::time::interval(every.max(Duration::from_millis(50)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watcher: Option<SqliteConnection> = None;
    let mut last_version = None;
    let mut snapshot: Option<Snapshot> = None;
    loop {
        tokio::select! {
            () = sink.tx.closed() => return,
            _ = ticker.tick() => {}
        }
        // PostgreSQL (behind a pooler) has no cheap "anything written?": the snapshot is read every time.
        let sqlite = matches!(db.pool(), Pool::Sqlite(_));
        if sqlite && watcher.is_none() {
            match open_watcher(&db).await {
                Ok(conn) => watcher = Some(conn),
                Err(e) => tracing::warn!(error = %e, "change feed: cannot open the SQLite watcher"),
            }
        }
        if sqlite {
            let Some(conn) = watcher.as_mut() else { continue };
            match sqlx::query_scalar::<_, i64>("pragma data_version").fetch_one(&mut *conn).await {
                Ok(v) if Some(v) == last_version => continue,
                Ok(v) => last_version = Some(v),
                Err(e) => {
                    tracing::warn!(error = %e, "change feed: cannot poll SQLite for changes");
                    watcher = None;
                    continue;
                }
            }
        }
        match Snapshot::read(&db, snapshot.as_ref().map(|s| s.read_at)).await {
            Ok(next) => {
                let changes = match &snapshot {
                    Some(previous) => previous.changes_to(&next),
                    None => {
                        match db.feed_polled() {
                            Some(why) => tracing::warn!(
                                poll_ms = every.as_millis(),
                                warning = why,
                                "change feed: polling PostgreSQL"
                            ),
                            None => tracing::info!(poll_ms = every.as_millis(), "change feed: polling SQLite"),
                        }
                        sink.live.store(true, Ordering::Relaxed);
                        vec![Change::resync("the change feed started listening")]
                    }
                };
                for change in changes {
                    if !sink.send(change).await {
                        return;
                    }
                }
                snapshot = Some(next);
            }
            Err(e) => tracing::warn!(error = %e, "change feed: cannot read the SQLite snapshot"),
        }
    }
}

/// How far before the previous snapshot the PostgreSQL poller looks again for runs that ended: longer than any
/// of the layer's write transactions takes. (SQLite needs none: see [`settled_now`].)
const POSTGRES_COMMIT_SLACK: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// The database clock for a snapshot, read when every write stamped before it has committed, so that the next
/// snapshot, taking the runs that ended since, misses none. On SQLite the clock is read under the write lock:
/// every write of the layer takes that lock before it stamps a time (`BEGIN IMMEDIATE`, or a single statement)
/// and holds it until it commits, so a write stamped earlier has committed by then. The lock is held for one
/// `select`. (Without it, a run stamped before the clock read and committed after the rows were read fell
/// between two snapshots; a fixed look-back instead re-read every run of its window at each poll, which a
/// burst of thousands of ends a second turned into seconds per poll.) PostgreSQL's stamps are transaction
/// starts, so its poller looks back instead.
async fn settled_now(db: &Database) -> Result<DateTime<Utc>> {
    const NOW: Sql = sql!("select ", now);
    match db.pool() {
        Pool::Postgres(_) => db.now().await,
        Pool::Sqlite(_) => {
            db.retrying(|| async {
                let mut tx = db.begin_write().await?;
                let now = run!(&mut tx, NOW, |conn, sql| sqlx::query_scalar(sql).fetch_one(conn).await)?;
                tx.rollback().await?;
                Ok(now)
            })
            .await
        }
    }
}

/// What the SQLite poller compares between two changes.
#[derive(Debug)]
struct Snapshot {
    /// The database clock before the rows were read: the next snapshot takes every run that ended since.
    read_at: DateTime<Utc>,
    runs: HashMap<Uuid, (String, RunState, Option<Value>)>,
    queues: HashMap<String, DateTime<Utc>>,
    daemons: HashMap<Uuid, (DaemonState, bool)>,
    /// Each worker's newest audit entry: every change of an override appends exactly one, a clear included, so
    /// a new id is a change (the override table alone would not show a clear of a worker that had none).
    overrides: HashMap<String, (i64, String, OverrideAction)>,
    /// When each worker's description (0) and readiness (1) were last stored.
    workers: HashMap<(String, i64), String>,
    /// Each schedule's last change and next fire.
    schedules: HashMap<Uuid, String>,
    /// The pipeline runs in flight or just ended: pipeline, state, step and current run.
    pipelines: HashMap<Uuid, (String, PipelineState, i32, Option<Uuid>)>,
}

impl Snapshot {
    async fn read(db: &Database, since: Option<DateTime<Utc>>) -> Result<Self> {
        let read_at = settled_now(db).await?;
        let since = since.unwrap_or(read_at);
        // PostgreSQL stamps a row with its transaction's start (`now()`), which may be before the previous read
        // although it committed after it: look that far back again. The runs seen twice compare equal, so they
        // make no second change.
        let since = match db.pool() {
            Pool::Postgres(_) => since - POSTGRES_COMMIT_SLACK,
            Pool::Sqlite(_) => since,
        };
        let (runs, counts, daemons, overrides, workers, schedule_marks, pipeline_marks) = tokio::try_join!(
            runs::marks_since(db, since),
            queue_counts::list(db),
            daemons::marks(db),
            overrides::last_changes(db),
            descriptions::marks(db),
            schedules::marks(db),
            pipelines::marks_since(db, since)
        )?;
        Ok(Self {
            read_at,
            runs: runs.into_iter().map(|r| (r.id, (r.worker, r.state, r.progress))).collect(),
            queues: counts.into_iter().map(|c| (c.worker, c.measured_at)).collect(),
            daemons: daemons.into_iter().map(|d| (d.id, (d.state, d.draining))).collect(),
            overrides: overrides.into_iter().map(|a| (a.worker, (a.id, a.actor, a.action))).collect(),
            workers: workers.into_iter().map(|(worker, which, at)| ((worker, which), at)).collect(),
            schedules: schedule_marks.into_iter().collect(),
            pipelines: pipeline_marks
                .into_iter()
                .map(|(id, p, state, step, run)| (id, (p, state, step, run)))
                .collect(),
        })
    }

    fn changes_to(&self, next: &Self) -> Vec<Change> {
        let mut changes = Vec::new();
        for (id, (worker, state, progress)) in &next.runs {
            if self.runs.get(id).is_none_or(|(_, s, p)| s != state || p != progress) {
                changes.push(Change::Run { run: *id, worker: worker.clone(), state: *state });
            }
        }
        for (worker, at) in &next.queues {
            if self.queues.get(worker) != Some(at) {
                changes.push(Change::Queue { worker: worker.clone() });
            }
        }
        for (id, seen) in &next.daemons {
            if self.daemons.get(id) != Some(seen) {
                changes.push(Change::Daemon { daemon: *id, state: seen.0 });
            }
        }
        // Several changes of one override between two polls make one change, naming the last: subscribers read
        // the override and its audit trail again, which show them all.
        for (worker, (id, actor, action)) in &next.overrides {
            if self.overrides.get(worker).is_none_or(|(seen, _, _)| seen != id) {
                changes.push(Change::Override { worker: worker.clone(), actor: actor.clone(), action: *action });
            }
        }
        let mut described: Vec<&String> = next
            .workers
            .iter()
            .filter(|(key, at)| self.workers.get(*key) != Some(*at))
            .map(|((worker, _), _)| worker)
            .collect();
        described.sort();
        described.dedup();
        changes.extend(described.into_iter().map(|worker| Change::Worker { worker: worker.clone() }));
        for (id, mark) in &next.schedules {
            if self.schedules.get(id) != Some(mark) {
                changes.push(Change::Schedule { schedule: *id });
            }
        }
        for id in self.schedules.keys().filter(|id| !next.schedules.contains_key(*id)) {
            changes.push(Change::Schedule { schedule: *id });
        }
        for (id, seen) in &next.pipelines {
            if self.pipelines.get(id) != Some(seen) {
                changes.push(Change::Pipeline { pipeline_run: *id, pipeline: seen.0.clone(), state: seen.1 });
            }
        }
        changes
    }
}
