//! The invariants of the chaos suite, one function each, named for what must hold, checked at the end on
//! everything the suite gathered ([`Evidence`]): the ledger, the APIs' answers, the faults, the probes' own
//! records of what executed when and from which checkpoint, and what the watcher saw (of the worker processes
//! and of `run_resources`). Each returns the violations it found as sentences naming the run, worker or resource,
//! and adds its figures to [`Figures`]; those of resources and resumes live in their modules.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    time::Duration,
};

use scrinalia_shared::{EndReason, Named, Run, RunState};
use uuid::Uuid;

use super::{
    Answer, Created, Fault, FaultKind, LEASE, SLACK, Steer, Watched,
    items::{self, StoredItems},
    resources::{self, ResourceFigures},
    resumes,
    scheduling::{self, Scheduled, is_scheduled},
    shards,
};
use crate::daemon_harness::{ProbeEvent, Setup, at_ns};

/// Everything the final check looks at.
pub struct Evidence<'a> {
    /// The configuration (for the probes' records).
    pub setup: &'a Setup,
    /// The ledger at the end.
    pub runs: Vec<Run>,
    /// The 201s.
    pub created: Vec<Created>,
    /// Every answer of the APIs.
    pub answers: Vec<Answer>,
    /// Every fault done to a daemon.
    pub faults: Vec<Fault>,
    /// Connection cuts: when, and how many backends.
    pub cuts: Vec<(i128, i64)>,
    /// What the watcher saw.
    pub watched: Watched,
    /// Daemons started.
    pub daemons_started: usize,
    /// The schedules' fires and the pipeline runs.
    pub scheduled: Scheduled,
    /// The stored items of every probe run.
    pub items: HashMap<Uuid, StoredItems>,
}

/// The figures of a chaos run.
#[derive(Debug, Default)]
pub struct Figures {
    /// Runs in the ledger by state.
    pub runs: BTreeMap<String, usize>,
    /// Answers by status (`none` when no answer came).
    pub answers: BTreeMap<String, usize>,
    /// Faults by kind.
    pub faults: BTreeMap<String, usize>,
    /// Connection cuts and the backends they terminated.
    pub cuts: (usize, i64),
    /// Interruptions by end reason.
    pub interruptions: BTreeMap<String, usize>,
    /// The longest time from an owner's death to its run's `interrupted`.
    pub worst_to_interrupted: Option<Duration>,
    /// Probe executions recorded by the probes themselves, and how many of them ended without an end line.
    pub probe_executions: (usize, usize),
    /// Worker processes the watcher saw, and its scans.
    pub watched: (usize, u64),
    /// Daemons started.
    pub daemons_started: usize,
    /// Fires by schedule and outcome, retries, and pipeline runs by state.
    pub scheduling: BTreeMap<String, usize>,
    /// Each shared resource's executions and holders.
    pub resources: BTreeMap<String, ResourceFigures>,
    /// Samples of `run_resources`.
    pub resource_samples: u64,
    /// Resumes and restarts, by who asked and how they were checked.
    pub continuations: BTreeMap<String, usize>,
    /// Items printed and checked.
    pub items: BTreeMap<String, usize>,
    /// Sharded runs: parents by state, and their children.
    pub shards: BTreeMap<String, usize>,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list =
            |m: &BTreeMap<String, usize>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        let total = |m: &BTreeMap<String, usize>| m.values().sum::<usize>();
        writeln!(f, "| figure | value |\n|---|---|")?;
        writeln!(f, "| runs | {} ({}) |", total(&self.runs), list(&self.runs))?;
        writeln!(f, "| requests answered | {} ({}) |", total(&self.answers), list(&self.answers))?;
        writeln!(f, "| kills (SIGKILL) | {} |", self.faults.get("kill").copied().unwrap_or(0))?;
        writeln!(f, "| stops (SIGSTOP past the lease) | {} |", self.faults.get("stop").copied().unwrap_or(0))?;
        writeln!(f, "| SIGTERM restarts | {} |", self.faults.get("terminate").copied().unwrap_or(0))?;
        writeln!(f, "| drains | {} |", self.faults.get("drain").copied().unwrap_or(0))?;
        writeln!(f, "| connection cuts | {} ({} backends) |", self.cuts.0, self.cuts.1)?;
        writeln!(f, "| daemons started | {} |", self.daemons_started)?;
        writeln!(f, "| interruptions | {} ({}) |", total(&self.interruptions), list(&self.interruptions))?;
        let worst = self.worst_to_interrupted.map_or("none".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
        let bound = (LEASE + SLACK).as_secs();
        writeln!(f, "| worst death → interrupted | {worst} (lease {} s, bound {bound} s) |", LEASE.as_secs())?;
        writeln!(
            f,
            "| probe executions | {} ({} without an end line) |",
            self.probe_executions.0, self.probe_executions.1
        )?;
        writeln!(f, "| worker processes watched | {} over {} scans |", self.watched.0, self.watched.1)?;
        writeln!(f, "| scheduling | {} |", list(&self.scheduling))?;
        for (name, figures) in &self.resources {
            writeln!(f, "| resource {name} | {figures} |")?;
        }
        writeln!(f, "| samples of run_resources | {} |", self.resource_samples)?;
        writeln!(f, "| resumes and restarts | {} |", list(&self.continuations))?;
        writeln!(f, "| items | {} |", list(&self.items))?;
        write!(f, "| sharded runs | {} |", list(&self.shards))
    }
}

/// The violations found and the figures.
pub struct Verdict {
    /// Each broken invariant, as a sentence.
    pub violations: Vec<String>,
    /// The figures.
    pub figures: Figures,
}

/// Checks every invariant.
pub fn check(evidence: Evidence<'_>) -> Verdict {
    let e = &evidence;
    let mut figures = Figures {
        daemons_started: e.daemons_started,
        cuts: (e.cuts.len(), e.cuts.iter().map(|(_, n)| n).sum()),
        ..Figures::default()
    };
    for f in &e.faults {
        *figures.faults.entry(format!("{:?}", f.kind).to_lowercase()).or_default() += 1;
    }
    let ledger = Ledger::of(&e.runs);
    let events = e.setup.probe_events();
    let executions = Executions::of(&events);
    let mut violations = answers_are_expected_and_never_5xx(e, &mut figures);
    violations.extend(every_201_has_its_row_and_every_row_a_201(e, &ledger, &mut figures));
    violations.extend(every_run_ended_as_it_was_steered(e));
    violations.extend(every_interruption_has_its_reason_within_the_lease_after_its_owner_died(e, &mut figures));
    violations.extend(no_run_executed_twice_nor_outside_its_claim(&ledger, &executions, &mut figures));
    violations.extend(no_two_executions_of_one_worker_overlap(e, &ledger, &executions));
    violations.extend(shards::a_parents_state_agrees_with_its_children(&e.runs, &mut figures.shards));
    violations.extend(shards::no_document_in_two_shards(&e.runs, &e.items));
    violations.extend(no_worker_outlives_its_run_nor_runs_in_two_processes(e, &ledger, &mut figures));
    violations.extend(scheduling::never_two_runs_for_one_fire_and_no_fire_lost(&e.runs, &e.scheduled));
    violations.extend(scheduling::no_retry_of_a_cancelled_run_and_every_retry_by_its_policy(&e.runs));
    violations.extend(scheduling::no_pipeline_step_run_twice_or_skipped(&e.scheduled));
    let shares = &mut figures.resources;
    violations.extend(resources::no_resource_over_capacity_by_the_probes(&e.runs, &events, shares));
    violations.extend(resources::no_resource_over_capacity_in_run_resources(&e.watched.holds, shares));
    figures.resource_samples = e.watched.holds.samples;
    let resumed = &mut figures.continuations;
    violations.extend(resumes::a_resumed_run_starts_from_its_predecessors_last_checkpoint(&e.runs, &events, resumed));
    violations.extend(resumes::a_run_is_continued_once_and_only_a_resume_from_a_checkpoint(&e.runs, &events, resumed));
    violations.extend(resumes::no_resume_the_policy_owes_is_lost(&e.runs, resumed));
    violations.extend(resumes::a_preempted_run_is_resumed_exactly_once(&e.runs, resumed));
    let (stored, counted) = (&e.items, &mut figures.items);
    violations.extend(items::no_run_stores_more_items_than_its_worker_printed(&e.runs, &events, stored, counted));
    violations.extend(items::every_item_printed_before_the_last_stored_checkpoint_is_stored(
        &e.runs, &events, stored, counted,
    ));
    violations
        .extend(items::a_resume_chain_counts_its_failed_and_skipped_items_once(&e.runs, &events, stored, counted));
    for (name, fires) in &e.scheduled.fires {
        for fire in fires {
            *figures.scheduling.entry(format!("{name} {}", fire.outcome)).or_default() += 1;
        }
    }
    figures.scheduling.insert("retries".into(), e.runs.iter().filter(|r| r.retry_of.is_some()).count());
    for p in &e.scheduled.pipelines {
        *figures.scheduling.entry(format!("pipeline runs {}", p.pipeline_run.state)).or_default() += 1;
    }
    Verdict { violations, figures }
}

/// The ledger by run id.
struct Ledger<'a>(HashMap<Uuid, &'a Run>);

impl<'a> Ledger<'a> {
    fn of(runs: &'a [Run]) -> Self {
        Self(runs.iter().map(|r| (r.id, r)).collect())
    }

    fn get(&self, id: &Uuid) -> Option<&'a Run> {
        self.0.get(id).copied()
    }
}

/// The probes' own records of their `run` executions: the start lines of each run, and when it ended (a probe
/// killed by SIGKILL writes no end line).
struct Executions<'a> {
    starts: HashMap<String, Vec<&'a ProbeEvent>>,
    ends: HashMap<String, i128>,
    unnamed: Vec<String>,
}

impl<'a> Executions<'a> {
    fn of(events: &'a [ProbeEvent]) -> Self {
        let mut executions = Self { starts: HashMap::new(), ends: HashMap::new(), unnamed: Vec::new() };
        for e in events.iter().filter(|e| e.verb == "run") {
            match (&e.run_id, e.event.as_str()) {
                (None, _) => executions.unnamed.push(e.worker.clone()),
                (Some(run), "start") => executions.starts.entry(run.clone()).or_default().push(e),
                (Some(run), "end") => {
                    executions.ends.insert(run.clone(), e.at_ns);
                }
                (Some(_), _) => {}
            }
        }
        executions
    }
}

fn ns(t: Option<chrono::DateTime<chrono::Utc>>) -> Option<i128> {
    t.map(at_ns)
}

/// Every answer of an API is one the suite expects for its request (200 to a read, 201 or 409 to a trigger, a
/// resume or a restart, 202 or 409 to a cancel or a drain): no 5xx, and no request without an answer.
fn answers_are_expected_and_never_5xx(e: &Evidence<'_>, figures: &mut Figures) -> Vec<String> {
    let mut v = Vec::new();
    for a in &e.answers {
        let key = a.status.map_or("none".to_owned(), |s| s.to_string());
        *figures.answers.entry(key).or_default() += 1;
        let expected: &[u16] = match a.request.split(' ').next() {
            Some("GET") => &[200],
            _ if a.request.ends_with("/runs") => &[201, 409],
            _ if a.request.ends_with("/resume") || a.request.ends_with("/restart") => &[201, 409],
            _ if a.request.ends_with("/cancel") => &[202, 409],
            _ if a.request.ends_with("/drain") => &[202, 409],
            _ => &[],
        };
        if !a.status.is_some_and(|s| expected.contains(&s)) {
            v.push(format!("API {} answered {:?} to {}: {}", a.api, a.status, a.request, a.body));
        }
    }
    v
}

/// Every 201 has its row in the ledger, of its worker, and every row of the ledger came from a 201.
fn every_201_has_its_row_and_every_row_a_201(
    e: &Evidence<'_>,
    ledger: &Ledger<'_>,
    figures: &mut Figures,
) -> Vec<String> {
    let mut v = Vec::new();
    let created: HashMap<Uuid, &Created> = e.created.iter().map(|c| (c.id, c)).collect();
    for c in &e.created {
        match ledger.get(&c.id) {
            None => v.push(format!("the 201 for run {} of {} has no row in the ledger", c.id, c.worker)),
            Some(r) if r.worker != c.worker => {
                v.push(format!("run {} is of {} in the ledger, {} in its 201", c.id, r.worker, c.worker))
            }
            Some(_) => {}
        }
    }
    for r in &e.runs {
        *figures.runs.entry(r.state.to_string()).or_default() += 1;
        // A shard of a sharded run comes from its parent's 201, a preempted run's resume from its preemption.
        if !created.contains_key(&r.id) && !is_scheduled(r) && r.parent_id.is_none() && !resumes_a_preemption(r, e) {
            v.push(format!("run {} of {} is in the ledger without a 201", r.id, r.worker));
        }
    }
    v
}

/// Whether `run` is the resume a preemption requested: it resumes a run that was asked to yield.
fn resumes_a_preemption(run: &Run, e: &Evidence<'_>) -> bool {
    run.follows_as == Some(scrinalia_shared::FollowKind::Resume)
        && run
            .follows
            .and_then(|p| e.runs.iter().find(|r| r.id == p))
            .is_some_and(|p| p.preempt_requested_at.is_some() && p.state == scrinalia_shared::RunState::Interrupted)
}

/// Every run reached a terminal state, and each ended as it was steered: a failure is the exit status 3 it was
/// asked for, a crash, or probe-3's 2-second timeout; a cancellation was requested; a success was not steered
/// to fail.
fn every_run_ended_as_it_was_steered(e: &Evidence<'_>) -> Vec<String> {
    let steers: HashMap<Uuid, Steer> = e.created.iter().map(|c| (c.id, c.steer)).collect();
    let mut v = Vec::new();
    for r in &e.runs {
        // A fire, a retry or a pipeline step is steered by the arguments it carries (a retry's are its first's).
        let options = &r.arguments.options;
        let derived = if options.get("exit_code").is_some_and(|c| c == 3) {
            Some(Steer::Fails)
        } else if options.get("crash").is_some_and(|c| c == true) {
            Some(Steer::Crashes)
        } else {
            None
        };
        let steer = steers.get(&r.id).copied().or(derived);
        let (reason, error) = (r.end_reason, r.error.as_deref().unwrap_or(""));
        match r.state {
            RunState::Queued | RunState::Running => {
                v.push(format!("run {} of {} is still {}", r.id, r.worker, r.state))
            }
            RunState::Succeeded if matches!(steer, Some(Steer::Fails | Steer::Crashes)) => {
                v.push(format!("run {} of {} succeeded although steered {steer:?}", r.id, r.worker))
            }
            RunState::Failed => {
                let explained = match (steer, reason) {
                    (Some(Steer::Fails), Some(EndReason::ExitStatus)) => r.exit_code == Some(3),
                    (Some(Steer::Crashes), Some(EndReason::Signal)) => true,
                    (_, Some(EndReason::Timeout)) => r.worker == "probe-3",
                    _ => false,
                };
                if !explained {
                    v.push(format!(
                        "run {} of {} ({steer:?}) failed unexpectedly ({reason:?}): {error:?}",
                        r.id, r.worker
                    ));
                }
            }
            RunState::Cancelled if r.cancel_requested_at.is_none() || reason != Some(EndReason::Cancelled) => {
                v.push(format!("run {} of {} is cancelled without a request ({reason:?}): {error:?}", r.id, r.worker))
            }
            _ => {}
        }
    }
    v
}

/// Every interrupted run has a reason an interruption can have, and one that matches a fault of its owner: a
/// lost owner or a lost lease only after the owner was killed or frozen, and within the lease plus the slack of
/// it; a shutdown only after the owner got a SIGTERM.
fn every_interruption_has_its_reason_within_the_lease_after_its_owner_died(
    e: &Evidence<'_>,
    figures: &mut Figures,
) -> Vec<String> {
    let bound = i128::try_from((LEASE + SLACK).as_nanos()).unwrap_or(i128::MAX);
    let mut v = Vec::new();
    // A sharded run's parent runs nothing itself: its children are checked.
    for r in e.runs.iter().filter(|r| r.state == RunState::Interrupted && !r.is_parent()) {
        let (finished, owner, error) = (ns(r.finished_at), r.daemon_id, r.error.as_deref().unwrap_or(""));
        let name = r.end_reason.map_or("none", Named::name);
        *figures.interruptions.entry(name.to_owned()).or_default() += 1;
        let last_fault = |kinds: &[FaultKind]| {
            e.faults
                .iter()
                .filter(|f| Some(f.daemon) == owner && kinds.contains(&f.kind))
                .filter(|f| finished.is_some_and(|t| f.at_ns <= t))
                .map(|f| f.at_ns)
                .max()
        };
        match r.end_reason {
            Some(EndReason::OwnerLost | EndReason::LeaseLost) => {
                match (last_fault(&[FaultKind::Kill, FaultKind::Stop]), finished) {
                    (Some(death), Some(t)) => {
                        let took = t - death;
                        let took_d = Duration::from_nanos(u64::try_from(took).unwrap_or(0));
                        if figures.worst_to_interrupted.is_none_or(|w| took_d > w) {
                            figures.worst_to_interrupted = Some(took_d);
                        }
                        if took > bound {
                            v.push(format!(
                                "run {} of {} became interrupted {} ms after its owner {owner:?} was killed or frozen \
                                 (bound {} ms): {error}",
                                r.id,
                                r.worker,
                                took / 1_000_000,
                                bound / 1_000_000
                            ));
                        }
                    }
                    _ => v.push(format!(
                        "run {} of {} is interrupted ({name}: {error}) although its owner {owner:?} was neither \
                         killed nor frozen before",
                        r.id, r.worker
                    )),
                }
            }
            Some(EndReason::DaemonShutdown) if last_fault(&[FaultKind::Terminate]).is_none() => v.push(format!(
                "run {} of {} is interrupted by a shutdown although its owner {owner:?} got no SIGTERM",
                r.id, r.worker
            )),
            Some(EndReason::DaemonShutdown) => {}
            // Asked to yield for a more urgent run (resumes::a_preempted_run_is_resumed_exactly_once checks it).
            Some(EndReason::Preempted) if r.preempt_requested_at.is_some() => {}
            other => v.push(format!("run {} of {} is interrupted with reason {other:?}: {error:?}", r.id, r.worker)),
        }
    }
    v
}

/// By the probes' own records: each run executed at most once, by its own worker, inside its claim (not before
/// it, not after the run ended in the ledger).
fn no_run_executed_twice_nor_outside_its_claim(
    ledger: &Ledger<'_>,
    executions: &Executions<'_>,
    figures: &mut Figures,
) -> Vec<String> {
    let mut v: Vec<String> =
        executions.unnamed.iter().map(|w| format!("a probe execution of {w} has no run id")).collect();
    let (starts, ends) = (&executions.starts, &executions.ends);
    figures.probe_executions =
        (starts.values().map(Vec::len).sum(), starts.keys().filter(|r| !ends.contains_key(*r)).count());
    for (run, s) in starts {
        if s.len() > 1 {
            let pids: Vec<i32> = s.iter().map(|e| e.pid).collect();
            v.push(format!("run {run} was executed {} times (pids {pids:?})", s.len()));
        }
        let Some(row) = Uuid::parse_str(run).ok().and_then(|id| ledger.get(&id)) else {
            v.push(format!("a probe executed run {run}, which is not in the ledger"));
            continue;
        };
        let start = s[0].at_ns;
        if row.worker != s[0].worker {
            v.push(format!("run {run} is of {} but probe {} executed it", row.worker, s[0].worker));
        }
        let (claimed, finished) = (ns(row.claimed_at), ns(row.finished_at));
        if claimed.is_none_or(|c| start < c) {
            v.push(format!("run {run} started executing before it was claimed ({claimed:?} > {start})"));
        }
        if let (Some(end), Some(fin)) = (ends.get(run), finished)
            && *end > fin + 1_000
        {
            v.push(format!(
                "run {run} of {} was {} in the ledger {} ms before its probe stopped executing",
                row.worker,
                row.state,
                (end - fin) / 1_000_000
            ));
        }
        if finished.is_some_and(|fin| start > fin + 1_000) {
            v.push(format!("run {run} of {} started executing after it ended in the ledger", row.worker));
        }
    }
    v
}

/// What one run in flight at a time is counted over: its worker, or, for a shard of a sharded run, its parent
/// and shard (the shards of one parent run side by side; its parent counts for the worker).
fn flight(run: &Run) -> String {
    match (run.parent_id, run.shard) {
        (Some(parent), Some(shard)) => format!("{} shard {shard} of {parent}", run.worker),
        _ => run.worker.clone(),
    }
}

/// Never two executions of one worker at once: neither by the probes' records (an execution killed by SIGKILL
/// ended at the latest when its run ended in the ledger) nor by the ledger's claims (an interrupted run's
/// `finished_at` is when recovery noticed, later than the worker's death, so this is conservative).
fn no_two_executions_of_one_worker_overlap(
    e: &Evidence<'_>,
    ledger: &Ledger<'_>,
    executions: &Executions<'_>,
) -> Vec<String> {
    let mut intervals: BTreeMap<String, Vec<(i128, i128, String)>> = BTreeMap::new();
    for (run, s) in &executions.starts {
        let Some(row) = Uuid::parse_str(run).ok().and_then(|id| ledger.get(&id)) else { continue };
        let until = executions.ends.get(run).copied().or(ns(row.finished_at)).unwrap_or(i128::MAX);
        intervals.entry(flight(row)).or_default().push((s[0].at_ns, until, run.clone()));
    }
    for r in e.runs.iter().filter(|r| r.claimed_at.is_some()) {
        let (Some(c), f) = (ns(r.claimed_at), ns(r.finished_at)) else { continue };
        let claim = (c, f.unwrap_or(i128::MAX), r.id.to_string());
        intervals.entry(format!("ledger:{}", flight(r))).or_default().push(claim);
    }
    let mut v = Vec::new();
    for (worker, list) in &mut intervals {
        list.sort();
        for pair in list.windows(2) {
            let ((_, end_a, run_a), (start_b, _, run_b)) = (&pair[0], &pair[1]);
            if start_b < end_a {
                v.push(format!(
                    "two executions of {worker} overlap by {} ms: run {run_a} and run {run_b}",
                    (end_a - start_b) / 1_000_000
                ));
            }
        }
    }
    v
}

/// By the watcher: no worker process still executed a run the ledger called finished, and no run was executed
/// by two processes.
fn no_worker_outlives_its_run_nor_runs_in_two_processes(
    e: &Evidence<'_>,
    ledger: &Ledger<'_>,
    figures: &mut Figures,
) -> Vec<String> {
    let mut v = Vec::new();
    for (run, pids) in &e.watched.executions {
        if pids.len() > 1 && ledger.get(run).is_some() {
            v.push(format!("run {run} was seen executing in {} processes: {pids:?}", pids.len()));
        }
    }
    v.extend(e.watched.violations.iter().cloned());
    figures.watched = (e.watched.executions.keys().filter(|r| ledger.get(r).is_some()).count(), e.watched.scans);
    v
}
