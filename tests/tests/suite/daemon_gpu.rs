//! Resources of a daemon (a GPU per host) through real daemons, on both backends: with two daemons that have one
//! `gpu` each, a run of four shards of a probe that needs one runs two children at a time, never two on one daemon
//! (the probes' own records of when they ran), each given `SCRINALIA_RESOURCE_GPU=0`, and all succeed; a daemon
//! without a gpu never claims it, and the run's waiting reason says that no running daemon offers one, until a
//! daemon given one (through the environment) starts; the list of resources shows it per daemon, and a change of
//! its capacity is refused with a sentence.

use std::{net::SocketAddr, time::Duration};

use axum::http::{Method, StatusCode};
use scrinalia_api::{AppState, app};
use scrinalia_shared::{Role, Run, RunState, WaitCode, runs::RunRequest};
use scrinalia_tests::{
    ConfigFile, TestDb,
    api_harness::{ADMIN, TestApi, VIEWER},
    backend_tests,
    daemon_harness::{ProbeEvent, Setup, daemon_gpu, wait_finished},
    eventually,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    two_daemons_with_one_gpu_each_run_two_shards_at_a_time,
    a_daemon_without_a_gpu_never_claims_a_run_that_needs_one,
);

/// The variable that gives a worker its gpu slot.
const GPU_ENV: &str = "SCRINALIA_RESOURCE_GPU";

/// The tests' configuration with `probe-1` holding the daemon-scoped `gpu`; `gpus` is the daemons' own count of it
/// in the file (none when 0).
fn needs_gpu(t: &TestDb, gpus: u32) -> ConfigFile {
    Setup::config(t, move |d| {
        d.capacity = 3;
        if gpus > 0 {
            d.resources = [("gpu".to_owned(), gpus)].into();
        }
    })
    .with(|f| {
        f.resources = vec![daemon_gpu()];
        let probe = f.workers.iter_mut().find(|w| w.name == "probe-1").expect("probe-1");
        probe.resources = vec!["gpu".into()];
    })
    .token("vera-viewer", Role::Viewer, VIEWER)
    .token("ada-admin", Role::Admin, ADMIN)
}

/// Waits until a daemon described probe-1 (its shards capability with it).
async fn described(t: &TestDb) {
    eventually(Duration::from_secs(30), "a daemon to describe probe-1", || async {
        t.db.api.description("probe-1").await.ok()??.description.map(drop)
    })
    .await;
}

/// The start line of `run`'s probe and when it ended (its end line).
fn span(events: &[ProbeEvent], run: &Run) -> (ProbeEvent, i128) {
    let id = run.id.to_string();
    let mine = events.iter().filter(|e| e.verb == "run" && e.run_id.as_deref() == Some(&id));
    let start = mine.clone().find(|e| e.event == "start").cloned().unwrap_or_else(|| panic!("run {id} started"));
    let end = mine.clone().find(|e| e.event == "end").map(|e| e.at_ns);
    (start, end.unwrap_or_else(|| panic!("run {id} ended by itself")))
}

async fn two_daemons_with_one_gpu_each_run_two_shards_at_a_time(t: &TestDb) {
    let setup = Setup::with(t, needs_gpu(t, 1));
    let (one, two) = (setup.start_daemon("one", &[]), setup.start_daemon("two", &[]));
    described(t).await;
    let request = RunRequest {
        worker: "probe-1".into(),
        requested_by: "ada".into(),
        arguments: serde_json::from_value(json!({"shards": 4, "options": {"duration_ms": 1500}})).expect("arguments"),
        trace_context: None,
        tags: Vec::new(),
    };
    let parent = t.db.api.request_run(&setup.settings.catalogue, request).await.expect("requested");
    let ended = wait_finished(&t.db.api, parent.id, Duration::from_secs(90)).await;
    assert_eq!(ended.state, RunState::Succeeded, "{ended:?}");
    let children = t.db.api.run_children(parent.id).await.expect("the children");
    assert_eq!(children.len(), 4, "one child per shard, none retried");
    assert!(children.iter().all(|c| c.state == RunState::Succeeded), "{children:?}");
    assert!(t.db.daemon.resource_holders().await.expect("holders").is_empty(), "every slot was released");

    // The probes' own records: (start, end, daemon) of each child, and how many ran at once.
    let events = setup.probe_events();
    let mut spans: Vec<(i128, i128, Uuid)> = Vec::new();
    for child in &children {
        let (start, end) = span(&events, child);
        assert_eq!(
            start.resources.get(GPU_ENV).map(String::as_str),
            Some("0"),
            "each daemon has one gpu, so each child holds its slot 0: {start:?}"
        );
        spans.push((start.at_ns, end, child.daemon_id.expect("claimed by a daemon")));
    }
    let at_once = |at: i128| spans.iter().filter(|(s, e, _)| *s <= at && at < *e).count();
    let most = spans.iter().map(|(s, ..)| at_once(*s)).max().unwrap_or(0);
    assert_eq!(most, 2, "two gpus, two children at a time: {spans:?}");
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            let overlap = a.0 < b.1 && b.0 < a.1;
            assert!(!(overlap && a.2 == b.2), "two children at once on daemon {}: {a:?} and {b:?}", a.2);
        }
    }
    let daemons: std::collections::BTreeSet<Uuid> = spans.iter().map(|(.., d)| *d).collect();
    assert_eq!(daemons.len(), 2, "both daemons ran children");
    one.stop(Duration::from_secs(10)).await;
    two.stop(Duration::from_secs(10)).await;
}

/// The in-process API on the setup's configuration.
fn api(t: &TestDb, setup: &Setup) -> TestApi {
    let state = AppState::new(setup.settings.clone(), t.db.api.clone());
    TestApi { router: app(state.clone()), state, peer: SocketAddr::from(([127, 0, 0, 1], 40000)) }
}

async fn a_daemon_without_a_gpu_never_claims_a_run_that_needs_one(t: &TestDb) {
    let setup = Setup::with(t, needs_gpu(t, 0));
    let plain = setup.start_daemon("plain", &[]);
    let gpu_run = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 50})).await;
    let other = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 50})).await;
    let other = wait_finished(&t.db.api, other.id, Duration::from_secs(30)).await;
    assert_eq!(other.state, RunState::Succeeded, "the plain daemon claims what needs no gpu");

    let waiting = t.db.api.get_run(gpu_run.id).await.expect("read").expect("the run");
    assert_eq!(waiting.state, RunState::Queued, "no daemon has a gpu yet");
    let gone_after = Duration::from_secs(60);
    let why = t.db.api.why_waiting(&setup.settings.catalogue, &waiting, gone_after).await.expect("why");
    let why = why.expect("a queued run says why it waits");
    assert_eq!(why.code, WaitCode::NoCapableDaemon, "{why:?}");
    assert_eq!(
        why.message,
        "No running daemon offers resource gpu (daemon.resources), which worker probe-1 holds while it runs."
    );
    let daemons = t.db.api.list_daemons(gone_after).await.expect("daemons");
    let plain_id = daemons.iter().find(|d| d.pid == plain.pid().as_raw()).expect("the plain daemon").id;
    assert_eq!(why.daemons, [plain_id], "it names the daemon that cannot take it");

    // A daemon given one gpu through the environment takes it, and its worker is told its slot.
    let gpu = setup.start_daemon("gpu", &[("SCRINALIA__DAEMON__RESOURCES__GPU", "1")]);
    let ran = wait_finished(&t.db.api, gpu_run.id, Duration::from_secs(30)).await;
    assert_eq!(ran.state, RunState::Succeeded, "{ran:?}");
    let daemons = t.db.api.list_daemons(gone_after).await.expect("daemons");
    let gpu_daemon = daemons.iter().find(|d| d.pid == gpu.pid().as_raw()).expect("the gpu daemon");
    assert_eq!(ran.daemon_id, Some(gpu_daemon.id), "only the daemon with a gpu claims it");
    assert_eq!(gpu_daemon.resources.get("gpu"), Some(&1), "it registered its gpu");
    let (start, _) = setup.probe_run(ran.id);
    assert_eq!(start.expect("started").resources.get(GPU_ENV).map(String::as_str), Some("0"));

    // The list shows the resource per daemon; its capacity cannot be changed here.
    let api = api(t, &setup);
    let list = api.get("/api/resources", VIEWER).await.expect(StatusCode::OK, None);
    let listed = &list["resources"][0];
    assert_eq!((listed["name"].as_str(), listed["scope"].as_str()), (Some("gpu"), Some("daemon")), "{list}");
    let on: Vec<Value> = listed["daemons"].as_array().cloned().unwrap_or_default();
    assert_eq!(on.len(), 1, "only the daemon that offers it: {list}");
    assert_eq!((on[0]["daemon"].clone(), on[0]["capacity"].clone()), (json!(gpu_daemon.id), json!(1)), "{list}");
    let body = json!({"capacity": 2, "reason": "a second GPU"});
    let refused = api.send(Method::PUT, "/api/resources/gpu", Some(ADMIN), Some(body)).await;
    let refused = refused.expect(StatusCode::CONFLICT, Some("daemon_scoped_resource"));
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains("its capacity is each daemon's daemon.resources"), "{refused}");
    plain.stop(Duration::from_secs(10)).await;
    gpu.stop(Duration::from_secs(10)).await;
}
