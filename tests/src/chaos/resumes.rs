//! Checkpoints and resumes under the chaos suite's faults: two probes that always checkpoint and whose retry
//! policy resumes an interrupted run on its own, the operator's resumes and restarts of interrupted and failed
//! runs through the API, and the invariants checked at the end: a resumed run starts from its predecessor's last
//! checkpoint (which nothing overwrote after the predecessor ended), a restart and every other run from none, a
//! run is resumed or restarted at most once, and no resume the policy owes is lost.

use std::collections::{BTreeMap, HashMap, HashSet};

use rand::{Rng, seq::IndexedRandom};
use reqwest::Method;
use scrinalia_shared::{FollowKind, RetryOn, RetryPolicy, Run, RunState, config::SettingsFile};
use serde_json::Value;
use uuid::Uuid;

use super::{Apis, Created, Steer};
use crate::{
    api_harness::{OPERATOR, VIEWER},
    daemon_harness::{ProbeEvent, at_ns},
};

/// The probes that checkpoint in every request and that their policy resumes when interrupted.
pub const RESUMED: [&str; 2] = ["probe-13", "probe-14"];

/// How much later than its run's end a checkpoint may be stored: `finished_at` is the ending transaction's
/// start (PostgreSQL's `now()`), and a checkpoint statement that took the row's lock first commits between that
/// start and the ending update, so it may be stamped a little later. An old owner's write after recovery (a
/// frozen daemon thawed) would come seconds later.
const STORED_AFTER_END_NS: i128 = 500_000_000;

/// The retry policy of the resumed probes: interruptions only (a failure is steered, and starts over anyway),
/// resumed from the last checkpoint; as many attempts as the scheduling invariants allow a retry.
pub fn policy() -> RetryPolicy {
    RetryPolicy { on: vec![RetryOn::Interrupted], resume: true, ..super::scheduling::policy() }
}

/// Gives the resumed probes their policy.
pub fn configure(file: &mut SettingsFile) {
    for worker in file.workers.iter_mut().filter(|w| RESUMED.contains(&w.name.as_str())) {
        worker.retry = Some(policy());
    }
}

/// How the arguments of a run steer its worker, for a run the suite did not request itself (a retry, a fire).
pub fn steer_of(worker: &str, options: &Value) -> Steer {
    let duration = options["duration_ms"].as_i64().unwrap_or(200);
    match () {
        () if !worker.starts_with("probe-") => Steer::Demo,
        () if options["exit_code"] == 3 => Steer::Fails,
        () if options["crash"] == true => Steer::Crashes,
        () if options["ignore_sigterm"] == true => Steer::IgnoresSigterm,
        () if duration >= 3_000 => Steer::Long,
        () => Steer::Short,
    }
}

/// The operator continues one ended run through API process `api`: one of the latest interrupted (three times
/// in four) or failed runs that it did not try to continue before (`tried`), one with a checkpoint when there is
/// one (three times in four), resumed when it has a checkpoint (four times in five), else restarted. A 409 (the
/// policy or a fire continued it already, its worker is busy) is part of the weather. Returns the new run on a
/// 201, steered as the run it continues.
pub async fn continue_one(
    apis: &Apis,
    api: usize,
    rng: &mut impl Rng,
    steers: &HashMap<Uuid, Steer>,
    tried: &mut HashSet<String>,
) -> Option<Created> {
    let state = if rng.random_bool(0.75) { "interrupted" } else { "failed" };
    let (status, page) = apis.call(api, Method::GET, &format!("/api/runs?state={state}&limit=30"), VIEWER, None).await;
    let listed = page["runs"].as_array().filter(|_| status == Some(200))?;
    let fresh: Vec<&Value> = listed.iter().filter(|r| r["id"].as_str().is_some_and(|id| !tried.contains(id))).collect();
    let checkpointed: Vec<&Value> = fresh.iter().copied().filter(|r| !r["checkpoint"].is_null()).collect();
    let pool = if !checkpointed.is_empty() && rng.random_bool(0.75) { checkpointed } else { fresh };
    let run = *pool.choose(rng)?;
    tried.insert(run["id"].as_str()?.to_owned());
    let id = run["id"].as_str().and_then(|s| Uuid::parse_str(s).ok())?;
    let how = if !run["checkpoint"].is_null() && rng.random_bool(0.8) { "resume" } else { "restart" };
    let (status, new) = apis.call(api, Method::POST, &format!("/api/runs/{id}/{how}"), OPERATOR, None).await;
    let new_id = new["id"].as_str().and_then(|s| Uuid::parse_str(s).ok()).filter(|_| status == Some(201))?;
    let worker = new["worker"].as_str()?.to_owned();
    let steer = steers.get(&id).copied().unwrap_or_else(|| steer_of(&worker, &new["arguments"]["options"]));
    Some(Created { id: new_id, worker, steer })
}

/// Each run's first probe start line.
fn first_starts(events: &[ProbeEvent]) -> HashMap<&str, &ProbeEvent> {
    let mut starts: HashMap<&str, &ProbeEvent> = HashMap::new();
    for e in events.iter().filter(|e| e.verb == "run" && e.event == "start") {
        if let Some(run) = e.run_id.as_deref() {
            starts.entry(run).and_modify(|s| *s = if e.at_ns < s.at_ns { e } else { s }).or_insert(e);
        }
    }
    starts
}

fn json(v: Option<&Value>) -> String {
    v.map_or_else(|| "none".to_owned(), Value::to_string)
}

/// A resumed run starts from its predecessor's last checkpoint: for every run that follows another as a resume,
/// the predecessor ended interrupted or failed with a checkpoint that was not stored after its end; the
/// checkpoint its worker was given (the probe's start line) is that last checkpoint; and the run's own row
/// carries it until the run stores one of its own (which covers the demo workers, whose start is not recorded).
pub fn a_resumed_run_starts_from_its_predecessors_last_checkpoint(
    runs: &[Run],
    events: &[ProbeEvent],
    figures: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let ledger: HashMap<Uuid, &Run> = runs.iter().map(|r| (r.id, r)).collect();
    let starts = first_starts(events);
    let mut v = Vec::new();
    let mut count = |key: &str| *figures.entry(key.to_owned()).or_default() += 1;
    for r in runs.iter().filter(|r| r.follows_as == Some(FollowKind::Resume)) {
        count(if r.retry_of.is_some() { "resumes by the policy" } else { "resumes by the operator" });
        let Some(p) = r.follows.and_then(|id| ledger.get(&id)) else {
            v.push(format!("run {} of {} resumes {:?}, which is not in the ledger", r.id, r.worker, r.follows));
            continue;
        };
        let (last, given) = (p.checkpoint.as_ref(), r.checkpoint.as_ref());
        if !matches!(p.state, RunState::Interrupted | RunState::Failed) || last.is_none() {
            v.push(format!(
                "run {} of {} resumes run {}, which ended {} with checkpoint {}",
                r.id,
                r.worker,
                p.id,
                p.state,
                json(last)
            ));
            continue;
        }
        if let (Some(stored), Some(ended)) = (p.checkpoint_at, p.finished_at)
            && at_ns(stored) > at_ns(ended) + STORED_AFTER_END_NS
        {
            v.push(format!(
                "run {} of {} ({}) had its checkpoint overwritten {} ms after it ended, with {}; run {} resumes it",
                p.id,
                p.worker,
                p.state,
                (at_ns(stored) - at_ns(ended)) / 1_000_000,
                json(last),
                r.id
            ));
        }
        if p.finished_at.is_none_or(|ended| r.requested_at < ended) {
            v.push(format!("run {} of {} resumes run {} before it ended", r.id, r.worker, p.id));
        }
        match (r.checkpoint_at, p.checkpoint_at) {
            (Some(own), Some(theirs)) if own == theirs && given != last => v.push(format!(
                "run {} of {} carries checkpoint {} from run {}, whose last checkpoint is {}",
                r.id,
                r.worker,
                json(given),
                p.id,
                json(last)
            )),
            (Some(own), Some(theirs)) if own >= theirs => {}
            _ => v.push(format!(
                "run {} of {} resumes run {} (checkpoint {} of {:?}) but carries checkpoint {} of {:?}: older or none",
                r.id,
                r.worker,
                p.id,
                json(last),
                p.checkpoint_at,
                json(given),
                r.checkpoint_at
            )),
        }
        if let Some(start) = starts.get(r.id.to_string().as_str()) {
            count("resumes checked against their worker's start line");
            if start.checkpoint.as_ref() != last {
                v.push(format!(
                    "run {} of {} started from checkpoint {}, but run {} it resumes last stored {}",
                    r.id,
                    r.worker,
                    json(start.checkpoint.as_ref()),
                    p.id,
                    json(last)
                ));
            }
        }
    }
    v
}

/// A run is resumed or restarted at most once; a restart's worker starts from no checkpoint, told which run it
/// starts over, and so does every run that resumes nothing (a first run, a plain retry, a fire).
pub fn a_run_is_continued_once_and_only_a_resume_from_a_checkpoint(
    runs: &[Run],
    events: &[ProbeEvent],
    figures: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let starts = first_starts(events);
    let mut v = Vec::new();
    let mut successors: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
    for r in runs {
        if let (Some(p), Some(how @ (FollowKind::Resume | FollowKind::Restart))) = (r.follows, r.follows_as) {
            successors.entry(p).or_default().push(format!("run {} ({how})", r.id));
        }
        if r.follows_as == Some(FollowKind::Restart) {
            *figures.entry("restarts by the operator".into()).or_default() += 1;
        }
        let Some(start) = starts.get(r.id.to_string().as_str()) else { continue };
        if r.follows_as != Some(FollowKind::Resume) && start.checkpoint.is_some() {
            v.push(format!(
                "run {} of {} ({}) resumes nothing but its worker started from checkpoint {}",
                r.id,
                r.worker,
                r.follows_as.map_or("no continuation".to_owned(), |k| k.to_string()),
                json(start.checkpoint.as_ref())
            ));
        }
        let restart_of = r.follows.filter(|_| r.follows_as == Some(FollowKind::Restart)).map(|p| p.to_string());
        if start.restart_of != restart_of {
            v.push(format!(
                "run {} of {}: its worker was told it restarts run {:?}, the ledger says it restarts {restart_of:?}",
                r.id, r.worker, start.restart_of
            ));
        }
    }
    for (p, list) in successors.iter().filter(|(_, list)| list.len() > 1) {
        v.push(format!("run {p} was continued {} times: {}", list.len(), list.join(", ")));
    }
    v
}

/// No resume the policy owes is lost: every interrupted run of a resumed probe that had a checkpoint, attempts
/// left and no cancellation asked for has its retry, and that retry resumes it.
pub fn no_resume_the_policy_owes_is_lost(runs: &[Run], figures: &mut BTreeMap<String, usize>) -> Vec<String> {
    let mut retries: HashMap<Uuid, &Run> = HashMap::new();
    for r in runs {
        if let Some(p) = r.retry_of {
            retries.insert(p, r);
        }
    }
    let mut v = Vec::new();
    let owed = runs.iter().filter(|p| {
        RESUMED.contains(&p.worker.as_str())
            && p.state == RunState::Interrupted
            && p.checkpoint.is_some()
            && p.cancel_requested_at.is_none()
            && !preempted(p)
            && policy().retries(p.attempt, RetryOn::Interrupted)
    });
    for p in owed {
        *figures.entry("resumes the policy owed".into()).or_default() += 1;
        match retries.get(&p.id) {
            None => v.push(format!(
                "run {} of {} was interrupted with checkpoint {} at attempt {}, and its policy's resume never came",
                p.id,
                p.worker,
                json(p.checkpoint.as_ref()),
                p.attempt
            )),
            Some(r) if r.follows != Some(p.id) || r.follows_as != Some(FollowKind::Resume) => v.push(format!(
                "run {} of {} retries interrupted run {} (checkpoint {}) without resuming it ({:?})",
                r.id,
                r.worker,
                p.id,
                json(p.checkpoint.as_ref()),
                r.follows_as
            )),
            Some(_) => {}
        }
    }
    v
}

/// Whether `run` ended by a preemption: it yielded (`preempted`), or was asked to and its daemon died first.
fn preempted(run: &Run) -> bool {
    run.end_reason == Some(scrinalia_shared::EndReason::Preempted)
        || (run.state == RunState::Interrupted && run.preempt_requested_at.is_some())
}

/// A preempted run is resumed exactly once, from its checkpoint, also when its daemon died while it yielded (it
/// ended `owner_lost`), and is never retried; a preemption is asked only of a run with a checkpoint, for a run of
/// higher priority.
pub fn a_preempted_run_is_resumed_exactly_once(runs: &[Run], figures: &mut BTreeMap<String, usize>) -> Vec<String> {
    let by_id: HashMap<Uuid, &Run> = runs.iter().map(|r| (r.id, r)).collect();
    let mut v = Vec::new();
    for p in runs.iter().filter(|r| r.preempt_requested_at.is_some()) {
        *figures.entry("preemptions asked".into()).or_default() += 1;
        if p.checkpoint.is_none() {
            v.push(format!("run {} of {} was asked to yield without a checkpoint", p.id, p.worker));
        }
        match p.preempted_for.and_then(|u| by_id.get(&u)) {
            Some(urgent) if urgent.priority > p.priority => {}
            other => v.push(format!(
                "run {} (priority {}) was preempted for {:?}, not a run of higher priority",
                p.id,
                p.priority,
                other.map(|u| (u.id, u.priority))
            )),
        }
    }
    for p in runs.iter().filter(|r| preempted(r)) {
        *figures.entry("preempted runs".into()).or_default() += 1;
        let resumes: Vec<&Run> =
            runs.iter().filter(|r| r.follows == Some(p.id) && r.follows_as == Some(FollowKind::Resume)).collect();
        if resumes.len() != 1 {
            v.push(format!(
                "preempted run {} of {} ({:?}) has {} resumes",
                p.id,
                p.worker,
                p.end_reason,
                resumes.len()
            ));
        }
        if let Some(retry) = runs.iter().find(|r| r.retry_of == Some(p.id)) {
            v.push(format!("preempted run {} was retried by {}", p.id, retry.id));
        }
        if p.end_reason == Some(scrinalia_shared::EndReason::OwnerLost) {
            *figures.entry("preempted runs whose daemon died mid-yield".into()).or_default() += 1;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(fields: Value) -> Run {
        let mut base = json!({
            "id": Uuid::now_v7(), "worker": "probe-13", "state": "succeeded", "requested_by": "t",
            "requested_at": "2030-01-01T00:00:10Z", "arguments": {}, "attempt": 1,
            "config": {"engine_configurable": false, "options": {}, "timeout_seconds": 1},
        });
        base.as_object_mut().expect("an object").extend(fields.as_object().expect("fields").clone());
        serde_json::from_value(base).expect("a run")
    }

    fn start(run: &Run, checkpoint: Value) -> ProbeEvent {
        serde_json::from_value(json!({"event": "start", "worker": run.worker, "verb": "run", "run_id": run.id,
            "pid": 1, "at_ns": 0, "checkpoint": checkpoint}))
        .expect("a probe line")
    }

    /// An interrupted run whose last checkpoint is step 3, stored `stored` (a time of 2030-01-01 00:00).
    fn cut(stored: &str) -> Run {
        run(json!({"state": "interrupted", "finished_at": "2030-01-01T00:00:05Z", "checkpoint": {"step": 3},
            "checkpoint_at": stored}))
    }

    #[test]
    fn a_resume_from_another_checkpoint_than_the_last_is_named() {
        let p = cut("2030-01-01T00:00:04Z");
        let resume = |given: Value| {
            run(json!({"follows": p.id, "follows_as": "resume", "checkpoint": given,
                "checkpoint_at": "2030-01-01T00:00:04Z"}))
        };
        let (good, bad) = (resume(json!({"step": 3})), resume(json!({"step": 2})));
        let runs = [p.clone(), good.clone(), bad.clone()];
        let events = [start(&good, json!({"step": 3})), start(&bad, json!({"step": 2}))];
        let mut figures = BTreeMap::new();
        let v = a_resumed_run_starts_from_its_predecessors_last_checkpoint(&runs, &events, &mut figures);
        assert_eq!(v.len(), 2, "the row and the start line of the bad one: {v:?}");
        assert!(v.iter().all(|s| s.contains(&bad.id.to_string()) && s.contains(&p.id.to_string())), "{v:?}");
        assert!(v[1].contains("started from checkpoint {\"step\":2}"), "{}", v[1]);
        assert_eq!(figures["resumes checked against their worker's start line"], 2);

        let late = cut("2030-01-01T00:00:07Z");
        let after = run(json!({"follows": late.id, "follows_as": "resume", "checkpoint": {"step": 3},
            "checkpoint_at": "2030-01-01T00:00:07Z"}));
        let v = a_resumed_run_starts_from_its_predecessors_last_checkpoint(&[late, after], &[], &mut figures);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("had its checkpoint overwritten 2000 ms after it ended"), "{}", v[0]);
    }

    #[test]
    fn a_run_continued_twice_or_a_restart_from_a_checkpoint_is_named() {
        let p = cut("2030-01-01T00:00:04Z");
        let restart = run(json!({"follows": p.id, "follows_as": "restart"}));
        let resume = run(json!({"follows": p.id, "follows_as": "resume"}));
        let events = [start(&restart, json!({"step": 3}))];
        let v = a_run_is_continued_once_and_only_a_resume_from_a_checkpoint(
            &[p.clone(), restart.clone(), resume],
            &events,
            &mut BTreeMap::new(),
        );
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("resumes nothing but its worker started from checkpoint"), "{}", v[0]);
        assert!(v[1].contains("told it restarts run None, the ledger says it restarts Some"), "{}", v[1]);
        assert!(v[2].starts_with(&format!("run {} was continued 2 times", p.id)), "{}", v[2]);
    }

    #[test]
    fn a_preempted_run_needs_exactly_one_resume_and_no_retry() {
        let urgent = run(json!({"priority": 90}));
        let preempted = |fields: Value| {
            let mut all = json!({"state": "interrupted", "end_reason": "preempted", "priority": 10,
                "checkpoint": {"step": 2}, "checkpoint_at": "2030-01-01T00:00:04Z",
                "preempt_requested_at": "2030-01-01T00:00:03Z", "preempted_for": urgent.id});
            all.as_object_mut().expect("an object").extend(fields.as_object().cloned().unwrap_or_default());
            run(all)
        };
        let (yielded, died) = (preempted(json!({})), preempted(json!({"end_reason": "owner_lost"})));
        let resume = run(json!({"follows": yielded.id, "follows_as": "resume"}));
        let mut figures = BTreeMap::new();
        let runs = [urgent.clone(), yielded.clone(), died.clone(), resume];
        let v = a_preempted_run_is_resumed_exactly_once(&runs, &mut figures);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains(&died.id.to_string()) && v[0].contains("has 0 resumes"), "{v:?}");
        assert_eq!(figures["preempted runs"], 2);
        let retried = run(json!({"retry_of": yielded.id}));
        let again = run(json!({"follows": died.id, "follows_as": "resume"}));
        let runs = [urgent, yielded, died, again, retried];
        let v = a_preempted_run_is_resumed_exactly_once(&runs, &mut figures);
        assert!(v.len() == 2 && v.iter().any(|s| s.contains("was retried by")), "{v:?}");
    }
}
