//! The chaos suite (issue 7): three API processes, three daemons and PostgreSQL. For `SCRINALIA_CHAOS_SECONDS`
//! (default 120), triggers and cancels go through random API processes over every demo worker and many probes
//! (short, long, failing, crashing, ignoring SIGTERM, most checkpointing; some sharing a resource of one or two
//! slots; two resumed by their retry policy), with resumes and restarts of interrupted and failed runs and a
//! panel's reads beside them, while daemons are SIGKILLed, SIGSTOPped past their lease and resumed, SIGTERMed
//! and drained (each replaced), and the database connections are cut twice while requests are in flight through
//! every API process. Then, from the ledger, the probes' own execution records, a watcher of the worker processes
//! and of `run_resources`, and every answer the APIs gave: never two executions of one worker at once, no request
//! executed twice, every run terminal, every interruption with its reason and within the lease plus a slack of
//! its owner's death, every 201 with its row, no 5xx, a resource never over its capacity and never held once the
//! runs ended, a resumed run started from its predecessor's last checkpoint, no run storing more items than its
//! worker printed nor losing one printed before its last stored checkpoint, a resume chain counting its failures
//! once by id. The schedule is drawn from a seeded
//! generator (`SCRINALIA_CHAOS_SEED`; printed), so a run can be replayed up to timing.
//!
//! `scripts/chaos` runs it: `cargo test -p scrinalia-tests --test suite chaos:: -- --ignored --nocapture`. The times of
//! the probes' records, of the faults and of the ledger are compared directly, so the database server must share
//! this host's clock (the local server of CI does).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng, seq::IndexedRandom};
use reqwest::Method;
use scrinalia_tests::{
    TestDb,
    api_harness::{OPERATOR, VIEWER},
    chaos::{
        self, APIS, Apis, Created, Evidence, FaultKind, Fleet, LEASE, READS, Watcher, check, cut_under_load, ledger,
        panics, request_body,
        resumes::{self, RESUMED},
        scheduling::{self as schedules, Scheduled},
        tail,
    },
    daemon_harness::realtime_ns,
};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the chaos suite runs for minutes: scripts/chaos"]
async fn chaos_keeps_every_invariant() {
    let seconds: u64 = std::env::var("SCRINALIA_CHAOS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    let seed: u64 =
        std::env::var("SCRINALIA_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("chaos: seed {seed} (SCRINALIA_CHAOS_SEED={seed} replays the schedule), {seconds} s of faults");
    let db = TestDb::postgres().await;
    let setup = chaos::setup(&db);
    let workers: Vec<String> = setup.settings.catalogue.workers.iter().map(|w| w.name.clone()).collect();
    let apis = Arc::new(Apis::start(&setup).await);
    let mut fleet = Fleet::start(&setup);
    let watcher = Watcher::start(db.db.clone());
    let mut cuts: Vec<(i128, i64)> = Vec::new();

    // A request for shards is refused until a daemon described the worker: the traffic waits for that.
    chaos::shards::wait_described(&db.db.api).await;
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    // Requests go on throughout, concurrently with the faults: triggers and cancels, and a panel's reads.
    let traffic = tokio::spawn(traffic(apis.clone(), workers, seed, end));
    // Schedules fire throughout, and the pipeline is started and cancelled beside the runs.
    let catalogue = setup.settings.catalogue.clone();
    schedules::create_schedules(&db.db.api, &catalogue).await;
    let pipelines = tokio::spawn(schedules::pipeline_traffic(db.db.api.clone(), catalogue, seed, end));
    let reads = tokio::spawn(reads(apis.clone(), seed, end));
    // Faults to daemons every 1.5–4 s while two are up; the connections cut twice, with requests in flight.
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cut_at =
        vec![started + Duration::from_secs(seconds) * 3 / 10, started + Duration::from_secs(seconds) * 7 / 10];
    let mut next_fault = started + Duration::from_secs(2);
    while Instant::now() < end {
        fleet.tick(&setup);
        let api = rng.random_range(0..APIS);
        fleet.identify(&apis, api).await;
        let now = Instant::now();
        if cut_at.first().is_some_and(|t| *t <= now) {
            cut_at.remove(0);
            let at = realtime_ns();
            let n = cut_under_load(&apis, &db.url).await;
            eprintln!("chaos: {:>5.1} s  cut {n} database connections", started.elapsed().as_secs_f64());
            cuts.push((at, n));
        }
        if now >= next_fault && fleet.eligible().len() >= 2 {
            next_fault = now + Duration::from_millis(rng.random_range(1_500..=4_000));
            let i = fleet.pick(&apis, api, &mut rng).await.expect("two eligible daemons");
            let kind =
                [(FaultKind::Kill, 35), (FaultKind::Stop, 25), (FaultKind::Terminate, 20), (FaultKind::Drain, 20)]
                    .choose_weighted(&mut rng, |(_, w)| *w)
                    .map(|(k, _)| *k)
                    .expect("weights");
            let id = fleet.slots[i].id;
            match kind {
                FaultKind::Kill => fleet.kill(i, Duration::from_millis(rng.random_range(500..=3_000))).await,
                FaultKind::Stop => fleet.stop(i, LEASE + Duration::from_secs(2)),
                FaultKind::Terminate => fleet.terminate(i),
                FaultKind::Drain => {
                    let _ = fleet.drain(i, &apis, api).await;
                }
            }
            eprintln!("chaos: {:>5.1} s  {kind:?} daemon {id:?}", started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..=300))).await;
    }
    let created = traffic.await.expect("the traffic");
    reads.await.expect("the reads");
    pipelines.await.expect("the pipeline traffic");
    schedules::pause_schedules(&db.db.api).await;

    eprintln!("chaos: {:>5.1} s  faults stop; settling", started.elapsed().as_secs_f64());
    fleet.settle(&setup, &apis, Duration::from_secs(60)).await;
    let mut leftovers = wait_until_idle(&db, Duration::from_secs(60)).await;
    if !leftovers.is_empty() {
        for run in &leftovers {
            apis.call(0, Method::POST, &format!("/api/runs/{run}/cancel"), OPERATOR, None).await;
        }
        leftovers = wait_until_idle(&db, Duration::from_secs(30)).await;
    }
    let stuck = schedules::wait_pipelines_idle(&db.db.api, Duration::from_secs(30)).await;
    // How long the settling took is part of the suite's budget (runs queued behind a resource's slots, resumes
    // of long runs): printed so that a slower settling shows.
    eprintln!("chaos: {:>5.1} s  every run and pipeline run ended", started.elapsed().as_secs_f64());
    let watched = watcher.finish().await;
    fleet.shutdown().await;
    let mut problems = std::mem::take(&mut fleet.problems);
    problems.extend(leftovers.iter().map(|r| format!("run {r} was still in flight 90 s after the faults stopped")));
    problems.extend(stuck.iter().map(|p| format!("pipeline run {p} was still running after the runs settled")));
    let mut apis = Arc::into_inner(apis).expect("the tasks have ended");
    for process in &apis.processes {
        process.signal(nix::sys::signal::Signal::SIGTERM);
    }
    for process in &mut apis.processes {
        let code = process.wait(Duration::from_secs(15)).await;
        if code != Some(0) {
            problems.push(format!("{} exited with {code:?} on SIGTERM:\n{}", process.name, tail(&process.output())));
        }
    }
    problems.extend(panics(&setup.dir).iter().map(|p| format!("{} mentions a panic", p.display())));

    let runs = ledger(&db.db.api).await;
    let items = chaos::items::stored(&db.db.api, &runs).await;
    let verdict = check(Evidence {
        setup: &setup,
        runs,
        items,
        created,
        answers: apis.answers(),
        faults: fleet.faults.clone(),
        cuts,
        watched,
        daemons_started: fleet.started,
        scheduled: Scheduled::read(&db.db.api).await,
    });
    eprintln!("\nchaos figures (seed {seed}, {seconds} s, lease {} s):\n{}\n", LEASE.as_secs(), verdict.figures);
    problems.extend(verdict.violations);
    if !problems.is_empty() {
        let kept = std::env::temp_dir().join(format!("scrinalia-chaos-{seed}"));
        let _ = std::process::Command::new("cp").arg("-a").arg(&setup.dir).arg(&kept).status();
        panic!(
            "{} violations (seed {seed}; logs, probe records and configuration copied to {}; database {} kept):\n- {}",
            problems.len(),
            kept.display(),
            db.url,
            problems.join("\n- ")
        );
    }
    drop((fleet, apis));
    db.cleanup().await;
}

/// Triggers (seven in ten; one in six of them of a resumed probe, so that the policy has interruptions to
/// resume), cancels of one of the 20 latest runs (two in ten) and resumes or restarts of an ended run (one in
/// ten), through random API processes, every 200–500 ms until `end`; returns the 201s.
async fn traffic(apis: Arc<Apis>, workers: Vec<String>, seed: u64, end: Instant) -> Vec<Created> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1));
    let mut created: Vec<Created> = Vec::new();
    let (mut steers, mut tried) = (HashMap::new(), HashSet::new());
    let mut n = 0u64;
    while Instant::now() < end {
        n += 1;
        let api = rng.random_range(0..APIS);
        let action = rng.random_range(0..10);
        if !created.is_empty() && action == 9 {
            if let Some(new) = resumes::continue_one(&apis, api, &mut rng, &steers, &mut tried).await {
                steers.insert(new.id, new.steer);
                created.push(new);
            }
        } else if created.is_empty() || action < 7 {
            let worker = if rng.random_bool(1.0 / 6.0) {
                (*RESUMED.choose(&mut rng).expect("resumed probes")).to_owned()
            } else {
                workers.choose(&mut rng).expect("workers").clone()
            };
            let (steer, body) = request_body(&worker, &mut rng, &format!("chaos seed {seed} request {n}"));
            let path = format!("/api/workers/{worker}/runs");
            let (status, run) = apis.call(api, Method::POST, &path, OPERATOR, Some(&body)).await;
            if status == Some(201)
                && let Some(id) = run["id"].as_str().and_then(|s| Uuid::parse_str(s).ok())
            {
                steers.insert(id, steer);
                created.push(Created { id, worker, steer });
            }
        } else {
            let recent = &created[created.len().saturating_sub(20)..];
            let run = recent.choose(&mut rng).expect("a recent run").id;
            apis.call(api, Method::POST, &format!("/api/runs/{run}/cancel"), OPERATOR, None).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..=500))).await;
    }
    created
}

/// A panel's reads through random API processes, every 100–400 ms until `end`.
async fn reads(apis: Arc<Apis>, seed: u64, end: Instant) {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(2));
    while Instant::now() < end {
        let path = READS.choose(&mut rng).expect("reads");
        apis.call(rng.random_range(0..APIS), Method::GET, path, VIEWER, None).await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..=400))).await;
    }
}

/// Waits until no run is queued or running, at most `timeout`; returns those still in flight.
async fn wait_until_idle(db: &TestDb, timeout: Duration) -> Vec<Uuid> {
    let deadline = Instant::now() + timeout;
    loop {
        // A failed read (a connection that was cut) is read again.
        if let Ok(runs) = db.db.api.runs_in_flight().await {
            let in_flight: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
            if in_flight.is_empty() || Instant::now() > deadline {
                return in_flight;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
