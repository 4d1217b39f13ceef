//! Schedules fired by real daemons, on both backends: with three daemons, one SIGKILLed and one restarted, a
//! schedule that fires every second gets exactly one record per fire time and at most one run each, none lost
//! while a daemon was alive, and no double fire was ever stopped only by the unique index; fires that fell while
//! no daemon ran are recorded by the `missed` policy; the `overlap` policy against a long run in flight; a
//! schedule that cannot fire (an expression or an override this version cannot use) says why, once, and does
//! not hold up the others.

use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use scrinalia_shared::{
    FireOutcome, MissedPolicy, OverlapPolicy, Run, RunState, ScheduleFire, ScheduleInput, overrides::OverrideChange,
    runs::RunFilter,
};
use scrinalia_testkit::probes::whole_lines;
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, wait_run},
    eventually, start_daemon,
};
use serde_json::json;

backend_tests!(
    three_daemons_fire_each_second_once_through_a_kill_and_a_restart,
    fires_that_fell_while_no_daemon_ran_follow_the_missed_policy,
    overlap_skip_and_queue_against_a_long_run_in_flight,
    a_schedule_that_cannot_fire_says_why_and_the_others_fire_on,
);

/// A schedule of `worker` every second, created by the test.
fn every_second(name: &str, worker: &str) -> ScheduleInput {
    ScheduleInput {
        name: name.to_owned(),
        worker: Some(worker.to_owned()),
        cron: "* * * * * *".to_owned(),
        arguments: Some(json!({"options": {"duration_ms": 50}})),
        reason: Some("a test fires it every second".to_owned()),
        ..ScheduleInput::default()
    }
}

/// Every fire of `schedule`, oldest first.
async fn fires_of(t: &TestDb, schedule: &str) -> Vec<ScheduleFire> {
    let mut fires = t.db.api.schedule_fires(schedule, 1000).await.expect("fires");
    fires.reverse();
    fires
}

/// Every run of `worker`, oldest first.
async fn runs_of(t: &TestDb, worker: &str) -> Vec<Run> {
    let filter = RunFilter { worker: Some(worker.to_owned()), limit: 500, ..RunFilter::default() };
    let mut runs = t.db.api.list_runs(&filter).await.expect("runs").runs;
    runs.reverse();
    runs
}

/// The sum of `fires=N` over a daemon log's "schedule fired" lines: the fire times it fired while holding the
/// schedule's row.
fn fires_logged(log: &str) -> usize {
    whole_lines(log)
        .filter(|l| l.contains("schedule fired"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("fires=")))
        .filter_map(|n| n.parse::<usize>().ok())
        .sum()
}

async fn three_daemons_fire_each_second_once_through_a_kill_and_a_restart(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let mut daemons = Vec::new();
    for i in 0..3 {
        daemons.push(Some(start_daemon(&setup.dir, &format!("daemon-{i}"), &setup.config, &[]).await));
    }
    let input = every_second("each-second", "probe-1");
    let schedule = t.db.api.create_schedule(&setup.settings.catalogue, "test", &input).await;
    let schedule = schedule.expect("create the schedule").schedule;
    // Three windows of daemons firing: all three, then two after a SIGKILL, then two after a restart. What is
    // asserted is what was recorded in them on the database clock, so a slower machine only widens them.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut killed = daemons[0].take().expect("daemon-0");
    killed.signal(Signal::SIGKILL);
    // Its log is read once it is dead, so that no line is half written.
    killed.wait(Duration::from_secs(10)).await;
    let killed_log = killed.output();
    drop(killed);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let restarted = daemons[1].take().expect("daemon-1");
    restarted.stop(Duration::from_secs(10)).await;
    daemons[1] = Some(start_daemon(&setup.dir, "daemon-1-again", &setup.config, &[]).await);
    tokio::time::sleep(Duration::from_secs(15)).await;
    t.db.api.set_schedule_enabled("each-second", false, "test", Some("the window is over")).await.expect("pause");
    // A daemon logs a fire as it records it: once the logs account for every fire recorded, the last pass is over.
    let earlier = [killed_log, std::fs::read_to_string(setup.dir.join("daemon-1.log")).unwrap_or_default()];
    let recorded = fires_of(t, "each-second").await.len();
    eventually(Duration::from_secs(30), "the daemons' logs to account for every fire recorded", || async {
        let running = daemons.iter().flatten().map(|d| fires_logged(&d.output())).sum::<usize>();
        (earlier.iter().map(|l| fires_logged(l)).sum::<usize>() + running >= recorded).then_some(())
    })
    .await;
    let mut logs = earlier.to_vec();
    for daemon in daemons.into_iter().flatten() {
        let log = daemon.log.clone();
        daemon.stop(Duration::from_secs(10)).await;
        logs.push(std::fs::read_to_string(log).unwrap_or_default());
    }

    let fires = fires_of(t, "each-second").await;
    assert!(fires.len() >= 25, "a schedule every second fired {} times in about 30 s", fires.len());
    for pair in fires.windows(2) {
        let gap = pair[1].fire_at - pair[0].fire_at;
        assert_eq!(gap, chrono::Duration::seconds(1), "a fire time lost between {pair:#?}");
    }
    assert!(fires.iter().all(|f| f.outcome != FireOutcome::Missed), "daemons were alive throughout: {fires:#?}");
    for fire in fires.iter().filter(|f| f.outcome == FireOutcome::Skipped) {
        assert!(fire.blocked_by.is_some(), "a skip names the run that blocked it: {fire:?}");
    }
    let runs: Vec<Run> =
        runs_of(t, "probe-1").await.into_iter().filter(|r| r.schedule_id == Some(schedule.id)).collect();
    let requested: Vec<&ScheduleFire> = fires.iter().filter(|f| f.outcome == FireOutcome::Requested).collect();
    assert_eq!(runs.len(), requested.len(), "one run per requested fire");
    for fire in &requested {
        let of_fire: Vec<&Run> = runs.iter().filter(|r| r.fire_at == Some(fire.fire_at)).collect();
        assert_eq!(of_fire.len(), 1, "exactly one run for the fire at {}", fire.fire_at);
        assert_eq!(fire.run_id, Some(of_fire[0].id));
        assert_eq!(of_fire[0].requested_by, "schedule:each-second");
    }
    assert!(requested.len() >= fires.len() / 2, "most fires ran: {} of {}", requested.len(), fires.len());
    // Every fire time was fired by one daemon holding the schedule's row: the logs of all four daemon processes
    // add up to exactly the fires recorded, and none of them saw the unique index refuse a double fire.
    let logged: usize = logs.iter().map(|l| fires_logged(l)).sum();
    assert_eq!(logged, fires.len(), "fire times the daemons fired against fire times recorded");
    for log in &logs {
        assert!(!log.contains("refused by the database's unique index"), "a double fire reached the index:\n{log}");
    }
    let firers: std::collections::HashSet<_> = fires.iter().filter_map(|f| f.fired_by).collect();
    assert!(firers.len() >= 2, "the fires came from several daemons, with no leader: {firers:?}");
}

async fn fires_that_fell_while_no_daemon_ran_follow_the_missed_policy(t: &TestDb) {
    let setup = Setup::new(t, |d| d.missed_fire_after_seconds = 1);
    let catalogue = &setup.settings.catalogue;
    let skip = ScheduleInput { missed: Some(MissedPolicy::Skip), ..every_second("skip-missed", "probe-1") };
    let once = ScheduleInput { missed: Some(MissedPolicy::Once), ..every_second("once-missed", "probe-2") };
    t.db.api.create_schedule(catalogue, "test", &skip).await.expect("create");
    t.db.api.create_schedule(catalogue, "test", &once).await.expect("create");
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    eventually(Duration::from_secs(20), "both schedules fired", || async {
        let (a, b) = (fires_of(t, "skip-missed").await, fires_of(t, "once-missed").await);
        (a.len() >= 2 && b.len() >= 2).then_some(())
    })
    .await;
    daemon.stop(Duration::from_secs(10)).await;
    let stopped: DateTime<Utc> = t.db.api.now().await.expect("clock");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let restarted = t.db.api.now().await.expect("clock");
    let daemon = start_daemon(&setup.dir, "daemon-again", &setup.config, &[]).await;
    // A daemon fires in time order: once both have a fire after the restart, what fell before is recorded.
    eventually(Duration::from_secs(30), "both schedules to fire again after the restart", || async {
        let (skip, once) = (fires_of(t, "skip-missed").await, fires_of(t, "once-missed").await);
        let after = |fires: &[ScheduleFire]| fires.iter().any(|f| f.fire_at > restarted);
        let ran = once.iter().any(|f| f.fire_at > restarted && f.outcome == FireOutcome::Requested);
        (after(&skip) && ran).then_some(())
    })
    .await;
    for name in ["skip-missed", "once-missed"] {
        t.db.api.set_schedule_enabled(name, false, "test", Some("the window is over")).await.expect("pause");
    }
    daemon.stop(Duration::from_secs(10)).await;

    let down = |f: &&ScheduleFire| f.fire_at > stopped && f.fire_at < restarted;
    let skip = fires_of(t, "skip-missed").await;
    let skip_down: Vec<&ScheduleFire> = skip.iter().filter(down).collect();
    assert!(skip_down.len() >= 4, "about six fire times fell while no daemon ran: {skip:#?}");
    // The last second before the restart may still have been on time when the new daemon looked.
    let surely_late = |f: &&&ScheduleFire| f.fire_at < restarted - chrono::Duration::milliseconds(1500);
    for fire in skip_down.iter().filter(surely_late) {
        assert_eq!(fire.outcome, FireOutcome::Missed, "{fire:?}");
        assert!(fire.run_id.is_none() && fire.reason.as_deref().is_some_and(|r| r.contains("no daemon was running")));
    }
    let once = fires_of(t, "once-missed").await;
    let once_down: Vec<&ScheduleFire> = once.iter().filter(down).collect();
    let ran: Vec<&&ScheduleFire> = once_down.iter().filter(|f| f.outcome == FireOutcome::Requested).collect();
    assert_eq!(ran.len(), 1, "`once` runs one of the fires that fell while no daemon ran: {once_down:#?}");
    let missed = once_down.iter().filter(|f| f.outcome == FireOutcome::Missed).count();
    assert_eq!(missed, once_down.len() - 1, "the others are recorded missed");
    let run = t.db.api.get_run(ran[0].run_id.expect("the run")).await.expect("read").expect("the run");
    assert_eq!(run.fire_at, Some(ran[0].fire_at));
    // After the restart, fires on time run again.
    assert!(once.iter().any(|f| f.fire_at > restarted && f.outcome == FireOutcome::Requested));
}

async fn overlap_skip_and_queue_against_a_long_run_in_flight(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let catalogue = &setup.settings.catalogue;
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    let long_1 = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 4000})).await;
    let long_2 = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 4000})).await;
    for run in [&long_1, &long_2] {
        wait_run(&t.db.api, run.id, Duration::from_secs(20), "the long run starts", |r| r.started_at.is_some()).await;
    }
    let skip = ScheduleInput { overlap: Some(OverlapPolicy::Skip), ..every_second("overlap-skip", "probe-1") };
    let queue = ScheduleInput { overlap: Some(OverlapPolicy::Queue), ..every_second("overlap-queue", "probe-2") };
    t.db.api.create_schedule(catalogue, "test", &skip).await.expect("create");
    t.db.api.create_schedule(catalogue, "test", &queue).await.expect("create");
    let long_1 = wait_run(&t.db.api, long_1.id, Duration::from_secs(20), "it ends", |r| r.state.is_terminal()).await;
    let long_2 = wait_run(&t.db.api, long_2.id, Duration::from_secs(20), "it ends", |r| r.state.is_terminal()).await;
    let during = |run: &Run| {
        let end = run.finished_at.expect("ended") - chrono::Duration::milliseconds(200);
        move |f: &&ScheduleFire| f.fire_at < end
    };
    eventually(Duration::from_secs(30), "a fire after the long run, and the waiting fire run", || async {
        let (skip, queue) = (fires_of(t, "overlap-skip").await, fires_of(t, "overlap-queue").await);
        let requested = skip.iter().any(|f| f.outcome == FireOutcome::Requested);
        let waited = queue.iter().find(during(&long_2)).is_some_and(|f| f.outcome == FireOutcome::Requested);
        (requested && waited).then_some(())
    })
    .await;
    for name in ["overlap-skip", "overlap-queue"] {
        t.db.api.set_schedule_enabled(name, false, "test", Some("the window is over")).await.expect("pause");
    }
    daemon.stop(Duration::from_secs(10)).await;
    assert_eq!((long_1.state, long_2.state), (RunState::Succeeded, RunState::Succeeded));

    let skip = fires_of(t, "overlap-skip").await;
    let skipped: Vec<&ScheduleFire> = skip.iter().filter(during(&long_1)).collect();
    assert!(skipped.len() >= 2, "fires fell during the long run: {skip:#?}");
    for fire in &skipped {
        assert_eq!(fire.outcome, FireOutcome::Skipped, "{fire:?}");
        assert_eq!(fire.blocked_by, Some(long_1.id), "the skip names the run in flight");
        assert!(fire.reason.as_deref().is_some_and(|r| r.contains(&long_1.id.to_string())), "{fire:?}");
    }
    assert!(skip.iter().any(|f| f.outcome == FireOutcome::Requested), "fires after the run ran: {skip:#?}");

    let queue = fires_of(t, "overlap-queue").await;
    let during_queue: Vec<&ScheduleFire> = queue.iter().filter(during(&long_2)).collect();
    assert!(during_queue.len() >= 2, "{queue:#?}");
    // The first fire during the run waited for it and ran after it; the others were skipped, one waiting already.
    let first = during_queue[0];
    assert_eq!(first.outcome, FireOutcome::Requested, "the waiting fire ran when the target was free: {queue:#?}");
    assert_eq!(first.blocked_by, Some(long_2.id));
    let waited = t.db.api.get_run(first.run_id.expect("its run")).await.expect("read").expect("the run");
    assert!(waited.requested_at >= long_2.finished_at.expect("ended"), "it was requested after the run ended");
    assert_eq!(waited.fire_at, Some(first.fire_at));
    for fire in &during_queue[1..] {
        assert_eq!(fire.outcome, FireOutcome::Skipped, "at most one fire waits: {fire:?}");
        assert!(fire.reason.as_deref().is_some_and(|r| r.contains("waits already")), "{fire:?}");
    }
}

async fn a_schedule_that_cannot_fire_says_why_and_the_others_fire_on(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let catalogue = &setup.settings.catalogue;
    for (name, worker) in [("good", "probe-1"), ("unreadable", "probe-2"), ("stale-override", "probe-3")] {
        t.db.api.create_schedule(catalogue, "test", &every_second(name, worker)).await.expect("create");
    }
    let change = OverrideChange {
        options: [("duration_ms".to_owned(), json!(20))].into(),
        reason: Some("shorter runs".into()),
        ..OverrideChange::default()
    };
    t.db.api.change_override(catalogue, "probe-3", "ada", &change).await.expect("the override");
    // As another version or a hand edit would leave them: an expression this version cannot read, and an
    // override that no longer fits its worker.
    t.execute("update schedules set cron = '61 * * * * *' where name = 'unreadable'").await.expect("write");
    t.execute("update worker_overrides set options = '{\"no_such_option\": 1}' where worker = 'probe-3'")
        .await
        .expect("write");
    let daemon = start_daemon(&setup.dir, "daemon", &setup.config, &[]).await;
    eventually(Duration::from_secs(20), "the good schedule ran three times", || async {
        let fires = fires_of(t, "good").await;
        (fires.iter().filter(|f| f.outcome == FireOutcome::Requested).count() >= 3).then_some(())
    })
    .await;
    for name in ["good", "stale-override"] {
        t.db.api.set_schedule_enabled(name, false, "test", Some("the window is over")).await.expect("pause");
    }
    daemon.stop(Duration::from_secs(10)).await;

    let unreadable = fires_of(t, "unreadable").await;
    assert_eq!(unreadable.len(), 1, "an expression that does not parse is recorded once: {unreadable:#?}");
    assert_eq!(unreadable[0].outcome, FireOutcome::Skipped);
    let why = unreadable[0].reason.as_deref().unwrap_or_default();
    assert!(why.contains("'61 * * * * *'") || why.contains("\"61 * * * * *\""), "names the expression: {why}");
    assert!(why.contains("second") && why.contains("once it is edited"), "says which field, and what now: {why}");
    let view = t.db.api.schedule("unreadable").await.expect("the schedule");
    assert_eq!(view.schedule.next_fire_at, None, "it does not come due again");

    let stale = fires_of(t, "stale-override").await;
    assert!(stale.len() >= 2, "it kept its fire times: {stale:#?}");
    for fire in &stale {
        assert_eq!(fire.outcome, FireOutcome::Skipped, "{fire:?}");
        let why = fire.reason.as_deref().unwrap_or_default();
        assert!(why.starts_with("could not request it:") && why.contains("no_such_option"), "{why}");
    }
    assert!(runs_of(t, "probe-3").await.is_empty(), "nothing ran with a configuration that does not resolve");
    assert!(runs_of(t, "probe-2").await.is_empty());
}
