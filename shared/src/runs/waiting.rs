//! "Why is this waiting?": the one reason a queued run has not started, or a pipeline's step has not been
//! requested, computed when it is read, from the same facts a claim looks at: its not-before time, the live
//! daemons (their state, the workers they take, their labels, their capacity, their daemon-scoped resources and
//! their runs), the holders of the resources its worker holds and, for a pipeline, the runs in flight of its step's
//! worker. The facts are read
//! once ([`WaitFacts`]) and each reason is a pure function of them, so a list of runs costs one read.
//!
//! Sentences name runs and daemons by their whole ids: UUIDv7 ids made within a minute of each other share their
//! first eight digits, so a shortened id could name several.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use chrono::{DateTime, SecondsFormat, Utc};
use uuid::Uuid;

use crate::{
    Catalogue, Daemon, DaemonState, DbError, PipelineRunView, PipelineState, ResourceScope, ResourceSpec, Run,
    RunState, Store, WaitCode, Waiting,
};

fn waiting(code: WaitCode, message: String) -> Waiting {
    Waiting { code, message, until: None, daemons: Vec::new(), runs: Vec::new() }
}

/// Why a daemon cannot take runs of `worker`, if it cannot.
pub(super) fn cannot_take(daemon: &Daemon, worker: &str, labels: &[String]) -> Option<String> {
    if !daemon.workers.is_empty() && !daemon.workers.iter().any(|w| w == worker) {
        return Some(format!("daemon {} on {} takes only {}", daemon.id, daemon.host, daemon.workers.join(", ")));
    }
    let missing: Vec<&str> = labels.iter().filter(|l| !daemon.labels.contains(l)).map(String::as_str).collect();
    (!missing.is_empty()).then(|| {
        format!(
            "daemon {} on {} lacks the label{} {}",
            daemon.id,
            daemon.host,
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )
    })
}

/// The reason, from the facts (`now` on the database clock; `daemons` alive or not; `in_flight`, the runs queued
/// or running; `holders`, (resource, run) pairs).
fn explain(catalogue: &Catalogue, run: &Run, facts: &WaitFacts) -> Waiting {
    let (now, daemons, in_flight, holders) = (facts.now, &facts.daemons[..], &facts.in_flight[..], &facts.holders[..]);
    let (next_starts, not_preemptible) = (&facts.next_starts[..], &facts.not_preemptible);
    if let Some(at) = run.expires_at.filter(|t| *t <= now) {
        let when = at.to_rfc3339_opts(SecondsFormat::Millis, true);
        return Waiting {
            until: Some(at),
            ..waiting(
                WaitCode::Expired,
                format!(
                    "It expired at {when}: no daemon claimed it within its expires_after_seconds. A daemon ends it \
                     cancelled (expired) at its next look."
                ),
            )
        };
    }
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
        let ids = alive.iter().map(|d| d.id.to_string()).collect::<Vec<_>>().join(", ");
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
    let held = catalogue.worker(&run.worker).map(|w| w.resources.as_slice()).unwrap_or_default();
    let specs: Vec<&ResourceSpec> = held.iter().filter_map(|r| catalogue.resource(r)).collect();
    let per_daemon: Vec<&ResourceSpec> = specs.iter().copied().filter(|r| r.scope == ResourceScope::Daemon).collect();
    let capable = match offering(&run.worker, &capable, &per_daemon) {
        Ok(offering) => offering,
        Err(not_offered) => return not_offered,
    };
    let full = |d: &&Daemon| d.runs_in_flight >= i64::from(d.capacity);
    if capable.iter().all(full) {
        let theirs: Vec<&Run> = in_flight
            .iter()
            .filter(|r| {
                r.state == RunState::Running && r.daemon_id.is_some_and(|id| capable.iter().any(|d| d.id == id))
            })
            .collect();
        let names = theirs.iter().map(|r| format!("{} ({})", r.id, r.worker)).collect::<Vec<_>>().join(", ");
        return Waiting {
            daemons: capable.iter().map(|d| d.id).collect(),
            runs: theirs.iter().map(|r| r.id).collect(),
            ..waiting(
                WaitCode::CapableDaemonsFull,
                format!("Every daemon that can take worker {} is at capacity, running {names}.", run.worker),
            )
        };
    }
    for spec in specs.iter().filter(|r| r.scope == ResourceScope::Global) {
        let resource = &spec.name;
        let held: Vec<Uuid> = holders.iter().filter(|(r, _)| r == resource).map(|(_, id)| *id).collect();
        if held.len() >= spec.capacity as usize {
            let names = held
                .iter()
                .map(|id| match in_flight.iter().find(|r| r.id == *id) {
                    Some(r) => format!("{} ({}, priority {})", r.id, r.worker, r.priority),
                    None => format!("{id} (?)"),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let note = preemption_note(spec, run, &held, in_flight, now, not_preemptible);
            return Waiting {
                runs: held,
                ..waiting(
                    WaitCode::ResourceFull,
                    format!(
                        "It waits behind run {names} for resource {resource} (capacity {}); it has priority {}.{note}",
                        spec.capacity, run.priority
                    ),
                )
            };
        }
        if let Some((_, at)) = next_starts.iter().find(|(r, at)| r == resource && *at > now) {
            let most = spec.starts_per_minute.unwrap_or_default();
            let when = at.to_rfc3339_opts(SecondsFormat::Millis, true);
            return Waiting {
                until: Some(*at),
                ..waiting(
                    WaitCode::RateLimited,
                    format!(
                        "Resource {resource} allows {most} starts a minute, all used; the next start is allowed at \
                         {when}."
                    ),
                )
            };
        }
    }
    for spec in &per_daemon {
        if let Some(mut full) = full_on_every_daemon(&spec.name, &capable, in_flight, holders) {
            let held: Vec<Uuid> = holders.iter().filter(|(r, _)| *r == spec.name).map(|(_, id)| *id).collect();
            full.message.push_str(&preemption_note(spec, run, &held, in_flight, now, not_preemptible));
            return full;
        }
    }
    waiting(WaitCode::Claimable, "Nothing holds it back: a daemon should claim it within moments.".to_owned())
}

/// What a preemption does for `run`, waiting for `spec` held by the runs `held`, as sentences to append: the
/// holder it is preempting and the grace left; or, when the resource may be preempted, why no holder is (yet).
/// Nothing when the resource is never preempted.
fn preemption_note(
    spec: &ResourceSpec,
    run: &Run,
    held: &[Uuid],
    in_flight: &[Run],
    now: DateTime<Utc>,
    not_preemptible: &BTreeMap<String, &'static str>,
) -> String {
    let Some(after) = spec.preempt_after_seconds else { return String::new() };
    let holders: Vec<&Run> = held.iter().filter_map(|id| in_flight.iter().find(|r| r.id == *id)).collect();
    if let Some(victim) = holders.iter().find(|h| h.preempted_for == Some(run.id)) {
        let grace = spec.preempt_grace_seconds.unwrap_or(60);
        let asked = victim.preempt_requested_at.unwrap_or(now);
        let left = (asked + chrono::Duration::seconds(grace) - now).num_seconds().max(0);
        return format!(
            " It is preempting run {} ({}): asked to yield, {left} s of grace left.",
            victim.id, victim.worker
        );
    }
    let lower: Vec<&&Run> = holders.iter().filter(|h| h.priority < run.priority).collect();
    if lower.is_empty() {
        return format!(" No holder has a lower priority than {}, so none is preempted.", run.priority);
    }
    let why: Vec<String> = lower
        .iter()
        .map(|h| match not_preemptible.get(&h.worker) {
            Some(why) => format!("run {} is not preemptible: {why}", h.id),
            None if h.checkpoint.is_none() => format!("run {} has no checkpoint yet, so it is not preempted", h.id),
            None if h.preempt_requested_at.is_some() => format!("run {} is yielding for another run", h.id),
            None => format!("run {} is preempted once this run has waited {after} s", h.id),
        })
        .collect();
    format!(" {}.", capitalised(&why.join("; ")))
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// Of the `capable` daemons, those that offer every daemon-scoped resource of `per_daemon` (a capacity of at
/// least 1 in their `daemon.resources`); or, when none does, the reason naming a resource no running daemon
/// offers.
fn offering<'a>(
    worker: &str,
    capable: &[&'a Daemon],
    per_daemon: &[&ResourceSpec],
) -> Result<Vec<&'a Daemon>, Waiting> {
    let offers = |d: &Daemon, r: &ResourceSpec| d.resources.get(&r.name).is_some_and(|n| *n > 0);
    let offering: Vec<&Daemon> = capable.iter().copied().filter(|d| per_daemon.iter().all(|r| offers(d, r))).collect();
    if !offering.is_empty() {
        return Ok(offering);
    }
    let missing = per_daemon.iter().find(|r| !capable.iter().any(|d| offers(d, r)));
    let message = match missing {
        Some(r) => format!(
            "No running daemon offers resource {} (daemon.resources), which worker {worker} holds while it runs.",
            r.name
        ),
        None => format!(
            "No running daemon offers every one of the resources {} (daemon.resources), which worker {worker} holds \
             while it runs.",
            per_daemon.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    };
    Err(Waiting { daemons: capable.iter().map(|d| d.id).collect(), ..waiting(WaitCode::NoCapableDaemon, message) })
}

/// The reason when the daemon-scoped `resource` is full on every one of `offering` (daemons that offer it): each
/// daemon with its holders of it (`holders` (resource, run); a holder's daemon is the one running it).
fn full_on_every_daemon(
    resource: &str,
    offering: &[&Daemon],
    in_flight: &[Run],
    holders: &[(String, Uuid)],
) -> Option<Waiting> {
    let mut runs = Vec::new();
    let mut each = Vec::new();
    for d in offering {
        let capacity = d.resources.get(resource).copied().unwrap_or_default();
        let theirs: Vec<&Run> = holders
            .iter()
            .filter(|(r, _)| r == resource)
            .filter_map(|(_, id)| in_flight.iter().find(|run| run.id == *id && run.daemon_id == Some(d.id)))
            .collect();
        if theirs.len() < capacity as usize {
            return None;
        }
        let names = theirs.iter().map(|r| format!("run {} ({})", r.id, r.worker)).collect::<Vec<_>>().join(", ");
        each.push(format!("daemon {} on {} ({} of {capacity}, {names})", d.id, d.host, theirs.len()));
        runs.extend(theirs.iter().map(|r| r.id));
    }
    Some(Waiting {
        daemons: offering.iter().map(|d| d.id).collect(),
        runs,
        ..waiting(
            WaitCode::ResourceFull,
            format!("Resource {resource} is full on every daemon that has it: {}.", each.join("; ")),
        )
    })
}

/// What every reason is computed from, read at once.
struct WaitFacts {
    /// The database clock.
    now: DateTime<Utc>,
    /// Every daemon, alive or not.
    daemons: Vec<Daemon>,
    /// Every run queued or running.
    in_flight: Vec<Run>,
    /// (resource, run) pairs.
    holders: Vec<(String, Uuid)>,
    /// (resource, when its next start is allowed) for each resource whose starts per minute are used up.
    next_starts: Vec<(String, DateTime<Utc>)>,
    /// Why each worker's runs cannot be preempted (absent: they can), read only when a resource may be.
    not_preemptible: BTreeMap<String, &'static str>,
}

impl WaitFacts {
    /// Why `run` waits, if it is queued; a step's run says which pipeline waits for it.
    fn run(&self, catalogue: &Catalogue, run: &Run) -> Option<Waiting> {
        let mut waiting = self.base(catalogue, run)?;
        if let (Some(pipeline_run), Some(step)) = (run.pipeline_run_id, run.pipeline_step) {
            waiting.message.push_str(&format!(
                " It is step {} of pipeline run {}: the pipeline's next steps wait for it.",
                step + 1,
                pipeline_run
            ));
        }
        Some(waiting)
    }

    /// Why `run` waits, if it is queued, as a claim sees it.
    fn base(&self, catalogue: &Catalogue, run: &Run) -> Option<Waiting> {
        if run.state != RunState::Queued {
            return None;
        }
        let mut waiting = explain(catalogue, run, self);
        if let Some(at) = run.expires_at.filter(|_| waiting.code != WaitCode::Expired) {
            let when = at.to_rfc3339_opts(SecondsFormat::Millis, true);
            waiting.message.push_str(&format!(" It expires at {when} if no daemon has claimed it by then."));
        }
        Some(waiting)
    }

    /// Why the pipeline run of `view` waits: its current step's queued run's own reason, or why that step has
    /// not been requested yet (its worker busy with another run, or the daemons' settling pass not come yet).
    /// `None` when it is over or its current step is running.
    fn pipeline(&self, catalogue: &Catalogue, view: &PipelineRunView) -> Option<Waiting> {
        let p = &view.pipeline_run;
        if p.state != PipelineState::Running {
            return None;
        }
        let worker = usize::try_from(p.step).ok().and_then(|i| p.steps.get(i)).map_or("?", String::as_str);
        let step = format!("Step {} ({worker})", p.step + 1);
        if let Some(id) = p.current_run {
            let current = view.runs.iter().find(|r| r.id == id)?;
            return match current.state {
                RunState::Queued => self.base(catalogue, current),
                RunState::Running => None,
                state => Some(waiting(
                    WaitCode::PipelineStep,
                    format!("{step} ended {state}; {}", self.settling("the pipeline run moves on")),
                )),
            };
        }
        match self.in_flight.iter().find(|r| r.worker == worker && r.parent_id.is_none()) {
            Some(busy) => {
                // The run it waits for may itself wait: that is the reason to act on.
                let behind = self
                    .base(catalogue, busy)
                    .map(|w| format!(" That run is queued: {}", w.message))
                    .unwrap_or_default();
                Some(Waiting {
                    runs: vec![busy.id],
                    ..waiting(
                        WaitCode::PipelineStep,
                        format!(
                            "{step} waits for worker {worker}'s run {} ({}) to end; it is requested then.{behind}",
                            busy.id, busy.state
                        ),
                    )
                })
            }
            None => Some(waiting(WaitCode::PipelineStep, format!("{step} {}", self.settling("is requested")))),
        }
    }

    /// What the daemons' settling pass will do (`what`), and when: soon, or once a daemon runs.
    fn settling(&self, what: &str) -> String {
        if self.daemons.iter().any(|d| d.state != DaemonState::Gone) {
            format!("{what} at a daemon's next settling pass, within moments.")
        } else {
            format!("{what} when a daemon runs: no daemon is running.")
        }
    }
}

impl Store {
    /// The facts of every reason; `in_flight`, the runs in flight, when the caller has just read them.
    async fn wait_facts(
        &self,
        catalogue: &Catalogue,
        gone_after: Duration,
        in_flight: Option<Vec<Run>>,
    ) -> Result<WaitFacts, DbError> {
        let in_flight = async {
            match in_flight {
                Some(runs) => Ok(runs),
                None => self.runs_in_flight().await,
            }
        };
        let (now, daemons, in_flight, holders, next_starts) = tokio::try_join!(
            self.now(),
            self.list_daemons(gone_after),
            in_flight,
            self.resource_holders(),
            self.next_starts(catalogue),
        )?;
        // Why a holder is not preempted matters only to a queued run of a worker that holds a resource that may be
        // preempted: read then, after the rest (not one more statement at once on every read of the workers).
        let preempting = |run: &Run| {
            run.state == RunState::Queued
                && catalogue.worker(&run.worker).is_some_and(|w| {
                    w.resources.iter().any(|r| catalogue.resource(r).is_some_and(|r| r.preempt_after_seconds.is_some()))
                })
        };
        let not_preemptible =
            if in_flight.iter().any(preempting) { self.not_preemptible(catalogue).await? } else { BTreeMap::new() };
        Ok(WaitFacts { now, daemons, in_flight, holders, next_starts, not_preemptible })
    }

    /// Why each worker's runs cannot be preempted (absent: they can); nothing read when no resource may be.
    pub(crate) async fn not_preemptible(
        &self,
        catalogue: &Catalogue,
    ) -> Result<BTreeMap<String, &'static str>, DbError> {
        if catalogue.resources.iter().all(|r| r.preempt_after_seconds.is_none()) {
            return Ok(BTreeMap::new());
        }
        let descriptions = self.descriptions().await?;
        Ok(catalogue
            .workers
            .iter()
            .filter_map(|w| {
                let described = descriptions.iter().find(|d| d.worker == w.name).and_then(|d| d.description.as_ref());
                let why = super::not_preemptible(w.preemptible, described.map(|d| d.capabilities.unwrap_or_default()))?;
                Some((w.name.clone(), why))
            })
            .collect())
    }

    /// When the next start of each rate-limited resource whose starts of the last minute are used up is allowed.
    async fn next_starts(&self, catalogue: &Catalogue) -> Result<Vec<(String, DateTime<Utc>)>, DbError> {
        let mut next = Vec::new();
        for spec in &catalogue.resources {
            let Some(most) = spec.starts_per_minute.and_then(|n| u32::try_from(n).ok()) else { continue };
            let at = self.db.retrying(|| crate::db::resources::next_start_at(&self.db, &spec.name, most)).await?;
            next.extend(at.map(|at| (spec.name.clone(), at)));
        }
        Ok(next)
    }

    /// Why the run `run` waits, if it is queued; `None` otherwise. `gone_after` is the heartbeat age past which a
    /// daemon counts as gone.
    pub(crate) async fn why_waiting(
        &self,
        catalogue: &Catalogue,
        run: &Run,
        gone_after: Duration,
    ) -> Result<Option<Waiting>, DbError> {
        if run.state != RunState::Queued {
            return Ok(None);
        }
        let catalogue = &*self.with_effective_capacities(catalogue).await?;
        Ok(self.wait_facts(catalogue, gone_after, None).await?.run(catalogue, run))
    }

    /// Why the queued run of each of `workers` waits, by run id: `in_flight` is every run in flight, as the caller
    /// has just read them. One read of the daemons and the resources' holders serves them all, and nothing is
    /// read when none of them is queued.
    pub(crate) async fn why_each_waits(
        &self,
        catalogue: &Catalogue,
        in_flight: &[Run],
        workers: &[String],
        gone_after: Duration,
    ) -> Result<HashMap<Uuid, Waiting>, DbError> {
        let queued: Vec<&Run> =
            in_flight.iter().filter(|r| r.state == RunState::Queued && workers.contains(&r.worker)).collect();
        if queued.is_empty() {
            return Ok(HashMap::new());
        }
        let catalogue = &*self.with_effective_capacities(catalogue).await?;
        let facts = self.wait_facts(catalogue, gone_after, Some(in_flight.to_vec())).await?;
        Ok(queued.into_iter().filter_map(|r| Some((r.id, facts.run(catalogue, r)?))).collect())
    }

    /// Why the pipeline run of `view` waits, if it does (see [`PipelineRunView::waiting`]).
    pub(crate) async fn pipeline_waiting(
        &self,
        catalogue: &Catalogue,
        view: &PipelineRunView,
        gone_after: Duration,
    ) -> Result<Option<Waiting>, DbError> {
        if view.pipeline_run.state != PipelineState::Running {
            return Ok(None);
        }
        if let Some(paused) = crate::pauses::paused_step(self, view).await? {
            return Ok(Some(paused));
        }
        let catalogue = &*self.with_effective_capacities(catalogue).await?;
        Ok(self.wait_facts(catalogue, gone_after, None).await?.pipeline(catalogue, view))
    }
}

#[cfg(test)]
mod tests;
