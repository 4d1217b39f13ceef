//! "Why is this waiting?": the one reason a queued run has not started, computed when it is read, from the same
//! facts a claim looks at: its not-before time, the live daemons (their state, the workers they take, their
//! labels, their capacity and their runs) and the holders of the resources its worker holds.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use uuid::Uuid;

use crate::{Catalogue, Daemon, DaemonState, Database, DbError, Run, RunState, WaitCode, Waiting};

fn waiting(code: WaitCode, message: String) -> Waiting {
    Waiting { code, message, until: None, daemons: Vec::new(), runs: Vec::new() }
}

fn short(id: Uuid) -> String {
    id.to_string()[..8].to_owned()
}

/// Why a daemon cannot take runs of `worker`, if it cannot.
fn cannot_take(daemon: &Daemon, worker: &str, labels: &[String]) -> Option<String> {
    if !daemon.workers.is_empty() && !daemon.workers.iter().any(|w| w == worker) {
        return Some(format!(
            "daemon {} on {} takes only {}",
            short(daemon.id),
            daemon.host,
            daemon.workers.join(", ")
        ));
    }
    let missing: Vec<&str> = labels.iter().filter(|l| !daemon.labels.contains(l)).map(String::as_str).collect();
    (!missing.is_empty()).then(|| {
        format!(
            "daemon {} on {} lacks the label{} {}",
            short(daemon.id),
            daemon.host,
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )
    })
}

/// The reason, from the facts (`now` on the database clock; `daemons` alive or not; `in_flight`, the running
/// runs; `holders`, (resource, run) pairs).
fn explain(
    catalogue: &Catalogue,
    run: &Run,
    now: DateTime<Utc>,
    daemons: &[Daemon],
    in_flight: &[Run],
    holders: &[(String, Uuid)],
) -> Waiting {
    if let Some(until) = run.not_before.filter(|t| *t > now) {
        let why = if run.retry_of.is_some() {
            format!("the backoff before attempt {}", run.attempt)
        } else {
            "the time it was requested for".to_owned()
        };
        let at = until.to_rfc3339_opts(SecondsFormat::Millis, true);
        return Waiting { until: Some(until), ..waiting(WaitCode::NotBefore, format!("It waits until {at}: {why}.")) };
    }
    let alive: Vec<&Daemon> = daemons.iter().filter(|d| d.state != DaemonState::Gone).collect();
    if alive.is_empty() {
        return waiting(WaitCode::NoDaemon, "No daemon is running; it starts when one does.".to_owned());
    }
    let active: Vec<&Daemon> = alive.iter().copied().filter(|d| d.state == DaemonState::Active).collect();
    if active.is_empty() {
        let ids = alive.iter().map(|d| short(d.id)).collect::<Vec<_>>().join(", ");
        return Waiting {
            daemons: alive.iter().map(|d| d.id).collect(),
            ..waiting(WaitCode::AllDraining, format!("Every live daemon is draining ({ids}); none takes new runs."))
        };
    }
    let labels = catalogue.worker(&run.worker).map(|w| w.labels.clone()).unwrap_or_default();
    let capable: Vec<&Daemon> =
        active.iter().copied().filter(|d| cannot_take(d, &run.worker, &labels).is_none()).collect();
    if capable.is_empty() {
        let why: Vec<String> = active.iter().filter_map(|d| cannot_take(d, &run.worker, &labels)).collect();
        return Waiting {
            daemons: active.iter().map(|d| d.id).collect(),
            ..waiting(
                WaitCode::NoCapableDaemon,
                format!("No live daemon can take worker {}: {}.", run.worker, why.join("; ")),
            )
        };
    }
    let full = |d: &&Daemon| d.runs_in_flight >= i64::from(d.capacity);
    if capable.iter().all(full) {
        let theirs: Vec<&Run> =
            in_flight.iter().filter(|r| r.daemon_id.is_some_and(|id| capable.iter().any(|d| d.id == id))).collect();
        let names = theirs.iter().map(|r| format!("{} ({})", short(r.id), r.worker)).collect::<Vec<_>>().join(", ");
        return Waiting {
            daemons: capable.iter().map(|d| d.id).collect(),
            runs: theirs.iter().map(|r| r.id).collect(),
            ..waiting(
                WaitCode::CapableDaemonsFull,
                format!("Every daemon that can take worker {} is at capacity, running {names}.", run.worker),
            )
        };
    }
    for resource in catalogue.worker(&run.worker).map(|w| w.resources.as_slice()).unwrap_or_default() {
        let Some(spec) = catalogue.resource(resource) else { continue };
        let held: Vec<Uuid> = holders.iter().filter(|(r, _)| r == resource).map(|(_, id)| *id).collect();
        if held.len() >= spec.capacity as usize {
            let names = held
                .iter()
                .map(|id| {
                    let worker = in_flight.iter().find(|r| r.id == *id).map_or("?", |r| r.worker.as_str());
                    format!("{} ({worker})", short(*id))
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Waiting {
                runs: held,
                ..waiting(
                    WaitCode::ResourceFull,
                    format!("Resource {resource} (capacity {}) is held by run {names}.", spec.capacity),
                )
            };
        }
    }
    waiting(WaitCode::Claimable, "Nothing holds it back: a daemon should claim it within moments.".to_owned())
}

impl Database {
    /// Why the run `run` waits, if it is queued; `None` otherwise. `gone_after` is the heartbeat age past which a
    /// daemon counts as gone.
    pub async fn why_waiting(
        &self,
        catalogue: &Catalogue,
        run: &Run,
        gone_after: Duration,
    ) -> Result<Option<Waiting>, DbError> {
        if run.state != RunState::Queued {
            return Ok(None);
        }
        let catalogue = &*self.with_effective_capacities(catalogue).await?;
        let (now, daemons, in_flight, holders) = tokio::try_join!(
            self.now(),
            self.list_daemons(gone_after),
            self.runs_in_flight(),
            self.resource_holders()
        )?;
        let running: Vec<Run> = in_flight.into_iter().filter(|r| r.state == RunState::Running).collect();
        Ok(Some(explain(catalogue, run, now, &daemons, &running, &holders)))
    }
}
