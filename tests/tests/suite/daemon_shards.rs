//! Sharded runs on both backends: one request is a parent and N children; the claim takes the children (never the
//! parent) and two daemons run children of one parent side by side; a second request of the worker is refused
//! naming the parent; the parent's state follows its children's (each child's own retries included), its result
//! sums theirs, and cancelling it cancels every child; a restart of a failed parent restarts the shards that
//! did not succeed, and a resume of a parent whose shard's daemon was SIGKILLed resumes that shard alone from its
//! checkpoint while its sibling had gone on; a shard itself is not continued. Through the real API and daemons, the probe of
//! `scrinalia-demo-worker`, whose start lines record the `SCRINALIA_SHARD` each child was given.

use std::{collections::BTreeMap, time::Duration};

use nix::sys::signal::Signal;
use reqwest::{Method, StatusCode};
use scrinalia_shared::{
    Description, EndReason, FollowKind, Run, RunState, Source,
    descriptions::NewDescription,
    overrides::OverrideChange,
    runs::{CancelOutcome, RunRequest},
};
use scrinalia_tests::{
    Kind, TestDb, backend_tests,
    daemon_harness::{Setup, probe, wait_finished, wait_run},
    demo_worker, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    the_claim_takes_the_children_and_the_parent_ends_with_them,
    children_of_one_parent_run_side_by_side_on_two_daemons,
    cancelling_a_parent_cancels_every_child,
    a_failed_shard_is_retried_and_a_restart_continues_the_shards_that_failed,
    a_shard_cut_by_a_dead_daemon_is_interrupted_and_the_parents_resume_resumes_only_it,
);

/// A request of probe-1 with `arguments` (`shards`, `options`), as `ada`.
fn request(arguments: Value) -> RunRequest {
    RunRequest {
        worker: "probe-1".into(),
        requested_by: "ada".into(),
        arguments: serde_json::from_value(arguments).expect("arguments"),
        trace_context: None,
        tags: Vec::new(),
    }
}

/// Records that probe-1 takes a shard, as a daemon's describe would.
async fn described_as_sharding(t: &TestDb) {
    let description: Description =
        serde_json::from_value(json!({"capabilities": {"shards": true, "items": true}})).expect("a description");
    let new = NewDescription {
        worker: "probe-1".into(),
        outcome: Ok(description),
        described_by: Uuid::now_v7(),
        command: vec!["probe".into()],
        took_ms: 1,
    };
    t.db.daemon.store_description(&new).await.expect("stored");
}

/// Waits until a daemon described probe-1.
async fn described(t: &TestDb) {
    eventually(Duration::from_secs(30), "the daemon to describe probe-1", || async {
        t.db.api.description("probe-1").await.ok()??.description.map(drop)
    })
    .await;
}

async fn children(t: &TestDb, parent: Uuid) -> Vec<Run> {
    t.db.api.run_children(parent).await.expect("the children")
}

async fn the_claim_takes_the_children_and_the_parent_ends_with_them(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    described_as_sharding(t).await;
    let catalogue = &setup.settings.catalogue;
    let parent = t.db.api.request_run(catalogue, request(json!({"shards": 4}))).await.expect("requested");
    assert_eq!((parent.shards, parent.parent_id, parent.state), (Some(4), None, RunState::Queued));
    assert!(parent.is_parent());

    // One run in flight per worker holds at the parent, whatever its children do; another worker is not held.
    let refused = t.db.api.request_run(catalogue, request(json!({}))).await.expect_err("refused");
    assert!(refused.to_string().contains(&parent.id.to_string()), "the refusal names the parent: {refused}");
    let other = RunRequest { worker: "probe-2".into(), ..request(json!({})) };
    let other = t.db.api.request_run(catalogue, other).await.expect("another worker is unaffected");

    let daemon = Uuid::now_v7();
    let only = ["probe-1".to_owned()];
    let claimed = t.db.daemon.claim_runs(daemon, Duration::from_secs(60), 10, Some(&only)).await.expect("claimed");
    assert_eq!(claimed.len(), 4, "every child, and never the parent: {claimed:?}");
    let shards: Vec<(Option<Uuid>, Option<i32>, Option<i32>)> =
        claimed.iter().map(|c| (c.parent_id, c.shard, c.shards)).collect();
    let expected: Vec<_> = (0..4).map(|i| (Some(parent.id), Some(i), Some(4))).collect();
    let mut sorted = shards.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
    let again = t.db.daemon.claim_runs(daemon, Duration::from_secs(60), 10, None).await.expect("claim");
    assert_eq!(again.iter().map(|r| r.id).collect::<Vec<_>>(), [other.id], "nothing of the sharded run is left");
    let queued = t.db.api.get_run(parent.id).await.expect("read").expect("the parent");
    assert_eq!(queued.state, RunState::Queued, "claimed, but no child's worker has started yet");

    t.db.daemon.mark_started(claimed[0].id, daemon, "log").await.expect("started");
    let running = t.db.api.get_run(parent.id).await.expect("read").expect("the parent");
    assert_eq!(running.state, RunState::Running, "a child started");
    assert!(running.started_at.is_some());

    for (i, child) in claimed.iter().enumerate() {
        let finish = scrinalia_shared::runs::Finish {
            reason: EndReason::ExitStatus,
            exit_code: Some(0),
            error: None,
            result: Some(json!({"processed": i + 1, "model": format!("m{i}")})),
            usage: None,
        };
        t.db.daemon.finish_run(child.id, daemon, &finish).await.expect("finished");
        let now = t.db.api.get_run(parent.id).await.expect("read").expect("the parent");
        let expected = if i < 3 { RunState::Running } else { RunState::Succeeded };
        assert_eq!(now.state, expected, "after {} of 4 children ended", i + 1);
    }
    let ended = t.db.api.get_run(parent.id).await.expect("read").expect("the parent");
    assert_eq!(
        (ended.end_reason, ended.exit_code, ended.error.as_deref()),
        (Some(EndReason::ExitStatus), Some(0), None)
    );
    assert!(ended.finished_at.is_some() && ended.duration_ms.is_some());
    let result = ended.result.expect("a result");
    assert_eq!(result["processed"], 10, "1 + 2 + 3 + 4: {result}");
    let models: Vec<String> = claimed.iter().map(|c| format!("m{}", c.shard.expect("a shard"))).collect();
    let listed: Vec<String> =
        result["model"].as_array().expect("listed").iter().map(|m| m.as_str().expect("text").to_owned()).collect();
    let mut order: Vec<(i32, usize)> = claimed.iter().enumerate().map(|(i, c)| (c.shard.unwrap_or(0), i)).collect();
    order.sort();
    let by_shard: Vec<String> = order.iter().map(|(_, i)| format!("m{i}")).collect();
    assert_eq!(listed, by_shard, "the other fields listed per child, in shard order ({models:?})");
    let in_flight = t.db.api.runs_in_flight().await.expect("in flight");
    assert_eq!(in_flight.iter().map(|r| r.id).collect::<Vec<_>>(), [other.id], "only the other worker's run");

    // An audited override splits every run of the worker; a bad number is refused with the same sentence.
    let change =
        |n: i64| OverrideChange { shards: Some(Some(n)), reason: Some("a second GPU".into()), ..Default::default() };
    let zero = t.db.api.change_override(catalogue, "probe-1", "ada", &change(0)).await.expect_err("refused");
    assert!(zero.to_string().contains("shards must be at least 1"), "{zero}");
    t.db.api.change_override(catalogue, "probe-1", "ada", &change(3)).await.expect("the override");
    let split = t.db.api.request_run(catalogue, request(json!({}))).await.expect("requested");
    let resolved = split.config.shards.as_ref().map(|s| (s.value, s.source));
    assert_eq!((split.shards, resolved), (Some(3), Some((3, Source::Override))));
    assert_eq!(children(t, split.id).await.len(), 3);
}

async fn children_of_one_parent_run_side_by_side_on_two_daemons(t: &TestDb) {
    let setup = Setup::new(t, |d| d.capacity = 1);
    let (one, two) = (setup.start_daemon("one", &[]), setup.start_daemon("two", &[]));
    described(t).await;
    let catalogue = &setup.settings.catalogue;
    let arguments = json!({"shards": 2, "options": {"duration_ms": 1500}});
    let parent = t.db.api.request_run(catalogue, request(arguments)).await.expect("requested");

    // Each daemon has room for one run: the two children can only both run on different daemons.
    let both = eventually(Duration::from_secs(30), "both children running at once", || async {
        let children = children(t, parent.id).await;
        let running: Vec<Uuid> =
            children.iter().filter(|c| c.state == RunState::Running).filter_map(|c| c.daemon_id).collect();
        (running.len() == 2).then_some(running)
    })
    .await;
    assert_ne!(both[0], both[1], "two daemons");
    let ended = wait_finished(&t.db.api, parent.id, Duration::from_secs(60)).await;
    assert_eq!(ended.state, RunState::Succeeded, "{ended:?}");

    let children = children(t, parent.id).await;
    assert_eq!(children.len(), 2);
    let events = setup.probe_events();
    for child in &children {
        let id = child.id.to_string();
        let start = events.iter().find(|e| e.event == "start" && e.run_id.as_deref() == Some(&id)).expect("started");
        let shard = format!("{}/2", child.shard.expect("a shard"));
        assert_eq!(start.shard.as_deref(), Some(shard.as_str()), "the child was given its shard");
    }
    let sum: i64 = children.iter().map(|c| c.result.as_ref().map_or(0, |r| r["processed"].as_i64().unwrap_or(0))).sum();
    assert_eq!(ended.result.expect("a result")["processed"].as_i64(), Some(sum));
    one.stop(Duration::from_secs(10)).await;
    two.stop(Duration::from_secs(10)).await;
}

async fn cancelling_a_parent_cancels_every_child(t: &TestDb) {
    let setup = Setup::new(t, |d| d.capacity = 1);
    let daemon = setup.start_daemon("one", &[]);
    described(t).await;
    let catalogue = &setup.settings.catalogue;
    let arguments = json!({"shards": 3, "options": {"duration_ms": 60000}});
    let parent = t.db.api.request_run(catalogue, request(arguments)).await.expect("requested");
    let running = eventually(Duration::from_secs(30), "a child running", || async {
        children(t, parent.id).await.into_iter().find(|c| c.state == RunState::Running && c.started_at.is_some())
    })
    .await;
    let outcome = t.db.api.request_cancel(parent.id, "otto").await.expect("cancel").expect("an outcome");
    let CancelOutcome::Requested(flagged) = outcome else { panic!("a parent with a running child: {outcome:?}") };
    assert_eq!(flagged.cancel_requested_by.as_deref(), Some("otto"));
    for child in children(t, parent.id).await.iter().filter(|c| c.id != running.id) {
        assert_eq!(child.state, RunState::Cancelled, "a queued child is cancelled at once");
    }
    let ended = wait_finished(&t.db.api, parent.id, Duration::from_secs(30)).await;
    assert_eq!((ended.state, ended.end_reason), (RunState::Cancelled, Some(EndReason::Cancelled)), "{ended:?}");
    let error = ended.error.expect("a sentence");
    assert!(error.contains("shard 0 of 3 cancelled") && error.contains("shard 2 of 3 cancelled"), "{error}");
    let children = children(t, parent.id).await;
    assert_eq!(children.len(), 3, "no child was retried or replaced");
    assert!(children.iter().all(|c| c.state == RunState::Cancelled), "{children:?}");
    daemon.stop(Duration::from_secs(10)).await;
}

async fn a_failed_shard_is_retried_and_a_restart_continues_the_shards_that_failed(t: &TestDb) {
    let config = Setup::config(t, |_| {}).with(|f| {
        let probe = f.workers.iter_mut().find(|w| w.name == "probe-1").expect("probe-1");
        probe.retry = Some(scrinalia_shared::RetryPolicy {
            max_attempts: 2,
            initial_delay_seconds: 0.0,
            factor: 1.0,
            max_delay_seconds: 0.0,
            jitter: 0.0,
            on: vec![scrinalia_shared::RetryOn::Failed],
            resume: false,
        });
    });
    let setup = Setup::with(t, config);
    let daemon = setup.start_daemon("one", &[]);
    described(t).await;
    let catalogue = &setup.settings.catalogue;
    let parent = t.db.api.request_run(catalogue, request(json!({"shards": 2, "options": {"exit_code": 3}}))).await;
    let parent = parent.expect("requested");
    let ended = wait_finished(&t.db.api, parent.id, Duration::from_secs(60)).await;
    assert_eq!(
        (ended.state, ended.end_reason, ended.exit_code),
        (RunState::Failed, Some(EndReason::ExitStatus), Some(3))
    );
    let error = ended.error.expect("a sentence");
    assert!(error.contains("shard 0 of 2 failed") && error.contains("shard 1 of 2 failed"), "{error}");
    let children = children(t, parent.id).await;
    let attempts: Vec<(Option<i32>, i32)> = children.iter().map(|c| (c.shard, c.attempt)).collect();
    assert_eq!(attempts, [(Some(0), 1), (Some(0), 2), (Some(1), 1), (Some(1), 2)], "each shard retried once");
    assert!(children.iter().all(|c| c.state == RunState::Failed));
    assert_eq!(t.db.api.run_chain(parent.id).await.expect("chain").len(), 1, "the parent itself is not retried");

    // A shard is continued through its parent; the parent's restart restarts each shard's last child.
    let shard = &children[3];
    let refused = t.db.api.continue_run(catalogue, shard.id, FollowKind::Restart, "ada").await;
    let refused = refused.expect_err("a shard is not restarted alone");
    assert!(refused.to_string().contains(&parent.id.to_string()), "{refused}");
    let restart = t.db.api.continue_run(catalogue, parent.id, FollowKind::Restart, "ada").await;
    let restart = restart.expect("a restart of the parent");
    assert_eq!((restart.follows, restart.shards), (Some(parent.id), Some(2)));
    let again = wait_finished(&t.db.api, restart.id, Duration::from_secs(60)).await;
    assert_eq!(again.state, RunState::Failed);
    let restarted = t.db.api.run_children(restart.id).await.expect("children");
    let firsts: Vec<&Run> = restarted.iter().filter(|c| c.attempt == 1).collect();
    assert_eq!(firsts.len(), 2);
    for child in firsts {
        let earlier = children.iter().filter(|c| c.shard == child.shard).max_by_key(|c| c.attempt).expect("one");
        assert_eq!(child.follows, Some(earlier.id), "shard {:?} restarts its last child", child.shard);
    }
    daemon.stop(Duration::from_secs(10)).await;
}

/// Over HTTP and the CLI: the request answers the parent, a second one the conflict naming it, a bad number of
/// shards a sentence; the run page lists the children, whose items are every item once.
async fn the_api_requests_a_sharded_run_and_shows_its_children(kind: Kind) {
    // A worker whose code describes itself without the shards capability.
    let script = r#"echo '{"capabilities": {"items": true}}'"#;
    let plain = scrinalia_testkit::config::worker("plain", &["/bin/sh", "-c", script, "plain"]);
    let system = System::start(kind, |c| c.worker(probe(&demo_worker(), "probe-1", 120)).worker(plain)).await;
    for worker in ["probe-1", "plain"] {
        eventually(Duration::from_secs(30), "the daemon to describe the workers", || async {
            let view = system.http(Method::GET, &format!("/api/workers/{worker}"), VIEWER, None).await.ok()?.json();
            view["described"]["described_at"].as_str().map(drop)
        })
        .await;
    }
    let body = Some(json!({"shards": 4}));
    let refused = system.http(Method::POST, "/api/workers/plain/runs", OPERATOR, body).await.expect("answer");
    let refused = refused.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
    let sentence = refused["message"].as_str().unwrap_or_default();
    assert!(
        sentence.contains("cannot be split into shards: its code does not declare the `shards` capability"),
        "{refused}"
    );
    let post = |body: Value| system.http(Method::POST, "/api/workers/probe-1/runs", OPERATOR, Some(body));
    for (shards, sentence) in
        [(0, "shards must be at least 1"), (-2, "shards must be at least 1"), (65, "shards must be at most 64")]
    {
        let reply = post(json!({"shards": shards})).await.expect("answer");
        let body = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_arguments"));
        assert!(body["message"].as_str().unwrap_or_default().contains(sentence), "{body}");
    }
    let body = json!({"shards": 3, "options": {"items": 12, "duration_ms": 300}});
    let parent = post(body).await.expect("answer").expect(StatusCode::CREATED, None);
    assert_eq!(parent["shards"], 3);
    let id = parent["id"].as_str().expect("an id").to_owned();
    let busy = post(json!({})).await.expect("answer").expect(StatusCode::CONFLICT, Some("run_in_flight"));
    assert_eq!(busy["run_id"].as_str(), Some(id.as_str()), "{busy}");
    let detail = eventually(Duration::from_secs(60), "the parent to end", || async {
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        (run["state"] == "succeeded").then_some(run)
    })
    .await;
    assert_eq!(detail["items"]["succeeded"], 12, "the parent's items are its children's: {detail}");
    let children = detail["children"].as_array().expect("children");
    let shards: Vec<i64> = children.iter().map(|c| c["shard"].as_i64().expect("a shard")).collect();
    assert_eq!(shards, [0, 1, 2]);
    assert!(children.iter().all(|c| c["parent_id"] == json!(id) && c["state"] == "succeeded"), "{children:?}");
    // The shards processed the 12 items between them, each once.
    let mut items: BTreeMap<String, usize> = BTreeMap::new();
    for child in children {
        let path = format!("/api/runs/{}/items", child["id"].as_str().expect("an id"));
        let page = system.http(Method::GET, &path, VIEWER, None).await.expect("answer").expect(StatusCode::OK, None);
        for item in page["items"].as_array().expect("items") {
            *items.entry(item["id"].as_str().expect("an id").to_owned()).or_default() += 1;
        }
    }
    assert_eq!(items.len(), 12, "{items:?}");
    assert!(items.values().all(|n| *n == 1), "each item once: {items:?}");

    // The CLI: the run page lists the shards; a trigger splits a run, or says why it cannot.
    let shown = system.cli(&["run", "show", &id]).await;
    shown.expect(0).has(&["shard 0 succeeded", "shard 2 succeeded"]);
    let child = children[1]["id"].as_str().expect("an id");
    system.cli(&["run", "show", child]).await.expect(0).has(&[&format!("1 of 3, of run {id}")]);
    let zero = system.cli(&["trigger", "probe-1", "--shards", "0"]).await;
    zero.expect(7);
    assert!(zero.stderr.contains("shards must be at least 1"), "{zero:#?}");
    let split = system.cli(&["trigger", "probe-1", "--shards", "2", "-o", "duration_ms=0"]).await;
    split.expect(0).has(&["split into 2 shards"]);

    // The worker card says where the shards stand: the daemon has room for three of four.
    let four = json!({"shards": 4, "options": {"duration_ms": 4000}});
    eventually(Duration::from_secs(30), "the split run to end and four shards to be requested", || async {
        let reply = post(four.clone()).await.ok()?;
        (reply.status == StatusCode::CREATED).then_some(())
    })
    .await;
    let note = eventually(Duration::from_secs(30), "three shards running", || async {
        let worker = system.http(Method::GET, "/api/workers/probe-1", VIEWER, None).await.ok()?.json();
        let note = worker["shards_note"].as_str()?.to_owned();
        note.starts_with("4 shards: 3 running, 1 queued").then_some(note)
    })
    .await;
    assert!(note.contains("(a queued shard waits: "), "{note}");
    // While it runs, the parent's progress is its children's, summed.
    let parent = eventually(Duration::from_secs(30), "the running parent's progress", || async {
        let runs = system.http(Method::GET, "/api/runs?worker=probe-1&limit=10", VIEWER, None).await.ok()?.json();
        let parent = runs["runs"].as_array()?.iter().find(|r| r["shards"] == 4 && r["parent_id"].is_null())?.clone();
        let id = parent["id"].as_str()?.to_owned();
        let run = system.http(Method::GET, &format!("/api/runs/{id}"), VIEWER, None).await.ok()?.json();
        (run["state"] == "running" && run["progress"]["total"].as_i64().is_some()).then_some(run)
    })
    .await;
    let totals: i64 =
        parent["children"].as_array().expect("children").iter().filter_map(|c| c["progress"]["total"].as_i64()).sum();
    assert_eq!(parent["progress"]["total"].as_i64(), Some(totals), "{parent}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_api_requests_a_sharded_run_and_shows_its_children() {
    the_api_requests_a_sharded_run_and_shows_its_children(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_api_requests_a_sharded_run_and_shows_its_children() {
    the_api_requests_a_sharded_run_and_shows_its_children(Kind::Sqlite).await;
}

async fn a_shard_cut_by_a_dead_daemon_is_interrupted_and_the_parents_resume_resumes_only_it(t: &TestDb) {
    let setup = Setup::new(t, |d| d.capacity = 1);
    let mut daemons = vec![setup.start_daemon("daemon-a", &[]), setup.start_daemon("daemon-b", &[])];
    described(t).await;
    let catalogue = &setup.settings.catalogue;
    let arguments = json!({"shards": 2, "options": {"duration_ms": 8000, "checkpoints": 8}});
    let parent = t.db.api.request_run(catalogue, request(arguments)).await.expect("requested");
    // Both children run, one on each daemon; the victim is shard 0's, once that shard has checkpointed.
    let victim = eventually(Duration::from_secs(30), "both children running, shard 0 checkpointed", || async {
        let children = children(t, parent.id).await;
        let running = children.iter().filter(|c| c.state == RunState::Running && c.daemon_id.is_some()).count();
        let first = children.iter().find(|c| c.shard == Some(0))?;
        let step = first.checkpoint.as_ref().and_then(|c| c["step"].as_i64()).unwrap_or(0);
        (running == 2 && step >= 2).then(|| first.clone())
    })
    .await;
    let daemons_now = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let owner = daemons_now.iter().find(|d| Some(d.id) == victim.daemon_id).expect("the owner");
    daemons.iter_mut().find(|d| d.pid().as_raw() == owner.pid).expect("ours").signal(Signal::SIGKILL);

    let cut = wait_run(&t.db.api, victim.id, Duration::from_secs(30), "recovery", |r| r.state.is_terminal()).await;
    assert_eq!((cut.state, cut.end_reason), (RunState::Interrupted, Some(EndReason::OwnerLost)), "{cut:?}");
    let ended = wait_finished(&t.db.api, parent.id, Duration::from_secs(60)).await;
    let sibling = children(t, parent.id).await.into_iter().find(|c| c.shard == Some(1)).expect("shard 1");
    assert_eq!(sibling.state, RunState::Succeeded, "the sibling went on: {sibling:?}");
    assert_eq!((ended.state, ended.end_reason), (RunState::Interrupted, Some(EndReason::OwnerLost)));
    assert!(ended.error.as_deref().is_some_and(|e| e.contains("shard 0 of 2 interrupted")), "{ended:?}");

    let resumed = t.db.api.continue_run(catalogue, parent.id, FollowKind::Resume, "ada").await.expect("resume");
    assert_eq!((resumed.follows, resumed.follows_as), (Some(parent.id), Some(FollowKind::Resume)));
    let done = wait_finished(&t.db.api, resumed.id, Duration::from_secs(60)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    let again = children(t, resumed.id).await;
    assert_eq!(again.len(), 1, "only the shard that did not succeed runs again: {again:?}");
    assert_eq!(
        (again[0].shard, again[0].follows, again[0].follows_as),
        (Some(0), Some(cut.id), Some(FollowKind::Resume))
    );
    let start = setup.probe_run(again[0].id).0.expect("the resumed shard started");
    assert_eq!(start.checkpoint, cut.checkpoint, "it resumed from the cut shard's last checkpoint");
    assert_eq!(start.shard.as_deref(), Some("0/2"));
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}
