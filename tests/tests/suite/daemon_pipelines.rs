//! Pipelines run by real daemons, on both backends: three probes end to end, each step started only after the
//! one before succeeded; a failing middle step stops the pipeline with its reason and the last step never runs;
//! a daemon SIGKILLed right after it ended step 1 does not leave the pipeline waiting: step 2 starts within
//! the lease plus a small slack (the step was requested in the transaction that recorded step 1's end).

use std::time::Duration;

use nix::sys::signal::Signal;
use scrinalia_shared::{
    FireOutcome, PipelineRunView, PipelineState, RetryOn, RetryPolicy, RunState, ScheduleInput, catalogue::PipelineSpec,
};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, wait_run},
    eventually, start_daemon,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    a_pipeline_of_three_probes_runs_its_steps_in_order,
    a_failing_middle_step_stops_the_pipeline_with_its_reason,
    a_daemon_killed_right_after_step_one_does_not_stall_the_pipeline,
    a_schedule_starts_the_pipeline_and_a_cancel_stops_its_running_step,
);

/// The tests' configuration with the pipeline `three` of probe-1, probe-2 and probe-3; probe-2 is retried at
/// once when interrupted (a step cut by a dead daemon continues).
fn setup(t: &TestDb) -> Setup {
    let config = Setup::config(t, |_| {}).with(|f| {
        f.pipelines = vec![PipelineSpec {
            name: "three".into(),
            description: Some("three probes in a row".into()),
            steps: vec!["probe-1".into(), "probe-2".into(), "probe-3".into()],
            tags: Vec::new(),
        }];
        let probe = f.workers.iter_mut().find(|w| w.name == "probe-2").expect("probe-2");
        probe.retry = Some(RetryPolicy {
            max_attempts: 3,
            initial_delay_seconds: 0.0,
            factor: 1.0,
            max_delay_seconds: 0.0,
            jitter: 0.0,
            on: vec![RetryOn::Interrupted],
            resume: false,
        });
    });
    Setup::with(t, config)
}

async fn start(t: &TestDb, setup: &Setup, arguments: Value) -> Uuid {
    let started = t.db.api.start_pipeline(&setup.settings.catalogue, "three", "test", &arguments, &[]).await;
    started.expect("start the pipeline").pipeline_run.id
}

async fn ended(t: &TestDb, id: Uuid, timeout: Duration) -> PipelineRunView {
    eventually(timeout, "the pipeline run ends", || async {
        t.db.api.pipeline_run(id).await.expect("read").filter(|p| p.pipeline_run.state.is_terminal())
    })
    .await
}

async fn a_pipeline_of_three_probes_runs_its_steps_in_order(t: &TestDb) {
    let setup = setup(t);
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let id = start(t, &setup, Value::Null).await;
    let view = ended(t, id, Duration::from_secs(30)).await;
    daemon.stop(Duration::from_secs(10)).await;
    assert_eq!(view.pipeline_run.state, PipelineState::Succeeded, "{view:#?}");
    let workers: Vec<&str> = view.runs.iter().map(|r| r.worker.as_str()).collect();
    assert_eq!(workers, ["probe-1", "probe-2", "probe-3"]);
    for (i, run) in view.runs.iter().enumerate() {
        assert_eq!(run.state, RunState::Succeeded);
        assert_eq!((run.pipeline_run_id, run.pipeline_step), (Some(id), Some(i32::try_from(i).expect("small"))));
        assert_eq!(run.requested_by, "test");
    }
    for pair in view.runs.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(after.requested_at >= before.finished_at.expect("ended"), "a step started before the one before ended");
    }
    assert_eq!(view.pipeline_run.step, 2);
    assert!(view.pipeline_run.finished_at.is_some() && view.pipeline_run.error.is_none());
}

async fn a_failing_middle_step_stops_the_pipeline_with_its_reason(t: &TestDb) {
    let setup = setup(t);
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let id = start(t, &setup, json!({"probe-2": {"options": {"exit_code": 2}}})).await;
    let view = ended(t, id, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    daemon.stop(Duration::from_secs(10)).await;
    assert_eq!(view.pipeline_run.state, PipelineState::Failed, "{view:#?}");
    let error = view.pipeline_run.error.clone().unwrap_or_default();
    assert!(error.starts_with("step 2 (probe-2) failed"), "the reason names the step: {error}");
    let states: Vec<(&str, RunState)> = view.runs.iter().map(|r| (r.worker.as_str(), r.state)).collect();
    assert_eq!(states, [("probe-1", RunState::Succeeded), ("probe-2", RunState::Failed)], "probe-3 never ran");
    assert!(setup.probe_events().iter().all(|e| e.worker != "probe-3" || e.verb != "run"));
}

async fn a_daemon_killed_right_after_step_one_does_not_stall_the_pipeline(t: &TestDb) {
    let setup = setup(t);
    let first = start_daemon(&setup.dir, "daemon-a", &setup.config, &[]).await;
    let second = start_daemon(&setup.dir, "daemon-b", &setup.config, &[]).await;
    let id = start(t, &setup, json!({"probe-1": {"options": {"duration_ms": 1500}}})).await;
    let view = t.db.api.pipeline_run(id).await.expect("read").expect("the pipeline run");
    let step_1 = view.runs[0].id;
    let step_1 = eventually(Duration::from_secs(20), "step 1 succeeds", || async {
        t.db.api.get_run(step_1).await.ok().flatten().filter(|r| r.state.is_terminal())
    })
    .await;
    let daemons = t.db.api.list_daemons(Duration::from_secs(30)).await.expect("daemons");
    let owner = daemons.iter().find(|d| Some(d.id) == step_1.daemon_id).expect("step 1's daemon");
    let (killed, survivor) =
        if i64::from(owner.pid) == i64::from(first.pid().as_raw()) { (first, second) } else { (second, first) };
    killed.signal(Signal::SIGKILL);
    assert_eq!(step_1.state, RunState::Succeeded);
    let view = ended(t, id, Duration::from_secs(30)).await;
    survivor.stop(Duration::from_secs(10)).await;
    assert_eq!(view.pipeline_run.state, PipelineState::Succeeded, "{view:#?}");
    // Step 2 ran to its end: either at once on the survivor, or once its first attempt, claimed by the killed
    // daemon, was recovered as interrupted and retried.
    let step_2 = view.runs.iter().find(|r| r.worker == "probe-2" && r.state == RunState::Succeeded).expect("step 2");
    let started = step_2.started_at.expect("step 2 started");
    let after = (started - step_1.finished_at.expect("ended")).num_milliseconds();
    let (lease, slack) = (setup.settings.daemon.lease_seconds * 1000, 3000);
    assert!(after <= i64::try_from(lease + slack).expect("small"), "step 2 started {after} ms after step 1 ended");
    for run in view.runs.iter().filter(|r| r.worker == "probe-2" && r.id != step_2.id) {
        assert_eq!(run.state, RunState::Interrupted, "the only other step 2 run is the killed daemon's: {run:?}");
    }
    let probe_3 = view.runs.iter().filter(|r| r.worker == "probe-3").count();
    assert_eq!(probe_3, 1, "no step run twice");
    wait_run(&t.db.api, step_2.id, Duration::from_secs(1), "step 2 is recorded", |r| r.state.is_terminal()).await;
}

async fn a_schedule_starts_the_pipeline_and_a_cancel_stops_its_running_step(t: &TestDb) {
    let setup = setup(t);
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let input = ScheduleInput {
        name: "three-every-second".into(),
        pipeline: Some("three".into()),
        cron: "* * * * * *".into(),
        arguments: Some(json!({"probe-1": {"options": {"duration_ms": 30000}}})),
        reason: Some("the pipeline as a unit".into()),
        ..ScheduleInput::default()
    };
    let schedule = t.db.api.create_schedule(&setup.settings.catalogue, "test", &input).await.expect("create").schedule;
    let fire = eventually(Duration::from_secs(20), "a fire starts the pipeline", || async {
        let fires = t.db.api.schedule_fires("three-every-second", 100).await.expect("fires");
        fires.into_iter().find(|f| f.outcome == FireOutcome::Requested)
    })
    .await;
    let id = fire.pipeline_run_id.expect("the fire names its pipeline run");
    let view = t.db.api.pipeline_run(id).await.expect("read").expect("the pipeline run");
    assert_eq!((view.pipeline_run.schedule_id, view.pipeline_run.fire_at), (Some(schedule.id), Some(fire.fire_at)));
    assert_eq!(view.pipeline_run.requested_by, "schedule:three-every-second");
    // Later fires find the pipeline in flight: skipped, naming it.
    let skipped = eventually(Duration::from_secs(10), "a fire skipped", || async {
        let fires = t.db.api.schedule_fires("three-every-second", 100).await.expect("fires");
        fires.into_iter().find(|f| f.outcome == FireOutcome::Skipped)
    })
    .await;
    assert_eq!(skipped.blocked_by, Some(id), "the skip names the pipeline run in flight");
    t.db.api.set_schedule_enabled("three-every-second", false, "test", Some("enough")).await.expect("pause");
    let step = view.runs[0].id;
    wait_run(&t.db.api, step, Duration::from_secs(20), "step 1 runs", |r| r.started_at.is_some()).await;
    t.db.api.cancel_pipeline_run(id, "ada").await.expect("cancel").expect("the pipeline run");
    let view = ended(t, id, Duration::from_secs(30)).await;
    daemon.stop(Duration::from_secs(10)).await;
    assert_eq!(view.pipeline_run.state, PipelineState::Cancelled, "{view:#?}");
    assert_eq!(view.pipeline_run.error.as_deref(), Some("cancelled by ada"));
    let states: Vec<RunState> = view.runs.iter().map(|r| r.state).collect();
    assert_eq!(states, [RunState::Cancelled], "the running step was stopped and no other step started");
}
