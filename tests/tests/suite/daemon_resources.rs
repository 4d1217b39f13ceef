//! Shared resources and placement through real daemons, on both backends: a resource of capacity 1 shared by two
//! workers, three daemons, 200 triggers with daemons SIGKILLed and restarted, never has two holders at once (the
//! probes' own records of when they ran) and nothing holds it once the runs have ended; a worker that requires
//! the `gpu` label waits, saying which daemon lacks the label, until a daemon labelled `gpu` starts, then runs there.

use std::{path::Path, time::Duration};

use nix::sys::signal::Signal;
use scrinalia_shared::{ResourceSpec, RunState, WaitCode, runs::RunFilter};
use scrinalia_tests::{
    ConfigFile, TestDb, backend_tests,
    daemon_harness::{Setup, wait_finished},
    eventually, start_daemon,
};
use serde_json::json;

backend_tests!(a_resource_of_capacity_one_never_has_two_holders, a_worker_that_needs_a_gpu_waits_for_a_gpu_daemon,);

/// The tests' configuration with `probe-1` and `probe-2` sharing one `model-server` slot.
fn shared_model_server(t: &TestDb) -> ConfigFile {
    Setup::config(t, |d| d.capacity = 2).with(|f| {
        f.resources = vec![ResourceSpec {
            name: "model-server".into(),
            capacity: 1,
            description: Some("one GPU".into()),
            scope: Default::default(),
            starts_per_minute: None,
            preempt_after_seconds: None,
            preempt_grace_seconds: None,
        }];
        for w in f.workers.iter_mut().filter(|w| w.name == "probe-1" || w.name == "probe-2") {
            w.resources = vec!["model-server".into()];
        }
    })
}

async fn a_resource_of_capacity_one_never_has_two_holders(t: &TestDb) {
    let setup = Setup::with(t, shared_model_server(t));
    let mut daemons: Vec<_> = (0..3).map(|i| setup.start_daemon(&format!("daemon-{i}"), &[])).collect();
    let mut accepted = 0;
    for i in 0..200 {
        if i == 60 || i == 130 {
            // A daemon dies with whatever it holds; a new one takes its place.
            daemons.remove(i % 3).signal(Signal::SIGKILL);
            daemons.push(setup.start_daemon(&format!("daemon-again-{i}"), &[]));
        }
        let worker = if i % 2 == 0 { "probe-1" } else { "probe-2" };
        let request = scrinalia_shared::runs::RunRequest {
            worker: worker.into(),
            requested_by: "test".into(),
            arguments: serde_json::from_value(json!({"options": {"duration_ms": 60}})).expect("arguments"),
            trace_context: None,
            tags: Vec::new(),
        };
        // One in flight per worker: most triggers are refused while the other worker holds the slot.
        accepted += usize::from(t.db.api.request_run(&setup.settings.catalogue, request).await.is_ok());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    eventually(Duration::from_secs(40), "every run ended", || async {
        t.db.api.runs_in_flight().await.expect("in flight").is_empty().then_some(())
    })
    .await;
    let filter = RunFilter { limit: 500, ..RunFilter::default() };
    let runs = t.db.api.list_runs(&filter).await.expect("runs").runs;
    assert_eq!(runs.len(), accepted);
    assert!(runs.iter().filter(|r| r.state == RunState::Succeeded).count() >= 20, "runs went through");
    assert!(
        t.db.daemon.resource_holders().await.expect("holders").is_empty(),
        "nothing holds the slot once runs ended"
    );

    // The probes' own records: each run's process from its start line to its end line (or, for one whose daemon
    // was killed and that wrote no end line, to the run's recorded end), never overlapping another's.
    let events = setup.probe_events();
    let mut spans: Vec<(i128, i128, String)> = Vec::new();
    for run in &runs {
        let id = run.id.to_string();
        let mine = events.iter().filter(|e| e.verb == "run" && e.run_id.as_deref() == Some(&id));
        let start = mine.clone().find(|e| e.event == "start").map(|e| e.at_ns);
        let Some(start) = start else { continue };
        let end = mine.clone().find(|e| e.event == "end").map(|e| e.at_ns).unwrap_or_else(|| {
            let finished = run.finished_at.expect("ended");
            i128::from(finished.timestamp_nanos_opt().expect("in range"))
        });
        spans.push((start, end, id));
    }
    spans.sort();
    assert!(spans.len() >= 20, "{} runs started", spans.len());
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two holders at once: run {} until {} and run {} from {}",
            pair[0].2,
            pair[0].1,
            pair[1].2,
            pair[1].0
        );
    }
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

async fn a_worker_that_needs_a_gpu_waits_for_a_gpu_daemon(t: &TestDb) {
    let config = |labels: &[&str]| {
        let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        Setup::config(t, move |d| d.labels = labels).with(|f| {
            let probe = f.workers.iter_mut().find(|w| w.name == "probe-2").expect("probe-2");
            probe.labels = vec!["gpu".into()];
        })
    };
    let setup = Setup::with(t, config(&[]));
    let plain = setup.start_daemon("plain", &[]);
    let needs_gpu = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 50})).await;
    let other = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 50})).await;
    let other = wait_finished(&t.db.api, other.id, Duration::from_secs(20)).await;
    assert_eq!(other.state, RunState::Succeeded, "the plain daemon claims what it can place");
    // The later run of probe-1 was claimed: the plain daemon passed over the older one it cannot place.
    let waiting = t.db.api.get_run(needs_gpu.id).await.expect("read").expect("the run");
    assert_eq!(waiting.state, RunState::Queued, "no daemon labelled gpu yet");
    let why = t.db.api.why_waiting(&setup.settings.catalogue, &waiting, Duration::from_secs(60)).await.expect("why");
    let why = why.expect("a queued run says why it waits");
    assert_eq!(why.code, WaitCode::NoCapableDaemon, "{why:?}");
    assert!(why.message.contains("lacks the label gpu"), "the sentence names the missing label: {why:?}");
    let daemons = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let plain_id = daemons.iter().find(|d| d.pid == plain.pid().as_raw()).expect("the plain daemon").id;
    assert_eq!(why.daemons, [plain_id], "it names the daemon that cannot take it");

    let gpu_config = setup.dir.join("gpu.toml");
    write(&config(&["gpu"]), &gpu_config);
    let gpu = start_daemon(&setup.dir, "gpu", &gpu_config, &[]).await;
    let ran = wait_finished(&t.db.api, needs_gpu.id, Duration::from_secs(20)).await;
    assert_eq!(ran.state, RunState::Succeeded);
    let daemons = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let host = daemons.iter().find(|d| Some(d.id) == ran.daemon_id).expect("its daemon");
    assert_eq!(host.pid, gpu.pid().as_raw(), "it ran on the daemon labelled gpu");
    for daemon in [plain, gpu] {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

fn write(config: &ConfigFile, path: &Path) {
    config.write(path).unwrap_or_else(|e| panic!("{e:#}"));
}
