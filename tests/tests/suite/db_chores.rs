//! Workers' chores and what they store, through the database layer on PostgreSQL and SQLite: one daemon at a time
//! per chore across daemons, at most once per interval, again soon after a request or a run's end; descriptions
//! that keep the last good one when an attempt fails; readiness; the configuration a run reports, fenced.

use std::{collections::HashMap, time::Duration};

use scrinalia_shared::{
    ChoreKind, DbError, Declared, Description, EffectiveWorker, ExplicitArgs, OptionSpec, OptionType,
    descriptions::{ChoreIntervals, NewDescription, NewReadiness},
    resolve,
};
use scrinalia_tests::{TestDb, backend_tests, fixtures::*};
use serde_json::json;
use uuid::Uuid;

backend_tests!(
    each_chore_goes_to_one_daemon_at_a_time_and_comes_due_by_interval_or_request,
    a_run_that_ends_asks_for_a_count_of_its_worker,
    a_failed_describe_keeps_the_last_good_description_and_runs_use_the_code,
    readiness_and_reported_configuration_are_stored,
);

const SHORT: ChoreIntervals = ChoreIntervals {
    count: Duration::from_secs(2),
    check: Duration::from_secs(3600),
    min_gap: Duration::from_secs(1),
    settle: Duration::from_millis(300),
};
const LEASE: Duration = Duration::from_secs(30);

fn workers(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

async fn each_chore_goes_to_one_daemon_at_a_time_and_comes_due_by_interval_or_request(t: &TestDb) {
    let names = workers(&["alpha", "beta", "gamma"]);
    t.db.daemon.prepare_chores(&names).await.expect("prepare");
    t.db.daemon.prepare_chores(&names).await.expect("preparing twice is harmless");
    // Three daemons look at once: each due chore (never started: every count and check) goes to exactly one.
    let daemons: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let mut pools = Vec::new();
    for _ in &daemons {
        pools.push(t.another_pool().await);
    }
    let first_look = tokio::time::Instant::now();
    let looks = daemons.iter().zip(&pools).map(|(d, db)| db.daemon.claim_chores(*d, &names, &SHORT, LEASE, 10));
    let claimed: Vec<_> = futures::future::join_all(looks).await.into_iter().map(|r| r.expect("claim")).collect();
    let mut holders: HashMap<(String, ChoreKind), Uuid> = HashMap::new();
    for (daemon, chores) in daemons.iter().zip(&claimed) {
        for chore in chores {
            assert_eq!(chore.lease_by, Some(*daemon));
            let twice = holders.insert((chore.worker.clone(), chore.chore), *daemon);
            assert!(twice.is_none(), "{} {} went to two daemons", chore.worker, chore.chore);
        }
    }
    assert_eq!(holders.len(), 6, "every count and check (no describe was asked for): {holders:?}");
    assert!(
        t.db.daemon.claim_chores(daemons[0], &names, &SHORT, LEASE, 10).await.expect("claim").is_empty(),
        "all held"
    );

    // Finished, a count is not due again before its interval (an hour for this look, so that no machine is slow
    // enough to reach it), unless asked for (and then once).
    for ((worker, kind), daemon) in &holders {
        t.db.daemon.finish_chore(*daemon, worker, *kind).await.expect("finish");
    }
    let hourly = ChoreIntervals { count: Duration::from_secs(3600), ..SHORT };
    assert!(
        t.db.daemon.claim_chores(daemons[0], &names, &hourly, LEASE, 10).await.expect("claim").is_empty(),
        "not due"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let requested = tokio::time::Instant::now();
    for _ in 0..3 {
        t.db.api.request_chore(&names[..1], ChoreKind::Describe).await.expect("request");
    }
    // Counts every hour for this look: only what was asked for is due, once the request has settled. The
    // requests were made after `requested`: while less than the settle time has passed since then on this test's
    // clock, less has passed on the database's, and the describe cannot be due yet.
    let early = t.db.daemon.claim_chores(daemons[1], &names, &hourly, LEASE, 10).await.expect("claim");
    if requested.elapsed() < SHORT.settle {
        assert!(early.is_empty(), "a request settles before its chore starts: {early:?}");
    } else {
        eprintln!("this machine took {:?} to request and look: the settle check is left out", requested.elapsed());
    }
    let asked = if early.is_empty() {
        tokio::time::sleep(Duration::from_millis(400)).await;
        t.db.daemon.claim_chores(daemons[1], &names, &hourly, LEASE, 10).await.expect("claim")
    } else {
        early
    };
    let asked: Vec<_> = asked.iter().map(|c| (c.worker.as_str(), c.chore)).collect();
    assert_eq!(asked, [("alpha", ChoreKind::Describe)], "three requests, one describe");
    t.db.daemon.finish_chore(daemons[1], "alpha", ChoreKind::Describe).await.expect("finish");
    tokio::time::sleep_until(first_look + Duration::from_millis(2100)).await;
    let due = t.db.daemon.claim_chores(daemons[2], &names, &SHORT, LEASE, 10).await.expect("claim");
    let mut due: Vec<_> = due.iter().map(|c| (c.worker.as_str(), c.chore)).collect();
    due.sort_by_key(|(w, _)| *w);
    assert_eq!(
        due,
        [("alpha", ChoreKind::Count), ("beta", ChoreKind::Count), ("gamma", ChoreKind::Count)],
        "counts come due by interval (2 s); checks (an hour) and the answered describe do not"
    );
    // A finish by a daemon that no longer holds the lease changes nothing.
    t.db.daemon.finish_chore(daemons[0], "alpha", ChoreKind::Count).await.expect("finish");
    let chores = t.db.daemon.chores("alpha").await.expect("chores");
    let count = chores.iter().find(|c| c.chore == ChoreKind::Count).expect("count chore");
    assert_eq!(count.lease_by, Some(daemons[2]), "still held by the daemon that took it");
    // Another daemon's workers are not its to take.
    let other = t.db.daemon.claim_chores(daemons[0], &workers(&["delta"]), &SHORT, LEASE, 10).await.expect("claim");
    assert!(other.is_empty());
    for db in pools {
        db.close().await;
    }
}

async fn a_run_that_ends_asks_for_a_count_of_its_worker(t: &TestDb) {
    let names = workers(&["counted"]);
    t.db.daemon.prepare_chores(&names).await.expect("prepare");
    let daemon = Uuid::now_v7();
    let first = t.db.daemon.claim_chores(daemon, &names, &SHORT, LEASE, 10).await.expect("claim");
    for chore in &first {
        t.db.daemon.finish_chore(daemon, &chore.worker, chore.chore).await.expect("finish");
    }
    let before = t.db.daemon.chores("counted").await.expect("chores");
    let count = |chores: &[scrinalia_shared::Chore]| {
        chores.iter().find(|c| c.chore == ChoreKind::Count).expect("count chore").clone()
    };
    assert_eq!(count(&before).requested_at, None);
    insert(&t.db.api, "counted").await.expect("insert");
    let run = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim").pop().expect("a run");
    assert_eq!(count(&t.db.daemon.chores("counted").await.expect("chores")).requested_at, None, "claiming is no end");
    t.db.daemon.finish_run(run.id, daemon, &succeeded()).await.expect("finish");
    let after = count(&t.db.daemon.chores("counted").await.expect("chores"));
    let requested = after.requested_at.expect("the end of the run asked for a count");
    assert!(requested >= after.started_at.expect("started"), "asked for after the last count started");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let interval = ChoreIntervals { count: Duration::from_secs(3600), ..SHORT };
    let due = t.db.daemon.claim_chores(daemon, &names, &interval, LEASE, 10).await.expect("claim");
    assert_eq!(due.len(), 1, "the count is due at once although its interval is an hour: {due:?}");
    assert_eq!(due[0].chore, ChoreKind::Count);
}

fn declared(default: i64) -> Description {
    let option = OptionSpec {
        name: "batch_size".into(),
        kind: OptionType::Integer,
        default: Some(json!(default)),
        choices: None,
        minimum: Some(1.into()),
        maximum: None,
        description: None,
    };
    Description { declared: Some(Declared { options: vec![option], ..Default::default() }), ..Default::default() }
}

async fn a_failed_describe_keeps_the_last_good_description_and_runs_use_the_code(t: &TestDb) {
    let daemon = Uuid::now_v7();
    let catalogue = catalogue_of(&["described"]);
    let store = |outcome| NewDescription {
        worker: "described".into(),
        outcome,
        described_by: daemon,
        command: vec!["worker".into(), "--flag".into()],
        took_ms: 12,
    };
    assert!(t.db.api.description("described").await.expect("read").is_none());
    t.db.daemon.store_description(&store(Ok(declared(20)))).await.expect("store");
    let stored = t.db.api.description("described").await.expect("read").expect("stored");
    assert_eq!(stored.description, Some(declared(20)));
    assert_eq!((stored.described_by, stored.command.len(), stored.error), (Some(daemon), 2, None));
    t.db.daemon.store_description(&store(Err("describe failed (exit status: 1)".into()))).await.expect("store");
    let failed = t.db.api.description("described").await.expect("read").expect("stored");
    assert_eq!(failed.description, Some(declared(20)), "the last good description is kept");
    assert_eq!(failed.error.as_deref(), Some("describe failed (exit status: 1)"));
    assert!(failed.attempted_at >= stored.attempted_at && failed.described_at == stored.described_at);

    // The next request resolves with the code's default and refuses a value below its minimum.
    let run = t.db.api.request_run(&catalogue, request("described")).await.expect("request");
    assert_eq!(run.config.options["batch_size"].value, json!(20));
    let worker = t.db.daemon.effective_worker(&catalogue, "described").await.expect("read").expect("in the catalogue");
    let below = ExplicitArgs { options: [("batch_size".into(), json!(-5))].into(), ..Default::default() };
    let refused = resolve(&worker, &below, None).expect_err("below the minimum");
    assert_eq!(refused.to_string(), "Option \"batch_size\" must be at least 1, not -5.");
    assert_eq!(t.db.api.effective_workers(&catalogue).await.expect("all").len(), 1);
    let alone = EffectiveWorker::from_catalogue(&catalogue, catalogue.worker("described").expect("worker"));
    assert!(alone.spec.option("batch_size").is_none(), "the catalogue of this test declares no options");
}

async fn readiness_and_reported_configuration_are_stored(t: &TestDb) {
    let daemon = Uuid::now_v7();
    let not_ready = NewReadiness {
        worker: "checked".into(),
        ready: Some(false),
        reason: Some("There is no active LLM_CHECK cleaning rule.".into()),
        error: None,
        took_ms: 5,
        checked_by: daemon,
    };
    t.db.daemon.store_readiness(&not_ready).await.expect("store");
    t.db.daemon
        .store_readiness(&NewReadiness { worker: "other".into(), ready: Some(true), reason: None, ..not_ready.clone() })
        .await
        .expect("store");
    let readiness = t.db.api.readiness().await.expect("read");
    assert_eq!(readiness.len(), 2);
    let checked = readiness.iter().find(|r| r.worker == "checked").expect("checked");
    assert_eq!(checked.problem().as_deref(), Some("There is no active LLM_CHECK cleaning rule."));
    assert_eq!(readiness.iter().find(|r| r.worker == "other").and_then(|r| r.problem()), None);

    insert(&t.db.api, "reporter").await.expect("insert");
    let run = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim").pop().expect("a run");
    let reported = json!({"engine": "ollama", "model": "qwen2.5:14b", "source": {"reference": "LLM_CHECK rule 3"}});
    t.db.daemon.report_config(run.id, daemon, &reported).await.expect("the owner reports");
    let refused = t.db.daemon.report_config(run.id, Uuid::now_v7(), &json!({})).await;
    assert!(matches!(refused, Err(DbError::LeaseLost { .. })), "fenced: {refused:?}");
    let read = t.db.api.get_run(run.id).await.expect("read").expect("the run");
    assert_eq!(read.reported_config, Some(reported));
}
