//! Shared resources under the chaos suite's faults: two resources of the catalogue, each shared by several probes
//! (among them a retried probe, a pipeline step and the probes resumed by their policy), the sampler of
//! `run_resources` that the watcher runs with its scans, and the invariant that a resource is never over its
//! capacity, checked two ways: by the probes' own records of when they executed and by every sample of
//! `run_resources`; and that nothing is held once every run has ended.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    fmt,
};

use scrinalia_shared::{ResourceScope, ResourceSpec, Run, config::SettingsFile};
use uuid::Uuid;

use crate::daemon_harness::{ProbeEvent, at_ns};

/// The suite's resources: name, capacity, the workers that hold a slot of it while they run. `chaos-model` has
/// one slot for three probes, so most of their runs wait for it; `chaos-pool` has two for four probes, so that
/// "at most the capacity" is more than "one at a time". Each worker holds one resource: a run that holds two is
/// the bench's and the daemon tests' business, and would tie the two figures together.
pub const RESOURCES: [(&str, u32, &[&str]); 2] = [
    ("chaos-model", 1, &["probe-4", "probe-5", "probe-13"]),
    ("chaos-pool", 2, &["probe-6", "probe-8", "probe-10", "probe-14"]),
];

/// The daemon-scoped resource of `deploy/demo.toml` that its embeddings worker holds: each of the suite's daemons
/// offers one (`daemon.resources`, in the daemons' settings of [`super::setup`]). Its slots are numbered per
/// daemon and kept apart by the unique index on (daemon, resource, slot); a sample of `run_resources` counts it
/// only as held or not.
pub const DEMO_GPU: &str = "gpu";

/// Adds the resources to the cluster's configuration and makes their workers hold them; declares the demo's
/// daemon-scoped `gpu`.
pub fn configure(file: &mut SettingsFile) {
    let gpu = Some("a GPU of the daemon's host (deploy/demo.toml)".to_owned());
    file.resources.push(ResourceSpec {
        name: DEMO_GPU.into(),
        capacity: 0,
        description: gpu,
        scope: ResourceScope::Daemon,
        starts_per_minute: None,
        preempt_after_seconds: None,
        preempt_grace_seconds: None,
    });
    for (name, capacity, workers) in RESOURCES {
        let description = Some(format!("the chaos suite's {capacity}-slot resource"));
        // The one-slot resource preempts: its resumed probe (priority 10) yields to the others (50, 90).
        let preempts = name == PREEMPTED_RESOURCE;
        file.resources.push(ResourceSpec {
            name: name.into(),
            capacity,
            description,
            scope: Default::default(),
            starts_per_minute: None,
            preempt_after_seconds: preempts.then_some(1),
            preempt_grace_seconds: preempts.then_some(5),
        });
        for worker in file.workers.iter_mut().filter(|w| workers.contains(&w.name.as_str())) {
            worker.resources.push(name.into());
        }
    }
    for worker in &mut file.workers {
        match worker.name.as_str() {
            PREEMPTIBLE => (worker.preemptible, worker.priority) = (true, Some(10)),
            URGENT => worker.priority = Some(90),
            _ => {}
        }
    }
}

/// The resource whose holders may be preempted, the preemptible probe that holds it (a resumed probe: its runs
/// are long and checkpoint), and a probe of high priority that waits for it.
pub const PREEMPTED_RESOURCE: &str = "chaos-model";
/// See [`PREEMPTED_RESOURCE`].
pub const PREEMPTIBLE: &str = "probe-13";
/// See [`PREEMPTED_RESOURCE`].
pub const URGENT: &str = "probe-5";

/// The resource `worker` holds, with its capacity.
fn resource_of(worker: &str) -> Option<(&'static str, u32)> {
    RESOURCES.iter().find(|(_, _, workers)| workers.contains(&worker)).map(|(name, capacity, _)| (*name, *capacity))
}

/// A realtime ns as a time people read.
fn when(ns: i128) -> String {
    let t = i64::try_from(ns).map(chrono::DateTime::from_timestamp_nanos).ok();
    t.map_or_else(|| ns.to_string(), |t| t.format("%H:%M:%S%.3f").to_string())
}

/// What the watcher's samples of `run_resources` saw.
#[derive(Debug, Default)]
pub struct Holds {
    /// Samples taken (a read through a cut connection is no sample).
    pub samples: u64,
    /// Every run seen holding a slot, by resource.
    pub seen: BTreeMap<String, BTreeSet<Uuid>>,
    /// The most holders one sample saw, by resource.
    pub most: BTreeMap<String, usize>,
    /// Samples with more holders than the capacity, or holders of a resource the catalogue does not have.
    pub violations: Vec<String>,
    /// What was held once every run had ended (`None`: it could not be read).
    pub at_end: Option<Vec<(String, Uuid)>>,
    /// The holder sets already reported, so that one excursion is one sentence, not one per sample.
    reported: HashSet<(String, Vec<Uuid>)>,
}

impl Holds {
    /// Takes in one read of `run_resources` (one statement, so one snapshot of it), made at `at_ns`.
    pub fn sample(&mut self, holders: &[(String, Uuid)], at_ns: i128) {
        self.samples += 1;
        let mut by_resource: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
        for (resource, run) in holders {
            by_resource.entry(resource).or_default().push(*run);
            self.seen.entry(resource.clone()).or_default().insert(*run);
        }
        for (resource, runs) in by_resource {
            let most = self.most.entry(resource.to_owned()).or_default();
            *most = (*most).max(runs.len());
            if resource == DEMO_GPU {
                continue;
            }
            let capacity = RESOURCES.iter().find(|(name, ..)| *name == resource).map(|(_, c, _)| *c as usize);
            if capacity.is_some_and(|c| runs.len() <= c) || !self.reported.insert((resource.to_owned(), runs.clone())) {
                continue;
            }
            self.violations.push(match capacity {
                Some(c) => format!(
                    "run_resources held resource {resource} (capacity {c}) for {} runs at once at {}: {runs:?}",
                    runs.len(),
                    when(at_ns)
                ),
                None => format!("run_resources holds {resource}, which the catalogue does not have, for {runs:?}"),
            });
        }
    }
}

/// One resource's figures.
#[derive(Debug, Default, Clone)]
pub struct ResourceFigures {
    /// Its capacity.
    pub capacity: u32,
    /// Runs of its workers that executed, by the probes' records.
    pub executions: usize,
    /// The most of them executing at once.
    pub most_executing: usize,
    /// Runs seen holding it in `run_resources`.
    pub holds_sampled: usize,
    /// The most holders one sample saw.
    pub most_sampled: usize,
}

impl fmt::Display for ResourceFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capacity {}: {} probe executions (at most {} at once), {} holders sampled (at most {} at once)",
            self.capacity, self.executions, self.most_executing, self.holds_sampled, self.most_sampled
        )
    }
}

/// One execution of a run by a probe that holds a resource: from its start line to its end line or, for one
/// that wrote none (SIGKILL, SIGABRT), to its run's end in the ledger, which released the slot.
struct Span<'a> {
    run: &'a str,
    worker: &'a str,
    from: i128,
    until: i128,
}

/// A resource never has more holders than its capacity, by the probes' own records: at no moment do more runs
/// of the workers that share it execute than it has slots. A holder's slot is released in the transaction that
/// ends its run, after its worker exited, and the next holder's worker starts only after that claim commits, so
/// no tolerance is needed.
pub fn no_resource_over_capacity_by_the_probes(
    runs: &[Run],
    events: &[ProbeEvent],
    figures: &mut BTreeMap<String, ResourceFigures>,
) -> Vec<String> {
    let ledger: HashMap<String, &Run> = runs.iter().map(|r| (r.id.to_string(), r)).collect();
    let (mut starts, mut ends): (HashMap<&str, &ProbeEvent>, HashMap<&str, i128>) = Default::default();
    for e in events.iter().filter(|e| e.verb == "run" && resource_of(&e.worker).is_some()) {
        let Some(run) = e.run_id.as_deref() else { continue };
        if e.event == "start" {
            starts.entry(run).and_modify(|s| *s = if e.at_ns < s.at_ns { e } else { s }).or_insert(e);
        } else if e.event == "end" {
            let end = ends.entry(run).or_insert(e.at_ns);
            *end = (*end).max(e.at_ns);
        }
    }
    let mut spans: BTreeMap<&str, Vec<Span<'_>>> = BTreeMap::new();
    for (run, start) in &starts {
        let Some((resource, _)) = resource_of(&start.worker) else { continue };
        let finished = ledger.get(*run).and_then(|r| r.finished_at).map(at_ns);
        // An end before the start (a run the ledger ended before its probe started) is another invariant's
        // violation; here it would leave the execution open forever.
        let until = ends.get(run).copied().or(finished).unwrap_or(i128::MAX).max(start.at_ns);
        spans.entry(resource).or_default().push(Span { run, worker: &start.worker, from: start.at_ns, until });
    }
    let mut v = Vec::new();
    for (resource, capacity, _) in RESOURCES {
        let list = spans.remove(resource).unwrap_or_default();
        // Ends sort before starts at one instant: a slot released then is free for the start.
        let mut edges: Vec<(i128, bool, usize)> =
            list.iter().enumerate().flat_map(|(i, s)| [(s.from, true, i), (s.until, false, i)]).collect();
        edges.sort_unstable();
        let (mut executing, mut most, mut over) = (BTreeSet::new(), 0, false);
        for (at, starts, i) in edges {
            if !starts {
                executing.remove(&i);
                over = executing.len() > capacity as usize;
                continue;
            }
            executing.insert(i);
            most = most.max(executing.len());
            if executing.len() > capacity as usize && !over {
                over = true;
                let who: Vec<String> = executing
                    .iter()
                    .map(|&j| {
                        let s = &list[j];
                        let until = if s.until == i128::MAX { "never ended".to_owned() } else { when(s.until) };
                        format!("run {} of {} ({} → {until})", s.run, s.worker, when(s.from))
                    })
                    .collect();
                v.push(format!(
                    "resource {resource} (capacity {capacity}) had {} holders executing at once at {} by the probes' \
                     records: {}",
                    executing.len(),
                    when(at),
                    who.join(", ")
                ));
            }
        }
        let figure = figures.entry(resource.to_owned()).or_default();
        (figure.capacity, figure.executions, figure.most_executing) = (capacity, list.len(), most);
    }
    v
}

/// A resource never has more holders than its capacity, by every sample of `run_resources` the watcher took, and
/// nothing is held once every run has ended (a slot left held would starve its workers forever).
pub fn no_resource_over_capacity_in_run_resources(
    holds: &Holds,
    figures: &mut BTreeMap<String, ResourceFigures>,
) -> Vec<String> {
    let mut v = holds.violations.clone();
    for (resource, capacity, _) in RESOURCES {
        let figure = figures.entry(resource.to_owned()).or_default();
        figure.capacity = capacity;
        figure.holds_sampled = holds.seen.get(resource).map_or(0, BTreeSet::len);
        figure.most_sampled = holds.most.get(resource).copied().unwrap_or(0);
    }
    if holds.samples == 0 {
        v.push("the watcher took no sample of run_resources".to_owned());
    }
    match &holds.at_end {
        None => v.push("run_resources could not be read once every run had ended".to_owned()),
        Some(left) => v.extend(
            left.iter().map(|(resource, run)| format!("run {run} still holds {resource} after every run ended")),
        ),
    }
    v
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(id: Uuid, worker: &str) -> Run {
        serde_json::from_value(json!({
            "id": id, "worker": worker, "state": "succeeded", "requested_by": "t",
            "requested_at": "2030-01-01T00:00:00Z", "arguments": {}, "attempt": 1,
            "config": {"engine_configurable": false, "options": {}, "timeout_seconds": 1},
        }))
        .expect("a run")
    }

    fn line(event: &str, worker: &str, run: Uuid, at_ns: i128) -> ProbeEvent {
        serde_json::from_value(json!({"event": event, "worker": worker, "verb": "run", "run_id": run, "pid": 1,
            "at_ns": at_ns}))
        .expect("a probe line")
    }

    #[test]
    fn two_probes_executing_at_once_on_one_slot_are_named() {
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let runs = [run(a, "probe-4"), run(b, "probe-5"), run(c, "probe-13")];
        // b starts the instant a ends (no overlap); c starts while b still executes.
        let events = [
            line("start", "probe-4", a, 10),
            line("end", "probe-4", a, 20),
            line("start", "probe-5", b, 20),
            line("end", "probe-5", b, 40),
            line("start", "probe-13", c, 30),
        ];
        let mut figures = BTreeMap::new();
        let v = no_resource_over_capacity_by_the_probes(&runs, &events, &mut figures);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("resource chaos-model (capacity 1) had 2 holders"), "{}", v[0]);
        assert!(v[0].contains(&b.to_string()) && v[0].contains(&c.to_string()) && !v[0].contains(&a.to_string()));
        assert_eq!((figures["chaos-model"].executions, figures["chaos-model"].most_executing), (3, 2));
    }

    #[test]
    fn a_sample_over_capacity_is_one_sentence_and_a_slot_left_held_another() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut holds = Holds::default();
        let over = [("chaos-model".to_owned(), a), ("chaos-model".to_owned(), b)];
        holds.sample(&over, 0);
        holds.sample(&over, 1);
        holds.sample(&[("chaos-pool".to_owned(), a), ("chaos-pool".to_owned(), b)], 2);
        holds.at_end = Some(vec![("chaos-pool".to_owned(), b)]);
        let v = no_resource_over_capacity_in_run_resources(&holds, &mut BTreeMap::new());
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("resource chaos-model (capacity 1) for 2 runs at once"), "{}", v[0]);
        assert_eq!(v[1], format!("run {b} still holds chaos-pool after every run ended"));
    }
}
