//! The demo's embeddings split into four shards over two daemons with one GPU each, on both backends: two
//! children run at a time (never two on one daemon), all four succeed, the embeddings' results journal holds every
//! document of the archive exactly once, each written by the child of its shard, and the parent's result sums the
//! children's.

use std::{collections::BTreeMap, path::Path, time::Duration};

use scrinalia_shared::{OptionType, ResourceScope, ResourceSpec, Run, RunState, runs::RunRequest};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, at_ns, wait_finished},
    demo_worker, eventually,
};
use scrinalia_wire::shard::shard_of;
use serde_json::{Value, json};

backend_tests!(four_shards_of_the_embeddings_on_two_gpus_embed_each_document_once);

/// The transfer, the language detection and the embeddings of the demo (20 documents staged at the start), the
/// embeddings holding the daemon-scoped `gpu`; each daemon has one.
fn setup(t: &TestDb) -> Setup {
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
        d.capacity = 4;
        d.resources = [("gpu".to_owned(), 1)].into();
    })
    .with(|f| {
        f.resources = vec![ResourceSpec {
            name: "gpu".into(),
            capacity: 0,
            description: Some("a GPU of the host".into()),
            scope: ResourceScope::Daemon,
        }];
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
    };
    let run = t.db.api.request_run(&setup.settings.catalogue, request).await.expect("requested");
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(90)).await;
    assert_eq!(run.state, RunState::Succeeded, "{worker}: {run:?}\n{}", setup.run_log(&run));
    run
}

/// Each line of the embeddings' results journal: (document, run).
fn journal(data: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(data.join("results/embed.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (v["document"].as_str().unwrap_or_default().to_owned(), v["run"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

async fn four_shards_of_the_embeddings_on_two_gpus_embed_each_document_once(t: &TestDb) {
    let setup = setup(t);
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

    let entries = journal(&data);
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
