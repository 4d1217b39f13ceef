//! Checkpoints through real daemons and probes, on both backends: a run whose daemon is SIGKILLed is resumed by
//! another daemon and its worker starts from the last checkpoint the first one stored; a restart starts from
//! nothing, told which run it starts over; the retry policy's `resume` continues an interrupted run on its own;
//! a checkpoint over 64 KiB is refused with a sentence in the run's log and the last one accepted stays.

use std::time::Duration;

use nix::sys::signal::Signal;
use scrinalia_shared::{FollowKind, RetryOn, RetryPolicy, Run, RunState};
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, wait_finished, wait_run, wait_started},
    eventually,
};
use serde_json::json;

backend_tests!(
    a_run_cut_by_a_dead_daemon_resumes_from_its_last_checkpoint_elsewhere,
    the_retry_policy_resumes_an_interrupted_run_on_its_own,
    a_checkpoint_over_64_kib_is_refused_and_the_last_one_stays,
);

/// The run's daemon, SIGKILLed: its supervisor stops the worker, and the other daemon interrupts the run when
/// its lease ends.
async fn kill_owner(t: &TestDb, daemons: &mut [scrinalia_tests::Process], run: &Run) -> Run {
    let owner = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let owner = owner.iter().find(|d| Some(d.id) == run.daemon_id).expect("the owner is registered");
    let victim = daemons.iter_mut().find(|d| d.pid().as_raw() == owner.pid).expect("the owner is one of ours");
    victim.signal(Signal::SIGKILL);
    wait_run(&t.db.api, run.id, Duration::from_secs(20), "recovery", |r| r.state == RunState::Interrupted).await
}

/// Waits until `run` has stored a checkpoint of at least `step`.
async fn checkpointed(t: &TestDb, run: &Run, step: i64) -> Run {
    wait_run(&t.db.api, run.id, Duration::from_secs(20), "a checkpoint", |r| {
        r.checkpoint.as_ref().and_then(|c| c["step"].as_i64()).is_some_and(|s| s >= step)
    })
    .await
}

async fn a_run_cut_by_a_dead_daemon_resumes_from_its_last_checkpoint_elsewhere(t: &TestDb) {
    let setup = Setup::new(t, |d| d.capacity = 1);
    let catalogue = &setup.settings.catalogue;
    let mut daemons = vec![setup.start_daemon("daemon-a", &[]), setup.start_daemon("daemon-b", &[])];
    let first = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 20_000, "checkpoints": 20})).await;
    let first = wait_started(&t.db.api, first.id, Duration::from_secs(10)).await;
    checkpointed(t, &first, 2).await;
    let cut = kill_owner(t, &mut daemons, &first).await;
    let last = cut.checkpoint.clone().expect("the cut run keeps its last checkpoint");
    assert!(last["step"].as_i64().is_some_and(|s| (2..20).contains(&s)), "cut half-way: {last}");

    let resumed = t.db.api.continue_run(catalogue, first.id, FollowKind::Resume, "ada").await.expect("resume");
    let resumed = wait_finished(&t.db.api, resumed.id, Duration::from_secs(40)).await;
    assert_eq!(resumed.state, RunState::Succeeded, "{resumed:?}");
    assert_ne!(resumed.daemon_id, first.daemon_id, "it ran on the daemon that is left");
    let (start, _) = setup.probe_run(resumed.id);
    let start = start.expect("the resumed probe started");
    assert_eq!(start.checkpoint, Some(last.clone()), "its worker got the last checkpoint the cut run stored");
    assert_eq!(start.restart_of, None);

    // A restart of the same run is refused (it was resumed); a restart of the resume's own run starts from
    // nothing and is told what it starts over.
    let twice = t.db.api.continue_run(catalogue, first.id, FollowKind::Restart, "ada").await;
    assert!(twice.is_err(), "a run is continued once: {twice:?}");
    let second = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 20_000, "checkpoints": 20})).await;
    let second = wait_started(&t.db.api, second.id, Duration::from_secs(10)).await;
    checkpointed(t, &second, 1).await;
    // The daemon left owns it: another one starts, and the owner is killed in its turn.
    daemons.push(setup.start_daemon("daemon-c", &[]));
    kill_owner(t, &mut daemons, &second).await;
    let restarted = t.db.api.continue_run(catalogue, second.id, FollowKind::Restart, "ada").await.expect("restart");
    assert_eq!(restarted.checkpoint, None, "a restart starts from nothing");
    let restarted = wait_finished(&t.db.api, restarted.id, Duration::from_secs(40)).await;
    assert_eq!(restarted.state, RunState::Succeeded);
    let start = setup.probe_run(restarted.id).0.expect("the restarted probe started");
    assert_eq!(start.checkpoint, None);
    assert_eq!(start.restart_of.as_deref(), Some(second.id.to_string().as_str()));
    let chain: Vec<_> = t.db.api.run_chain(restarted.id).await.expect("chain").iter().map(|r| r.id).collect();
    assert_eq!(chain, vec![second.id, restarted.id]);
}

async fn the_retry_policy_resumes_an_interrupted_run_on_its_own(t: &TestDb) {
    let config = Setup::config(t, |d| d.capacity = 1).with(|f| {
        let probe = f.workers.iter_mut().find(|w| w.name == "probe-1").expect("probe-1");
        probe.retry = Some(RetryPolicy {
            max_attempts: 2,
            initial_delay_seconds: 0.0,
            factor: 1.0,
            max_delay_seconds: 0.0,
            jitter: 0.0,
            on: vec![RetryOn::Interrupted],
            resume: true,
        });
    });
    let setup = Setup::with(t, config);
    let mut daemons = vec![setup.start_daemon("daemon-a", &[]), setup.start_daemon("daemon-b", &[])];
    let first = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 20_000, "checkpoints": 20})).await;
    let first = wait_started(&t.db.api, first.id, Duration::from_secs(10)).await;
    checkpointed(t, &first, 2).await;
    let cut = kill_owner(t, &mut daemons, &first).await;
    let retry = eventually(Duration::from_secs(20), "the resume the policy asked for", || async {
        t.db.api.run_chain(first.id).await.expect("chain").into_iter().find(|r| r.id != first.id)
    })
    .await;
    assert_eq!((retry.retry_of, retry.attempt), (Some(first.id), 2));
    assert_eq!((retry.follows, retry.follows_as), (Some(first.id), Some(FollowKind::Resume)));
    assert_eq!(retry.checkpoint, cut.checkpoint, "the retry carries the cut run's last checkpoint");
    let done = wait_finished(&t.db.api, retry.id, Duration::from_secs(40)).await;
    assert_eq!(done.state, RunState::Succeeded);
    let start = setup.probe_run(done.id).0.expect("the resumed probe started");
    assert_eq!(start.checkpoint, cut.checkpoint, "its worker started from that checkpoint");
}

async fn a_checkpoint_over_64_kib_is_refused_and_the_last_one_stays(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let daemon = setup.start_daemon("daemon", &[]);
    let run = setup
        .request(&t.db.api, "probe-1", json!({"duration_ms": 600, "checkpoints": 2, "oversized_checkpoint": true}))
        .await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(20)).await;
    assert_eq!(run.state, RunState::Succeeded, "a refused checkpoint does not fail the run: {run:?}");
    assert_eq!(run.checkpoint, Some(json!({"step": 2})), "the last checkpoint accepted stays");
    let log = setup.run_log(&run);
    assert!(
        log.contains("a checkpoint of 65537 bytes was refused: a checkpoint may take at most 65536 bytes"),
        "{log}"
    );
    daemon.stop(Duration::from_secs(10)).await;
}
