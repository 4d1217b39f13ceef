//! A demo archive worker cut half-way by a SIGKILLed daemon, continued on the daemon left, on both backends: a
//! resume finishes the cut run's worklist so that, across the two runs, the worker's results journal holds every
//! document of it exactly once and its stamps hold them all; a restart instead processes the whole worklist
//! again.

use std::{collections::BTreeMap, path::Path, time::Duration};

use nix::sys::signal::Signal;
use scrinalia_shared::{FollowKind, OptionType, Run, RunState};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{
    Process, TestDb, backend_tests,
    daemon_harness::{Setup, wait_finished, wait_run, wait_started},
    demo_worker,
};
use serde_json::{Value, json};

backend_tests!(a_resumed_archive_run_processes_each_document_once, a_restarted_archive_run_processes_them_all_again,);

/// The tests' configuration with the demo `transfer` worker (20 documents staged at the start), one run per
/// daemon.
fn setup(t: &TestDb) -> Setup {
    let bin = demo_worker();
    let mut transfer = worker("transfer", &[&bin.display().to_string(), "transfer"]);
    transfer.options = vec![
        option("batch_size", OptionType::Integer, Some(json!(10))),
        option("delay_ms", OptionType::Integer, Some(json!(0))),
    ];
    transfer.timeout_seconds = 120;
    let config = Setup::config(t, |d| d.capacity = 1).with(|f| f.workers.push(transfer));
    Setup::with(t, config)
}

/// The documents of the worklist that run `run` recorded.
fn worklist(data: &Path, run: &Run) -> Vec<String> {
    let path = data.join("runs/transfer").join(format!("{}.json", run.id));
    let list: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("the worklist")).expect("JSON");
    list["documents"].as_array().expect("documents").iter().filter_map(|d| d.as_str().map(str::to_owned)).collect()
}

/// How many times each document is in the results journal, by run.
fn journal(data: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(data.join("results/transfer.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (v["document"].as_str().unwrap_or_default().to_owned(), v["run"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// Starts two daemons and a paced run of 20 documents in batches of 2; kills the daemon that runs it once it
/// has checkpointed 6 documents, and waits until the other daemon interrupts it.
async fn cut_half_way(t: &TestDb, setup: &Setup) -> (Vec<Process>, Run) {
    let mut daemons = vec![setup.start_daemon("daemon-a", &[]), setup.start_daemon("daemon-b", &[])];
    let first = setup.request(&t.db.api, "transfer", json!({"batch_size": 2, "delay_ms": 300})).await;
    let first = wait_started(&t.db.api, first.id, Duration::from_secs(20)).await;
    wait_run(&t.db.api, first.id, Duration::from_secs(30), "six documents checkpointed", |r| {
        r.checkpoint.as_ref().and_then(|c| c["done"].as_u64()).is_some_and(|d| d >= 6)
    })
    .await;
    let owners = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let owner = owners.iter().find(|d| Some(d.id) == first.daemon_id).expect("registered");
    daemons.iter_mut().find(|d| d.pid().as_raw() == owner.pid).expect("ours").signal(Signal::SIGKILL);
    let cut =
        wait_run(&t.db.api, first.id, Duration::from_secs(20), "recovery", |r| r.state == RunState::Interrupted).await;
    let done = cut.checkpoint.as_ref().and_then(|c| c["done"].as_u64()).expect("a checkpoint");
    assert!((6..20).contains(&done), "cut half-way, after {done} of 20");
    (daemons, cut)
}

async fn a_resumed_archive_run_processes_each_document_once(t: &TestDb) {
    let setup = setup(t);
    let data = setup.dir.join("demo");
    let (_daemons, cut) = cut_half_way(t, &setup).await;
    let list = worklist(&data, &cut);
    assert_eq!(list.len(), 20, "the 20 documents staged at the start");
    let resumed =
        t.db.api.continue_run(&setup.settings.catalogue, cut.id, FollowKind::Resume, "ada").await.expect("resume");
    let resumed = wait_finished(&t.db.api, resumed.id, Duration::from_secs(60)).await;
    assert_eq!(resumed.state, RunState::Succeeded, "{resumed:?}\n{}", setup.run_log(&resumed));
    assert_ne!(resumed.daemon_id, cut.daemon_id);

    let entries = journal(&data);
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for (document, run) in &entries {
        assert!([cut.id.to_string(), resumed.id.to_string()].contains(run), "only the two runs: {run}");
        *times.entry(document.as_str()).or_default() += 1;
    }
    for document in &list {
        assert_eq!(times.get(document.as_str()), Some(&1), "{document} processed exactly once: {entries:?}");
    }
    let by_first = entries.iter().filter(|(_, r)| *r == cut.id.to_string()).count();
    let by_resume = entries.iter().filter(|(_, r)| *r == resumed.id.to_string()).count();
    assert!(by_first >= 6 && by_resume >= 1 && by_first + by_resume == 20, "split {by_first} + {by_resume}");
    let stamps: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("stamps/transfer.json")).expect("stamps"))
            .expect("JSON");
    for document in &list {
        assert!(stamps["documents"].get(document).is_some(), "{document} is stamped");
    }
}

async fn a_restarted_archive_run_processes_them_all_again(t: &TestDb) {
    let setup = setup(t);
    let data = setup.dir.join("demo");
    let (_daemons, cut) = cut_half_way(t, &setup).await;
    let list = worklist(&data, &cut);
    let before = journal(&data).len();
    assert!(before >= 6, "the cut run journaled what it finished");
    let restarted =
        t.db.api.continue_run(&setup.settings.catalogue, cut.id, FollowKind::Restart, "ada").await.expect("restart");
    let restarted = wait_finished(&t.db.api, restarted.id, Duration::from_secs(60)).await;
    assert_eq!(restarted.state, RunState::Succeeded, "{}", setup.run_log(&restarted));
    let again: Vec<String> = journal(&data)
        .into_iter()
        .filter(|(_, run)| *run == restarted.id.to_string())
        .map(|(document, _)| document)
        .collect();
    assert_eq!(again, list, "the restart processed the whole worklist again, in order");
}
