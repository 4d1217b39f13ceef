//! Who goes first, through real daemons on both backends. Two workers share a model server of capacity 1: the
//! higher priority is claimed first whatever the order of the requests, and the other's waiting reason names the
//! run it waits behind and its priority; equal priorities go oldest first, also when the catalogue lists the
//! workers the other way round; a daemon with one free slot gives it to the more urgent of a plain run and one
//! that holds a resource. A request no live daemon can place ends `expired` after its `expires_after_seconds`
//! (said on read while no daemon runs), and one claimed in time is unaffected; an expired pipeline step ends its
//! pipeline run. A resource that allows 6 starts a minute, shared by 10 workers over 3 daemons, never starts a
//! 7th within 60 s of the 6th before it (the ledger's claim times).

use std::time::Duration;

use chrono::{DateTime, Utc};
use scrinalia_shared::{EndReason, ExplicitArgs, ResourceSpec, Run, RunState, WaitCode, runs::RunRequest};
use scrinalia_tests::{
    ConfigFile, TestDb, backend_tests,
    daemon_harness::{Setup, probe, wait_finished, wait_started},
    demo_worker, eventually,
};
use serde_json::{Value, json};

backend_tests!(
    the_higher_priority_goes_first_then_the_oldest_whatever_the_catalogue_order,
    a_request_no_daemon_can_place_expires_and_one_claimed_in_time_does_not,
    a_resource_allows_its_starts_per_minute_across_three_daemons,
);

/// `probe-1` and `probe-2` share a `model-server` of capacity 1; `probe-3` holds nothing.
fn shared_model_server(t: &TestDb, capacity: u32) -> ConfigFile {
    Setup::config(t, move |d| d.capacity = capacity).with(|f| {
        f.resources = vec![ResourceSpec {
            name: "model-server".into(),
            capacity: 1,
            description: None,
            scope: Default::default(),
            starts_per_minute: None,
            preempt_after_seconds: None,
            preempt_grace_seconds: None,
        }];
        for w in f.workers.iter_mut().filter(|w| w.name == "probe-1" || w.name == "probe-2") {
            w.resources = vec!["model-server".into()];
        }
        let timeout = f.workers.iter_mut().find(|w| w.name == "probe-3").expect("probe-3");
        timeout.timeout_seconds = 120;
    })
}

fn arguments(options: Value, more: Value) -> ExplicitArgs {
    let mut args = json!({"options": options});
    args.as_object_mut().expect("an object").extend(more.as_object().cloned().unwrap_or_default());
    serde_json::from_value(args).expect("arguments")
}

async fn request(t: &TestDb, setup: &Setup, worker: &str, options: Value, more: Value) -> Run {
    let request = RunRequest {
        worker: worker.into(),
        requested_by: "test".into(),
        arguments: arguments(options, more),
        trace_context: None,
        tags: Vec::new(),
    };
    t.db.api.request_run(&setup.settings.catalogue, request).await.unwrap_or_else(|e| panic!("{worker}: {e}"))
}

fn claimed(run: &Run) -> DateTime<Utc> {
    run.claimed_at.unwrap_or_else(|| panic!("run {} of {} was claimed", run.id, run.worker))
}

async fn the_higher_priority_goes_first_then_the_oldest_whatever_the_catalogue_order(t: &TestDb) {
    let setup = Setup::with(t, shared_model_server(t, 4));
    let long = json!({"duration_ms": 1500});

    // Requested low first, high second, before any daemon runs.
    let low = request(t, &setup, "probe-1", json!({"duration_ms": 50}), json!({"priority": 10})).await;
    let high = request(t, &setup, "probe-2", long.clone(), json!({"priority": 90})).await;
    assert_eq!((low.priority, high.priority), (10, 90));
    let daemon = setup.start_daemon("daemon", &[]);
    wait_started(&t.db.api, high.id, Duration::from_secs(30)).await;
    let queued = t.db.api.get_run(low.id).await.expect("read").expect("the run");
    if queued.state == RunState::Queued {
        let why = t.db.api.why_waiting(&setup.settings.catalogue, &queued, Duration::from_secs(60)).await;
        let why = why.expect("why").expect("a queued run says why");
        assert_eq!(why.code, WaitCode::ResourceFull, "{why:?}");
        let behind = format!("It waits behind run {} (probe-2, priority 90) for resource model-server", high.id);
        assert!(why.message.contains(&behind) && why.message.contains("it has priority 10"), "{why:?}");
        assert_eq!(why.runs, vec![high.id]);
    }
    let (low, high) = (
        wait_finished(&t.db.api, low.id, Duration::from_secs(30)).await,
        wait_finished(&t.db.api, high.id, Duration::from_secs(30)).await,
    );
    assert!(claimed(&high) < claimed(&low), "priority 90 before priority 10, though requested later");
    assert!(claimed(&low) >= high.finished_at.expect("ended"), "one holder at a time");
    daemon.stop(Duration::from_secs(10)).await;

    // Equal priorities: the older request first, though the catalogue lists probe-1 before probe-2.
    let older = request(t, &setup, "probe-2", long.clone(), json!({})).await;
    let newer = request(t, &setup, "probe-1", json!({"duration_ms": 50}), json!({})).await;
    let daemon = setup.start_daemon("daemon-again", &[]);
    let (older, newer) = (
        wait_finished(&t.db.api, older.id, Duration::from_secs(30)).await,
        wait_finished(&t.db.api, newer.id, Duration::from_secs(30)).await,
    );
    assert!(claimed(&older) < claimed(&newer), "oldest first at equal priority, not catalogue order");
    daemon.stop(Duration::from_secs(10)).await;

    // One free slot on a daemon: the urgent run that holds a resource before the older plain one.
    let setup = Setup::with(t, shared_model_server(t, 1));
    let plain = request(t, &setup, "probe-3", json!({"duration_ms": 50}), json!({"priority": 20})).await;
    let urgent = request(t, &setup, "probe-1", json!({"duration_ms": 300}), json!({"priority": 80})).await;
    let daemon = setup.start_daemon("one-slot", &[]);
    let (plain, urgent) = (
        wait_finished(&t.db.api, plain.id, Duration::from_secs(30)).await,
        wait_finished(&t.db.api, urgent.id, Duration::from_secs(30)).await,
    );
    assert!(claimed(&urgent) < claimed(&plain), "the daemon's one slot goes to priority 80 first");
    assert_eq!((plain.state, urgent.state), (RunState::Succeeded, RunState::Succeeded));
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_request_no_daemon_can_place_expires_and_one_claimed_in_time_does_not(t: &TestDb) {
    let config = Setup::config(t, |_| {}).with(|f| {
        let gpu = f.workers.iter_mut().find(|w| w.name == "probe-2").expect("probe-2");
        gpu.labels = vec!["gpu".into()];
        f.pipelines = vec![scrinalia_shared::catalogue::PipelineSpec {
            name: "gpu-pair".into(),
            description: None,
            steps: vec!["probe-2".into(), "probe-1".into()],
            tags: Vec::new(),
        }];
    });
    let setup = Setup::with(t, config);
    let expiring = json!({"expires_after_seconds": 2});

    // No daemon: the expiry is said on read once it has passed.
    let alone = request(t, &setup, "probe-2", json!({"duration_ms": 50}), json!({"expires_after_seconds": 1})).await;
    assert!(alone.expires_at.is_some_and(|at| at > alone.requested_at), "{alone:?}");
    eventually(Duration::from_secs(20), "the expiry said on read", || async {
        let run = t.db.api.get_run(alone.id).await.ok().flatten()?;
        let why = t.db.api.why_waiting(&setup.settings.catalogue, &run, Duration::from_secs(60)).await.ok()??;
        (why.code == WaitCode::Expired && why.until == run.expires_at).then_some(())
    })
    .await;
    t.db.api.request_cancel(alone.id, "test").await.expect("cancel");

    // A daemon without the label: the request it cannot place expires; one it claims in time runs.
    let daemon = setup.start_daemon("no-gpu", &[]);
    let unplaced = request(t, &setup, "probe-2", json!({"duration_ms": 50}), expiring.clone()).await;
    let placed = request(t, &setup, "probe-1", json!({"duration_ms": 3000}), expiring.clone()).await;
    let unplaced = wait_finished(&t.db.api, unplaced.id, Duration::from_secs(30)).await;
    assert_eq!((unplaced.state, unplaced.end_reason), (RunState::Cancelled, Some(EndReason::Expired)));
    let error = unplaced.error.clone().unwrap_or_default();
    assert!(error.starts_with("expired: no daemon claimed it by "), "{error}");
    assert!(unplaced.finished_at.expect("ended") >= unplaced.expires_at.expect("an expiry"), "not before its time");
    let placed = wait_finished(&t.db.api, placed.id, Duration::from_secs(30)).await;
    assert_eq!(placed.state, RunState::Succeeded, "claimed in time, it ran past its expiry: {placed:?}");

    // A pipeline whose first step expires ends with it.
    let step_args = json!({"probe-2": {"expires_after_seconds": 1}});
    let started = t.db.api.start_pipeline(&setup.settings.catalogue, "gpu-pair", "test", &step_args, &[]).await;
    let started = started.expect("a pipeline run");
    let id = started.pipeline_run.id;
    let ended = eventually(Duration::from_secs(30), "the pipeline run to end", || async {
        let view = t.db.api.pipeline_run(id).await.ok().flatten()?;
        (view.pipeline_run.state != scrinalia_shared::PipelineState::Running).then_some(view)
    })
    .await;
    assert_eq!(ended.pipeline_run.state, scrinalia_shared::PipelineState::Cancelled, "{ended:?}");
    assert_eq!(ended.runs.first().and_then(|r| r.end_reason), Some(EndReason::Expired), "{ended:?}");
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_resource_allows_its_starts_per_minute_across_three_daemons(t: &TestDb) {
    let bin = demo_worker();
    let names: Vec<String> = (0..10).map(|i| format!("probe-{}", 10 + i)).collect();
    let workers = names.clone();
    let config = Setup::config(t, |d| d.capacity = 4).with(move |f| {
        f.resources = vec![ResourceSpec {
            name: "llm-api".into(),
            capacity: 10,
            description: Some("a paid API, 6 calls a minute".into()),
            scope: Default::default(),
            starts_per_minute: Some(6),
            preempt_after_seconds: None,
            preempt_grace_seconds: None,
        }];
        for name in &workers {
            let mut worker = probe(&bin, name, 120);
            worker.resources = vec!["llm-api".into()];
            f.workers.push(worker);
        }
    });
    let setup = Setup::with(t, config);
    let daemons: Vec<_> = (0..3).map(|i| setup.start_daemon(&format!("daemon-{i}"), &[])).collect();
    let mut runs = Vec::new();
    for name in &names {
        runs.push(request(t, &setup, name, json!({"duration_ms": 50}), json!({})).await);
    }
    // Six start at once; the others wait, saying when the next start is allowed.
    let started = |runs: Vec<Run>| runs.into_iter().filter(|r| r.claimed_at.is_some()).count();
    let all = || async {
        let mut now = Vec::new();
        for run in &runs {
            now.push(t.db.api.get_run(run.id).await.expect("read").expect("the run"));
        }
        now
    };
    eventually(Duration::from_secs(30), "six runs to start", || async { (started(all().await) >= 6).then_some(()) })
        .await;
    let waiting = all().await.into_iter().find(|r| r.state == RunState::Queued).expect("a run waits");
    let why = t.db.api.why_waiting(&setup.settings.catalogue, &waiting, Duration::from_secs(60)).await;
    let why = why.expect("why").expect("a queued run says why");
    assert_eq!(why.code, WaitCode::RateLimited, "{why:?}");
    assert!(why.message.contains("allows 6 starts a minute"), "{why:?}");
    let first = all().await.iter().filter_map(|r| r.claimed_at).min().expect("a start");
    let next = why.until.expect("when the next start is allowed");
    assert!(next >= first + chrono::Duration::seconds(60), "{next} is a minute after the first start {first}");

    // The seventh starts once a minute has passed since the first, and every run ends.
    let ended = eventually(Duration::from_secs(150), "every run to end", || async {
        let now = all().await;
        now.iter().all(|r| r.state.is_terminal()).then_some(now)
    })
    .await;
    let mut claims: Vec<DateTime<Utc>> = ended.iter().map(claimed).collect();
    claims.sort();
    for window in claims.windows(7) {
        assert!(window[6] - window[0] >= chrono::Duration::seconds(60), "7 starts within a minute: {window:?}");
    }
    assert!(ended.iter().all(|r| r.state == RunState::Succeeded), "{ended:?}");
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}
