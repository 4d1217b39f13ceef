//! The demo's embeddings split into four shards over two daemons with one GPU each, on both backends: two
//! children run at a time (never two on one daemon), all four succeed, the embeddings' results journal holds every
//! document of the archive exactly once, each written by the child of its shard, and the parent's result sums the
//! children's. A transfer in two shards whose daemon for shard 0 is SIGKILLed half-way: the parent's resume
//! resumes shard 0 alone, and across the cut child and its resume the journal holds each document once.

use std::{collections::BTreeMap, time::Duration};

use scrinalia_shared::{FollowKind, OptionType, Run, RunState, runs::RunRequest};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, at_ns, daemon_gpu, results_journal, wait_finished},
    demo_worker, eventually,
};
use scrinalia_wire::shard::shard_of;
use serde_json::{Value, json};

backend_tests!(
    four_shards_of_the_embeddings_on_two_gpus_embed_each_document_once,
    a_resumed_parent_transfers_each_document_once_across_its_shards,
);

/// The transfer, the language detection and the embeddings of the demo (20 documents staged at the start), the
/// embeddings holding the daemon-scoped `gpu`; each daemon has one, and room for `capacity` runs.
fn setup(t: &TestDb, capacity: u32) -> Setup {
    let bin = demo_worker().display().to_string();
    let archive = |name: &str| {
        let mut spec = worker(name, &[&bin, name]);
        spec.options = vec![
            option("batch_size", OptionType::Integer, Some(json!(5))),
            option("delay_ms", OptionType::Integer, Some(json!(0))),
        ];
        spec.timeout_seconds = 120;
        spec
    };
    let mut embed = archive("embed");
    embed.resources = vec!["gpu".into()];
    let config = Setup::config(t, |d| {
        d.capacity = capacity;
        d.resources = [("gpu".to_owned(), 1)].into();
    })
    .with(|f| {
        f.resources = vec![daemon_gpu()];
        f.workers.extend([archive("transfer"), archive("language-detect"), embed]);
    });
    Setup::with(t, config)
}

async fn run_to_success(t: &TestDb, setup: &Setup, worker: &str, arguments: Value) -> Run {
    let request = RunRequest {
        worker: worker.into(),
        requested_by: "ada".into(),
        arguments: serde_json::from_value(arguments).expect("arguments"),
        trace_context: None,
        tags: Vec::new(),
    };
    let run = t.db.api.request_run(&setup.settings.catalogue, request).await.expect("requested");
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(90)).await;
    assert_eq!(run.state, RunState::Succeeded, "{worker}: {run:?}\n{}", setup.run_log(&run));
    run
}

async fn four_shards_of_the_embeddings_on_two_gpus_embed_each_document_once(t: &TestDb) {
    let setup = setup(t, 4);
    let data = setup.dir.join("demo");
    let daemons = [setup.start_daemon("gpu-host-a", &[]), setup.start_daemon("gpu-host-b", &[])];
    run_to_success(t, &setup, "transfer", json!({})).await;
    run_to_success(t, &setup, "language-detect", json!({})).await;
    eventually(Duration::from_secs(30), "a daemon to describe embed", || async {
        t.db.api.description("embed").await.ok()??.description.map(drop)
    })
    .await;
    let parent = run_to_success(t, &setup, "embed", json!({"shards": 4, "options": {"delay_ms": 150}})).await;

    let children = t.db.api.run_children(parent.id).await.expect("children");
    assert_eq!(children.len(), 4, "{children:?}");
    assert!(children.iter().all(|c| c.state == RunState::Succeeded), "{children:?}");
    // From each child's start to its end, at most two at once, and never two on one daemon.
    let spans: Vec<(i128, i128, &Run)> = children
        .iter()
        .map(|c| (at_ns(c.started_at.expect("started")), at_ns(c.finished_at.expect("ended")), c))
        .collect();
    let mut most = 0;
    for (start, _, _) in &spans {
        let at_once: Vec<&&Run> = spans.iter().filter(|(s, e, _)| s <= start && start < e).map(|(.., c)| c).collect();
        most = most.max(at_once.len());
        let mut daemons: Vec<_> = at_once.iter().map(|c| c.daemon_id).collect();
        daemons.dedup();
        assert_eq!(daemons.len(), at_once.len(), "two children on one daemon at once: {at_once:?}");
    }
    assert_eq!(most, 2, "two children at once with two GPUs, never more");

    let entries = results_journal(&data, "embed");
    let by_shard: BTreeMap<String, i32> =
        children.iter().map(|c| (c.id.to_string(), c.shard.expect("a shard"))).collect();
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for (document, run) in &entries {
        let shard = by_shard.get(run).unwrap_or_else(|| panic!("{document} embedded by {run}, not a child"));
        assert_eq!(
            i64::from(shard_of(document, 4)),
            i64::from(*shard),
            "{document} embedded by the child of its shard"
        );
        *times.entry(document.as_str()).or_default() += 1;
    }
    assert_eq!(times.len(), 20, "every document of the archive: {times:?}");
    assert!(times.values().all(|n| *n == 1), "each embedded once: {times:?}");
    let sum = |key: &str| -> i64 {
        children.iter().map(|c| c.result.as_ref().and_then(|r| r[key].as_i64()).unwrap_or(0)).sum()
    };
    let result = parent.result.expect("the parent's result");
    let numeric: Vec<(&String, &Value)> =
        result.as_object().expect("an object").iter().filter(|(_, v)| v.is_i64()).collect();
    assert!(!numeric.is_empty(), "{result}");
    for (key, value) in numeric {
        assert_eq!(value.as_i64(), Some(sum(key)), "{key} is the children's sum: {result}");
    }
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

async fn a_resumed_parent_transfers_each_document_once_across_its_shards(t: &TestDb) {
    // One run per daemon: the two shards run on different daemons, and the kill cuts shard 0 alone.
    let setup = setup(t, 1);
    let data = setup.dir.join("demo");
    let mut daemons = vec![setup.start_daemon("host-a", &[]), setup.start_daemon("host-b", &[])];
    eventually(Duration::from_secs(30), "a daemon to describe transfer", || async {
        t.db.api.description("transfer").await.ok()??.description.map(drop)
    })
    .await;
    let request = RunRequest {
        worker: "transfer".into(),
        requested_by: "ada".into(),
        arguments: serde_json::from_value(json!({"shards": 2, "options": {"batch_size": 1, "delay_ms": 300}}))
            .expect("arguments"),
        trace_context: None,
        tags: Vec::new(),
    };
    let catalogue = &setup.settings.catalogue;
    let parent = t.db.api.request_run(catalogue, request).await.expect("requested");
    // Shard 0's child, once it has checkpointed two documents; its daemon is killed.
    let victim = eventually(Duration::from_secs(30), "shard 0 checkpointed twice", || async {
        let children = t.db.api.run_children(parent.id).await.ok()?;
        let first = children.into_iter().find(|c| c.shard == Some(0))?;
        first.checkpoint.as_ref().and_then(|c| c["done"].as_u64()).is_some_and(|d| d >= 2).then_some(first)
    })
    .await;
    let owners = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let owner = owners.iter().find(|d| Some(d.id) == victim.daemon_id).expect("registered");
    let killed = daemons.iter().position(|d| d.pid().as_raw() == owner.pid).expect("ours");
    daemons.remove(killed).signal(nix::sys::signal::Signal::SIGKILL);
    let ended = wait_finished(&t.db.api, parent.id, Duration::from_secs(60)).await;
    assert_eq!(ended.state, RunState::Interrupted, "{ended:?}");

    let resumed = t.db.api.continue_run(catalogue, parent.id, FollowKind::Resume, "ada").await.expect("resume");
    let resumed = wait_finished(&t.db.api, resumed.id, Duration::from_secs(90)).await;
    assert_eq!(resumed.state, RunState::Succeeded, "{resumed:?}");
    let again = t.db.api.run_children(resumed.id).await.expect("children");
    assert_eq!(again.len(), 1, "only shard 0 again: {again:?}");
    assert_eq!((again[0].follows, again[0].follows_as), (Some(victim.id), Some(FollowKind::Resume)));

    let entries = results_journal(&data, "transfer");
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for (document, _) in &entries {
        *times.entry(document.as_str()).or_default() += 1;
    }
    assert_eq!(times.len(), 20, "the 20 staged documents: {times:?}");
    assert!(times.values().all(|n| *n == 1), "each transferred once across the cut and its resume: {entries:?}");
    let cut = victim.id.to_string();
    assert!(entries.iter().any(|(_, run)| *run == cut), "the cut child journaled what it finished");
    assert!(entries.iter().any(|(_, run)| *run == again[0].id.to_string()), "its resume journaled the rest");
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}
