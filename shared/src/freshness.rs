//! Freshness targets: a worker with `fresh_within_seconds` must keep the age of its oldest pending document (or,
//! when its count does not report that, the time since its last successful run while anything is pending) under
//! the target. A breach carries why, as a sentence an operator can act on: a label no live daemon has, a worker
//! paused, a run in flight too long, failing runs, a worker that never ran. Computed on read from the rows the
//! daemons keep (counts, runs, daemons), on the database clock; the worker view, health and `/metrics` share it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use scrinalia_wire::{Daemon, DaemonState, Freshness, QueueCount, Run, RunState};

use crate::{Catalogue, DbError, Override, Store, WorkerSpec, db};

/// How many of a worker's last runs are read to say "last N runs failed".
const RECENT_RUNS: u32 = 20;

/// What freshness reads of one worker.
#[derive(Debug, Clone, Default)]
pub struct Facts<'a> {
    /// The target, in seconds.
    pub within_seconds: u64,
    /// The labels the worker needs.
    pub labels: &'a [String],
    /// Its last count.
    pub count: Option<&'a QueueCount>,
    /// Its run in flight (a plain run or a sharded parent).
    pub in_flight: Option<&'a Run>,
    /// The states of its last finished runs, newest first.
    pub recent: Vec<RunState>,
    /// When its last successful run ended.
    pub last_success: Option<DateTime<Utc>>,
    /// Whether it is paused.
    pub paused: bool,
}

/// Where the worker stands against its target at `now` (database clock), with every daemon known.
pub fn assess(worker: &str, facts: &Facts<'_>, daemons: &[Daemon], now: DateTime<Utc>) -> Freshness {
    let ago = |t: DateTime<Utc>| (now - t).num_seconds().max(0);
    let pending = facts.count.and_then(|c| c.pending).filter(|p| *p > 0);
    let oldest = facts.count.and_then(|c| c.oldest_pending_at);
    let age = pending.and_then(|_| match oldest {
        Some(oldest) => Some(ago(oldest)),
        // Without the oldest document's age: since the last success, or since something has been pending when
        // that is later (or it never succeeded).
        None => {
            let since = facts.count.and_then(|c| c.pending_since);
            [since, facts.last_success].into_iter().flatten().max().map(ago)
        }
    });
    let within = i64::try_from(facts.within_seconds).unwrap_or(i64::MAX);
    let breached = age.is_some_and(|a| a > within);
    let reason = breached.then(|| {
        let cause = cause(worker, facts, daemons, now);
        let what = match (pending, oldest) {
            (Some(p), Some(o)) => format!("{p} pending, the oldest since {}", o.format("%Y-%m-%d %H:%M:%S UTC")),
            (Some(p), None) => format!("{p} pending, {} since its last successful run", spoken(age.unwrap_or(0))),
            _ => String::new(),
        };
        format!("{cause}: {what} (older than {}).", spoken(within))
    });
    Freshness { within_seconds: within, age_seconds: age, breached, reason }
}

/// Why a breached worker is behind, the most telling cause first.
fn cause(worker: &str, facts: &Facts<'_>, daemons: &[Daemon], now: DateTime<Utc>) -> String {
    if facts.paused {
        return "Paused".to_owned();
    }
    let takes = |d: &Daemon| d.workers.is_empty() || d.workers.iter().any(|w| w == worker);
    for label in facts.labels {
        let live = daemons.iter().any(|d| d.state != DaemonState::Gone && takes(d) && d.labels.contains(label));
        if !live {
            let last = daemons.iter().filter(|d| d.labels.contains(label)).map(|d| d.heartbeat_at).max();
            return match last {
                Some(t) => format!("No daemon with label {label} for {}", spoken((now - t).num_seconds().max(0))),
                None => format!("No daemon with label {label} has ever run"),
            };
        }
    }
    if let Some(run) = facts.in_flight {
        let verb = if run.state == RunState::Queued { "waited" } else { "been in flight" };
        return format!("A run has {verb} for {}", spoken((now - run.requested_at).num_seconds().max(0)));
    }
    let failed = facts.recent.iter().take_while(|s| **s == RunState::Failed).count();
    match (failed, facts.recent.is_empty()) {
        (_, true) => "Never ran".to_owned(),
        (1, _) => "The last run failed".to_owned(),
        (n, _) if n > 1 => format!("Last {n} runs failed"),
        _ => format!("Older than {}", spoken(i64::try_from(facts.within_seconds).unwrap_or(i64::MAX))),
    }
}

/// A duration as people say it: "45 s", "12 min", "3 h", "2 d".
pub fn spoken(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s if s < 2 * 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// The target of `spec` with its override `stored`, when it has a valid one.
pub fn target(spec: &WorkerSpec, stored: Option<&Override>) -> Option<u64> {
    let values = stored.map(|o| o.values.clone()).unwrap_or_default();
    crate::resolve::fresh_within(spec, &values).ok().flatten().map(|r| r.value)
}

impl Store {
    /// Where each worker with a target stands, from what the caller read already (`counts`, `in_flight`,
    /// `daemons`, the clock `now`) and, per such worker, its last runs.
    pub(crate) async fn freshness(
        &self,
        targets: &[(&WorkerSpec, u64)],
        counts: &HashMap<String, QueueCount>,
        in_flight: &HashMap<String, Run>,
        daemons: &[Daemon],
        now: DateTime<Utc>,
    ) -> Result<HashMap<String, Freshness>, DbError> {
        let mut out = HashMap::new();
        if targets.is_empty() {
            return Ok(out);
        }
        let paused = crate::backlog::paused_workers(&self.db).await?;
        for (spec, within) in targets {
            let name = spec.name.as_str();
            let (recent, last_success) = self
                .db
                .retrying(|| async {
                    let recent = db::backlog::recent_ends(&self.db, name, RECENT_RUNS).await?;
                    Ok((recent, db::backlog::last_success(&self.db, name).await?))
                })
                .await?;
            let facts = Facts {
                within_seconds: *within,
                labels: &spec.labels,
                count: counts.get(name),
                in_flight: in_flight.get(name),
                recent: recent.into_iter().map(|(s, _)| s).collect(),
                last_success,
                paused: paused.contains(name),
            };
            out.insert(spec.name.clone(), assess(name, &facts, daemons, now));
        }
        Ok(out)
    }

    /// Where every worker of `catalogue` with a target stands now, read whole (for health and `/metrics`).
    pub(crate) async fn freshness_now(
        &self,
        catalogue: &Catalogue,
        gone_after: std::time::Duration,
    ) -> Result<Vec<(String, Freshness)>, DbError> {
        let overrides = self.list_overrides().await?;
        let stored: HashMap<&str, &Override> = overrides.iter().map(|o| (o.worker.as_str(), o)).collect();
        let targets: Vec<(&WorkerSpec, u64)> = catalogue
            .workers
            .iter()
            .filter_map(|w| target(w, stored.get(w.name.as_str()).copied()).map(|t| (w, t)))
            .collect();
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let (counts, in_flight, daemons, now) =
            tokio::try_join!(self.queue_counts(), self.runs_in_flight(), self.list_daemons(gone_after), self.now())?;
        let counts = counts.into_iter().map(|c| (c.worker.clone(), c)).collect();
        let in_flight =
            in_flight.into_iter().filter(|r| r.parent_id.is_none()).map(|r| (r.worker.clone(), r)).collect();
        let found = self.freshness(&targets, &counts, &in_flight, &daemons, now).await?;
        let mut out: Vec<(String, Freshness)> = found.into_iter().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
