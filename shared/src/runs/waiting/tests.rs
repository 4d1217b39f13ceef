//! The reasons a pipeline's step waits, and a step's run naming its pipeline, from facts made up here.

use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

use super::WaitFacts;
use crate::{
    Catalogue, Daemon, DaemonState, EndReason, PipelineRunView, PipelineState, ResolvedConfig, Run, RunState, WaitCode,
};

fn run(worker: &str, state: RunState) -> Run {
    serde_json::from_value(json!({
        "id": Uuid::now_v7(), "worker": worker, "state": state, "requested_by": "ada", "requested_at": Utc::now(),
        "arguments": {}, "config": ResolvedConfig::empty(), "daemon_id": null, "claimed_at": null,
        "lease_expires_at": null, "started_at": null, "finished_at": null, "duration_ms": null, "exit_code": null,
        "end_reason": state.is_terminal().then_some(EndReason::ExitStatus), "error": null, "progress": null,
        "result": null, "cancel_requested_at": null, "cancel_requested_by": null, "trace_context": null,
        "log_key": null, "attempt": 1
    }))
    .expect("a run")
}

fn daemon(state: DaemonState) -> Daemon {
    serde_json::from_value(json!({
        "id": Uuid::now_v7(), "host": "h", "pid": 1, "version": "0", "capacity": 2, "workers": [], "labels": [],
        "started_at": Utc::now(), "heartbeat_at": Utc::now(), "heartbeat_age_seconds": 0.0, "runs_in_flight": 0,
        "state": state, "drain_requested_at": null, "drain_requested_by": null, "stopped_at": null
    }))
    .expect("a daemon")
}

fn facts(daemons: Vec<Daemon>, in_flight: Vec<Run>) -> WaitFacts {
    WaitFacts {
        now: Utc::now(),
        daemons,
        in_flight,
        holders: Vec::new(),
        next_starts: Vec::new(),
        not_preemptible: Default::default(),
    }
}

/// A pipeline run of steps a then b, at step 2 (b), with `current` as its current run.
fn at_b(current: Option<&Run>) -> PipelineRunView {
    let mut pipeline_run = crate::fixtures::pipeline(1);
    pipeline_run.steps = vec!["a".into(), "b".into()];
    pipeline_run.current_run = current.map(|r| r.id);
    PipelineRunView { pipeline_run, runs: current.into_iter().cloned().collect(), waiting: None }
}

#[test]
fn a_step_whose_worker_is_busy_names_the_run_and_why_that_run_waits() {
    let busy = run("b", RunState::Running);
    let facts = facts(vec![daemon(DaemonState::Active)], vec![busy.clone()]);
    let waiting = facts.pipeline(&Catalogue::default(), &at_b(None)).expect("a reason");
    assert_eq!((waiting.code, waiting.runs.as_slice()), (WaitCode::PipelineStep, [busy.id].as_slice()));
    assert!(waiting.message.starts_with("Step 2 (b) waits for worker b's run "), "{}", waiting.message);
    assert!(waiting.message.contains("(running) to end"), "{}", waiting.message);

    let queued = run("b", RunState::Queued);
    let facts = super::WaitFacts { daemons: Vec::new(), in_flight: vec![queued.clone()], ..facts };
    let waiting = facts.pipeline(&Catalogue::default(), &at_b(None)).expect("a reason");
    assert_eq!(waiting.runs, [queued.id]);
    assert!(waiting.message.contains("That run is queued: No daemon is running"), "{}", waiting.message);
}

#[test]
fn a_free_step_is_requested_by_the_settling_pass_once_a_daemon_runs() {
    let alive = facts(vec![daemon(DaemonState::Active)], Vec::new());
    let waiting = alive.pipeline(&Catalogue::default(), &at_b(None)).expect("a reason");
    assert_eq!(waiting.code, WaitCode::PipelineStep);
    assert!(waiting.message.contains("next settling pass"), "{}", waiting.message);
    let none = facts(vec![daemon(DaemonState::Gone)], Vec::new());
    let waiting = none.pipeline(&Catalogue::default(), &at_b(None)).expect("a reason");
    assert!(waiting.message.ends_with("no daemon is running."), "{}", waiting.message);
}

#[test]
fn a_queued_step_gives_its_own_reason_and_a_running_one_none() {
    let mut step = run("b", RunState::Queued);
    (step.pipeline_run_id, step.pipeline_step) = (Some(Uuid::now_v7()), Some(1));
    let facts = facts(Vec::new(), vec![step.clone()]);
    let view = at_b(Some(&step));
    let waiting = facts.pipeline(&Catalogue::default(), &view).expect("a reason");
    assert_eq!(waiting.code, WaitCode::NoDaemon);
    assert!(!waiting.message.contains("pipeline run"), "the pipeline's view needs no pointer to itself");
    // The run's own view says which pipeline waits for it.
    let own = facts.run(&Catalogue::default(), &step).expect("a reason");
    assert!(own.message.contains(" It is step 2 of pipeline run "), "{}", own.message);

    step.state = RunState::Running;
    assert!(facts.pipeline(&Catalogue::default(), &at_b(Some(&step))).is_none());
    let mut over = at_b(None);
    over.pipeline_run.state = PipelineState::Succeeded;
    assert!(facts.pipeline(&Catalogue::default(), &over).is_none());
}

/// A catalogue whose worker `embed` holds the daemon-scoped resource `gpu`.
fn gpu_catalogue() -> Catalogue {
    let workers = serde_json::from_value(json!([{"name": "embed", "command": ["e"], "resources": ["gpu"]}]));
    let mut catalogue = Catalogue { workers: workers.expect("a worker"), ..Catalogue::default() };
    catalogue.resources = vec![crate::ResourceSpec {
        name: "gpu".into(),
        capacity: 0,
        description: None,
        scope: crate::ResourceScope::Daemon,
        starts_per_minute: None,
        preempt_after_seconds: None,
        preempt_grace_seconds: None,
    }];
    catalogue
}

#[test]
fn a_daemon_scoped_resource_no_daemon_offers_is_named_with_its_setting() {
    let queued = run("embed", RunState::Queued);
    let plain = daemon(DaemonState::Active);
    let facts = facts(vec![plain.clone()], vec![queued.clone()]);
    let waiting = facts.run(&gpu_catalogue(), &queued).expect("a reason");
    assert_eq!((waiting.code, waiting.daemons.as_slice()), (WaitCode::NoCapableDaemon, [plain.id].as_slice()));
    assert_eq!(
        waiting.message,
        "No running daemon offers resource gpu (daemon.resources), which worker embed holds while it runs."
    );
}

#[test]
fn a_daemon_scoped_resource_full_on_every_daemon_names_each_with_its_holders() {
    let queued = run("embed", RunState::Queued);
    let mut gpu_daemons = [daemon(DaemonState::Active), daemon(DaemonState::Active)];
    for d in &mut gpu_daemons {
        d.resources = [("gpu".to_owned(), 1)].into();
    }
    let mut holder = run("embed", RunState::Running);
    holder.daemon_id = Some(gpu_daemons[0].id);
    let mut facts = facts(gpu_daemons.to_vec(), vec![queued.clone(), holder.clone()]);
    facts.holders = vec![("gpu".into(), holder.id)];
    let waiting = facts.run(&gpu_catalogue(), &queued).expect("a reason");
    assert_eq!(waiting.code, WaitCode::Claimable, "the second daemon's gpu is free: {waiting:?}");

    let mut other = run("embed", RunState::Running);
    other.daemon_id = Some(gpu_daemons[1].id);
    facts.in_flight.push(other.clone());
    facts.holders.push(("gpu".into(), other.id));
    let waiting = facts.run(&gpu_catalogue(), &queued).expect("a reason");
    assert_eq!((waiting.code, waiting.runs.as_slice()), (WaitCode::ResourceFull, [holder.id, other.id].as_slice()));
    let expected = format!(
        "Resource gpu is full on every daemon that has it: daemon {} on h (1 of 1, run {} (embed)); daemon {} on h \
         (1 of 1, run {} (embed)).",
        gpu_daemons[0].id, holder.id, gpu_daemons[1].id, other.id
    );
    assert_eq!(waiting.message, expected);
}
