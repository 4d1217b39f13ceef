//! Preemption at a checkpoint, end to end with a real daemon and the demo workers, on both backends. The demo's
//! embeddings (priority 10, preemptible) hold the daemon's one GPU; an urgent run (priority 50) needing the GPU
//! arrives: after `preempt_after_seconds` the embeddings are asked to yield, end `interrupted` (`preempted`) with
//! a checkpoint, the urgent run takes the GPU and succeeds, and the embeddings' automatic resume then continues
//! from that checkpoint to the end: the embeddings' journal holds every document exactly once, no retry and no
//! `interrupted` webhook event is made. A holder that is not preemptible is never preempted, and the urgent run's
//! waiting reason says why it waits. A preempted run whose daemon is SIGKILLed while it yields ends `owner_lost`
//! once its lease expires and still gets its one resume.

use std::{collections::BTreeMap, time::Duration};

use scrinalia_shared::{EndReason, FollowKind, OptionType, Run, RunState, WaitCode, runs::RunRequest};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, daemon_gpu, results_journal, wait_finished, wait_run, wait_started},
    demo_worker, eventually,
};
use serde_json::{Value, json};

backend_tests!(
    an_urgent_run_preempts_the_embeddings_at_a_checkpoint_and_they_resume_by_themselves,
    a_holder_that_is_not_preemptible_is_never_preempted_and_the_reason_says_why,
    a_preempted_run_whose_daemon_dies_mid_yield_is_resumed_once,
);

/// One daemon with one GPU and room for three runs. The embeddings (priority 10, preemptible) and `probe-1`
/// (not preemptible) hold the GPU, which is preempted after 1 s with 30 s of grace; `probe-2` needs it too.
fn setup(t: &TestDb) -> Setup {
    let bin = demo_worker().display().to_string();
    let archive = |name: &str| {
        let mut spec = worker(name, &[&bin, name]);
        spec.options = vec![
            option("batch_size", OptionType::Integer, Some(json!(2))),
            option("delay_ms", OptionType::Integer, Some(json!(0))),
        ];
        spec.timeout_seconds = 120;
        spec
    };
    let mut embed = archive("embed");
    embed.resources = vec!["gpu".into()];
    embed.priority = Some(10);
    embed.preemptible = true;
    let config = Setup::config(t, |d| {
        d.capacity = 3;
        d.resources = [("gpu".to_owned(), 1)].into();
    })
    .with(|f| {
        f.resources = vec![scrinalia_shared::ResourceSpec {
            preempt_after_seconds: Some(1),
            preempt_grace_seconds: Some(30),
            ..daemon_gpu()
        }];
        for probe in f.workers.iter_mut().filter(|w| w.name == "probe-1" || w.name == "probe-2") {
            probe.resources = vec!["gpu".into()];
        }
        f.workers.extend([archive("transfer"), archive("language-detect"), embed]);
    });
    Setup::with(t, config)
}

async fn request(t: &TestDb, setup: &Setup, worker: &str, arguments: Value) -> Run {
    let request = RunRequest {
        worker: worker.into(),
        requested_by: "ada".into(),
        arguments: serde_json::from_value(arguments).expect("arguments"),
        trace_context: None,
        tags: Vec::new(),
    };
    t.db.api.request_run(&setup.settings.catalogue, request).await.unwrap_or_else(|e| panic!("{worker}: {e}"))
}

async fn run_to_success(t: &TestDb, setup: &Setup, worker: &str) -> Run {
    let run = request(t, setup, worker, json!({})).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(90)).await;
    assert_eq!(run.state, RunState::Succeeded, "{worker}: {run:?}\n{}", setup.run_log(&run));
    run
}

async fn why(t: &TestDb, setup: &Setup, run: &Run) -> Option<scrinalia_shared::Waiting> {
    let run = t.db.api.get_run(run.id).await.ok()??;
    t.db.api.why_waiting(&setup.settings.catalogue, &run, Duration::from_secs(60)).await.ok()?
}

async fn an_urgent_run_preempts_the_embeddings_at_a_checkpoint_and_they_resume_by_themselves(t: &TestDb) {
    let setup = setup(t);
    let data = setup.dir.join("demo");
    let listen = format!("127.0.0.1:{}", scrinalia_tests::free_port());
    let daemon = setup.start_daemon("gpu-host", &[("SCRINALIA__DAEMON__METRICS_LISTEN", &listen)]);
    run_to_success(t, &setup, "transfer").await;
    run_to_success(t, &setup, "language-detect").await;
    eventually(Duration::from_secs(30), "the daemon to describe embed", || async {
        t.db.api.description("embed").await.ok()??.description.map(drop)
    })
    .await;

    // The embeddings hold the GPU and have checkpointed; an urgent run needing the GPU arrives.
    let batch = request(t, &setup, "embed", json!({"options": {"delay_ms": 250, "batch_size": 2}})).await;
    assert_eq!(batch.priority, 10);
    wait_run(&t.db.api, batch.id, Duration::from_secs(30), "a checkpoint", |r| r.checkpoint.is_some()).await;
    let urgent = request(t, &setup, "probe-2", json!({"options": {"duration_ms": 200}})).await;
    assert_eq!(urgent.priority, 50);

    // It is asked to yield, finishes its batch and checkpoints.
    let preempted = wait_finished(&t.db.api, batch.id, Duration::from_secs(60)).await;
    assert_eq!((preempted.state, preempted.end_reason), (RunState::Interrupted, Some(EndReason::Preempted)));
    assert_eq!(preempted.preempted_for, Some(urgent.id), "{preempted:?}");
    assert!(preempted.checkpoint.is_some(), "it yielded at a checkpoint: {preempted:?}");
    let urgent = wait_finished(&t.db.api, urgent.id, Duration::from_secs(30)).await;
    assert_eq!(urgent.state, RunState::Succeeded, "{urgent:?}");
    assert!(urgent.claimed_at >= preempted.finished_at, "the urgent run took the GPU the embeddings gave up");

    // Their resume, requested with their end, continues from that checkpoint once the GPU is free.
    let (resume, how) = eventually(Duration::from_secs(10), "the resume", || async {
        t.db.api.run_continued_by(preempted.id).await.ok().flatten()
    })
    .await;
    assert_eq!(how, FollowKind::Resume);
    let resume = wait_finished(&t.db.api, resume, Duration::from_secs(90)).await;
    assert_eq!(resume.state, RunState::Succeeded, "{resume:?}\n{}", setup.run_log(&resume));
    assert_eq!((resume.follows, resume.priority), (Some(preempted.id), 10));
    assert!(resume.claimed_at >= urgent.claimed_at, "the urgent run went first");

    // Every document embedded exactly once, across the preempted run and its resume.
    let entries = results_journal(&data, "embed");
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for (document, run) in &entries {
        assert!(run == &preempted.id.to_string() || run == &resume.id.to_string(), "{document} by {run}");
        *times.entry(document.as_str()).or_default() += 1;
    }
    assert_eq!(times.len(), 20, "every document of the archive: {times:?}");
    assert!(times.values().all(|n| *n == 1), "each embedded once: {times:?}");
    assert!(entries.iter().any(|(_, run)| run == &preempted.id.to_string()), "the preempted run did some");
    assert!(entries.iter().any(|(_, run)| run == &resume.id.to_string()), "its resume did the rest");

    // No retry and no other run of the embeddings: the preemption is not a failure.
    let filter = scrinalia_shared::runs::RunFilter {
        worker: Some("embed".into()),
        limit: 50,
        ..scrinalia_shared::runs::RunFilter::default()
    };
    let runs = t.db.api.list_runs(&filter).await.expect("runs").runs;
    assert_eq!(runs.len(), 2, "{runs:?}");

    // The daemon counted the preemption.
    let metrics = reqwest::get(format!("http://{listen}/metrics")).await.expect("GET /metrics");
    let text = metrics.text().await.expect("the exposition");
    let line =
        text.lines().find(|l| l.starts_with("scrinalia_runs_preempted_total{") && l.contains("worker=\"embed\""));
    assert!(line.is_some_and(|l| l.ends_with(" 1")), "{line:?}");
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_holder_that_is_not_preemptible_is_never_preempted_and_the_reason_says_why(t: &TestDb) {
    let setup = setup(t);
    let daemon = setup.start_daemon("gpu-host", &[]);
    let holder =
        request(t, &setup, "probe-1", json!({"options": {"duration_ms": 4000, "checkpoints": 8}, "priority": 10}))
            .await;
    wait_started(&t.db.api, holder.id, Duration::from_secs(30)).await;
    let urgent = request(t, &setup, "probe-2", json!({"options": {"duration_ms": 50}, "priority": 90})).await;
    let reason = eventually(Duration::from_secs(20), "the reason naming why none is preempted", || async {
        let why = why(t, &setup, &urgent).await?;
        (why.code == WaitCode::ResourceFull && why.message.contains("is not preemptible")).then_some(why)
    })
    .await;
    let expected = format!("Run {} is not preemptible: it is not declared preemptible in the catalogue.", holder.id);
    assert!(reason.message.contains(&expected), "{reason:?}");
    let holder = wait_finished(&t.db.api, holder.id, Duration::from_secs(30)).await;
    assert_eq!((holder.state, holder.preempt_requested_at), (RunState::Succeeded, None), "it ran to its end");
    let urgent = wait_finished(&t.db.api, urgent.id, Duration::from_secs(30)).await;
    assert_eq!(urgent.state, RunState::Succeeded);
    assert!(urgent.claimed_at >= holder.finished_at, "it waited for the holder's end");
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_preempted_run_whose_daemon_dies_mid_yield_is_resumed_once(t: &TestDb) {
    // A global model server of one slot, preempted after 1 s; probe-1 may be preempted, probe-2 is urgent.
    let config = Setup::config(t, |d| d.capacity = 2).with(|f| {
        f.resources = vec![scrinalia_shared::ResourceSpec {
            name: "model".into(),
            capacity: 1,
            description: None,
            scope: Default::default(),
            starts_per_minute: None,
            preempt_after_seconds: Some(1),
            preempt_grace_seconds: Some(60),
        }];
        for probe in f.workers.iter_mut().filter(|w| w.name == "probe-1" || w.name == "probe-2") {
            probe.resources = vec!["model".into()];
            probe.preemptible = probe.name == "probe-1";
        }
    });
    let setup = Setup::with(t, config);
    let doomed = setup.start_daemon("doomed", &[]);
    eventually(Duration::from_secs(30), "the daemon to describe probe-1", || async {
        t.db.api.description("probe-1").await.ok()??.description.map(drop)
    })
    .await;
    // A checkpoint every 10 s: asked to yield after its first, it is still on its way to the next when it dies.
    let options = json!({"options": {"duration_ms": 30_000, "checkpoints": 3}, "priority": 10});
    let holder = request(t, &setup, "probe-1", options).await;
    wait_run(&t.db.api, holder.id, Duration::from_secs(30), "a checkpoint", |r| r.checkpoint.is_some()).await;
    let survivor = setup.start_daemon("survivor", &[]);
    let urgent = request(t, &setup, "probe-2", json!({"options": {"duration_ms": 50}, "priority": 90})).await;
    wait_run(&t.db.api, holder.id, Duration::from_secs(30), "the preemption", |r| r.preempt_requested_at.is_some())
        .await;
    // Its next checkpoint is seconds away: the urgent run's reason names the run it is preempting.
    let reason = why(t, &setup, &urgent).await.expect("the urgent run waits");
    let preempting = format!("It is preempting run {} (probe-1): asked to yield, ", holder.id);
    assert!(reason.message.contains(&preempting) && reason.message.contains("s of grace left"), "{reason:?}");
    doomed.signal(nix::sys::signal::Signal::SIGKILL);

    let lost = wait_finished(&t.db.api, holder.id, Duration::from_secs(60)).await;
    assert_eq!((lost.state, lost.end_reason), (RunState::Interrupted, Some(EndReason::OwnerLost)), "{lost:?}");
    assert_eq!(lost.preempted_for, Some(urgent.id));
    let urgent = wait_finished(&t.db.api, urgent.id, Duration::from_secs(60)).await;
    assert_eq!(urgent.state, RunState::Succeeded, "{urgent:?}");
    let (resume, how) = t.db.api.run_continued_by(lost.id).await.expect("read").expect("its one resume");
    assert_eq!(how, FollowKind::Resume);
    let resume = wait_finished(&t.db.api, resume, Duration::from_secs(90)).await;
    assert_eq!(resume.state, RunState::Succeeded, "{resume:?}");
    assert!(resume.claimed_at >= urgent.claimed_at, "the urgent run went first");
    let filter = scrinalia_shared::runs::RunFilter {
        worker: Some("probe-1".into()),
        limit: 50,
        ..scrinalia_shared::runs::RunFilter::default()
    };
    let runs = t.db.api.list_runs(&filter).await.expect("runs").runs;
    assert_eq!(runs.len(), 2, "the run and its one resume, no retry: {runs:?}");
    survivor.stop(Duration::from_secs(10)).await;
}
