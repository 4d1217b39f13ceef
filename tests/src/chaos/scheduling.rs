//! Scheduling under the chaos suite's faults: the catalogue's retry policies and pipeline, the schedules the
//! suite creates, the pipeline traffic (starts and cancels) beside the run traffic, and the invariants of
//! scheduling checked at the end: never two runs for one (schedule, fire time), every fire time recorded with
//! none lost (a daemon was always alive), no retry of a cancelled run and every retry by its policy, and no
//! pipeline step run twice or skipped.

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use scrinalia_shared::{
    ApiStore, Catalogue, FireOutcome, MissedPolicy, OverlapPolicy, PipelineRunView, PipelineState, RetryOn,
    RetryPolicy, Run, RunState, ScheduleFire, ScheduleInput, catalogue::PipelineSpec, config::SettingsFile,
};
use serde_json::json;
use uuid::Uuid;

/// The pipeline the suite runs (by hand and by a schedule).
pub const PIPELINE: &str = "chaos-pipeline";
/// Probes retried by their catalogue policy.
pub const RETRIED: [&str; 3] = ["probe-10", "probe-11", "probe-12"];
/// The suite's schedules: name, target, cron, period in seconds, overlap, missed.
const SCHEDULES: [(&str, &str, &str, i64, OverlapPolicy, MissedPolicy); 3] = [
    ("chaos-each-second", "probe-11", "* * * * * *", 1, OverlapPolicy::Skip, MissedPolicy::Skip),
    ("chaos-queue", "probe-12", "*/2 * * * * *", 2, OverlapPolicy::Queue, MissedPolicy::Once),
    ("chaos-pipeline", PIPELINE, "*/5 * * * * *", 5, OverlapPolicy::Skip, MissedPolicy::Skip),
];

/// The retry policy of the retried probes.
pub fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_delay_seconds: 0.3,
        factor: 2.0,
        max_delay_seconds: 2.0,
        jitter: 0.2,
        on: vec![RetryOn::Failed, RetryOn::Interrupted],
        resume: false,
    }
}

/// Adds the retry policies and the pipeline to the cluster's configuration.
pub fn configure(file: &mut SettingsFile) {
    for worker in file.workers.iter_mut().filter(|w| RETRIED.contains(&w.name.as_str())) {
        worker.retry = Some(policy());
    }
    file.pipelines.push(PipelineSpec {
        name: PIPELINE.into(),
        description: Some("three probes under faults".into()),
        steps: vec!["probe-7".into(), "probe-8".into(), "probe-9".into()],
        tags: Vec::new(),
    });
}

/// Creates the suite's schedules (probe-11's runs fail, so each is retried while the schedule keeps firing).
pub async fn create_schedules(db: &ApiStore, catalogue: &Catalogue) {
    for (name, target, cron, _, overlap, missed) in SCHEDULES {
        let pipeline = target == PIPELINE;
        let arguments = match target {
            "probe-11" => json!({"options": {"duration_ms": 300, "exit_code": 3}}),
            _ if pipeline => json!({}),
            _ => json!({"options": {"duration_ms": 400}}),
        };
        let input = ScheduleInput {
            name: name.into(),
            worker: (!pipeline).then(|| target.into()),
            pipeline: pipeline.then(|| target.into()),
            cron: cron.into(),
            arguments: Some(arguments),
            overlap: Some(overlap),
            missed: Some(missed),
            reason: Some("the chaos suite".into()),
            ..ScheduleInput::default()
        };
        db.create_schedule(catalogue, "chaos", &input).await.unwrap_or_else(|e| panic!("schedule {name}: {e}"));
    }
}

/// Pauses the suite's schedules (before the cluster settles), retrying through cut connections.
pub async fn pause_schedules(db: &ApiStore) {
    for (name, ..) in SCHEDULES {
        for _ in 0..20 {
            if db.set_schedule_enabled(name, false, "chaos", Some("the faults are over")).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Starts the pipeline (three times in four) or cancels its latest run, every 1–3 s until `end`.
pub async fn pipeline_traffic(db: ApiStore, catalogue: Catalogue, seed: u64, end: Instant) {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(3));
    let mut latest: Option<Uuid> = None;
    while Instant::now() < end {
        if latest.is_none() || rng.random_bool(0.75) {
            // A run in flight already (409) and a cut connection are part of the weather.
            if let Ok(view) = db.start_pipeline(&catalogue, PIPELINE, "chaos", &json!({}), &[]).await {
                latest = Some(view.pipeline_run.id);
            }
        } else if let Some(id) = latest {
            let _ = db.cancel_pipeline_run(id, "chaos").await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..=3_000))).await;
    }
}

/// What the scheduling invariants look at, read at the end.
pub struct Scheduled {
    /// Each schedule's fires, oldest first.
    pub fires: BTreeMap<String, Vec<ScheduleFire>>,
    /// Every pipeline run with its steps' runs.
    pub pipelines: Vec<PipelineRunView>,
}

impl Scheduled {
    /// Reads the fires and the pipeline runs.
    pub async fn read(db: &ApiStore) -> Self {
        let mut fires = BTreeMap::new();
        for (name, ..) in SCHEDULES {
            let mut list = db.schedule_fires(name, 1000).await.expect("the fires");
            list.reverse();
            fires.insert(name.to_owned(), list);
        }
        let mut pipelines = Vec::new();
        for run in db.pipeline_runs(Some(PIPELINE), 500).await.expect("the pipeline runs") {
            pipelines.push(db.pipeline_run(run.id).await.expect("read").expect("the pipeline run"));
        }
        Self { fires, pipelines }
    }
}

/// Whether a run was made by the scheduler rather than by a 201: a fire, a retry or a pipeline step.
pub fn is_scheduled(run: &Run) -> bool {
    run.schedule_id.is_some() || run.retry_of.is_some() || run.pipeline_run_id.is_some()
}

/// Never two runs for one (schedule, fire time); every requested fire has its run and every fired run its
/// fire; each schedule's fire times follow one another by its period, none lost and none missed (a daemon was
/// alive throughout).
pub fn never_two_runs_for_one_fire_and_no_fire_lost(runs: &[Run], s: &Scheduled) -> Vec<String> {
    let mut v = Vec::new();
    let mut by_fire: HashMap<(Uuid, chrono::DateTime<chrono::Utc>), Vec<Uuid>> = HashMap::new();
    for r in runs {
        if let (Some(schedule), Some(at)) = (r.schedule_id, r.fire_at) {
            by_fire.entry((schedule, at)).or_default().push(r.id);
        }
    }
    for ((schedule, at), ids) in &by_fire {
        if ids.len() > 1 {
            v.push(format!("schedule {schedule} has {} runs for its fire at {at}: {ids:?}", ids.len()));
        }
    }
    for (name, _, _, period, ..) in SCHEDULES {
        let fires = &s.fires[name];
        if fires.len() < 3 {
            v.push(format!("schedule {name} fired only {} times", fires.len()));
        }
        for pair in fires.windows(2) {
            if pair[1].fire_at - pair[0].fire_at != chrono::Duration::seconds(period) {
                v.push(format!("schedule {name}: fire times lost between {} and {}", pair[0].fire_at, pair[1].fire_at));
            }
        }
        for fire in fires {
            match fire.outcome {
                FireOutcome::Missed => v.push(format!("schedule {name}: the fire at {} was missed", fire.fire_at)),
                FireOutcome::Requested if name != PIPELINE => {
                    let ran = by_fire.get(&(fire.schedule_id, fire.fire_at));
                    if ran.is_none_or(|ids| fire.run_id.is_none_or(|id| !ids.contains(&id))) {
                        v.push(format!("schedule {name}: the requested fire at {} has no run", fire.fire_at));
                    }
                }
                FireOutcome::Skipped if fire.blocked_by.is_none() && fire.reason.is_none() => {
                    v.push(format!("schedule {name}: the fire at {} was skipped without a reason", fire.fire_at))
                }
                _ => {}
            }
        }
    }
    v
}

/// No retry of a run whose cancellation was asked for; every retry is the next attempt of the run before, of
/// the same worker and arguments, within the policy's attempts, and not claimed before its backoff ended.
pub fn no_retry_of_a_cancelled_run_and_every_retry_by_its_policy(runs: &[Run]) -> Vec<String> {
    let by_id: HashMap<Uuid, &Run> = runs.iter().map(|r| (r.id, r)).collect();
    let mut v = Vec::new();
    for retry in runs.iter().filter(|r| r.retry_of.is_some()) {
        let Some(before) = retry.retry_of.and_then(|id| by_id.get(&id)) else {
            v.push(format!("retry {} retries a run that is not in the ledger", retry.id));
            continue;
        };
        if before.state == RunState::Cancelled || before.cancel_requested_at.is_some() {
            v.push(format!("run {} was retried by {} although it was cancelled", before.id, retry.id));
        }
        if !matches!(before.state, RunState::Failed | RunState::Interrupted) {
            v.push(format!("run {} was retried by {} although it ended {}", before.id, retry.id, before.state));
        }
        if retry.attempt != before.attempt + 1 || retry.worker != before.worker || retry.arguments != before.arguments {
            v.push(format!("retry {} is not the next attempt of run {} with its arguments", retry.id, before.id));
        }
        if i64::from(retry.attempt) > i64::from(policy().max_attempts) {
            v.push(format!(
                "retry {} is attempt {}, past the policy's {}",
                retry.id,
                retry.attempt,
                policy().max_attempts
            ));
        }
        if let (Some(claimed), Some(not_before)) = (retry.claimed_at, retry.not_before)
            && claimed < not_before
        {
            v.push(format!("retry {} was claimed at {claimed}, before its backoff ended at {not_before}", retry.id));
        }
    }
    v
}

/// No pipeline step run twice or skipped: each step's runs are one run and its retries; a step starts only
/// after the step before succeeded; a pipeline run ends as its steps did.
pub fn no_pipeline_step_run_twice_or_skipped(s: &Scheduled) -> Vec<String> {
    let mut v = Vec::new();
    for view in &s.pipelines {
        let p = &view.pipeline_run;
        let mut steps: BTreeMap<i32, Vec<&Run>> = BTreeMap::new();
        for run in &view.runs {
            steps.entry(run.pipeline_step.unwrap_or(-1)).or_default().push(run);
        }
        let indices: Vec<i32> = steps.keys().copied().collect();
        let expected: Vec<i32> = (0..i32::try_from(indices.len()).unwrap_or(0)).collect();
        if indices != expected {
            v.push(format!("pipeline run {} has steps {indices:?}: one was skipped", p.id));
        }
        let mut previous_success: Option<&Run> = None;
        for (step, runs) in &steps {
            let firsts = runs.iter().filter(|r| r.retry_of.is_none()).count();
            if firsts != 1 {
                v.push(format!("pipeline run {}: step {} was requested {firsts} times", p.id, step + 1));
            }
            let succeeded: Vec<&&Run> = runs.iter().filter(|r| r.state == RunState::Succeeded).collect();
            if succeeded.len() > 1 {
                v.push(format!("pipeline run {}: step {} succeeded {} times", p.id, step + 1, succeeded.len()));
            }
            if let (Some(before), Some(first)) = (previous_success, runs.first())
                && before.finished_at.is_some_and(|f| first.requested_at < f)
            {
                v.push(format!("pipeline run {}: step {} started before step {} ended", p.id, step + 1, step));
            }
            if *step + 1 < i32::try_from(steps.len()).unwrap_or(0) && succeeded.is_empty() {
                v.push(format!(
                    "pipeline run {}: step {} went on although step {} did not succeed",
                    p.id,
                    step + 2,
                    step + 1
                ));
            }
            previous_success = succeeded.first().map(|r| **r);
        }
        let all_steps = p.steps.len();
        match p.state {
            PipelineState::Running => v.push(format!("pipeline run {} is still running", p.id)),
            PipelineState::Succeeded if steps.len() != all_steps || previous_success.is_none() => {
                v.push(format!("pipeline run {} succeeded without every step succeeding", p.id))
            }
            PipelineState::Failed | PipelineState::Cancelled if p.error.is_none() => {
                v.push(format!("pipeline run {} ended {} without a reason", p.id, p.state))
            }
            _ => {}
        }
    }
    v
}

/// Waits until no pipeline run is running, at most `timeout`; returns those still running.
pub async fn wait_pipelines_idle(db: &ApiStore, timeout: Duration) -> Vec<Uuid> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(runs) = db.pipeline_runs(Some(PIPELINE), 500).await {
            let running: Vec<Uuid> = runs.iter().filter(|r| r.state == PipelineState::Running).map(|r| r.id).collect();
            if running.is_empty() || Instant::now() > deadline {
                return running;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
